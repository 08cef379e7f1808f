"""Explore page: head view, model view, head heatmap and head summary table of one sentence.

Glue only: widgets (each bound to the URL query string, so a shared link reopens the same view), the
cached analysis from :mod:`views.shared`, the numpy transforms of :mod:`viz.transforms` and the figure
builders of :mod:`viz`.
"""

from __future__ import annotations

import functools

import numpy as np
import streamlit as st

import models
from views import explore_levels as lv
from views import shared
from views.shared import t
from viz import transforms as tf
from viz.export import attentions_npz, matrix_csv
from viz.head_view import head_view_html, head_view_layout, head_view_svg, html_height
from viz import heatmap as vh, model_view as vmv
from viz.heatmap import MAX_TICKS, PLOT_PX, image_config
from viz.morphemes import heatmap_hover, prepare_units
from viz.prepare import Prepared, prepare as prepare_view
from viz.summary import head_summary_table

VIEWS = ["head", "model", "heatmap", "summary"]
OPTIONS = ["hide_special", "hide_first", "avg", "rollout", "value"]
# The head view draws at most this many tokens (or words) per column; longer inputs are paged.
HEAD_VIEW_MAX = 48
# The head view drawn 1.4 times its natural size (13 px labels -> 18 px, readable on a projector; issue 33).
HEAD_VIEW_ZOOM = 1.4
# Long inputs (weights computed on demand): the heatmap is pooled to at most HEATMAP_MAX cells a side, with
# a ZOOM x ZOOM window at full resolution; words are merged up to WORDS_MAX_LONG tokens; the token list
# shows the first TOKENS_LISTED tokens.
HEATMAP_MAX = 256
head_heatmap, model_view = shared.shared_figure(vh.head_heatmap), shared.shared_figure(vmv.model_view)  # built once
ZOOM = 96
WORDS_MAX_LONG = 2048
TOKENS_LISTED = 600


@shared.cached
def prepare(model: str, text: str, pair: str | None, stack: str, hide_special: bool, hide_first: bool,
            level: str, mode: str, value: bool = False, layer: int | None = None, head: int | None = None,
            rows: tuple[int, int] | None = None) -> Prepared:
    """:func:`viz.prepare.prepare` of the cached analysis (cached too; the result is shared, read-only); with
    ``value`` the weights are value-weighted by the cached flow's norms (:func:`shared.get_flow`); ``level``
    ``tokens``, ``words`` or (a Turkish text) ``morphemes``: :func:`viz.morphemes.prepare_units`."""
    norms = shared.get_flow(model, text, text_pair=pair, stack=stack).value_norms if value else None
    a, args = shared.get_analysis(model, text, text_pair=pair), dict(hide_special=hide_special, hide_first=hide_first,
                                                                    mode=mode, layer=layer, head=head, rows=rows)
    if level == "morphemes":
        return prepare_units(a, stack, *lv.morpheme_units(model, text, pair, stack)[:2], **args, value_norms=norms)
    return prepare_view(a, stack, words=level == "words", **args, value_norms=norms)


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


def _on_table_select(heads: int) -> None:
    """Summary table row chosen: open that head in the heatmap view."""
    event = st.session_state.get("summary_table")
    rows = getattr(getattr(event, "selection", None), "rows", None)
    if rows is None and isinstance(event, dict):
        rows = event.get("selection", {}).get("rows", [])
    if rows:
        row = int(rows[0])
        st.session_state["layer"] = row // heads
        st.session_state["head"] = row % heads
        st.session_state["view"] = "heatmap"


def _matrix_csv(matrix: np.ndarray, q_labels: list[str], k_labels: list[str]):
    return lambda: matrix_csv(matrix, q_labels, k_labels)


def _bin_labels(labels: list[str], bins: int) -> list[str]:
    """Labels of the pooled bins of :func:`viz.transforms.pool`: the positions they cover, ``first–last``."""
    edges = tf.bin_edges(len(labels), bins)
    return [f"{a}–{b - 1}" if b - 1 > a else str(a) for a, b in zip(edges[:-1], edges[1:])]


def _npz(model: str, text: str, pair: str | None):
    def make() -> bytes:
        a = shared.get_analysis(model, text, text_pair=pair)
        # a long input's weights are not held: its pooled overview maps instead
        return attentions_npz(a.attentions if a.kept else a.overview, tokens=[x.label for x in a.tokens], spans=[(x.start, x.end) for x in a.tokens],
                              special=[x.special for x in a.tokens],
                              target_tokens=[x.label for x in a.target_tokens] if a.target_tokens else None,
                              model=model, text=text)
    return make


