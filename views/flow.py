"""Information flow: beyond the attention weights (issue 14). Value-weighted attention, the graph of routes to a
prediction, each head's share, the logit lens and each head's direct effect, for the sidebar's text, with the heads
switched off on the Head pruning page and a chosen mask.

Glue only: the numbers come from ``models.flow``, the figures from ``viz.flow``, ``viz.heatmap`` and ``viz.pruning``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

import models
from models import flow as mflow
from views import explore_levels as lv
from views import shared
from viz import flow as vf
from viz import heatmap as vh
from viz import morphemes as vm
from viz import numbers as nb
from viz import pruning as vp
from viz import text as vtext

t = shared.t
# figures built once for every session that shows the same thing (views/shared/figures.py)
head_heatmap, head_grid = shared.shared_figure(vh.head_heatmap), shared.shared_figure(vp.head_grid)
share_figure, route_figure, lens_figure = (shared.shared_figure(f) for f in (vf.share_figure, vf.route_figure,
                                                                             vf.lens_figure))
L = shared.lang()
MAX_TOKENS = 256  # the page draws n-wide graphs and two n x n maps
URL = shared.UrlState("flow")
THRESHOLDS = URL.options("flow_threshold")


def _flow(name: str, text: str, heads_off: frozenset, mask: str, stack: str) -> mflow.Flow:
    return shared.get_flow(name, text, heads_off=heads_off, mask=mask, max_tokens=MAX_TOKENS, stack=stack)


@shared.cached
def _shares(name: str, text: str, heads_off: frozenset, mask: str, stack: str):
    analysis = shared.get_analysis(name, text, heads_off=heads_off, mask=mask, max_tokens=MAX_TOKENS)
    return mflow.special_share(analysis, _flow(name, text, heads_off, mask, stack))


@shared.cached
def _lens(name: str, text: str, heads_off: frozenset, mask: str, stack: str, position: int) -> mflow.LogitLens:
    return _flow(name, text, heads_off, mask, stack).logit_lens(position, k=5)


@shared.cached
def _direct(name: str, text: str, heads_off: frozenset, mask: str, stack: str, position: int) -> mflow.DirectEffect:
    return _flow(name, text, heads_off, mask, stack).direct_effect(position)


def _or_stop(fn, *args, **kwargs):
    """``fn(*args, **kwargs)``, or the engine's message and the end of the page."""
    try:
        return fn(*args, **kwargs)
    except models.DikkatError as exc:
        shared.show_error(exc)
        URL.finish()
        shared.stop()


def _pct(value: float) -> str:
    return nb.percent(float(value), 1, L)


sel, loaded = shared.page_start("flow_title", "flow_intro", text=True)
if not sel.text.strip():
    st.info(t("teach_need_text"))
    shared.stop()
if loaded.capture_path != "interface":
    st.info(t("flow_interface_only", model=shared.model_name(loaded)))
    shared.stop()

# ---- what to measure ------------------------------------------------------------------------------------------
mask, off = shared.mask_and_heads_off(URL, "flow", shared.heads_off(sel.model), st.columns(2))
analysis = shared.analysis_ui(sel.model, sel.text, heads_off=off, mask=mask, max_tokens=MAX_TOKENS)
if analysis is None:
    URL.finish()
    shared.stop()
stacks = [s for s in loaded.stacks if s != "cross"]
stack = shared.self_stack(URL, "flow_stack", stacks)
tokens = analysis.axis_tokens(stack)[0]
labels = [tok.label for tok in tokens]
n = len(tokens)
masks_at = [i for i, tok in enumerate(tokens) if tok.id == getattr(loaded.tokenizer, "mask_token_id", None)]
default_position = masks_at[0] if masks_at and stack == "encoder" else n - 1
URL.bind("flow_position", default_position, bounds=(0, n - 1))
shared.clamp("flow_position", n, default_position)
position = st.selectbox(t("flow_position"), list(range(n)), key="flow_position",
                        format_func=lambda i: f"{i} · {labels[i]}", help=t("flow_position_help"))
with st.spinner(t("flow_measuring")):
    flow = _or_stop(_flow, sel.model, sel.text, off, mask, stack)
n_layers, n_heads = loaded.stacks[stack]

# ---- 1. value-weighted attention --------------------------------------------------------------------------------
st.header(t("flow_s1"))
st.markdown(t("flow_s1_text"))
layer, head = shared.layer_head("flow_layer", "flow_head", n_layers, n_heads, url=URL, slider=True)
URL.bind("flow_level")
level, q_axis, k_axis = lv.page_axes(analysis, stack, lv.control("flow_level", t("flow_level_help")))
weights = _or_stop(flow.weights, layer)[head]  # from the flow's kept query and key: no forward pass
weighted = flow.value_weighted(weights, layer, head)
# words / morphemes: rows the mean of a unit's query pieces, columns the sum of its key pieces (contributions added up)
maps = [weights, weighted] if q_axis is None else [vm.merge_units(m, q_axis, k_axis) for m in (weights, weighted)]
q_labels, k_labels = (labels, labels) if q_axis is None or k_axis is None else (q_axis.labels, k_axis.labels)
at_level = "" if level == "tokens" else " · " + lv.level_names()[level]
h1, h2 = st.columns(2)
for col, matrix, title, unit in ((h1, maps[0], t("flow_raw_title", layer=layer, head=head), t("weight")),
                                 (h2, maps[1], t("flow_vw_title", layer=layer, head=head), t("flow_vw_unit"))):
    with col:
        fig = head_heatmap(matrix, q_labels, k_labels, title=title + at_level, query_title=t("query"),
                              key_title=t("key"), weight_title=unit, plot_px=shared.fewer(260),
                              max_ticks=shared.fewer(14), lang=L)
        shared.plotly_chart(vm.heatmap_hover(fig, lv.axis_hover(q_axis), lv.axis_hover(k_axis)), key=f"flow_map_{unit}")
