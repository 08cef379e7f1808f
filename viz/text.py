"""Token labels as plotly text.

plotly reads tick labels and hover text as a small subset of HTML: a special token such as ``<s>`` (XLM-R,
Llama) would start strikethrough and vanish, and a typed ``<b>`` would turn bold. Escaping ``&``, ``<``
and ``>`` as entities makes plotly draw the characters as they are.
"""

from __future__ import annotations

from typing import Iterable


def plotly_text(label: str) -> str:
    """One label with ``&``, ``<``, ``>`` escaped as HTML entities (plotly shows them literally)."""
    return str(label).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def plotly_labels(labels: Iterable[str]) -> list[str]:
    """:func:`plotly_text` of each label."""
    return [plotly_text(label) for label in labels]
