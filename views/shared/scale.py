"""Projector mode (issue 29): one text size for every page, chosen in the sidebar and kept in the link, so a teacher's
link opens a class's screen as large as the teacher left it.

The main area's text (markdown, captions, tables, widget labels and values, metrics) grows through the CSS
variable ``--dk-scale`` (:func:`style`, read by ``assets/css/app.css``); a figure's text through
:func:`scale_figure`, called by :func:`views.shared.charts.plotly_chart` (the builders in ``viz/`` keep their
sizes for notebooks); the head view through its zoom (``views/explore.py``).

The same ``<style>`` carries, on the Turkish interface, Streamlit's own file-uploader words in Turkish
(:func:`uploader_style`; issue 50 point 6): Streamlit has no locale for them."""

from __future__ import annotations

import functools
import math
import re

import streamlit as st

from viz.text import text_width

from .strings import ASSETS, lang, t, t_plain
from .urlstate import UrlState

# the switch's values (the link's ``scale=...``, declared in pagestate) and their factors
URL = UrlState("app")
SCALES = dict(zip(URL.options("scale"), (1.0, 1.25, 1.5), strict=True))
DEFAULT = URL.param("scale").default

# plotly's sizes where a figure leaves them to the template: Streamlit's theme (1.67) draws a title at 16 px, axis
# and colour-bar titles at 14 px and the rest (ticks, legend, hover, annotations, text in the plot) at 12 px
BASE_PX = 12
TITLE_PX = 16
AXIS_TITLE_PX = 14
PLOTLY_HEIGHT = 450  # a figure without a height of its own
LEGEND_ROW_PX = 26  # a legend's row at the normal size, with its padding
_TAG = re.compile(r"<[^>]+>")


def scale_control() -> None:
    """The sidebar's "Text size" switch (Normal / Large / Projector), bound to the link's ``scale``."""
    URL.bind("scale")
    if st.session_state.get("scale") not in SCALES:  # not set, or a switch emptied by a test
        st.session_state["scale"] = DEFAULT
    st.segmented_control(t("text_size"), list(SCALES), key="scale", required=True,
                         format_func=lambda k: t(f"text_size_{k}"), help=t("text_size_help"))
    URL.sync("scale")


def factor() -> float:
    """The chosen text size as a factor of the normal one (1.0, 1.25 or 1.5)."""
    return SCALES.get(st.session_state.get("scale"), 1.0)


def fewer(n: int) -> int:
    """``n`` (tick labels an axis draws, the px a label's slot is judged by) divided by the text size's factor: at 1.5
    times the font, 40 labels on an axis take the room 60 took."""
    return max(1, round(n / factor()))


@functools.cache
def app_css() -> str:
    """``assets/css/app.css`` in a ``<style>`` (shipped, no CDN), read once per process: every run of every session
    draws it first (``app.py``)."""
    return f"<style>{(ASSETS / 'css' / 'app.css').read_text(encoding='utf-8')}</style>"


def style() -> str:
    """The ``<style>`` that sets ``--dk-scale`` for ``assets/css/app.css`` (an inline value: nothing is fetched),
    followed on the Turkish interface by :func:`uploader_style`."""
    return f"<style>:root {{ --dk-scale: {factor():g}; }}</style>" + uploader_style()


def css_string(text: str) -> str:
    """``text`` as a quoted CSS string: backslash, quote and line ends escaped, and ``<`` too, so that no text can
    close the ``<style>`` it sits in."""
    escaped = "".join(f"\\{ord(c):x} " if c in '\\"<>\n\r\f' else c for c in text)
    return f'"{escaped}"'


# Streamlit's file uploader (1.67) writes English into its drop zone whatever the page's language: the button's
# "Upload", "200MB per file • TOML" under it, and "Drag and drop a file here" over it while a file is dragged in.
DROPZONE = '[data-testid="stFileUploaderDropzone"]'
INSTRUCTIONS = '[data-testid="stFileUploaderDropzoneInstructions"]'


def uploader_style() -> str:
    """On the Turkish interface, a ``<style>`` that writes Streamlit's file-uploader words in Turkish (``uploader_*``
    strings; the limit is the server's ``maxUploadSize``, 10 MB in classroom mode); on the English one, nothing."""
    if lang() != "tr":
        return ""
    browse = css_string(t_plain("uploader_browse"))
    limit = css_string(t_plain("uploader_limit", mb=st.get_option("server.maxUploadSize")))
    drop = css_string(t_plain("uploader_drop"))
    label = f'{DROPZONE} > span button [data-testid="stMarkdownContainer"]'
    overlay = f"{DROPZONE} > div:not([data-testid]) > span:only-child"  # the chips of a file sit in another div
    return ("<style>\n"
            # the button's label hidden, the Turkish one in the label's box (which has app.css's size)
            f"{label} > p {{ display: none; }}\n"
            f"{label}::after {{ content: {browse}; }}\n"
            # the size limit (Streamlit's line also names the file types, which each uploader's label says already)
            f"{INSTRUCTIONS} span {{ font-size: 0; }}\n"
            f"{INSTRUCTIONS} span::after {{ content: {limit}; font-size: 0.875rem; }}\n"
            # the overlay while a file is dragged over the zone
            f"{overlay} {{ font-size: 0; }}\n"
            f"{overlay}::after {{ content: {drop}; font-size: 0.875rem; }}\n"
            "</style>")


