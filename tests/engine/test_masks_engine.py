"""Masks on tiny random models: replaced masks match the models' own variants, bands are exact, empty
rows stay finite, cross-attention has the right shape; plus KL / cosine drift / GQA arithmetic."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import models
from models.analysis import compare, kv_layout
from models.analysis.masks import MaskMode

TEXT = "kedi fareyi kovaladı . the cat chased a mouse"


def _reference(folder, cls_name: str, **config_kwargs):
    """The same saved weights loaded straight through transformers (eager, no Dikkat capture)."""
    import transformers as tf

    config = tf.AutoConfig.from_pretrained(str(folder))
    for key, value in config_kwargs.items():
        setattr(config, key, value)
    return getattr(tf, cls_name).from_pretrained(str(folder), config=config, attn_implementation="eager").eval()


def test_gpt2_bidirectional_equals_is_causal_false(tiny, tiny_folder):
    """GPT-2 with Dikkat's bidirectional mask == GPT-2 whose config says ``is_causal=False`` (transformers'
    ``create_causal_mask`` then builds a bidirectional mask)."""
    loaded = tiny("gpt2")
    a = models.analyze(loaded, TEXT, mask="bidirectional", keep_logits=True)
    ref = _reference(tiny_folder("gpt2"), "GPT2LMHeadModel", is_causal=False)
    ids = torch.tensor([[t.id for t in a.tokens]])
    with torch.no_grad():
        out = ref(input_ids=ids, output_attentions=True)
    np.testing.assert_allclose(a.logits, out.logits[0].numpy(), atol=1e-5)
    ref_att = torch.stack([w[0] for w in out.attentions]).numpy()
    np.testing.assert_allclose(a.attentions["decoder"], ref_att, atol=1e-6)
    # and it really is non-causal: weight above the diagonal, unlike the native run
    n = len(a.tokens)
    upper = np.triu(np.ones((n, n), bool), 1)
    assert a.attentions["decoder"][..., upper].max() > 1e-3
    native = models.analyze(loaded, TEXT, keep_logits=True)
    assert native.attentions["decoder"][..., upper].max() == 0.0
    assert not np.allclose(native.logits, a.logits, atol=1e-3)


def test_bert_causal_equals_is_decoder(tiny, tiny_folder):
    """BERT with the causal mask: zero weight above the diagonal, and the same hidden states and weights
    as ``BertConfig(is_decoder=True)`` (which builds a causal mask)."""
    loaded = tiny("bert")
    a = models.analyze(loaded, TEXT, mask="causal", hidden_states=True)
    att = a.attentions["encoder"]
    n = att.shape[-1]
    upper = np.triu(np.ones((n, n), bool), 1)
    assert np.all(att[..., upper] == 0.0)
    np.testing.assert_allclose(att.sum(-1), 1.0, atol=1e-5)
    ref = _reference(tiny_folder("bert"), "BertModel", is_decoder=True)
    ids = torch.tensor([[t.id for t in a.tokens]])
    with torch.no_grad():
        out = ref(input_ids=ids, output_attentions=True, output_hidden_states=True, use_cache=False)
    np.testing.assert_allclose(att, torch.stack([w[0] for w in out.attentions]).numpy(), atol=1e-6)
    np.testing.assert_allclose(a.hidden_states["encoder"], torch.stack([h[0] for h in out.hidden_states]).numpy(),
                               atol=1e-5)
    native = models.analyze(loaded, TEXT)
    assert native.attentions["encoder"][..., upper].min() > 0.0  # bidirectional natively


@pytest.mark.parametrize("arch,w", [("gpt2", 1), ("gpt2", 3), ("bert", 2), ("llama", 4)])
def test_sliding_window_band_exact(tiny, arch, w):
    """Sliding window of width w: non-zero exactly where i - w < j <= i, for every layer and head."""
    loaded = tiny(arch)
    a = models.analyze(loaded, TEXT, mask=f"sliding_window:{w}")
    att = next(iter(a.attentions.values()))
    n = att.shape[-1]
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    band = (j <= i) & (j > i - w)
    assert np.array_equal(att != 0.0, np.broadcast_to(band, att.shape))
    np.testing.assert_allclose(att.sum(-1), 1.0, atol=1e-5)


def test_strided_pattern_exact(tiny):
    """Strided sparse mask (Child et al. 2019) of stride 3: non-zero exactly on its pattern."""
    a = models.analyze(tiny("gpt2"), TEXT, mask="strided:3")
    att = a.attentions["decoder"]
    d = np.arange(att.shape[-1])[:, None] - np.arange(att.shape[-1])[None, :]
    pattern = (d >= 0) & ((d < 3) | (d % 3 == 0))
    assert np.array_equal(att != 0.0, np.broadcast_to(pattern, att.shape))


@pytest.mark.parametrize("arch", ["gpt2", "bert", "llama"])
def test_custom_mask_empty_row_finite(tiny, arch):
    """A custom mask with an empty row: every output finite, the empty row's weights all zero."""
    loaded = tiny(arch)
    n = len(models.analyze(loaded, TEXT).tokens)
    m = MaskMode("causal").matrix(n).copy()
    m[2, :] = False
    m[0, :] = False
    cmp = compare.compare_masks(loaded, TEXT, [m])
    run = cmp.runs[0]
    att = next(iter(run.analysis.attentions.values()))
    assert np.isfinite(att).all()
    assert np.all(att[:, :, [0, 2], :] == 0.0)
    np.testing.assert_allclose(np.delete(att, [0, 2], axis=2).sum(-1), 1.0, atol=1e-5)
    assert list(np.flatnonzero(run.empty_rows)) == [0, 2]
    for hs in run.analysis.hidden_states.values():
        assert np.isfinite(hs).all()
    assert np.isfinite(run.drift).all()
    if run.analysis.logits is not None:
        assert np.isfinite(run.analysis.logits).all()
        assert np.isfinite(run.kl).all()
        assert run.kl[2] > 0  # position 2 lost its context: its prediction changed


