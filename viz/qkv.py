"""Figures of the Q/K/V walk-through: vectors as coloured strips, softmax weights, weighted values.

Pure plotly: numpy arrays and already translated strings in, figures out. Rows and columns are
positions (0, 1, 2 ...) with ``ticktext`` set to the labels, because plotly merges repeated category
labels ("the" twice would collapse into one row).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from . import numbers
from .text import plotly_labels
from .traces import add_trace, figure

DIVERGING = "RdBu_r"  # negative blue, zero white, positive red
ROW_PX = 22


def _symmetric_range(values: np.ndarray) -> float:
    v = np.asarray(values, dtype=np.float64)
    finite = v[np.isfinite(v)]
    return float(max(np.abs(finite).max(initial=0.0), 1e-6))


def vector_strips(rows: np.ndarray, labels: Sequence[str], *, title: str = "", dim_title: str = "dimension",
                  value_title: str = "value", highlight: Sequence[int] = (), zmax: float | None = None,
                  height: int | None = None, lang: str = "en") -> go.Figure:
    """Each row a vector drawn as a strip of coloured cells (blue negative, red positive).

    Args:
        rows: float ``(r, d)``: e.g. the query vector then every key vector of one head.
        labels: one label per row (already including any prefix such as "q" / "k").
        title, dim_title, value_title: translated texts.
        highlight: row indices drawn with a bold label (the chosen query token).
        zmax: colour range ±zmax (default: the largest |value|).
        height: px (default grows with the rows).
        lang: how numbers are written (colour bar, hover; ``tr``: ``0,25``).

    Returns:
        plotly Figure with one ``Heatmap`` (z = rows, top row first).

    Raises:
        ValueError: labels that do not match the rows.
    """
    m = np.asarray(rows, dtype=np.float32)
    if m.ndim != 2 or len(labels) != m.shape[0]:
        raise ValueError(f"{len(labels)} labels for rows of shape {m.shape}")
    r, d = m.shape
    zr = zmax if zmax is not None else _symmetric_range(m)
    shown = plotly_labels(labels)
    ticks = [f"<b>{lab}</b>" if i in set(highlight) else lab for i, lab in enumerate(shown)]
    fig = figure(go.Heatmap(
        z=m, x=np.arange(d), y=np.arange(r), colorscale=DIVERGING, zmid=0.0, zmin=-zr, zmax=zr,
        colorbar=dict(title=dict(text=value_title), thickness=12, tickformat=numbers.tick_format(zr)),
        customdata=np.repeat(np.asarray(shown, dtype=object)[:, None], d, axis=1),
        hovertemplate=f"%{{customdata}}<br>{dim_title} %{{x}}<br>{value_title}: %{{z:{numbers.d3(4)}}}<extra></extra>",
    ))
    fig.update_yaxes(tickmode="array", tickvals=list(range(r)), ticktext=ticks, autorange="reversed")
    fig.update_xaxes(title_text=dim_title)
    fig.update_layout(title=dict(text=title), height=height or max(160, 70 + ROW_PX * r),
                      margin=dict(l=10, r=10, t=40 if title else 10, b=40))
    return numbers.style(fig, lang)


def weight_bars(labels: Sequence[str], weights: np.ndarray, *, compare: np.ndarray | None = None,
                names: tuple[str, str] = ("weights", "compared"), title: str = "",
                weight_title: str = "weight", blocked: np.ndarray | None = None, lang: str = "en") -> go.Figure:
    """Bar chart of one query's attention weights over the keys, optionally next to a second row
    (e.g. the same row at another temperature).

    Args:
        labels: key labels, one per weight.
        weights: float ``(k,)`` in [0, 1].
        compare: optional float ``(k,)`` drawn as a second bar group.
        names: legend names of the two groups (translated).
        blocked: bool ``(k,)``, True for keys the mask hides (their bars are grey).
        lang: how numbers are written (``tr``: ``0,25``).

    Returns:
        plotly Figure (x: key positions with the labels as tick text, y: weight in [0, 1]).

    Raises:
        ValueError: a label count that does not match ``weights``.
    """
    w = np.asarray(weights, dtype=np.float64)
    k = len(w)
    if len(labels) != k:
        raise ValueError(f"{len(labels)} labels for {k} weights")
    colours = None
    if blocked is not None:
        colours = ["#bbbbbb" if b else "#d6604d" for b in np.asarray(blocked, dtype=bool)]
    fig = figure(go.Bar(x=np.arange(k), y=w, name=names[0], marker_color=colours or "#d6604d",
                           customdata=plotly_labels(labels),
                           hovertemplate=f"%{{customdata}}<br>{weight_title}: "
                                         f"%{{y:{numbers.d3(4)}}}<extra>{names[0]}</extra>"))
    if compare is not None:
        add_trace(fig, go.Bar(x=np.arange(k), y=np.asarray(compare, dtype=np.float64), name=names[1],
                             marker_color="#4393c3", customdata=plotly_labels(labels),
                             hovertemplate=f"%{{customdata}}<br>{weight_title}: "
                                           f"%{{y:{numbers.d3(4)}}}<extra>{names[1]}</extra>"))
    fig.update_xaxes(tickmode="array", tickvals=list(range(k)), ticktext=plotly_labels(labels))
    fig.update_yaxes(title_text=weight_title, range=[0, 1.02])
    fig.update_layout(title=dict(text=title), barmode="group", height=300, margin=dict(l=10, r=10, t=40, b=40),
                      legend=dict(orientation="h", y=1.12, x=1, xanchor="right"))
    return numbers.style(fig, lang)


def weighted_values(values: np.ndarray, weights: np.ndarray, output: np.ndarray, labels: Sequence[str], *,
                    sum_label: str = "Σ = output", title: str = "", dim_title: str = "dimension",
                    value_title: str = "value", lang: str = "en") -> go.Figure:
    """The weighted sum of value vectors: one strip per key, ``a_j · v_j``, then their sum (the head's
    output for this query, Vaswani et al. 2017, eq. 1).

    Args:
        values: float ``(k, d)`` value vectors. weights: float ``(k,)``. output: float ``(d,)``.
        labels: key labels (each row is labelled "weight × v(label)").
        lang: how the weights in the labels are written (``en`` 0.25, ``tr`` 0,25).

    Returns:
        plotly Figure (rows: the k scaled value vectors, then the sum).

    Raises:
        ValueError: rows that do not match the labels (see :func:`vector_strips`).
    """
    v = np.asarray(values, dtype=np.float64)
    a = np.asarray(weights, dtype=np.float64)
    rows = np.vstack([a[:, None] * v, np.asarray(output, dtype=np.float64)[None]])
    row_labels = [f"{numbers.num(w, 2, lang)} × v({lab})" for w, lab in zip(a, labels)] + [sum_label]
    return vector_strips(rows, row_labels, title=title, dim_title=dim_title, value_title=value_title,
                         highlight=[len(row_labels) - 1], lang=lang)


def rope_before_after(before: np.ndarray, after: np.ndarray, labels: Sequence[str], *, before_word: str = "before",
                      after_word: str = "after", title: str = "", dim_title: str = "dimension",
                      value_title: str = "value", lang: str = "en") -> go.Figure:
    """Vectors before and after the RoPE rotation, interleaved row by row ("x (before)", "x (after)").

    The rotation turns each pair of dimensions (i, i + d/2) by an angle that grows with the position
    (Su et al. 2021, eq. 34): lengths stay the same, directions change.

    Args:
        before, after: float ``(r, d)``. labels: one per vector. lang: how numbers are written.

    Returns:
        plotly Figure with ``2 r`` rows.

    Raises:
        ValueError: label count not ``r`` (see :func:`vector_strips`).
    """
    b = np.asarray(before, dtype=np.float64)
    a = np.asarray(after, dtype=np.float64)
    rows = np.empty((2 * b.shape[0], b.shape[1]))
    rows[0::2], rows[1::2] = b, a
    row_labels = [x for lab in labels for x in (f"{lab} ({before_word})", f"{lab} ({after_word})")]
    return vector_strips(rows, row_labels, title=title, dim_title=dim_title, value_title=value_title, lang=lang)
