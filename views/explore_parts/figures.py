"""Explore's figures of one sentence: the head view (every head of a layer), the model view (every layer x head map)
and the head heatmap (one map; a long input's pooled, with a window at full resolution). Each takes the page's
:class:`~views.explore_parts.state.ExploreState` and the prepared weights, and returns what it drew of the chosen
map (:class:`~views.explore_parts.state.Shown`: the CSV export's matrix)."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import streamlit as st

from views import explore_levels as lv
from views import shared
from views.shared import t
from viz import heatmap as vh, model_view as vmv
from viz import transforms as tf
from viz.head_view import head_view_html, head_view_layout, head_view_svg, html_height
from viz.heatmap import MAX_TICKS, PLOT_PX, image_config
from viz.morphemes import heatmap_hover
from viz.prepare import Prepared

from .state import HEAD_VIEW_MAX, HEAD_VIEW_ZOOM, HEATMAP_MAX, ZOOM, ExploreState, Shown, computed_or_stop, hv_slider

# built once
head_heatmap, model_view_figure = shared.shared_figure(vh.head_heatmap), shared.shared_figure(vmv.model_view)


def _title(base: str, prep: Prepared, state: ExploreState) -> str:
    """``base`` and what changed the weights drawn (renormalised, words, morphemes)."""
    extra = []
    if prep.renormalised:
        extra.append(t("x_renormalised"))
    if state.words:
        extra.append(t("x_words"))
    if state.morphemes:
        extra.append(t("explore_x_morphemes"))
    return base + ("  ·  " + " · ".join(extra) if extra else "")


def _heatmap_title(state: ExploreState, prep: Prepared) -> str:
    """The heatmap's title: the chosen layer, head and stack."""
    return _title(t("hm_title", layer=state.layer, head=state.head_names[state.head], stack=t(f"stack_{state.stack}")),
                 prep, state)


def _hover(state: ExploreState, prep: Prepared):
    """The morpheme level: what each unit is, in the interface language (the figures' hover); else Nones."""
    return lv.hover(prep) if state.morphemes else (None, None)


def _bin_labels(labels: list[str], bins: int) -> list[str]:
    """Labels of the pooled bins of :func:`viz.transforms.pool`: the positions they cover, ``first–last``."""
    edges = tf.bin_edges(len(labels), bins)
    return [f"{a}–{b - 1}" if b - 1 > a else str(a) for a, b in zip(edges[:-1], edges[1:])]


def _on_model_click(heads: int) -> None:
    """Model view click: open the clicked map (set layer and head)."""
    event = st.session_state.get("mv_select")
    points = (event or {}).get("selection", {}).get("points", []) if isinstance(event, dict) else \
        getattr(getattr(event, "selection", None), "points", []) or []
    for point in points:
        cell = vmv.point_to_cell(dict(point), heads)
        if cell is not None:
            st.session_state["layer"] = cell[0]
            if heads > 1:
                st.session_state["head"] = cell[1]
            return


