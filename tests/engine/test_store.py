"""Attention on demand (issue 10): weights computed when indexed equal eager exactly, blocks of query rows
equal one eager call, statistics and overview maps accumulated block by block equal their whole-matrix
definitions, and nothing n² is held for a long input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers as tf

import models
from models import capture
from models.analysis import statistics as hstats, store
from viz import transforms as vt

INTERFACE = ["bert", "bert-mlm", "gpt2", "llama", "mistral", "gemma3", "t5", "marian", "bart"]
# ~40 tokens on the tiny word-level tokenizers: long enough for many blocks and for causal key ranges
LONG = "kedi fareyi kovaladı the cat chased the mouse dün a kedi " * 3


def _eager(tiny_folder, arch):
    cls = {
        "bert": tf.BertModel, "bert-mlm": tf.BertForMaskedLM, "gpt2": tf.GPT2LMHeadModel,
        "llama": tf.LlamaForCausalLM, "mistral": tf.MistralForCausalLM, "gemma3": tf.Gemma3ForCausalLM,
        "gpt_neo": tf.GPTNeoForCausalLM, "t5": tf.T5ForConditionalGeneration, "marian": tf.MarianMTModel,
        "bart": tf.BartForConditionalGeneration,
    }[arch]
    return cls.from_pretrained(str(tiny_folder(arch)), attn_implementation="eager").eval()


def _reference(tiny_folder, arch, a: models.Analysis) -> dict[str, np.ndarray]:
    ref = _eager(tiny_folder, arch)
    inputs = {"input_ids": torch.tensor([[t.id for t in a.tokens]])}
    if a.target_tokens is not None:
        inputs["decoder_input_ids"] = torch.tensor([[t.id for t in a.target_tokens]])
    with torch.no_grad():
        out = ref(**inputs, output_attentions=True)
    return attentions_of(out, a.family)


def attentions_of(out, family: str) -> dict[str, np.ndarray]:
    """``stack -> float32 (layers, heads, q, k)`` of a transformers output with ``output_attentions`` (batch 0)."""
    if family == "encoder-decoder":
        tensors = {"encoder": out.encoder_attentions, "decoder": out.decoder_attentions, "cross": out.cross_attentions}
    else:
        tensors = {"decoder" if family == "decoder" else "encoder": out.attentions}
    return {stack: torch.stack([t[0] for t in ts]).numpy() for stack, ts in tensors.items()}


@pytest.fixture
def blocks(monkeypatch):
    """Force blocks of 3 query rows (the tiny models' weights are far below the real block size)."""
    monkeypatch.setattr(capture.blocks, "MIN_ROWS", 1)
    monkeypatch.setattr(capture.state, "CHUNK_BYTES", 3 * 4 * 4 * 64)  # batch 1 x 4 heads x 3 rows x <=64 keys


@pytest.mark.parametrize("arch", INTERFACE + ["gpt_neo"])
def test_on_demand_weights_equal_eager_for_every_layer(tiny, tiny_folder, arch):
    loaded = tiny(arch)
    a = models.analyze(loaded, LONG, keep=False)
    kept = models.analyze(loaded, LONG, keep=True)
    want = _reference(tiny_folder, arch, a)
    assert set(a.attentions) == set(want)
    for stack, ref in want.items():
        lazy = a.attentions[stack]
        assert lazy.shape == ref.shape and lazy.dtype == np.float32
        assert lazy.on_demand == (arch != "gpt_neo")  # the fallback path returns every weight at once
        for layer in range(ref.shape[0]):
            got = lazy[layer]
            assert got.shape == ref.shape[1:]
            np.testing.assert_allclose(got, ref[layer], atol=1e-6, rtol=0)
            # recomputed weights are the very bits the analysis saw
            assert np.array_equal(got, kept.attentions[stack][layer])
            assert np.array_equal(lazy[layer, 1], got[1])
            last = got.shape[1] - 1
            assert np.array_equal(lazy[layer, 1, last - 1:], got[1, last - 1:])
            assert np.array_equal(lazy[layer, :, last], got[:, last])
        assert np.array_equal(np.asarray(lazy), np.asarray(kept.attentions[stack]))


@pytest.mark.parametrize("arch", INTERFACE)
def test_blocks_of_rows_equal_one_eager_call(tiny, tiny_folder, arch, blocks):
    loaded = tiny(arch)
    a = models.analyze(loaded, LONG, keep=False, keep_logits=loaded.head != "none", hidden_states=True)
    want = _reference(tiny_folder, arch, a)
    whole = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(capture.state, "CHUNK_BYTES", 0)
        one = models.analyze(loaded, LONG, keep_logits=loaded.head != "none", hidden_states=True)
        whole = {s: np.asarray(v) for s, v in one.attentions.items()}
    for stack, ref in want.items():
        got = np.asarray(a.attentions[stack])
        np.testing.assert_allclose(got, ref, atol=1e-6, rtol=0)
        np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-5)
        assert np.array_equal(got == 0, whole[stack] == 0)  # masked keys exactly 0, allowed ones not
    if one.logits is not None:
        np.testing.assert_allclose(a.logits, one.logits, atol=1e-5, rtol=1e-5)
    for stack in one.hidden_states:
        np.testing.assert_allclose(a.hidden_states[stack], one.hidden_states[stack], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ["bert", "llama", "gemma3", "t5"])
