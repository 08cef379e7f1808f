"""Figures of masks per head: which pattern each head of each layer uses (the layers × heads grid, coloured by the
pattern's kind), and what a sparse kernel would keep of each head's attention (one layers × heads map per pattern
kind). numpy in, plotly figures out (no torch, no streamlit).

Layer 0 is drawn at the top, heads left to right, as :func:`viz.pruning.head_grid` draws them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from . import numbers
from .text import plotly_labels
from .traces import add_trace, figure

# one colour per pattern kind (the part of a pattern string before ":"); ``full`` (the model's own mask) the
# quietest, the window kinds warm, the chosen (MInference) kinds cool
KIND_COLOURS = {
    "full": "#d9d9d9", "causal": "#9ecae1", "bidirectional": "#6baed6", "sliding_window": "#fd8d3c",
    "sink_window": "#d94801", "a_shape": "#d94801", "strided": "#74c476", "vertical_slash": "#6a51a3",
    "block_sparse": "#9e9ac8", "custom": "#969696",
}
OTHER_COLOUR = "#525252"


def kind_of(pattern: str) -> str:
    """The kind of a pattern string: ``sink_window:64,4`` -> ``sink_window``; ``native`` -> ``full``."""
    kind = str(pattern).split(":", 1)[0].strip().lower().replace("-", "_")
    return "full" if kind in ("native", "") else kind


def pattern_grid(patterns: Sequence[Sequence[str]], *, kind_labels: Mapping[str, str] | None = None,
                 title: str = "", layer_title: str = "layer", head_title: str = "head", height: int | None = None,
                 lang: str = "en") -> go.Figure:
    """The pattern of every head: a layers × heads grid, one colour per pattern kind, the pattern on hover.

    Args:
        patterns: ``(layers, heads)`` pattern strings (``full``, ``sink_window:64,4``, ``vertical_slash:32,32``
            ...; :attr:`models.analysis.head_masks.HeadRules.patterns` laid out as a grid).
        kind_labels: ``kind -> text`` of each kind in the legend (already translated); the kind itself otherwise.
        title, layer_title, head_title: texts (already translated). height: px (default grows with the layers).
        lang: how numbers are written.

    Returns:
        plotly Figure: a heatmap whose ``z`` is the index of each cell's kind in the legend's order (one legend
        entry per kind present, named by ``kind_labels``), the pattern in the hover text.

    Raises:
        ValueError: ``patterns`` not a non-empty 2-D grid.
    """
    grid = np.asarray([[str(p) for p in row] for row in patterns], dtype=object)
    if grid.ndim != 2 or not grid.size:
        raise ValueError(f"patterns must be a non-empty (layers, heads) grid, got shape {grid.shape}")
    layers, heads = grid.shape
    labels = dict(kind_labels or {})
    kinds = np.vectorize(kind_of, otypes=[object])(grid)
    present = [k for k in KIND_COLOURS if k in set(kinds.ravel())] + sorted(set(kinds.ravel()) - set(KIND_COLOURS))
    index = {k: i for i, k in enumerate(present)}
    z = np.vectorize(index.get, otypes=[float])(kinds)
    colours = [KIND_COLOURS.get(k, OTHER_COLOUR) for k in present]
    top = max(len(present) - 1, 1)
    scale = []
    for i, colour in enumerate(colours):  # a step per kind: [i - 0.5, i + 0.5] in z, scaled to [0, 1]
        scale += [[max(0.0, (i - 0.5) / top), colour], [min(1.0, (i + 0.5) / top), colour]]
    if len(colours) == 1:
        scale = [[0.0, colours[0]], [1.0, colours[0]]]
    hover = np.empty(grid.shape, dtype=object)
    for (layer, head), pattern in np.ndenumerate(grid):
        hover[layer, head] = f"{labels.get(kinds[layer, head], kinds[layer, head])} · {pattern}"
    fig = figure(go.Heatmap(
        z=z, x=np.arange(heads), y=np.arange(layers), zmin=0, zmax=top, colorscale=scale, showscale=False,
        xgap=1, ygap=1, text=np.asarray(plotly_labels(list(hover.ravel())), dtype=object).reshape(grid.shape),
        hovertemplate=f"{layer_title} %{{y}}, {head_title} %{{x}}<br>%{{text}}<extra></extra>"))
    for kind, colour in zip(present, colours):  # the legend: one invisible marker per kind
        add_trace(fig, go.Scatter(x=[None], y=[None], mode="markers", name=plotly_labels([labels.get(kind, kind)])[0],
                                 marker=dict(size=12, symbol="square", color=colour), hoverinfo="skip"))
    fig.update_layout(
        title=dict(text=title), height=height or int(140 + 18 * layers), margin=dict(l=50, r=20, t=50, b=40),
        xaxis=dict(title=dict(text=head_title), tickmode="array", tickvals=list(range(heads)),
                   range=[-0.5, heads - 0.5], showgrid=False, zeroline=False),
        yaxis=dict(title=dict(text=layer_title), tickmode="array",
                   tickvals=list(range(0, layers, max(1, layers // 15))),
                   range=[layers - 0.5, -0.5], showgrid=False, zeroline=False),
        legend=dict(orientation="h", yanchor="bottom", y=1.0, x=0), plot_bgcolor="white",
    )
    return numbers.style(fig, lang)


def kept_share_figure(share: np.ndarray, titles: Sequence[str], *, title: str = "", layer_title: str = "layer",
                      head_title: str = "head", share_title: str = "kept", height: int | None = None,
                      lang: str = "en") -> go.Figure:
    """What each pattern kind keeps of each head's attention: one layers × heads map per kind, side by side, on
    one colour scale from 0 to 100 %.

    Args:
        share: float ``(patterns, layers, heads)`` in [0, 1]: the mean over queries of the head's weight inside
            the pattern (:attr:`models.sparse.KeptShare.share`). titles: one text per pattern (already translated;
            e.g. the kind and its mean keys per query).
        title, layer_title, head_title, share_title: texts (already translated). height: px. lang: how numbers
            are written (``tr``: ``%93,5``).

    Returns:
        plotly Figure of ``patterns`` heatmaps (values in percent, 0..100), one colour bar.

    Raises:
        ValueError: ``share`` not 3-D, or ``titles`` of another length.
    """
    share = np.asarray(share, dtype=np.float64)
    if share.ndim != 3 or not share.shape[0]:
        raise ValueError(f"share must be (patterns, layers, heads), got shape {share.shape}")
    if len(titles) != share.shape[0]:
        raise ValueError(f"{len(titles)} titles for {share.shape[0]} patterns")
    count, layers, heads = share.shape
    fig = make_subplots(rows=1, cols=count, subplot_titles=plotly_labels(list(titles)), horizontal_spacing=0.03,
                        shared_yaxes=True)
    percent = np.clip(share, 0.0, 1.0) * 100
    hover = (f"{layer_title} %{{y}}, {head_title} %{{x}}<br>{share_title}: "
             f"{numbers.percent_hover('z', 1, lang)}<extra>%{{meta}}</extra>")
    for p in range(count):
        add_trace(fig, go.Heatmap(
            z=percent[p], x=np.arange(heads), y=np.arange(layers), zmin=0, zmax=100, colorscale="Viridis",
            showscale=p == 0, meta=plotly_labels([titles[p]])[0], hovertemplate=hover, xgap=0.5, ygap=0.5,
            colorbar=dict(title=dict(text=share_title), tickformat=",.0f", **numbers.percent_axis(lang))),
            row=1, col=p + 1)
        fig.update_xaxes(title=dict(text=head_title), tickmode="array",
                         tickvals=list(range(0, heads, max(1, heads // 5))), showgrid=False, zeroline=False,
                         row=1, col=p + 1)
    fig.update_yaxes(autorange="reversed", showgrid=False, zeroline=False)
    fig.update_yaxes(title=dict(text=layer_title), row=1, col=1)
    fig.update_layout(title=dict(text=title), height=height or int(170 + 12 * layers),
                      margin=dict(l=50, r=20, t=80, b=40), plot_bgcolor="white")
    return numbers.style(fig, lang)
