"""The lessons' engine (models/lessons/): Q/K/V from the model's own weights, positions, cost, KV cache."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import models
from models.analysis import kv_layout
from models.anatomy.rotary import find_rotary
from models.lessons import cost, kvcache, layer_input, positions, qkv

SENTENCE = "kedi fareyi kovaladı dün"


def _all_heads(loaded, text, atol=1e-5):
    """Recompute every head of every layer; return the largest difference seen."""
    stack = loaded.input_stack
    n_layers, n_heads = loaded.stacks[stack]
    captures = layer_input.layer_captures(loaded, text)
    assert sorted(captures) == list(range(n_layers))
    worst = 0.0
    for layer, lc in captures.items():
        for head in range(n_heads):
            steps = qkv.head_steps(loaded, lc, head)
            recorded = lc.analysis.attentions[stack][layer, head]
            np.testing.assert_allclose(steps.weights, recorded, atol=atol, rtol=0)
            assert steps.max_abs_diff == pytest.approx(float(np.abs(steps.weights - recorded).max()))
            np.testing.assert_allclose(steps.weights.sum(-1), 1.0, atol=1e-5)
            worst = max(worst, steps.max_abs_diff)
    return worst


@pytest.mark.parametrize("arch", ["bert", "gpt2", "llama"])
def test_qkv_reproduces_recorded_attention_tiny(tiny, arch):
    loaded = tiny(arch)
    assert _all_heads(loaded, SENTENCE) < 1e-5


def test_qkv_llama_gqa_and_rope(tiny):
    loaded = tiny("llama")  # 4 query heads, 2 key/value heads
    lc = layer_input.layer_capture(loaded, SENTENCE, layer=1)
    kv_of = [qkv.head_steps(loaded, lc, h).kv_head for h in range(4)]
    assert kv_of == [0, 0, 1, 1]
    steps = qkv.head_steps(loaded, lc, 3)
    assert steps.rope and steps.kv_heads == 2 and steps.heads == 4
    # Position 0 is not rotated; later positions are, and rotation keeps lengths.
    np.testing.assert_allclose(steps.queries[0], steps.queries_unrotated[0], atol=1e-6)
    assert np.abs(steps.queries[3] - steps.queries_unrotated[3]).max() > 1e-3
    np.testing.assert_allclose(np.linalg.norm(steps.queries, axis=-1), np.linalg.norm(steps.queries_unrotated, axis=-1),
                               rtol=1e-5)
    # Heads 2 and 3 share key/value head 1: identical keys and values.
    other = qkv.head_steps(loaded, lc, 2)
    np.testing.assert_array_equal(other.keys, steps.keys)
    np.testing.assert_array_equal(other.values, steps.values)


def test_qkv_check_catches_a_wrong_computation(tiny):
    """The comparison has teeth: skipping RoPE, or reading the wrong key/value head, shows up as a large
    difference from the recorded attention."""
    loaded = tiny("llama")
    lc = layer_input.layer_capture(loaded, SENTENCE, layer=0)
    steps = qkv.head_steps(loaded, lc, 0)
    allowed = steps.allowed
    no_rope = steps.queries_unrotated @ steps.keys_unrotated.T * steps.scaling
    w = np.stack([qkv.softmax_row(r, a) for r, a in zip(no_rope, allowed)])
    assert np.abs(w - steps.recorded).max() > 1e-3
    wrong_kv = qkv.head_steps(loaded, lc, 3)  # reads kv head 1
    scores = steps.queries @ wrong_kv.keys.T * steps.scaling
    w = np.stack([qkv.softmax_row(r, a) for r, a in zip(scores, allowed)])
    assert np.abs(w - steps.recorded).max() > 1e-3


@pytest.mark.parametrize("arch", ["bert", "gpt2", "llama"])
def test_qkv_head_output_equals_module_output(tiny, arch):
    """weights · values for every head equals what the model passes to its output projection."""
    loaded = tiny(arch)
    lc = layer_input.layer_capture(loaded, SENTENCE, layer=1)
    module = lc.module
    seen = {}

    def keep(value) -> None:  # hooks must return None, or they replace the value
        seen.setdefault("x", value)

    if arch == "bert":
        handle = module.register_forward_hook(lambda m, a, out: keep(out[0]))
    else:
        proj = module.o_proj if arch == "llama" else module.c_proj
        handle = proj.register_forward_pre_hook(lambda m, a: keep(a[0]))
    try:
        models.analyze(loaded, SENTENCE)
    finally:
        handle.remove()
    per_head = seen["x"][0].detach().float().cpu().numpy()  # (n, heads * head_dim)
    n_heads = loaded.stacks[lc.stack][1]
    for head in range(n_heads):
        steps = qkv.head_steps(loaded, lc, head)
        d = steps.head_dim
        np.testing.assert_allclose(steps.output, per_head[:, head * d:(head + 1) * d], atol=1e-5, rtol=0)


def test_qkv_mistral_sliding_window_mask(tiny):
    loaded = tiny("mistral")  # sliding window 3
    lc = layer_input.layer_capture(loaded, SENTENCE, layer=0)
    steps = qkv.head_steps(loaded, lc, 1)
    n = steps.allowed.shape[0]
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    np.testing.assert_array_equal(steps.allowed, (j <= i) & (j > i - 3))
    assert steps.max_abs_diff < 1e-5


def test_qkv_minilm_all_heads(minilm):
    worst = _all_heads(minilm, "Kedi fareyi kovaladı")
    assert worst < 1e-5
    steps = qkv.qkv_steps(minilm, "Kedi fareyi kovaladı", layer=2, head=5)
    assert steps.head_dim == 32 and steps.scaling == pytest.approx(32 ** -0.5)
    assert not steps.rope and steps.kv_heads == steps.heads == 12
    assert "query" in steps.source


def test_qkv_smollm2_all_heads(smollm2):
    worst = _all_heads(smollm2, "Kedi fareyi kovaladı")
    assert worst < 1e-5
    steps = qkv.qkv_steps(smollm2, "Kedi fareyi kovaladı", layer=4, head=7)
    assert steps.rope and steps.head_dim == 64
    assert (steps.heads, steps.kv_heads, steps.kv_head) == (9, 3, 2)
    assert not steps.allowed[0, 1] and steps.allowed[-1].all()  # causal


def test_qkv_errors(tiny):
    with pytest.raises(models.UnsupportedOperationError, match="fallback"):
        layer_input.layer_capture(tiny("gpt_neo"), SENTENCE)
    llama = tiny("llama")
    with pytest.raises(models.InvalidHeadError):
        layer_input.layer_capture(llama, SENTENCE, layer=7)
    lc = layer_input.layer_capture(llama, SENTENCE, layer=0)
    with pytest.raises(models.InvalidHeadError):
        qkv.head_steps(llama, lc, 4)
    with pytest.raises(models.UnsupportedOperationError, match="cross"):
        layer_input.layer_capture(llama, SENTENCE, stack="cross")
    with pytest.raises(models.EmptyTextError):
        layer_input.layer_capture(llama, "   ")


def test_hooks_do_not_change_outputs(tiny):
    """The input hooks only record inside layer_capture: other calls stay bit-identical (C07 kind)."""
    loaded = tiny("gpt2")
    before = models.analyze(loaded, SENTENCE)
    layer_input.layer_capture(loaded, SENTENCE, layer=0)
    after = models.analyze(loaded, SENTENCE)
    np.testing.assert_array_equal(before.attentions["decoder"], after.attentions["decoder"])
    np.testing.assert_array_equal(before.next_token.probs, after.next_token.probs)


def test_softmax_row_temperature_and_entropy():
    scores = np.array([2.0, 1.0, 0.0, -1.0])
    allowed = np.array([True, True, True, False])
    w = qkv.softmax_row(scores, allowed)
    e = np.exp([2.0, 1.0, 0.0])
    np.testing.assert_allclose(w, np.append(e / e.sum(), 0.0))
    sharp = qkv.softmax_row(scores, allowed, temperature=0.1)
    flat = qkv.softmax_row(scores, allowed, temperature=10.0)
    assert qkv.entropy(sharp) < qkv.entropy(w) < qkv.entropy(flat) < math.log(3)
    uniform = qkv.softmax_row(np.zeros(4))
    assert qkv.entropy(uniform) == pytest.approx(math.log(4))
    assert qkv.entropy(uniform, base=2) == pytest.approx(2.0)
    assert qkv.softmax_row(scores, np.zeros(4, bool)).sum() == 0
    with pytest.raises(ValueError):
        qkv.softmax_row(scores, temperature=0)


# ---- positions -----------------------------------------------------------------------------------------


def test_rope_check_on_smollm2(smollm2):
    """Su et al. 2021, eq. 16, on the loaded model's own rotary embedding."""
    rot = positions.rotary_module(smollm2)
    assert rot is not None and positions.position_kind(smollm2) == "rope"
    theta = positions.rope_theta(smollm2)
    assert theta == 100000.0
    d = positions.head_dim_of(smollm2)
    np.testing.assert_allclose(rot.inv_freq.cpu().numpy(), 1.0 / theta ** (np.arange(0, d, 2) / d), rtol=1e-5)
    for m, n, t in [(2, 5, 7), (0, 10, 100), (30, 3, 250)]:
        check = positions.rope_shift_check(smollm2, m, n, t)
        assert check.abs_diff <= 1e-5 * max(1.0, abs(check.dot)), check
        assert abs(check.dot - check.dot_unrotated) > 1e-3  # the rotation did something
    # A different distance gives a different dot product.
    a = positions.rope_shift_check(smollm2, 2, 5, 0)
    b = positions.rope_shift_check(smollm2, 2, 9, 0)
    assert abs(a.dot - b.dot) > 1e-3


