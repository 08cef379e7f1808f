"""Head statistics without the attention map: from the row log-sum-exp of a fused kernel (issue 45, step 1).

For one attention call, with scores ``s_ij = scaling · q_i · k_j + m_ij`` (``m_ij`` 0 where query ``i`` may attend
key ``j``, −inf where not), the row log-sum-exp ``lse_i = log Σ_j exp(s_ij)`` makes every weight exact on demand,
``P_ij = exp(s_ij − lse_i)`` (Vaswani et al. 2017, eq. 1, written with the log-sum-exp as FlashAttention keeps it:
Dao et al. 2022, §3.1), and most per-head statistics need no ``n × n`` tile at all:

* ``first``, ``previous``, ``self``: ``P_i0``, ``P_i,i−1``, ``P_ii`` from one dot product each (O(n·d));
* ``entropy``: ``H_i = −Σ_j P_ij log P_ij = lse_i − Σ_j P_ij s_ij = lse_i − scaling · q_i · (P K)_i`` (mask terms
  are 0 on the keys attended), where ``(P K)_i`` is the attention output with the keys as the values: one more
  fused call;
* ``received`` (attention received per key, the column sums): ``Σ_i P_ij = Σ_i exp(s_ij − lse_i)`` is
  ``exp(lse'_j)`` of one call with queries and keys swapped whose scores subtract the first call's ``lse``
  (the pattern of KV-cache eviction code such as H2O, Zhang et al. 2023, without its n² map).

Two implementations, equal to float tolerance: :func:`flex_stats` (PyTorch's FlexAttention with
``return_aux=AuxRequest(lse=True)``: the fused kernel, O(n) memory when compiled; uncompiled it computes the
scores whole, as the docs warn) and :func:`tile_stats` (blocks of query rows, each block's scores once: the
exact tile path, O(block · n) memory, no compiler needed). Masks with finite biases (ALiBi, T5's position bias
passed as a mask) are refused: the entropy's ``Σ P·s`` would need the bias's own weighted sum; so are
softcapped scores (``tanh`` is not linear in ``q · k``) and learned sinks (their mass is not in these keys):
those take the tile path of :mod:`models.capture.interface` (the weights themselves).
"""

from __future__ import annotations

import torch

from ..capture.blocks import is_causal
from ..errors import UnsupportedOperationError

STATS = ("lse", "first", "previous", "self", "entropy", "received")
#: query rows per block of :func:`tile_stats`
BLOCK_ROWS = 256


def allowed_keys(attention_mask: torch.Tensor | None, q_len: int, k_len: int) -> torch.Tensor | None:
    """bool ``(batch, 1 or heads, q_len, k_len)``, True where a query may attend a key, from an additive mask
    (0 where allowed, a large negative number or −inf where not); None for no mask (every key).

    Raises:
        UnsupportedOperationError: a mask with finite biases other than 0 (ALiBi, a relative position bias):
            code ``stats_bias``.
    """
    if attention_mask is None:
        return None
    m = attention_mask.float()
    blocked = m <= torch.finfo(m.dtype).min / 2
    if bool(((m != 0) & ~blocked).any()):
        raise UnsupportedOperationError(
            "This attention adds a position bias to its scores (ALiBi or a relative bias): its statistics are "
            "read from the weights themselves, not from the log-sum-exp.", code="stats_bias")
    return ~blocked[..., :q_len, :k_len]


