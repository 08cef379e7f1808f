"""Cross-attention as word alignment: target words (decoder queries) → source words (encoder keys).

numpy transforms (special-token filter with row renormalisation, token → word merge) and a plotly line
view. No torch, no streamlit.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from . import numbers
from . import transforms as tf
from .masks import PALETTE
from .text import plotly_labels
from .traces import add_trace, figure


def hide_special(weights: np.ndarray, query_special: Sequence[bool], key_special: Sequence[bool], *,
                 renormalise: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Drop special-token rows and columns; optionally renormalise each remaining row to sum to 1.

    Args:
        weights: float ``(..., q, k)`` attention weights (rows sum to 1 or 0).
        query_special, key_special: bool ``(q,)`` and ``(k,)``, True for tokens to hide.
        renormalise: divide each row by its sum over the kept keys (rows summing to 0 stay 0, never NaN).

    Returns:
        ``(weights (..., q', k'), kept query indices (q',), kept key indices (k',))``.

    Raises:
        ValueError: flag lengths that do not match ``weights``.
    """
    qs = np.asarray(query_special, dtype=bool)
    ks = np.asarray(key_special, dtype=bool)
    if np.shape(weights)[-2:] != (qs.size, ks.size):
        raise ValueError(f"Weights of shape {np.shape(weights)} do not match {qs.size} query and {ks.size} key flags.")
    out = tf.filter_tokens(weights, ~qs, ~ks, renormalise=renormalise)
    return out.astype(np.float64), np.flatnonzero(~qs), np.flatnonzero(~ks)


def renormalise_without(weights: np.ndarray, key_special: Sequence[bool]) -> np.ndarray:
    """Zero the columns of hidden keys and renormalise each row to sum to 1 over the others, keeping the
    matrix's shape (so token indices, e.g. ``Word.tokens``, still apply).

    Args:
        weights: float ``(..., q, k)``. key_special: bool ``(k,)``, True for keys to hide.

    Returns:
        float64 ``(..., q, k)``; rows with no weight left stay all zero (never NaN).

    Raises:
        ValueError: ``key_special`` does not match the last axis.
    """
    w = np.asarray(weights, dtype=np.float64).copy()
    ks = np.asarray(key_special, dtype=bool)
    if w.shape[-1] != ks.size:
        raise ValueError(f"Weights with {w.shape[-1]} keys do not match {ks.size} key flags.")
    w[..., ks] = 0.0
    return tf.renormalise_rows(w).astype(np.float64)


def word_attention(weights: np.ndarray, query_words: Sequence[Sequence[int]],
                   key_words: Sequence[Sequence[int]]) -> np.ndarray:
    """Token-level attention → word-level attention.

    Attention *to* a word is the sum over its tokens; attention *from* a word is the mean over its tokens
    (Clark et al. 2019, "What Does BERT Look At?", §4.1), so each word row keeps the token rows' total.

    Args:
        weights: float ``(..., q, k)``.
        query_words, key_words: for each word, the token indices it is made of (``Word.tokens``).

    Returns:
        float64 ``(..., len(query_words), len(key_words))`` (zeros when either word list is empty).

    Raises:
        ValueError: an empty word or a token index out of range (see :func:`viz.transforms.merge_words`).
    """
    w = np.asarray(weights)
    if not query_words or not key_words:
        return np.zeros(w.shape[:-2] + (len(query_words), len(key_words)))
    return tf.merge_words(w, query_words, key_words).astype(np.float64)


def alignment_figure(weights: np.ndarray, target_labels: Sequence[str], source_labels: Sequence[str], *,
                     title: str = "", threshold: float = 0.1, source_title: str = "source",
                     target_title: str = "target", lang: str = "en") -> go.Figure:
    """Lines between target words (bottom) and source words (top); a line's width and opacity grow with the
    cross-attention weight. Lines under ``threshold`` are not drawn; each target word's strongest source
    word is always drawn.

    Args:
        weights: float ``(target_words, source_words)``, rows sum to ≤ 1 (NaN drawn as 0).
        lang: how the weights in the hover are written (``tr``: ``0,250``).

    Returns:
        plotly Figure.

    Raises:
        ValueError: labels that do not match ``weights``.
    """
    w = np.nan_to_num(np.asarray(weights, dtype=np.float64))
    if w.shape != (len(target_labels), len(source_labels)):
        raise ValueError(f"Weights of shape {w.shape} do not match {len(target_labels)} x {len(source_labels)} labels.")
    n_t, n_s = w.shape
    tl, sl = plotly_labels(target_labels), plotly_labels(source_labels)
    span = max(n_t, n_s, 2) - 1
    x_t = np.linspace(0, span, n_t) if n_t > 1 else np.array([span / 2])
    x_s = np.linspace(0, span, n_s) if n_s > 1 else np.array([span / 2])
    fig = figure()
    best = w.argmax(axis=1) if n_s else np.zeros(n_t, dtype=int)
    for i in range(n_t):
        color = PALETTE[i % len(PALETTE)]
        for j in range(n_s):
            v = w[i, j]
            if v < threshold and not (j == best[i] and v > 0):
                continue
            add_trace(fig, go.Scatter(
                x=[x_t[i], x_s[j]], y=[0, 1], mode="lines", line=dict(color=color, width=1 + 7 * v),
                opacity=float(0.25 + 0.75 * v), showlegend=False,
                hovertext=f"{tl[i]} → {sl[j]}: {numbers.num(v, 3, lang)}", hoverinfo="text",
            ))
    add_trace(fig, go.Scatter(x=x_s, y=[1] * n_s, mode="markers+text", text=sl,
                             textposition="top center", marker=dict(size=9, color="#444"), hoverinfo="text",
                             showlegend=False, textfont=dict(size=13)))
    add_trace(fig, go.Scatter(x=x_t, y=[0] * n_t, mode="markers+text", text=tl,
                             textposition="bottom center", hoverinfo="text", showlegend=False,
                             marker=dict(size=9, color=[PALETTE[i % len(PALETTE)] for i in range(n_t)]),
                             textfont=dict(size=13)))
    fig.add_annotation(x=-0.4, y=1.28, text=source_title, showarrow=False, xanchor="left", font=dict(size=11))
    fig.add_annotation(x=-0.4, y=-0.28, text=target_title, showarrow=False, xanchor="left", font=dict(size=11))
    fig.update_layout(title=dict(text=title, font=dict(size=13)), height=320,
                      margin=dict(l=10, r=10, t=40 if title else 10, b=10), plot_bgcolor="white")
    fig.update_xaxes(visible=False, range=[-0.6, span + 0.6])
    fig.update_yaxes(visible=False, range=[-0.4, 1.4])
    return numbers.style(fig, lang)