def test_rope_tables_match_forward_pass(tiny):
    """The tables rope_tables returns are those the attention layers received in the forward pass."""
    loaded = tiny("llama")
    lc = layer_input.layer_capture(loaded, SENTENCE, layer=0)
    n = lc.cos.shape[0]
    cos, sin = positions.rope_tables(loaded, range(n))
    np.testing.assert_allclose(cos.numpy(), lc.cos.numpy(), atol=1e-6)
    np.testing.assert_allclose(sin.numpy(), lc.sin.numpy(), atol=1e-6)


def test_rope_is_found_by_what_it_computes(tiny):
    """Gemma 3's rotary module has no ``inv_freq`` (one table per layer type, ``full_attention_inv_freq``
    ...) and takes the layer type as an argument: it is found all the same, and each layer receives the
    table of its own type in the forward pass (the sliding layer θ = 10,000, the full layer its own θ)."""
    loaded = tiny("gemma3")
    assert positions.position_kind(loaded) == "rope"
    thetas = positions.rope_layer_types(loaded)
    assert set(thetas) == {"full_attention", "sliding_attention"}
    assert thetas["sliding_attention"] == 10000.0 and thetas["full_attention"] == positions.rope_theta(loaded)
    kinds = loaded.text_config.layer_types
    for layer, kind in enumerate(kinds):
        lc = layer_input.layer_capture(loaded, SENTENCE, layer=layer)
        n = lc.cos.shape[0]
        cos, sin = find_rotary(loaded).tables(range(n), loaded.device, kind)
        np.testing.assert_allclose(cos.numpy(), lc.cos.numpy(), atol=1e-6)
        np.testing.assert_allclose(sin.numpy(), lc.sin.numpy(), atol=1e-6)
    # the page's angles are the full-attention table's own frequencies: θ^(-2i/d)
    d = positions.head_dim_of(loaded)
    angles = positions.rope_angles(loaded, 3, head_dim=d)
    np.testing.assert_allclose(angles[1], 1.0 / thetas["full_attention"] ** (np.arange(0, d, 2) / d), rtol=1e-5)
    np.testing.assert_allclose(angles[2], 2 * angles[1], rtol=1e-5)
    assert positions.position_kind(tiny("gpt2")) == "learned" and positions.rope_layer_types(tiny("llama")) == {}


