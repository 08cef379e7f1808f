"""Figures of the positions lesson: sinusoidal encoding, RoPE rotations and its distance-only dot
product, ALiBi slopes and bias, and the word-order experiment. Pure plotly."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from . import numbers
from .text import plotly_labels
from .traces import add_trace, figure

DIFF_FLOOR = 0.05  # attention weight: the smallest half-range of a difference panel's colours
DIVERGING = "RdBu_r"


def _ticks(fig: go.Figure, labels: Sequence[str], axis: str, row=None, col=None) -> None:
    kw = dict(tickmode="array", tickvals=list(range(len(labels))), ticktext=plotly_labels(labels))
    if row is not None:
        kw.update(row=row, col=col)
    (fig.update_xaxes if axis == "x" else fig.update_yaxes)(**kw)


def sinusoidal_heatmap(pe: np.ndarray, labels: Sequence[str], *, title: str = "", dim_title: str = "dimension",
                       position_title: str = "position", lang: str = "en") -> go.Figure:
    """The sinusoidal encoding matrix ``(n, d)`` (Vaswani et al. 2017, §3.5): one row per position.

    Args:
        pe: float ``(n, d)`` in [-1, 1] (``models.lessons.positions.sinusoidal_encoding``). labels: one per position
            (e.g. "0 · Kedi"). lang: how numbers are written (``tr``: ``0,25``).

    Returns:
        plotly Figure (diverging colours fixed to [-1, 1]).
    """
    m = np.asarray(pe, dtype=np.float32)
    n, d = m.shape
    fig = figure(go.Heatmap(z=m, x=np.arange(d), y=np.arange(n), colorscale=DIVERGING, zmin=-1, zmax=1, zmid=0,
                               hovertemplate=f"{position_title} %{{y}}<br>{dim_title} %{{x}}<br>"
                                             f"%{{z:{numbers.d3(3)}}}<extra></extra>"))
    _ticks(fig, labels, "y")
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title_text=dim_title)
    fig.update_layout(title=dict(text=title), height=max(220, 80 + 22 * n), margin=dict(l=10, r=10, t=40, b=40))
    return numbers.style(fig, lang)


def rope_rotations(angles: np.ndarray, pairs: Sequence[int], *, title: str = "", pair_word: str = "pair",
                   position_title: str = "position", lang: str = "en") -> go.Figure:
    """RoPE as rotations: for a few dimension pairs, where a unit vector ends up at each position.

    Pair ``i`` turns by ``pos · θ^(-2i/d)`` (Su et al. 2021, eq. 15): the first pairs turn fast
    (fine, local position), the last ones slowly (coarse, long-range position).

    Args:
        angles: float ``(positions, pairs_total)`` in radians (from ``models.lessons.positions.rope_angles``).
        pairs: which pair indices to draw (one small panel each).
        lang: how numbers are written (``tr``: ``12,5°``).

    Returns:
        plotly Figure with one panel per pair.

    Raises:
        IndexError: a pair index beyond ``angles``' second axis.
    """
    a = np.asarray(angles, dtype=np.float64)
    n = a.shape[0]
    fig = make_subplots(rows=1, cols=len(pairs), subplot_titles=[f"{pair_word} {p}" for p in pairs])
    circle = np.linspace(0, 2 * np.pi, 121)
    for c, p in enumerate(pairs, 1):
        add_trace(fig, go.Scatter(x=np.cos(circle), y=np.sin(circle), mode="lines", line=dict(color="#cccccc"),
                                 hoverinfo="skip", showlegend=False), row=1, col=c)
        x, y = np.cos(a[:, p]), np.sin(a[:, p])
        add_trace(fig, go.Scatter(
            x=x, y=y, mode="markers+text", text=[str(i) for i in range(n)], textposition="top center",
            marker=dict(size=8, color=np.arange(n), colorscale="Viridis"), showlegend=False,
            customdata=np.degrees(a[:, p]) % 360,
            hovertemplate=f"{position_title} %{{text}}<br>%{{customdata:{numbers.d3(1)}}}°<extra></extra>"),
            row=1, col=c)
        for i in range(n):
            add_trace(fig, go.Scatter(x=[0, x[i]], y=[0, y[i]], mode="lines", line=dict(width=1, color="#888888"),
                                     hoverinfo="skip", showlegend=False), row=1, col=c)
        fig.update_xaxes(range=[-1.3, 1.3], visible=False, row=1, col=c)
        fig.update_yaxes(range=[-1.3, 1.3], visible=False, scaleanchor=f"x{c if c > 1 else ''}", row=1, col=c)
    fig.update_layout(title=dict(text=title), height=320, margin=dict(l=10, r=10, t=60, b=10))
    return numbers.style(fig, lang)


def distance_grid(grid: np.ndarray, *, title: str = "", query_title: str = "query position m",
                  key_title: str = "key position n", value_title: str = "q·k", lang: str = "en") -> go.Figure:
    """``G[m, n] = (R_m q)·(R_n k)`` over positions: constant along each diagonal when the dot
    product depends only on n − m (Su et al. 2021, eq. 16).

    Args:
        grid: float ``(positions, positions)`` (``models.lessons.positions.rope_dot_grid``).
        lang: how numbers are written (``tr``: ``0,25``).

    Returns:
        plotly Figure, rows m, columns n, colours symmetric around 0.
    """
    g = np.asarray(grid, dtype=np.float32)
    zr = float(max(np.abs(g).max(initial=0.0), 1e-6))
    fig = figure(go.Heatmap(z=g, colorscale=DIVERGING, zmid=0, zmin=-zr, zmax=zr,
                               colorbar=dict(title=dict(text=value_title), tickformat=numbers.tick_format(zr)),
                               hovertemplate=f"m=%{{y}}, n=%{{x}}<br>{value_title}: "
                                             f"%{{z:{numbers.d3(4)}}}<extra></extra>"))
    fig.update_yaxes(title_text=query_title, autorange="reversed")
    fig.update_xaxes(title_text=key_title)
    fig.update_layout(title=dict(text=title), height=420, margin=dict(l=10, r=10, t=40, b=40))
    return numbers.style(fig, lang)


def alibi_figure(slopes: np.ndarray, bias: np.ndarray, labels: Sequence[str], head: int, *, title_slopes: str = "",
                 title_bias: str = "", head_word: str = "head", slope_word: str = "slope m",
                 lang: str = "en") -> go.Figure:
    """ALiBi (Press et al. 2021, §3): the per-head slopes (bars, the chosen head highlighted) and the
    chosen head's bias matrix ``-m·(i − j)`` (blocked cells NaN, drawn empty).

    Args:
        slopes: float ``(heads,)`` (``models.lessons.positions.alibi_slopes``). bias: float ``(n, n)``
            (``models.lessons.positions.alibi_bias``). labels: n token labels. head: chosen head (0-based).
        lang: how numbers are written (``tr``: ``0,0039``).

    Returns:
        plotly Figure with two panels.
    """
    s = np.asarray(slopes, dtype=np.float64)
    b = np.asarray(bias, dtype=np.float64)
    fig = make_subplots(rows=1, cols=2, column_widths=[0.4, 0.6], subplot_titles=[title_slopes, title_bias])
    add_trace(fig, go.Bar(x=np.arange(len(s)), y=s,
                         marker_color=["#d6604d" if i == head else "#92c5de" for i in range(len(s))],
                         hovertemplate=f"{head_word} %{{x}}<br>{slope_word} = %{{y:{numbers.d3(5)}}}<extra></extra>",
                         showlegend=False), row=1, col=1)
    fig.update_xaxes(title_text=head_word, row=1, col=1)
    fig.update_yaxes(title_text=slope_word, row=1, col=1)
    add_trace(fig, go.Heatmap(z=b, x=np.arange(b.shape[1]), y=np.arange(b.shape[0]), colorscale="Blues_r",
                             zmax=0,
                             colorbar=dict(thickness=12,
                                           tickformat=numbers.tick_format(np.nanmax(np.abs(b), initial=0.0))),
                             hovertemplate=f"i=%{{y}}, j=%{{x}}<br>%{{z:{numbers.d3(3)}}}<extra></extra>"),
                  row=1, col=2)
    _ticks(fig, labels, "x", row=1, col=2)
    _ticks(fig, labels, "y", row=1, col=2)
    fig.update_yaxes(autorange="reversed", row=1, col=2)
    fig.update_layout(height=380, margin=dict(l=10, r=10, t=50, b=40))
    return numbers.style(fig, lang)


def word_order_figure(words: Sequence[str], a: np.ndarray, b: np.ndarray, diff: np.ndarray, *,
                      titles: tuple[str, str, str] = ("A", "B", "A − B"), query_title: str = "query word",
                      key_title: str = "key word", lang: str = "en") -> go.Figure:
    """Three word-level attention matrices side by side: sentence A, sentence B (rows and columns put
    in A's word order), and their difference (diverging colours, centred on 0). Each cell is annotated.

    Args:
        words: W labels (A's order). a, b, diff: float ``(W, W)`` (``models.lessons.positions.WordOrder``
            ``attn_a``/``attn_b``/``diff`` of one layer and head).
        lang: how the cells' numbers are written (``tr``: ``0,25``).

    Returns:
        plotly Figure with three panels.
    """
    w = list(words)
    fig = make_subplots(rows=1, cols=3, subplot_titles=list(titles), horizontal_spacing=0.08)
    # the colour range never shrinks below ±0.05 of attention weight: an unchanged map is white, not a
    # ±1e-6 colour bar that paints rounding noise as a difference
    dr = float(max(np.abs(diff).max(initial=0.0), DIFF_FLOOR))
    panels: tuple[tuple[np.ndarray, str, dict[str, Any]], ...] = (
        (a, "Blues", dict(zmin=0, zmax=1)), (b, "Blues", dict(zmin=0, zmax=1)),
        (diff, DIVERGING, dict(zmin=-dr, zmax=dr, zmid=0, colorbar=dict(tickformat=numbers.tick_format(dr)))))
    for c, (m, scale, kw) in enumerate(panels, 1):
        m = np.asarray(m, dtype=np.float64)
        add_trace(fig, go.Heatmap(z=m, x=np.arange(len(w)), y=np.arange(len(w)), colorscale=scale, showscale=c == 3,
                                 # cells written from values rounded first, so no "-0.00"
                                 text=np.round(m, 2) + 0.0, texttemplate=f"%{{text:{numbers.d3(2, sign=c == 3)}}}",
                                 hovertemplate=f"{query_title} %{{y}} → {key_title} %{{x}}: "
                                               f"%{{z:{numbers.d3(4)}}}<extra></extra>",
                                 **kw), row=1, col=c)
        _ticks(fig, w, "x", row=1, col=c)
        _ticks(fig, w, "y", row=1, col=c)
        fig.update_yaxes(autorange="reversed", row=1, col=c)
    fig.update_layout(height=340, margin=dict(l=10, r=10, t=50, b=40))
    return numbers.style(fig, lang)