def _title(base: str, prep: Prepared, options: dict) -> str:
    extra = []
    if prep.renormalised:
        extra.append(t("x_renormalised"))
    if options["words"]:
        extra.append(t("x_words"))
    if options["morphemes"]:
        extra.append(t("explore_x_morphemes"))
    return base + ("  ·  " + " · ".join(extra) if extra else "")


# ---------------------------------------------------------------- page
sel, loaded = shared.page_start("explore_title", "explore_intro", caption=True, text=True)


def _pair_field() -> None:
    """The optional second sentence of an encoder (drawn below the figure: the figure comes first on the screen;
    also before the page stops on an error, so a pair that caused it can be changed)."""
    if loaded.family != "encoder":
        shared.url_drop("pair")
        return
    with st.expander(t("pair_expander"), expanded=bool(st.session_state.get("pair"))):
        shared.text_field(t("pair_label"), key="pair", help=t("pair_help"))
        shared.url_sync("pair", "")


# what a long text's reader must know, said once above the figure (issue 33: three notices stacked for one
# 512-token text): what was cut, that weights are computed on demand, which window the head view draws
long_notes: list[str] = []
notice_slot = None


def _notices() -> None:
    if notice_slot is not None and long_notes:
        (notice_slot.warning if analysis.truncated else notice_slot.info)("\n\n".join(long_notes))


def _stop() -> None:
    _notices()
    _pair_field()
    st.stop()


if loaded.family == "encoder":
    shared.url_init("pair")
pair = (st.session_state.get("pair") or "").strip() or None if loaded.family == "encoder" else None

if not sel.text.strip():
    st.info(t("type_sentence"))
    _stop()
analysis = shared.analysis_ui(sel.model, sel.text, notice=False, text_pair=pair)
if analysis is None:
    _stop()

stacks = list(analysis.attentions)
typed = [x.label for x in analysis.tokens + (analysis.target_tokens or []) if x.typed]
if typed:  # the tokenizer made them the model's own control tokens: say so (issue 13)
    st.info(t("typed_special", tokens=" · ".join(dict.fromkeys(typed))))
for missing, why in analysis.missing_stacks.items():  # never a silent gap: which stack is not shown, and why
    st.warning(t("missing_stack", stack=t(f"stack_{missing}")) + " " + shared.message(why))
# one row above the figure (issue 33: the figure in the first screen at 1280 x 720): the view, the stack, the options
top = st.container(horizontal=True, gap="small", vertical_alignment="bottom")
with top:
    shared.url_init("view", VIEWS)
    st.segmented_control(t("view"), VIEWS, key="view", required=True, default="head",
                         format_func=lambda v: t(f"view_{v}"))
    shared.url_sync("view", "head")
view = st.session_state.get("view") or "head"
if len(stacks) > 1:
    with top:
        shared.url_init("stack", stacks)
        st.selectbox(t("stack"), stacks, key="stack", format_func=lambda s: t(f"stack_{s}"), width=230)
        shared.url_sync("stack", stacks[0])
stack = st.session_state.get("stack") if st.session_state.get("stack") in stacks else stacks[0]

labels = {"hide_special": t("opt_hide_special"), "hide_first": t("opt_hide_first"), "avg": t("opt_avg"),
          "rollout": t("opt_rollout"), "value": t("opt_value")}
level_names = lv.level_names()
for key in OPTIONS:
    shared.url_init(key, kind=bool)
if st.session_state.get("level") not in lv.LEVELS:  # from the link's (or this session's) old key, "words"
    shared.url_init("words")
    st.session_state["level"] = lv.level_from_link(st.session_state.get("words"))