@pytest.mark.parametrize("arch", ["marian", "t5", "bart"])
def test_cross_attention_shape_and_rows(tiny, arch):
    """Cross-attention of Marian/T5/BART: (layers, heads, target_len, source_len), rows sum to 1."""
    loaded = tiny(arch)
    a = models.analyze(loaded, "kedi fareyi kovaladı", target="the cat chased a mouse and a cat")
    cross = a.attentions["cross"]
    layers, heads = loaded.stacks["cross"]
    assert cross.shape == (layers, heads, len(a.target_tokens), len(a.tokens))
    assert len(a.target_tokens) != len(a.tokens)  # the shape test means something
    np.testing.assert_allclose(cross.sum(-1), 1.0, atol=1e-5)
    dec = a.attentions["decoder"]
    n = dec.shape[-1]
    assert np.all(dec[..., np.triu(np.ones((n, n), bool), 1)] == 0.0)  # decoder self-attention is causal


def test_native_mask_matches_model(tiny):
    """native_mask: bidirectional for encoders, causal for GPT-2, Mistral's sliding window (3), Gemma 3's
    sliding (2) then full layer - each equal to where the model's own attention is non-zero and to the mask
    the layer was actually called with (``Analysis.masks``)."""
    for arch in ("bert", "gpt2", "mistral", "gemma3"):
        loaded = tiny(arch)
        a = models.analyze(loaded, TEXT)
        (stack, att), = a.attentions.items()
        n = att.shape[-1]
        assert a.masks[stack].shape == (att.shape[0], n, n) and a.masks[stack].dtype == bool
        for layer in range(att.shape[0]):
            native = compare.native_mask(loaded, n, layer)
            assert np.array_equal(native, (att[layer] != 0).any(0)), (arch, layer)
            assert np.array_equal(native, a.masks[stack][layer]), (arch, layer)
    n = 6
    assert compare.native_mask(tiny("mistral"), n)[5].sum() == 3
    gemma = models.analyze(tiny("gemma3"), TEXT).masks["decoder"]
    assert gemma[0].sum(1).max() == 2 and np.array_equal(gemma[1], np.tril(np.ones(gemma.shape[1:], bool)))


