"""The statistics pass on tiny models (issue 45, step 2): each family's per-query statistics from the log-sum-exp
equal the ones read off the weights models.analyze records, by both kernels; what it cannot do is refused."""

from __future__ import annotations

import numpy as np
import pytest

import models
from models.analysis.stats_pass import head_statistics

TEXT = "the cat sat on the mat and the cat saw the dog"


def from_weights(a, stack: str) -> dict[str, np.ndarray]:
    w = np.asarray(a.attentions[stack], dtype=np.float64)  # (layers, heads, n, n)
    n = w.shape[-1]
    rows = np.arange(n)
    prev = np.zeros(w.shape[:3])
    prev[..., 1:] = w[..., rows[1:], rows[1:] - 1]
    logw = np.where(w > 0, np.log(np.where(w > 0, w, 1.0)), 0.0)
    return {"first": w[..., 0], "previous": prev, "self": w[..., rows, rows], "entropy": -(w * logw).sum(-1),
            "received": w.sum(-2)}


@pytest.mark.parametrize("arch", ["gpt2", "llama", "bert", "mistral", "gemma3"])
@pytest.mark.parametrize("kernel", ["tile", "flex", "flash", "auto"])
def test_statistics_from_the_lse_equal_those_of_the_weights(tiny, arch, kernel):
    loaded = tiny(arch)
    got = head_statistics(loaded, TEXT, kernel=kernel)
    a = models.analyze(loaded, TEXT, top_k=1)
    want = from_weights(a, got.stack)
    assert len(got.tokens) == want["first"].shape[-1]
    for name, value in want.items():
        np.testing.assert_allclose(got.stats[name], value, atol=3e-5, rtol=1e-4, err_msg=f"{arch} {name}")
    assert np.isfinite(got.stats["lse"]).all()


def test_what_the_pass_cannot_read_is_refused(tiny):
    with pytest.raises(models.InvalidArgumentError):
        head_statistics(tiny("gpt2"), TEXT, kernel="cuda")
    for arch, code in (("t5", "stats_family"), ("gpt_neo", "stats_path")):
        with pytest.raises(models.UnsupportedOperationError) as err:
            head_statistics(tiny(arch), TEXT)
        assert err.value.code == code


def test_the_tile_pass_computes_the_models_own_output(tiny):
    """The tile kernel returns each layer's output from the same scores: the pass's hidden states equal those of
    a plain eager forward (the test reads the last hidden state through the capture's outputs)."""
    import torch

    from models import capture
    from models.analysis.fused_stats import tile_stats

    loaded = tiny("llama")
    ids = loaded.tokenizer(TEXT, return_tensors="pt")["input_ids"]
    outs = {}
    for name, hook in (("eager", None), ("tile", lambda site, eager, module, q, k, v, mask, args, kw:
                                             tile_stats(q, k, mask, module.scaling, value=v)["out"])):
        with capture.rerun(loaded, record=False, stats=hook) as state:
            state.outputs = {}
            logits = loaded.model(input_ids=ids).logits
        outs[name] = (logits, state.outputs)
    torch.testing.assert_close(outs["tile"][0], outs["eager"][0], atol=1e-5, rtol=1e-5)
    for key, value in outs["eager"][1].items():
        torch.testing.assert_close(outs["tile"][1][key], value, atol=1e-5, rtol=1e-5)