def _repeat(key: torch.Tensor, heads: int) -> torch.Tensor:
    """``(batch, kv_heads, n, d)`` keys as ``(batch, heads, n, d)`` (grouped-query attention, Ainslie et al. 2023:
    each key/value head serves ``heads / kv_heads`` query heads in order, as transformers' ``repeat_kv``)."""
    return key if key.shape[1] == heads else key.repeat_interleave(heads // key.shape[1], dim=1)


def _at(query: torch.Tensor, key: torch.Tensor, scaling: float, lse: torch.Tensor, allowed, offset: int):
    """``P_i,i−offset`` for every query ``i`` (0 where that key does not exist or is not attended): float32
    ``(batch, heads, n)``."""
    b, h, n, _ = query.shape
    out = query.new_zeros((b, h, n), dtype=torch.float32)
    rows = torch.arange(n, device=query.device)
    cols = rows - offset if offset >= 0 else torch.zeros_like(rows)
    ok = (cols >= 0) & (cols < key.shape[2])
    rows, cols = rows[ok], cols[ok]
    if not len(rows):
        return out
    s = scaling * (query[:, :, rows].float() * key[:, :, cols].float()).sum(-1)
    p = torch.exp(s - lse[:, :, rows])
    if isinstance(allowed, str):  # "causal": key j attended by query i when j <= i
        p = p * (cols <= rows).float()
    elif allowed is not None:
        p = p * allowed[:, :, rows, cols].float()
    out[:, :, rows] = p
    return out


def _finish(query, key, scaling, lse, pk, received, allowed) -> dict[str, torch.Tensor]:
    """The statistics from ``lse`` ``(b, h, n_q)``, ``P K`` ``(b, h, n_q, d)`` and ``received`` ``(b, h, n_k)``."""
    empty = ~torch.isfinite(lse)  # a query with no key to attend: no weights, no statistics (0)
    lse0 = lse.masked_fill(empty, 0.0)
    entropy = (lse0 - scaling * (query.float() * pk.float()).sum(-1)).masked_fill(empty, 0.0)
    out = {"lse": lse, "entropy": entropy.clamp_min(0.0), "received": received}
    out["first"] = _at(query, key, scaling, lse0, allowed, -1).masked_fill(empty, 0.0)  # key 0 for every row
    out["previous"] = _at(query, key, scaling, lse0, allowed, 1).masked_fill(empty, 0.0)
    out["self"] = _at(query, key, scaling, lse0, allowed, 0).masked_fill(empty, 0.0)
    return out


def tile_stats(query: torch.Tensor, key: torch.Tensor, attention_mask: torch.Tensor | None, scaling: float, *,
               block_rows: int = BLOCK_ROWS, value: torch.Tensor | None = None,
               causal: bool = False) -> dict[str, torch.Tensor]:
    """The statistics of one attention call (module docstring) by blocks of query rows: each block's scores
    computed once, in float32.

    Args:
        query: ``(batch, heads, q_len, head_dim)``; key: ``(batch, kv_heads, k_len, head_dim)`` (after RoPE, as
            the attention function receives them). attention_mask: additive ``(batch, 1 or heads, q_len,
            k_len)`` or None. scaling: the score's factor (``head_dim ** -0.5`` unless the model says otherwise).

        causal: ``attention_mask`` is the plain causal mask (it may then be None): each block reads only the keys
            up to its last row, half the products of a long text.
        value: ``(batch, kv_heads, k_len, v_dim)`` or None: with it, also the attention output ``out``
            ``(batch, q_len, heads, v_dim)`` in ``query``'s dtype (``P V``, computed with ``P K`` in one product),
            as the family's eager function returns it.

    Returns:
        float32 tensors: ``lse``, ``first``, ``previous``, ``self``, ``entropy`` (nats) ``(batch, heads, q_len)``
        and ``received`` ``(batch, heads, k_len)`` (summed over queries); ``out`` when ``value`` is given. A
        query with no key to attend has ``lse`` −inf, 0 for the rest and a zero output.

    Raises:
        UnsupportedOperationError: a mask with finite biases (:func:`allowed_keys`).
    """
    b, h, q_len, _ = query.shape
    k_len = key.shape[2]
    allowed = "causal" if causal else allowed_keys(attention_mask, q_len, k_len)
    key = _repeat(key, h)
    d = key.shape[-1]
    kf = key.float() if value is None else torch.cat([key.float(), _repeat(value, h).float()], dim=-1)
    lse = query.new_empty((b, h, q_len), dtype=torch.float32)
    pk = query.new_empty((b, h, q_len, kf.shape[-1]), dtype=torch.float32)
    received = query.new_zeros((b, h, k_len), dtype=torch.float32)
    keys = kf[..., :d]
    for q0 in range(0, q_len, max(1, int(block_rows))):
        q1 = min(q_len, q0 + max(1, int(block_rows)))
        k1 = min(q1, k_len) if causal else k_len
        s = scaling * torch.matmul(query[:, :, q0:q1].float(), keys[:, :, :k1].transpose(-1, -2))
        if causal:
            later = torch.arange(q0, q1, device=s.device)[:, None] < torch.arange(k1, device=s.device)[None, :]
            s = s.masked_fill(later, float("-inf"))
        elif isinstance(allowed, torch.Tensor):  # not causal: the mask's allowed keys, or None (every key)
            s = s.masked_fill(~allowed[:, :, q0:q1], float("-inf"))
        block_lse = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - block_lse.masked_fill(~torch.isfinite(block_lse), 0.0)[..., None])
        lse[:, :, q0:q1] = block_lse
        pk[:, :, q0:q1] = torch.matmul(p, kf[:, :, :k1])
        received[..., :k1] += p.sum(dim=2)
    out = _finish(query, key, scaling, lse, pk[..., :d], received, allowed)
    if value is not None:
        out["out"] = pk[..., d:].transpose(1, 2).to(query.dtype).contiguous()
    return out