@pytest.mark.parametrize("arch", ["gpt2", "bert", "gemma3", "marian"])
def test_recorded_masks_are_the_replacement_and_cross_attention_sees_every_source_token(tiny, arch):
    """With a replaced mask every layer of the main stack records that mask (an empty row stays empty);
    cross-attention records all-True (each target token may read every source token)."""
    loaded = tiny(arch)
    kw = {"target": "the cat chased"} if loaded.family == "encoder-decoder" else {}
    n = len(models.analyze(loaded, TEXT, **kw).tokens if loaded.family != "encoder-decoder"
            else models.analyze(loaded, TEXT, **kw).target_tokens)
    m = MaskMode("sliding_window", width=2).matrix(n).copy()
    m[1, :] = False
    a = models.analyze(loaded, TEXT, mask=m, **kw)
    stack = loaded.mask_stack
    assert np.array_equal(a.masks[stack], np.broadcast_to(m, a.masks[stack].shape))
    assert np.array_equal(a.attentions[stack] != 0, np.broadcast_to(m, a.attentions[stack].shape))
    if "cross" in a.masks:
        assert a.masks["cross"].all() and a.masks["cross"].shape == (2, n, len(a.tokens))


def test_fallback_path_records_no_masks(tiny):
    a = models.analyze(tiny("gpt_neo"), TEXT)
    assert a.capture_path == "fallback" and a.masks == {}


def test_kl_is_zero_for_native_equivalent_and_matches_formula(tiny):
    """Causal on a causal decoder changes nothing (KL exactly 0, drift 0); bidirectional gives KL > 0 that
    matches a direct torch computation of KL(P_native || P_mask)."""
    loaded = tiny("gpt2")
    cmp = compare.compare_masks(loaded, TEXT, ["causal", "bidirectional"])
    causal, bidi = cmp.runs
    assert np.all(causal.kl == 0.0) and np.all(causal.drift < 1e-9)
    p = torch.log_softmax(torch.tensor(cmp.native.logits, dtype=torch.float64), -1)
    q = torch.log_softmax(torch.tensor(bidi.analysis.logits, dtype=torch.float64), -1)
    expected = torch.nn.functional.kl_div(q, p, log_target=True, reduction="none").sum(-1).numpy()
    np.testing.assert_allclose(bidi.kl, expected, rtol=1e-9, atol=1e-12)
    assert bidi.kl[:-1].min() > 0  # every position but the last sees its future


def test_cosine_drift_encoder(tiny):
    """Encoders: the causal mask drifts hidden states (layer 0 = embeddings has none); the last token,
    which sees everything under both masks, drifts only from layer 2 on (via other tokens' states)."""
    cmp = compare.compare_masks(tiny("bert"), TEXT, ["causal", "bidirectional"])
    causal, bidi = cmp.runs
    assert bidi.drift.max() < 1e-9  # bidirectional is BERT's own mask
    assert causal.drift[0].max() < 1e-12  # embeddings: before any attention
    assert causal.layer_drift[1] > 1e-4 and causal.layer_drift[-1] > 1e-4
    assert causal.drift[1, -1] < 1e-9  # layer 1: the last query sees all keys, whose values are unchanged


def test_cosine_drift_formula():
    a = np.array([[[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]]])
    b = np.array([[[0.0, 2.0], [0.0, 0.0], [-1.0, -1.0]]])
    np.testing.assert_allclose(compare.cosine_drift(a, b), [[1.0, 0.0, 2.0]])
    np.testing.assert_allclose(compare.cosine_drift(a, np.zeros_like(a)), [[1.0, 0.0, 1.0]])


