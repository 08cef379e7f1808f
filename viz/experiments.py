"""Figures of the Experiments page (issue 15): numpy in, plotly out; every text arrives translated. No torch, no
streamlit."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from . import numbers
from .text import plotly_labels
from .traces import add_trace, figure

BLUE, ORANGE, GREEN, GREY, RED = "#1f77b4", "#ff7f0e", "#2ca02c", "#7f7f7f", "#d62728"


def _layout(fig: go.Figure, *, title: str, x: str, y: str, height: int = 360, lang: str = "en") -> go.Figure:
    """Title on top, the legend (if any) at the bottom of the figure under the x axis title, so neither runs into
    the other in half the page's width; numbers written ``lang``'s way (:func:`viz.numbers.style`)."""
    legend = any(getattr(trace, "showlegend", None) is not False and getattr(trace, "name", None) for trace in fig.data)
    fig.update_layout(title=dict(text=title), height=height + (60 if legend else 0),
                      margin=dict(l=60, r=20, t=50, b=110 if legend else 50),
                      xaxis=dict(title=dict(text=x)), yaxis=dict(title=dict(text=y)),
                      legend=dict(orientation="h", yref="container", y=0.01, x=0, xanchor="left", yanchor="bottom"))
    return numbers.style(fig, lang)


def per_layer_lines(series: dict[str, np.ndarray], *, title: str, layer_title: str, value_title: str,
                    percent: bool = True, bottom: int | None = None, bottom_label: str = "",
                    lang: str = "en") -> go.Figure:
    """One line per named series over the layers (e.g. the first-token share per layer, Xiao et al. fig. 2; the
    attention to [CLS] / [SEP] / punctuation per layer, Clark et al. fig. 2).

    Args:
        series: ``label -> float (layers,)`` values in [0, 1] (drawn in percent when ``percent``).
        bottom: shade layers ``0 .. bottom - 1`` (the "bottom two layers" of the sink claim), labelled
            ``bottom_label``; None for no shading.
        lang: how numbers are written (``tr``: ``%30``, ``0,25``).

    Returns:
        plotly Figure, layer index on x (0 first).
    """
    fig = figure()
    colours = (BLUE, ORANGE, GREEN, RED, "#9467bd", "#8c564b")
    scale = 100.0 if percent else 1.0
    for i, (label, values) in enumerate(series.items()):
        v = np.asarray(values, dtype=np.float64) * scale
        value = numbers.percent_hover("y", 1, lang) if percent else f"%{{y:{numbers.d3(3)}}}"
        add_trace(fig, go.Scatter(x=np.arange(len(v)), y=v, mode="lines+markers", name=label,
                                 line=dict(color=colours[i % len(colours)], width=2),
                                 hovertemplate=f"{layer_title} %{{x}}: {value}<extra>{label}</extra>"))
    if bottom:
        fig.add_vrect(x0=-0.5, x1=bottom - 0.5, fillcolor="rgba(127,127,127,0.15)", line_width=0,
                      annotation_text=bottom_label, annotation_position="top left")
    fig = _layout(fig, title=title, x=layer_title, y=value_title, lang=lang)
    if percent:
        fig.update_yaxes(rangemode="tozero", **numbers.percent_axis(lang))
    layers = max((len(v) for v in series.values()), default=1)
    fig.update_xaxes(dtick=1 if layers <= 16 else 2, range=[-0.5, layers - 0.5])
    return fig


def streaming_figure(windows: Sequence[int] | np.ndarray, window: np.ndarray, with_sinks: np.ndarray, full: float, *,
                     title: str, window_label: str, sinks_label: str, full_label: str, window_title: str,
                     loss_title: str, lang: str = "en") -> go.Figure:
    """StreamingLLM as mask swaps: loss against the window size for the window alone and the window plus sinks,
    full attention as a horizontal line (Xiao et al. 2023, fig. 3 / table 1).

    Args:
        windows: int ``(k,)`` window sizes. window, with_sinks: float ``(k,)`` losses in nats. full: nats.

    Returns:
        plotly Figure, the windows on a categorical x axis.
    """
    x = [str(int(w)) for w in windows]
    fig = figure()
    add_trace(fig, go.Scatter(x=x, y=np.asarray(window, dtype=np.float64), mode="lines+markers", name=window_label,
                             line=dict(color=RED, width=2)))
    add_trace(fig, go.Scatter(x=x, y=np.asarray(with_sinks, dtype=np.float64), mode="lines+markers", name=sinks_label,
                             line=dict(color=BLUE, width=3)))
    add_trace(fig, go.Scatter(x=x, y=[float(full)] * len(x), mode="lines", name=full_label,
                             line=dict(color=GREY, dash="dash")))
    fig = _layout(fig, title=title, x=window_title, y=loss_title, lang=lang)
    fig.update_xaxes(type="category")
    fig.update_yaxes(rangemode="tozero")
    return fig


def loss_bars(labels: Sequence[str], values: Sequence[float], *, title: str, loss_title: str,
              spread: Sequence[tuple[float, float] | None] | None = None, lang: str = "en", decimals: int = 2,
              unit: str = "nats") -> go.Figure:
    """Bars of losses in nats (induction heads: first copy, second copy, second copy with the top heads off, with
    random heads off; grammar probes: the suffix's surprisal or a case pair's embedding distance).

    Args:
        labels: one text per bar. values: nats per bar. spread: per bar ``(min, max)`` drawn as an error bar (the
            random draws), or None. lang: how the bars' numbers are written (``tr``: ``13,45``).
        decimals: decimals of the numbers on the bars. unit: the unit named on hover (already translated).

    Returns:
        plotly Figure.
    """
    vals = np.asarray(values, dtype=np.float64)
    colours = [GREY, GREEN, RED, ORANGE][: len(vals)] + [BLUE] * max(0, len(vals) - 4)
    err = None
    if spread is not None and any(s is not None for s in spread):
        plus = [0.0 if s is None else s[1] - v for s, v in zip(spread, vals)]
        minus = [0.0 if s is None else v - s[0] for s, v in zip(spread, vals)]
        err = dict(type="data", array=plus, arrayminus=minus, visible=True, color="#444", width=0)
    # horizontal bars: the labels sit on the y axis, where long ones cannot run into each other
    fig = figure(go.Bar(y=plotly_labels(list(labels)), x=vals, orientation="h", marker_color=colours, error_x=err,
                           text=[numbers.num(v, decimals, lang) for v in vals], textposition="inside",
                           insidetextanchor="start",
                           hovertemplate=f"%{{y}}: %{{x:{numbers.d3(max(3, decimals))}}} {unit}<extra></extra>"))
    fig = _layout(fig, title=title, x=loss_title, y="", height=300, lang=lang)
    fig.update_xaxes(rangemode="tozero")
    fig.update_yaxes(autorange="reversed", automargin=True)
    return fig


def pattern_bars(counts: dict[str, int], labels: dict[str, str], *, title: str, count_title: str,
                 lang: str = "en") -> go.Figure:
    """Counts of attention-pattern types over all heads (Kovaleva et al. 2019, fig. 2-3).

    Args:
        counts: ``type -> count``, in drawing order. labels: ``type -> shown name``.

    Returns:
        plotly Figure.
    """
    names = list(counts)
    fig = figure(go.Bar(y=[labels.get(n, n) for n in names], x=[int(counts[n]) for n in names], orientation="h",
                           marker_color=BLUE, text=[numbers.integer(counts[n], lang) for n in names],
                           textposition="outside", cliponaxis=False))
    fig = _layout(fig, title=title, x=count_title, y="", height=300, lang=lang)
    fig.update_yaxes(autorange="reversed", automargin=True)
    return fig


def published_marks(fig: go.Figure, marks: Sequence[tuple[float, str]], *, band: tuple[float, str] | None = None
                    ) -> go.Figure:
    """Add the published curves' shape to a pruning curve (x in percent): a shaded band ``0 .. band[0]`` (the
    share pruned "with no noticeable drop") and dotted vertical lines at other published shares.

    Args:
        marks: ``(share in [0, 1], label)`` per line. band: ``(share, label)`` or None.

    Returns:
        the same figure.
    """
    if band is not None:
        fig.add_vrect(x0=0, x1=100 * band[0], fillcolor="rgba(44,160,44,0.12)", line_width=0,
                      annotation_text=band[1], annotation_position="bottom left")
    for share, label in marks:
        fig.add_vline(x=100 * share, line=dict(color=GREEN, dash="dot"), annotation_text=label,
                      annotation_position="top left")
    return fig


def dtw_figure(matrix: np.ndarray, row_labels: Sequence[str], path_rows: np.ndarray, path_frames: np.ndarray, *,
               frame_seconds: float, title: str, time_title: str, path_label: str, lang: str = "en") -> go.Figure:
    """Whisper's alignment: the alignment heads' standardised, median-filtered, head-averaged cross-attention
    (rows: text tokens, columns: 20 ms speech frames) with the dynamic-time-warping path drawn over it (OpenAI
    ``whisper/timing.py`` ``find_alignment``).

    Args:
        matrix: float ``(rows, frames)``. row_labels: ``rows`` texts (index axis, so repeated tokens stay apart).
        path_rows, path_frames: int ``(L,)`` the DTW path. frame_seconds: seconds per frame (0.02).

    Returns:
        plotly Figure, time in seconds on x, the first row at the top.

    Raises:
        ValueError: labels that do not match the rows.
    """
    m = np.nan_to_num(np.asarray(matrix, dtype=np.float64))
    if m.ndim != 2 or m.shape[0] != len(row_labels):
        raise ValueError(f"A matrix of shape {m.shape} does not match {len(row_labels)} row labels.")
    x = (np.arange(m.shape[1]) + 0.5) * frame_seconds
    fig = figure(go.Heatmap(z=m, x=x, y=np.arange(m.shape[0]), colorscale="Blues", showscale=False,
                               hovertemplate="%{x:.2f} s, row %{y}: %{z:.2f}<extra></extra>"))
    add_trace(fig, go.Scatter(x=(np.asarray(path_frames) + 0.5) * frame_seconds, y=np.asarray(path_rows), mode="lines",
                             line=dict(color=RED, width=2), name=path_label))
    fig = _layout(fig, title=title, x=time_title, y="", height=max(260, 60 + 26 * m.shape[0]), lang=lang)
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=list(range(m.shape[0])),
                     ticktext=plotly_labels(list(row_labels)))
    return fig


def lens_tracks(tracks: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]], *, title: str, stream_title: str,
                value_title: str, embeddings_label: str, lang: str = "en") -> go.Figure:
    """The logit lens over the layers, one track per language (Wendler et al. 2024, fig. 2): each track's mean
    probability as a line and its range over the prompts as a band.

    Args:
        tracks: ``label -> (mean, low, high)``, each float ``(layers + 1,)`` in [0, 1] (stream 0: the embeddings,
            stream ``l + 1``: layer ``l``'s output), drawn in percent.
        embeddings_label: the x label of stream 0 (layers are numbered from 0 after it).

    Returns:
        plotly Figure.
    """
    fig = figure()
    colours = (RED, BLUE, GREEN, ORANGE)
    fills = ("rgba(214,39,40,0.15)", "rgba(31,119,180,0.15)", "rgba(44,160,44,0.15)", "rgba(255,127,14,0.15)")
    streams = max((len(m) for m, _, _ in tracks.values()), default=1)
    x = [embeddings_label] + [str(layer) for layer in range(streams - 1)]
    for i, (label, (mean, low, high)) in enumerate(tracks.items()):
        m, lo, hi = (100.0 * np.asarray(v, dtype=np.float64) for v in (mean, low, high))
        add_trace(fig, go.Scatter(x=x + x[::-1], y=np.concatenate([hi, lo[::-1]]), fill="toself", mode="lines",
                                 line=dict(width=0), fillcolor=fills[i % len(fills)], hoverinfo="skip",
                                 showlegend=False))
        add_trace(fig, go.Scatter(x=x, y=m, mode="lines+markers", name=label, line=dict(color=colours[i % 4], width=2),
                                 hovertemplate=f"%{{x}}: {numbers.percent_hover('y', 2, lang)}<extra>{label}</extra>"))
    fig = _layout(fig, title=title, x=stream_title, y=value_title, lang=lang)
    fig.update_xaxes(type="category")
    fig.update_yaxes(rangemode="tozero", **numbers.percent_axis(lang))
    return fig
