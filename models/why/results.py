"""What the explanations return: dataclasses of numpy arrays (float32 unless said), ``n_k`` keys, ``Cq``/``Ck`` parts
on the query/key side, ``head_dim`` the head's width.

Notation (Vaswani et al. 2017, eq. 1; Su et al. 2021 for RoPE; Raffel et al. 2020, §2.1 for T5's bias; Team Gemma
2024, §2 for soft-capping): the model's logit for query ``i`` and key ``j`` of head ``h`` is::

    logit_ij = cap(σ · q_i · k_j) + bias_ij + mask_ij,     cap(s) = c · tanh(s / c)  (or s without soft-capping)

with ``σ`` the family's scaling (``1/√d_k``, Gemma's ``query_pre_attn_scalar^-1/2``, T5's 1), ``q_i`` and ``k_j`` the
vectors the attention function received (after the rotation, with grouped-query attention's shared key head), and
``weight_ij = softmax_j(logit_ij)``. The **raw score** is ``s_ij = σ · q_i · k_j``: what the terms add up to.
Scores, terms, logits and biases are in logit units (the softmax's input: a difference of 1 between two keys is a
ratio of ``e`` between their weights); weights are probabilities in [0, 1]; the vectors are in the units of the
model's queries and keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

import numpy as np

from .. import checks
from .stream import Component


@dataclass
class NeuronView:
    """BertViz's neuron view (Vig 2019, "A Multiscale Visualization of Attention in the Transformer Model", §3.3)
    for one query and one key of one head, for any family.

    Attributes:
        query, key: ``(head_dim,)``: ``q_i`` and ``k_j`` as the attention function received them (after the norm on
            the head and the rotation; the key of the shared key head ``kv_head``).
        product: ``(head_dim,)``: ``q_i ⊙ k_j`` (sums to ``q_i · k_j``).
        query_unrotated, key_unrotated: ``(head_dim,)`` before the rotation, or None for a family without RoPE.
        scaling: ``σ``. softcap: ``c`` or None. raw: ``s_ij = σ · q_i · k_j``. capped: ``cap(s_ij)``.
        bias: ``bias_ij`` (T5's relative position bias; 0 elsewhere). allowed: the mask lets ``i`` see ``j``.
        logit: ``logit_ij`` (−inf where not allowed). weight: ``weight_ij``, the analysis's own weight.
        row_logits, row_weights: ``(n_k,)``: the whole row (logits −inf where not allowed).
        kv_head: the key/value head query head ``head`` reads (``head // (heads / kv_heads)``).
    """

    head: int
    kv_head: int
    i: int
    j: int
    query: np.ndarray
    key: np.ndarray
    product: np.ndarray
    query_unrotated: np.ndarray | None
    key_unrotated: np.ndarray | None
    scaling: float
    softcap: float | None
    raw: float
    capped: float
    bias: float
    allowed: bool
    logit: float
    weight: float
    row_logits: np.ndarray
    row_weights: np.ndarray


@dataclass
class Term:
    """One cell of a score's term matrix, in words.

    Attributes:
        value: its part of the raw score. query, key: the parts of the stream it pairs (:class:`Component`).
        words: ``"key side: head 1.4's output at 3 ('cat'); query side: the token embedding of 5 ('the')"``.
    """

    value: float
    query: Component
    key: Component
    words: str


@dataclass
class ScoreTerms:
    """The raw score ``s_ij`` of one query and key split into a matrix of terms (see :class:`RowTerms`).

    Attributes:
        matrix: ``(Cq, Ck)``: ``σ · Q_a(i) · K_b(j)``; ``matrix.sum() == raw``.
        query_side: ``(Cq,)`` = ``matrix.sum(1)`` (``σ · Q_a(i) · k_j``); key_side: ``(Ck,)`` = ``matrix.sum(0)``
            (``σ · q_i · K_b(j)``).
        raw, bias, logit, weight, allowed: as in :class:`NeuronView`.
        top: the largest terms by magnitude (:class:`Term`).
    """

    i: int
    j: int
    query_components: list[Component]
    key_components: list[Component]
    matrix: np.ndarray
    query_side: np.ndarray
    key_side: np.ndarray
    raw: float
    bias: float
    logit: float
    weight: float
    allowed: bool
    top: list[Term]


@dataclass
class RowTerms:
    """The raw scores of one query against every key, each split into parts of the residual stream before the layer
    (the query side ``q_i = Σ_a Q_a(i)``, the key side ``k_j = Σ_b K_b(j)``; parts in ``query_components`` /
    ``key_components``: the embeddings, each earlier head, each earlier MLP, the biases in the stream and the layer's
    own constant, each through the layer's norms frozen, projection, head norm and rotation; :mod:`models.why`).

    Attributes:
        query_side: ``(n_k, Cq)``: ``σ · Q_a(i) · k_j``; each row sums to ``raw`` (the terms of the query side).
        key_side: ``(n_k, Ck)``: ``σ · q_i · K_b(j)``; each row sums to ``raw``.
        raw: ``(n_k,)``: ``σ · q_i · k_j`` from the model's own query and key (float64 products, stored float32).
        bias, logits, weights, allowed: ``(n_k,)`` as in :class:`NeuronView` (the analysis's weights).
        query_parts: ``(Cq, head_dim)``; key_parts: ``(Ck, n_k, head_dim)``: the parts themselves (held for
            :meth:`matrix`: ``Ck · n_k · head_dim`` floats).
        labels: each key's token text (for the words). scaling: ``σ``.
    """

    model: str
    stack: str
    layer: int
    head: int
    kv_head: int
    i: int
    query_components: list[Component]
    key_components: list[Component]
    query_side: np.ndarray
    key_side: np.ndarray
    raw: np.ndarray
    bias: np.ndarray
    logits: np.ndarray
    weights: np.ndarray
    allowed: np.ndarray
    query_parts: np.ndarray = field(repr=False)
    key_parts: np.ndarray = field(repr=False)
    labels: list[str] = field(default_factory=list, repr=False)
    scaling: float = 1.0

    def _key(self, j) -> int:
        n = self.raw.shape[0]
        return checks.whole("j", j, -n, n - 1) % n

    def matrix(self, j: int) -> np.ndarray:
        """float32 ``(Cq, Ck)``: the term matrix of key ``j``, ``σ · Q_a(i) · K_b(j)`` (rows sum to
        ``query_side[j]``, columns to ``key_side[j]``, the whole to ``raw[j]``; computed in float64).

        Raises:
            InvalidArgumentError: ``j`` out of range.
        """
        j = self._key(j)
        scale = self.scaling
        return (scale * self.query_parts.astype(np.float64) @ self.key_parts[:, j].astype(np.float64).T).astype(
            np.float32)

    def at(self, j: int, k: int = 5) -> ScoreTerms:
        """The decomposition of key ``j`` (:class:`ScoreTerms`) with its ``k`` largest terms in words.

        Raises:
            InvalidArgumentError: ``j`` out of range, ``k`` not a whole number in [1, 100].
        """
        j = self._key(j)
        k = checks.whole("k", k, 1, 100)
        m = self.matrix(j)
        return ScoreTerms(self.i, j, self.query_components, self.key_components, m, self.query_side[j],
                          self.key_side[j], float(self.raw[j]), float(self.bias[j]), float(self.logits[j]),
                          float(self.weights[j]), bool(self.allowed[j]), self._top(m, j, k))

    def _top(self, m: np.ndarray, j: int, k: int) -> list[Term]:
        order = np.argsort(-np.abs(m), axis=None)[:k]
        out = []
        for flat in order:
            a, b = divmod(int(flat), m.shape[1])
            qc, kc = self.query_components[a], self.key_components[b]
            words = f"key side: {kc.at(j, self._label(j))}; query side: {qc.at(self.i, self._label(self.i))}"
            out.append(Term(float(m[a, b]), qc, kc, words))
        return out

    def _label(self, p: int) -> str:
        return self.labels[p] if p < len(self.labels) else ""

    def by_head(self, side: str, j: int | None = None, share: bool = False) -> np.ndarray:
        """float32 ``(layer, heads)``: the ``side`` (``query`` or ``key``) terms of each earlier head at key ``j``, or
        with ``j=None`` summed over the keys weighted by the attention weights (``Σ_j weight_j · term_j``: which
        earlier heads write what this head's key side reads where it attends). Logit units; with ``share`` divided
        by the sum of ``|term|`` over every part of that side (so the grid's magnitudes sum to at most 1).

        Raises:
            InvalidArgumentError: ``side`` not ``query``/``key``, ``j`` out of range.
        """
        side = checks.choice("side", side, ("query", "key"))
        comps = self.query_components if side == "query" else self.key_components
        values = self.query_side if side == "query" else self.key_side
        row = values[self._key(j)] if j is not None else (self.weights[:, None].astype(np.float64) * values).sum(0)
        if share:
            row = row / max(float(np.abs(row).sum()), 1e-30)
        heads = [c for c in comps if c.kind == "head"]
        layers = max((cast(int, c.layer) for c in heads), default=-1) + 1  # a head's part has its layer and head
        width = max((cast(int, c.head) for c in heads), default=-1) + 1
        out = np.zeros((layers, width), np.float32)
        for c, v in zip(comps, row):
            if c.kind == "head":
                out[c.layer, c.head] = v
        return out


@dataclass
class RopeSplit:
    """Position against content in a rotary head's raw scores (Su et al. 2021, §3.4.2: ``(R_i q)·(R_j k) = q ·
    R_{j−i} k`` depends on the positions only through ``j − i``).

    With ``q̃_i``, ``k̃_j`` the query and key before the rotation and ``R_Δ`` the model's own rotation at position
    ``Δ`` (its tables, scaling included)::

        content_ij    = σ · (R_0 q̃_i) · (R_0 k̃_j)     the score the same vectors give at distance 0
        positional_ij = s_ij − content_ij              what the distance adds (s_ij = σ · q_i · k_j)
        share_ij      = |positional_ij| / (|content_ij| + |positional_ij|)   in [0, 1] (0 when both are 0)
        curve(Δ)      = σ · (R_Δ q̃_i) · (R_0 k̃_j)     the score the same q̃_i, k̃_j give at distance i − j = Δ

    so ``curve(i − j) = s_ij``. Dimensions a partial rotation leaves alone count as content.

    Attributes:
        raw, content, positional, share: ``(n_k,)`` for every key of query ``i``.
        weighted_share: ``Σ_j weight_ij · share_ij`` (how positional the head is where it attends).
        j: the key of the curve. distances: int64 ``(D,)`` (0 .. max_distance). curve: ``(D,)``.
    """

    head: int
    i: int
    j: int
    raw: np.ndarray
    content: np.ndarray
    positional: np.ndarray
    share: np.ndarray
    weighted_share: float
    distances: np.ndarray
    curve: np.ndarray
