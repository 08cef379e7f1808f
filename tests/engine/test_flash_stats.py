"""Head statistics from PyTorch's fused CPU attention kernel (issue 45): every statistic of
models.analysis.flash_stats and the layer's output against the same quantities read off the explicit softmax
weights (bidirectional, causal, padded, grouped-query; float32 and bfloat16 inputs), and the layer's output in a
whole forward pass (the statistics pass by each kernel on each family's tiny model: tests/engine/test_stats_pass.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import models
from models.analysis.flash_stats import flash_stats

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_fused_stats import masks, reference  # noqa: E402  (one reference for both kernels)
from test_stats_pass import TEXT  # noqa: E402


def _output(q, k, v, mask, scaling):
    """The attention output ``softmax(s) V`` in float64, ``(batch, q_len, heads, d)``; a row with no key: 0."""
    h = q.shape[1]
    k, v = (x.repeat_interleave(h // x.shape[1], dim=1).double() for x in (k, v))
    s = scaling * torch.matmul(q.double(), k.transpose(-1, -2))
    if mask is not None:
        s = s + mask.double()
    p = torch.softmax(s, -1)
    if mask is not None:
        p = p.masked_fill((mask <= torch.finfo(torch.float32).min / 2).all(-1, keepdim=True), 0.0)
    return torch.matmul(p, v).transpose(1, 2)


@pytest.mark.parametrize("kind", ["none", "causal", "padded", "causal_padded"])
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_every_statistic_and_the_output_equal_those_of_the_weights(kind, kv_heads):
    torch.manual_seed(0)
    n, d = 37, 16
    q, k, v = torch.randn(2, 4, n, d) * 2, torch.randn(2, kv_heads, n, d) * 2, torch.randn(2, kv_heads, n, d)
    mask = masks(kind, n)
    scaling = d ** -0.5
    got = flash_stats(q, k, v, None if kind == "causal" else mask, scaling, causal=kind == "causal")
    want = reference(q, k, mask, scaling)
    rows = slice(2, None) if "padded" in kind else slice(None)  # padded rows attend nothing
    for name in ("first", "previous", "self", "entropy", "lse"):
        torch.testing.assert_close(got[name][..., rows].double(), want[name][..., rows], atol=1e-5, rtol=1e-5,
                                   msg=name)
    torch.testing.assert_close(got["received"].double(), want["received"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got["out"].double(), _output(q, k, v, mask, scaling), atol=1e-5, rtol=1e-5)
    if "padded" in kind:  # a row with nothing to attend: no weight, no statistic, a zero output
        assert torch.isneginf(got["lse"][..., :2]).all() and (got["entropy"][..., :2] == 0).all()
        assert (got["out"][:, :2] == 0).all() and (got["received"][..., :2] == 0).all()


def test_bfloat16_inputs_give_float32_statistics():
    """A bfloat16 model's queries and keys: the statistics' calls run in float32 on the same (rounded) inputs, so
    they match float64 on those inputs; only the first call (the model's own output) is bfloat16."""
    torch.manual_seed(1)
    n, d = 29, 16
    q, k, v = (torch.randn(1, 4, n, d).to(torch.bfloat16) for _ in range(3))
    got = flash_stats(q, k, v, None, d ** -0.5, causal=True)
    want = reference(q.float(), k.float(), masks("causal", n), d ** -0.5)
    for name in ("entropy", "received", "first", "previous"):
        torch.testing.assert_close(got[name].double(), want[name], atol=2e-2, rtol=2e-2, msg=name)
    assert got["out"].dtype == torch.bfloat16 and got["entropy"].dtype == torch.float32


def test_a_call_the_kernel_cannot_take_is_refused():
    q = torch.randn(1, 2, 5, 8, dtype=torch.float64)
    with pytest.raises(models.UnsupportedOperationError) as err:
        flash_stats(q, q, q, None, 0.3)
    assert err.value.code == "stats_kernel"
    bias = torch.zeros(1, 1, 5, 5)
    bias[..., 0] = -1.5  # an ALiBi-like finite bias
    with pytest.raises(models.UnsupportedOperationError) as err:
        flash_stats(q.float(), q.float(), q.float(), bias, 0.3)
    assert err.value.code == "stats_bias"


def test_the_pass_by_the_fused_kernel_computes_the_models_own_output(tiny):
    """The flash kernel's first call is the layer's output: the pass's logits equal a plain eager forward's."""
    from models import capture

    loaded = tiny("llama")
    ids = loaded.tokenizer(TEXT, return_tensors="pt")["input_ids"]
    logits = {}
    for name, hook in (("eager", None), ("flash", lambda site, eager, module, q, k, v, mask, args, kw:
                                              flash_stats(q, k, v, mask, module.scaling)["out"])):
        with capture.rerun(loaded, record=False, stats=hook):
            logits[name] = loaded.model(input_ids=ids).logits
    torch.testing.assert_close(logits["flash"], logits["eager"], atol=1e-5, rtol=1e-5)