level = st.session_state["level"]
chosen = [labels[k] for k in OPTIONS if st.session_state.get(k)] + ([level_names[level]] if level != "tokens" else [])
# the options in a popover that names the ones ticked (a ticked option is never hidden: its note is under the figure)
with top, st.popover(t("options") + (f" ({len(chosen)})" if chosen else ""), help=t("options_help")):
    st.segmented_control(t("explore_level"), lv.LEVELS, key="level", required=True,
                         format_func=level_names.get, help=t("explore_level_help"))
    level = st.session_state.get("level") or "tokens"
    st.session_state["words"] = lv.LEVEL_URL[level]  # the link's value, under the old key
    shared.url_sync("words", "0")
    for key in OPTIONS:
        st.checkbox(labels[key], key=key, help=t(f"help_{key}"))
        shared.url_sync(key, False)
    shared.url_init("side", kind=bool)
    st.checkbox(t("opt_side"), key="side", help=t("help_side"), disabled=view not in ("head", "model"))
    shared.url_sync("side", False)
    shared.url_init("img_fmt", ["PNG", "SVG"])
    st.segmented_control(t("image_format"), ["PNG", "SVG"], key="img_fmt", required=True, default="PNG",
                         help=t("image_format_help"), disabled=view == "summary")
    shared.url_sync("img_fmt", "PNG")
fmt = (st.session_state.get("img_fmt") or "PNG").lower()
options = {k: bool(st.session_state.get(k)) for k in OPTIONS}
side_by_side = bool(st.session_state.get("side")) and view in ("head", "model") and analysis.kept
if options["rollout"] and stack == "cross":
    st.warning(t("rollout_cross"))
    options["rollout"] = False
if options["value"] and (stack == "cross" or analysis.capture_path != "interface"):
    st.warning(t("value_unavailable"))
    options["value"] = False
long_mode = not analysis.kept
q_tokens, k_tokens = analysis.axis_tokens(stack)
if long_mode and options["rollout"]:
    st.warning(t("rollout_long", n=len(q_tokens)))
    options["rollout"] = False
# the level drawn: tokens for a long input past WORDS_MAX_LONG, words for a text that does not read as Turkish (each
# said in a box, never an error), with the morpheme level's query and key units
level, units = lv.resolve(level, sel.model, sel.text, pair, stack, n=max(len(q_tokens), len(k_tokens)),
                          limit=WORDS_MAX_LONG if long_mode else None)
options["words"], options["morphemes"] = level == "words", level == "morphemes"
mode = "rollout" if options["rollout"] else ("avg" if options["avg"] else "heads")
n_layers, n_heads_raw = analysis.attentions[stack].shape[:2]
n_heads = 1 if mode in ("avg", "rollout") else n_heads_raw
head_names = [t("mean_head")] if mode == "avg" else ([t("rollout_head")] if mode == "rollout" else
                                                      [str(h) for h in range(n_heads)])

# what the options did, in words (C03, C04)
notes = []
if options["hide_special"]:
    notes.append(t("note_special"))
if options["hide_first"]:
    notes.append(t("note_first"))
if options["words"]:
    notes.append(t("note_words"))
if options["morphemes"]:
    notes.append(t("explore_note_morphemes"))
if mode == "avg":
    notes.append(t("note_avg"))
if mode == "rollout":
    notes.append(t("note_rollout"))
if options["value"]:
    notes.append(t("note_value"))
notice_slot = st.empty()
long_notes += [note for note in (shared.truncation_text(analysis, sel.model),
                                 t("long_mode", n=max(len(q_tokens), len(k_tokens))) if long_mode else None) if note]

sel_cols = st.columns([4, 1])
# drawn in every view (a widget that is not drawn forgets its value): the layer inactive in the summary table,
# the head used by the heatmaps only
layer, head = shared.layer_head("layer", "head", n_layers, n_heads_raw, columns=sel_cols[:2], slider=True,
                                labels=("layer", "head"), layer_label=t("rollout_layer") if mode == "rollout" else None,
                                disabled=(view == "summary", n_heads == 1 or view not in ("model", "heatmap")),
                                head_help=t("head_help"))
if n_heads == 1:
    head = 0
if analysis.layer_labels.get(stack):
    sel_cols[0].caption(t("hybrid_layers", blocks=", ".join(map(str, analysis.layer_labels[stack]))))


def _summary_or_stop(lazy, stack: str):
    """``lazy[stack]`` of ``Analysis.statistics`` / ``overview`` (one more pass the first time, with a spinner);
    an engine error is shown and the page stops."""
    try:
        with st.spinner(t("computing_overview")):
            return lazy[stack]
    except models.DikkatError as exc:
        shared.show_error(exc)
        st.stop()


def _hv_slider(n_rows: int) -> int:
    """The head view's first row: a slider when ``n_rows`` exceeds HEAD_VIEW_MAX (long inputs are paged)."""
    if n_rows <= HEAD_VIEW_MAX:
        shared.url_drop("hv_start")
        return 0
    shared.url_init("hv_start", kind=int)
    shared.clamp("hv_start", n_rows - HEAD_VIEW_MAX + 1)
    start = st.slider(t("hv_window"), 0, n_rows - HEAD_VIEW_MAX, value=0, step=1, key="hv_start")
    shared.url_sync("hv_start", 0)
    return int(start)


