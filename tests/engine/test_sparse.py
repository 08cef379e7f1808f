"""models.sparse: retrieval scores by hand on a constructed case, the needle's construction, what a pattern keeps
of a head (kept_share) against the weights summed by hand, and the key/value bytes of a mask per head."""

from __future__ import annotations

import numpy as np
import pytest

import models
from models import sparse
from models.analysis.head_masks import HeadMasks, duo_attention, full_heads, window_everywhere
from models.errors import InvalidArgumentError, UnsupportedOperationError
from models.sparse.needle import Needle, NeedleRun

@pytest.fixture(scope="module")
def long_llama(tmp_path_factory):
    """The tests' tiny Llama (tests/tiny.py) with room for a needle: 1,024 positions."""
    from tiny import build_long_llama

    return models.load(str(build_long_llama(tmp_path_factory.mktemp("long-llama"), 1024)), device="cpu")


TEXT = "the cat sat on the mat and the dog ran to the cat while the bird sang on a high branch over the river"


def test_retrieval_score_counts_the_distinct_needle_tokens_a_head_copied_over_the_needle_tokens():
    # needle digits at positions 3, 4, 5 with ids 7, 8, 7; the answer repeats them at 10, 11, 12
    ids = (1, 2, 3, 7, 8, 7, 4, 5, 6, 9, 7, 8, 7)
    needle = Needle(ids, (3, 4, 5), (10, 11, 12), len(ids), 0.5, "Oslo", "787")
    copied = np.zeros((2, 2, 3), dtype=bool)
    copied[0, 0] = [True, True, True]  # copies 7, 8, 7: both distinct digits → 1
    copied[0, 1] = [True, False, True]  # copies 7 twice → 1 of 2
    copied[1, 1] = [False, True, False]  # copies 8 → 1 of 2
    run = NeedleRun(np.ones(3, bool), 0.1, copied)
    scores = sparse.retrieval_scores([(needle, run)])
    assert scores.tolist() == [[1.0, 0.5], [0.0, 0.5]]
    assert sparse.retrieval_scores([(needle, run), (needle, NeedleRun(np.ones(3, bool), 0.1, ~copied))]).tolist() == [
        [0.5, 0.5], [0.5, 0.5]]  # ~copied: (0, 0) copies nothing, (1, 0) both digits, (0, 1) and (1, 1) one
    with pytest.raises(InvalidArgumentError):
        sparse.retrieval_scores([])


def test_a_needle_puts_the_digits_at_the_depth_and_the_answer_repeats_them_at_the_end(long_llama, tiny):
    loaded = long_llama
    needles = sparse.make_needles(loaded, lengths=(600,), depths=(0.0, 0.5, 1.0))
    for needle in needles:
        assert needle.length == len(needle.ids) <= 600
        assert [needle.ids[p] for p in needle.needle] == [needle.ids[p] for p in needle.answer]
        assert needle.answer[-1] == needle.length - 1
    assert needles[0].needle[0] < needles[1].needle[0] < needles[2].needle[0]
    with pytest.raises(InvalidArgumentError):
        sparse.make_needles(loaded, lengths=(10,))
    with pytest.raises(UnsupportedOperationError):
        sparse.make_needles(tiny("bert"), lengths=(100,))


