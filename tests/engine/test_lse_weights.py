"""Weights on demand from the log-sum-exp (issue 45, step 2): an analysis with ``keep="lse"`` keeps each layer's
queries, keys and row log-sum-exp from its one fused pass, and every layer, head and block of query rows computed
from them equals transformers' eager weights (``attn_implementation="eager"``, ``output_attentions=True``) and
today's Replay path within float rounding (float32: 1e-6 here); what it cannot read is refused with the reason."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers as tf

import models
from models import capture
from models.analysis import lse_weights, store
from models.capture import blocks

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_store import attentions_of  # noqa: E402  (one reading of transformers' attentions for both tests)

# ~40 tokens on the tiny word-level tokenizers: several blocks of rows, causal and sliding-window key ranges
LONG = "kedi fareyi kovaladı the cat chased the mouse dün a kedi " * 3
PAIR = "the dog slept in the sun while the cat watched"
TOL = 1e-6  # float32: exp(scaling q·k - lse) against eager's softmax, both in float32 (measured below 6e-7)
CLASSES = {"bert": tf.BertModel, "gpt2": tf.GPT2LMHeadModel, "llama": tf.LlamaForCausalLM,
           "mistral": tf.MistralForCausalLM, "gemma3": tf.Gemma3ForCausalLM, "bart": tf.BartForConditionalGeneration,
           "t5": tf.T5ForConditionalGeneration}


def _eager(tiny_folder, arch: str, a: models.Analysis, **extra) -> dict[str, np.ndarray]:
    """Every stack's weights by transformers' eager attention on the analysis's tokens."""
    ref = CLASSES[arch].from_pretrained(str(tiny_folder(arch)), attn_implementation="eager").eval()
    inputs = {"input_ids": torch.tensor([[t.id for t in a.tokens]]), **extra}
    if a.target_tokens is not None:
        inputs["decoder_input_ids"] = torch.tensor([[t.id for t in a.target_tokens]])
    if a.text_pair is not None:  # the pair's segments, where the tokenizer gives them (as analyze passes them)
        inputs.update({k: v for k, v in _tokenized(tiny_folder(arch), a).items() if k == "token_type_ids"})
    with torch.no_grad():
        out = ref(**inputs, output_attentions=True)
    return attentions_of(out, a.family)


def _tokenized(folder, a: models.Analysis) -> dict:
    """The tokenizer's tensors for the analysis's sentence pair."""
    return dict(tf.AutoTokenizer.from_pretrained(str(folder))(a.text, a.text_pair, return_tensors="pt"))


@pytest.mark.parametrize("arch", ["llama", "gpt2", "bert", "mistral", "gemma3", "bart"])
def test_every_layer_head_and_row_block_equals_eager_and_replay(tiny, tiny_folder, arch):
    """Llama with grouped-query heads (4 query heads on 2 key/value heads) and RoPE, GPT-2, BERT with a sentence
    pair, Mistral's sliding window, Gemma 3's sliding and full layers, BART's three stacks (cross-attention)."""
    loaded = tiny(arch)
    pair = PAIR if arch == "bert" else None
    a = models.analyze(loaded, LONG, text_pair=pair, keep="lse")
    replay = models.analyze(loaded, LONG, text_pair=pair, keep=False)
    want = _eager(tiny_folder, arch, a)
    assert set(a.attentions) == set(want)
    for stack, ref in want.items():
        lazy = a.attentions[stack]
        assert lazy.source == "lse" and lazy.lse_refused is None and not a.kept
        assert replay.attentions[stack].source == "replay"
        whole = np.asarray(lazy)
        assert whole.shape == ref.shape and whole.dtype == np.float32
        np.testing.assert_allclose(whole, ref, atol=TOL, rtol=0, err_msg=f"{arch} {stack}")
        layers, heads, n_q, _ = ref.shape
        for layer in range(layers):
            old = replay.attentions[stack][layer]
            np.testing.assert_allclose(lazy[layer], old, atol=TOL, rtol=0)
            for head in range(heads):
                for r0 in range(0, n_q, 7):
                    got = lazy[layer, head, r0:r0 + 7]
                    np.testing.assert_allclose(got, ref[layer, head, r0:r0 + 7], atol=TOL, rtol=0)
                    np.testing.assert_allclose(got, old[head, r0:r0 + 7], atol=TOL, rtol=0)
        # blocks that cut across key/value groups and rows, as AttentionStack.block asks for them
        r0 = min(2, n_q - 1)
        np.testing.assert_allclose(lazy.block(layers - 1, (1, 3), (r0, n_q)), ref[-1, 1:3, r0:], atol=TOL)
        masked = np.broadcast_to(~np.asarray(a.masks[stack])[:, None], whole.shape)
        assert np.all(whole[masked] == 0.0)  # a key the mask forbids has weight exactly 0
        np.testing.assert_allclose(whole.sum(-1), 1.0, atol=1e-5)