def _times(font, default: float | None, f: float) -> None:
    """``font.size`` (or ``default`` where the figure leaves it to plotly; left alone when both are None) times
    ``f``, rounded to a tenth of a pixel."""
    size = font.size if font.size is not None else default
    if size is not None:
        font.size = round(float(size) * f, 1)


def scale_figure(fig, f: float, width: float | None = None):
    """``fig``'s text ``f`` times its size: the base font, title and subtitle, every axis's tick labels and title,
    legend, hover labels, colour bars, annotations and the text drawn in traces; sizes a figure leaves to the theme
    are written out (:data:`BASE_PX` ...). The margins a builder set for its text (a top margin over rotated key
    labels, a bottom one over a legend) grow by ``f`` too, and a figure's height by what its top and bottom margins
    gained, so its plot keeps its size; a legend under the plot moves down with the labels above it, one over the
    plot gets room under the title; labels of rows and columns stay apart (:func:`_fit_labels`; ``width``: the
    figure's width on the page when it has none of its own). Returns ``fig`` (changed in place; nothing for
    ``f`` = 1)."""
    if f == 1:
        return fig
    layout = fig.layout
    _times(layout.font, BASE_PX, f)
    _times(layout.title.font, TITLE_PX, f)
    _times(layout.title.subtitle.font, BASE_PX if layout.title.subtitle.text else None, f)
    for name in layout:
        if name.startswith(("xaxis", "yaxis")) and layout[name] is not None:
            _times(layout[name].tickfont, BASE_PX, f)
            _times(layout[name].title.font, AXIS_TITLE_PX, f)
    _times(layout.legend.font, BASE_PX, f)
    legend = layout.legend
    if legend.y is not None and legend.y < 0 and legend.yref != "container":
        legend.y *= f  # a legend under the plot: as much further down as the tick labels above it grew
    above = legend.y is not None and legend.y >= 1 and legend.yref != "container" and legend.yanchor == "bottom" \
        and layout.margin.t is not None
    _times(layout.legend.title.font, BASE_PX, f)
    _times(layout.hoverlabel.font, BASE_PX, f)
    for annotation in layout.annotations:  # subplot titles among them
        _times(annotation.font, BASE_PX, f)
    bars = [layout.coloraxis.colorbar] if layout.coloraxis.to_plotly_json() else []
    for trace in fig.data:
        for part in ("textfont", "insidetextfont", "outsidetextfont"):
            if part in trace:
                _times(trace[part], None, f)
        if "hoverlabel" in trace:
            _times(trace.hoverlabel.font, None, f)
        if "colorbar" in trace and trace.showscale is not False:
            bars.append(trace.colorbar)
        if "marker" in trace and "colorbar" in trace.marker and trace.marker.showscale:
            bars.append(trace.marker.colorbar)
    for bar in bars:
        _times(bar.tickfont, BASE_PX, f)
        _times(bar.title.font, BASE_PX, f)
    margin, grown = layout.margin, 0
    for side in ("t", "b", "l", "r"):
        if margin[side] is not None:
            added = round(margin[side] * (f - 1))
            margin[side] += added
            grown += added if side in ("t", "b") else 0
    if above:  # a legend over the plot, under the title: room for its taller row
        margin.t += round(LEGEND_ROW_PX * (f - 1)) + 8
        grown += round(LEGEND_ROW_PX * (f - 1)) + 8
    if grown:
        layout.height = (layout.height or PLOTLY_HEIGHT) + grown
    _fit_labels(fig, f, width)
    return fig


ROW_LINE = 1.4  # a tick label's row: its font size and a little air (the plot's height is an estimate too)
# an upright label's column: more air, as the plot's width is an estimate (colour bars and margins take their share)
COLUMN_LINE = 1.6


def _pitch(axis, plot_px: float) -> float | None:
    """Pixels between two neighbouring tick labels of an axis with its own labels (``tickmode`` "array": tokens,
    layers ...) over ``plot_px`` of plot; None for any other axis."""
    if axis.tickmode != "array" or axis.showticklabels is False or axis.tickvals is None:
        return None
    labelled = sorted(float(v) for v, text in zip(axis.tickvals, axis.ticktext or axis.tickvals) if str(text))
    if len(labelled) < 2:
        return None
    step = min(b - a for a, b in zip(labelled, labelled[1:])) or 1.0
    span = abs(axis.range[1] - axis.range[0]) if axis.range else labelled[-1] - labelled[0] + step
    share = (axis.domain[1] - axis.domain[0]) if axis.domain else 1.0
    return plot_px * share * step / span