def flex_stats(query: torch.Tensor, key: torch.Tensor, attention_mask: torch.Tensor | None, scaling: float, *,
               causal: bool = False, compiled: bool = False) -> dict[str, torch.Tensor]:
    """:func:`tile_stats` by FlexAttention (Dong et al. 2024; ``torch.nn.attention.flex_attention``): one call with
    the keys as values gives ``lse`` and ``P K``, one call with queries and keys swapped, its scores minus the
    first call's ``lse``, gives the attention each key receives. ``causal`` (the mask is the plain causal one)
    uses a block mask that skips the blocks above the diagonal instead of indexing the mask; ``compiled`` runs
    the calls through ``torch.compile`` (the fused kernel: O(n) memory; the first call compiles, tens of seconds
    on a CPU).

    Args, Returns, Raises: as :func:`tile_stats`.
    """
    from torch.nn.attention.flex_attention import AuxRequest, BlockMask, create_block_mask, flex_attention

    b, h, q_len, d = query.shape
    k_len = key.shape[2]
    allowed = "causal" if causal else allowed_keys(attention_mask, q_len, k_len)
    key = _repeat(key, h)
    attend = _compiled(flex_attention) if compiled else flex_attention
    dev = query.device
    forward: BlockMask | None
    backward: BlockMask | None
    if causal:
        forward = create_block_mask(lambda bi, hi, qi, ki: qi >= ki, None, None, q_len, k_len, device=dev)
        backward = create_block_mask(lambda bi, hi, qi, ki: qi <= ki, None, None, k_len, q_len, device=dev)
    elif isinstance(allowed, torch.Tensor):
        a = allowed.expand(b, h, q_len, k_len)  # a view: the mask's batch and head axes of 1 stretched
        forward = create_block_mask(lambda bi, hi, qi, ki: a[bi, hi, qi, ki], b, h, q_len, k_len, device=dev)
        backward = create_block_mask(lambda bi, hi, qi, ki: a[bi, hi, ki, qi], b, h, k_len, q_len, device=dev)
    else:
        forward = backward = None
    qf, kf = query.float().contiguous(), key.float().contiguous()
    pk, aux = attend(qf, kf, kf, block_mask=forward, scale=scaling, return_aux=AuxRequest(lse=True))
    lse = aux.lse.float()
    # flex keeps lse in base e for the scores it computed; a row with nothing to attend comes back as -inf
    row_lse = lse.masked_fill(~torch.isfinite(lse), float("inf"))

    def minus_lse(score, bi, hi, qi, ki):
        return score - row_lse[bi, hi, ki]

    _, back = attend(kf, qf, qf, score_mod=minus_lse, block_mask=backward, scale=scaling,
                     return_aux=AuxRequest(lse=True))
    received = torch.exp(back.lse.float()).nan_to_num(0.0)
    return _finish(query, key, scaling, lse, pk, received, allowed)