hv_start = 0
if view == "head" and long_mode:
    hv_start = _hv_slider(max(len(q_tokens), len(k_tokens)))
option_args = (sel.model, sel.text, pair, stack, options["hide_special"], options["hide_first"], level, mode,
               options["value"])
try:
    with st.spinner(t("preparing") if not long_mode else t("computing_layer", layer=layer)):
        if not long_mode:
            prep = prepare(*option_args)
        elif view == "head":
            # the window's query rows (cross-attention has fewer queries than keys: keep a full window)
            r0 = max(0, min(hv_start, len(q_tokens) - HEAD_VIEW_MAX))
            prep = prepare(*option_args, layer=layer, rows=(r0, min(len(q_tokens), r0 + HEAD_VIEW_MAX)))
        elif view == "summary":
            prep = None  # the summary reads the statistics only
        else:
            prep = prepare(*option_args, layer=layer, head=None if n_heads == 1 else head)
except models.DikkatError as exc:
    shared.show_error(exc)
    _stop()
if prep is not None and (not len(prep.q_labels) or not len(prep.k_labels)):
    st.info(t("nothing_left"))
    _stop()
# index of the shown layer / head inside prep.weights
p_layer = 0 if long_mode else layer
p_head = 0 if (long_mode and view != "head") else head


stem = f"dikkat_{sel.model.replace('/', '_')}_{stack}_L{layer}" + (f"_H{head}" if n_heads > 1 else f"_{mode}")
matrix = prep.weights[p_layer, p_head] if prep is not None and view != "summary" else None
nq, nk = (len(prep.q_labels), len(prep.k_labels)) if prep is not None else (len(q_tokens), len(k_tokens))
matrix_q, matrix_k = (prep.q_labels, prep.k_labels) if prep is not None else ([], [])
# the morpheme level: what each unit is, in the interface language (the heatmap's hover)
hover_q, hover_k = lv.hover(prep) if options["morphemes"] and prep is not None else (None, None)


def draw_heatmap(title: str) -> None:
    """The chosen head: in full when it fits, else pooled to HEATMAP_MAX cells a side plus a window at full
    resolution (long inputs)."""
    global matrix, matrix_q, matrix_k
    sink = layer in analysis.sinks.get(stack, ()) and mode != "rollout"
    if sink:  # the share of each query's attention that went to the layer's learned sink, not to a token
        share = np.clip(1.0 - matrix.sum(-1), 0.0, 1.0)
        st.caption(t("sink_renormalised") if prep.renormalised else
                   t("sink_note", mean=float(share.mean()), max=float(share.max())))
    if max(nq, nk) <= HEATMAP_MAX:
        shown, k_shown = matrix, prep.k_labels
        if sink and not prep.renormalised:
            shown, k_shown = np.concatenate([matrix, share[:, None]], axis=1), list(prep.k_labels) + [t("sink_key")]
        fig = head_heatmap(shown, prep.q_labels, k_shown, title=title, query_title=t("query"),
                           key_title=t("key"), weight_title=t("weight"), max_ticks=shared.fewer(MAX_TICKS),
                           plot_px=shared.fewer(PLOT_PX), lang=shared.lang())
        heatmap_hover(fig, hover_q, hover_k and hover_k + k_shown[len(hover_k):])  # the morpheme level's
        shared.plotly_chart(fig, key="heatmap_chart", config=image_config(stem, fmt))
        if max(nq, nk) > 128:
            st.caption(t("heatmap_long", n=max(nq, nk)))
        return
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
    matrix = matrix[zq:zq + ZOOM, zk:zk + ZOOM]
    matrix_q, matrix_k = prep.q_labels[zq:zq + ZOOM], prep.k_labels[zk:zk + ZOOM]
    zoom = head_heatmap(matrix, [f"{zq + i}: {x}" for i, x in enumerate(matrix_q)],
                        [f"{zk + i}: {x}" for i, x in enumerate(matrix_k)],
                        title=title + "  ·  " + t("hm_zoom_short", q=zq, k=zk), query_title=t("query"),
                        key_title=t("key"), weight_title=t("weight"), max_ticks=shared.fewer(32),
                        plot_px=shared.fewer(PLOT_PX), lang=shared.lang())
    heatmap_hover(zoom, hover_q and hover_q[zq:zq + ZOOM], hover_k and hover_k[zk:zk + ZOOM])
    shared.plotly_chart(zoom, key="zoom_chart", config=image_config(stem + "_zoom", fmt))


