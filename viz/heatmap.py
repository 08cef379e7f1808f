"""Head heatmap: one head's attention matrix with the tokens' own labels on both axes.

Axes are positions (0, 1, 2 ...) with ``ticktext`` set to the labels, because plotly merges repeated
category labels ("the" twice would collapse into one row).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from . import numbers
from .text import plotly_labels, tick_angle, top_axis_margin
from .traces import figure

# Cells above which the hover stops naming both tokens (the per-cell label pairs would dominate the
# bytes sent); the axes still carry the labels and the hover still gives positions and the weight.
HOVER_LABEL_CELLS = 128 * 128
# Most tick labels drawn per axis; longer inputs label every k-th token. 40 keeps a line's height per label
# on a 600-px axis (a 1280 x 720 projector), so neighbours never overlap.
MAX_TICKS = 40
PLOT_PX = 600  # the narrowest plot area the heatmap is drawn in (the main column at 1280 px)
COLORSCALE = "Blues"


def tick_positions(n: int, max_ticks: int = MAX_TICKS) -> list[int]:
    """Positions that get a tick label: all when ``n <= max_ticks``, else every ``ceil(n/max_ticks)``-th."""
    step = max(1, -(-n // max_ticks))
    return list(range(0, n, step))


def head_heatmap(matrix: np.ndarray, query_labels: Sequence[str], key_labels: Sequence[str], *,
                 title: str = "", query_title: str = "query", key_title: str = "key",
                 weight_title: str = "weight", height: int | None = None, max_ticks: int = MAX_TICKS,
                 plot_px: int = PLOT_PX, lang: str = "en") -> go.Figure:
    """Heatmap of one ``(query, key)`` attention matrix.

    Args:
        matrix: float ``(query, key)`` weights in [0, 1] (rows usually sum to 1).
        query_labels, key_labels: display labels, one per row / column (the input's own characters).
        title: figure title (say there whether rows were renormalised).
        query_title, key_title, weight_title: axis and hover names (already translated).
        height: figure height in px (default grows with the number of rows).
        max_ticks: most tick labels per axis (every k-th label beyond it, see :func:`tick_positions`).
        plot_px: the narrowest width the plot area is drawn at (a half-width column: about 260), so key labels
            turn upright before they overlap.
        lang: how numbers are written (ticks, colour bar, hover; ``tr``: ``0,25``).

    Returns:
        plotly Figure: rows are queries (top to bottom), columns keys; hover shows query, key, weight.

    Raises:
        ValueError: label counts that do not match the matrix.
    """
    m = np.asarray(matrix, dtype=np.float32)
    nq, nk = m.shape
    if len(query_labels) != nq or len(key_labels) != nk:
        raise ValueError(f"{len(query_labels)} query / {len(key_labels)} key labels for a {nq}x{nk} matrix")
    zmax = float(max(m.max(initial=0.0), 1e-6))
    trace = dict(z=m, x=np.arange(nk), y=np.arange(nq), colorscale=COLORSCALE, zmin=0.0, zmax=zmax,
                 colorbar=dict(title=dict(text=weight_title, side="right"), tickformat=numbers.tick_format(zmax)))
    weight = f"%{{z:{numbers.d3(4)}}}"
    if nq * nk <= HOVER_LABEL_CELLS:
        custom = np.empty((nq, nk, 2), dtype=object)
        custom[:, :, 0] = np.asarray(plotly_labels(query_labels), dtype=object)[:, None]
        custom[:, :, 1] = np.asarray(plotly_labels(key_labels), dtype=object)[None, :]
        trace["customdata"] = custom
        trace["hovertemplate"] = (f"{query_title}: %{{customdata[0]}} (%{{y}})<br>{key_title}: %{{customdata[1]}} "
                                  f"(%{{x}})<br>{weight_title}: {weight}<extra></extra>")
    else:
        trace["hovertemplate"] = f"{query_title} %{{y}} → {key_title} %{{x}}<br>{weight_title}: {weight}<extra></extra>"
    fig = figure(go.Heatmap(**trace))
    xt, yt = tick_positions(nk, max_ticks), tick_positions(nq, max_ticks)
    x_text = plotly_labels(key_labels[i] for i in xt)
    angle = tick_angle([key_labels[i] for i in xt], plot_px / max(len(xt), 1))
    top = top_axis_margin([key_labels[i] for i in xt], angle=angle, title=title)
    fig.update_layout(
        title=dict(text=title),
        xaxis=dict(title=dict(text=key_title), tickmode="array", tickvals=xt, ticktext=x_text,
                   side="top", tickangle=angle, constrain="domain"),
        yaxis=dict(title=dict(text=query_title), tickmode="array", tickvals=yt,
                   ticktext=plotly_labels(query_labels[i] for i in yt), autorange="reversed"),
        height=(height or int(min(1100, max(380, 160 + 22 * min(nq, 40))))) + max(0, top - 110),
        margin=dict(l=10, r=10, t=top, b=10),
    )
    return numbers.style(fig, lang)


def image_config(filename: str, fmt: str = "png") -> dict:
    """plotly ``config`` for ``st.plotly_chart``: the camera button of the figure's mode bar downloads it
    as ``fmt`` (``png`` at twice the shown resolution, or ``svg``) under ``filename``.

    Raises:
        ValueError: ``fmt`` other than ``png`` or ``svg``.
    """
    if fmt not in ("png", "svg"):
        raise ValueError(f"image format must be png or svg, got {fmt!r}")
    return {
        "displaylogo": False,
        "displayModeBar": True,
        "toImageButtonOptions": {"format": fmt, "filename": filename, "scale": 2 if fmt == "png" else 1},
    }
