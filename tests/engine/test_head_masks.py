"""A mask per head (models.analysis.head_masks, models.capture.head_rules): each head's pattern applied in the
family's own eager function, head by head equal to the same mask on the whole model, full heads bit for bit the
model's own, chosen patterns (vertical-slash, block-sparse) equal to their definition computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

import models
from models.analysis.head_masks import HeadMasks, parse_pattern
from models.errors import InvalidMaskError, UnsupportedOperationError

TEXT = "the cat sat on the mat and the dog ran to the cat while the bird sang on a high branch"
FAMILIES = ("gpt2", "llama", "gemma3", "bert", "t5")


def _stack(loaded):
    """The self-attention stack the tests mask: an encoder-decoder's encoder (its decoder reads a 2-token target)."""
    return "encoder" if loaded.family == "encoder-decoder" else loaded.mask_stack


def _weights(analysis, stack):
    return np.asarray(analysis.attentions[stack])


@pytest.mark.parametrize("arch", FAMILIES)
def test_a_head_masked_alone_equals_the_same_mask_on_the_whole_model_and_the_other_heads_are_untouched(tiny, arch):
    loaded = tiny(arch)
    stack = _stack(loaded)
    plain = models.analyze(loaded, TEXT, keep=True)
    whole = models.analyze(loaded, TEXT, mask={stack: "sliding_window:3"}, keep=True)
    p, w = _weights(plain, stack), _weights(whole, stack)
    heads = loaded.stacks[stack][1]
    for head in range(heads):
        one = models.analyze(loaded, TEXT, mask=HeadMasks(heads={(0, head): "sliding_window:3"}, stack=stack),
                             keep=True)
        o = _weights(one, stack)
        assert np.array_equal(o[0, head], w[0, head])  # the masked head: the whole-model mask, bit for bit
        others = [h for h in range(heads) if h != head]
        assert np.array_equal(o[0, others], p[0, others])  # full heads: the model's own mask, bit for bit
        assert one.head_masks[stack].patterns[(0, head)] == "sliding_window:3"
        n = o.shape[-1]
        assert (o[0, head][~one.head_mask(0, head, stack)] == 0).all()
        assert int(one.head_mask(0, head, stack).sum()) == sum(min(i + 1, 3) for i in range(n))


@pytest.mark.parametrize("arch", FAMILIES)
def test_every_head_given_the_same_pattern_is_the_whole_model_mask_bit_for_bit(tiny, arch):
    loaded = tiny(arch)
    stack = _stack(loaded)
    whole = models.analyze(loaded, TEXT, mask={stack: "strided:3"}, keep=True)
    every = models.analyze(loaded, TEXT, mask=HeadMasks(default="strided:3", stack=stack), keep=True)
    assert np.array_equal(_weights(every, stack), _weights(whole, stack))
    full = models.analyze(loaded, TEXT, mask=HeadMasks(default="full", stack=stack), keep=True)
    plain = models.analyze(loaded, TEXT, keep=True)
    assert np.array_equal(_weights(full, stack), _weights(plain, stack))
    assert full.head_masks[stack].rules == {}  # nothing replaced: the model's own call


def test_layers_take_their_own_patterns_and_heads_win_over_layers(tiny):
    loaded = tiny("llama")
    spec = HeadMasks(default="sink_window:2,1", layers={1: "full"}, heads={(1, 0): "causal", (0, 2): "full"})
    a = models.analyze(loaded, TEXT, mask=spec, keep=True)
    rules = a.head_masks["decoder"]
    assert rules.patterns[(0, 0)] == "sink_window:2,1" and rules.patterns[(0, 2)] == "full"
    assert rules.patterns[(1, 0)] == "causal" and rules.patterns[(1, 1)] == "full"
    w = _weights(a, "decoder")
    n = w.shape[-1]
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    window = (j <= i) & ((i - j < 2) | (j < 1))
    assert (w[0, 0][~window] == 0).all() and np.allclose(w[0, 0].sum(-1), 1, atol=1e-6)
    assert (w[0, 2][np.tril(np.ones((n, n), bool)) & ~window] > 0).any()  # full head: sees beyond the window
    assert a.mask.startswith("per head:")