def _thin(axis, plot_px: float, need: float | None, size: float) -> None:
    """A builder's own tick step (``dtick``: every layer, every second one) made a whole multiple larger where the
    larger numbers would touch: ``need`` px between two of them (rows), else the widest number and a gap (columns)."""
    try:
        step = float(axis.dtick)
    except (TypeError, ValueError):  # a date or log axis's step: left alone
        return
    lo, hi = sorted(float(v) for v in axis.range)
    if step <= 0 or (hi - lo) / step > 1000:
        return
    first = float(axis.tick0 or 0) + math.ceil((lo - float(axis.tick0 or 0)) / step) * step
    values = [first + i * step for i in range(int((hi - first) // step) + 1)]
    if need is None:
        need = max((text_width(f"{v:g}", size) for v in values), default=0.0) + 8
    pitch = plot_px * ((axis.domain[1] - axis.domain[0]) if axis.domain else 1.0) * step / (hi - lo)
    if 0 < pitch < need:
        times = math.ceil(need / pitch)
        axis.dtick = int(step * times) if step.is_integer() else step * times


def _fit_labels(fig, f: float, width: float | None) -> None:
    """Keep the larger tick labels of rows and upright columns (tokens, layers) apart.

    A figure of fixed height grows until each y label has :data:`ROW_LINE` times its font size (subplots stacked one
    above another: by ``f``, for their titles in the gaps). Columns cannot widen (a figure takes its column's
    ``width``, estimated by the caller, less its row labels and colour bars): an x label's font (at the angle the
    builder chose; upright: :data:`COLUMN_LINE`) grows only as far as its column allows, never below its normal size.
    Numbers at a builder's own step are thinned (:func:`_thin`); an axis title longer than its axis grows only as far
    as the axis allows. (A page that draws many labels passes fewer ticks at a larger text size.)"""
    layout = fig.layout
    top = layout.margin.t if layout.margin.t is not None else 100
    bottom = layout.margin.b if layout.margin.b is not None else 80
    plot_h = layout.height - top - bottom if layout.height is not None else None
    shown = min((w for w in (layout.width, width) if w), default=None)  # a wider figure shrinks to its column
    rows = [layout[name] for name in layout if name.startswith("yaxis") and layout[name] is not None]
    row_px = max((row.tickfont.size or BASE_PX * f for row in rows), default=BASE_PX * f)
    texts = [text for row in rows if row.tickmode == "array" for text in (row.ticktext or ())]
    texts += [y for trace in fig.data if "y" in trace and trace.y is not None and len(trace.y) < 500
              for y in trace.y if isinstance(y, str)]  # a bar chart's categories
    labels = max((text_width(str(text), row_px) for text in texts), default=0.0)
    bars = any(("colorbar" in trace and trace.showscale is not False) for trace in fig.data)
    left = max(layout.margin.l or 0, labels + 8)  # plotly pushes the margin for the row labels
    right = (layout.margin.r or 0) + (30 + 3 * BASE_PX * f if bars else 0)  # a colour bar and its numbers
    plot_w = shown - left - right if shown else None
    need = plot_h
    stacked = {tuple(row.domain) for row in rows if row.domain}
    if plot_h and len(stacked) > 1:  # subplots one above another: the gaps between them hold larger titles
        need = plot_h * f
    for name in layout:
        axis = layout[name] if name.startswith(("xaxis", "yaxis")) else None
        if axis is None:
            continue
        size = axis.tickfont.size or BASE_PX * f
        plot = plot_h if name.startswith("yaxis") else plot_w
        share = (axis.domain[1] - axis.domain[0]) if axis.domain else 1.0
        if name.startswith("yaxis"):
            length = plot_h * share if plot_h else None
        else:  # a title centred under its plot, which may sit right of long row labels: as far as the nearer edge
            centre = left + plot_w * sum(axis.domain or (0, 1)) / 2 if plot_w else None
            length = 2 * min(centre, shown - centre) if centre and shown and shown - centre > 0 else None
        if axis.title.text and axis.title.font.size and length:  # an axis title no longer than its axis (or figure)
            long = text_width(_TAG.sub("", axis.title.text), axis.title.font.size)
            if long > length - 10:
                title = axis.title.font.size
                axis.title.font.size = round(max(title / f, title * (length - 10) / long), 1)
        if plot and plot > 0 and axis.dtick is not None and axis.range is not None and axis.tickmode != "array":
            _thin(axis, plot, ROW_LINE * size if name.startswith("yaxis") else None, size)
        if name.startswith("yaxis") and plot_h:
            pitch = _pitch(axis, plot_h)
            if pitch and pitch < ROW_LINE * size:
                need = max(need, plot_h * ROW_LINE * size / pitch)
        elif name.startswith("xaxis") and plot_w and plot_w > 0 and axis.tickangle is not None:  # not plotly's "auto"
            pitch = _pitch(axis, plot_w)
            a = math.radians(abs(axis.tickangle) % 180)
            longest = max((text_width(str(text), size) for text in (axis.ticktext or ())), default=0.0)
            # the room a label takes along the axis: its length (flat) to its line's height (upright)
            room = longest * abs(math.cos(a)) + COLUMN_LINE * size * abs(math.sin(a))
            if pitch and pitch < room:
                axis.tickfont.size = round(max(size / f, size * pitch / room), 1)
    if plot_h and need > plot_h:
        layout.height = round(layout.height + need - plot_h)