def test_statistics_and_overview_equal_their_whole_matrix_definitions(tiny, arch, blocks):
    a = models.analyze(tiny(arch), LONG)
    for stack, lazy in a.attentions.items():
        w = np.asarray(lazy)
        q_tokens, k_tokens = a.axis_tokens(stack)
        word_of = -np.ones(len(k_tokens), dtype=int)
        for i, word in enumerate(a.axis_words(stack)[1]):
            word_of[list(word.tokens)] = i
        want = vt.head_statistics(w, special=[x.special for x in k_tokens],
                                  punctuation=[vt.is_punctuation(x.text) and not x.special for x in k_tokens],
                                  word_of=word_of, self_attention=stack != "cross")
        for name in vt.STATISTICS:
            np.testing.assert_allclose(a.statistics[stack][name], want[name], atol=1e-5, rtol=1e-5, err_msg=name)
        np.testing.assert_allclose(a.overview[stack], vt.pool(w, 64), atol=1e-6)


def test_pooled_overview_from_blocks_equals_pool():
    rng = np.random.default_rng(0)
    w = rng.random((2, 3, 50, 70)).astype(np.float32)
    w[..., 40:] = 0  # keys after 40 masked in every row
    w /= w.sum(-1, keepdims=True)
    ov = hstats.Overview(2, 3, 50, 70, size=8)
    on_device = hstats.Overview(2, 3, 50, 70, size=8)
    for layer in range(2):
        for q0 in range(0, 50, 7):
            block = w[layer, :, q0:q0 + 7]
            k0 = 5 if q0 == 0 else 0  # a block may start after key 0: the keys before it weigh 0 there
            if k0:
                w[layer, :, q0:q0 + 7, :k0] = 0
                block = w[layer, :, q0:q0 + 7]
            ov.add(layer, q0, k0, torch.from_numpy(np.ascontiguousarray(block[..., k0:40])))
            on_device.add_on_device(layer, q0, k0, torch.from_numpy(np.ascontiguousarray(block[..., k0:40])))
    np.testing.assert_allclose(ov.result(), vt.pool(w, 8), atol=1e-6)
    np.testing.assert_allclose(on_device.result(), vt.pool(w, 8), atol=1e-6)  # the accelerator's way


