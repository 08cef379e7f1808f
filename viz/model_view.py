"""Model view: every layer's and head's attention as small maps in one grid (rows: layers, columns: heads).

The grid is drawn as ONE heatmap image (a mosaic of the small maps, separated by gap pixels) plus an
invisible scatter with one point per map carrying ``customdata = [layer, head]``: Streamlit's bundled
plotly.js reports no selection events for heatmaps, but it does for scatter points, so clicking a map
selects its point and the page opens that head large.

Long inputs: each map is pooled (:func:`viz.transforms.pool`) to at most ``max_cell`` x ``max_cell``
cells and the whole mosaic to about ``budget`` cells, and each map is quantised to 255 levels of its own
maximum (``uint8``), so a 512-token input sends kilobytes, not the hundreds of megabytes of every weight
as JSON text.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.colors import sequential

from . import numbers
from .transforms import pool
from .traces import add_trace, figure

MAX_CELL = 64
BUDGET = 300_000  # mosaic cells (bytes, uint8) at most
GAP_COLOUR = "rgba(0,0,0,0)"


@dataclass(frozen=True)
class ModelViewInfo:
    """What the model view drew. ``cell_q x cell_k``: cells per small map; ``pooled``: True when the
    maps were reduced from ``n_q x n_k`` tokens; ``layers x heads`` maps."""

    layers: int
    heads: int
    n_q: int
    n_k: int
    cell_q: int
    cell_k: int

    @property
    def pooled(self) -> bool:
        """True when a map has fewer cells than tokens on either axis (:func:`viz.transforms.pool`)."""
        return self.cell_q < self.n_q or self.cell_k < self.n_k


def cell_size(n: int, maps: int, max_cell: int = MAX_CELL, budget: int = BUDGET) -> int:
    """Side of one small map: ``n`` if it fits, else the largest size <= ``max_cell`` such that
    ``maps * size**2 <= budget`` (at least 4)."""
    by_budget = int(np.sqrt(budget / max(maps, 1)))
    return int(max(1, min(n, max_cell, max(4, by_budget))))


def _colorscale() -> list:
    blues = sequential.Blues
    lo = 1.0 / 255.0
    scale = [[0.0, GAP_COLOUR], [lo * 0.999, GAP_COLOUR], [lo, "#ffffff"]]
    for i, colour in enumerate(blues[1:], start=1):
        scale.append([lo + (1.0 - lo) * i / (len(blues) - 1), colour])
    return scale


def mosaic(maps: np.ndarray, gap: int) -> np.ndarray:
    """Tile ``(layers, heads, q, k)`` maps (already pooled) into one uint8 image.

    Each map is scaled to its own maximum: value ``1 + round(254 * w / max)`` (1 = zero weight,
    255 = the map's largest weight); gap pixels are 0.

    Returns:
        uint8 ``(layers * (q + gap) - gap, heads * (k + gap) - gap)``.
    """
    w = np.asarray(maps, dtype=np.float32)
    layers, heads, cq, ck = w.shape
    peak = w.max(axis=(-2, -1), keepdims=True)
    scaled = np.divide(w, peak, out=np.zeros_like(w), where=peak > 0)
    q = (1 + np.rint(scaled * 254)).astype(np.uint8)
    img = np.zeros((layers * (cq + gap) - gap, heads * (ck + gap) - gap), dtype=np.uint8)
    for layer in range(layers):
        for head in range(heads):
            r, c = layer * (cq + gap), head * (ck + gap)
            img[r:r + cq, c:c + ck] = q[layer, head]
    return img


def model_view(weights: np.ndarray, *, layer_names: Sequence[str] | None = None,
               head_names: Sequence[str] | None = None, title: str = "",
               hover: str = "layer %{customdata[0]} · head %{customdata[1]}", layer_title: str = "layer",
               head_title: str = "head", selected: tuple[int, int] | None = None,
               max_cell: int = MAX_CELL, budget: int = BUDGET, width_px: int = 900,
               max_height_px: int = 1500, lang: str = "en") -> tuple[go.Figure, ModelViewInfo]:
    """All layers x heads as small attention maps in one clickable grid.

    Args:
        weights: float ``(layers, heads, query, key)``.
        layer_names, head_names: tick labels of the rows / columns (``heads`` may be 1 for an average);
            default ``0 .. layers - 1`` and ``0 .. heads - 1``.
        title: figure title (say there whether rows were renormalised or maps pooled).
        hover: hover template of a map (``customdata[0]`` = layer, ``customdata[1]`` = head).
        layer_title, head_title: axis titles.
        selected: ``(layer, head)`` to outline.
        max_cell, budget: size limits, see :func:`cell_size`.
        width_px, max_height_px: the figure's target size, used to size the squares.
        lang: the figure's number format (:func:`viz.numbers.style`).

    Returns:
        (plotly Figure, :class:`ModelViewInfo`). Trace 0 is the mosaic heatmap (uint8, hover skipped),
        trace 1 the invisible scatter whose points are ``layer * heads + head`` with
        ``customdata = [layer, head]``.

    Raises:
        ValueError: a shape that is not 4-D or label counts that do not match.
    """
    w = np.asarray(weights, dtype=np.float32)
    if w.ndim != 4:
        raise ValueError(f"expected (layers, heads, query, key), got shape {w.shape}")
    layers, heads, nq, nk = w.shape
    layer_names = [str(i) for i in range(layers)] if layer_names is None else layer_names
    head_names = [str(i) for i in range(heads)] if head_names is None else head_names
    if len(layer_names) != layers or len(head_names) != heads:
        raise ValueError(f"{len(layer_names)} layer / {len(head_names)} head names for {layers}x{heads} maps")
    side = cell_size(max(nq, nk), layers * heads, max_cell, budget)
    maps = pool(w, side)
    cq, ck = maps.shape[-2:]
    gap = max(1, max(cq, ck) // 8)
    img = mosaic(maps, gap)
    info = ModelViewInfo(layers, heads, nq, nk, cq, ck)

    yc = np.arange(layers) * (cq + gap) + (cq - 1) / 2.0
    xc = np.arange(heads) * (ck + gap) + (ck - 1) / 2.0
    px = max(18.0, min(width_px / heads, (max_height_px - 120) / layers, 110.0))
    gx, gy = np.meshgrid(xc, yc)
    custom = np.stack(np.meshgrid(np.arange(heads), np.arange(layers))[::-1], axis=-1).reshape(-1, 2)
    fig = figure()
    add_trace(fig, go.Heatmap(z=img, zmin=0, zmax=255, colorscale=_colorscale(), showscale=False, hoverinfo="skip",
                             name="maps"))
    add_trace(fig, go.Scatter(
        x=gx.ravel(), y=gy.ravel(), customdata=custom, mode="markers", name="select",
        marker=dict(size=max(6.0, px * 0.8), symbol="square", opacity=0.0, color="#000000"),
        selected=dict(marker=dict(opacity=0.0)), unselected=dict(marker=dict(opacity=0.0)),
        hovertemplate=hover + "<extra></extra>", showlegend=False,
    ))
    if selected is not None and 0 <= selected[0] < layers and 0 <= selected[1] < heads:
        layer, head = selected
        r0, c0 = layer * (cq + gap), head * (ck + gap)
        fig.add_shape(type="rect", x0=c0 - 0.5 - gap / 2, x1=c0 + ck - 0.5 + gap / 2, y0=r0 - 0.5 - gap / 2,
                      y1=r0 + cq - 0.5 + gap / 2, line=dict(color="#d62728", width=2))
    fig.update_layout(
        title=dict(text=title),
        xaxis=dict(title=dict(text=head_title), tickmode="array", tickvals=xc, ticktext=list(head_names), side="top",
                   showgrid=False, zeroline=False, range=[-0.5 - gap, img.shape[1] - 0.5 + gap], constrain="domain"),
        yaxis=dict(title=dict(text=layer_title), tickmode="array", tickvals=yc, ticktext=list(layer_names),
                   showgrid=False, zeroline=False, range=[img.shape[0] - 0.5 + gap, -0.5 - gap], scaleanchor="x",
                   scaleratio=1, constrain="domain"),
        height=int(layers * px * max(cq / max(ck, 1), 0.25) + 130),
        margin=dict(l=10, r=10, t=100, b=10),
        hovermode="closest", hoverdistance=-1, dragmode=False, clickmode="event+select",
        plot_bgcolor="rgba(0,0,0,0)",
    )
    return numbers.style(fig, lang), info


def point_to_cell(point: dict, heads: int) -> tuple[int, int] | None:
    """``(layer, head)`` of a point from ``st.plotly_chart``'s selection (``customdata`` when present,
    else its ``point_index`` on the scatter); None for a point of another trace."""
    custom = point.get("customdata")
    if isinstance(custom, (list, tuple)) and len(custom) >= 2:
        return int(custom[0]), int(custom[1])
    idx = point.get("point_index", point.get("point_number"))
    if idx is None or point.get("curve_number", 1) != 1:
        return None
    return int(idx) // heads, int(idx) % heads
