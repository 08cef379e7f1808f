"""Numpy transforms of attention weights, shared by every view (numpy only: no torch, no plotly).

Every function takes attention weights shaped ``(..., query, key)`` (typically float32
``(layers, heads, query_len, key_len)`` from :class:`models.Analysis`), where each row holds the
softmax weights one query gives to the keys and sums to 1 (0 for a query with no allowed key).

The order the Explore page applies them in (and states on the page):

1. choose the weights: every head, :func:`average_heads`, or :func:`rollout`;
2. hide tokens (special tokens, the first token) with :func:`filter_tokens`, renormalising rows;
3. merge subword tokens into words with :func:`merge_words` (sum over key pieces, mean over query pieces);
4. for long inputs, :func:`pool` the matrices of small overview maps.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

import numpy as np

__all__ = [
    "renormalise_rows", "filter_tokens", "keep_mask", "word_units", "merge_words", "average_heads",
    "rollout", "pool", "is_punctuation", "head_statistics", "STATISTICS",
]


def renormalise_rows(weights: np.ndarray) -> np.ndarray:
    """Divide each row by its sum so it sums to 1 again; rows that sum to 0 stay all zeros.

    Args:
        weights: float array ``(..., query, key)``, non-negative.

    Returns:
        float32 array of the same shape.
    """
    w = np.asarray(weights, dtype=np.float32)
    sums = w.sum(axis=-1, keepdims=True)
    return np.divide(w, sums, out=np.zeros_like(w), where=sums > 0)


def keep_mask(n: int, *, drop: Sequence[int] = (), drop_flags: Sequence[bool] | None = None) -> np.ndarray:
    """Boolean ``(n,)`` mask that is False at the indices in ``drop`` and where ``drop_flags`` is True.

    Args:
        n: tokens. drop: indices to drop (negative indices count from the end).
        drop_flags: bool ``(n,)``, True for tokens to drop.

    Raises:
        ValueError: ``drop_flags`` not of shape ``(n,)``. IndexError: an index in ``drop`` outside [-n, n).
    """
    keep = np.ones(n, dtype=bool)
    if drop_flags is not None:
        flags = np.asarray(drop_flags, dtype=bool)
        if flags.shape != (n,):
            raise ValueError(f"drop_flags has shape {flags.shape}, expected ({n},)")
        keep &= ~flags
    for i in drop:
        if not -n <= i < n:
            raise IndexError(f"token index {i} out of range for {n} tokens")
        keep[i] = False
    return keep


def filter_tokens(weights: np.ndarray, keep_query: np.ndarray, keep_key: np.ndarray,
                  renormalise: bool = True) -> np.ndarray:
    """Remove query rows and key columns, then (by default) renormalise each remaining row to sum 1.

    Used to hide special tokens ([CLS], [SEP], <s> ...) and the first token (an "attention sink",
    Xiao et al. 2023, "Efficient Streaming Language Models with Attention Sinks"): the weight the hidden
    keys took is shared out over the visible keys in proportion, ``w'_qk = w_qk / sum_{k' kept} w_qk'``.
    A row whose kept keys all had weight 0 stays all zeros (never NaN).

    Args:
        weights: ``(..., query, key)``.
        keep_query: bool ``(query,)``. keep_key: bool ``(key,)``.
        renormalise: False keeps the original weights (rows then sum to less than 1).

    Returns:
        float32 ``(..., kept queries, kept keys)``.

    Raises:
        ValueError: a mask whose length does not match the matrix.
    """
    w = np.asarray(weights, dtype=np.float32)
    keep_query = np.asarray(keep_query, dtype=bool)
    keep_key = np.asarray(keep_key, dtype=bool)
    if keep_query.shape != (w.shape[-2],) or keep_key.shape != (w.shape[-1],):
        raise ValueError(
            f"masks of length {keep_query.shape}/{keep_key.shape} do not match a {w.shape[-2]}x{w.shape[-1]} matrix"
        )
    out = w[..., keep_query, :][..., keep_key]
    return renormalise_rows(out) if renormalise else out


def word_units(n: int, words: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
    """Partition token indices ``0..n-1`` into display units: each word's tokens form one unit, every
    token in no word (special tokens, whitespace-only tokens) is a unit of its own. Units are ordered by
    their first token.

    Args:
        n: number of tokens. words: for each word, the indices of its tokens.

    Returns:
        list of index tuples covering every token exactly once.

    Raises:
        ValueError: an index out of range or in two words.
    """
    owner = [-1] * n
    for w, idx in enumerate(words):
        for i in idx:
            if not 0 <= i < n:
                raise ValueError(f"word {w} has token index {i}, out of range for {n} tokens")
            if owner[i] != -1:
                raise ValueError(f"token {i} is in two words ({owner[i]} and {w})")
            owner[i] = w
    units: list[tuple[int, ...]] = []
    seen: set[int] = set()
    for i in range(n):
        if owner[i] == -1:
            units.append((i,))
        elif owner[i] not in seen:
            seen.add(owner[i])
            units.append(tuple(sorted(words[owner[i]])))
    return units


def merge_words(weights: np.ndarray, query_units: Sequence[Sequence[int]],
                key_units: Sequence[Sequence[int]]) -> np.ndarray:
    """Merge subword tokens into words: **sum over a word's key pieces, mean over its query pieces**.

    ``W'[a, b] = (1/|a|) * sum_{q in a} sum_{k in b} W[q, k]``, i.e. ``Q @ W @ K`` with ``Q`` the
    ``(units, query)`` averaging matrix and ``K`` the ``(key, units)`` indicator matrix. Summing over keys
    keeps each row a probability distribution (how much the word attends to each word); averaging over
    queries treats every piece of the word as an equal reader. This is the rule of Clark et al. 2019,
    "What Does BERT Look At?", §4.1 (token-token maps converted to word-word maps).

    Args:
        weights: ``(..., query, key)``.
        query_units, key_units: index groups (see :func:`word_units`); for rows to keep summing to 1 the
            key units must cover every key once.

    Returns:
        float32 ``(..., len(query_units), len(key_units))``.

    Raises:
        ValueError: an empty unit or an index out of range.
    """
    w = np.asarray(weights, dtype=np.float32)
    nq, nk = w.shape[-2], w.shape[-1]
    q_mat = np.zeros((len(query_units), nq), dtype=np.float32)
    for a, idx in enumerate(query_units):
        if not len(idx):
            raise ValueError(f"query unit {a} is empty")
        if min(idx) < 0 or max(idx) >= nq:
            raise ValueError(f"query unit {a} has an index out of range for {nq} queries")
        q_mat[a, list(idx)] = 1.0 / len(idx)
    k_mat = np.zeros((nk, len(key_units)), dtype=np.float32)
    for b, idx in enumerate(key_units):
        if not len(idx):
            raise ValueError(f"key unit {b} is empty")
        if min(idx) < 0 or max(idx) >= nk:
            raise ValueError(f"key unit {b} has an index out of range for {nk} keys")
        k_mat[list(idx), b] = 1.0
    return (q_mat @ w @ k_mat).astype(np.float32)


def average_heads(weights: np.ndarray) -> np.ndarray:
    """Mean over heads: ``(layers, heads, q, k)`` -> float32 ``(layers, 1, q, k)`` (rows still sum to 1).

    Raises:
        ValueError: ``weights`` not 4-D.
    """
    w = np.asarray(weights, dtype=np.float32)
    if w.ndim != 4:
        raise ValueError(f"expected (layers, heads, query, key), got shape {w.shape}")
    return w.mean(axis=1, keepdims=True)


def rollout(weights: np.ndarray, residual: float = 0.5) -> np.ndarray:
    """Attention rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers", §3).

    Per layer ``l``: average the heads, account for the residual connection by adding the identity and
    renormalising the rows, ``A_l = (1 - r) * mean_h W_l + r * I`` (the paper uses r = 0.5, i.e.
    ``0.5 W + 0.5 I``; a row with no allowed key becomes ``I``'s row); then multiply through the layers,
    ``R_0 = A_0``, ``R_l = A_l @ R_{l-1}``. ``R_l[q, k]`` is how much of token ``k``'s input reaches
    query ``q``'s output of layer ``l``.

    Args:
        weights: ``(layers, heads, n, n)`` self-attention (square: rollout needs the same tokens on
            both axes, so cross-attention cannot be rolled out).
        residual: the identity's share ``r`` in [0, 1) (not checked; with ``r = 0`` a row with no allowed
            key stays all zero).

    Returns:
        float32 ``(layers, 1, n, n)``: the rollout up to and including each layer; rows sum to 1.

    Raises:
        ValueError: non-square matrices or a bad shape.
    """
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 4 or w.shape[-1] != w.shape[-2]:
        raise ValueError(f"rollout needs square self-attention (layers, heads, n, n), got shape {w.shape}")
    n = w.shape[-1]
    eye = np.eye(n)
    out = np.empty((w.shape[0], 1, n, n), dtype=np.float32)
    acc = None
    for layer in range(w.shape[0]):
        a = (1.0 - residual) * w[layer].mean(axis=0) + residual * eye
        sums = a.sum(axis=-1, keepdims=True)
        a = np.divide(a, sums, out=np.zeros_like(a), where=sums > 0)
        acc = a if acc is None else a @ acc
        out[layer, 0] = acc
    return out


def bin_edges(n: int, bins: int) -> np.ndarray:
    """``bins + 1`` integer edges splitting positions ``0 .. n`` into nearly equal runs (the bins of :func:`pool`)."""
    return np.linspace(0, n, bins + 1).round().astype(int)


def pool(weights: np.ndarray, size: int) -> np.ndarray:
    """Shrink each ``(query, key)`` matrix to at most ``size x size`` cells for an overview map.

    Consecutive tokens are grouped into ``min(size, n)`` nearly equal bins per axis; a cell is the
    **mean over its query bin of the sum over its key bin** (the word-merge rule of :func:`merge_words`
    applied to bins), so every pooled row still sums to 1. Matrices already small enough are returned
    unchanged (as float32).

    Args:
        weights: ``(..., query, key)``. size: largest side, >= 1.

    Returns:
        float32 ``(..., min(query, size), min(key, size))``.

    Raises:
        ValueError: ``size`` < 1.
    """
    if size < 1:
        raise ValueError("size must be >= 1")
    w: np.ndarray = np.asarray(weights, dtype=np.float32)
    nq, nk = w.shape[-2], w.shape[-1]
    if nk > size:
        edges = bin_edges(nk, size)
        w = np.add.reduceat(w, edges[:-1], axis=-1)
    if nq > size:
        edges = bin_edges(nq, size)
        counts = np.diff(edges).astype(np.float32)
        w = np.add.reduceat(w, edges[:-1], axis=-2) / counts[:, None]
    return w.astype(np.float32)


def is_punctuation(text: str) -> bool:
    """True when ``text`` is non-empty and every non-space character is Unicode punctuation (P*) or a
    symbol (S*), e.g. ``.``, ``,``, ``"``, ``!?``."""
    chars = [c for c in text if not c.isspace()]
    return bool(chars) and all(unicodedata.category(c)[0] in "PS" for c in chars)


