"""Token labels as plotly text.

plotly reads tick labels and hover text as a small subset of HTML: a special token such as ``<s>`` (XLM-R,
Llama) would start strikethrough and vanish, and a typed ``<b>`` would turn bold. Escaping ``&``, ``<``
and ``>`` as entities makes plotly draw the characters as they are.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable, Sequence


def _visible(ch: str) -> str:
    """One character that draws as nothing, drawn as a sign: a no-break or other Unicode space (category Zs, not
    the plain space) as ⍽, a line or paragraph separator as ⏎, a zero-width or other format or control character
    (Cf, Cc: U+200B, U+FEFF, U+00AD ...) and an unassigned or private one as its code point ‹U+200B›."""
    kind = unicodedata.category(ch)
    if kind == "Zs" and ch != " ":
        return "⍽"
    if kind in ("Zl", "Zp"):
        return "⏎"
    if kind.startswith("C"):  # format, control, unassigned, private use, surrogate
        return f"‹U+{ord(ch):04X}›"
    return ch


def shown(token: str) -> str:
    """A decoded token as plain visible text: spaces at its edges as ␣, newlines as ⏎, tabs as ⇥ (a prediction
    " chased" shows as "␣chased"; an empty string as ∅), and every other character that draws as nothing as a
    sign (:func:`_visible`: a no-break space as ⍽, U+200B as ‹U+200B›), so no cell of a table or figure is blank
    (issue 33)."""
    text = token.replace("\r", "").replace("\n", "⏎").replace("\t", "⇥")
    text = "".join(ch if ch == " " or ch.isprintable() and unicodedata.category(ch) != "Zs" else _visible(ch)
                   for ch in text)
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


_TAG = re.compile(r"<[^>]+>")


def wrap_title(title: str, width_px: float, size: float = 15.0) -> tuple[str, int]:
    """A figure title broken with ``<br>`` at spaces into lines of at most ``width_px`` (estimated at ``size`` px,
    tags such as ``<b>`` not counted; a title's own ``<br>`` kept), so that a figure in a narrow column does not cut
    its title (plotly never wraps one). Returns ``(title, lines added)``."""
    out, added = [], 0
    for line in str(title).split("<br>"):
        words, current = line.split(" "), ""
        for word in words:
            candidate = f"{current} {word}" if current else word
            if current and text_width(_TAG.sub("", candidate), size) > width_px:
                out.append(current)
                added += 1
                current = word
            else:
                current = candidate
        out.append(current)
    return "<br>".join(out), added
