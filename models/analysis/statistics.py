"""Per-head statistics and pooled overview maps, accumulated block by block while the weights are computed.

:func:`models.analyze` never holds a long input's whole attention: the capture function hands each block of
query rows to a sink (:class:`models.capture.CaptureState`), which feeds the two accumulators here and
then frees the block. Both give the numbers their whole-matrix definitions give (tested against
``viz.transforms.head_statistics`` and ``viz.transforms.pool`` on the full weights):

* :class:`HeadStatistics`: Clark et al. (2019), "What Does BERT Look At?", §3-§4: entropy, mean distance,
  previous / first / special / punctuation / same-word shares, each averaged over the queries whose row
  is not all zero.
* :class:`Overview`: each head's map pooled to at most ``size x size`` cells, a cell being the mean over
  its query bin of the sum over its key bin (rows still sum to 1), as :func:`viz.transforms.pool`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

# Statistic names, in the order of viz.transforms.STATISTICS.
NAMES = ("entropy", "distance", "previous", "first", "special", "punctuation", "same_word")
OVERVIEW_SIZE = 64


def bin_edges(n: int, bins: int) -> np.ndarray:
    """``bins + 1`` integer edges splitting ``0 .. n`` into nearly equal runs (as ``viz.transforms.pool``)."""
    return np.linspace(0, n, bins + 1).round().astype(int)


class HeadStatistics:
    """Accumulates the per-head statistics of one stack from blocks of query rows.

    For layer ``l`` and head ``h``, each statistic is ``Σ_q v_q / #q`` over the queries ``q`` whose row
    has some weight (and, for ``previous``, ``q >= 1``; for ``same_word``, a query in a word of two or
    more tokens), with ``v_q``:

    - ``entropy``: ``-Σ_k w_qk ln w_qk`` (nats; Shannon 1948, §6; Clark et al. §3.3);
    - ``distance``: ``Σ_k w_qk |q - k|`` (tokens);
    - ``previous``: ``w_{q,q-1}``; ``first``: ``w_{q,0}`` (Clark et al. §3.1);
    - ``special`` / ``punctuation``: ``Σ_{k flagged} w_qk`` (Clark et al. §3.2);
    - ``same_word``: ``Σ_{k != q, word(k) = word(q)} w_qk``.

    ``distance``, ``previous`` and ``same_word`` are NaN for cross-attention (queries and keys are
    different sequences).

    Args:
        layers, heads: the stack's shape. n_q, n_k: query and key lengths (tokens).
        special, punctuation: bool ``(n_k,)`` flags of the keys. word_of: int ``(n_k,)`` word index of each
            key, -1 for none. self_attention: queries and keys are the same tokens.
    """

    def __init__(self, layers: int, heads: int, n_q: int, n_k: int, *, special: Sequence[bool],
                 punctuation: Sequence[bool], word_of: Sequence[int] | np.ndarray, self_attention: bool = True):
        self.n_q, self.n_k = n_q, n_k
        self.self_attention = bool(self_attention and n_q == n_k)
        self.special = torch.tensor(np.asarray(special, dtype=np.float32))
        self.punctuation = torch.tensor(np.asarray(punctuation, dtype=np.float32))
        self.any_special, self.any_punct = bool(self.special.any()), bool(self.punctuation.any())
        self.word_of = torch.tensor(np.asarray(word_of, dtype=np.int64))
        if self.self_attention and self.word_of.shape == (n_k,):
            in_word = self.word_of >= 0
            counts = torch.bincount(self.word_of[in_word], minlength=1)
            self.has_partner: torch.Tensor | None = in_word & (counts[self.word_of.clamp(min=0)] >= 2)
        else:
            self.has_partner = None
        # per key: 1, its index, special, punctuation, is the first key: one product w @ keys gives each
        # row's total weight, Σ w_k k, and the special / punctuation / first-token shares in one pass
        self.keys = torch.stack([torch.ones(n_k), torch.arange(n_k, dtype=torch.float32), self.special,
                                 self.punctuation, (torch.arange(n_k) == 0).float()], dim=1)
        self.sums = torch.zeros(layers, heads, len(NAMES), dtype=torch.float64)
        self.counts = torch.zeros(layers, heads, len(NAMES), dtype=torch.float64)

    def add(self, layer: int, q0: int, k0: int, w: torch.Tensor) -> None:
        """Add a block: ``w`` float32 ``(heads, rows, cols)``, queries ``q0 ..``, keys ``k0 ..`` (every
        other key has weight 0).

        About three passes over the block: one product with a ``(cols, 5)`` matrix of key features
        (row total, ``Σ w_k k``, special, punctuation, first), a log for the entropy ``-Σ w ln w`` (into a
        scratch buffer, 0 where ``w = 0``) and its dot product per row. Distance is
        ``q Σw - Σ w_k k + 2 Σ_{k > q} w_k (k - q)``, whose last sum reads only the keys after each query
        (for a causal block, its diagonal corner); same-word shares read only the columns of the block's
        words."""
        heads, rows, cols = w.shape
        dev = w.device
        feats = w @ self.keys[k0:k0 + cols].to(dev)  # (heads, rows, 5)
        rowsum = feats[..., 0]
        live = rowsum > 0
        logs = torch.log(w)
        logs.nan_to_num_(0.0, 0.0, 0.0)  # ln 0 = -inf -> 0, so 0 · ln 0 counts 0
        entropy = -torch.linalg.vecdot(w, logs)
        del logs
        zeros = torch.zeros((heads, rows), device=dev, dtype=w.dtype)
        qi = torch.arange(q0, q0 + rows, device=dev)
        distance = previous = same_word = zeros
        row_ok = torch.ones((rows, len(NAMES)), dtype=torch.bool, device=dev)
        if self.self_attention:
            qf = qi.to(w.dtype)
            distance = qf * rowsum - feats[..., 1]
            after = max(q0 + 1, k0) - k0  # first column that lies after some query of the block
            if after < cols:
                ki = torch.arange(k0 + after, k0 + cols, device=dev, dtype=w.dtype)
                distance = distance + 2 * torch.linalg.vecdot(w[..., after:], (ki[None, :] - qf[:, None]).clamp(min=0))
            prev_col = qi - 1 - k0
            ok = (qi >= 1) & (prev_col >= 0) & (prev_col < cols)
            idx = ok.nonzero().flatten()
            if idx.numel():
                previous = zeros.clone()
                previous[:, idx] = w[:, idx, prev_col[idx]]
            row_ok[:, NAMES.index("previous")] = qi >= 1
            if self.has_partner is not None:
                lo, hi = self._word_columns(q0, rows, k0, cols)
                wq = self.word_of[q0:q0 + rows].to(dev)
                wk = self.word_of[k0 + lo:k0 + hi].to(dev)
                kk = torch.arange(k0 + lo, k0 + hi, device=dev)
                same = (wq[:, None] == wk[None, :]) & (wq[:, None] >= 0) & (qi[:, None] != kk[None, :])
                same_word = torch.linalg.vecdot(w[..., lo:hi], same.to(w.dtype))
                row_ok[:, NAMES.index("same_word")] = self.has_partner[q0:q0 + rows].to(dev)
        values = torch.stack([entropy, distance, previous, feats[..., 4], feats[..., 2], feats[..., 3], same_word], -1)
        m = live[..., None] & row_ok[None]
        self.sums[layer] += torch.where(m, values, 0.0).sum(dim=1, dtype=torch.float64).cpu()
        self.counts[layer] += m.sum(dim=1).to(torch.float64).cpu()

    def _word_columns(self, q0: int, rows: int, k0: int, cols: int) -> tuple[int, int]:
        """Block columns ``lo:hi`` holding every token that shares a word with a row of the block: the
        span from the first to the last token of those rows' words (all columns if a word's tokens are
        not consecutive)."""
        if not hasattr(self, "_span"):
            word_of = self.word_of.numpy()
            pos = np.nonzero(word_of >= 0)[0]
            words = word_of[pos]
            size = int(words.max()) + 1 if words.size else 0
            lo_w, hi_w = np.full(size, self.n_k), np.full(size, -1)
            np.minimum.at(lo_w, words, pos)
            np.maximum.at(hi_w, words, pos)
            counts = np.bincount(words, minlength=size)
            used = counts > 0
            first = np.full(self.n_k, -1)
            last = np.full(self.n_k, -1)
            first[pos], last[pos] = lo_w[words], hi_w[words]
            contiguous = bool(np.all(hi_w[used] - lo_w[used] + 1 == counts[used]))
            self._span = (torch.from_numpy(first), torch.from_numpy(last)) if contiguous else None
        if self._span is None:
            return 0, cols
        span_first, span_last = (x[q0:q0 + rows] for x in self._span)
        inside = span_first >= 0
        if not bool(inside.any()):
            return 0, 0
        lo = int(span_first[inside].min()) - k0
        hi = int(span_last[inside].max()) + 1 - k0
        return max(0, min(lo, cols)), max(0, min(hi, cols))

    def result(self) -> dict[str, np.ndarray]:
        """name -> float32 ``(layers, heads)``: entropy in nats, distance in tokens, the others shares of
        weight in [0, 1]; NaN where a statistic has no query (``distance``, ``previous``, ``same_word`` of
        cross-attention; ``special``/``punctuation``: 0 when no key carries the flag)."""
        s, c = self.sums.numpy(), self.counts.numpy()
        values = np.divide(s, c, out=np.full(s.shape, np.nan), where=c > 0).astype(np.float32)
        out = {name: values[..., i] for i, name in enumerate(NAMES)}
        for name, flagged in (("special", self.any_special), ("punctuation", self.any_punct)):
            if not flagged:
                out[name] = np.zeros_like(out[name])
        if not self.self_attention:
            for name in ("distance", "previous", "same_word"):
                out[name] = np.full_like(out[name], np.nan)
        elif self.has_partner is None or not bool(self.has_partner.any()):
            out["same_word"] = np.full_like(out["same_word"], np.nan)
        return out


class Overview:
    """Accumulates each head's map pooled to at most ``size x size`` cells (see module docstring).

    Args:
        layers, heads: the stack's shape. n_q, n_k: query and key lengths. size: largest side.
    """

    def __init__(self, layers: int, heads: int, n_q: int, n_k: int, size: int = OVERVIEW_SIZE):
        self.n_q, self.n_k = n_q, n_k
        self.p_q, self.p_k = min(n_q, size), min(n_k, size)
        self.k_edges = bin_edges(n_k, self.p_k)
        q_edges = bin_edges(n_q, self.p_q)
        self.q_counts = np.diff(q_edges).astype(np.float64)
        self.q_bin = torch.from_numpy(np.repeat(np.arange(self.p_q), np.diff(q_edges)))
        self.sums = torch.zeros(layers, heads, self.p_q, self.p_k, dtype=torch.float64)

    def add(self, layer: int, q0: int, k0: int, w: torch.Tensor) -> None:
        """Add a block: ``w`` float32 ``(heads, rows, cols)`` for queries ``q0 ..``, keys ``k0 ..``."""
        heads, rows, cols = w.shape
        if w.device.type != "cpu":
            self.add_on_device(layer, q0, k0, w)
            return
        block = w.detach().to("cpu", torch.float32).numpy()
        if self.p_k == self.n_k:
            pooled = np.zeros((heads, rows, self.n_k), dtype=np.float32)
            pooled[..., k0:k0 + cols] = block
        else:
            # key bins overlapping this block, their edges clipped to it (keys outside weigh 0)
            lo = np.clip(self.k_edges[:-1] - k0, 0, cols)
            hi = np.clip(self.k_edges[1:] - k0, 0, cols)
            pooled = np.zeros((heads, rows, self.p_k), dtype=np.float32)
            present = np.nonzero(hi > lo)[0]
            if present.size:
                pooled[..., present] = np.add.reduceat(block, lo[present], axis=-1)
        self.sums[layer].index_add_(1, self.q_bin[q0:q0 + rows], torch.from_numpy(pooled).to(torch.float64))

    def add_on_device(self, layer: int, q0: int, k0: int, w: torch.Tensor) -> None:
        """:meth:`add` for a block on an accelerator: the keys are pooled there (running sums in float64,
        read at the bin edges) and only ``(heads, rows, bins)`` moves to the host."""
        heads, rows, cols = w.shape
        full = torch.zeros((heads, rows, self.n_k + 1), device=w.device, dtype=torch.float64)
        full[..., 1 + k0:1 + k0 + cols] = w.detach().double()
        sums = full.cumsum(dim=-1)[..., torch.as_tensor(self.k_edges, device=w.device)]
        self.sums[layer].index_add_(1, self.q_bin[q0:q0 + rows], (sums[..., 1:] - sums[..., :-1]).cpu())

    def result(self) -> np.ndarray:
        """float32 ``(layers, heads, min(n_q, size), min(n_k, size))``: each row is the mean of its query
        bin's rows, so it sums to the share of those queries that attend to something (1 when all do)."""
        return (self.sums.numpy() / self.q_counts[:, None]).astype(np.float32)


def is_punctuation(text: str) -> bool:
    """True when ``text`` is non-empty and every non-space character is Unicode punctuation (P*) or a
    symbol (S*) (the same rule as ``viz.transforms.is_punctuation``, which the engine cannot import)."""
    import unicodedata

    chars = [c for c in text if not c.isspace()]
    return bool(chars) and all(unicodedata.category(c)[0] in "PS" for c in chars)