def test_rope_grid_is_toeplitz(smollm2):
    grid = positions.rope_dot_grid(smollm2, 24)
    np.testing.assert_allclose(grid[1:, 1:], grid[:-1, :-1], atol=1e-4)
    assert np.ptp(grid[0]) > 1e-2  # but it does change with the distance
    textbook = positions.rope_dot_grid(None, 16, head_dim=32)
    np.testing.assert_allclose(textbook[1:, 1:], textbook[:-1, :-1], atol=1e-4)
    with pytest.raises(models.UnsupportedOperationError):
        positions.rope_tables(models.load("minilm-l6", device="cpu"), [0, 1])


def test_sinusoidal_encoding_by_hand():
    pe = positions.sinusoidal_encoding(50, 16)
    assert pe.shape == (50, 16) and pe.dtype == np.float32
    pos, i = 7, 3
    assert pe[pos, 2 * i] == pytest.approx(math.sin(pos / 10000 ** (2 * i / 16)), abs=1e-6)
    assert pe[pos, 2 * i + 1] == pytest.approx(math.cos(pos / 10000 ** (2 * i / 16)), abs=1e-6)
    np.testing.assert_allclose(pe[0, 0::2], 0.0)
    np.testing.assert_allclose(pe[0, 1::2], 1.0)


