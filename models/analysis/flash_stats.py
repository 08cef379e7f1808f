"""Head statistics from PyTorch's fused CPU attention kernel (issue 45, step 1): the statistics of
:mod:`models.analysis.fused_stats` from three calls of the kernel transformers' sdpa runs on a CPU, no score block
in Python.

``torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, dropout, is_causal, attn_mask, scale)`` is
the fused kernel behind ``scaled_dot_product_attention`` on a CPU (FlashAttention's tiling and online softmax,
Dao et al. 2022, §3.1, Algorithm 1): it returns the output and the row log-sum-exp ``lse_i = log Σ_j exp(s_ij)``
of the scores ``s_ij = scale · q_i · k_j + m_ij``. One layer's statistics:

1. **the layer's output and lse**: one call with the layer's values, as the model's own sdpa call computes it
   (so the model's output is the fused kernel's, ~1e-6 relative in float32);
2. **entropy**: ``H_i = lse_i − scale · q_i · (P K)_i`` (:mod:`models.analysis.fused_stats`), ``P K`` from one call
   with the keys as the values;
3. **received** (attention each key receives): ``Σ_i P_ij = exp(lse'_j)`` of one call with queries and keys
   swapped whose scores subtract the first call's ``lse_i``. The kernel takes no per-key bias, so ``−lse_i`` rides
   as one more coordinate: keys ``[q_i, −lse_i / scale]``, queries ``[k_j, 1]`` give
   ``scale · [k_j, 1] · [q_i, −lse_i / scale] = s_ij − lse_i`` (the mask transposed). A causal call's transpose
   is anti-causal: both sequences are read backwards, where it is causal again.

``first``, ``previous`` and ``self`` are one dot product each with ``lse`` (O(n · d)). The kernel takes queries,
keys and values of one head size, so the third call's values are zeros of the same size (only its ``lse`` is
read). The second and third calls run in float32 whatever the model's dtype (the first is the model's own
call). Masks with finite biases are refused as by :func:`fused_stats.tile_stats`; softcapping and learned sinks
by the statistics pass (:mod:`models.analysis.stats_pass`).
Measured against the tile path on one layer of smollm2's shape (9 query heads, 3 key/value heads, d = 64,
causal) on 2 CPU cores: 0.42 s against 0.88 s at 2,048 tokens (a plain sdpa call 0.12 s); the whole pass on
smollm2: ``bench/longcontext.py --stats flash,tile``.
"""

from __future__ import annotations

import torch

from ..errors import UnsupportedOperationError
from .fused_stats import _finish, _repeat, allowed_keys


def available(query: torch.Tensor) -> bool:
    """Whether the fused CPU kernel can take this call: a CPU tensor in float32, bfloat16 or float16."""
    return query.device.type == "cpu" and query.dtype in (torch.float32, torch.bfloat16, torch.float16)


def flash_stats(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: torch.Tensor | None,
                scaling: float, *, causal: bool = False) -> dict[str, torch.Tensor]:
    """The statistics of one attention call and its output, from three calls of the fused CPU kernel (module
    docstring).

    Args:
        query: ``(batch, heads, q_len, head_dim)``; key, value: ``(batch, kv_heads, k_len, head_dim)`` (after
            RoPE, as the attention function receives them; grouped-query attention repeats each key/value head
            for its ``heads / kv_heads`` query heads, Ainslie et al. 2023). attention_mask: additive ``(batch, 1 or
            heads, q_len, k_len)`` (0 where allowed, a large negative number where not) or None. scaling: the
            score's factor. causal: the mask is the plain causal one (it may then be None).

    Returns:
        float32 ``lse``, ``first``, ``previous``, ``self``, ``entropy`` (nats) ``(batch, heads, q_len)``,
        ``received`` ``(batch, heads, k_len)``; ``out`` ``(batch, q_len, heads, head_dim)`` in ``query``'s dtype
        (the layer's attention output, as the family's eager function returns it). A query with no key to attend
        has ``lse`` −inf, 0 for the rest and a zero output.

    Raises:
        UnsupportedOperationError: a mask with finite biases (``stats_bias``); a call the kernel cannot take
            (``stats_kernel``: not on a CPU, or not float32/bfloat16/float16; value and key of different sizes).
    """
    if not available(query) or value.shape[-1] != query.shape[-1]:
        raise UnsupportedOperationError(
            "The fused CPU kernel takes CPU tensors in float32, bfloat16 or float16 with values of the keys' size: "
            "use the tile kernel.", code="stats_kernel")
    kernel = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    b, h, q_len, d = query.shape
    k_len = key.shape[2]
    allowed = "causal" if causal else allowed_keys(attention_mask, q_len, k_len)
    keys, values = _repeat(key, h), _repeat(value, h)
    blocked = None
    if isinstance(allowed, torch.Tensor):
        blocked = torch.zeros(allowed.shape, dtype=query.dtype).masked_fill(~allowed, float("-inf"))
    out, lse = kernel(query, keys, values, 0.0, causal, attn_mask=blocked, scale=scaling)
    # the statistics' calls in float32 (a bfloat16 lse / scale would be off by ~0.5 %, its exp by more)
    qf, kf = query.float(), keys.float()
    fmask = None if blocked is None else blocked.float()
    pk, _ = kernel(qf, kf, kf, 0.0, causal, attn_mask=fmask, scale=scaling)
    lse = lse.float()
    empty = torch.zeros_like(lse, dtype=torch.bool)
    if isinstance(allowed, torch.Tensor):  # a row that attends nothing: the kernel gives lse 0 and a zero output
        empty = empty | ~allowed.any(-1)
    lse = lse.masked_fill(empty, float("-inf"))
    folded = (-lse.masked_fill(empty, float("inf")) / scaling)[..., None]  # exp(s − inf) = 0 for such a row
    swapped_q = torch.cat([kf, torch.ones_like(kf[..., :1])], dim=-1)
    swapped_k = torch.cat([qf, folded], dim=-1)
    zeros = torch.zeros_like(swapped_k)
    if causal:  # keys j receive from the queries i >= j: causal once both sequences are read backwards
        _, back = kernel(swapped_q.flip(2), swapped_k.flip(2), zeros, 0.0, True, attn_mask=None, scale=scaling)
        back = back.flip(2)
    else:
        mask_t = None if fmask is None else fmask.transpose(-1, -2)
        _, back = kernel(swapped_q, swapped_k, zeros, 0.0, False, attn_mask=mask_t, scale=scaling)
    received = torch.exp(back.float()).nan_to_num(0.0, 0.0, 0.0)
    if isinstance(allowed, torch.Tensor):  # a key no query attends: its row of the swapped call is empty (lse 0)
        received = received.masked_fill(~allowed.any(-2), 0.0)
    out = out.masked_fill(empty[..., None], 0.0)
    stats = _finish(query, keys, scaling, lse, pk.masked_fill(empty[..., None], 0.0), received, allowed)
    stats["out"] = out.transpose(1, 2).contiguous()
    return stats
