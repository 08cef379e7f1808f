"""Figures of "Why a head attends" (issue 30): the neuron view of one score, its term matrix (query-side part ×
key-side part) with the sums of its rows and columns, each side's parts as bars, rotary position against content,
and Q-, K-, V-composition with the earlier heads.

Pure builders: numpy arrays and plain lists in (``models.why``'s results), plotly figures out (no torch, no
streamlit). Names of parts and tokens are drawn as text (``&``, ``<``, ``>`` escaped). Scores and terms are in logit
units; a positive term raises the score (red), a negative one lowers it (blue), as the diverging maps draw them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from . import numbers
from .text import plotly_labels, plotly_text, text_width, tick_angle
from .traces import add_trace, figure

UP, DOWN = "#b2182b", "#2166ac"  # a term that raises the score / lowers it (the ends of RdBu_r)
SIGNED = "RdBu_r"
SUM_COLOURS = [[0.0, "#f2f2f2"], [1.0, "#f2f2f2"]]  # the sums' row and column: grey cells, their numbers in them
TOP = 8  # parts per side drawn in the term matrix
CELL_PX = 12  # the numbers in the term matrix's cells (plotly would shrink some to fit)


def _signs(values: np.ndarray | Sequence[float]) -> list[str]:
    return [UP if v >= 0 else DOWN for v in np.asarray(values, dtype=np.float64)]


def top_parts(values: np.ndarray, top: int) -> np.ndarray:
    """Indices of the ``top`` largest ``|values|`` (largest first; ties in order)."""
    values = np.abs(np.asarray(values, dtype=np.float64))
    return np.argsort(-values, kind="stable")[:max(int(top), 0)]


def neuron_figure(query: np.ndarray, key: np.ndarray, product: np.ndarray, *,
                  names: Sequence[str] = ("query q", "key k", "q ⊙ k"), title: str = "",
                  dim_title: str = "dimension", value_title: str = "value", height: int | None = None,
                  lang: str = "en") -> go.Figure:
    """BertViz's neuron view (Vig 2019, §3.3) as three aligned rows of bars over the head's dimensions: the query
    vector, the key vector and their elementwise product (whose sum is ``q · k``).

    Args:
        query, key, product: float ``(head_dim,)`` (:class:`models.why.NeuronView`).
        names: the three rows' names (translated). dim_title, value_title: axis and hover names.
        lang: how numbers are written (``tr``: ``0,25``).

    Returns:
        plotly Figure: dimensions on a shared x axis; bars red where positive, blue where negative.
    """
    rows = [np.asarray(v, dtype=np.float64).reshape(-1) for v in (query, key, product)]
    d = rows[0].shape[0]
    if any(r.shape[0] != d for r in rows):
        raise ValueError(f"query, key and product differ in length: {[r.shape[0] for r in rows]}")
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.13,
                        subplot_titles=plotly_labels(names))
    dims = np.arange(d)
    for row, (values, name) in enumerate(zip(rows, names), start=1):
        add_trace(fig, go.Bar(x=dims, y=values, marker_color=_signs(values), name=plotly_text(name), showlegend=False,
                             hovertemplate=f"{plotly_text(name)}<br>{dim_title} %{{x}}<br>{value_title}: "
                                           f"%{{y:{numbers.d3(4, sign=True)}}}<extra></extra>"), row=row, col=1)
        peak = float(np.abs(values).max(initial=0.0)) or 1.0
        fig.update_yaxes(tickformat=numbers.tick_format(peak, 3), nticks=4, zeroline=True, zerolinecolor="#888888",
                         row=row, col=1)
    fig.update_xaxes(title=dict(text=dim_title), row=3, col=1)
    fig.update_xaxes(range=[-0.6, d - 0.4])
    fig.update_layout(title=dict(text=title), height=height or 470, bargap=0.15,
                      margin=dict(l=10, r=10, t=70, b=10), hovermode="closest")
    return numbers.style(fig, lang)


def term_table(matrix: np.ndarray, top: int = TOP) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool, bool]:
    """The term matrix cut to the ``top`` parts of each side by ``|side total|``, the rest of each side summed into
    one more row / column, so that every row and column still sums to its side's total and the whole to the score.

    Returns:
        ``(cells, rows, cols, rest_row, rest_col)``: ``cells`` float64 ``(len(rows) + rest_row, len(cols) +
        rest_col)``; ``rows``, ``cols`` the indices of the parts kept (largest first); ``rest_*`` whether a
        "the rest" row / column was added.
    """
    m = np.asarray(matrix, dtype=np.float64)
    rows, cols = top_parts(m.sum(1), top), top_parts(m.sum(0), top)
    rest_rows = np.setdiff1d(np.arange(m.shape[0]), rows)
    rest_cols = np.setdiff1d(np.arange(m.shape[1]), cols)
    kept = m[np.ix_(rows, cols)]
    if rest_cols.size:
        kept = np.concatenate([kept, m[np.ix_(rows, rest_cols)].sum(1, keepdims=True)], axis=1)
    if rest_rows.size:
        bottom = m[np.ix_(rest_rows, cols)].sum(0)
        if rest_cols.size:
            bottom = np.append(bottom, m[np.ix_(rest_rows, rest_cols)].sum())
        kept = np.concatenate([kept, bottom[None]], axis=0)
    return kept, rows, cols, bool(rest_rows.size), bool(rest_cols.size)


def terms_figure(matrix: np.ndarray, query_names: Sequence[str], key_names: Sequence[str], *, top: int = TOP,
                 rest_name: str = "the rest", sum_name: str = "sum", title: str = "", query_title: str = "query side",
                 key_title: str = "key side", term_title: str = "term", plot_px: int = 560,
                 lang: str = "en") -> go.Figure:
    """The term matrix of one score (:meth:`models.why.RowTerms.matrix`): rows the query side's parts, columns the
    key side's, each cell ``σ · Q_a(i) · K_b(j)``; the ``top`` parts of each side by ``|side total|``, the rest of
    each summed into one row / column, and each row's and column's sum in a grey cell beside it, the score in the
    corner (rows and columns sum to it).

    Args:
        matrix: float ``(Cq, Ck)``. query_names, key_names: the parts' names (translated), ``Cq`` and ``Ck``.
        rest_name, sum_name: the names of the added row / column and of the sums.
        plot_px: the plot's narrowest width (the key side's names turn upright when they do not fit their columns).
        lang: how numbers are written (``tr``: ``0,25``).

    Returns:
        plotly Figure: the key side's parts on top, the query side's down the left; the cells carry their value.

    Raises:
        ValueError: name counts that do not match the matrix.
    """
    m = np.asarray(matrix, dtype=np.float64)
    if m.shape != (len(query_names), len(key_names)):
        raise ValueError(f"{len(query_names)} query / {len(key_names)} key names for a {m.shape} matrix")
    cells, rows, cols, rest_row, rest_col = term_table(m, top)
    y_names = [query_names[a] for a in rows] + [rest_name] * rest_row
    x_names = [key_names[b] for b in cols] + [rest_name] * rest_col
    nr, nc = cells.shape
    peak = float(np.abs(cells).max(initial=0.0)) or 1.0
    digits = 2 if peak >= 0.1 else 3
    hover = (f"{query_title}: %{{customdata[0]}}<br>{key_title}: %{{customdata[1]}}<br>{term_title}: "
             f"%{{z:{numbers.d3(4, sign=True)}}}<extra></extra>")
    custom = np.empty((nr, nc, 2), dtype=object)
    custom[:, :, 0] = np.asarray(plotly_labels(y_names), dtype=object)[:, None]
    custom[:, :, 1] = np.asarray(plotly_labels(x_names), dtype=object)[None, :]
    cell_text = [[numbers.num(v, digits, lang, sign=True) for v in r] for r in cells]
    fig = figure(go.Heatmap(
        z=cells, x=np.arange(nc), y=np.arange(nr), colorscale=SIGNED, zmid=0.0, zmin=-peak, zmax=peak, xgap=1, ygap=1,
        text=cell_text, texttemplate="%{text}", textfont=dict(size=CELL_PX), customdata=custom, hovertemplate=hover,
        colorbar=dict(title=dict(text=term_title, side="right"), tickformat=numbers.tick_format(peak))))
    # the sums: a grey column at the right (each row's sum: that part's query-side total), a grey row at the bottom
    # (each column's sum: that part's key-side total), the score in the corner; the main cells left empty
    grid = np.full((nr + 1, nc + 1), None, dtype=object)
    grid[:nr, nc], grid[nr, :nc], grid[nr, nc] = cells.sum(1), cells.sum(0), float(cells.sum())
    text = np.full((nr + 1, nc + 1), "", dtype=object)
    for (r, c), v in np.ndenumerate(grid):
        if v is not None:
            text[r, c] = numbers.num(v, digits, lang, sign=True)
    add_trace(fig, go.Heatmap(z=grid, x=np.arange(nc + 1), y=np.arange(nr + 1), colorscale=SUM_COLOURS, showscale=False,
                             xgap=1, ygap=1, text=text, texttemplate="<b>%{text}</b>",
                             textfont=dict(size=CELL_PX, color="#222222"),
                             hovertemplate=f"{sum_name}: %{{z:{numbers.d3(4, sign=True)}}}<extra></extra>"))
    longest_y = max((text_width(n, 12) for n in y_names + [sum_name]), default=40.0)
    x_ticks = x_names + [sum_name]
    angle = tick_angle(x_ticks, plot_px / (nc + 1))  # flat when every name fits its column, else upright
    longest_x = max((text_width(n, 12) for n in x_ticks), default=40.0) if angle else 14.0
    top_margin = int(longest_x + 60 + (26 if title else 0))
    fig.update_layout(
        title=dict(text=title),
        xaxis=dict(title=dict(text=key_title), tickmode="array", tickvals=list(range(nc + 1)),
                   ticktext=plotly_labels(x_names) + [plotly_text(sum_name)], side="top", tickangle=angle,
                   range=[-0.5, nc + 0.5], showgrid=False, zeroline=False),
        yaxis=dict(title=dict(text=query_title), tickmode="array", tickvals=list(range(nr + 1)),
                   ticktext=plotly_labels(y_names) + [plotly_text(sum_name)], autorange="reversed",
                   showgrid=False, zeroline=False),
        height=int(top_margin + 40 * (nr + 1) + 30), margin=dict(l=int(min(longest_y, 260)) + 70, r=10, t=top_margin,
                                                                  b=10),
        plot_bgcolor="white", hovermode="closest")
    return numbers.style(fig, lang)


def sides_figure(query_side: np.ndarray, key_side: np.ndarray, query_names: Sequence[str], key_names: Sequence[str],
                 *, top: int = TOP, rest_name: str = "the rest", titles: Sequence[str] = ("query side", "key side"),
                 title: str = "", term_title: str = "term", row_px: int = 26, lang: str = "en") -> go.Figure:
    """Each side's parts of one score as horizontal bars, side by side: the query side's ``σ · Q_a(i) · k_j`` and the
    key side's ``σ · q_i · K_b(j)`` (each side sums to the score), the ``top`` parts of each by ``|value|`` and the
    rest summed in one bar.

    Args:
        query_side, key_side: float ``(Cq,)``, ``(Ck,)``. query_names, key_names: the parts' names (translated).
        titles: the two panels' titles. row_px: the height of one bar's row (more for a larger text size).
        lang: how numbers are written (``tr``: ``0,25``).

    Returns:
        plotly Figure: largest part on top; bars red where a part raises the score, blue where it lowers it.
    """
    fig = make_subplots(rows=1, cols=2, subplot_titles=plotly_labels(titles), horizontal_spacing=0.22)
    longest = 0.0
    bars = 0
    for col, (values, names) in enumerate(((query_side, query_names), (key_side, key_names)), start=1):
        values = np.asarray(values, dtype=np.float64)
        if values.shape[0] != len(names):
            raise ValueError(f"{len(names)} names for {values.shape[0]} values")
        idx = top_parts(values, top)
        shown = list(values[idx])
        labels = [names[a] for a in idx]
        rest = np.setdiff1d(np.arange(values.shape[0]), idx)
        if rest.size:
            shown.append(float(values[rest].sum()))
            labels.append(rest_name)
        longest = max([longest] + [text_width(n, 12) for n in labels])
        bars = max(bars, len(shown))
        add_trace(fig, go.Bar(
            x=shown, y=list(range(len(shown))), orientation="h", marker_color=_signs(shown), showlegend=False,
            text=[numbers.num(v, 3, lang, sign=True) for v in shown], textposition="outside", cliponaxis=False,
            customdata=plotly_labels(labels),
            hovertemplate=f"%{{customdata}}: %{{x:{numbers.d3(4, sign=True)}}}<extra></extra>"), row=1, col=col)
        fig.update_yaxes(tickmode="array", tickvals=list(range(len(shown))), ticktext=plotly_labels(labels),
                         autorange="reversed", row=1, col=col)
        peak = float(np.abs(shown).max(initial=0.0)) or 1.0
        lo, hi = min(0.0, min(shown)), max(0.0, max(shown))
        pad = 0.3 * ((hi - lo) or 1.0)  # room for the value written beside each bar
        fig.update_xaxes(title=dict(text=term_title), tickformat=numbers.tick_format(peak, 3), nticks=5,
                         range=[lo - (pad if lo < 0 else 0.02 * pad), hi + (pad if hi > 0 else 0.02 * pad)],
                         zeroline=True, zerolinecolor="#888888", row=1, col=col)
    fig.update_layout(title=dict(text=title), height=int(110 + row_px * bars), margin=dict(l=10, r=10, t=70, b=10),
                      hovermode="closest")
    return numbers.style(fig, lang)


def rope_figure(distances: np.ndarray, curve: np.ndarray, *, actual: int | None = None,
                actual_score: float | None = None, title: str = "", distance_title: str = "distance i − j",
                score_title: str = "score", actual_name: str = "this score", lang: str = "en") -> go.Figure:
    """The score the same query and key (before the rotation) would give at every distance ``i − j`` (Su et al.
    2021, §3.4.2; :class:`models.why.RopeSplit`'s curve), with the actual distance marked.

    Args:
        distances: int ``(D,)``. curve: float ``(D,)``. actual: the pair's distance (marked when inside the curve's
            range). actual_score: its score (default: the curve's value there). lang: how numbers are written.

    Returns:
        plotly Figure: a line over the distances, a large marker at the actual one.
    """
    x = np.asarray(distances, dtype=np.int64)
    y = np.asarray(curve, dtype=np.float64)
    fig = figure(go.Scatter(x=x, y=y, mode="lines+markers" if len(x) <= 64 else "lines", name=plotly_text(score_title),
                               line=dict(color="#555555", width=2), marker=dict(size=4), showlegend=False,
                               hovertemplate=f"{distance_title}: %{{x}}<br>{score_title}: "
                                             f"%{{y:{numbers.d3(3, sign=True)}}}<extra></extra>"))
    if actual is not None and len(x) and x[0] <= actual <= x[-1]:
        value = float(y[int(np.searchsorted(x, actual))]) if actual_score is None else float(actual_score)
        add_trace(fig, go.Scatter(x=[actual], y=[value], mode="markers", name=plotly_text(actual_name),
                                 marker=dict(size=14, color=UP, symbol="diamond", line=dict(width=1, color="white")),
                                 hovertemplate=f"{plotly_text(actual_name)}<br>{distance_title}: %{{x}}<br>"
                                               f"{score_title}: "
                                               f"%{{y:{numbers.d3(3, sign=True)}}}<extra></extra>"))
        fig.add_vline(x=actual, line=dict(color=UP, width=1, dash="dot"))
    span = float(y.max(initial=0.0) - y.min(initial=0.0)) if y.size else 0.0
    fig.update_layout(title=dict(text=title), height=340, margin=dict(l=10, r=10, t=60, b=10),
                      xaxis=dict(title=dict(text=distance_title), tickformat="d"),
                      yaxis=dict(title=dict(text=score_title), tickformat=numbers.tick_format(span or 1.0),
                                 zeroline=True, zerolinecolor="#888888"),
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0),
                      showlegend=actual is not None, hovermode="closest")
    return numbers.style(fig, lang)


def rope_keys_figure(content: np.ndarray, positional: np.ndarray, key_labels: Sequence[str], *, j: int | None = None,
                     names: Sequence[str] = ("content", "position"), title: str = "", key_title: str = "key",
                     score_title: str = "score", max_ticks: int = 40, lang: str = "en") -> go.Figure:
    """Each key's raw score split into content (the score at distance 0) and what the distance adds, as two bars
    per key (they add up to the score).

    Args:
        content, positional: float ``(n_k,)``. key_labels: the keys' tokens. j: the chosen key (its label in bold).
        names: the two series' names (translated). max_ticks: most key labels drawn. lang: how numbers are written.
    """
    c, p = np.asarray(content, dtype=np.float64), np.asarray(positional, dtype=np.float64)
    n = c.shape[0]
    if p.shape[0] != n or len(key_labels) != n:
        raise ValueError(f"{n} content, {p.shape[0]} positional values and {len(key_labels)} labels")
    labels = plotly_labels(key_labels)
    step = max(1, -(-n // max(max_ticks, 1)))
    ticks = list(range(0, n, step))
    if j is not None and 0 <= j < n and j not in ticks:
        ticks = sorted(ticks + [j])
    text = [f"<b>{labels[k]}</b>" if k == j else labels[k] for k in ticks]
    fig = figure([go.Bar(x=np.arange(n), y=c, name=plotly_text(names[0]), marker_color="#7f7f7f", customdata=labels,
                            hovertemplate=f"%{{customdata}} (%{{x}})<br>{plotly_text(names[0])}: "
                                          f"%{{y:{numbers.d3(3, sign=True)}}}<extra></extra>"),
                     go.Bar(x=np.arange(n), y=p, name=plotly_text(names[1]), marker_color="#ff7f0e", customdata=labels,
                            hovertemplate=f"%{{customdata}} (%{{x}})<br>{plotly_text(names[1])}: "
                                          f"%{{y:{numbers.d3(3, sign=True)}}}<extra></extra>")])
    peak = float(max(np.abs(c).max(initial=0.0), np.abs(p).max(initial=0.0))) or 1.0
    angle = 0 if max((text_width(t, 12) for t in key_labels), default=0) + 4 <= 700 / max(len(ticks), 1) else -90
    fig.update_layout(barmode="group", title=dict(text=title), height=360, margin=dict(l=10, r=10, t=60, b=10),
                      xaxis=dict(title=dict(text=key_title), tickmode="array", tickvals=ticks, ticktext=text,
                                 tickangle=angle),
                      yaxis=dict(title=dict(text=score_title), tickformat=numbers.tick_format(peak), zeroline=True,
                                 zerolinecolor="#888888"),
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0),
                      hovermode="closest")
    return numbers.style(fig, lang)


def composition_figure(scores: np.ndarray, layer: int, *, titles: Sequence[str] = ("Q", "K", "V"), title: str = "",
                       layer_title: str = "layer", head_title: str = "head", score_title: str = "composition",
                       row_px: int = 18, lang: str = "en") -> go.Figure:
    """Q-, K- and V-composition (Elhage et al. 2021) of one head with every head of the layers before ``layer``, as
    three small layer × head maps on one colour scale.

    Args:
        scores: float ``(3, layers, heads)`` (:meth:`models.why.Composition.for_head`; NaN for layers not before).
        layer: the reading head's layer (rows ``0 .. layer − 1`` are drawn; ``layer >= 1``).
        titles: the three maps' titles. row_px: the height of one layer's row (more for a larger text size).
        lang: how numbers are written.

    Raises:
        ValueError: ``layer`` < 1 (no earlier head) or beyond the scores.
    """
    s = np.asarray(scores, dtype=np.float64)
    if not 1 <= layer <= s.shape[1]:
        raise ValueError(f"layer {layer}: composition needs an earlier layer (1 .. {s.shape[1]})")
    s = s[:, :layer]
    heads = s.shape[2]
    finite = s[np.isfinite(s)]
    peak = float(finite.max(initial=0.0)) or 1.0
    fig = make_subplots(rows=1, cols=3, subplot_titles=plotly_labels(titles), horizontal_spacing=0.05,
                        shared_yaxes=True)
    for col in range(3):
        add_trace(fig, go.Heatmap(
            z=s[col], x=np.arange(heads), y=np.arange(layer), coloraxis="coloraxis", xgap=1, ygap=1,
            hovertemplate=f"{layer_title} %{{y}}, {head_title} %{{x}}<br>{plotly_text(titles[col])}: "
                          f"%{{z:{numbers.d3(3)}}}<extra></extra>"), row=1, col=col + 1)
        fig.update_xaxes(title=dict(text=head_title), dtick=1 if heads <= 16 else 2, row=1, col=col + 1)
    fig.update_yaxes(autorange="reversed", dtick=1 if layer <= 16 else (2 if layer <= 32 else 4))
    fig.update_yaxes(title=dict(text=layer_title), row=1, col=1)
    fig.update_layout(title=dict(text=title), height=int(min(1200, max(260, 150 + row_px * layer))),
                      margin=dict(l=10, r=10, t=70, b=10),
                      coloraxis=dict(colorscale="Viridis", cmin=0.0, cmax=peak,
                                     colorbar=dict(title=dict(text=score_title, side="right"),
                                                   tickformat=numbers.tick_format(peak))))
    return numbers.style(fig, lang)
