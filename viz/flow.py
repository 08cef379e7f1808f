"""Figures of the information flow (issue 14): the graph of routes to a prediction, the logit lens, and raw against
value-weighted attention on special tokens.

Pure builders: plain lists and numpy arrays in, plotly figures out (no torch, no streamlit). Axes are positions with
``ticktext`` labels, so repeated token labels never merge.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from . import numbers
from .heatmap import tick_positions
from .text import plotly_labels, shown, tick_angle
from .traces import add_trace, figure

KIND_COLOURS = {"attention": "#1f77b4", "residual": "#9e9e9e", "mlp": "#ff7f0e"}
# the height of each node kind inside its layer's band: the stream entering the layer, after its attention, its MLP
LEVEL = {"in": 0.0, "mid": 0.5, "mlp": 0.75}
WIDTHS = (0.25, 0.5, 0.75, 1.01)  # contribution bins: an edge is drawn with the width of its bin


def node_xy(node: tuple[str, int, int]) -> tuple[float, float]:
    """Where a route node ``(kind, layer, position)`` is drawn: x the position (an MLP node a little to the right of
    its stream), y the layer plus its kind's level."""
    kind, layer, position = node
    return position + (0.3 if kind == "mlp" else 0.0), layer + LEVEL[kind]


def route_figure(nodes: Sequence[tuple[str, int, int]], edges: Sequence[tuple], token_labels: Sequence[str],
                 n_layers: int, *, title: str = "", kind_names: dict[str, str] | None = None,
                 layer_title: str = "layer", position_title: str = "token", share_title: str = "contribution",
                 height: int | None = None, lang: str = "en") -> go.Figure:
    """The graph of routes (:class:`models.flow.Route`): tokens along x, layers up y; each edge a line whose width
    grows with its contribution, coloured by its kind (attention, residual, MLP).

    Args:
        nodes, edges: the route's (edges ``(source, target, contribution, kind)``).
        token_labels: one label per position (the input's own characters).
        n_layers: the model's layers (y runs from 0, the embeddings, to ``n_layers``, the last stream).
        kind_names: the edge kinds' names as shown (translated), by kind.
        lang: how numbers are written (``tr``: ``0,25``).

    Returns:
        plotly Figure; hover on a node names its token and layer, on an edge midpoint its contribution.
    """
    names = {k: k for k in KIND_COLOURS} | dict(kind_names or {})
    fig = figure()
    for kind, colour in KIND_COLOURS.items():
        for lo, hi in zip((0.0,) + WIDTHS[:-1], WIDTHS):
            xs, ys, mx, my, mt = [], [], [], [], []
            for src, dst, share, k in edges:
                if k != kind or not lo <= share < hi:
                    continue
                (x0, y0), (x1, y1) = node_xy(src), node_xy(dst)
                xs += [x0, x1, None]
                ys += [y0, y1, None]
                mx.append((x0 + x1) / 2)
                my.append((y0 + y1) / 2)
                mt.append(share)
            if not xs:
                continue
            add_trace(fig, go.Scatter(x=xs, y=ys, mode="lines", line=dict(color=colour, width=1 + 8 * hi),
                                     opacity=0.35 + 0.6 * hi, hoverinfo="skip", name=names[kind],
                                     legendgroup=kind, showlegend=not any(t.legendgroup == kind for t in fig.data)))
            add_trace(fig, go.Scatter(x=mx, y=my, mode="markers", marker=dict(size=8, opacity=0), showlegend=False,
                                     customdata=np.asarray(mt), name=names[kind],
                                     hovertemplate=f"{names[kind]}<br>{share_title}: "
                                                   f"%{{customdata:{numbers.d3(3)}}}<extra></extra>"))
    labels = plotly_labels(token_labels)
    xy = [node_xy(n) for n in nodes]
    add_trace(fig, go.Scatter(
        x=[p[0] for p in xy], y=[p[1] for p in xy], mode="markers", showlegend=False,
        marker=dict(size=7, color=["#333333" if n[0] == "in" else KIND_COLOURS["mlp"] if n[0] == "mlp" else "#6baed6"
                                   for n in nodes]),
        customdata=[[labels[n[2]], n[1]] for n in nodes],
        hovertemplate=f"{position_title}: %{{customdata[0]}}<br>{layer_title}: %{{customdata[1]}}<extra></extra>"))
    drawn = sorted({n[2] for n in nodes}) or [0]
    ticks = [p for p in range(len(token_labels)) if p in drawn] if len(drawn) <= 40 else \
        [drawn[i] for i in tick_positions(len(drawn))]
    angle = tick_angle([token_labels[i] for i in ticks], 900 / max(len(ticks), 1))
    fig.update_layout(
        title=dict(text=title),
        xaxis=dict(title=dict(text=position_title), tickmode="array", tickvals=ticks,
                   ticktext=[labels[i] for i in ticks], tickangle=angle, range=[min(drawn) - 0.8, max(drawn) + 0.8]),
        yaxis=dict(title=dict(text=layer_title), range=[-0.3, n_layers + 0.3], dtick=1 if n_layers <= 32 else 4),
        height=height or int(min(1200, max(420, 140 + 26 * n_layers))), margin=dict(l=10, r=10, t=60, b=10),
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0),
        hovermode="closest",
    )
    return numbers.style(fig, lang)


