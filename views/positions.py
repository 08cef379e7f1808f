"""Positions: sinusoidal encoding, RoPE as rotations, ALiBi, and the word-order experiment."""

from __future__ import annotations

import numpy as np
import streamlit as st

import models
from models.lessons import positions
from views import shared
from viz import numbers as nb
from viz import positions as vp
from viz.text import plotly_text

t = shared.t
L = shared.lang()
MAX_POS = 64  # positions drawn in the RoPE grid and the ALiBi matrix


@shared.cached
def _word_order(name: str, text_a: str, text_b: str) -> positions.WordOrder:
    return positions.word_order_experiment(shared.get_model(name), text_a, text_b)


# the page's widgets live in the URL (issue 13): a link reopens the same positions, heads and sentences
URL = shared.UrlState("positions")
sel, loaded = shared.page_start("pos_title", "pos_intro")
kind = positions.position_kind(loaded)
st.info(t(f"pos_kind_{kind}", model=sel.model))

stack = loaded.input_stack
labels: list[str] = []
text_model = loaded.reads_text  # not Whisper
if sel.text.strip() and text_model:
    analysis = shared.analysis_ui(sel.model, sel.text)
    if analysis is not None:
        labels = [tok.label for tok in analysis.axis_tokens(stack)[0]]
if not labels:
    if text_model:
        st.info(t("teach_need_text"))
    labels = ["Kedi", "fareyi", "kovaladı"]
n = len(labels)
pos_labels = [f"{i} · {lab}" for i, lab in enumerate(labels)]

# ---- 1. sinusoidal ---------------------------------------------------------------------------------
st.header(t("pos_s1"))
cfg = loaded.text_config
d_model = int(getattr(cfg, "hidden_size", 0) or getattr(cfg, "d_model", 64))
st.markdown(t("pos_s1_text", n=n, d=d_model))
st.latex(r"PE_{(pos,\,2i)} = \sin\!\left(\frac{pos}{10000^{2i/d}}\right),\quad "
         r"PE_{(pos,\,2i+1)} = \cos\!\left(\frac{pos}{10000^{2i/d}}\right)")
pe = positions.sinusoidal_encoding(n, d_model)
shared.plotly_chart(vp.sinusoidal_heatmap(pe, pos_labels, title=t("pos_s1_fig", n=n, d=d_model),
                                      dim_title=t("teach_dimension"), position_title=t("teach_position"), lang=L),
                key="pos_sin")

# ---- 2. RoPE ----------------------------------------------------------------------------------------------
st.header(t("pos_s2"))
rope_model = kind == "rope"
head_dim = positions.head_dim_of(loaded) if rope_model else 64
theta = (positions.rope_theta(loaded) or 10000.0) if rope_model else 10000.0
if rope_model:
    st.markdown(t("pos_s2_text_model", model=sel.model, theta=nb.integer(round(theta), L), d=head_dim))
    per_type = positions.rope_layer_types(loaded)
    if per_type:  # Gemma 3: one table per layer type
        kinds = {"full_attention": shared.t_plain("pos_layer_full"),
                 "sliding_attention": shared.t_plain("pos_layer_sliding")}
        st.caption(t("pos_rope_layer_types", model=sel.model, types="; ".join(
            f"{kinds.get(k, k)}: θ = {nb.integer(round(v), L) if v else '?'}" for k, v in per_type.items())))
else:
    st.markdown(t("pos_s2_text_textbook", model=sel.model))
