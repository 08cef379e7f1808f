"""The pinned torch's fused attention with a mask at a long length (issue 45 point 4): an upstream fault (fixed in
2026) gave wrong sdpa results with masks at long lengths on a GPU. ``scaled_dot_product_attention`` at 16,384
tokens, with a boolean mask (a sliding window, the first keys of each row masked as padding would be) and with
the plain causal flag, against the softmax written out in float64 for query rows at the start, the middle and
the end. Runs on the test
device (``DIKKAT_TEST_DEVICE``: CPU here, CUDA in ``bench/device_check.sh``), in float32 there."""

from __future__ import annotations

import pytest
import torch

from conftest import TEST_DEVICE

N = 16_384
WINDOW = 1_000
PAD = 3  # keys no query attends (left padding)


def _allowed(rows: torch.Tensor, n: int, causal_only: bool) -> torch.Tensor:
    keys = torch.arange(n, device=rows.device)[None, :]
    allowed = keys <= rows[:, None]
    if not causal_only:
        allowed = allowed & (keys > rows[:, None] - WINDOW) & (keys >= PAD)
    return allowed


#: the query rows compared: the first after the padding, the middle, the last (where a long-length fault shows)
ROWS = (range(PAD, PAD + 256), range(N // 2, N // 2 + 256), range(N - 256, N))


def _reference(q, k, v, rows: torch.Tensor, causal_only: bool) -> torch.Tensor:
    """softmax(q kᵀ / √d + mask) v of ``rows`` in float64 (Vaswani et al. 2017, eq. 1), over all 16,384 keys."""
    s = q[..., rows, :].double() @ k.double().transpose(-1, -2) / q.shape[-1] ** 0.5
    s = s.masked_fill(~_allowed(rows, N, causal_only), float("-inf"))
    return torch.softmax(s, dim=-1) @ v.double()


@pytest.mark.parametrize("causal_only", [True, False], ids=["causal flag", "boolean mask"])
def test_sdpa_at_16k_tokens_with_a_mask_equals_the_softmax_written_out(causal_only):
    g = torch.Generator(device="cpu").manual_seed(0)
    q, k, v = (torch.randn(1, 2, N, 16, generator=g).to(TEST_DEVICE) for _ in range(3))
    if causal_only:
        got = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        mask = _allowed(torch.arange(N, device=q.device), N, False)
        got = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    for picked in ROWS:  # the padded rows 0..2 attend nothing: sdpa's value for them is its own
        rows = torch.tensor(list(picked), device=q.device)
        want = _reference(q, k, v, rows, causal_only)
        err = (got[..., rows, :].double() - want).abs().max().item()
        assert err < 1e-4, (picked, err)
        assert want.abs().max().item() > 0.01  # far above the tolerance: a wrong mask moves them by more