def _by_hand_vertical_slash(rows: np.ndarray, n: int, v: int, s: int) -> tuple[np.ndarray, np.ndarray]:
    """MInference's Algorithm 2 on the last rows of a head's weights, written out with loops."""
    first = n - rows.shape[0]
    vertical = rows.sum(axis=0)
    slash = np.zeros(n)
    for r in range(rows.shape[0]):
        for j in range(first + r + 1):
            slash[first + r - j] += rows[r, j]
    slash[0] = np.inf
    cols = np.sort(np.argsort(-vertical, kind="stable")[:v])
    offs = np.sort(np.argsort(-slash, kind="stable")[:s])
    return cols, offs


def test_vertical_slash_keeps_the_columns_and_diagonals_of_most_weight_in_the_last_rows(tiny):
    loaded = tiny("llama")
    plain = models.analyze(loaded, TEXT, keep=True)
    a = models.analyze(loaded, TEXT, mask=HeadMasks(heads={(0, 1): "vertical_slash:3,2"}), keep=True)
    n = len(a.tokens)
    weights = _weights(plain, "decoder")[0, 1]
    cols, offs = _by_hand_vertical_slash(weights[-64:], n, 3, 2)
    chosen = a.head_masks["decoder"].chosen[(0, 1)]
    assert list(chosen["columns"]) == list(cols) and list(chosen["offsets"]) == list(offs)
    allowed = a.head_mask(0, 1)
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    expect = (np.isin(j, cols) | np.isin(i - j, offs)) & (j <= i)
    assert np.array_equal(allowed, expect)
    masked = _weights(a, "decoder")[0, 1]
    assert (masked[~allowed] == 0).all() and np.allclose(masked.sum(-1), 1, atol=1e-6)
    assert 0 in chosen["offsets"]  # each token sees itself: no empty row


