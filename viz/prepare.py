"""Explore's options pipeline, as a pure function of an analysis: which heads (all, their average, rollout),
which tokens (special tokens and the first token hidden, rows renormalised) and tokens or words. Every
Explore view draws what :func:`prepare` returns; a notebook can call it too. numpy only."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from viz import transforms as tf


@dataclass(frozen=True)
class Prepared:
    """The weights every view draws, after the options.

    Attributes:
        weights: float32 ``(layers, heads', query', key')``; ``heads'`` is 1 for an average or rollout.
        q_labels, k_labels: one label per row / column (the input's own characters).
        q_segments, k_segments: 0 / 1 (sentence A / B) per row / column.
        q_index, k_index: for each row / column, the token positions it stands for.
        renormalised: rows were renormalised after hiding tokens.
        n_tokens: query / key token counts before any option.
    """

    weights: np.ndarray
    q_labels: list[str]
    k_labels: list[str]
    q_segments: list[int]
    k_segments: list[int]
    q_index: list[tuple[int, ...]]
    k_index: list[tuple[int, ...]]
    renormalised: bool
    n_tokens: tuple[int, int]


def segments(tokens) -> list[int]:
    """Sentence (0 = A, 1 = B) of each token; a special token belongs to the sentence before it
    (``[CLS] A [SEP]`` is A, ``B [SEP]`` is B, as BERT's token type ids)."""
    out, current = [], 0
    for tok in tokens:
        if not tok.special:
            current = tok.segment
        out.append(current)
    return out


def _units(tokens, words, keep: np.ndarray) -> tuple[list[tuple[int, ...]], list[str]]:
    """Word units over the kept tokens (new positions) and their labels."""
    new_pos = -np.ones(len(tokens), dtype=int)
    new_pos[keep] = np.arange(int(keep.sum()))
    groups, texts = [], {}
    for w in words:
        idx = tuple(int(new_pos[i]) for i in w.tokens if new_pos[i] >= 0)
        if idx:
            groups.append(idx)
            full = len(idx) == len(w.tokens)
            texts[idx] = w.text if full else "".join(tokens[i].text for i in w.tokens if new_pos[i] >= 0).strip()
    units = tf.word_units(int(keep.sum()), groups)
    kept = np.nonzero(keep)[0]
    labels = [texts.get(u, tokens[int(kept[u[0]])].label) for u in units]
    return units, labels


def _window_words(words, r0: int, r1: int) -> list:
    """The words with a token in rows ``r0 .. r1 - 1``, their token indices shifted to the window."""
    out = []
    for w in words:
        idx = tuple(i - r0 for i in w.tokens if r0 <= i < r1)
        if idx:
            out.append(replace(w, tokens=idx))
    return out


MODES = ("heads", "avg", "rollout")


def _index(value, size: int, what: str) -> int | None:
    """``value`` as an index into ``size`` items (negative from the end, as numpy), or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what} must be a whole number, got {value!r}")
    index = int(value) + size if value < 0 else int(value)
    if not 0 <= index < size:
        raise IndexError(f"{what} {value} is out of range: there are {size}")
    return index


def prepare(a, stack: str, *, hide_special: bool = False, hide_first: bool = False, words: bool = False,
            mode: str = "heads", layer: int | None = None, head: int | None = None,
            rows: tuple[int, int] | None = None, value_norms: np.ndarray | None = None) -> Prepared:
    """Apply Explore's options to one stack's attention weights: what every view (head view, model view,
    heatmap, summary) draws.

    Order: value-weighting (with ``value_norms``: each weight times ``‖W_O^h v_j^h‖``, each row renormalised
    to sum to 1: the share of the row's value-weighted mass, Kobayashi et al. 2020, eq. 6) -> heads (``mode``:
    ``heads`` every head, ``avg`` their mean, ``rollout``: Abnar & Zuidema 2020, eq. 1,
    :func:`viz.transforms.rollout`, through every layer up to ``layer``) -> hide special tokens and/or the first
    token and renormalise each row over the keys left (:func:`viz.transforms.filter_tokens`) -> merge the tokens
    of each word
    (:func:`viz.transforms.merge_words`: sum over a word's keys, mean over its queries; Clark et al. 2019,
    §3). With ``layer`` (and ``head``, ``rows``: a ``(start, stop)`` range of query tokens) only that layer's
    (head's, rows') weights are computed and prepared, as ``(1, heads', rows', key')``: how a long input,
    whose weights are computed on demand, is drawn.

    Args:
        a: a :class:`models.Analysis` (anything with its ``attentions``, ``axis_tokens`` and ``axis_words``).
        stack: ``encoder``, ``decoder`` or ``cross``.
        value_norms: float ``(layers, heads, keys)``: ``‖W_O^h v_j^h‖`` of this stack
            (:attr:`models.flow.Flow.value_norms`), or None for the raw weights.

    Returns:
        a :class:`Prepared` (float32 weights, labels, segments, token positions per row/column).

    Raises:
        KeyError: ``stack`` is not in ``a.attentions``. IndexError: ``layer`` / ``head`` out of range
        (negative ones count from the end). TypeError: a layer or head that is not a whole number.
        ValueError: an unknown ``mode``; ``rows`` not ``(start, stop)`` within the queries.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    q_tokens, k_tokens = a.axis_tokens(stack)
    q_words, k_words = a.axis_words(stack)
    layers, heads = a.attentions[stack].shape[:2]
    layer = _index(layer, layers, "layer")
    head = _index(head, heads, "head")
    r0, r1 = rows or (0, len(q_tokens))
    if not (isinstance(r0, (int, np.integer)) and isinstance(r1, (int, np.integer)) and 0 <= r0 < r1 <= len(q_tokens)):
        raise ValueError(f"rows must be (start, stop) with 0 <= start < stop <= {len(q_tokens)}, got {rows!r}")
    if value_norms is not None and np.shape(value_norms) != (layers, heads, len(k_tokens)):
        raise ValueError(f"value_norms must be (layers, heads, keys) = {(layers, heads, len(k_tokens))}, "
                         f"got {np.shape(value_norms)}")

    def weighted(w: np.ndarray, norms: np.ndarray | None) -> np.ndarray:  # w (L', H', q, k), norms (L', H', k)
        if norms is None:
            return w
        w = w * norms[:, :, None, :]
        return w / np.maximum(w.sum(-1, keepdims=True), 1e-30)

    norms = None if value_norms is None else np.asarray(value_norms, dtype=np.float32)
    if mode == "rollout":  # through every layer up to the one asked for, on all rows; then the rows asked for
        upto = layers if layer is None else layer + 1
        w = tf.rollout(weighted(np.asarray(a.attentions[stack][:upto]), None if norms is None else norms[:upto]))
        w = (w if layer is None else w[-1:])[..., r0:r1, :]
    elif layer is None:
        w = weighted(np.asarray(a.attentions[stack])[..., r0:r1, :], norms)
    else:
        w = a.attentions[stack][layer, slice(None) if head is None else head, r0:r1]
        w = w.reshape(1, -1, r1 - r0, w.shape[-1])
        if norms is not None:
            w = weighted(w, norms[layer:layer + 1, slice(None) if head is None else slice(head, head + 1)])
    if rows is not None:
        q_tokens, q_words = q_tokens[r0:r1], _window_words(q_words, r0, r1)
    if mode == "avg":
        w = tf.average_heads(w)
    self_attn = stack != "cross"
    keep_q = tf.keep_mask(len(q_tokens), drop_flags=[x.special for x in q_tokens] if hide_special else None)
    keep_k = tf.keep_mask(len(k_tokens), drop_flags=[x.special for x in k_tokens] if hide_special else None)
    if hide_first:
        keep_k[0] = False
        if self_attn and r0 == 0:
            keep_q[0] = False
    renormalised = not (keep_q.all() and keep_k.all())
    if renormalised:
        w = tf.filter_tokens(w, keep_q, keep_k)
    q_seg_all, k_seg_all = segments(q_tokens), segments(k_tokens)
    if words:
        q_units, q_labels = _units(q_tokens, q_words, keep_q)
        k_units, k_labels = _units(k_tokens, k_words, keep_k)
        w = tf.merge_words(w, q_units, k_units)
    else:
        q_units = [(i,) for i in range(int(keep_q.sum()))]
        k_units = [(i,) for i in range(int(keep_k.sum()))]
        q_labels = [x.label for x, k in zip(q_tokens, keep_q) if k]
        k_labels = [x.label for x, k in zip(k_tokens, keep_k) if k]
    q_kept, k_kept = np.nonzero(keep_q)[0], np.nonzero(keep_k)[0]
    q_index = [tuple(int(q_kept[i]) + r0 for i in u) for u in q_units]
    k_index = [tuple(int(k_kept[i]) for i in u) for u in k_units]
    return Prepared(
        weights=np.ascontiguousarray(w, dtype=np.float32), q_labels=q_labels, k_labels=k_labels,
        q_segments=[q_seg_all[u[0] - r0] for u in q_index], k_segments=[k_seg_all[u[0]] for u in k_index],
        q_index=q_index, k_index=k_index, renormalised=renormalised,
        n_tokens=(len(a.axis_tokens(stack)[0]), len(k_tokens)),
    )
