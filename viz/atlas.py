"""Figures and snippets of the head atlas: a metric over every layer × head, a head's strongest examples as text
with the query and the keys it attends to marked, and a head's queries and keys in one plane.

Pure builders: numpy arrays and strings in, plotly figures or HTML out (no torch, no streamlit). Corpus text is
never markup: the snippet escapes every character of it (:func:`html.escape`), the figures pass tokens through
:func:`viz.text.plotly_text` and put them in ``customdata``, never inside a hover template.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from . import numbers
from .pruning import head_grid
from .text import plotly_text, shown
from .traces import add_trace, figure

SELECTED_COLOUR = "#d62728"
QUERY_COLOUR = "#1f77b4"
KEY_RGB = (255, 127, 14)
#: characters of context kept on each side of the marked tokens of a long text
CONTEXT = 90
#: a text up to this long is shown whole
WHOLE = 420
#: colour of each token kind in the queries-and-keys plane
KIND_COLOURS = {"word": "#1f77b4", "punctuation": "#2ca02c", "special": "#9467bd", "first": "#d62728"}
ROLE_SYMBOLS = {"query": "circle", "key": "diamond-open"}


def metric_grid(values: np.ndarray, *, selected: tuple[int, int] | None = None, title: str = "",
                score_title: str = "value", layer_title: str = "layer", head_title: str = "head",
                height: int | None = None, lang: str = "en") -> go.Figure:
    """One metric over a stack's layers × heads (:func:`viz.pruning.head_grid`: a click on a cell reports its layer
    (``y``) and head (``x``)), the selected head outlined.

    Args:
        values: float ``(layers, heads)``, NaN where the metric has no value (drawn blank).
        selected: ``(layer, head)`` to outline, or None.
        height: px (default: 18 px a layer, between 260 and 520, so a 30-layer model fits a 720-px screen).
    """
    values = np.asarray(values, dtype=np.float64)
    layers, heads = values.shape
    height = height or int(min(520, max(260, 110 + 18 * layers)))
    fig = head_grid(values, np.zeros(values.shape, dtype=bool), title=title, score_title=score_title,
                    layer_title=layer_title, head_title=head_title, height=height, lang=lang)
    if selected is not None:  # a shape, not a trace: it fits the cell exactly and takes no clicks
        layer, head = selected
        fig.add_shape(type="rect", x0=head - 0.5, x1=head + 0.5, y0=layer - 0.5, y1=layer + 0.5,
                      line=dict(width=3, color=SELECTED_COLOUR), layer="above")
    return numbers.style(fig, lang)


def _windows(marks: list[tuple[int, int]], length: int, context: int) -> list[tuple[int, int]]:
    """Character ranges to show: each mark with ``context`` characters around it, overlaps merged, the whole text
    when it is short."""
    if length <= WHOLE or not marks:
        return [(0, length)]
    spans = sorted((max(0, s - context), min(length, e + context)) for s, e in marks)
    out = [list(spans[0])]
    for s, e in spans[1:]:
        if s <= out[-1][1] + 10:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def snippet_html(content: str, starts: Sequence[int], ends: Sequence[int], query: int, keys: Sequence[int],
                 weights: Sequence[float], *, query_title: str = "query", key_title: str = "key",
                 hidden_title: str = "token without characters", context: int = CONTEXT, min_weight: float = 0.01,
                 lang: str = "en") -> str:
    """A corpus text as safe HTML with one query token and its strongest keys marked.

    Every character of ``content`` is escaped (:func:`html.escape`): a text such as ``<b>x</b> *y*`` is shown as
    those characters, never as bold or emphasis. The query token gets a blue box, each key an orange background
    as strong as its weight (tooltip: the weight); a marked token without characters (an added control token, the
    second byte-level piece of a character) is drawn as ``◆``. A long text is cut to windows of ``context``
    characters around the marks, joined by ``…``.

    Args:
        content: the text. starts, ends: each token's character span (end exclusive).
        query: the query's token index. keys, weights: the keys' token indices (-1: none) and weights in [0, 1];
            keys under ``min_weight`` are not marked (the strongest always is).
        query_title, key_title, hidden_title: tooltips (already translated).

    Returns:
        An HTML string: one ``<div class="atlas-snippet">``, inline styles only (no script).
    """
    n = len(starts)
    marks: dict[tuple[int, int], dict] = {}

    def mark(index: int, role: str, weight: float = 0.0) -> None:
        if not 0 <= index < n:
            return
        span = (int(starts[index]), int(ends[index]))
        entry = marks.setdefault(span, {"query": False, "weight": 0.0})
        if role == "query":
            entry["query"] = True
        else:
            entry["weight"] = max(entry["weight"], float(weight))

    mark(int(query), "query")
    top = max((float(w) for k, w in zip(keys, weights) if int(k) >= 0), default=0.0)
    for k, w in zip(keys, weights):
        if int(k) >= 0 and float(w) > 0 and (float(w) >= min_weight or float(w) == top):
            mark(int(k), "key", float(w))
    length = len(content)
    windows = _windows([(s, max(e, s)) for s, e in marks], length, context)
    parts = []
    for number, (w0, w1) in enumerate(windows):
        if number or w0 > 0:
            parts.append('<span style="color:#888"> … </span>')
        cursor = w0
        for (s, e), entry in sorted(marks.items()):
            if s < cursor or s > w1 or e > w1:
                continue
            parts.append(html.escape(content[cursor:s]))
            parts.append(_marked(content[s:e], entry, query_title, key_title, hidden_title, lang))
            cursor = max(cursor, e)
        parts.append(html.escape(content[cursor:w1]))
    if windows[-1][1] < length:
        parts.append('<span style="color:#888"> …</span>')
    return ('<div class="atlas-snippet" style="font-size:1rem;line-height:1.9;padding:0.35rem 0.7rem;'
            'margin:0.2rem 0;border-left:3px solid #d0d0d0;background:#fafafa;white-space:pre-wrap;'
            'overflow-wrap:anywhere;">' + "".join(parts) + "</div>")


def _marked(text: str, entry: dict, query_title: str, key_title: str, hidden_title: str, lang: str) -> str:
    """One marked token as a ``<span>`` (its text escaped)."""
    style, tips = [], []
    if entry["weight"] > 0:
        alpha = 0.18 + 0.82 * min(1.0, entry["weight"])
        style.append(f"background:rgba({KEY_RGB[0]},{KEY_RGB[1]},{KEY_RGB[2]},{alpha:.2f})")
        tips.append(f"{key_title}: {numbers.num(entry['weight'], 3, lang)}")
    if entry["query"]:
        style.append(f"outline:2px solid {QUERY_COLOUR};outline-offset:1px;font-weight:600")
        tips.insert(0, query_title)
    style.append("border-radius:3px;padding:0 1px")
    body = html.escape(text) if text else "◆"
    if not text:
        tips.append(hidden_title)
    return f'<span style="{";".join(style)}" title="{html.escape(" · ".join(tips))}">{body}</span>'


def qk_scatter(x: np.ndarray, y: np.ndarray, role: Sequence[str], kind: Sequence[str], token: Sequence[str],
               text: Sequence[int], position: Sequence[int], *, role_names: dict[str, str],
               kind_names: dict[str, str], title: str = "", axis_titles: tuple[str, str] = ("PC 1", "PC 2"),
               text_title: str = "text", position_title: str = "position", height: int = 520,
               lang: str = "en") -> go.Figure:
    """A head's queries and keys in one plane (:func:`models.atlas.embedding.joint_embedding`): queries and keys in
    two marker shapes, each kind of token (word, punctuation, special, first) in its own colour; the hover names
    the token (escaped, in ``customdata``), its text and position.

    Args:
        x, y: float ``(points,)``. role: ``query``/``key`` per point. kind: ``first``, ``special``,
            ``punctuation`` or ``word``. token: the token's text. text, position: corpus text index and token
            index. role_names, kind_names: legend names (translated).
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    roles, kinds = np.asarray(role, dtype=object), np.asarray(kind, dtype=object)
    labels = np.asarray([plotly_text(shown(str(t))) for t in token], dtype=object)
    texts, positions = np.asarray(text), np.asarray(position)
    fig = figure()
    for r in ("query", "key"):
        for k in ("word", "punctuation", "special", "first"):
            pick = (roles == r) & (kinds == k)
            if not pick.any():
                continue
            custom = np.stack([labels[pick], texts[pick].astype(object), positions[pick].astype(object)], axis=1)
            name = f"{role_names.get(r, r)} · {kind_names.get(k, k)}"
            add_trace(fig, go.Scatter(
                x=x[pick], y=y[pick], mode="markers", name=plotly_text(name), customdata=custom,
                marker=dict(symbol=ROLE_SYMBOLS[r], color=KIND_COLOURS[k], size=7 if r == "query" else 8,
                            opacity=0.65, line=dict(width=1.2, color=KIND_COLOURS[k])),
                hovertemplate=(f"<b>%{{customdata[0]}}</b><br>{plotly_text(name)}<br>"
                               f"{plotly_text(text_title)} %{{customdata[1]}}, {plotly_text(position_title)} "
                               "%{customdata[2]}<extra></extra>")))
    fig.update_layout(title=dict(text=title), height=height, margin=dict(l=50, r=20, t=60, b=50),
                      xaxis=dict(title=dict(text=axis_titles[0]), zeroline=False),
                      yaxis=dict(title=dict(text=axis_titles[1]), zeroline=False, scaleanchor="x", scaleratio=1),
                      legend=dict(orientation="v", yanchor="top", y=1, x=1.02), plot_bgcolor="white")
    return numbers.style(fig, lang)
