"""Why a head attends (issue 30): one attention score of the sidebar's sentence taken apart, exactly: the neuron view
(the query and key vectors and their product), the score as a matrix of terms (a part of the query's stream × a part
of the key's), which earlier heads write what the key side reads, rotary position against content, and Q-, K-,
V-composition with the earlier heads. The analysis follows the mask chosen here and the heads switched off on the
Head pruning page.

Glue only: the numbers come from ``models.why``, the figures from ``viz.why`` and ``viz.pruning``.
"""

from __future__ import annotations

import numpy as np
import streamlit as st

import models
from models import why as mwhy
from views import shared
from viz import numbers as nb
from viz import pruning as vp
from viz import text as vtext
from viz import why as vw

t = shared.t
tp = shared.t_plain
L = shared.lang()
# every figure built once for every session with the same arguments (views/shared/figures.py; issue 48: a cached
# rerun of this page cost 134 ms, most of it plotly building the same figures again for each student)
neuron_figure, terms_figure, sides_figure, head_grid, rope_figure, rope_keys_figure, composition_figure = (
    shared.shared_figure(f) for f in (vw.neuron_figure, vw.terms_figure, vw.sides_figure, vp.head_grid, vw.rope_figure,
                                      vw.rope_keys_figure, vw.composition_figure))
MAX_TOKENS = 256  # as the Information flow page: the two pages share one analysis of a text
URL = shared.UrlState("why")
PARTS = URL.options("why_parts")  # parts per side drawn in the term matrix
BY = URL.options("why_by")
# the embedding parts models.why names, and their strings
EMBEDDINGS = {"token embedding": "why_part_token", "position embedding": "why_part_position",
              "token type embedding": "why_part_type", "other input terms": "why_part_other_input",
              "embeddings": "why_part_embeddings"}
# the parameter of each refusal that names its reason, and the prefix of the reason's string in this page's json
REASON_PARAM = {"why_refused": ("why", "why_reason_"), "why_identity": ("what", "why_what_")}


# ---- the engine, cached per (model, text, heads off, mask, stack, layer[, head, i, j]) ------------------------------
@shared.cached
def _layer(name: str, text: str, heads_off: frozenset, mask: str, stack: str, layer: int) -> mwhy.LayerWhy:
    """The layer explained, kept in the shared cache (its bytes counted against the budget; one pass per layer)."""
    analysis = shared.get_analysis(name, text, heads_off=heads_off, mask=mask, max_tokens=MAX_TOKENS)
    return mwhy.explain(shared.get_model(name), analysis, stack=stack, layer=layer, keep=False)


@shared.cached
def _neuron(name, text, heads_off, mask, stack, layer, head, i, j) -> mwhy.NeuronView:
    return _layer(name, text, heads_off, mask, stack, layer).neuron_view(head, i, j)


@shared.cached
def _row(name, text, heads_off, mask, stack, layer, head, i) -> mwhy.RowTerms:
    return _layer(name, text, heads_off, mask, stack, layer).row_terms(head, i)


@shared.cached
def _rope(name, text, heads_off, mask, stack, layer, head, i, j, top) -> mwhy.RopeSplit:
    return _layer(name, text, heads_off, mask, stack, layer).rope_split(head, i, j, top)


@shared.cached
def _composition(name: str, stack: str, layer: int) -> mwhy.Composition:
    return mwhy.composition(shared.get_model(name), stack=stack, layer=layer)


def _show(exc: models.DikkatError) -> None:
    """``shared.show_error``, a refusal's reason (``why_refused``, ``why_identity``) in the interface language."""
    code = getattr(exc, "code", None)
    if code in REASON_PARAM:
        param, prefix = REASON_PARAM[code]
        value = exc.params.get(param)
        if isinstance(value, str) and prefix + value in shared._strings():
            exc = type(exc)(str(exc), code=code, **{**exc.params, param: tp(prefix + value)})
    shared.show_error(exc)


def _or_stop(fn, *args, **kwargs):
    """``fn(*args, **kwargs)``, or the engine's message and the end of the page."""
    try:
        return fn(*args, **kwargs)
    except models.DikkatError as exc:
        _show(exc)
        URL.finish()
        shared.stop()


