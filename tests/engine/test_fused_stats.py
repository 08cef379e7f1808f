"""Head statistics from the log-sum-exp (issue 45, step 1): every statistic of models.analysis.fused_stats, by
FlexAttention and by the tile path, against the same quantities read off the explicit softmax weights, for
bidirectional, causal, padded and grouped-query calls; a bias in the mask refused."""

from __future__ import annotations

import pytest
import torch

from models.analysis.fused_stats import flex_stats, tile_stats
from models.errors import UnsupportedOperationError


def reference(q, k, mask, scaling):
    """The statistics from the weights themselves (softmax of the scores, float64)."""
    h = q.shape[1]
    k = k.repeat_interleave(h // k.shape[1], dim=1)
    s = scaling * torch.matmul(q.double(), k.double().transpose(-1, -2))
    if mask is not None:
        s = s + mask.double()
    lse = torch.logsumexp(s, -1)
    p = torch.softmax(s, -1)
    if mask is not None:  # a row with no key to attend attends nothing (the engine's rule), not all keys alike
        p = p.masked_fill((mask <= torch.finfo(torch.float32).min / 2).all(-1, keepdim=True), 0.0)
    n = q.shape[2]
    rows = torch.arange(n)
    prev = torch.zeros(p.shape[:3], dtype=torch.float64)
    prev[..., 1:] = p[..., rows[1:], rows[1:] - 1]
    logp = torch.where(p > 0, p.log(), torch.zeros_like(p))
    return {"lse": lse, "first": p[..., 0], "previous": prev, "self": p[..., rows, rows],
            "entropy": -(p * logp).sum(-1), "received": p.sum(2)}


def masks(kind: str, n: int):
    if kind == "none":
        return None
    allowed = torch.ones(n, n, dtype=torch.bool)
    if kind in ("causal", "causal_padded"):
        allowed = allowed.tril()
    if kind in ("padded", "causal_padded"):
        allowed[:, :2] = False  # left padding: the first two keys are never attended
        allowed[:2] = False  # and their own rows attend nothing
    return torch.zeros(1, 1, n, n).masked_fill(~allowed, torch.finfo(torch.float32).min)


@pytest.mark.parametrize("kind", ["none", "causal", "padded", "causal_padded"])
@pytest.mark.parametrize("kv_heads", [4, 2])
@pytest.mark.parametrize("how", ["tile", "flex"])
def test_every_statistic_equals_the_one_read_off_the_weights(kind, kv_heads, how):
    torch.manual_seed(0)
    n, d = 37, 16
    q, k = torch.randn(2, 4, n, d) * 2, torch.randn(2, kv_heads, n, d) * 2
    mask = masks(kind, n)
    scaling = d ** -0.5
    got = (tile_stats(q, k, None if kind == "causal" else mask, scaling, block_rows=8, causal=kind == "causal")
           if how == "tile" else
           flex_stats(q, k, None if kind == "causal" else mask, scaling, causal=kind == "causal"))
    want = reference(q, k, mask, scaling)
    rows = slice(2, None) if "padded" in kind else slice(None)  # padded rows attend nothing
    for name in ("first", "previous", "self", "entropy"):
        torch.testing.assert_close(got[name][..., rows].double(), want[name][..., rows], atol=2e-5, rtol=1e-5,
                                   msg=name)
    torch.testing.assert_close(got["lse"][..., rows].double(), want["lse"][..., rows], atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(got["received"].double(), want["received"], atol=5e-5, rtol=1e-5)
    if "padded" in kind:
        assert not torch.isfinite(got["lse"][..., :2]).any() and not got["entropy"][..., :2].any()
        assert not got["received"][..., :2].any()  # the padded keys receive nothing
    assert got["received"].sum(-1).double().sub(want["received"].sum(-1)).abs().max() < 1e-3


def test_a_position_bias_in_the_mask_is_refused_with_its_reason():
    q = k = torch.randn(1, 2, 5, 8)
    alibi = -0.5 * (torch.arange(5)[:, None] - torch.arange(5)[None]).abs().float()[None, None]
    for stats in (tile_stats, flex_stats):
        with pytest.raises(UnsupportedOperationError) as err:
            stats(q, k, alibi, 8 ** -0.5)
        assert err.value.code == "stats_bias"
