"""Mask views: a boolean mask matrix, the attention it lets through, what it changes in the output, and
the grouped-query head layout. numpy in, plotly figures out (no torch, no streamlit).

Axes are index-based with ``ticktext`` labels (plotly would merge two equal category labels such as
"the" ... "the"). Query rows run top to bottom, keys left to right. A query row with no allowed key is
hatched and labelled (its attention row is all zero, never NaN).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np
import plotly.graph_objects as go

from . import numbers
from .text import plotly_labels, top_axis_margin
from .traces import add_trace, figure

ALLOWED_COLOR = "#1f4e79"
FORBIDDEN_COLOR = "#f1f1f1"
EMPTY_ROW_COLOR = "#c0392b"
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")


# Most key labels over a grid: its panel may be a third of the page at 1280 px (about 150 px of grid), and a
# vertical label needs a line's height; longer texts label every k-th key (the hover names every cell).
MAX_KEY_TICKS = 10


def _axis(labels: Sequence[str], max_ticks: int | None = None) -> dict:
    """Tick settings for ``labels``; with ``max_ticks``, at most about that many of the non-empty labels (every
    k-th, and always the last: the end token or the padding column)."""
    shown = [i for i, label in enumerate(labels) if str(label)]
    if max_ticks and len(shown) > max_ticks:
        step = -(-len(shown) // max_ticks)
        last, shown = shown[-1], shown[::step]
        if shown[-1] != last:
            shown[-1 if len(shown) > 1 and last - shown[-1] <= step // 2 else len(shown):] = [last]
    return dict(tickmode="array", tickvals=shown, ticktext=plotly_labels(labels[i] for i in shown), showgrid=False,
                zeroline=False)


def _size(n_rows: int, n_cols: int, cell: int = 26) -> tuple[int, int]:
    """Figure (width, height) in px for a grid, within readable bounds."""
    width = int(min(560, max(260, 90 + cell * n_cols)))
    height = int(min(560, max(220, 110 + cell * n_rows)))
    return width, height


def _gap(shape) -> int:
    """Cell gap in px: 1 for small grids, 0 when cells get too thin for a gap (> 40 rows or columns)."""
    return 1 if max(shape) <= 40 else 0


def _top_margin(key_labels: Sequence[str], title: str) -> int:
    """Top margin (px) that holds the title above the key labels drawn at -90 degrees above the grid."""
    return top_axis_margin(key_labels, angle=-90, title=title, axis_title=False)


def _title(text: str, subtitle: str = "") -> dict:
    # at the container's top with a pad: at y=0.995 the glyphs' tops poked out of small figures and were
    # cut by the figure above (issue 13)
    # a second line goes in plotly's subtitle: a "<br>" in the title was anchored as one line and its first
    # line pushed above the figure
    out = dict(text=text, font=dict(size=13), y=1, yref="container", yanchor="top", pad=dict(t=6), x=0.01,
               xanchor="left")
    if subtitle:
        out["subtitle"] = dict(text=subtitle, font=dict(size=12))
    return out


def _hatch_rows(fig: go.Figure, rows: Sequence[int], n_cols: int, label: str) -> None:
    """Hatch each row index in ``rows`` across all columns and write ``label`` over it."""
    for r in rows:
        x0, x1, y0, y1 = -0.5, n_cols - 0.5, r - 0.5, r + 0.5
        add_trace(fig, go.Scatter(
            x=[x0, x1, x1, x0, x0], y=[y0, y0, y1, y1, y0], mode="lines", fill="toself",
            line=dict(color=EMPTY_ROW_COLOR, width=1), fillcolor="rgba(192,57,43,0.08)",
            fillpattern=dict(shape="/", fgcolor=EMPTY_ROW_COLOR, size=6, solidity=0.15),
            hoverinfo="text", text=label, showlegend=False, name=label,
        ))
        fig.add_annotation(x=(n_cols - 1) / 2, y=r, text=f"<b>{label}</b>", showarrow=False,
                           font=dict(color=EMPTY_ROW_COLOR, size=11), bgcolor="rgba(255,255,255,0.85)")


def mask_figure(matrix: np.ndarray, query_labels: Sequence[str], key_labels: Sequence[str], *, title: str = "",
                empty_label: str = "no key allowed", allowed_label: str = "allowed",
                forbidden_label: str = "masked", query_title: str = "query", key_title: str = "key",
                lang: str = "en") -> go.Figure:
    """Draw a boolean mask: dark cells where query ``i`` may attend key ``j``, light where it may not.

    Args:
        matrix: bool ``(q, k)``.
        query_labels, key_labels: ``q`` and ``k`` display labels.
        empty_label: text over a row with no allowed key (such a row is also hatched).
        lang: how numbers are written (``tr``: ``0,25``).

    Returns:
        plotly Figure.

    Raises:
        ValueError: label counts that do not match the matrix.
    """
    m = np.asarray(matrix, dtype=bool)
    if m.ndim != 2 or m.shape != (len(query_labels), len(key_labels)):
        raise ValueError(f"Mask of shape {m.shape} does not match {len(query_labels)} x {len(key_labels)} labels.")
    text = np.where(m, allowed_label, forbidden_label)
    fig = figure(go.Heatmap(
        z=m.astype(np.int8), colorscale=[[0, FORBIDDEN_COLOR], [1, ALLOWED_COLOR]], zmin=0, zmax=1, showscale=False,
        xgap=_gap(m.shape), ygap=_gap(m.shape), customdata=text,
        hovertemplate=f"{query_title} %{{y}} → {key_title} %{{x}}: %{{customdata}}<extra></extra>",
    ))
    _hatch_rows(fig, list(np.flatnonzero(~m.any(axis=1))), m.shape[1], empty_label)
    width, height = _size(*m.shape)
    top = _top_margin(key_labels, title)
    fig.update_layout(title=_title(title), width=width, height=height + top - 40,
                      margin=dict(l=10, r=10, t=top, b=10), plot_bgcolor="white")
    fig.update_xaxes(_axis(key_labels, MAX_KEY_TICKS), side="top", tickangle=-90, range=[-0.5, m.shape[1] - 0.5])
    fig.update_yaxes(_axis(query_labels), autorange="reversed")
    return numbers.style(fig, lang)


def attention_figure(weights: np.ndarray, query_labels: Sequence[str], key_labels: Sequence[str], *,
                     title: str = "", mask: np.ndarray | None = None, empty_label: str = "no key allowed",
                     colorscale: str = "Blues", renormalised: bool = False, query_title: str = "query",
                     key_title: str = "key", renormalised_label: str = "renormalised",
                     zmax: float | None = None, lang: str = "en") -> go.Figure:
    """Heatmap of one head's attention weights (rows: queries, columns: keys; each row sums to 1).

    Args:
        weights: float ``(q, k)`` in [0, 1].
        mask: optional bool ``(q, k)``; masked cells get a thin grey ``×`` marker, rows with no allowed key
            are hatched and labelled. Without a mask, all-zero rows are treated as empty rows.
        renormalised: say in the title that rows were renormalised after hiding tokens.
        zmax: the colour scale's top (default this map's largest weight); panels drawn side by side pass one
            value so that one colour means one weight in all of them.
        lang: how numbers are written (colour bar, hover; ``tr``: ``0,25``).

    Returns:
        plotly Figure.

    Raises:
        ValueError: shapes that do not match.
    """
    w = np.nan_to_num(np.asarray(weights, dtype=np.float64), nan=0.0)
    if w.ndim != 2 or w.shape != (len(query_labels), len(key_labels)):
        raise ValueError(f"Weights of shape {w.shape} do not match {len(query_labels)} x {len(key_labels)} labels.")
    if mask is not None:
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != w.shape:
            raise ValueError(f"Mask of shape {mask.shape} does not match weights {w.shape}.")
        empty = ~cast(np.ndarray, mask.any(axis=1))  # (query,): numpy's stubs allow a scalar
    else:
        empty = ~cast(np.ndarray, (w > 0).any(axis=1))
    z_top = max(float(w.max()) if zmax is None else float(zmax), 1e-9)
    fig = figure(go.Heatmap(
        z=w, colorscale=colorscale, zmin=0, zmax=z_top,
        xgap=_gap(w.shape), ygap=_gap(w.shape),
        colorbar=dict(thickness=10, len=0.8, tickformat=numbers.tick_format(z_top)),
        hovertemplate=f"{query_title} %{{y}} → {key_title} %{{x}}: %{{z:{numbers.d3(3)}}}<extra></extra>",
    ))
    if mask is not None and (~mask).any():
        ys, xs = np.nonzero(~mask & ~empty[:, None])
        add_trace(fig, go.Scatter(x=xs, y=ys, mode="markers", marker=dict(symbol="x-thin", size=6,
                                 line=dict(width=1, color="#bbbbbb")), hoverinfo="skip", showlegend=False))
    _hatch_rows(fig, list(np.flatnonzero(empty)), w.shape[1], empty_label)
    width, height = _size(*w.shape)
    # on a line of its own: narrow figures (three side by side) would cut a long title off
    note = renormalised_label if renormalised and renormalised_label not in title else ""
    top = _top_margin(key_labels, title + ("<br>" if note else ""))
    fig.update_layout(title=_title(title, note), width=width + 60, height=height + top - 40,
                      margin=dict(l=10, r=10, t=top, b=10), plot_bgcolor="white")
    fig.update_xaxes(_axis(key_labels, MAX_KEY_TICKS), side="top", tickangle=-90, range=[-0.5, w.shape[1] - 0.5])
    fig.update_yaxes(_axis(query_labels), autorange="reversed")
    return numbers.style(fig, lang)


def kl_figure(position_labels: Sequence[str], kl: dict[str, np.ndarray], *, title: str = "",
              yaxis_title: str = "KL (nats)", unit: str = "nats", lang: str = "en") -> go.Figure:
    """Grouped bars: for each mask, KL(native || mask) of the next-token distribution at each position.

    Args:
        position_labels: ``n`` labels (the token after which the next token is predicted).
        kl: mask name -> float ``(n,)`` in nats (see :func:`models.analysis.compare.next_token_kl`; Kullback &
            Leibler 1951). NaN is drawn as 0.
        lang: how numbers are written (``tr``: ``0,25``).

    Returns:
        plotly Figure.
    """
    fig = figure()
    x = list(range(len(position_labels)))
    for i, (name, values) in enumerate(kl.items()):
        v = np.nan_to_num(np.asarray(values, dtype=np.float64))
        add_trace(fig, go.Bar(x=x, y=v, name=name, marker_color=PALETTE[i % len(PALETTE)],
                             hovertemplate=f"%{{y:{numbers.d3(4)}}} " + unit + "<extra>" + name + "</extra>"))
    fig.update_layout(barmode="group", title=dict(text=title, font=dict(size=13)), height=320,
                      margin=dict(l=10, r=10, t=40 if title else 10, b=10), legend=dict(orientation="h", y=-0.25),
                      yaxis_title=yaxis_title)
    fig.update_xaxes(_axis(position_labels), tickangle=-45)
    return numbers.style(fig, lang)


def drift_figure(layer_drift: dict[str, np.ndarray], *, title: str = "", xaxis_title: str = "layer",
                 yaxis_title: str = "1 − cos", lang: str = "en") -> go.Figure:
    """Lines: for each mask, the mean cosine drift ``1 − cos(h_native, h_mask)`` of the hidden states after
    each layer (x = 0 is the embedding layer, before any attention).

    Args:
        layer_drift: mask name -> float ``(layers + 1,)`` (``models.analysis.compare.MaskRun.layer_drift``), in
            [0, 2]. NaN is drawn as 0.
        lang: how numbers are written (``tr``: ``0,25``).

    Returns:
        plotly Figure.
    """
    fig = figure()
    for i, (name, values) in enumerate(layer_drift.items()):
        v = np.nan_to_num(np.asarray(values, dtype=np.float64))
        add_trace(fig, go.Scatter(x=list(range(len(v))), y=v, mode="lines+markers", name=name,
                                 line=dict(color=PALETTE[i % len(PALETTE)]),
                                 hovertemplate=xaxis_title + f" %{{x}}: %{{y:{numbers.d3(4)}}}<extra>" + name
                                 + "</extra>"))
    fig.update_layout(title=dict(text=title, font=dict(size=13)), height=320, xaxis_title=xaxis_title,
                      yaxis_title=yaxis_title, margin=dict(l=10, r=10, t=40 if title else 10, b=10),
                      legend=dict(orientation="h", y=-0.3))
    longest = max((len(v) for v in layer_drift.values()), default=0)
    fig.update_xaxes(dtick=1 if longest <= 13 else 5, range=[-0.3, max(longest - 1, 1) + 0.3])
    return numbers.style(fig, lang)


def gqa_figure(groups: Sequence[Sequence[int]], *, query_label: str = "query head",
               kv_label: str = "key/value head", title: str = "", lang: str = "en") -> go.Figure:
    """Diagram of grouped-query attention: key/value heads on top, query heads below, a line from each query
    head to the key/value head it reads (Ainslie et al. 2023). One colour per group.

    Args:
        groups: one sequence of query-head indices per key/value head (:func:`models.analysis.kv_layout.kv_groups`;
            Ainslie et al. 2023, §2.2).
        lang: the figure's number format (:func:`viz.numbers.style`).

    Returns:
        plotly Figure.
    """
    heads = sum(len(g) for g in groups)
    fig = figure()
    for g, members in enumerate(groups):
        color = PALETTE[g % len(PALETTE)]
        kv_x = float(np.mean(members))
        for h in members:
            add_trace(fig, go.Scatter(x=[h, kv_x], y=[0, 1], mode="lines", line=dict(color=color, width=2),
                                     hoverinfo="skip", showlegend=False))
        add_trace(fig, go.Scatter(
            x=list(members), y=[0] * len(members), mode="markers+text", text=[f"Q{h}" for h in members],
            textposition="bottom center", marker=dict(size=26, color=color, symbol="circle"),
            hovertemplate=query_label + " %{text}<extra></extra>", showlegend=False))
        add_trace(fig, go.Scatter(
            x=[kv_x], y=[1], mode="markers+text", text=[f"KV{g}"], textposition="top center",
            marker=dict(size=34, color=color, symbol="square"),
            hovertemplate=kv_label + f" {g}: " + ", ".join(f"Q{h}" for h in members) + "<extra></extra>",
            showlegend=False))
    fig.update_layout(title=dict(text=title, font=dict(size=13)), height=260,
                      width=int(min(900, max(360, 70 * heads + 80))),
                      margin=dict(l=10, r=10, t=40 if title else 10, b=10), plot_bgcolor="white")
    fig.update_xaxes(visible=False, range=[-0.7, heads - 0.3])
    fig.update_yaxes(visible=False, range=[-0.45, 1.4])
    fig.add_annotation(x=-0.6, y=1.25, text=kv_label, showarrow=False, xanchor="left", font=dict(size=11))
    fig.add_annotation(x=-0.6, y=-0.38, text=query_label, showarrow=False, xanchor="left", font=dict(size=11))
    return numbers.style(fig, lang)
