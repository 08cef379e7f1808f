"""A long text's per-head statistics and overview maps from the fused CPU attention kernel (issue 45): what
:class:`models.analysis.statistics.HeadStatistics` and :class:`~models.analysis.statistics.Overview` add up from
every block of weights, computed from a few calls of the kernel per layer, with no weight in Python.

``aten::_scaled_dot_product_flash_attention_for_cpu`` (the kernel ``scaled_dot_product_attention`` runs on a CPU;
FlashAttention's tiling, Dao et al. 2022, §3.1) returns ``P X`` for any values ``X`` and the row log-sum-exp
``lse``, where ``P = softmax(scale · Q Kᵀ + m)`` is the layer's attention. With ``w_qk`` the weights of one head
(Clark et al. 2019, §3; the definitions of :class:`~models.analysis.statistics.HeadStatistics`):

* **entropy** ``−Σ_k w_qk ln w_qk = lse_q − scale · q · (P K)_q``: one call with the keys as the values;
* **first**, **previous**: ``w_q0``, ``w_q,q−1 = exp(scale · q · k_{q−1} − lse_q)``: one dot product per query;
* **special**, **punctuation**, ``Σ_k w_qk k``: one call whose values are the keys' flags and positions;
* **distance** ``Σ_k w_qk |q − k| = q Σ_k w_qk − Σ_k w_qk k + 2 Σ_{k ≥ q} w_qk (k − q)``; the last sum is 0 for a
  causal layer, else one more call over the keys ``k ≥ q`` only (its rows' weights renormalised: times
  ``exp(lse'_q − lse_q)``);
* **same_word** ``Σ_{k ≠ q, word(k) = word(q)} w_qk``: one dot product per pair of tokens of a word;
* **overview**: each head's map pooled to ``64 × 64`` cells (:func:`viz.transforms.pool`): the sum over a key bin is
  ``P`` times the bins' one-hot columns, so one call (per ``head_dim`` bins) and a mean over each query bin.

The kernel takes values of the keys' width, so value columns are sent ``head_dim`` at a time (zeros fill the
last call). Everything is float32. The layer's own output comes from the same kernel (the model's sdpa path: equal
to eager to float rounding, ~1e-6), so the statistics equal those of the eager weights within ~1e-5
(``tests/engine/test_flash_summary.py``). A position bias, softcapped scores or learned sinks are refused
(:func:`models.analysis.fused_stats.readable`): those analyses keep the eager pass of
:func:`models.analysis.collect.feed_blocks`.
"""

from __future__ import annotations

import numpy as np
import torch

from .flash_stats import available
from .fused_stats import _at, _repeat, allowed_keys, plain_causal, readable, score_scaling
from .statistics import NAMES, HeadStatistics, Overview

#: pairs of same-word tokens whose weights are computed in one product
PAIR_BLOCK = 1 << 16


def _kernel():
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