def test_whole_stack_beyond_the_limit_raises_and_layers_still_work(tiny, monkeypatch):
    a = models.analyze(tiny("llama"), LONG, keep=False)
    lazy = a.attentions["decoder"]
    full = np.asarray(lazy)
    monkeypatch.setattr(store, "MATERIALIZE_BYTES", lazy.nbytes // 2)
    with pytest.raises(models.AttentionTooLargeError, match=r"ask for less"):
        np.asarray(lazy)
    with pytest.raises(models.AttentionTooLargeError):
        lazy.sum()
    assert isinstance(models.AttentionTooLargeError("x"), models.DikkatError)
    assert np.array_equal(lazy[1], full[1]) and np.array_equal(lazy[0, 2], full[0, 2])


def test_masks_are_stored_once_per_distinct_mask(tiny):
    gemma = models.analyze(tiny("gemma3"), LONG, keep=False).masks["decoder"]
    assert len(gemma.distinct) == 2 and gemma.index == [0, 1]  # sliding, then full
    n = gemma.shape[-1]
    i, j = np.indices((n, n))
    assert np.array_equal(gemma[0], (j <= i) & (j > i - 2)) and np.array_equal(gemma[1], j <= i)
    llama = models.analyze(tiny("llama"), LONG, mask="sliding_window:4").masks["decoder"]
    assert len(llama.distinct) == 1 and llama.shape == (2, n, n)
    assert np.array_equal(np.asarray(llama)[1], (j <= i) & (j > i - 4))


def test_lm_head_in_blocks_gives_the_same_predictions_and_loss(tiny, monkeypatch):
    from models.analysis import outputs

    loaded = tiny("llama")
    whole = models.analyze(loaded, LONG)
    monkeypatch.setattr(outputs, "LOGITS_BYTES", 4 * 320 * 5)  # blocks of positions
    parts = models.analyze(loaded, LONG)
    assert np.array_equal(parts.next_token.ids, whole.next_token.ids)
    np.testing.assert_allclose(parts.next_token.probs, whole.next_token.probs, atol=1e-6)
    assert parts.next_token.tokens == whole.next_token.tokens
    assert parts.loss == pytest.approx(whole.loss, rel=1e-6)


def test_indexing_an_on_demand_stack_follows_numpy(tiny):
    loaded = tiny("llama")
    lazy = models.analyze(loaded, LONG, keep=False).attentions["decoder"]
    full = np.asarray(models.analyze(loaded, LONG, keep=True).attentions["decoder"])
    keys = [1, -1, (0,), (1, 2), (0, 2, 5), (0, -1, slice(3, 9)), (0, 2, [1, 3]), (0, 2, Ellipsis),
            (0, 2, slice(None, None, 2)), (0, 1, None), (1, slice(0, 2), [0, 1]), (0, slice(None), slice(0, 5), [1, 3]),
            (0, [0, 3]), (1, Ellipsis, 4), (0, 1, 2, 3), (slice(None), 0), (Ellipsis, 0, 0), (np.int64(1), np.int64(3))]
    for key in keys:
        got, want = lazy[key], full[key]
        assert got.shape == want.shape and np.array_equal(got, want), key
    with pytest.raises(IndexError):
        lazy[0, 99]
    with pytest.raises(IndexError):
        lazy[5]
    masks = models.analyze(tiny("gemma3"), LONG, keep=False).masks["decoder"]
    whole = np.asarray(masks)
    for key in [0, 1, (0, 3), (1, slice(None), [1, 2]), (0, Ellipsis, 2), (slice(None), 0)]:
        assert np.array_equal(masks[key], whole[key]), key
    with pytest.raises(ValueError):
        masks[0][0, 0] = True  # shared by every layer called with it: read-only


def test_concurrent_long_analyses_keep_their_own_hidden_states(tiny, monkeypatch):
    """Blocked logits read this call's final hidden states only, though the model is shared by threads."""
    import threading

    from models.analysis import outputs

    loaded = tiny("llama")
    texts = [LONG, "the cat chased the mouse " * 8, "dün kedi fare " * 10, "a " * 30]
    want = [models.analyze(loaded, t) for t in texts]
    monkeypatch.setattr(outputs, "LOGITS_BYTES", 4 * 320 * 3)
    got: dict[int, models.Analysis] = {}
    errors = []

    def run(i):
        try:
            for _ in range(3):
                got[i] = models.analyze(loaded, texts[i])
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(texts))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    for i, w in enumerate(want):
        assert np.array_equal(got[i].next_token.ids, w.next_token.ids) \
            and got[i].loss == pytest.approx(w.loss, rel=1e-6)


