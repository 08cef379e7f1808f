"""Figures of the cost lesson: measured time / memory against sequence length next to an n² curve,
and KV-cache sizes. Pure plotly."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from . import numbers
from .traces import add_trace, figure

COLOURS = ("#d6604d", "#4393c3", "#5aae61", "#9970ab")


def cost_curves(series: Mapping[str, tuple[Sequence[float], Sequence[float]]], *,
                reference: tuple[Sequence[float] | np.ndarray, Sequence[float] | np.ndarray] | None = None,
                reference_name: str = "∝ n²",
                x_title: str = "tokens n", y_title: str = "seconds", title: str = "", log: bool = True,
                lang: str = "en") -> go.Figure:
    """Measured values against n, one line per series, and a dashed reference curve.

    Args:
        series: ``name -> (ns, values)`` (already translated names).
        reference: ``(ns, values)`` of the c·n² curve (``models.lessons.cost.quadratic_reference``).
        log: log–log axes (an n² curve is then a straight line of slope 2).
        lang: how numbers are written (``tr``: ``4.096`` tokens, ``0,0012`` s; powers of ten as 10⁻³, never
            "1m", which reads as minutes).

    Returns:
        plotly Figure.
    """
    fig = figure()
    for i, (name, (ns, values)) in enumerate(series.items()):
        add_trace(fig, go.Scatter(x=list(ns), y=list(values), mode="lines+markers", name=name,
                                 line=dict(color=COLOURS[i % len(COLOURS)], width=2),
                                 hovertemplate=f"n=%{{x:,}}<br>{y_title}: %{{y:.4g}}<extra>{name}</extra>"))
    if reference is not None and len(reference[0]):
        add_trace(fig, go.Scatter(x=list(reference[0]), y=list(reference[1]), mode="lines", name=reference_name,
                                 line=dict(color="#444444", dash="dash"),
                                 hovertemplate=f"n=%{{x:,}}<br>%{{y:.4g}}<extra>{reference_name}</extra>"))
    axis = "log" if log else "linear"
    ns = sorted({float(n) for _, (xs, _) in series.items() for n in xs})
    fig.update_xaxes(title_text=x_title, type=axis, tickmode="array", tickvals=ns,
                     ticktext=[numbers.general(n, 6, lang) for n in ns])
    # a log axis labels each power of ten only ("D2" also labelled 2 and 5 of every decade: "5, 2, 0.01, 5, 2")
    fig.update_yaxes(title_text=y_title, type=axis, **({"dtick": 1} if log else {}))
    fig.update_layout(title=dict(text=title), height=400, margin=dict(l=10, r=10, t=40, b=10),
                      legend=dict(orientation="h", y=-0.3, x=0.5, xanchor="center", yanchor="top"))
    return numbers.style(fig, lang)


def kv_bars(labels: Sequence[str], with_gqa: Sequence[float], without_gqa: Sequence[float], *,
            names: tuple[str, str] = ("with GQA", "without GQA"), y_title: str = "GiB", title: str = "",
            lang: str = "en") -> go.Figure:
    """KV-cache size per model (or context), with grouped-query attention and without it (Ainslie et al.
    2023).

    Args:
        labels: one per bar group. with_gqa, without_gqa: sizes in the unit named by ``y_title`` (the
            caller converts, e.g. ``models.analysis.kv_layout.kv_cache_bytes`` / 2**30 for GiB).
        lang: how numbers are written (``tr``: ``0,125``).

    Returns:
        plotly Figure (grouped bars).
    """
    fig = figure([
        go.Bar(x=list(labels), y=list(with_gqa), name=names[0], marker_color=COLOURS[0],
               hovertemplate=f"%{{x}}<br>%{{y:{numbers.d3(3)}}} {y_title}<extra>{names[0]}</extra>"),
        go.Bar(x=list(labels), y=list(without_gqa), name=names[1], marker_color=COLOURS[1],
               hovertemplate=f"%{{x}}<br>%{{y:{numbers.d3(3)}}} {y_title}<extra>{names[1]}</extra>"),
    ])
    fig.update_yaxes(title_text=y_title)
    fig.update_layout(title=dict(text=title), barmode="group", height=340, margin=dict(l=10, r=10, t=40, b=10),
                      legend=dict(orientation="h", y=-0.15, x=0.5, xanchor="center", yanchor="top"))
    return numbers.style(fig, lang)


def power_of_ten(n: int, lang: str = "en") -> str:
    """``10**12 -> "10¹²"`` for exact powers of ten, else the number with ``lang``'s thousands separators."""
    s = str(int(n))
    if s.startswith("1") and set(s[1:]) <= {"0"} and len(s) > 1:
        sup = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")
        return "10" + str(len(s) - 1).translate(sup)
    return numbers.integer(n, lang)