def lens_figure(labels: Sequence[Sequence[str]], probs: np.ndarray, stream_names: Sequence[str], *, title: str = "",
                rank_title: str = "rank", stream_title: str = "stream", prob_title: str = "probability",
                height: int | None = None, lang: str = "en") -> go.Figure:
    """The logit lens as a table-like heatmap: one row per residual stream (bottom: the embeddings, top: the
    model's output), the top-k tokens left to right, each cell's colour its probability.

    Args:
        labels: ``streams x k`` decoded tokens (drawn with visible spaces: :func:`viz.text.shown`). probs: float
            ``(streams, k)``. stream_names: one name per row.
        lang: how numbers are written (``tr``: ``0,25``).
    """
    probs = np.asarray(probs, dtype=np.float32)
    rows, k = probs.shape
    text = [plotly_labels(shown(s) for s in row) for row in labels]
    fig = figure(go.Heatmap(
        z=probs, x=np.arange(k), y=np.arange(rows), colorscale="Blues", zmin=0.0, zmax=1.0, text=text,
        texttemplate="%{text}", customdata=np.asarray(text, dtype=object),
        colorbar=dict(title=dict(text=prob_title, side="right"), tickformat=numbers.tick_format(1.0)),
        hovertemplate=f"%{{customdata}}<br>{prob_title}: %{{z:{numbers.d3(3)}}}<extra></extra>"))
    fig.update_layout(
        title=dict(text=title),
        xaxis=dict(title=dict(text=rank_title), tickmode="array", tickvals=list(range(k)),
                   ticktext=[str(i + 1) for i in range(k)], side="top"),
        yaxis=dict(title=dict(text=stream_title), tickmode="array", tickvals=list(range(rows)),
                   ticktext=plotly_labels(stream_names)),
        height=height or int(min(1400, max(360, 120 + 22 * rows))), margin=dict(l=10, r=10, t=90, b=10),
    )
    return numbers.style(fig, lang)


def share_figure(raw: np.ndarray, weighted: np.ndarray, *, names: tuple[str, str] = ("weights", "value-weighted"),
                 title: str = "", layer_title: str = "layer", share_title: str = "share",
                 lang: str = "en") -> go.Figure:
    """Per layer, the share of attention on special tokens: raw weights beside value-weighted ones (Kobayashi et
    al. 2020, fig. 3). ``raw``, ``weighted``: float ``(layers,)`` in 0..1; ``lang``: how numbers are written."""
    layers = np.arange(len(raw))
    fig = figure([go.Bar(x=layers, y=np.asarray(raw), name=names[0], marker_color="#9ecae1",
                            hovertemplate=f"{layer_title} %{{x}}: %{{y:{numbers.d3(3)}}}<extra>{names[0]}</extra>"),
                     go.Bar(x=layers, y=np.asarray(weighted), name=names[1], marker_color="#08519c",
                            hovertemplate=f"{layer_title} %{{x}}: %{{y:{numbers.d3(3)}}}<extra>{names[1]}</extra>")])
    fig.update_layout(barmode="group", title=dict(text=title), height=340, margin=dict(l=10, r=10, t=60, b=10),
                      xaxis=dict(title=dict(text=layer_title), dtick=1), yaxis=dict(title=dict(text=share_title),
                                                                                    range=[0, 1]),
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0))
    return numbers.style(fig, lang)