def test_run_needle_marks_a_copy_only_where_the_argmax_key_is_a_needle_token_with_the_same_id(long_llama):
    import torch

    from models import capture

    loaded = long_llama
    needle = sparse.make_needles(loaded, lengths=(600,), depths=(0.5,))[0]
    spec = HeadMasks(default="sink_window:16,2", heads={(0, 1): "full"}, fit=True)
    run = sparse.run_needle(loaded, needle, spec)
    # the same rows of the whole weights, recorded by a plain capture of the same ids and mask
    from models.analysis.mask_plan import resolve_masks

    masks, _ = resolve_masks(loaded, spec, needle.length)
    with torch.no_grad(), capture.capture(loaded.site_index, record=True, masks=masks, chunk_bytes=0) as state:
        logits = loaded.model(input_ids=torch.tensor([needle.ids])).logits[0]
    w = np.stack([state.weights[("decoder", layer)][0].numpy() for layer in range(2)])
    ids = np.asarray(needle.ids)
    rows = [p - 1 for p in needle.answer]
    top = w[:, :, rows].argmax(-1)
    correct = logits[rows].argmax(-1).numpy() == ids[list(needle.answer)]
    assert np.array_equal(run.correct, correct)
    want = np.isin(top, needle.needle) & (ids[top] == ids[list(needle.answer)]) & correct
    assert np.array_equal(run.copied, want)
    ce = torch.nn.functional.cross_entropy(logits[rows], torch.tensor(ids[list(needle.answer)]))
    assert np.isclose(run.loss, float(ce), atol=1e-5)


def test_kept_share_is_the_weight_inside_each_pattern_summed_by_hand(tiny):
    loaded = tiny("llama")
    a = models.analyze(loaded, TEXT, keep=True)
    kept = sparse.kept_share(a, 6)
    assert kept.patterns[0] == "sliding_window:6" and kept.patterns[1] == "a_shape:2,4"
    w = np.asarray(a.attentions["decoder"])
    n = w.shape[-1]
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    window = (j <= i) & (i - j < 6)
    assert np.allclose(kept.share[0], (w * window).sum(-1).mean(-1), atol=1e-6)
    assert np.allclose(kept.keys[0], window.sum(-1).mean())
    sinks = (j <= i) & ((i - j < 2) | (j < 4))
    assert np.allclose(kept.share[1], (w * sinks).sum(-1).mean(-1), atol=1e-6)
    assert (kept.share <= 1 + 1e-6).all() and (kept.share > 0).all()
    enforced = models.analyze(loaded, TEXT, mask=HeadMasks(heads={(1, 2): kept.patterns[3]}), keep=True)
    allowed = enforced.head_mask(1, 2)
    assert np.isclose(kept.keys[3, 1, 2], allowed.sum(-1).mean())  # the same keys as the enforced pattern
    with pytest.raises(InvalidArgumentError):
        sparse.kept_share(a, 1)


def test_kv_bytes_keep_a_shared_key_value_head_whole_when_one_of_its_query_heads_is_full(tiny):
    loaded = tiny("llama")  # GQA: query heads share key/value heads
    layers, heads = loaded.stacks["decoder"]
    layout = models.analysis.kv_layout.kv_layout(loaded)
    per = 2 * layout.head_dim * layout.bytes_per_value
    n = 100
    everything = sparse.kv_bytes(loaded, window_everywhere(8, 2), n)
    assert everything["full"] == layers * layout.kv_heads * n * per
    assert everything["bytes"] == layers * layout.kv_heads * 10 * per
    one = sparse.kv_bytes(loaded, full_heads([(0, 0)], 8, 2), n)
    assert one["bytes"] == everything["bytes"] + (n - 10) * per  # one key/value head of layer 0 kept whole
    scores = np.zeros((layers, heads))
    scores[1, heads - 1] = 1.0
    duo = sparse.kv_bytes(loaded, duo_attention(scores, 1, 8, 2), n)
    assert duo["bytes"] == one["bytes"] and duo["ratio"] == duo["full"] / duo["bytes"]
    assert sparse.kv_bytes(loaded, "vertical_slash:4,4", n)["bytes"] == everything["full"]  # prefill only


def test_duo_attention_keeps_the_top_scored_heads_full():
    scores = np.array([[0.1, 0.9], [0.5, 0.0]])
    spec = duo_attention(scores, 2, 16, 4)
    assert spec.heads == {(0, 1): "full", (1, 0): "full"} and spec.default == "sink_window:16,4" and spec.fit
    with pytest.raises(InvalidArgumentError):
        duo_attention(scores, 5)
