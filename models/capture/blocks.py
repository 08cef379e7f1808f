"""The replaced mask and the query blocks of Dikkat's attention function (:func:`models.capture.dikkat_attention`):
an additive mask from a boolean one, the keys a mask allows, and blocks of query rows for a long input."""

from __future__ import annotations

import numpy as np
import torch

# Fewest query rows per block (matrix products on fewer rows waste the processor).
MIN_ROWS = 16


def apply_mask(allowed: torch.Tensor, query: torch.Tensor, key: torch.Tensor):
    """Additive mask ``(1, 1, q, k)`` and the empty-row flags ``(q,)`` for the last ``q`` queries.

    ``allowed`` is the full ``(n, n)`` boolean matrix; with a KV cache the call sees ``q`` new queries
    against ``k`` keys, i.e. rows ``k - q .. k - 1`` and columns ``0 .. k - 1``.
    """
    q_len, k_len = query.shape[-2], key.shape[-2]
    if allowed.shape[0] < k_len or allowed.shape[1] < k_len:
        from ..errors import InvalidMaskError

        raise InvalidMaskError(
            f"Mask of shape {tuple(allowed.shape)} is smaller than the sequence ({k_len} tokens).",
            code="mask_too_small", shape=str(tuple(allowed.shape)), tokens=k_len
        )
    block = allowed[k_len - q_len : k_len, :k_len].to(query.device)
    additive = torch.zeros(block.shape, dtype=query.dtype, device=query.device)
    additive.masked_fill_(~block, torch.finfo(query.dtype).min)
    return additive[None, None], ~block.any(dim=-1)


def allowed_of(attention_mask: torch.Tensor | None, q_len: int, k_len: int) -> torch.Tensor:
    """Which keys each query may attend under the mask an eager attention function receives.

    Args:
        attention_mask: additive float ``(batch, 1 or heads, q_len, >= k_len)`` (0 allowed, the dtype's
            minimum forbidden), boolean of the same shape (True allowed), or None (every key allowed: the
            eager functions add no mask of their own).
        q_len, k_len: lengths of the call's queries and keys, in tokens (the last ``q_len`` mask rows
            and first ``k_len`` columns are read, as with a KV cache).

    Returns:
        bool CPU tensor ``(q_len, k_len)`` for batch row 0: the keys any head may attend (a mask per head has one
        plane per head; the others one for all).
    """
    if attention_mask is None:
        return torch.ones((q_len, k_len), dtype=torch.bool)
    m = attention_mask[0, :, -q_len:, :k_len]
    if m.dtype != torch.bool:
        m = m > torch.finfo(m.dtype).min / 2
    return m.any(dim=0).expand(q_len, k_len).cpu()


def allowed_keys(mask: torch.Tensor, k_len: int) -> torch.Tensor:
    """Bool ``(..., q, k_len)``: True where an additive float mask (above half the dtype's minimum) or a
    boolean mask lets a query attend a key."""
    m = mask[..., :k_len]
    return m if m.dtype == torch.bool else m > torch.finfo(m.dtype).min / 2


def plan_blocks(mask: torch.Tensor | None, q_len: int, k_len: int, per_cell: int, chunk_bytes: int,
                min_rows: int = 0) -> list[tuple[int, int, int, int]]:
    """Split an attention call into blocks ``(q0, q1, k0, k1)`` of query rows and the key columns they need.

    Rows are grouped greedily, in order, while ``rows · (k1 - k0) · per_cell`` stays within ``chunk_bytes``
    (``per_cell``: bytes of one query-key weight over batch and heads), with at least ``min_rows`` rows
    (default :data:`MIN_ROWS`) per block. ``k0 .. k1 - 1`` is the smallest range holding every key some row
    of the block may attend under ``mask`` (additive float or boolean, ``(batch, 1 or heads, q_len or 1,
    >= k_len)``; None: every key): outside it every key is forbidden, so its softmax weight is exactly 0
    (``exp`` of the dtype's minimum underflows to 0) and leaving it out changes no allowed weight. A row
    with no allowed key needs every key. So a causal block reads only the keys up to its last row, and
    blocks of equal size keep the memory allocator reusing the same buffers.

    Returns:
        the blocks, covering rows ``0 .. q_len - 1`` in order.
    """
    min_rows = min_rows or MIN_ROWS
    if mask is None or mask.shape[-2] != q_len:
        first = np.zeros(q_len, dtype=np.int64)
        last = np.full(q_len, k_len - 1, dtype=np.int64)
        if mask is not None:  # one row of mask for every query (a padding mask): its range for all
            cols = allowed_keys(mask, k_len).reshape(-1, k_len).any(dim=0).nonzero()
            if cols.numel():
                first[:], last[:] = int(cols[0]), int(cols[-1])
    else:
        allowed = allowed_keys(mask, k_len).reshape(-1, q_len, k_len)
        allowed = (allowed[0] if allowed.shape[0] == 1 else allowed.any(dim=0)).to(torch.uint8)  # (q, k)
        some = allowed.amax(dim=-1) > 0
        first = torch.where(some, allowed.argmax(dim=-1), 0).cpu().numpy()
        last = torch.where(some, k_len - 1 - allowed.flip(-1).argmax(dim=-1), k_len - 1).cpu().numpy()
    blocks = []
    q0 = 0
    first_l, last_l = first.tolist(), last.tolist()
    while q0 < q_len:
        k0, k1 = first_l[q0], last_l[q0] + 1
        q1 = q0 + 1
        while q1 < q_len:
            n0, n1 = min(k0, first_l[q1]), max(k1, last_l[q1] + 1)
            if q1 - q0 >= min_rows and (q1 + 1 - q0) * (n1 - n0) * per_cell > chunk_bytes:
                break
            k0, k1, q1 = n0, n1, q1 + 1
        blocks.append((q0, q1, k0, k1))
        q0 = q1
    return blocks


def block_of(value, q_len: int, k_len: int, q0: int, q1: int, k0: int, k1: int):
    """Slice one extra argument of the eager function to a block: a 4-D tensor whose last two dims are
    ``(q_len, k_len)`` (a mask, T5's position bias) to rows ``q0:q1`` and keys ``k0:k1``; a 4-D tensor of
    shape ``(..., 1, k_len)`` to keys ``k0:k1``; anything else unchanged."""
    if isinstance(value, torch.Tensor) and value.dim() == 4 and value.shape[-1] == k_len:
        if value.shape[-2] == q_len:
            return value[..., q0:q1, k0:k1]
        if value.shape[-2] == 1:
            return value[..., k0:k1]
    return value


def is_causal(mask: torch.Tensor, n: int) -> bool:
    """True when ``mask`` (additive float or boolean, ``(batch, 1 or heads, n, >= n)``) lets every query
    attend exactly the keys up to its own position, in every batch row and head."""
    allowed = allowed_keys(mask, n)
    if allowed.shape[-2] != n:
        return False
    return torch.equal(allowed, torch.ones(n, n, dtype=torch.bool, device=mask.device).tril().expand_as(allowed))