@pytest.mark.parametrize("rows", [1, 3, 32])
def test_a_causal_layer_in_chunks_of_rows_equals_eager(tiny, tiny_folder, monkeypatch, rows):
    """A causal layer is computed in chunks of rows, each reading only the keys its last row may attend (zeros
    written past them): chunks of 1, 3 and 32 rows, whole layers and blocks starting inside a chunk."""
    monkeypatch.setattr(lse_weights, "CAUSAL_ROWS", rows)
    a = models.analyze(tiny("llama"), LONG, keep="lse")
    ref = _eager(tiny_folder, "llama", a)["decoder"]
    lazy = a.attentions["decoder"]
    assert lazy.lse.layers[("decoder", 0)].form == "causal"
    np.testing.assert_allclose(np.asarray(lazy), ref, atol=TOL, rtol=0)
    n = ref.shape[2]
    for r0, r1 in ((0, 1), (5, 6), (4, 17), (n - 9, n)):
        np.testing.assert_allclose(lazy.lse.block("decoder", 1, (1, 3), (r0, r1)).numpy(), ref[1, 1:3, r0:r1],
                                   atol=TOL, rtol=0)


def test_gqa_keys_are_kept_once_per_key_value_head_and_the_bytes_are_as_stated(tiny):
    loaded = tiny("llama")  # 2 layers, 4 query heads, 2 key/value heads, head width 8, float32
    a = models.analyze(loaded, LONG, keep="lse")
    source = a.attentions["decoder"].lse
    n = len(a.tokens)
    rec = source.layers[("decoder", 0)]
    assert rec.q.shape == (4, n, 8) and rec.k.shape == (2, n, 8) and rec.lse.shape == (4, n)
    assert rec.q.dtype == loaded.dtype and rec.lse.dtype == torch.float32
    want = 2 * ((4 * n + 2 * n) * 8 * 4 + 4 * n * 4)
    assert source.nbytes == want == lse_weights.held_bytes(loaded, {"decoder": (n, n)})
    # linear in n: twice the tokens, twice the bytes (the weights would take four times)
    assert lse_weights.held_bytes(loaded, {"decoder": (2 * n, 2 * n)}) == 2 * want


def test_heads_off_and_a_replaced_mask_with_an_empty_row(tiny, tiny_folder):
    """Heads switched off are gated after their weights (the map is unchanged); a replaced mask's forbidden keys
    and a row that may attend nothing get weight 0; the pass's outputs stay the model's own."""
    loaded = tiny("llama")
    n = len(models.analyze(loaded, LONG).tokens)
    allowed = np.tril(np.ones((n, n), dtype=bool))
    allowed[:, 1] = False
    allowed[3] = False
    kw = dict(heads_off=[("decoder", 1, 2)], mask={"decoder": allowed}, keep_logits=True)
    kept = models.analyze(loaded, LONG, keep=True, **kw)
    a = models.analyze(loaded, LONG, keep="lse", **kw)
    assert a.attentions["decoder"].source == "lse"
    got, want = np.asarray(a.attentions["decoder"]), np.asarray(kept.attentions["decoder"])
    np.testing.assert_allclose(got, want, atol=TOL, rtol=0)
    assert np.all(got[:, :, 3] == 0.0) and np.all(got[..., 1] == 0.0)
    np.testing.assert_allclose(a.logits, kept.logits, atol=2e-5, rtol=1e-5)


def test_bert_with_padding_through_the_collector(tiny, tiny_folder):
    """A padded batch row (keys 0 at the end): the collector's weights equal eager's, and the layer outputs it
    computed equal eager's hidden states."""
    loaded = tiny("bert")
    ids = loaded.tokenizer(LONG, return_tensors="pt")["input_ids"]
    n, layers, heads = ids.shape[1], *loaded.stacks["encoder"]
    pad = torch.ones(1, n, dtype=torch.long)
    pad[0, -6:] = 0
    collector = lse_weights.LseCollector({"encoder"})
    planes: dict[int, np.ndarray] = {}

    def mask_sink(site, mask, q_len, k_len):
        planes[site.layer] = blocks.allowed_of(mask, q_len, k_len).numpy()

    with capture.rerun(loaded, fused=True, stats=collector, mask_sink=mask_sink):
        hidden = loaded.model(input_ids=ids, attention_mask=pad).last_hidden_state
    assert not collector.refused
    source = collector.source({"encoder": store.MaskStack([planes[0]], [0] * layers)}, {"encoder": layers})
    ref = CLASSES["bert"].from_pretrained(str(tiny_folder("bert")), attn_implementation="eager").eval()
    with torch.no_grad():
        out = ref(input_ids=ids, attention_mask=pad, output_attentions=True)
    for layer in range(layers):
        got = source.block("encoder", layer, (0, heads), (0, n)).numpy()
        np.testing.assert_allclose(got, out.attentions[layer][0].numpy(), atol=TOL, rtol=0)
        assert np.all(got[..., -6:] == 0.0)
    torch.testing.assert_close(hidden, out.last_hidden_state, atol=1e-5, rtol=1e-5)