def heatmap(state: ExploreState, prep: Prepared, shown: Shown) -> Shown:
    """The chosen head (``shown.matrix``): in full when it fits, else pooled to HEATMAP_MAX cells a side plus a window
    at full resolution (long inputs; the window is then what the CSV export writes)."""
    matrix, stem, fmt, title = shown.matrix, state.stem, state.fmt, _heatmap_title(state, prep)
    assert matrix is not None  # the heatmap and model views have a chosen map (None: the summary table)
    nq, nk = len(prep.q_labels), len(prep.k_labels)
    hover_q, hover_k = _hover(state, prep)
    sink = state.layer in state.analysis.sinks.get(state.stack, ()) and state.mode != "rollout"
    if sink:  # the share of each query's attention that went to the layer's learned sink, not to a token
        share = np.clip(1.0 - matrix.sum(-1), 0.0, 1.0)
        st.caption(t("sink_renormalised") if prep.renormalised else
                   t("sink_note", mean=float(share.mean()), max=float(share.max())))
    if max(nq, nk) <= HEATMAP_MAX:
        drawn, k_shown = matrix, prep.k_labels
        if sink and not prep.renormalised:
            drawn, k_shown = np.concatenate([matrix, share[:, None]], axis=1), list(prep.k_labels) + [t("sink_key")]
        fig = head_heatmap(drawn, prep.q_labels, k_shown, title=title, query_title=t("query"),
                           key_title=t("key"), weight_title=t("weight"), max_ticks=shared.fewer(MAX_TICKS),
                           plot_px=shared.fewer(PLOT_PX), lang=shared.lang())
        heatmap_hover(fig, hover_q, hover_k and hover_k + k_shown[len(hover_k):])  # the morpheme level's
        shared.plotly_chart(fig, key="heatmap_chart", config=image_config(stem, fmt))
        if max(nq, nk) > 128:
            st.caption(t("heatmap_long", n=max(nq, nk)))
        return shown
    pooled = tf.pool(matrix, HEATMAP_MAX)
    q_bins, k_bins = _bin_labels(prep.q_labels, pooled.shape[0]), _bin_labels(prep.k_labels, pooled.shape[1])
    fig = head_heatmap(pooled, q_bins, k_bins, title=title + "  ·  " + t("hm_pooled_short", c=HEATMAP_MAX),
                       query_title=t("query"), key_title=t("key"), weight_title=t("weight"), max_ticks=shared.fewer(24),
                       plot_px=shared.fewer(PLOT_PX), lang=shared.lang())
    shared.plotly_chart(fig, key="heatmap_chart", config=image_config(stem, fmt))
    st.caption(t("hm_pooled", n=max(nq, nk), c=HEATMAP_MAX))
    st.markdown("**" + t("hm_zoom_title", m=ZOOM) + "**")
    zc = st.columns(2)
    zq = zk = 0
    with zc[0]:  # a slider only for a side longer than the window (cross-attention's queries may be short)
        if nq > ZOOM:
            shared.clamp("zoom_q", nq - ZOOM + 1)
            zq = st.slider(t("hm_zoom_q"), 0, nq - ZOOM, value=0, key="zoom_q")
    with zc[1]:
        if nk > ZOOM:
            shared.clamp("zoom_k", nk - ZOOM + 1)
            zk = st.slider(t("hm_zoom_k"), 0, nk - ZOOM, value=0, key="zoom_k")
    window = dataclasses.replace(shown, matrix=matrix[zq:zq + ZOOM, zk:zk + ZOOM], q_labels=prep.q_labels[zq:zq + ZOOM],
                                 k_labels=prep.k_labels[zk:zk + ZOOM])
    zoom = head_heatmap(window.matrix, [f"{zq + i}: {x}" for i, x in enumerate(window.q_labels)],
                        [f"{zk + i}: {x}" for i, x in enumerate(window.k_labels)],
                        title=title + "  ·  " + t("hm_zoom_short", q=zq, k=zk), query_title=t("query"),
                        key_title=t("key"), weight_title=t("weight"), max_ticks=shared.fewer(32),
                        plot_px=shared.fewer(PLOT_PX), lang=shared.lang())
    heatmap_hover(zoom, hover_q and hover_q[zq:zq + ZOOM], hover_k and hover_k[zk:zk + ZOOM])
    shared.plotly_chart(zoom, key="zoom_chart", config=image_config(stem + "_zoom", fmt))
    return window