def test_alibi_slopes_and_bias():
    np.testing.assert_allclose(positions.alibi_slopes(8), [2.0 ** -k for k in range(1, 9)])
    s16 = positions.alibi_slopes(16)
    np.testing.assert_allclose(s16, [2.0 ** (-k / 2) for k in range(1, 17)])
    s12 = positions.alibi_slopes(12)
    np.testing.assert_allclose(s12, list(positions.alibi_slopes(8)) + list(s16[0::2][:4]))
    bias = positions.alibi_bias(5, 0.25)
    assert bias[3, 1] == pytest.approx(-0.5) and bias[4, 4] == 0 and np.isnan(bias[1, 3])
    sym = positions.alibi_bias(5, 0.25, causal=False)
    assert sym[1, 3] == pytest.approx(-0.5)


def test_word_attention_by_hand():
    words = [models.Word("ab", 0, 2, 0, (1, 2)), models.Word("c", 3, 4, 0, (3,))]
    attn = np.zeros((4, 4))
    attn[1] = [0.1, 0.2, 0.3, 0.4]
    attn[2] = [0.0, 0.5, 0.1, 0.4]
    attn[3] = [0.2, 0.2, 0.2, 0.4]
    w = positions.word_attention(attn, words, words)
    # row "ab": mean over its pieces of (sum over key pieces)
    assert w[0, 0] == pytest.approx(((0.2 + 0.3) + (0.5 + 0.1)) / 2)
    assert w[0, 1] == pytest.approx((0.4 + 0.4) / 2)
    assert w[1, 0] == pytest.approx(0.4) and w[1, 1] == pytest.approx(0.4)


def test_word_order_experiment(minilm, tiny):
    wo = positions.word_order_experiment(minilm)
    assert wo.words == ["Kedi", "fareyi", "kovaladı"]
    assert wo.order_b == [1, 0, 2]
    layers, heads = minilm.stacks["encoder"]
    assert wo.attn_a.shape == (layers, heads, 3, 3)
    raw_b = positions.word_attention(wo.analysis_b.attentions["encoder"], wo.analysis_b.words, wo.analysis_b.words)
    # B's "kedi" is its word 1; in A's order it is row/column 0.
    assert wo.attn_b[2, 3, 0, 1] == pytest.approx(raw_b[2, 3, 1, 0])
    np.testing.assert_allclose(wo.diff, wo.attn_a - wo.attn_b)
    assert np.abs(wo.diff).max() > 1e-3  # positions matter to a BERT model
    with pytest.raises(models.WordMismatchError):
        positions.word_order_experiment(minilm, "Kedi fareyi kovaladı", "Köpek fareyi kovaladı")
    # Turkish casing: "IŞIK" and "ışık" are the same word.
    positions.word_order_experiment(tiny("bert"), "kedi ışık", "IŞIK kedi")