def test_statistics_read_from_the_lse_weights_equal_those_of_replay(tiny):
    loaded = tiny("gemma3")
    a, b = models.analyze(loaded, LONG, keep="lse"), models.analyze(loaded, LONG, keep=False)
    for name, value in b.statistics["decoder"].items():
        np.testing.assert_allclose(a.statistics["decoder"][name], value, atol=1e-5, rtol=1e-5, err_msg=name)
    np.testing.assert_allclose(a.overview["decoder"], b.overview["decoder"], atol=1e-6)


def test_no_forward_pass_runs_for_the_weights(tiny, monkeypatch):
    loaded = tiny("llama")
    a = models.analyze(loaded, LONG, keep="lse")
    runs = []
    monkeypatch.setattr(store.Replay, "run", lambda self, want, visit: runs.append(want))
    monkeypatch.setattr(type(loaded.model), "forward", lambda *x, **k: runs.append("forward"))
    np.asarray(a.attentions["decoder"]), a.attentions["decoder"][1, 2, 3:9]  # noqa: B018
    dict(a.statistics)  # noqa: B018
    assert runs == []


def test_families_it_cannot_read_are_refused_with_the_reason_and_keep_replay(tiny, tiny_folder):
    loaded = tiny("t5")  # T5 adds a relative position bias to its scores
    a = models.analyze(loaded, LONG, target="kedi fareyi", keep="lse")
    want = _eager(tiny_folder, "t5", a)
    for stack, ref in want.items():
        lazy = a.attentions[stack]
        assert lazy.source == "replay" and "position bias" in lazy.lse_refused
        np.testing.assert_allclose(np.asarray(lazy), ref, atol=TOL, rtol=0)
    neo = tiny("gpt_neo")  # the fallback path: every weight comes from output_attentions, kept
    assert "fallback" in lse_weights.refusals(neo, ["decoder"], {}, set())["decoder"]
    assert models.analyze(neo, LONG, keep="lse").attentions["decoder"].source == "kept"
    llama = tiny("llama")
    rules = {"decoder": object()}  # a mask per head (head rules) of the stack
    assert "per head" in lse_weights.refusals(llama, ["decoder"], rules, set())["decoder"]


@pytest.mark.parametrize(("kwargs", "mask", "reason"), [
    ({"softcap": 30.0}, None, "softcapped"),
    ({"s_aux": torch.zeros(4)}, None, "sinks"),
    ({"position_bias": torch.zeros(1, 4, 5, 5)}, None, "position bias"),
    ({}, "alibi", "position bias"),
    ({}, "per_head", "per head"),
])
def test_a_layer_it_cannot_read_is_refused_at_its_call(tiny, kwargs, mask, reason):
    """Softcapping, learned sinks, a bias passed to the scores or written into the mask (ALiBi), a mask per head:
    the hook hands the call back (None: its usual path runs) and its stack is refused with the reason."""
    loaded = tiny("llama")
    site = next(s for s in loaded.sites if s.stack == "decoder")
    module = loaded.model.model.layers[0].self_attn
    q, k = torch.randn(1, 4, 5, 8), torch.randn(1, 2, 5, 8)
    causal = torch.full((5, 5), torch.finfo(torch.float32).min).triu(1)
    m = {None: causal[None, None], "alibi": (causal - torch.arange(5.0))[None, None],
         "per_head": causal.expand(1, 4, 5, 5)}[mask]
    collector = lse_weights.LseCollector({"decoder"})
    eager = capture.interface._eager_for(module)
    assert collector(site, eager, module, q, k, k, m, (), dict(kwargs)) is None
    assert reason in collector.refused["decoder"] and collector.source({}, {"decoder": 2}) is None


def test_above_the_budget_it_is_refused_before_the_forward_pass(tiny, monkeypatch):
    loaded = tiny("llama")
    calls = []
    monkeypatch.setattr(lse_weights, "LSE_BYTES", 1000)
    monkeypatch.setattr(type(loaded.model), "forward", lambda *x, **k: calls.append(1))
    with pytest.raises(models.AttentionTooLargeError) as err:
        models.analyze(loaded, LONG, keep="lse")
    assert err.value.code == "lse_too_large" and calls == []
    with pytest.raises(models.InvalidArgumentError):
        models.analyze(loaded, LONG, keep="all")


def test_the_cli_export_writes_the_lse_weights(tiny, tiny_folder, tmp_path, capsys):
    from models.__main__ import main

    out = tmp_path / "w.npz"
    assert main(["analyze", "--model", str(tiny_folder("llama")), "--text", LONG, "--device", "cpu",
                 "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["out"] == str(out)
    a = models.analyze(tiny("llama"), LONG, keep=True)
    with np.load(out) as saved:
        np.testing.assert_allclose(saved["attention_decoder"], np.asarray(a.attentions["decoder"]), atol=TOL, rtol=0)