@pytest.mark.parametrize("arch", ["bert-mlm", "llama", "gemma3", "t5", "bart"])
def test_layers_nobody_reads_run_the_fused_kernel(tiny, arch, monkeypatch):
    """A long analysis (nothing kept) runs every layer through sdpa; its outputs equal the kept analysis'
    (all eager) to float rounding, with heads off and a replaced mask that leaves a row empty; weights
    indexed afterwards are still the eager bits."""
    loaded = tiny(arch)
    calls = []
    real = capture.interface._sdpa()
    monkeypatch.setattr(capture.interface, "_sdpa",
                        lambda: lambda *a, **k: (calls.append(k.get("is_causal")), real(*a, **k))[1])
    stack = "decoder" if loaded.family == "decoder" else "encoder"
    n = len(models.analyze(loaded, LONG, keep=True).axis_tokens(stack)[0])
    allowed = np.tril(np.ones((n, n), dtype=bool))
    allowed[3] = False  # a query that may attend nothing: zero output, not a uniform smear
    kw = dict(heads_off=[(stack, 1, 2)], mask={stack: allowed}, keep_logits=loaded.head != "none",
              hidden_states=True)
    kept = models.analyze(loaded, LONG, keep=True, **kw)
    assert calls == []
    fused = models.analyze(loaded, LONG, keep=False, **kw)
    assert len(calls) == len(loaded.sites)
    if loaded.head != "none":
        np.testing.assert_allclose(fused.logits, kept.logits, atol=2e-5, rtol=1e-5)
    for name in kept.hidden_states:
        np.testing.assert_allclose(fused.hidden_states[name], kept.hidden_states[name], atol=2e-5, rtol=1e-5)
    # no replaced mask: an encoder's eager call gets None (every key), which sdpa must not read as causal
    calls.clear()
    own = [models.analyze(loaded, LONG, keep=keep, keep_logits=loaded.head != "none", hidden_states=True)
           for keep in (True, False)]
    # a decoder's own causal mask goes to sdpa as is_causal (no mask written out); Gemma 3's sliding layer keeps its
    # mask
    want_causal = {"llama": [True, True], "gemma3": [None, True], "bart": [False, False, True, False, True, False],
                   "t5": [False, False, True, False, True, False], "bert-mlm": [False, False]}[arch]
    assert calls == want_causal, calls
    for name in own[0].hidden_states:
        np.testing.assert_allclose(own[1].hidden_states[name], own[0].hidden_states[name], atol=2e-5, rtol=1e-5)
    calls.clear()
    for s in kept.attentions:  # replays (and the statistics pass) stay eager: the very bits kept
        assert np.array_equal(fused.attentions[s][1], kept.attentions[s][1])
    assert calls == []


def test_models_without_sdpa_support_stay_eager(tiny, monkeypatch):
    loaded = tiny("llama")
    calls = []
    monkeypatch.setattr(capture.interface, "_sdpa", lambda: calls.append(1))
    monkeypatch.setattr(type(loaded.model), "_supports_sdpa", False)  # as Gemma 2 (softcapping), GPT-OSS (sinks)
    assert not loaded.sdpa_ok
    models.analyze(loaded, LONG, keep=False)
    assert calls == []


def test_a_computed_layer_serves_its_heads_and_rows(tiny, monkeypatch):
    loaded = tiny("llama")
    lazy = models.analyze(loaded, LONG, keep=False).attentions["decoder"]
    full = np.asarray(models.analyze(loaded, LONG, keep=True).attentions["decoder"])
    runs = []
    real = store.Replay.run
    monkeypatch.setattr(store.Replay, "run",
                        lambda self, want, visit: (runs.append(sorted(want)), real(self, want, visit)))
    assert np.array_equal(lazy[1], full[1]) and len(runs) == 1
    assert np.array_equal(lazy[1, 2], full[1, 2]) and np.array_equal(lazy[1, 0, 3:5], full[1, 0, 3:5])
    assert len(runs) == 1  # served from the computed layer
    got = lazy.heads([(0, 1), (1, 3), (0, 2)])
    assert np.array_equal(got, full[[0, 1, 0], [1, 3, 2]]) and runs == [[("decoder", 1)], [("decoder", 0)]]
    with pytest.raises(IndexError):
        lazy.heads([(0, 4)])