# name -> one-line definition (units), shown with the summary table
STATISTICS = {
    "entropy": "mean entropy of a query's weights, in nats (0 = all on one key; ln n = uniform)",
    "distance": "mean |query - key| position distance, weighted by attention, in tokens",
    "previous": "mean weight on the previous token (key = query - 1)",
    "first": "mean weight on the first token",
    "special": "mean total weight on special tokens ([CLS], [SEP], <s> ...)",
    "punctuation": "mean total weight on punctuation tokens",
    "same_word": "mean total weight on the other pieces of the query's own word",
}


def head_statistics(weights: np.ndarray, *, special: Sequence[bool], punctuation: Sequence[bool],
                    word_of: Sequence[int], self_attention: bool = True) -> dict[str, np.ndarray]:
    """Per-head summary statistics (Clark et al. 2019, "What Does BERT Look At?", §3 and §4).

    For each layer and head, averaged over the queries whose row is not all zero:

    - ``entropy``: ``-sum_k w_qk ln w_qk`` (nats; Shannon 1948, §6; Clark et al. §3.3);
    - ``distance``: ``sum_k w_qk |q - k|`` (tokens);
    - ``previous``: ``w_{q,q-1}`` over queries ``q >= 1`` (Clark et al. §3.1, "attend to the previous token");
    - ``first``: ``w_{q,0}``;
    - ``special``: ``sum_{k special} w_qk`` (Clark et al. §3.2, weight on [CLS]/[SEP]);
    - ``punctuation``: ``sum_{k punctuation} w_qk`` (Clark et al. §3.2, periods and commas);
    - ``same_word``: ``sum_{k != q, word(k) = word(q)} w_qk`` over queries that belong to a word made of
      two or more tokens (NaN if there is none).

    Args:
        weights: ``(layers, heads, query, key)``.
        special, punctuation: bool ``(key,)`` flags of the key tokens.
        word_of: ``(key,)`` word index of each token, -1 for none (self-attention only).
        self_attention: False for cross-attention: ``distance``, ``previous`` and ``same_word`` are NaN
            (queries and keys are different sequences).

    Returns:
        dict name -> float32 ``(layers, heads)`` (names as in :data:`STATISTICS`): entropy in nats,
        distance in tokens, the others shares of weight in [0, 1]; NaN where a statistic has no query.
        ``special``/``punctuation`` are 0 when no key carries the flag.

    Raises:
        ValueError: ``weights`` not 4-D.
    """
    w = np.asarray(weights, dtype=np.float32)
    if w.ndim != 4:
        raise ValueError(f"expected (layers, heads, query, key), got shape {w.shape}")
    layers, heads, nq, nk = w.shape
    special_keys = np.asarray(special, dtype=bool)
    punctuation_keys = np.asarray(punctuation, dtype=bool)
    live = w.sum(axis=-1) > 0  # (L, H, q)

    def mean_over_queries(values: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        m = live if mask is None else (live & mask)
        c = m.sum(axis=-1)
        total = np.where(m, values, 0.0).sum(axis=-1)
        return np.divide(total, c, out=np.full(total.shape, np.nan, dtype=np.float64), where=c > 0).astype(np.float32)

    plogp = np.zeros_like(w)
    np.multiply(w, np.log(w, out=np.zeros_like(w), where=w > 0), out=plogp)
    stats = {"entropy": mean_over_queries(-plogp.sum(axis=-1))}
    del plogp
    nan = np.full((layers, heads), np.nan, dtype=np.float32)
    if self_attention and nq == nk:
        pos = np.arange(nq)
        dist = np.abs(pos[:, None] - pos[None, :]).astype(np.float32)
        stats["distance"] = mean_over_queries((w * dist).sum(axis=-1))
        prev = np.zeros((layers, heads, nq), dtype=np.float32)
        prev[..., 1:] = w[..., pos[1:], pos[1:] - 1]
        stats["previous"] = mean_over_queries(prev, (pos >= 1)[None, None, :])
    else:
        stats["distance"] = nan.copy()
        stats["previous"] = nan.copy()
    stats["first"] = mean_over_queries(w[..., 0])
    stats["special"] = (mean_over_queries(w[..., special_keys].sum(axis=-1)) if special_keys.any()
                        else np.zeros_like(nan))
    stats["punctuation"] = (mean_over_queries(w[..., punctuation_keys].sum(axis=-1)) if punctuation_keys.any()
                            else np.zeros_like(nan))
    words = np.asarray(word_of)
    if self_attention and nq == nk and words.shape == (nk,):
        same = (words[:, None] == words[None, :]) & (words[:, None] >= 0) & ~np.eye(nk, dtype=bool)
        has_partner = same.any(axis=-1)
        stats["same_word"] = mean_over_queries((w * same).sum(axis=-1), has_partner[None, None, :])
    else:
        stats["same_word"] = nan.copy()
    return {k: stats[k] for k in STATISTICS}
