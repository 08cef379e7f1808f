"""A long text's per-head statistics and overview maps from the fused CPU kernel (issue 45): an analysis that keeps
no weight computes ``a.statistics`` and ``a.overview`` in one more pass through the kernel
(models.analysis.flash_summary); every value equals the one read off the kept eager weights of the same analysis,
for each family's tiny model, under replaced masks, with heads switched off and with words of several tokens.
A call the kernel's pass cannot read keeps the eager pass of blocks, whose values are the same."""

from __future__ import annotations

import numpy as np
import pytest

import models
from models.analysis import flash_summary

# words of several tokens (same_word), punctuation, a repeated word
TEXT = "the unbelievably quick cat, surprisingly, chased the mouse; the mouse ran away!"


def _both(loaded, text: str = TEXT, **kwargs):
    kept = models.analyze(loaded, text, keep=True, **kwargs)
    lazy = models.analyze(loaded, text, keep=False, **kwargs)
    return kept, lazy


def _equal(kept, lazy, what: str) -> None:
    for stack, values in kept.statistics.items():
        for name, want in values.items():
            np.testing.assert_allclose(lazy.statistics[stack][name], want, atol=2e-5, rtol=1e-4,
                                       err_msg=f"{what} {stack} {name}")
        np.testing.assert_allclose(lazy.overview[stack], kept.overview[stack], atol=2e-6, rtol=1e-4,
                                   err_msg=f"{what} {stack} overview")


@pytest.mark.parametrize("arch", ["gpt2", "llama", "bert", "mistral", "gemma3"])
def test_the_kernels_pass_equals_the_kept_weights(tiny, arch, monkeypatch):
    ran = []
    real = flash_summary.add_layer
    monkeypatch.setattr(flash_summary, "add_layer", lambda *a, **k: (ran.append(a[2]), real(*a, **k))[1])
    kept, lazy = _both(tiny(arch))
    _equal(kept, lazy, arch)
    assert sorted(set(ran)) == list(range(kept.attentions[next(iter(kept.attentions))].shape[0]))  # every layer
    stack = next(iter(kept.statistics))
    assert np.isfinite(kept.statistics[stack]["same_word"]).all()  # the text has words of several tokens


@pytest.mark.parametrize("mask", ["bidirectional", "sliding_window:3", "strided:2"])
def test_replaced_masks_and_heads_off_are_read_as_the_analysis_ran(tiny, mask):
    kept, lazy = _both(tiny("llama"), mask=mask, heads_off=[("decoder", 0, 1)])
    _equal(kept, lazy, mask)


def test_a_padded_pair_of_an_encoder(tiny):
    kept, lazy = _both(tiny("bert"), text_pair="a mouse, quietly.")
    _equal(kept, lazy, "pair")


def test_what_the_pass_cannot_read_keeps_the_blocks(tiny, monkeypatch):
    """A call the pass refuses (here: every call, as a position bias would be) leaves the accumulators empty and the
    eager pass of blocks fills them: the same values."""
    def refuse(args, kwargs):
        raise models.UnsupportedOperationError("a bias", code="stats_bias")

    monkeypatch.setattr(flash_summary, "readable", refuse)
    kept, lazy = _both(tiny("gpt2"))
    _equal(kept, lazy, "refused")


@pytest.mark.parametrize("arch", ["llama", "bert"])
def test_a_text_of_one_token(tiny, arch):
    """One query and one key: the score's factor is read with a zero key added (it raised IndexError)."""
    kept, lazy = _both(tiny(arch), "cat", max_tokens=1 if arch == "llama" else 3)
    _equal(kept, lazy, "one token")
