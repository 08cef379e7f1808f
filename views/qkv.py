"""Q/K/V step by step: one head of the loaded model taken apart with its own projection weights."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import streamlit as st

import models
from models.lessons import layer_input, qkv
from views import shared
from viz import numbers as nb
from viz import qkv as vq

t = shared.t
L = shared.lang()
# built once for every session with the same arguments (views/shared/figures.py; issue 48: a student's cached rerun)
vector_strips, rope_before_after, weight_bars, weighted_values = (
    shared.shared_figure(f) for f in (vq.vector_strips, vq.rope_before_after, vq.weight_bars, vq.weighted_values))
MAX_ROWS = 48  # keys drawn as strips; longer inputs show the keys with the largest weights


@shared.cached
def _layer(name: str, text: str, stack: str, layer: int) -> layer_input.LayerCapture:
    return layer_input.layer_capture(shared.get_model(name), text, stack=stack, layer=layer)


# the page's widgets live in the URL (issue 13): a link reopens the same layer, head, query and knobs
URL = shared.UrlState("qkv")
sel, loaded = shared.page_start("qkv_title", "qkv_intro", text=True)
if not sel.text.strip():
    st.info(t("teach_need_text"))
    shared.stop()

stacks = [s for s in loaded.stacks if s != "cross"]
stack = stacks[0]
if len(stacks) > 1:
    URL.bind("qkv_stack", stacks[0], options=stacks)
    stack = st.radio(t("teach_stack"), stacks, horizontal=True, key="qkv_stack")
n_layers, n_heads = loaded.stacks[stack]
c1, c2, c3 = st.columns([1, 1, 2])
layer, head = shared.layer_head("qkv_layer", "qkv_head", n_layers, n_heads, url=URL, columns=(c1, c2))

try:
    with st.spinner(t("analysing")):
        lc = _layer(sel.model, sel.text, stack, layer)
        steps = qkv.head_steps(loaded, lc, head)
except models.DikkatError as exc:
    shared.show_error(exc)
    shared.stop()

analysis = steps.analysis
if analysis.truncated:
    st.warning(shared.truncation_text(analysis, sel.model))
q_tokens, k_tokens = analysis.axis_tokens(stack)
q_labels = [tok.label for tok in q_tokens]
k_labels = [tok.label for tok in k_tokens]
n_q = len(q_labels)
default_query = max([i for i, tok in enumerate(q_tokens) if not tok.special] or [n_q - 1])
URL.bind("qkv_query", default_query, bounds=(0, n_q - 1))
shared.clamp("qkv_query", n_q, default_query)
qi = c3.selectbox(t("qkv_query_token"), list(range(n_q)), key="qkv_query", format_func=lambda i: f"{i} · {q_labels[i]}")

allowed = steps.allowed[qi]
weights = steps.weights[qi]
# Which keys to draw as strips: all of them for short inputs, else the strongest MAX_ROWS in order.
shown = np.arange(len(k_labels))
if len(shown) > MAX_ROWS:
    shown = np.sort(np.argsort(-weights)[:MAX_ROWS])
shown_labels = [f"k{j} · {k_labels[j]}" for j in shown]

# ---- 1. q, k, v ---------------------------------------------------------------------------------
st.header(t("qkv_s1"))
st.markdown(t("qkv_s1_text", source=shared.Md(steps.source), d=steps.head_dim, dmodel=lc.hidden.shape[1]))
if steps.kv_heads < steps.heads:
    group = steps.heads // steps.kv_heads
    first = steps.kv_head * group
    st.info(t("qkv_gqa", head=head, kv=steps.kv_head, heads=steps.heads, kv_heads=steps.kv_heads,
              first=first, last=first + group - 1))
fig = vector_strips(np.vstack([steps.queries[qi][None], steps.keys[shown]]),
                       [f"q{qi} · {q_labels[qi]}"] + shown_labels, highlight=[0],
                       title=t("qkv_strips_title", head=head, layer=layer),
                       dim_title=t("teach_dimension"), value_title=t("teach_value"), lang=L)
shared.plotly_chart(fig, key="qkv_strips")
if len(shown) < len(k_labels):
    st.caption(t("qkv_rows_cut", shown=len(shown), n=len(k_labels)))

if steps.rope:
    st.subheader(t("qkv_rope_title"))
    st.markdown(t("qkv_rope_text"))
    few = shown[-min(len(shown), 6):]
    shared.plotly_chart(rope_before_after(
        np.vstack([steps.queries_unrotated[qi][None], steps.keys_unrotated[few]]),
        np.vstack([steps.queries[qi][None], steps.keys[few]]),
        [f"q{qi} · {q_labels[qi]}"] + [f"k{j} · {k_labels[j]}" for j in few],
        before_word=t("qkv_before"), after_word=t("qkv_after"), title=t("qkv_rope_fig", n=len(few)),
        dim_title=t("teach_dimension"), value_title=t("teach_value"), lang=L), key="qkv_rope")
    norm_before = float(np.linalg.norm(steps.queries_unrotated[qi]))
    norm_after = float(np.linalg.norm(steps.queries[qi]))
    st.caption(t("qkv_rope_norm", before=nb.num(norm_before, 3, L), after=nb.num(norm_after, 3, L)))

# ---- 2. scores, scaling, mask, softmax ---------------------------------------------------------------
st.header(t("qkv_s2"))
root = 1.0 / steps.scaling if steps.scaling else float("nan")
st.markdown(t("qkv_s2_text", d=steps.head_dim, root=nb.num(math.sqrt(steps.head_dim), 2, L),
              scaling=nb.num(steps.scaling, 4, L)))
st.latex(r"a_{ij} = \mathrm{softmax}_j\!\left(\frac{q_i \cdot k_j}{\sqrt{d_k}} + M_{ij}\right)")
if abs(steps.scaling - steps.head_dim ** -0.5) > 1e-9:
    st.caption(t("qkv_own_scaling", scaling=nb.num(steps.scaling, 4, L), root=nb.num(root, 2, L)))
table = pd.DataFrame({
    t("qkv_col_key"): [f"{j} · {lab}" for j, lab in enumerate(k_labels)],
    "q·k": steps.dots[qi],
    t("qkv_col_scaled"): steps.scores[qi],
    t("qkv_col_mask"): [t("qkv_allowed") if a else t("qkv_blocked") for a in allowed],
    t("qkv_col_weight"): weights,
    t("qkv_col_recorded"): steps.recorded[qi],
})
shared.dataframe(table, decimals=4, hide_index=True)
st.download_button(t("teach_download_csv"), table.to_csv(index=False).encode("utf-8"),
                   file_name=f"qkv_L{layer}_H{head}_q{qi}.csv", mime="text/csv", key="qkv_csv")
if not allowed.all():
    st.caption(t("qkv_mask_note", blocked=int((~allowed).sum())))
if steps.max_abs_diff < 1e-4:
    st.success(t("qkv_equal", diff=nb.sci(steps.max_abs_diff, 1, L)))
else:
    st.warning(t("qkv_not_equal", diff=nb.sci(steps.max_abs_diff, 1, L)))

# ---- 3. sharper or flatter --------------------------------------------------------------------------
st.header(t("qkv_s3"))
st.markdown(t("qkv_s3_text"))
s1, s2 = st.columns(2)
URL.bind("qkv_noscale")
no_scale = s1.toggle(t("qkv_noscale"), key="qkv_noscale")
# a select slider, not st.slider: its labels can use the interface language's decimal mark (Turkish 1,5)
temperatures = list(URL.options("qkv_temperature"))
URL.bind("qkv_temperature")
temperature = s2.select_slider(t("qkv_temperature"), temperatures, key="qkv_temperature",
                               format_func=lambda v: nb.num(v, 1, L))
row = steps.dots[qi] * (1.0 if no_scale else steps.scaling)
adjusted = qkv.softmax_row(row, allowed, temperature=temperature)
shared.plotly_chart(weight_bars(k_labels, weights, compare=adjusted, blocked=~allowed,
                               names=(t("qkv_model_weights"), t("qkv_adjusted")), weight_title=t("teach_weight"),
                               lang=L),
                key="qkv_bars")
n_allowed = int(allowed.sum())
m1, m2, m3, m4 = st.columns(4)
h_model, h_adj = qkv.entropy(weights), qkv.entropy(adjusted)
nats, bits = t("teach_nats"), t("teach_bits")
m1.metric(t("qkv_entropy_model"), f"{nb.num(h_model, 3, L)} {nats}", f"{nb.num(qkv.entropy(weights, 2), 3, L)} {bits}",
          delta_color="off", delta_arrow="off")
m2.metric(t("qkv_entropy_adjusted"), f"{nb.num(h_adj, 3, L)} {nats}",
          f"{nb.num(qkv.entropy(adjusted, 2), 3, L)} {bits}",
          delta_color="off", delta_arrow="off")
m3.metric(t("qkv_entropy_max"), f"{nb.num(math.log(max(n_allowed, 1)), 3, L)} {nats}",
          f"{nb.num(math.log2(max(n_allowed, 1)), 3, L)} {bits}", delta_color="off", delta_arrow="off")
top_change = float(adjusted.max() - weights.max())
m4.metric(t("qkv_top_weight"), nb.num(adjusted.max(), 3, L),
          nb.num(top_change, 3, L, sign=True) if abs(top_change) >= 5e-4 else None)  # no "+0,000" arrow
st.caption(t("qkv_entropy_note", n=n_allowed))

# ---- 4. weighted sum of values ------------------------------------------------------------------------
st.header(t("qkv_s4"))
st.markdown(t("qkv_s4_text"))
shared.plotly_chart(weighted_values(steps.values[shown], weights[shown], steps.output[qi],
                                   [k_labels[j] for j in shown], sum_label=t("qkv_sum_label"),
                                   dim_title=t("teach_dimension"), value_title=t("teach_value"), lang=L),
                key="qkv_values")
if len(shown) < len(k_labels):
    st.caption(t("qkv_values_cut", shown=len(shown), n=len(k_labels)))
URL.finish()