def head_view(state: ExploreState, prep: Prepared, zoom: float = HEAD_VIEW_ZOOM, width_px: int = 840) -> Shown:
    """The head view of the chosen layer (every head; long inputs paged by the window slider), drawn ``zoom`` times
    its natural size in a column ``width_px`` wide (for the height of its wrapped controls)."""
    nq, nk = len(prep.q_labels), len(prep.k_labels)
    hover_q, hover_k = _hover(state, prep)
    if state.long_mode:
        # prep holds rows hv_start .. of every key: draw the same window of keys
        hv_start = state.hv_start
        window_k = [i for i, idx in enumerate(prep.k_index) if hv_start <= idx[0] < hv_start + HEAD_VIEW_MAX]
        k_sel = np.asarray(window_k, dtype=int)
        weights = prep.weights[0][:, :, k_sel]
        hv_q, hv_k = prep.q_labels, [prep.k_labels[i] for i in window_k]
        hv_qseg, hv_kseg = prep.q_segments, [prep.k_segments[i] for i in window_k]
        n_rows, start, end = state.n_tokens, hv_start, min(state.n_tokens, hv_start + HEAD_VIEW_MAX)
        n_shown, tips = max(len(hv_q), len(hv_k)), (hover_q, hover_k and [hover_k[i] for i in window_k])
    else:
        n_rows = max(nq, nk)
        start = hv_slider(n_rows)
        end = min(n_rows, start + HEAD_VIEW_MAX)
        qs, ks = slice(start, min(end, nq)), slice(start, min(end, nk))
        weights = prep.weights[state.layer][:, qs, ks]
        hv_q, hv_k, hv_qseg, hv_kseg = prep.q_labels[qs], prep.k_labels[ks], prep.q_segments[qs], prep.k_segments[ks]
        n_shown, tips = end - start, (hover_q and hover_q[qs], hover_k and hover_k[ks])  # tips: the morphemes' labels
    hv_notes = list(state.notes)
    long_notes: tuple[str, ...] = ()
    if n_rows > HEAD_VIEW_MAX:
        long_notes = (t("hv_long", n=n_rows, a=start, b=end - 1, m=HEAD_VIEW_MAX),)
        hv_notes.append(t("hv_long_short", a=start, b=end - 1, n=n_rows))
    name = _title(t("hv_title", layer=state.layer, stack=t(f"stack_{state.stack}")), prep, state)
    strings = {k: t(f"hv_{k}") for k in ("heads", "all", "none", "pair", "pair_all", "svg", "png")}
    lay = head_view_layout(hv_q, hv_k, name, hv_notes)
    if shared.factor() > 1:  # projector mode: the zoom times the text size, as far as the drawing fits its column
        zoom = max(zoom, min(zoom * shared.factor(), (width_px - 20) / lay.width))
    head_names = list(state.head_names)
    doc = head_view_html(weights, hv_q, hv_k, head_names=head_names, query_segments=hv_qseg, key_segments=hv_kseg,
                         title=name, notes=hv_notes, strings=strings, filename=state.stem + "_headview",
                         first_position=start, zoom=zoom, query_hover=tips[0], key_hover=tips[1])
    lines = lay.text_lines  # title and notes, wrapped
    st.iframe(doc + shared.plotly_preload(),
              height=html_height(n_shown, max(lines - 1, 0), state.n_heads, width_px=width_px, zoom=zoom))
    st.caption(t("hv_hint"))
    svg_args = (weights, hv_q, hv_k)
    st.download_button(t("dl_svg_server"), data=lambda: head_view_svg(*svg_args, head_names=head_names, title=name,
                                                                        notes=hv_notes).encode("utf-8"),
                       file_name=state.stem + "_headview.svg", mime="image/svg+xml", on_click="ignore", key="dl_hv_svg")
    return Shown(weights[min(state.head, weights.shape[0] - 1)], hv_q, hv_k, long_notes)


def model_view(state: ExploreState, prep: Prepared, shown: Shown, large: bool = True) -> Shown:
    """Every layer x head map; with ``large`` the chosen head drawn large below it (:func:`heatmap`)."""
    n_shown, stack = state.n_tokens, state.stack
    name = _title(t("mv_title", stack=t(f"stack_{stack}"), layers=state.n_layers, heads=state.n_heads, n=n_shown),
                 prep, state)
    blocks = state.analysis.layer_labels.get(stack)
    layer_names = [str(i) if blocks is None else f"{i} ({blocks[i]})" for i in range(state.n_layers)]
    if state.long_mode:
        overview = computed_or_stop(state.analysis.overview, stack)
        grid = overview.mean(axis=1, keepdims=True) if state.mode == "avg" else overview
    else:
        grid = prep.weights
    fig, info = model_view_figure(grid, layer_names=layer_names, head_names=list(state.head_names), title=name,
                                  hover=t("mv_hover"), layer_title=t("layer"), head_title=t("head"),
                                  selected=(state.layer, state.head), lang=shared.lang())
    if state.long_mode:
        st.warning(t("mv_overview", n=n_shown, c=max(info.cell_q, info.cell_k)))
    elif info.pooled:
        st.warning(t("mv_pooled", n=max(len(prep.q_labels), len(prep.k_labels)), c=max(info.cell_q, info.cell_k)))
    shared.plotly_chart(fig, key="mv_select", on_select=functools.partial(_on_model_click, state.n_heads),
                        selection_mode="points", config=image_config(state.stem.rsplit("_L", 1)[0] + "_modelview",
                                                                     state.fmt))
    st.caption(t("mv_hint"))
    if not large:
        return shown
    st.subheader(t("mv_large", layer=state.layer, head=state.head_names[state.head]))
    return heatmap(state, prep, shown)
