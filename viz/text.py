"""Token labels as plotly text.

plotly reads tick labels and hover text as a small subset of HTML: a special token such as ``<s>`` (XLM-R,
Llama) would start strikethrough and vanish, and a typed ``<b>`` would turn bold. Escaping ``&``, ``<``
and ``>`` as entities makes plotly draw the characters as they are.
"""

from __future__ import annotations

import math
import unicodedata
from typing import Iterable, Sequence


def shown(token: str) -> str:
    """A decoded token as plain visible text: spaces at its edges as ␣, newlines as ⏎, tabs as ⇥ (a prediction
    " chased" shows as "␣chased"; an empty string as ∅)."""
    text = token.replace("\r", "").replace("\n", "⏎").replace("\t", "⇥")
    stripped = text.strip(" ")
    lead, trail = len(text) - len(text.lstrip(" ")), len(text) - len(text.rstrip(" "))
    return "␣" * lead + stripped + "␣" * trail if stripped else ("␣" * len(text) or "∅")


def plotly_text(label: str) -> str:
    """One label with ``&``, ``<``, ``>`` escaped as HTML entities (plotly shows them literally)."""
    return str(label).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def plotly_labels(labels: Iterable[str]) -> list[str]:
    """:func:`plotly_text` of each label."""
    return [plotly_text(label) for label in labels]


# Estimated advance of one character in DejaVu Sans / Source Sans at 13 px (the widest Latin letters, W and
# M, take about 11 px; most take 7-8): generous, so a box sized from it holds its text. Wide (CJK): 13 px.
CHAR_W, WIDE_W = 8.0, 13.0
TICK_FONT_PX = 12  # plotly's default tick label size
TITLE_LINE_PX = 22  # one line of a figure title
AXIS_TITLE_PX = 26  # an axis title and its standoff


def text_width(text: str, size: float = 13.0) -> float:
    """Estimated width in px of ``text`` at font ``size`` px (see :data:`CHAR_W`); combining marks take none."""
    width = 0.0
    for ch in str(text):
        if unicodedata.combining(ch):
            continue
        width += WIDE_W if unicodedata.east_asian_width(ch) in ("W", "F") else CHAR_W
    return width * size / 13.0


def top_axis_margin(labels: Iterable[str], *, angle: float, title: str = "", axis_title: bool = True) -> int:
    """Top margin (px) for a figure whose x axis is drawn on top: the title (each ``<br>`` a line) above the
    axis title, above the tick labels at ``angle`` degrees. plotly pushes the margin for the ticks but not
    for the title, so a title at the container's top ran into long, rotated labels (issue 13).

    Args:
        labels: the tick labels drawn (as plotly text). angle: their tick angle (0, -60, -90 ...).
        title: the figure title; axis_title: whether the axis has a title.

    Returns:
        the margin in px.
    """
    longest = max((text_width(label, TICK_FONT_PX) for label in labels), default=0.0)
    a = math.radians(abs(angle))
    ticks = longest * math.sin(a) + (TICK_FONT_PX + 2) * math.cos(a) + 10
    titled = (TITLE_LINE_PX * (title.count("<br>") + 1) + 10) if title else 0
    return int(math.ceil(titled + (AXIS_TITLE_PX if axis_title else 0) + ticks))


def tick_angle(labels: Sequence[str], slot_px: float) -> int:
    """0 when every label fits flat in its ``slot_px`` of axis, else -90 (vertical labels need only a line's
    height each; at -60 degrees neighbours' boxes overlap)."""
    longest = max((text_width(label, TICK_FONT_PX) for label in labels), default=0.0)
    return 0 if longest + 4 <= slot_px else -90