def _head_view(zoom: float = HEAD_VIEW_ZOOM, width_px: int = 840) -> None:
    """The head view of the chosen layer (every head; long inputs paged by the window slider), drawn ``zoom`` times
    its natural size in a column ``width_px`` wide (for the height of its wrapped controls)."""
    global matrix, matrix_q, matrix_k
    if long_mode:
        # prep holds rows hv_start .. of every key: draw the same window of keys
        window_k = [i for i, idx in enumerate(prep.k_index) if hv_start <= idx[0] < hv_start + HEAD_VIEW_MAX]
        k_sel = np.asarray(window_k, dtype=int)
        weights = prep.weights[0][:, :, k_sel]
        hv_q, hv_k = prep.q_labels, [prep.k_labels[i] for i in window_k]
        hv_qseg, hv_kseg = prep.q_segments, [prep.k_segments[i] for i in window_k]
        n_rows, start, end = max(len(q_tokens), len(k_tokens)), hv_start, min(max(len(q_tokens), len(k_tokens)),
                                                                               hv_start + HEAD_VIEW_MAX)
        shown, tips = max(len(hv_q), len(hv_k)), (hover_q, hover_k and [hover_k[i] for i in window_k])
    else:
        n_rows = max(nq, nk)
        start = _hv_slider(n_rows)
        end = min(n_rows, start + HEAD_VIEW_MAX)
        qs, ks = slice(start, min(end, nq)), slice(start, min(end, nk))
        weights = prep.weights[layer][:, qs, ks]
        hv_q, hv_k, hv_qseg, hv_kseg = prep.q_labels[qs], prep.k_labels[ks], prep.q_segments[qs], prep.k_segments[ks]
        shown, tips = end - start, (hover_q and hover_q[qs], hover_k and hover_k[ks])  # tips: the morphemes' labels
    hv_notes = list(notes)
    if n_rows > HEAD_VIEW_MAX:
        long_notes.append(t("hv_long", n=n_rows, a=start, b=end - 1, m=HEAD_VIEW_MAX))
        hv_notes.append(t("hv_long_short", a=start, b=end - 1, n=n_rows))
    title = _title(t("hv_title", layer=layer, stack=t(f"stack_{stack}")), prep, options)
    strings = {k: t(f"hv_{k}") for k in ("heads", "all", "none", "pair", "pair_all", "svg", "png")}
    lay = head_view_layout(hv_q, hv_k, title, hv_notes)
    if shared.factor() > 1:  # projector mode: the zoom times the text size, as far as the drawing fits its column
        zoom = max(zoom, min(zoom * shared.factor(), (width_px - 20) / lay.width))
    doc = head_view_html(weights, hv_q, hv_k, head_names=head_names, query_segments=hv_qseg, key_segments=hv_kseg,
                         title=title, notes=hv_notes, strings=strings, filename=stem + "_headview", first_position=start,
                         zoom=zoom, query_hover=tips[0], key_hover=tips[1])
    lines = lay.text_lines  # title and notes, wrapped
    st.iframe(doc + shared.plotly_preload(), height=html_height(shown, max(lines - 1, 0), n_heads, width_px=width_px, zoom=zoom))
    st.caption(t("hv_hint"))
    svg_args = (weights, hv_q, hv_k)
    st.download_button(t("dl_svg_server"), data=lambda: head_view_svg(*svg_args, head_names=head_names, title=title,
                                                                        notes=hv_notes).encode("utf-8"),
                       file_name=stem + "_headview.svg", mime="image/svg+xml", on_click="ignore", key="dl_hv_svg")
    matrix, matrix_q, matrix_k = weights[min(head, weights.shape[0] - 1)], hv_q, hv_k


