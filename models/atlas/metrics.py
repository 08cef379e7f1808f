"""What a head does over a corpus: per-text sums of each head's weights, the pooled metrics, their intervals.

For every text, :class:`TextSums` adds up, per stack, layer and head, the numerators of the metrics below from
the weights block by block (as :mod:`models.analysis.statistics`: no ``n x n`` map of a head is kept), and the
denominators are counts that depend only on the text. A metric over a corpus is the ratio of the summed
numerators to the summed denominators (pooled over every query of every text, as HeadVis/Neuronpedia compute
it), and its 95 % interval is a bootstrap over texts (:func:`bootstrap`).

With ``w_qk`` a head's weight from query ``q`` to key ``k`` and ``n`` the tokens of a text:

==============  ==============================================  ==============================  ==========
metric          numerator (summed over queries q)               denominator                     source
==============  ==============================================  ==============================  ==========
self            ``w_qq``                                        ``n``                           [1]
previous        ``w_{q,q-1}``, q >= 1                           ``n - 1``                       [1]
entropy         ``-Σ_k w_qk ln w_qk`` (nats)                    ``n``                           [1]
distance        ``Σ_k w_qk |q - k|`` (tokens)                   ``n``                           [1]
distance_var    ``Σ_k w_qk (q - k)^2``, minus distance^2        ``n``                           [1]
induction       ``Σ w_{q, p+1}`` over earlier p with the same   queries with an earlier         [1], [2]
                token id as q, each weight < 0.01 counted 0     occurrence of their token
first           ``w_{q,0}`` (the first token: a sink)            ``n``                           [3], [4]
special         ``Σ_{k control token} w_qk``                    ``n``                           [3]
punctuation     ``Σ_{k punctuation} w_qk``                      ``n``                           [3]
same_word       ``Σ_{k != q, word(k) = word(q)} w_qk``          queries in a word of 2+ tokens  [3]
==============  ==============================================  ==============================  ==========

``distance_var`` is the second moment minus the square of the first, both pooled (Neuronpedia's
``qk_distance_variance``). For cross-attention (queries and keys from different sequences) ``self``,
``previous``, ``distance``, ``distance_var``, ``induction`` and ``same_word`` have no queries: NaN.

[1] Neuronpedia's HeadVis pipeline, ``utils/neuronpedia-utils/neuronpedia_utils/headvis/compute-head-metrics.py``
    (``compute_attention_metrics_for_batch``), after Luger, Kamath et al. (Anthropic 2026), "Visualizing
    Attention Heads". [2] Olsson et al. (2022), "In-context Learning and Induction Heads", §2 (prefix matching).
    [3] Clark et al. (2019), "What Does BERT Look At?", §3. [4] Xiao et al. (2024), "Efficient Streaming
    Language Models with Attention Sinks", §3.1.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np
import torch

from .. import checks
from ..errors import InvalidArgumentError

#: the sums kept per (text, stack, layer, head), in the order of the Parquet columns
SUMS = ("positions", "self", "previous", "previous_n", "entropy", "distance", "distance_sq", "induction",
        "induction_n", "first", "special", "punctuation", "same_word", "same_word_n")
#: metric -> (numerator, denominator) among :data:`SUMS` (``distance_var`` is computed from two ratios)
RATIOS = {
    "self": ("self", "positions"), "previous": ("previous", "previous_n"), "entropy": ("entropy", "positions"),
    "distance": ("distance", "positions"), "distance_var": ("distance_sq", "positions"),
    "induction": ("induction", "induction_n"), "first": ("first", "positions"), "special": ("special", "positions"),
    "punctuation": ("punctuation", "positions"), "same_word": ("same_word", "same_word_n"),
}
METRICS = tuple(RATIOS)
#: Neuronpedia's induction threshold: a weight below it counts 0 (its ``--induction-attention-threshold``)
INDUCTION_THRESHOLD = 0.01
#: keys kept per query for the strongest rows (the snippet highlights them)
TOP_KEYS = 3


def induction_pairs(ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray, int]:
    """The (query, key) pairs of the induction metric: for each query ``q`` and each earlier position ``p``
    holding the same token id, the key ``p + 1`` (the token that followed the earlier occurrence).

    Returns:
        ``(queries, keys, repeated)``: int64 ``(pairs,)`` each, and how many queries have an earlier occurrence.
    """
    ids = checks.sequence("ids", ids.tolist() if isinstance(ids, (np.ndarray, torch.Tensor)) else ids, least=0)
    if not all(isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_)) for i in ids):
        raise InvalidArgumentError(f"ids must be a list of token ids (whole numbers), got {checks.shown(ids)}.",
                                   code="arg_shape", name="ids", shape="(tokens,) of whole numbers",
                                   got=checks.shown(ids))
    seen: dict[int, list[int]] = defaultdict(list)
    qs, ks, repeated = [], [], 0
    for q, token in enumerate(ids):
        earlier = seen[int(token)]
        for p in earlier:
            qs.append(q)
            ks.append(p + 1)
        repeated += bool(earlier)
        earlier.append(q)
    return np.asarray(qs, dtype=np.int64), np.asarray(ks, dtype=np.int64), repeated


class TextSums:
    """The sums of one stack of one text, filled block by block with :meth:`add` (all 0 for a text of fewer
    than 2 queries, which Neuronpedia skips).

    Args:
        layers, heads: the stack's shape. n_q, n_k: query and key lengths (tokens).
        ids: vocabulary id of each key (self-attention: also of each query), for the induction pairs.
        special, punctuation: bool ``(n_k,)`` flags of the keys. word_of: int ``(n_k,)`` word of each key, -1
            for none. self_attention: queries and keys are the same tokens (False for cross-attention).
    """

    def __init__(self, layers: int, heads: int, n_q: int, n_k: int, *, ids: Sequence[int], special: Sequence[bool],
                 punctuation: Sequence[bool], word_of: Sequence[int] | np.ndarray, self_attention: bool = True):
        self.layers, self.heads, self.n_q, self.n_k = layers, heads, n_q, n_k
        self.self_attention = bool(self_attention and n_q == n_k)
        self.special = torch.tensor(np.asarray(special, dtype=np.float32))
        self.punctuation = torch.tensor(np.asarray(punctuation, dtype=np.float32))
        self.word_of = torch.tensor(np.asarray(word_of, dtype=np.int64))
        # keys never highlighted as a head's pattern: the first token (a sink) and control tokens
        self.plain = torch.ones(n_k)
        self.plain[0] = 0
        self.plain[self.special > 0] = 0
        self.sums = np.zeros((layers, heads, len(SUMS)), dtype=np.float64)
        self.top_v = torch.full((layers, heads, n_q, TOP_KEYS), -1.0)
        self.top_i = torch.zeros((layers, heads, n_q, TOP_KEYS), dtype=torch.int64)
        counts = dict.fromkeys(SUMS, 0.0)
        counts["positions"] = float(n_q)
        if self.self_attention:
            qs, ks, repeated = induction_pairs(ids)
            self.pair_q, self.pair_k = torch.from_numpy(qs), torch.from_numpy(ks)
            in_word = self.word_of >= 0
            size = int(self.word_of.max()) + 1 if bool(in_word.any()) else 1
            per_word = torch.bincount(self.word_of[in_word], minlength=size)
            partner = in_word & (per_word[self.word_of.clamp(min=0)] >= 2)
            counts.update(previous_n=float(max(n_q - 1, 0)), induction_n=float(repeated),
                          same_word_n=float(partner.sum()))
            self.partner = partner
        # a text of one token says nothing of a head (Neuronpedia skips sequences shorter than 2)
        self.skip = n_q < 2
        for name, value in counts.items():
            if (name.endswith("_n") or name == "positions") and not self.skip:
                self.sums[..., SUMS.index(name)] = value

    def add(self, layer: int, q0: int, k0: int, w: torch.Tensor) -> None:
        """Add a block: ``w`` float32 ``(heads, rows, cols)``, queries ``q0 ..``, keys ``k0 ..`` (every other
        key of these rows has weight 0 or comes in another block). Products in float32, sums in float64."""
        heads, rows, cols = w.shape
        w = w.to("cpu", torch.float32)
        out = np.zeros((heads, len(SUMS)))
        f64 = torch.float64
        logs = torch.log(w)
        logs.nan_to_num_(0.0, 0.0, 0.0)  # 0 · ln 0 counts 0 (Neuronpedia clamps w to the smallest float)
        out[:, SUMS.index("entropy")] = -(w * logs).sum(dim=(1, 2), dtype=f64).numpy()
        del logs
        if k0 == 0:
            out[:, SUMS.index("first")] = w[:, :, 0].sum(dim=1, dtype=f64).numpy()
        for name, flags in (("special", self.special), ("punctuation", self.punctuation)):
            f = flags[k0:k0 + cols]
            if bool(f.any()):
                out[:, SUMS.index(name)] = (w @ f).sum(dim=1, dtype=f64).numpy()
        if self.self_attention:
            self._positional(out, q0, k0, w)
        if not self.skip:
            self.sums[layer] += out
        self._strongest(layer, q0, k0, w)

    def _positional(self, out: np.ndarray, q0: int, k0: int, w: torch.Tensor) -> None:
        heads, rows, cols = w.shape
        f64 = torch.float64
        qi = torch.arange(q0, q0 + rows)
        ki = torch.arange(k0, k0 + cols)
        for name, offset in (("self", 0), ("previous", 1)):
            col = qi - offset - k0
            ok = (qi - offset >= 0) & (col >= 0) & (col < cols)
            if bool(ok.any()):
                r = ok.nonzero().flatten()
                out[:, SUMS.index(name)] = w[:, r, col[r]].sum(dim=1, dtype=f64).numpy()
        dist, dist_sq = self._gaps(q0, k0, rows, cols)
        out[:, SUMS.index("distance")] = (w * dist).sum(dim=(1, 2), dtype=f64).numpy()
        out[:, SUMS.index("distance_sq")] = (w * dist_sq).sum(dim=(1, 2), dtype=f64).numpy()
        if self.pair_q.numel():
            inside = ((self.pair_q >= q0) & (self.pair_q < q0 + rows) & (self.pair_k >= k0)
                      & (self.pair_k < k0 + cols))
            if bool(inside.any()):
                v = w[:, self.pair_q[inside] - q0, self.pair_k[inside] - k0]
                v = v.masked_fill(v < INDUCTION_THRESHOLD, 0.0)
                out[:, SUMS.index("induction")] = v.sum(dim=1, dtype=f64).numpy()
        wq = self.word_of[q0:q0 + rows]
        wk = self.word_of[k0:k0 + cols]
        same = (wq[:, None] == wk[None, :]) & (wq[:, None] >= 0) & (qi[:, None] != ki[None, :])
        if bool(same.any()):
            out[:, SUMS.index("same_word")] = (w * same).sum(dim=(1, 2), dtype=f64).numpy()

    def _gaps(self, q0: int, k0: int, rows: int, cols: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``|q - k|`` and ``(q - k)^2`` of a block, float32 ``(rows, cols)``: kept for the next block of the same
        place (every layer of a text comes in the same blocks)."""
        key = (q0, k0, rows, cols)
        if getattr(self, "_gap_key", None) != key:
            gap = (torch.arange(q0, q0 + rows)[:, None] - torch.arange(k0, k0 + cols)[None, :]).to(torch.float32)
            self._gap_key, self._gap = key, (gap.abs(), gap.square())
        return self._gap

    def _strongest(self, layer: int, q0: int, k0: int, w: torch.Tensor) -> None:
        """Keep, per query, the ``TOP_KEYS`` largest weights on keys other than the first token and control
        tokens (merged across key blocks)."""
        plain = w * self.plain[k0:k0 + w.shape[2]]
        k = min(TOP_KEYS, plain.shape[2])
        v, i = plain.topk(k, dim=-1)
        old_v = self.top_v[layer, :, q0:q0 + w.shape[1]]
        old_i = self.top_i[layer, :, q0:q0 + w.shape[1]]
        all_v = torch.cat([old_v, v], dim=-1)
        all_i = torch.cat([old_i, i + k0], dim=-1)
        best_v, pick = all_v.topk(TOP_KEYS, dim=-1)
        self.top_v[layer, :, q0:q0 + w.shape[1]] = best_v
        self.top_i[layer, :, q0:q0 + w.shape[1]] = all_i.gather(-1, pick)

    def strongest(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per head the query whose largest weight on a plain key (not the first token, not a control token)
        is the largest of the text.

        Returns:
            ``(query, strength, keys, weights)``: int64 ``(layers, heads)``, float32 ``(layers, heads)``,
            int64 and float32 ``(layers, heads, TOP_KEYS)`` (key -1 where the row has fewer plain keys of weight > 0).
        """
        top1 = self.top_v[..., 0]
        query = top1.argmax(dim=-1)
        strength = top1.gather(-1, query[..., None])[..., 0]
        idx = query[..., None, None].expand(-1, -1, 1, TOP_KEYS)
        keys = self.top_i.gather(2, idx)[:, :, 0]
        weights = self.top_v.gather(2, idx)[:, :, 0]
        keys = keys.masked_fill(weights <= 0, -1)
        return query.numpy(), strength.numpy(), keys.numpy(), weights.numpy()


def _sums_array(name: str, value) -> np.ndarray:
    """``value`` as float64 ``(..., len(SUMS))``, finite (:func:`models.checks.array`)."""
    arr = checks.array(name, value, finite=True, shape="(..., len(SUMS))")
    if arr.ndim < 1 or arr.shape[-1] != len(SUMS):
        raise InvalidArgumentError(f"{name} must be a (..., {len(SUMS)}) array of sums, got shape {arr.shape}.",
                                   code="arg_shape", name=name, shape=f"(..., {len(SUMS)})", got=f"shape {arr.shape}")
    return arr


def pooled(sums: np.ndarray) -> dict[str, np.ndarray]:
    """The metrics from sums already added over texts: ``sums`` float64 ``(..., len(SUMS))`` -> metric ->
    float64 ``(...)``, NaN where the denominator is 0.

    Raises:
        InvalidArgumentError: ``sums`` not a numeric array whose last axis has ``len(SUMS)`` entries (``arg_shape``).
    """
    sums = _sums_array("sums", sums)
    out = {}
    for name, (num, den) in RATIOS.items():
        n, d = sums[..., SUMS.index(num)], sums[..., SUMS.index(den)]
        out[name] = np.divide(n, d, out=np.full(n.shape, np.nan), where=d > 0)
    out["distance_var"] = out["distance_var"] - np.square(out["distance"])
    return out


def bootstrap(per_text: np.ndarray, *, draws: int = 1000, seed: int = 0, level: float = 0.95) -> dict[str, tuple]:
    """Percentile bootstrap over texts (Efron & Tibshirani 1993, ch. 13) of every pooled metric.

    Args:
        per_text: float64 ``(texts, ..., len(SUMS))`` sums of each text. draws: resamples. level: coverage.

    Returns:
        metric -> ``(low, high)``, float64 arrays of shape ``(...)`` (NaN where no resample has a query).
    """
    per_text = _sums_array("per_text", per_text)
    if per_text.ndim < 2 or per_text.shape[0] < 1:
        raise InvalidArgumentError(f"per_text must hold the sums of at least one text, got shape {per_text.shape}.",
                                   code="arg_shape", name="per_text", shape="(texts, ..., len(SUMS))",
                                   got=f"shape {per_text.shape}")
    draws = checks.whole("draws", draws, 1, 100_000)
    seed = checks.whole("seed", seed, 0, 2**63 - 1)
    level = checks.number("level", level, 0.0, 1.0, above=True)
    texts = per_text.shape[0]
    checks.cells("resamples", draws, max(1, per_text.size // texts))
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(texts, np.full(texts, 1.0 / texts), size=draws).astype(np.float64)  # (draws, texts)
    flat = per_text.reshape(texts, -1)
    resampled = (counts @ flat).reshape((draws,) + per_text.shape[1:])
    metrics = pooled(resampled)
    alpha = (1 - level) / 2
    out = {}
    for name, values in metrics.items():
        with np.errstate(all="ignore"):
            ok = ~np.isnan(values).all(axis=0)
            lo = np.full(values.shape[1:], np.nan)
            hi = np.full(values.shape[1:], np.nan)
            if ok.any():
                lo[ok] = np.nanquantile(values[:, ok], alpha, axis=0)
                hi[ok] = np.nanquantile(values[:, ok], 1 - alpha, axis=0)
        out[name] = (lo, hi)
    return out