# ---- parts of the stream in words (both languages: built from the part's kind, layer and head) ---------------------
def _name(c: mwhy.Component) -> str:
    """A part's short name as plain text (figures): "head 1.4", "MLP 3", "token embedding" ..."""
    if c.kind == "head":
        return tp("why_part_head_off" if c.off else "why_part_head", layer=c.layer, head=c.head)
    if c.kind == "mlp":
        return tp("why_part_cross_mlp" if c.name.startswith("cross") else "why_part_mlp", layer=c.layer)
    if c.kind == "bias":
        return tp("why_part_biases")
    if c.kind == "own_bias":
        return tp("why_part_query_bias" if c.name.startswith("query") else "why_part_key_bias")
    return tp(EMBEDDINGS[c.name]) if c.name in EMBEDDINGS else c.name


def _at(c: mwhy.Component, position: int) -> str:
    """A part at a position, in words, for markdown (the token shown as text)."""
    token = vtext.shown(labels[position])
    if c.kind == "embedding":
        return t("why_at_embedding", part=_name(c), pos=position, token=token)
    if c.kind in ("head", "mlp"):
        return t("why_at_output", part=_name(c), pos=position, token=token)
    if c.kind == "bias":
        return t("why_at_biases", pos=position, token=token)
    return t("why_at_own", part=_name(c))


def _signed(value: float, decimals: int = 3) -> str:
    return nb.num(float(value), decimals, L, sign=True)


def _named_heads(grid: np.ndarray, k: int = 5) -> str:
    """The ``k`` heads of a layer x head grid with the largest |term|, as "head 2.3 (+0.53)" text."""
    flat = np.argsort(-np.abs(grid), axis=None, kind="stable")[:k]
    found = [np.unravel_index(int(f), grid.shape) for f in flat]
    return " · ".join(tp("why_head_term", layer=int(a), head=int(b), term=_signed(grid[a, b])) for a, b in found
                      if grid[a, b] != 0)


# ---- the page -----------------------------------------------------------------------------------------------------
sel, loaded = shared.page_start("why_title", "why_intro", text=True)
if not sel.text.strip():
    st.info(t("teach_need_text"))
    shared.stop()

# side by side at the normal text sizes; one under the other in projector mode, where a half column cuts the labels
wide = shared.factor() < 1.5
columns = st.columns(2) if wide else (st.container(), st.container())
mask, off = shared.mask_and_heads_off(URL, "why", shared.heads_off(sel.model), columns)
analysis = shared.analysis_ui(sel.model, sel.text, heads_off=off, mask=mask, max_tokens=MAX_TOKENS)
if analysis is None:
    URL.finish()
    shared.stop()
stacks = [s for s in loaded.stacks if s != "cross"]
stack = shared.self_stack(URL, "why_stack", stacks)
tokens = analysis.axis_tokens(stack)[0]
if not tokens:
    st.info(t("why_no_tokens"))
    URL.finish()
    shared.stop()
labels = [tok.label for tok in tokens]
n = len(tokens)
n_layers, n_heads = loaded.stacks[stack]