_COMPILED: dict = {}


def _compiled(fn):
    """``torch.compile(fn)``, once per process."""
    if "flex" not in _COMPILED:
        _COMPILED["flex"] = torch.compile(fn, dynamic=False)
    return _COMPILED["flex"]


def score_scaling(eager, module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, kwargs) -> float:
    """The factor the family's eager function multiplies ``q · k`` by, read from one call of it on one query and two
    keys: ``log(w_0 / w_1) = scaling · q · (k_0 − k_1)`` (softmax of ``scaling · q·k``, Vaswani et al. 2017, eq. 1),
    so a family that scales by the layer (GPT-2's ``scale_attn_by_inverse_layer_idx``), by a configured factor or not
    at all needs no table.

    Args:
        eager: the family's ``eager_attention_forward``. module: the calling attention module. query:
            ``(batch, heads, n_q, d)``; key, value: ``(batch, kv_heads, n_k, d)`` (a call of one key, a text of one
            token, is read with a zero key added: any two keys tell the factor). kwargs: the call's keyword
            arguments (only those that are not tensors are passed on).

    Returns:
        float; ``d ** -0.5`` when the two keys score alike for every head (the ratio says nothing).
    """
    q, k, v = query[:1, :, :1], key[:1, :, :2], value[:1, :, :2]
    if k.shape[2] < 2:
        k, v = torch.cat([k, torch.zeros_like(k)], dim=2), torch.cat([v, torch.zeros_like(v)], dim=2)
    sub = {name: val for name, val in kwargs.items() if not torch.is_tensor(val)}
    _, w = eager(module, q, k, v, None, **sub)
    heads = query.shape[1]
    kk = k.repeat_interleave(heads // k.shape[1], dim=1).double()
    diff = (q.double()[0, :, 0] * (kk[0, :, 0] - kk[0, :, 1])).sum(-1)  # (heads,)
    ratio = torch.log(w.double()[0, :, 0, 0] / w.double()[0, :, 0, 1])
    best = int(diff.abs().argmax())
    if float(diff[best].abs()) < 1e-6:
        return float(query.shape[-1] ** -0.5)
    return float(ratio[best] / diff[best])


def readable(args, kwargs) -> None:
    """Check that one attention call's statistics can be read from the log-sum-exp: no extra positional arguments or
    position bias (ALiBi, T5's relative bias), no softcapping, no learned sinks.

    Raises:
        UnsupportedOperationError: ``stats_bias``, ``stats_softcap`` or ``stats_sinks``, with the reason.
    """
    if args or any(kwargs.get(k) is not None for k in ("position_bias", "alibi")):
        raise UnsupportedOperationError(
            "This attention passes a position bias of its own to its scores: its statistics are read from the "
            "weights themselves (models.analyze), not from the log-sum-exp.", code="stats_bias")
    if kwargs.get("softcap") is not None:
        raise UnsupportedOperationError(
            "This model caps its attention scores (tanh softcapping): the entropy is not linear in q·k, so "
            "its statistics are read from the weights themselves (models.analyze).", code="stats_softcap")
    if any(kwargs.get(k) is not None for k in ("s_aux", "sinks")):
        raise UnsupportedOperationError(
            "This model has learned attention sinks: part of each row's weight goes to no key, so its "
            "statistics are read from the weights themselves (models.analyze).", code="stats_sinks")


def plain_causal(seen: dict, mask: torch.Tensor | None, n: int) -> bool:
    """Whether an attention call's additive ``mask`` ``(batch, 1, n, n)`` is the plain causal one (each query
    attends the keys up to its own position), remembered in ``seen`` per mask (a pass's layers share one mask)."""
    if mask is None or mask.shape[-1] != n or mask.shape[1] != 1:
        return False
    found = seen.get((id(mask), n))
    if found is None:
        found = seen[(id(mask), n)] = is_causal(mask, n)
    return found