def test_gqa_groups_and_kv_bytes(tiny, smollm2):
    """SmolLM2: 9 query heads over 3 key/value heads; KV cache 2 x 30 x 3 x 64 x 2 bytes per token in bf16."""
    layout = kv_layout.kv_layout(smollm2)
    assert (layout.layers, layout.heads, layout.kv_heads, layout.head_dim) == (30, 9, 3, 64)
    assert layout.groups == [(0, 1, 2), (3, 4, 5), (6, 7, 8)]
    assert layout.bytes_per_token(2) == 2 * 30 * 3 * 64 * 2 == 23040
    assert layout.bytes_per_token(2, sharing=False) == 3 * 23040
    tiny_layout = kv_layout.kv_layout(tiny("llama"))
    assert tiny_layout.groups == [(0, 1), (2, 3)] and tiny_layout.head_dim == 8
    with pytest.raises(ValueError):
        kv_layout.kv_groups(9, 2)


def test_gqa_groups_match_repeat_kv(tiny):
    """The grouping is the one the model computes with: query heads in one group see the same keys, so
    replacing the query weights of group members by one another's gives identical attention maps."""
    loaded = tiny("llama")
    attn = loaded.model.model.layers[0].self_attn
    layout = kv_layout.kv_layout(loaded)
    d = layout.head_dim
    original = attn.q_proj.weight.detach().clone()
    try:
        with torch.no_grad():
            for group in layout.groups:  # every query head of a group gets the first member's query weights
                for h in group:
                    attn.q_proj.weight[h * d:(h + 1) * d] = original[group[0] * d:(group[0] + 1) * d]
        att = models.analyze(loaded, TEXT).attentions["decoder"][0]
    finally:
        with torch.no_grad():
            attn.q_proj.weight.copy_(original)
    for group in layout.groups:
        for h in group[1:]:
            np.testing.assert_array_equal(att[h], att[group[0]])
    assert not np.allclose(att[layout.groups[0][0]], att[layout.groups[1][0]])


def test_applied_mask_reads_the_recorded_mask_and_falls_back_to_the_config(tiny):
    """The masks page draws the mask each layer was called with; a recorded mask wins over the config."""
    loaded = tiny("gemma3")
    a = models.analyze(loaded, TEXT)
    assert np.array_equal(compare.applied_mask(loaded, a, 0), a.masks["decoder"][0])
    forged = models.analysis.Analysis(**{**a.__dict__, "masks": {"decoder": ~a.masks["decoder"]}})
    assert np.array_equal(compare.applied_mask(loaded, forged, 1), ~a.masks["decoder"][1])
    neo = tiny("gpt_neo")
    b = models.analyze(neo, TEXT)
    n = b.attentions["decoder"].shape[-1]
    assert np.array_equal(compare.applied_mask(neo, b, 0), np.tril(np.ones((n, n), bool)))


@pytest.mark.parametrize("mask", ["strided:-1", "sliding_window:-3", "sliding_window:1.5", "strided:x",
                                  ("strided", "x"), ("sliding_window", 2.5), ("strided", -1), "sliding_window:0"])
def test_bad_mask_width_says_what_is_wrong(mask):
    """'strided:-1' said "Unknown mask 'strided:-1'. Use one of: ..., strided, ..." (strided is listed);
    ('strided', 'x') raised a bare ValueError from int(); ('sliding_window', 2.5) silently became 2."""
    kind = mask[0] if isinstance(mask, tuple) else mask.split(":")[0]
    with pytest.raises(models.InvalidMaskError, match=f"Mask '{kind}' needs a width of at least 1"):
        models.parse_mask(mask)


@pytest.mark.parametrize("mask", ["causal:3", "native:2", "bidirectional:1"])
def test_width_on_a_mask_without_one_is_an_error(mask):
    with pytest.raises(models.InvalidMaskError, match="takes no width"):
        models.parse_mask(mask)