if level != "tokens":
    st.caption(t("flow_level_note", level=lv.level_names()[level]))
    lv.describe(q_axis, tokens)
if any(tok.special for tok in tokens):
    raw, vw = _or_stop(_shares, sel.model, sel.text, off, mask, stack)
    m1, m2 = st.columns(2)
    m1.metric(t("flow_special_raw"), _pct(raw.mean()), border=True)
    m2.metric(t("flow_special_vw"), _pct(vw.mean()), border=True,
              delta=shared.t_plain("flow_points", x=nb.num(100 * float(vw.mean() - raw.mean()), 1, L, sign=True)),
              delta_color="off")
    shared.plotly_chart(share_figure(raw, vw, names=(t("flow_raw"), t("flow_vw")), title=t("flow_special_title"),
                                        layer_title=t("layer"), share_title=t("flow_share_axis"), lang=L),
                        key="flow_special")
    st.caption(t("flow_special_note"))

# ---- 2. routes --------------------------------------------------------------------------------------------------
st.header(t("flow_s2"))
st.markdown(t("flow_s2_text"))
URL.bind("flow_threshold")
threshold = st.select_slider(t("flow_threshold"), THRESHOLDS, key="flow_threshold",
                             format_func=lambda v: nb.num(v, 2, L))
route = _or_stop(flow.route, int(position), threshold)
shared.plotly_chart(route_figure(
    route.nodes, route.edges, labels, n_layers,
    title=shared.t_plain("flow_route_title", token=vtext.plotly_text(labels[position]), n=len(route.nodes)),
    kind_names={k: t(f"flow_kind_{k}") for k in vf.KIND_COLOURS}, layer_title=t("layer"),
    position_title=t("flow_token"), share_title=t("flow_share"), lang=L), key="flow_route")
off_grid = np.zeros((n_layers, n_heads), dtype=bool)
for s, lay, h in off:
    if s == stack:
        off_grid[lay, h] = True
heads_at = np.stack([lf.heads[position] for lf in flow.layers])
shared.plotly_chart(head_grid(heads_at, off_grid,
                                 title=shared.t_plain("flow_heads_title", token=vtext.plotly_text(labels[position])),
                                 score_title=t("flow_share"), layer_title=t("layer"), head_title=t("head"),
                                 off_title=t("flow_off"), lang=L), key="flow_heads")
residual = [float(lf.heads_residual[position]) for lf in flow.layers]
st.caption(t("flow_residual_note", low=_pct(min(residual)), high=_pct(max(residual))))

# ---- 3. logit lens and direct effects -----------------------------------------------------------------------------
st.header(t("flow_s3"))
if flow.head_refused is not None:
    st.info(t("flow_no_lens", why=t(f"flow_why_{flow.head_refused}")))
    URL.finish()
    shared.stop()
st.markdown(t("flow_s3_text"))
lens = _or_stop(_lens, sel.model, sel.text, off, mask, stack, int(position))
streams = [t("flow_embeddings")] + [t("flow_after_layer", layer=i) for i in range(n_layers)]
shared.plotly_chart(lens_figure(lens.labels, lens.probs, streams,
                                   title=shared.t_plain("flow_lens_title", token=vtext.plotly_text(labels[position])),
                                   rank_title=t("flow_rank"), stream_title=t("flow_stream"),
                                   prob_title=t("flow_prob"), lang=L), key="flow_lens")
first = int(np.argmax(lens.final_rank == 0)) if (lens.final_rank == 0).any() else n_layers
st.caption(t("flow_lens_note", token=vtext.shown(lens.labels[-1][0]), stream=streams[first]))
effect = _or_stop(_direct, sel.model, sel.text, off, mask, stack, int(position))
shared.plotly_chart(head_grid(effect.on_final, off_grid,
                                 title=shared.t_plain("flow_effect_title",
                                                      token=vtext.plotly_text(vtext.shown(lens.labels[-1][0]))),
                                 score_title=t("flow_logit_change"), layer_title=t("layer"), head_title=t("head"),
                                 off_title=t("flow_off"), diverging=True, lang=L), key="flow_effect")
d1, d2 = st.columns(2)
strongest = np.unravel_index(int(np.argmax(np.abs(effect.on_final))), effect.on_final.shape)  # the default
de_layer, de_head = shared.layer_head("flow_de_layer", "flow_de_head", n_layers, n_heads, url=URL,
                                      columns=(d1, d2), layer_default=int(strongest[0]),
                                      head_default=int(strongest[1]))
promoted, suppressed = effect.top(de_layer, de_head, k=8)
decode = loaded.tokenizer.decode
rows = [{t("flow_promoted"): vtext.shown(decode([p])),
         t("flow_promoted_by"): nb.num(effect.logits[de_layer, de_head, p], 3, L, sign=True),
         t("flow_suppressed"): vtext.shown(decode([s])),
         t("flow_suppressed_by"): nb.num(effect.logits[de_layer, de_head, s], 3, L, sign=True)}
        for p, s in zip(promoted, suppressed)]
shared.table(pd.DataFrame(rows), hide_index=True)
st.caption(t("flow_effect_note"))
URL.finish()