def _model_view(large: bool = True) -> None:
    """Every layer x head map; with ``large`` the chosen head drawn large below it."""
    n_shown = max(len(q_tokens), len(k_tokens))
    title = _title(t("mv_title", stack=t(f"stack_{stack}"), layers=n_layers, heads=n_heads, n=n_shown), prep, options)
    blocks = analysis.layer_labels.get(stack)
    layer_names = [str(i) if blocks is None else f"{i} ({blocks[i]})" for i in range(n_layers)]
    if long_mode:
        overview = _summary_or_stop(analysis.overview, stack)
        grid = overview.mean(axis=1, keepdims=True) if mode == "avg" else overview
    else:
        grid = prep.weights
    fig, info = model_view(grid, layer_names=layer_names, head_names=head_names, title=title,
                           hover=t("mv_hover"), layer_title=t("layer"), head_title=t("head"),
                           selected=(layer, head), lang=shared.lang())
    if long_mode:
        st.warning(t("mv_overview", n=n_shown, c=max(info.cell_q, info.cell_k)))
    elif info.pooled:
        st.warning(t("mv_pooled", n=max(nq, nk), c=max(info.cell_q, info.cell_k)))
    shared.plotly_chart(fig, key="mv_select", on_select=functools.partial(_on_model_click, n_heads), selection_mode="points",
                    config=image_config(stem.rsplit("_L", 1)[0] + "_modelview", fmt))
    st.caption(t("mv_hint"))
    if large:
        st.subheader(t("mv_large", layer=layer, head=head_names[head]))
        draw_heatmap(_title(t("hm_title", layer=layer, head=head_names[head], stack=t(f"stack_{stack}")), prep, options))


# side by side on a wide screen (issue 33): the head view beside the model view
if view in ("head", "model") and side_by_side:
    side = st.columns(2, gap="medium")
    with side[0]:
        _head_view(zoom=1.0, width_px=420)
    with side[1]:
        _model_view(large=False)
elif view == "head":
    _head_view()
elif view == "model":
    _model_view()
elif view == "heatmap":
    draw_heatmap(_title(t("hm_title", layer=layer, head=head_names[head], stack=t(f"stack_{stack}")), prep, options))
else:
    stats = _summary_or_stop(analysis.statistics, stack)
    names = {k: t(f"stat_{k}") for k in tf.STATISTICS}
    table = head_summary_table(stats, column_names=names, layer_column=t("layer"), head_column=t("head"))
    st.caption(t("summary_intro"))
    if level != "tokens":  # the statistics are the model's pieces' (their shares per piece), at every level
        st.caption(t("explore_morph_summary"))
    shared.dataframe(table, decimals=3, key="summary_table", on_select=functools.partial(_on_table_select, n_heads_raw),
                     selection_mode="single-row", hide_index=True)
    with st.expander(t("summary_definitions")):
        for k in tf.STATISTICS:
            st.markdown(f"- **{names[k]}**: {t(f'def_{k}')}")
    st.download_button(t("dl_summary_csv"), data=table.to_csv(index=False).encode("utf-8"),
                       file_name=f"dikkat_{sel.model.replace('/', '_')}_{stack}_heads.csv", mime="text/csv",
                       on_click="ignore", key="dl_summary")

_notices()
if options["morphemes"] and prep is not None and view != "summary":  # what each morpheme is; straddling pieces
    lv.captions(prep, units, q_tokens, k_tokens, cross=stack == "cross")
for note in notes:  # what the options did, in words (C03, C04), under the figure they changed
    st.caption("ℹ️ " + note)
with st.expander(t("tokens_expander", n=len(q_tokens)), expanded=False):
    st.markdown(shared.md(" · ".join(x.label for x in q_tokens[:TOKENS_LISTED])
                          + (" …" if len(q_tokens) > TOKENS_LISTED else "")))
    if options["words"] and not long_mode and prep is not None:
        st.markdown(t("words_line") + " " + shared.md(" · ".join(prep.q_labels)))
    if options["morphemes"] and not long_mode and prep is not None:
        st.markdown(t("explore_morph_line") + " " + shared.md(" · ".join(prep.q_labels)))
_pair_field()

# exports of the numbers (C08)
exp = st.columns(2)
with exp[0]:
    if matrix is not None:
        st.download_button(t("dl_csv", layer=layer, head=head_names[min(head, len(head_names) - 1)]),
                           data=_matrix_csv(matrix, list(matrix_q), list(matrix_k)),
                           file_name=stem + ".csv", mime="text/csv", on_click="ignore", key="dl_csv")
with exp[1]:
    st.download_button(t("dl_npz") if not long_mode else t("dl_npz_overview"), data=_npz(sel.model, sel.text, pair),
                       file_name=f"dikkat_{sel.model.replace('/', '_')}_attentions.npz",
                       mime="application/octet-stream", on_click="ignore", key="dl_npz")
st.caption(t("export_hint"))