def test_width_longer_than_the_text_equals_causal(tiny):
    """A huge width raised OverflowError from numpy; any width >= n is the causal mask."""
    loaded = tiny("gpt2")
    causal = models.analyze(loaded, "kedi fare", mask="causal").attentions["decoder"]
    for mask in ("sliding_window:99999999999999999999", "strided:99999999999999999999", "sliding_window:" + "9" * 4300,
                 ("strided", 10 ** 40)):
        w = models.analyze(loaded, "kedi fare", mask=mask).attentions["decoder"]
        np.testing.assert_array_equal(w, causal)
    assert models.parse_mask("sliding_window:99999999999999999999").matrix(3).tolist() \
        == np.tril(np.ones((3, 3), bool)).tolist()


@pytest.mark.parametrize("arch,stack", [("bert", "decoder"), ("gpt2", "encoder"), ("gpt2", "bogus")])
def test_mask_for_a_stack_the_model_lacks_is_an_error(tiny, arch, stack):
    """{'decoder': 'causal'} on an encoder was silently ignored while Analysis.mask said 'decoder=causal'."""
    with pytest.raises(models.InvalidMaskError, match=f"has no '{stack}' stack"):
        models.analyze(tiny(arch), "kedi fare", mask={stack: "causal"})


def test_start_matrices_by_hand():
    """The custom-mask editor's starting points (models.masks.start_matrix), written out for n = 3."""
    from models.analysis import masks
    expect = {"causal": [[1, 0, 0], [1, 1, 0], [1, 1, 1]], "bidirectional": [[1] * 3] * 3,
              "diagonal": [[1, 0, 0], [0, 1, 0], [0, 0, 1]], "previous": [[0, 0, 0], [1, 0, 0], [0, 1, 0]],
              "empty": [[0] * 3] * 3}
    assert set(expect) == set(masks.STARTS)
    for kind, rows in expect.items():
        got = masks.start_matrix(kind, 3)
        assert got.dtype == bool and got.astype(int).tolist() == rows, kind
    assert masks.start_matrix("causal", 0).shape == (0, 0)
    with pytest.raises(models.InvalidMaskError, match="Unknown starting mask"):
        masks.start_matrix("sinks", 3)
    with pytest.raises(models.InvalidMaskError, match="whole number"):
        masks.start_matrix("causal", -1)


def test_sink_window_mask_by_hand(tiny):
    """StreamingLLM's "window + k sinks" (Xiao et al. 2023): j <= i and (i - j < w or j < k)."""
    m = models.parse_mask("sink_window:2,1")
    assert str(m) == "sink_window:2,1" and models.parse_mask(("sink_window", 2, 1)) == m
    assert models.parse_mask("streaming:8").sinks == 4  # StreamingLLM's four by default
    want = [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 0, 1, 1, 0], [1, 0, 0, 1, 1]]
    assert m.matrix(5).astype(int).tolist() == want
    assert models.parse_mask("sink_window:3,0").matrix(6).tolist() \
        == models.parse_mask("sliding_window:3").matrix(6).tolist()
    for bad in ("sink_window:2,-1", "sink_window:0,1", "sink_window:2,x", "causal:1,2", ("strided", 2, 1)):
        with pytest.raises(models.InvalidMaskError):
            models.parse_mask(bad)
    llama = tiny("llama")
    text = "kedi fareyi kovaladı . the cat chased the mouse"
    a = models.analyze(llama, text, mask="sink_window:2,1")
    b = models.analyze(llama, text, mask=m.matrix(len(a.tokens)))
    allowed = m.matrix(len(a.tokens))
    for layer in range(2):
        w = np.asarray(a.attentions["decoder"][layer])
        assert np.all(w[:, ~allowed] == 0)
        np.testing.assert_array_equal(w, np.asarray(b.attentions["decoder"][layer]))
    assert a.loss == b.loss