# ---- cost -----------------------------------------------------------------------------------------------------


def test_attention_matrix_sizes():
    assert cost.attention_matrix_size(1_000) == (10**6, 4 * 10**6)
    assert cost.attention_matrix_size(100_000)[0] == 10**10
    assert cost.attention_matrix_size(1_000_000)[0] == 10**12
    assert cost.attention_matrix_size(1_000, bytes_per_value=2, layers=30, heads=9)[1] == 2 * 270 * 10**6


def test_default_twin_shares_weights_and_agrees(tiny):
    loaded = tiny("llama")
    twin = cost.default_twin(loaded)
    assert twin.config._attn_implementation == "sdpa"
    assert loaded.model.config._attn_implementation == "dikkat"
    assert twin.model.embed_tokens.weight.data_ptr() == loaded.model.model.embed_tokens.weight.data_ptr()
    ids = torch.tensor([[5, 20, 30, 40, 50, 60]])
    with torch.no_grad():
        np.testing.assert_allclose(twin(ids).logits.numpy(), loaded.model(ids).logits.numpy(), atol=1e-4)
    assert cost.default_twin(loaded) is twin


def test_measure_cost_tiny(tiny):
    loaded = tiny("bert")  # 2 layers x 4 heads, limit 64 tokens
    seen = []
    points = cost.measure_cost(loaded, [8, 16, 1000], repeats=1, on_point=lambda p, d, t: seen.append((d, t)))
    assert [(p.n, p.implementation) for p in points] == [(8, "sdpa"), (8, "captured"), (16, "sdpa"), (16, "captured")]
    assert seen == [(1, 4), (2, 4), (3, 4), (4, 4)]
    for p in points:
        assert p.seconds > 0 and p.memory_method == "tensor-tracking"
        assert p.threads == torch.get_num_threads() >= 1  # shown under the cost page's figures
        if p.implementation == "captured":
            assert p.recorded_bytes == 2 * 4 * p.n * p.n * 4
            assert p.peak_bytes >= p.recorded_bytes
        else:
            assert p.recorded_bytes == 0 and p.peak_bytes > 0
    calls = iter([False, True])
    stopped = cost.measure_cost(loaded, [8, 16], repeats=1, should_stop=lambda: next(calls))
    assert len(stopped) == 1


def test_peak_tensor_memory_counts_new_tensors():
    weight = torch.ones(1000)
    with cost._PeakTensorMemory() as tracker:
        a = weight * 2  # 4000 bytes
        b = a + 1  # 4000 more while a is alive
        view = b[:10]  # a view: no new memory
        del a
        c = b * 3  # a was freed: peak stays 8000
        del view, b, c
    assert tracker.peak == 8000
    assert tracker.current == 0


def test_quadratic_reference():
    ref = cost.quadratic_reference([16, 32, 64], 64, 2.0)
    np.testing.assert_allclose(ref, [0.125, 0.5, 2.0])


# ---- KV cache -------------------------------------------------------------------------------------------------


def test_kv_cache_llama3_8b_by_hand():
    cfg = kv_layout.KV_PRESETS["Llama 3 8B"]
    assert (cfg.layers, cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.bytes_per_value) == (32, 32, 8, 128, 2)
    assert kv_layout.kv_cache_bytes(cfg) == 2 * 32 * 8 * 128 * 2 == 131_072
    assert kv_layout.kv_cache_bytes(cfg, 131_072) == 16 * 2**30
    assert kv_layout.kv_cache_bytes(cfg, 131_072, gqa=False) == 64 * 2**30