st.latex(r"(R_m q)\cdot(R_n k) = q \cdot R_{n-m}\,k")
source = loaded if rope_model else None
n_rot = min(max(n, 8), 12)
angles = positions.rope_angles(source, n_rot, head_dim=head_dim, theta=theta)
n_pairs = angles.shape[1]
pairs = sorted({0, 1, n_pairs // 4, n_pairs - 1})
shared.plotly_chart(vp.rope_rotations(angles, pairs, title=t("pos_rot_fig", n=n_rot), pair_word=t("pos_pair"),
                                  position_title=t("teach_position"), lang=L), key="pos_rot")
st.caption(t("pos_rot_caption"))

grid_n = min(max(n, 16), MAX_POS)
grid = positions.rope_dot_grid(source, grid_n, head_dim=head_dim, theta=theta)
shared.plotly_chart(vp.distance_grid(grid, title=t("pos_grid_fig", n=grid_n), query_title=t("pos_query_pos"),
                                 key_title=t("pos_key_pos"), lang=L), key="pos_grid")
st.markdown(t("pos_grid_text"))
g1, g2, g3 = st.columns(3)
URL.bind("pos_m")
URL.bind("pos_n")
URL.bind("pos_t")
m_pos = g1.number_input("m", *URL.bounds("pos_m"), key="pos_m")
n_pos = g2.number_input("n", *URL.bounds("pos_n"), key="pos_n")
shift = g3.number_input(t("pos_shift"), *URL.bounds("pos_t"), key="pos_t")
check = positions.rope_shift_check(source, int(m_pos), int(n_pos), int(shift), head_dim=head_dim, theta=theta)
k1, k2, k3 = st.columns(3)
k1.metric(t("pos_dot_at", m=check.m, n=check.n), nb.num(check.dot, 5, L))
k2.metric(t("pos_dot_at", m=check.m + check.t, n=check.n + check.t), nb.num(check.dot_shifted, 5, L))
k3.metric(t("pos_dot_diff"), nb.sci(check.abs_diff, 2, L))
st.caption(t("pos_check_caption", unrotated=nb.num(check.dot_unrotated, 5, L)))

# ---- 3. ALiBi -----------------------------------------------------------------------------------------------
st.header(t("pos_s3"))
heads = loaded.stacks[stack][1]
st.markdown(t("pos_s3_text", heads=heads))
st.latex(r"\mathrm{softmax}\big(q_i K^\top + m \cdot [-(i-1), \dots, -2, -1, 0]\big),\qquad m_h = 2^{-8h/H}")
if heads > 1:
    URL.bind("pos_alibi_head", bounds=(0, heads - 1))
shared.clamp("pos_alibi_head", heads)
alibi_head = st.slider(t("teach_head"), 0, max(heads - 1, 1), key="pos_alibi_head") if heads > 1 else 0
slopes = positions.alibi_slopes(heads)
n_alibi = min(n, MAX_POS)
bias = positions.alibi_bias(n_alibi, float(slopes[alibi_head]))
shared.plotly_chart(vp.alibi_figure(slopes, bias, labels[:n_alibi], alibi_head,
                                title_slopes=t("pos_alibi_slopes", heads=heads),
                                title_bias=t("pos_alibi_bias", head=alibi_head, m=nb.num(slopes[alibi_head], 4, L)),
                                head_word=t("teach_head"), slope_word=t("pos_slope"), lang=L), key="pos_alibi")
if heads & (heads - 1):
    low = 1 << (heads.bit_length() - 1)
    st.caption(t("pos_alibi_order", heads=heads, low=low, high=2 * low))

# ---- 4. word order -----------------------------------------------------------------------------------------------
st.header(t("pos_s4"))
st.markdown(t("pos_s4_text"))
if not shared.reads_text(loaded):
    URL.finish()
    shared.stop()
w1, w2 = st.columns(2)
URL.bind("pos_text_a")
URL.bind("pos_text_b")
text_a = shared.text_field(t("pos_sentence_a"), key="pos_text_a", container=w1)
text_b = shared.text_field(t("pos_sentence_b"), key="pos_text_b", container=w2)
try:
    with st.spinner(t("analysing")):
        wo = _word_order(sel.model, text_a, text_b)
except models.DikkatError as exc:
    shared.show_error(exc)
    URL.finish()
    shared.stop()
n_layers = wo.attn_a.shape[0]
wo_layer, wo_head = shared.layer_head("pos_wo_layer", "pos_wo_head", n_layers, heads, url=URL,
                                      mean="pos_mean_heads", head_default=shared.MEAN)


def _pick(x: np.ndarray) -> np.ndarray:
    return x[wo_layer].mean(axis=0) if wo_head is None else x[wo_layer, wo_head]


a_m, b_m = _pick(wo.attn_a), _pick(wo.attn_b)
shared.plotly_chart(vp.word_order_figure(wo.words, a_m, b_m, a_m - b_m,
                                     titles=(f"A: {plotly_text(text_a)}", f"B: {plotly_text(text_b)}", "A − B"),
                                     query_title=t("pos_query_word"), key_title=t("pos_key_word"), lang=L),
                    key="pos_wo")
st.metric(t("pos_mean_abs_diff"), nb.num(float(np.abs(a_m - b_m).mean()), 4, L))
st.caption(t("pos_wo_caption"))
if loaded.family == "decoder":
    st.caption(t("pos_wo_causal"))
URL.finish()