def _times(q: torch.Tensor, k: torch.Tensor, columns: torch.Tensor, causal: bool, mask: torch.Tensor | None,
           scaling: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(P X, lse)``: ``P`` the softmax of ``scaling · q kᵀ + mask`` (float32 ``(1, heads, n_q, n_k)``, never held),
    ``X`` = ``columns`` float32 ``(n_k, c)`` the same for every head; ``P X`` float32 ``(1, heads, n_q, c)``."""
    d = q.shape[-1]
    c = columns.shape[1]
    out, lse = [], None
    for c0 in range(0, c, d):
        chunk = torch.zeros((columns.shape[0], d), dtype=torch.float32)
        chunk[:, :min(d, c - c0)] = columns[:, c0:c0 + d]
        values = chunk[None, None].expand(1, q.shape[1], -1, -1)
        got, lse = _kernel()(q, k, values, 0.0, causal, attn_mask=mask, scale=scaling)
        out.append(got[..., :min(d, c - c0)])
    assert lse is not None
    return torch.cat(out, dim=-1), lse


def _pairs(word_of: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows, cols)`` int64: every ordered pair of distinct tokens that share a word (``word_of`` int ``(n,)``, -1
    for none)."""
    n = len(word_of)
    order = np.argsort(word_of, kind="stable")
    words = word_of[order]
    starts = np.flatnonzero(np.r_[True, words[1:] != words[:-1]]) if n else np.zeros(0, dtype=np.int64)
    sizes = np.diff(np.r_[starts, n])
    rows: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
    cols: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
    for size in np.unique(sizes[sizes >= 2]):  # the words of each size at once
        first = starts[(sizes == size) & (words[starts] >= 0)]
        if not len(first):
            continue
        members = order[first[:, None] + np.arange(size)[None, :]]  # (words, size)
        a, b = members[:, :, None], members[:, None, :]
        keep = np.broadcast_to(~np.eye(size, dtype=bool), (len(first), size, size))
        rows.append(np.broadcast_to(a, keep.shape)[keep])
        cols.append(np.broadcast_to(b, keep.shape)[keep])
    return torch.from_numpy(np.concatenate(rows)), torch.from_numpy(np.concatenate(cols))


def _same_word(q, k, scaling, lse, allowed, pairs: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """``Σ_{k ≠ q, word(k) = word(q)} w_qk`` per query: float32 ``(1, heads, n)``, one dot product per pair of tokens
    that share a word (:func:`_pairs`, :data:`PAIR_BLOCK` pairs at a time)."""
    out = torch.zeros(q.shape[:3], dtype=torch.float32)
    r_all, c_all = pairs
    for p0 in range(0, len(r_all), PAIR_BLOCK):
        r, c = r_all[p0:p0 + PAIR_BLOCK], c_all[p0:p0 + PAIR_BLOCK]
        w = torch.exp(scaling * (q[:, :, r] * k[:, :, c]).sum(-1) - lse[:, :, r])
        if isinstance(allowed, str):
            w = w * (c <= r).float()
        elif allowed is not None:
            w = w * allowed[:, :, r, c].float()
        out.index_add_(2, r, w)
    return out


def add_layer(stats: HeadStatistics, overview: Overview, layer: int, query: torch.Tensor, key: torch.Tensor,
              attention_mask: torch.Tensor | None, scaling: float, *, causal: bool,
              pairs: tuple[torch.Tensor, torch.Tensor] | None = None) -> None:
    """Add one layer of one self-attention stack to ``stats`` and ``overview``, as their ``add`` would from every
    block of the layer's weights (module docstring).

    Args:
        stats, overview: the stack's accumulators (``self_attention`` True, ``n_q == n_k``).
        layer: the layer. query: ``(1, heads, n, d)``; key: ``(1, kv_heads, n, d)`` (after RoPE, as the attention
            function receives them). attention_mask: additive ``(1, 1 or heads, n, n)`` or None. scaling: the
            score's factor (:func:`models.analysis.fused_stats.score_scaling`). causal: the mask is the plain causal
            one (it may then be None). pairs: :func:`_pairs` of the stack's words (made here when None; a pass
            makes them once for all its layers).

    Raises:
        UnsupportedOperationError: a mask with finite biases (``stats_bias``).
        ValueError: not a CPU call the kernel takes, a batch of more than one, or cross-attention (the caller
            checks :func:`models.analysis.flash_stats.available` first).
    """
    b, h, n, d = query.shape
    if b != 1 or key.shape[2] != n or not available(query) or not stats.self_attention:
        raise ValueError("add_layer reads one self-attention call of one text on a CPU")
    allowed = "causal" if causal else allowed_keys(attention_mask, n, n)
    q, k = query.float().contiguous(), _repeat(key, h).float().contiguous()
    mask = None
    live = torch.ones((1, h, n), dtype=torch.bool)
    if isinstance(allowed, torch.Tensor):
        mask = torch.zeros(allowed.shape, dtype=torch.float32).masked_fill(~allowed, float("-inf"))
        live = allowed.any(-1).expand(1, h, n)
    pos = torch.arange(n, dtype=torch.float32)
    # one set of value columns: position, special, punctuation, then the overview's key bins (one-hot)
    bins = torch.zeros((n, overview.p_k), dtype=torch.float32)
    bins[torch.arange(n), torch.from_numpy(np.searchsorted(overview.k_edges, np.arange(n), side="right") - 1)] = 1.0
    columns = torch.cat([pos[:, None], stats.special[:, None], stats.punctuation[:, None], bins], dim=1)
    own, lse = _kernel()(q, k, k, 0.0, causal, attn_mask=mask, scale=scaling)  # P K: each head's keys its values
    lse = lse.float().masked_fill(~live, float("-inf"))
    feats, _ = _times(q, k, columns, causal, mask, scaling)
    lse0 = lse.masked_fill(~live, 0.0)
    entropy = (lse0 - scaling * (q * own).sum(-1)).clamp_min(0.0)
    qf = pos[None, None]
    distance = qf - feats[..., 0]  # Σ_k w = 1 on a live row
    if not causal:  # + 2 Σ_{k >= q} w_qk (k − q): the keys from the query on, renormalised to the whole row
        after = torch.ones((n, n), dtype=torch.bool).triu()
        if isinstance(allowed, torch.Tensor):
            after = after & allowed
        late_mask = torch.zeros(after.shape, dtype=torch.float32).masked_fill(~after, float("-inf"))
        late, late_lse = _times(q, k, torch.stack([pos, torch.ones(n)], dim=1), False, late_mask, scaling)
        share = torch.exp(late_lse.float() - lse0).masked_fill(~after.any(-1).expand(1, h, n) | ~live, 0.0)
        distance = distance + 2 * share * (late[..., 0] - qf * late[..., 1])
    previous = _at(q, k, scaling, lse0, allowed, 1)
    first = _at(q, k, scaling, lse0, allowed, -1)
    if stats.has_partner is not None:
        same = _same_word(q, k, scaling, lse0, allowed, _pairs(stats.word_of.numpy()) if pairs is None else pairs)
    else:
        same = torch.zeros_like(first)
    values = torch.stack([entropy, distance, previous, first, feats[..., 1], feats[..., 2], same], -1)[0]
    row_ok = torch.ones((n, len(NAMES)), dtype=torch.bool)
    row_ok[:, NAMES.index("previous")] = torch.arange(n) >= 1
    if stats.has_partner is not None:
        row_ok[:, NAMES.index("same_word")] = stats.has_partner
    m = live[0][..., None] & row_ok[None]
    stats.sums[layer] += torch.where(m, values, 0.0).sum(dim=1, dtype=torch.float64)
    stats.counts[layer] += m.sum(dim=1).to(torch.float64)
    pooled = feats[0, :, :, 3:].masked_fill(~live[0][..., None], 0.0).double()
    overview.sums[layer].index_add_(1, overview.q_bin, pooled)


class _Pass:
    """The capture's ``stats`` hook of :func:`summaries`: each layer's statistics and overview added from its call,
    the layer's output from the same kernel (returned: the eager function does not run)."""

    def __init__(self, accs: dict[str, tuple[HeadStatistics, Overview]]):
        self.accs = accs
        self.causal: dict[tuple, bool] = {}
        self.pairs = {stack: _pairs(stats.word_of.numpy()) for stack, (stats, _) in accs.items()}

    def __call__(self, site, eager, module, query, key, value, attention_mask, args, kwargs) -> torch.Tensor:
        readable(args, kwargs)
        n = query.shape[-2]
        if not available(query) or value.shape[-1] != query.shape[-1] or key.shape[-2] != n or query.shape[0] != 1:
            raise _NotHere("not one self-attention call of one text on a CPU")
        causal = plain_causal(self.causal, attention_mask, n)
        if not causal and n * n > MASK_CELLS:
            raise _NotHere("a mask other than the causal one on a text this long")
        scaling = score_scaling(eager, module, query, key, value, kwargs)
        stats, overview = self.accs[site.stack]
        add_layer(stats, overview, site.layer, query, key, None if causal else attention_mask, scaling, causal=causal,
                  pairs=self.pairs[site.stack])
        h = query.shape[1]
        mask = None if causal else _additive(allowed_keys(attention_mask, n, n), query.dtype)
        out, _ = _kernel()(query, _repeat(key, h), _repeat(value, h), 0.0, causal, attn_mask=mask, scale=scaling)
        return out.transpose(1, 2).contiguous()


class _NotHere(Exception):
    """This pass cannot read the call; the eager pass of :func:`models.analysis.collect.feed_blocks` does."""


#: largest ``n²`` for a mask other than the causal one (its float copies are ``n²`` each): 4,096 tokens
MASK_CELLS = 4096 * 4096


def _additive(allowed: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    return None if allowed is None else torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, float("-inf"))


def summaries(result, replay, accs: dict[str, tuple[HeadStatistics, Overview]]) -> bool:
    """Fill ``accs`` (``stack -> (HeadStatistics, Overview)``, empty) with every layer of ``result``'s stacks in one
    more forward pass through the fused CPU kernel (module docstring); False, with ``accs`` left to be filled another
    way, where that pass cannot run: a model not on a CPU or not on the interface capture path, a stack that is not
    self-attention, a call with a position bias, softcapping or learned sinks, a mask other than the causal one on
    a text above 4,096 tokens.

    Args:
        result: the :class:`~models.Analysis` (weights not kept). replay: its
            :class:`~models.analysis.store.Replay` (same inputs, heads switched off, masks).

    Raises:
        ModelOutOfMemoryError: as :meth:`Replay.run <models.analysis.store.Replay.run>`.
    """
    from .. import capture
    from ..errors import UnsupportedOperationError

    from .store import Replay

    if type(replay) is not Replay:  # a speech model's cropped replay (models.speech): its own pass, two stacks
        return False
    loaded = replay.loaded
    if (loaded.capture_path != "interface" or loaded.device.type != "cpu" or loaded.family not in ("encoder", "decoder")
            or any(stack not in ("encoder", "decoder") for stack in accs)):
        return False
    call = dict(replay.call)
    want = {(stack, layer) for stack, (layers, *_rest) in ((s, result.attentions[s].shape) for s in accs)
            for layer in range(layers)}
    try:
        with capture.rerun(loaded, gates=replay.gates, masks=replay.masks, want=want, stats=_Pass(accs),
                           chunk_bytes=replay.chunk_bytes):
            loaded.model(**call)
    except (_NotHere, UnsupportedOperationError):
        for stats, overview in accs.values():
            stats.sums.zero_(), stats.counts.zero_(), overview.sums.zero_()
        return False
    return True