def test_kv_layout_from_models(smollm2, minilm):
    cfg = kv_layout.kv_layout(smollm2)
    assert (cfg.layers, cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.bytes_per_value) == (30, 9, 3, 64, 4)
    assert kv_layout.kv_cache_bytes(cfg) == 2 * 30 * 3 * 64 * 4
    assert kv_layout.kv_cache_bytes(cfg, gqa=False) == 3 * kv_layout.kv_cache_bytes(cfg)
    enc = kv_layout.kv_layout(minilm, bytes_per_value=2)
    assert (enc.layers, enc.heads, enc.kv_heads, enc.head_dim) == (6, 12, 12, 32)


def test_generation_with_and_without_cache_same_tokens(smollm2):
    with_cache, without = kvcache.compare_generation(smollm2, "The cat chased the mouse", max_new_tokens=10)
    assert with_cache.use_cache and not without.use_cache
    assert len(with_cache.tokens) == 10
    assert with_cache.tokens == without.tokens
    assert with_cache.text == without.text and with_cache.text.strip()
    assert with_cache.tokens_per_second > 0 and without.tokens_per_second > 0


def test_generation_errors(minilm, tiny):
    with pytest.raises(models.UnsupportedOperationError):
        kvcache.compare_generation(minilm, "Kedi")
    with pytest.raises(models.EmptyTextError):
        kvcache.compare_generation(tiny("llama"), "  ")


def test_kv_cache_with_sliding_window_by_hand(tiny):
    """A sliding-window layer caches at most w tokens (Mistral's rolling buffer): Mistral 7B at 128K keeps
    4096 tokens on every layer; on tiny Gemma 3 (layer 0 sliding with w=2, layer 1 full) only layer 1
    grows; a smollm2-like model without a window is unchanged."""
    mistral = kv_layout.KV_PRESETS["Mistral 7B"]
    per_token = 2 * 32 * 8 * 128 * 2
    assert kv_layout.kv_cache_bytes(mistral, 131_072) == per_token * 131_072
    assert kv_layout.kv_cache_bytes(mistral, 131_072, window=True) == per_token * 4096
    assert kv_layout.kv_cache_bytes(mistral, 1000, window=True) == per_token * 1000
    gemma = kv_layout.kv_layout(tiny("gemma3"))
    assert (gemma.sliding_window, gemma.sliding_layers, gemma.layers) == (2, 1, 2)
    per_layer = 2 * gemma.kv_heads * gemma.head_dim * 4
    assert kv_layout.kv_cache_bytes(gemma, 10, window=True) == per_layer * (10 + 2)
    mis = kv_layout.kv_layout(tiny("mistral"))
    assert (mis.sliding_window, mis.sliding_layers) == (3, None)
    assert kv_layout.kv_cache_bytes(mis, 10, window=True) == 2 * mis.kv_heads * mis.head_dim * 4 * 2 * 3
    llama = kv_layout.kv_layout(tiny("llama"))
    assert llama.sliding_window is None
    assert kv_layout.kv_cache_bytes(llama, 10, window=True) == kv_layout.kv_cache_bytes(llama, 10)


def test_the_lessons_word_level_is_the_pages_word_level():
    """models.lessons.positions.word_attention (the engine's own, models/ imports no viz/) gives exactly what the
    pages' word level gives (viz.transforms.merge_words: sum over key pieces, mean over query pieces)."""
    import numpy as np

    from models.analysis.tokens import Word
    from viz.transforms import merge_words

    rng = np.random.default_rng(0)
    attn = rng.random((3, 7, 7)).astype(np.float32)
    attn /= attn.sum(-1, keepdims=True)
    words = [Word("a", 0, 1, 0, (1, 2)), Word("b", 2, 3, 0, (3,)), Word("c", 4, 5, 0, (4, 5, 6))]
    got = positions.word_attention(attn, words, words)
    np.testing.assert_array_equal(got, merge_words(attn, [w.tokens for w in words], [w.tokens for w in words]))
    assert got.shape == (3, 3, 3) and got.dtype == np.float32
