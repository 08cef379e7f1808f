"""The figure of a live class's revealed question (issue 29): how many students picked each choice, beside the
choice the model measured. Pure plotly; labels arrive translated and are drawn as plain text (plotly writes a
trace's ``y`` labels and ``text`` as text, and HTML-like characters in them are escaped here)."""

from __future__ import annotations

import html
from collections.abc import Sequence

import plotly.graph_objects as go

from . import numbers
from .traces import figure

CLASS_COLOUR = "#4393c3"
MODEL_COLOUR = "#d6604d"
BAR_PX = 34  # one bar's height, readable from the back of a room
MAX_LABEL = 40  # characters of a choice's label on the axis (the full label in the hover)


def _plain(text: str, limit: int | None = None) -> str:
    """``text`` as plotly draws it literally: its pseudo-HTML (``<b>``, ``<br>``, ``&amp;``) escaped, cut to
    ``limit`` characters."""
    text = str(text)
    if limit is not None and len(text) > limit:
        text = text[:limit - 1] + "…"
    return html.escape(text, quote=False)


def answers_figure(labels: Sequence[str], counts: Sequence[int], *, model_index: int | None = None,
                   model_label: str = "model", count_title: str = "students", title: str = "",
                   lang: str = "en") -> go.Figure:
    """Horizontal bars: one per choice, in the question's order from the top, its length the number of students
    who picked it and its text ``n (share)``; the model's measured choice (``model_index``) in another colour and
    marked ``model_label``.

    Args:
        labels: the choices as the interface shows them (translated, plain text).
        counts: students per choice (whole numbers >= 0), same length.
        model_index: the model's answer among ``labels`` (None: not measured).
        lang: how numbers are written (``tr``: ``%40``, ``1.234``).

    Returns:
        plotly Figure.

    Raises:
        ValueError: ``labels`` and ``counts`` differ in length.
    """
    if len(labels) != len(counts):
        raise ValueError(f"{len(labels)} labels for {len(counts)} counts")
    total = sum(int(c) for c in counts)
    shown = [_plain(label, MAX_LABEL) for label in labels]
    if model_index is not None and 0 <= model_index < len(shown):
        shown[model_index] = f"<b>{shown[model_index]}</b> ◀ {_plain(model_label)}"
    texts = [f"{numbers.integer(c, lang)} ({numbers.percent(c / total if total else 0.0, 0, lang)})" for c in counts]
    colours = [MODEL_COLOUR if i == model_index else CLASS_COLOUR for i in range(len(labels))]
    fig = figure(go.Bar(x=[int(c) for c in counts], y=list(range(len(labels))), orientation="h",
                           marker_color=colours, text=texts, textposition="auto", cliponaxis=False,
                           customdata=[_plain(label) for label in labels],
                           hovertemplate="%{customdata}<br>%{x}<extra></extra>"))
    peak = max([int(c) for c in counts] + [1])
    fig.update_yaxes(tickmode="array", tickvals=list(range(len(labels))), ticktext=shown, autorange="reversed",
                     tickfont=dict(size=15), automargin=True)
    fig.update_xaxes(title_text=_plain(count_title), range=[0, peak * 1.25], dtick=max(1, round(peak / 5)),
                     tickformat="d", zeroline=True)
    fig.update_layout(title=dict(text=_plain(title)), height=90 + BAR_PX * max(len(labels), 2),
                      margin=dict(l=10, r=10, t=40 if title else 10, b=10), showlegend=False,
                      font=dict(size=14), bargap=0.25)
    return numbers.style(fig, lang)