def test_block_sparse_keeps_the_blocks_of_most_weight_per_block_row(tiny):
    loaded = tiny("gpt2")
    plain = models.analyze(loaded, TEXT, keep=True)
    a = models.analyze(loaded, TEXT, mask=HeadMasks(heads={(0, 0): "block_sparse:4,2"}), keep=True)
    n = len(a.tokens)
    w = _weights(plain, "decoder")[0, 0]
    rows = -(-n // 4)
    expect = np.zeros((n, n), bool)
    for bi in range(rows):
        mass = np.array([w[bi * 4:(bi + 1) * 4, bj * 4:(bj + 1) * 4].sum() for bj in range(rows)])
        mass[bi] = np.inf
        for bj in np.argsort(-mass, kind="stable")[:2]:
            if mass[bj] > 0:
                expect[bi * 4:(bi + 1) * 4, bj * 4:(bj + 1) * 4] = True
    expect &= np.tril(np.ones((n, n), bool))
    assert np.array_equal(a.head_mask(0, 0), expect)
    masked = _weights(a, "decoder")[0, 0]
    assert (masked[~expect] == 0).all() and np.allclose(masked.sum(-1), 1, atol=1e-6)


def test_a_head_whose_mask_empties_a_row_gives_zero_weights_there_and_the_others_are_untouched(tiny):
    loaded = tiny("llama")
    n = len(models.analyze(loaded, TEXT).tokens)
    custom = np.tril(np.ones((n, n), bool))
    custom[3] = False
    a = models.analyze(loaded, TEXT, mask=HeadMasks(heads={(0, 1): custom}), keep=True)
    w = _weights(a, "decoder")
    assert (w[0, 1, 3] == 0).all() and np.allclose(np.delete(w[0, 1], 3, axis=0).sum(-1), 1, atol=1e-6)
    assert np.isfinite(w).all() and np.allclose(w[0, 0].sum(-1), 1, atol=1e-6)


def test_long_text_in_blocks_equals_one_call(tiny):
    """A mask per head on an input cut into blocks of query rows gives the weights of one call."""
    loaded = tiny("llama")
    text = " ".join([TEXT] * 4)
    spec = HeadMasks(default="sink_window:5,2", heads={(0, 0): "full", (1, 1): "vertical_slash:4,4"})
    one = models.analyze(loaded, text, mask=spec, keep=True)
    from models import capture

    old = capture.state.CHUNK_BYTES
    try:
        capture.state.CHUNK_BYTES = 4 * 2 * 16 * 64 * 4  # a few rows per block
        blocked = models.analyze(loaded, text, mask=spec, keep=False)
        got = np.stack([np.asarray(blocked.attentions["decoder"][layer]) for layer in range(2)])
    finally:
        capture.state.CHUNK_BYTES = old
    assert np.allclose(got, _weights(one, "decoder"), atol=1e-6)


@pytest.mark.parametrize("spec, code", [
    (HeadMasks(heads={(0, 99): "causal"}), "head_mask_no_head"),
    (HeadMasks(layers={7: "causal"}), "head_mask_no_head"),
    (HeadMasks(heads={(0, 0): "sliding_window:0"}), "mask_bad_width"),
    (HeadMasks(heads={(0, 0): "sliding_window:500"}), "head_mask_budget"),
    (HeadMasks(heads={(0, 0): "vertical_slash:300,300"}), "head_mask_budget"),
    (HeadMasks(heads={(0, 0): "block_sparse:999,1"}), "head_mask_budget"),
    (HeadMasks(heads={(0, 0): "vertical_slash:3"}), "head_mask_two_numbers"),
    (HeadMasks(heads={(0, 0): np.ones((3, 3), bool)}), "mask_custom_shape"),
    (HeadMasks(heads={0: "causal"}), "head_mask_key"),
    (HeadMasks(default="swiss"), "unknown_mask"),
])
def test_bad_head_masks_are_invalid_mask_errors_with_a_code(tiny, spec, code):
    with pytest.raises(InvalidMaskError) as info:
        models.analyze(tiny("llama"), TEXT, mask=spec)
    assert info.value.code == code


def test_patterns_read_as_documented():
    assert parse_pattern("full") is None and parse_pattern("native") is None
    assert str(parse_pattern("a_shape:8,4")) == "sink_window:8,4"
    assert str(parse_pattern("Vertical-Slash:64,32")) == "vertical_slash:64,32"
    assert str(parse_pattern(("sliding_window", 4))) == "sliding_window:4"


def test_a_chosen_pattern_string_applies_to_every_head(tiny):
    loaded = tiny("gpt2")
    a = models.analyze(loaded, TEXT, mask="a_shape:3,1", keep=True)
    b = models.analyze(loaded, TEXT, mask="sink_window:3,1", keep=True)
    assert np.array_equal(_weights(a, "decoder"), _weights(b, "decoder"))


def test_the_fallback_path_refuses_a_mask_per_head_with_the_reason(tiny):
    loaded = tiny("gpt2")
    loaded.fallback_stacks_saved = None
    from models.analysis import masks as mask_module

    with pytest.raises(UnsupportedOperationError) as info:
        mask_module.check_fallback_masks(_as_fallback(loaded), {"decoder": object()})
    assert info.value.code == "head_mask_not_routed"


def _as_fallback(loaded):
    class Fallback:
        name, capture_path, stacks, fallback_stacks = loaded.name, "fallback", loaded.stacks, ()

    return Fallback()


@pytest.mark.parametrize("arch", ("llama", "gpt2", "gemma3"))
def test_the_fused_pass_one_sdpa_call_per_group_of_heads_gives_the_eager_outputs(tiny, arch):
    """keep=False runs a mask per head as one fused call per group of heads (no (1, heads, q, k) mask); its loss
    and predictions equal the eager pass's (keep=True) up to float rounding, and the keys recorded per layer are
    the union of the heads' own."""
    loaded = tiny(arch)
    assert loaded.sdpa_ok  # these families have sdpa: keep=False takes the fused path
    n = len(models.analyze(loaded, TEXT).tokens)
    custom = np.tril(np.ones((n, n), bool))
    custom[2] = False
    spec = HeadMasks(default="sink_window:3,1", heads={(0, 0): "full", (0, 1): custom, (1, 1): "vertical_slash:3,2"})
    eager = models.analyze(loaded, TEXT, mask=spec, keep=True)
    fused = models.analyze(loaded, TEXT, mask=spec, keep=False)
    assert abs(eager.loss - fused.loss) < 1e-5
    assert np.allclose(eager.next_token.probs, fused.next_token.probs, atol=1e-5)
    assert np.array_equal(fused.head_masks["decoder"].chosen[(1, 1)]["columns"],
                          eager.head_masks["decoder"].chosen[(1, 1)]["columns"])
    for layer in range(2):
        union = np.any([eager.head_mask(layer, h) for h in range(loaded.stacks["decoder"][1])], axis=0)
        assert np.array_equal(np.asarray(fused.masks["decoder"][layer]), union)
