"""Figures of the head pruning lab: the layers × heads grid (scores and which heads are off), a head's
attention before/after pruning with their difference, and the pruning curve.

Pure builders: numpy arrays in, plotly figures out (no torch, no streamlit). Axes are positions with
``ticktext`` labels, so repeated token labels never merge.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from . import numbers
from .text import plotly_labels
from .traces import add_trace, figure

OFF_COLOUR = "#d62728"
ON_COLOUR = "#9ecae1"
# attention weight: the smallest half-range of the difference panel's colours, so an unchanged map is white
# under a readable colour bar (a ±1e-6 range was labelled "1µ")
DIFF_FLOOR = 0.01


def head_grid(values: np.ndarray | None, off: np.ndarray, *, title: str = "", score_title: str = "score",
              layer_title: str = "layer", head_title: str = "head", off_title: str = "off",
              diverging: bool = False, height: int | None = None, lang: str = "en") -> go.Figure:
    """Layers × heads grid: one cell per head, coloured by its score, switched-off heads crossed out.

    A transparent scatter point sits on every cell with ``customdata = [layer, head]``, so a Streamlit
    ``st.plotly_chart(..., on_select="rerun", selection_mode="points")`` reports which cell was clicked
    (plotly.js gives no selection events for heatmaps).

    Args:
        values: float ``(layers, heads)`` scores, or None to draw only which heads are on/off.
        off: bool ``(layers, heads)``, True where the head is switched off.
        title, score_title, layer_title, head_title, off_title: texts (already translated).
        diverging: centre the colour scale on 0 (scores that can be negative, e.g. ablation Δloss).
        height: px (default grows with the number of layers).
        lang: how numbers are written (``tr``: ``0,25``).

    Returns:
        plotly Figure: layer 0 at the top, heads left to right.

    Raises:
        ValueError: ``values`` and ``off`` of different shapes.
    """
    off = np.asarray(off, dtype=bool)
    layers, heads = off.shape
    if values is not None:
        values = np.asarray(values, dtype=np.float64)
        if values.shape != off.shape:
            raise ValueError(f"scores {values.shape} and off {off.shape} differ in shape")
    fig = figure()
    if values is None:
        z = np.where(off, 0.0, 1.0)
        add_trace(fig, go.Heatmap(z=z, x=np.arange(heads), y=np.arange(layers), zmin=0, zmax=1, showscale=False,
                                 colorscale=[[0, "#f2f2f2"], [1, ON_COLOUR]], xgap=2, ygap=2, hoverinfo="skip"))
    else:
        finite = values[np.isfinite(values)]
        peak = float(np.abs(finite).max()) if finite.size else 1.0
        peak = peak or 1.0
        trace = dict(z=values, x=np.arange(heads), y=np.arange(layers), xgap=1, ygap=1, hoverinfo="skip",
                     colorbar=dict(title=dict(text=score_title), tickformat=numbers.tick_format(peak)))
        if diverging:
            trace.update(colorscale="RdBu_r", zmid=0.0, zmin=-peak, zmax=peak)
        else:
            trace.update(colorscale="Viridis", zmin=float(min(0.0, finite.min(initial=0.0))), zmax=peak)
        add_trace(fig, go.Heatmap(**trace))
    ly, hx = np.nonzero(off)
    if len(ly):
        add_trace(fig, go.Scatter(x=hx, y=ly, mode="markers", name=off_title, hoverinfo="skip", showlegend=False,
                                 marker=dict(symbol="x-thin", size=max(6, min(16, 300 // max(layers, heads))),
                                             line=dict(width=2, color=OFF_COLOUR), color=OFF_COLOUR)))
    # Transparent click targets with hover text.
    grid_l, grid_h = np.meshgrid(np.arange(layers), np.arange(heads), indexing="ij")
    gl, gh = grid_l.reshape(-1), grid_h.reshape(-1)
    state = np.where(off.reshape(-1), off_title, "")
    custom = np.stack([gl, gh], axis=1)
    if values is None:
        hover = f"{layer_title} %{{y}}, {head_title} %{{x}} %{{text}}<extra></extra>"
    else:
        custom = np.concatenate([custom, values.reshape(-1, 1)], axis=1)
        hover = (f"{layer_title} %{{y}}, {head_title} %{{x}}<br>{score_title}: %{{customdata[2]:.4g}} %{{text}}"
                 "<extra></extra>")
    add_trace(fig, go.Scatter(
        x=gh, y=gl, mode="markers", customdata=custom, text=state, hovertemplate=hover, showlegend=False,
        marker=dict(size=max(8, min(28, 480 // max(layers, heads))), color="rgba(0,0,0,0.01)", symbol="square"),
        selected=dict(marker=dict(opacity=0.01)), unselected=dict(marker=dict(opacity=0.01)),
    ))
    fig.update_layout(
        title=dict(text=title), height=height or int(120 + 22 * layers), margin=dict(l=50, r=20, t=50, b=40),
        xaxis=dict(title=dict(text=head_title), tickmode="array", tickvals=list(range(heads)),
                   range=[-0.5, heads - 0.5], constrain="domain", showgrid=False, zeroline=False),
        yaxis=dict(title=dict(text=layer_title), tickmode="array", tickvals=list(range(layers)),
                   range=[layers - 0.5, -0.5], showgrid=False, zeroline=False),
        clickmode="event+select", dragmode="pan", plot_bgcolor="white",
    )
    return numbers.style(fig, lang)


def attention_before_after(before: np.ndarray, after: np.ndarray, query_labels: Sequence[str],
                           key_labels: Sequence[str], *, titles: Sequence[str] = ("before", "after", "after − before"),
                           query_title: str = "query", key_title: str = "key", weight_title: str = "weight",
                           height: int | None = None, lang: str = "en") -> go.Figure:
    """One head's attention with all heads on, with some heads off, and their difference, side by side.

    Args:
        before, after: float ``(query, key)`` attention weights in [0, 1].
        query_labels, key_labels: one display label per row / column.
        titles: the three panel titles (already translated).
        lang: how numbers are written (``tr``: ``0,25``).

    Returns:
        plotly Figure with 3 heatmaps; the difference uses a diverging scale centred on 0 (red: the
        pruned model attends more, blue: less), at least ±:data:`DIFF_FLOOR`.

    Raises:
        ValueError: shapes or label counts that do not match.
    """
    before = np.asarray(before, dtype=np.float64)
    after = np.asarray(after, dtype=np.float64)
    if before.shape != after.shape:
        raise ValueError(f"before {before.shape} and after {after.shape} differ in shape")
    nq, nk = before.shape
    if len(query_labels) != nq or len(key_labels) != nk:
        raise ValueError(f"{len(query_labels)} query / {len(key_labels)} key labels for a {nq}x{nk} matrix")
    diff = after - before
    peak = max(float(np.abs(diff).max(initial=0.0)), DIFF_FLOOR)
    fig = make_subplots(rows=1, cols=3, subplot_titles=list(titles), horizontal_spacing=0.08)
    hover = f"{query_title} %{{y}} → {key_title} %{{x}}<br>{weight_title}: %{{z:{numbers.d3(4)}}}<extra></extra>"
    for col, (z, kw) in enumerate((
        (before, dict(colorscale="Blues", zmin=0.0, zmax=1.0, showscale=False)),
        (after, dict(colorscale="Blues", zmin=0.0, zmax=1.0, colorbar=dict(x=0.64, len=0.9, thickness=10))),
        (diff, dict(colorscale="RdBu_r", zmid=0.0, zmin=-peak, zmax=peak,
                    colorbar=dict(x=1.0, len=0.9, thickness=10, tickformat=numbers.tick_format(peak)))),
    ), start=1):
        add_trace(fig, go.Heatmap(z=z, x=np.arange(nk), y=np.arange(nq), hovertemplate=hover, **kw), row=1, col=col)
        fig.update_xaxes(tickmode="array", tickvals=list(range(nk)), ticktext=plotly_labels(key_labels), tickangle=-90,
                         row=1, col=col)
        fig.update_yaxes(tickmode="array", tickvals=list(range(nq)),
                         ticktext=plotly_labels(query_labels) if col == 1 else [""] * nq,
                         autorange="reversed", row=1, col=col)
    fig.update_layout(height=height or int(180 + 18 * min(nq, 40)), margin=dict(l=60, r=30, t=40, b=60))
    return numbers.style(fig, lang)


def pruning_curve(shares: np.ndarray, by_importance: np.ndarray, random: np.ndarray, *, metric_title: str,
                  importance_label: str = "by importance", random_label: str = "random order",
                  share_title: str = "share of heads switched off", title: str = "", lang: str = "en") -> go.Figure:
    """Metric against the share of heads pruned: pruned by importance vs in random order.

    Args:
        shares: float ``(steps,)`` in [0, 1]. by_importance: float ``(steps,)``.
        random: float ``(orders, steps)``: the random-order curves (their mean is drawn with a min–max band).
        metric_title, importance_label, random_label, share_title, title: texts (already translated).
        lang: how numbers are written (``en``: ``40%``, ``tr``: ``%40``, ``0,25``).

    Returns:
        plotly Figure, x axis in percent.
    """
    shares = np.asarray(shares, dtype=np.float64) * 100
    random = np.atleast_2d(np.asarray(random, dtype=np.float64))
    hover = f"{numbers.percent_hover('x', 0, lang)}: %{{y:{numbers.d3(3)}}}<extra>"
    fig = figure()
    if random.size:
        lo, hi, mean = random.min(axis=0), random.max(axis=0), random.mean(axis=0)
        add_trace(fig, go.Scatter(x=np.concatenate([shares, shares[::-1]]), y=np.concatenate([hi, lo[::-1]]),
                                 fill="toself", fillcolor="rgba(127,127,127,0.2)", line=dict(width=0),
                                 hoverinfo="skip", showlegend=False))
        add_trace(fig, go.Scatter(x=shares, y=mean, mode="lines+markers", name=random_label,
                                 line=dict(color="#7f7f7f", dash="dash"),
                                 hovertemplate=hover + random_label + "</extra>"))
    add_trace(fig, go.Scatter(x=shares, y=by_importance, mode="lines+markers", name=importance_label,
                             line=dict(color="#1f77b4", width=3), hovertemplate=hover + importance_label + "</extra>"))
    fig.update_layout(
        title=dict(text=title), height=380, margin=dict(l=60, r=20, t=50, b=50),
        xaxis=dict(title=dict(text=share_title), **numbers.percent_axis(lang)),
        yaxis=dict(title=dict(text=metric_title)),
        legend=dict(orientation="h", y=1.02, x=1, xanchor="right", yanchor="bottom"),
    )
    return numbers.style(fig, lang)