# ---- which score: layer, head, query i, key j -----------------------------------------------------------------------
p1, p2, p3, p4 = st.columns(4)
layer, head = shared.layer_head("why_layer", "why_head", n_layers, n_heads, url=URL, columns=(p1, p2),
                                layer_default=n_layers // 2)
default_i = max((k for k, tok in enumerate(tokens) if not tok.special), default=n - 1)
URL.bind("why_i", default_i, bounds=(0, n - 1))
shared.clamp("why_i", n, default_i)
i = int(p3.selectbox(t("why_i"), list(range(n)), key="why_i", format_func=lambda k: f"{k} · {labels[k]}",
                     help=t("why_i_help")))
weights_row = np.asarray(analysis.attentions[stack][layer, head][i], dtype=np.float64)
default_j = int(np.argmax(weights_row))
# another row (layer, head or query): the key starts again at the one this head weights most
where = [layer, head, i]
if st.session_state.get("_why_row") not in (None, where):
    st.session_state["why_j"] = default_j
st.session_state["_why_row"] = where
URL.bind("why_j", default_j, bounds=(0, n - 1))
shared.clamp("why_j", n, default_j)
j = int(p4.selectbox(t("why_j"), list(range(n)), key="why_j", help=t("why_j_help"),
                     format_func=lambda k: f"{k} · {labels[k]} · {nb.percent(float(weights_row[k]), 0, L)}"))
args = (sel.model, sel.text, off, mask, stack, layer, head)
with st.spinner(t("why_explaining")):
    nv = _or_stop(_neuron, *args, i, j)
    row = _or_stop(_row, *args, i)
terms = _or_stop(row.at, j, 5)
qi, kj = vtext.plotly_text(labels[i]), vtext.plotly_text(labels[j])

# ---- 1. the neuron view ----------------------------------------------------------------------------------------------
st.header(t("why_s1"))
st.markdown(t("why_s1_text"))
shared.plotly_chart(neuron_figure(
    nv.query, nv.key, nv.product, names=(tp("why_q"), tp("why_k"), tp("why_qk")),
    title=tp("why_neuron_title", layer=layer, head=head, i=i, qi=qi, j=j, kj=kj), dim_title=tp("why_dim"),
    value_title=tp("why_value"), lang=L), key="why_neuron")
shown = [(t("why_scaling"), nb.num(nv.scaling, 4, L)), (t("why_score"), _signed(nv.raw))]
if nv.softcap is not None:
    shown.append((t("why_capped", c=nb.num(nv.softcap, 1, L)), _signed(nv.capped)))
if bool(np.any(row.bias != 0)):
    shown.append((t("why_bias"), _signed(nv.bias)))
shown += [(t("why_logit"), _signed(nv.logit)), (t("why_weight"), nb.num(nv.weight, 4, L))]
for col, (label, value) in zip(st.columns(len(shown)), shown):
    col.metric(label, value, border=True)
st.caption(t("why_formula_cap" if nv.softcap is not None else "why_formula"))
if nv.kv_head != head:
    st.caption(t("why_kv_shared", head=head, kv=nv.kv_head))
if not nv.allowed:
    st.info(t("why_masked", i=i, j=j))

# ---- 2. the score as a matrix of terms ------------------------------------------------------------------------------
st.header(t("why_s2"))
st.markdown(t("why_s2_text"))
qnames = [_name(c) for c in row.query_components]
knames = [_name(c) for c in row.key_components]
lines = [t("why_term_line", value=_signed(term.value), kside=_at(term.key, j), qside=_at(term.query, i))
         for term in terms.top]
st.markdown(t("why_top_terms", score=_signed(terms.raw)) + "\n\n"
            + "\n".join(f"{rank}. {line}" for rank, line in enumerate(lines, start=1)))
URL.bind("why_parts")
parts = st.select_slider(t("why_parts"), PARTS, key="why_parts")
shared.plotly_chart(terms_figure(
    terms.matrix, qnames, knames, top=parts, rest_name=tp("why_rest"), sum_name=tp("why_sum"),
    title=tp("why_terms_title", i=i, qi=qi, j=j, kj=kj), query_title=tp("why_query_side", i=i),
    key_title=tp("why_key_side", j=j), term_title=tp("why_term_unit"), plot_px=shared.fewer(560), lang=L),
    key="why_terms")
st.caption(t("why_sums_note", score=_signed(terms.raw)))
shared.plotly_chart(sides_figure(
    terms.query_side, terms.key_side, qnames, knames, top=parts, rest_name=tp("why_rest"),
    titles=(tp("why_query_side", i=i), tp("why_key_side", j=j)), title=tp("why_sides_title"),
    term_title=tp("why_term_unit"), row_px=round(26 * shared.factor()), lang=L), key="why_sides")

# ---- 3. which earlier heads feed the score ---------------------------------------------------------------------------
st.header(t("why_s3"))
if layer == 0:
    st.caption(t("why_no_earlier"))
else:
    st.markdown(t("why_s3_text"))
    URL.bind("why_by")
    by = st.radio(t("why_by"), BY, key="why_by", horizontal=True, format_func=lambda b: t(f"why_by_{b}", j=j))
    at_j = j if by == "at_j" else None
    off_grid = np.zeros((layer, n_heads), dtype=bool)
    for s, lay, h in off:
        if s == stack and lay < layer:
            off_grid[lay, h] = True
    g1, g2 = st.columns(2) if wide else (st.container(), st.container())
    for col, side in ((g1, "key"), (g2, "query")):
        grid = row.by_head(side, at_j)
        title = tp(f"why_heads_{side}", layer=layer, head=head)
        fig = head_grid(grid, off_grid, title=title, score_title=tp("why_term_unit"), layer_title=tp("layer"),
                           head_title=tp("head"), off_title=tp("flow_off"), diverging=True,
                           height=max(280, 120 + 22 * layer), lang=L)
        fig.update_traces(colorbar_title_side="right", selector=dict(type="heatmap"))  # clear of the top tick
        shared.plotly_chart(fig, container=col, columns=2 if wide else 1, key=f"why_heads_{side}")
        named = _named_heads(grid)
        col.caption(t("why_heads_top", heads=named) if named else t("why_heads_none"))

# ---- 4. rotary position against content ----------------------------------------------------------------------------
st.header(t("why_s4"))
top = max(i, 32) if loaded.max_positions is None else max(1, min(max(i, 32), loaded.max_positions - 1))
try:
    split = _rope(*args, i, j, top)
except models.DikkatError as exc:
    if getattr(exc, "code", None) == "why_refused" and exc.params.get("why") == "no_rope":
        split = None
    else:
        _show(exc)
        URL.finish()
        shared.stop()
if split is None:
    st.caption(t("why_no_rope", model=shared.model_name(loaded)))
else:
    st.markdown(t("why_s4_text"))
    r1, r2, r3, r4 = st.columns(4)
    r1.metric(t("why_content"), _signed(split.content[j]), border=True)
    r2.metric(t("why_positional"), _signed(split.positional[j]), border=True)
    r3.metric(t("why_positional_share"), nb.percent(float(split.share[j]), 0, L), border=True)
    r4.metric(t("why_positional_head"), nb.percent(split.weighted_share, 0, L), border=True,
              help=t("why_positional_head_help"))
    shared.plotly_chart(rope_figure(
        split.distances, split.curve, actual=i - j, actual_score=float(split.raw[j]),
        title=tp("why_rope_title", i=i, qi=qi, j=j, kj=kj), distance_title=tp("why_distance"),
        score_title=tp("why_score_axis"), actual_name=tp("why_actual", d=i - j), lang=L), key="why_rope")
    if i - j < 0:
        st.caption(t("why_rope_after", d=i - j))
    shared.plotly_chart(rope_keys_figure(
        split.content, split.positional, labels, j=j, names=(tp("why_content_short"), tp("why_positional_short")),
        title=tp("why_rope_keys_title", i=i, qi=qi), key_title=tp("key"), score_title=tp("why_score_axis"),
        max_ticks=shared.fewer(40), lang=L), key="why_rope_keys")
    st.caption(t("why_rope_note"))

# ---- 5. composition with the earlier heads ---------------------------------------------------------------------------
URL.bind("why_comp")
with st.expander(t("why_s5"), expanded=bool(st.session_state.get("why_comp"))):
    st.markdown(t("why_s5_text"))
    if st.toggle(t("why_comp_go"), key="why_comp"):
        if layer == 0:
            st.caption(t("why_no_earlier"))
        else:
            with st.spinner(t("why_comp_running")):
                comp = _or_stop(_composition, sel.model, stack, layer)
            scores = comp.for_head(layer, head)
            shared.plotly_chart(composition_figure(
                scores, layer, titles=(tp("why_comp_q"), tp("why_comp_k"), tp("why_comp_v")),
                title=tp("why_comp_title", layer=layer, head=head), layer_title=tp("layer"), head_title=tp("head"),
                score_title=tp("why_comp_unit"), row_px=round(18 * shared.factor()), lang=L), key="why_comp_fig")
            st.caption(t("why_comp_note"))
URL.finish()
