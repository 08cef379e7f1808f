"""Attention engine (issue 2): capture equals eager, heads off equal zeroed output-projection slices,
per-call state, loading errors. Tiny random models built from configs, loaded from folders."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
import transformers as tf

import models
from conftest import TEST_DEVICE

ARCHS = ["bert", "bert-mlm", "gpt2", "llama", "mistral", "gemma3", "gpt_neo", "t5", "marian", "bart"]
TEXT = "Kedi fareyi kovaladı"

# Output projection of layer l (its input holds the per-head outputs, head after head).
OUT_PROJ = {
    "bert": "encoder.layer.{l}.attention.output.dense",
    "bert-mlm": "bert.encoder.layer.{l}.attention.output.dense",
    "gpt2": "transformer.h.{l}.attn.c_proj",
    "llama": "model.layers.{l}.self_attn.o_proj",
    "mistral": "model.layers.{l}.self_attn.o_proj",
    "gemma3": "model.layers.{l}.self_attn.o_proj",
    "gpt_neo": "transformer.h.{l}.attn.attention.out_proj",
    "t5": "encoder.block.{l}.layer.0.SelfAttention.o",
    "marian": "model.encoder.layers.{l}.self_attn.out_proj",
    "bart": "model.encoder.layers.{l}.self_attn.out_proj",
}


def _eager(tiny_folder, arch):
    """The same tiny model loaded plainly by transformers with eager attention."""
    loaded_cls = {
        "bert": tf.BertModel, "bert-mlm": tf.BertForMaskedLM, "gpt2": tf.GPT2LMHeadModel,
        "llama": tf.LlamaForCausalLM, "mistral": tf.MistralForCausalLM,
        "gemma3": tf.Gemma3ForCausalLM, "gpt_neo": tf.GPTNeoForCausalLM,
        "t5": tf.T5ForConditionalGeneration, "marian": tf.MarianMTModel, "bart": tf.BartForConditionalGeneration,
    }[arch]
    # on the fixtures' device (DIKKAT_TEST_DEVICE): the same kernels as the analysis, so bits can be compared
    return loaded_cls.from_pretrained(str(tiny_folder(arch)), attn_implementation="eager").eval().to(TEST_DEVICE)


def _inputs(a: models.Analysis) -> dict:
    inputs = {"input_ids": torch.tensor([[t.id for t in a.tokens]], device=TEST_DEVICE)}
    if a.target_tokens is not None:
        inputs["decoder_input_ids"] = torch.tensor([[t.id for t in a.target_tokens]], device=TEST_DEVICE)
    return inputs


def _main_output(arch, a: models.Analysis | None = None, outputs=None):
    """The tensor compared bit for bit: logits, or the last hidden state for a headless encoder (on the CPU)."""
    if outputs is not None:
        return (outputs.last_hidden_state[0] if arch == "bert" else outputs.logits[0]).cpu()
    return torch.from_numpy(a.hidden_states["encoder"][-1] if arch == "bert" else a.logits)


def _run(loaded, text=TEXT, **kw):
    return models.analyze(loaded, text, keep_logits=True, hidden_states=True, **kw)


@pytest.mark.parametrize("arch", ARCHS)
def test_weights_equal_eager_and_rows_sum_to_one(tiny, tiny_folder, arch):
    a = _run(tiny(arch))
    ref = _eager(tiny_folder, arch)
    with torch.no_grad():
        out = ref(**_inputs(a), output_attentions=True)
    expected = {}
    if a.family == "encoder-decoder":
        expected = {"encoder": out.encoder_attentions, "decoder": out.decoder_attentions, "cross": out.cross_attentions}
    else:
        expected = {"decoder" if a.family == "decoder" else "encoder": out.attentions}
    assert set(a.attentions) == set(expected)
    for stack, tensors in expected.items():
        got = a.attentions[stack]
        want = torch.stack([t[0] for t in tensors]).cpu().numpy()
        assert got.dtype == np.float32 and got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)
        np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-5)
        q_tokens, k_tokens = a.axis_tokens(stack)
        assert got.shape[2:] == (len(q_tokens), len(k_tokens))  # C06: tokens == matrix size


@pytest.mark.parametrize("arch", ["gpt2", "llama", "mistral", "gemma3", "gpt_neo", "t5", "marian", "bart"])
def test_decoder_self_attention_is_exactly_causal(tiny, arch):
    a = _run(tiny(arch))
    w = a.attentions["decoder"]
    n = w.shape[-1]
    assert (w[..., np.triu_indices(n, 1)[0], np.triu_indices(n, 1)[1]] == 0).all()
    assert n >= 2


def test_mistral_native_sliding_window_is_kept(tiny):
    w = _run(tiny("mistral"), "kedi fare kova the cat chased").attentions["decoder"]  # window 3
    n = w.shape[-1]
    i, j = np.indices((n, n))
    assert (w[..., (j <= i - 3)] == 0).all()
    assert (w[..., (j > i - 3) & (j <= i)] > 0).all()


@pytest.mark.parametrize("arch", ARCHS)
def test_no_heads_off_is_bit_identical_to_eager(tiny, tiny_folder, arch):
    a = _run(tiny(arch))
    ref = _eager(tiny_folder, arch)
    with torch.no_grad():
        out = ref(**_inputs(a))
    assert torch.equal(_main_output(arch, a), _main_output(arch, outputs=out))


@pytest.mark.parametrize("arch", ARCHS)
def test_head_off_equals_zeroed_output_projection_slice_and_back_on_restores(tiny, tiny_folder, arch):
    loaded = tiny(arch)
    stack = "decoder" if loaded.family == "decoder" else "encoder"
    layer, head = 1, 2
    base = _run(loaded)
    off = _run(loaded, heads_off={(stack, layer, head)})

    ref = _eager(tiny_folder, arch)
    proj = dict(ref.named_modules())[OUT_PROJ[arch].format(l=layer)]
    heads = loaded.stacks[stack][1]

    def zero_slice(module, args):
        x = args[0].clone()
        d = x.shape[-1] // heads
        x[..., head * d : (head + 1) * d] = 0
        return (x,) + args[1:]

    handle = proj.register_forward_pre_hook(zero_slice)
    with torch.no_grad():
        out = ref(**_inputs(base))
    handle.remove()
    assert torch.equal(_main_output(arch, off), _main_output(arch, outputs=out))
    assert not torch.equal(_main_output(arch, off), _main_output(arch, base))
    # C07: switched back on, bit-identical to before, every time.
    for _ in range(3):
        again = _run(loaded)
        assert torch.equal(_main_output(arch, again), _main_output(arch, base))
        for s in base.attentions:
            assert np.array_equal(again.attentions[s], base.attentions[s])


def test_two_threads_share_a_model_without_sharing_heads(tiny):
    loaded = tiny("llama")
    solo_plain = _run(loaded).logits
    solo_off = _run(loaded, heads_off={("decoder", 0, 1), ("decoder", 1, 3)}).logits
    assert not np.array_equal(solo_plain, solo_off)
    errors: list[str] = []
    barrier = threading.Barrier(2)

    def worker(heads, expected):
        barrier.wait()
        for _ in range(15):
            got = _run(loaded, heads_off=heads).logits
            if not np.array_equal(got, expected):
                errors.append(f"heads={heads}")

    threads = [
        threading.Thread(target=worker, args=(set(), solo_plain)),
        threading.Thread(target=worker, args=({("decoder", 0, 1), ("decoder", 1, 3)}, solo_off)),
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []


def test_gqa_model_reports_key_value_heads(tiny):
    a = _run(tiny("llama"))
    assert a.kv_heads == 2 and a.attentions["decoder"].shape[1] == 4


def test_fallback_path_is_reported_and_refuses_mask_replacement(tiny):
    loaded = tiny("gpt_neo")
    assert loaded.capture_path == "fallback" and tiny("gpt2").capture_path == "interface"
    with pytest.raises(models.UnsupportedOperationError, match="fallback"):
        models.analyze(loaded, TEXT, mask="bidirectional")


def test_heads_off_out_of_range_is_a_clear_error(tiny):
    with pytest.raises(models.InvalidHeadError, match="2 layers x 4 heads"):
        models.analyze(tiny("gpt2"), TEXT, heads_off={("decoder", 5, 0)})
    with pytest.raises(models.InvalidHeadError, match="no 'encoder' stack"):
        models.analyze(tiny("gpt2"), TEXT, heads_off={("encoder", 0, 0)})


@pytest.mark.parametrize("heads", [
    ("decoder", 0, 1),             # one triple, not wrapped in a set: was TypeError 'int' object is not iterable
    "decoder",                     # was "got ('c',)": the string's characters read as triples
    {"decoder": [0, 1]},           # was "got ('d', 'e', 'c', ...)"
    5, True,                       # was TypeError: not iterable
    [None],                        # was TypeError: 'NoneType' object is not iterable
    [(["decoder"], 0, 0)],         # was TypeError: unhashable type: 'list'
    [("decoder", 0, 1.7)],         # was silently head 1
    [("decoder", True, 0)],        # was silently layer 1
])
def test_malformed_heads_off_is_a_clear_error(tiny, heads):
    """heads_off of the wrong shape or type raises InvalidHeadError with an example, never a bare TypeError,
    and never switches off a head the caller did not name."""
    with pytest.raises(models.InvalidHeadError, match=r"triples.*e\.g\. \{\('decoder', 0, 1\)\}"):
        models.analyze(tiny("gpt2"), TEXT, heads_off=heads)


def test_heads_off_accepts_lists_and_numpy_integers(tiny):
    a = models.analyze(tiny("gpt2"), TEXT, heads_off=[["decoder", np.int64(0), 1]])
    assert a.heads_off == frozenset({("decoder", 0, 1)})


@pytest.mark.parametrize("arch,kwargs,match", [
    ("gpt2", {"text_pair": "the cat"}, "is a decoder: text_pair"),
    ("t5", {"text_pair": "the cat"}, "is an encoder-decoder: text_pair"),
    ("bert", {"target": "the cat"}, "is an encoder: target"),
    ("gpt2", {"target": "the cat"}, "is a decoder: target"),
])
def test_text_pair_and_target_only_where_the_family_has_them(tiny, arch, kwargs, match):
    """A decoder used to glue text_pair's tokens onto the text with no separator, and an encoder or decoder
    ignored target while the summary still reported it (with no target tokens)."""
    with pytest.raises(models.UnsupportedOperationError, match=match):
        models.analyze(tiny(arch), TEXT, **kwargs)


@pytest.mark.parametrize("text", ["", "   \n\t"])
def test_empty_text_raises(tiny, text):
    with pytest.raises(models.EmptyTextError):
        models.analyze(tiny("bert"), text)


def test_C06_batch_of_texts_is_a_clear_error(tiny):
    with pytest.raises(models.BatchNotSupportedError, match="one text per call"):
        models.analyze(tiny("bert"), ["Kedi fareyi kovaladı", "The cat chased the mouse"])


def test_C01_long_text_is_truncated_with_a_count(tiny):
    loaded = tiny("bert")  # 64 positions
    text = " ".join(["kedi"] * 100)
    a = models.analyze(loaded, text)
    assert a.max_tokens == 64 and len(a.tokens) == 64
    assert a.truncated == 102 - 64  # 100 words + [CLS] + [SEP]
    assert a.attentions["encoder"].shape[-1] == 64
    short = models.analyze(loaded, text, max_tokens=10)
    assert len(short.tokens) == 10 and short.truncated == 92


def test_sentence_pair_segments(tiny):
    a = models.analyze(tiny("bert"), "kedi fare", text_pair="the cat")
    assert [t.segment for t in a.tokens if not t.special] == [0, 0, 1, 1]
    # [CLS] kedi fare [SEP] | the cat [SEP]: the final [SEP] belongs to segment B (token type 1)
    assert [t.segment for t in a.tokens] == [0, 0, 0, 0, 1, 1, 1]
    assert [w.text for w in a.words] == ["kedi", "fare", "the", "cat"]
    assert [w.segment for w in a.words] == [0, 0, 1, 1]


@pytest.mark.parametrize("text,words", [
    ("القِطُّ طَارَدَ الفَأْرَ", ["القِطُّ", "طَارَدَ", "الفَأْرَ"]),         # Arabic with harakat
    ("नमस्ते दुनिया", ["नमस्ते", "दुनिया"]),                             # Devanagari vowel signs
    ("S\u0327o\u0308yle I\u0307g\u0306ne", ["S\u0327o\u0308yle", "I\u0307g\u0306ne"]),  # NFD "Şöyle İğne"
    ("Kedi fareyi kovaladı", ["Kedi", "fareyi", "kovaladı"]),
])
def test_C04_words_keep_their_combining_marks(text, words):
    """A combining mark is not matched by \\w: "नमस्ते दुनिया" gave the words 'नमस' and 'द', Arabic with
    vowel marks 16 words instead of 3, NFD "şöyle" the words 's', '̧', 'o', '̈', 'yle'."""
    from models.analysis.tokens import Token, group_words

    pieces, tokens, pos = text.split(" "), [], 0
    for piece in pieces:
        tokens.append(Token(piece, pos, pos + len(piece), False, 7, piece))
        pos += len(piece) + 1
    got = group_words(tokens, [text])
    assert [w.text for w in got] == words
    assert [text[w.start:w.end] for w in got] == words


def test_unknown_model_and_bad_folders(tmp_path):
    with pytest.raises(models.UnknownModelError, match="Catalog keys|catalog key"):
        models.load("no-such-model")
    with pytest.raises(models.HubUnreachableError):
        models.load("nobody-here/definitely-not-a-model-xyz")  # tests run with HF_HUB_OFFLINE=1
    with pytest.raises(models.UnknownModelError, match="does not exist"):
        models.load(str(tmp_path / "no" / "such" / "folder"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(models.NoUsableModelError, match="config.json"):
        models.load(str(empty))
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text('{"model_type": "bert"}')
    (pickled / "pytorch_model.bin").write_bytes(b"\x80\x02}q\x00.")
    with pytest.raises(models.NoUsableModelError, match="pickle"):
        models.load(str(pickled))


def test_corrupt_safetensors_is_a_clear_error(tiny_folder, tmp_path):
    import shutil

    folder = tmp_path / "corrupt"
    shutil.copytree(tiny_folder("bert"), folder)
    (folder / "model.safetensors").write_bytes(b"not a safetensors file at all")
    with pytest.raises(models.NoUsableModelError, match="corrupt"):
        models.load(str(folder))


def test_folder_without_tokenizer_files_is_a_clear_error(tiny_folder, tmp_path):
    """Weights and config but no tokenizer files: transformers builds an empty BertTokenizer (5 special tokens),
    so "Kedi fareyi kovaladı" was analysed as [CLS] [UNK] [UNK] [UNK] [SEP] with labels that hid it."""
    import shutil

    folder = tmp_path / "no_tokenizer"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_folder("bert") / name, folder / name)
    with pytest.raises(models.NoUsableModelError, match="no tokenizer files"):
        models.load(str(folder))


def test_architecture_without_attention_weights(tmp_path):
    cfg = tf.MambaConfig(vocab_size=320, hidden_size=16, state_size=4, num_hidden_layers=2, expand=2, conv_kernel=2)
    tf.MambaForCausalLM(cfg).save_pretrained(str(tmp_path), safe_serialization=True)
    from tiny import _tokenizer

    _tokenizer(tmp_path, "decoder")
    with pytest.raises(models.NoAttentionWeightsError, match="mamba"):
        models.load(str(tmp_path))


def test_cross_attention_and_generated_target(tiny):
    a = models.analyze(tiny("bart"), TEXT, target="the cat chased")
    cross = a.attentions["cross"]
    assert cross.shape == (2, 4, len(a.target_tokens), len(a.tokens))
    assert a.target_tokens[0].special and [t.label for t in a.target_tokens[1:]] == ["the", "cat", "chased"]
    b = models.analyze(tiny("bart"), TEXT)  # no target: a greedy continuation is analysed
    assert b.target and b.attentions["cross"].shape[2] == len(b.target_tokens)


def test_mlm_mask_fills(tiny):
    a = models.analyze(tiny("bert-mlm"), "kedi [MASK] kovaladı")
    (idx,) = a.mask_fills
    assert a.tokens[idx].piece == "[MASK]"
    fills = a.mask_fills[idx]
    assert fills.ids.shape == (1, 10) and np.all(np.diff(fills.probs[0]) <= 0)


def test_cli_list_and_analyze(tiny_folder, tmp_path, capsys):
    from models.__main__ import main

    assert main(["list"]) == 0
    assert "minilm-l6" in capsys.readouterr().out
    out = tmp_path / "a.npz"
    assert main(["analyze", "--model", str(tiny_folder("gpt2")), "--text", TEXT, "--out", str(out),
                 "--head-off", "decoder:0:1"]) == 0
    import json

    summary = json.loads(capsys.readouterr().out)
    assert summary["attentions"] == {"decoder": [2, 4, 5, 5]} and summary["capture_path"] == "interface"
    assert summary["heads_off"] == [["decoder", 0, 1]]
    assert np.load(out)["attention_decoder"].shape == (2, 4, 5, 5)
    assert main(["analyze", "--model", str(tiny_folder("gpt2")), "--text", "  "]) == 2


@pytest.mark.parametrize("args,message", [
    (["--head-off", "decoder:1"], "--head-off takes STACK:LAYER:HEAD, e.g. decoder:3:1; got 'decoder:1'"),
    (["--head-off", "decoder:x:1"], "--head-off takes STACK:LAYER:HEAD, e.g. decoder:3:1; got 'decoder:x:1'"),
    (["--device", "tpu"], "Unknown device 'tpu': use auto, cpu, cuda, cuda:N or mps."),
])
def test_cli_bad_head_off_and_device_are_one_line_errors(tiny_folder, capsys, args, message):
    """--head-off decoder:1 printed "not enough values to unpack (expected 3, got 2)"; --device tpu ended in a
    torch RuntimeError traceback."""
    from models.__main__ import main

    assert main(["analyze", "--model", str(tiny_folder("gpt2")), "--text", TEXT, *args]) == 2
    assert capsys.readouterr().err.strip() == f"error: {message}"


def test_C09_weights_even_where_the_default_kernel_returns_none(tiny, tiny_folder):
    """transformers' default attention (sdpa) returns no weights; the engine records real ones, on the
    interface path (GPT-2) and on the fallback path (GPT-Neo); a model without attention says so."""
    plain = tf.GPT2LMHeadModel.from_pretrained(str(tiny_folder("gpt2"))).eval()
    with torch.no_grad():
        out = plain(input_ids=torch.tensor([[10, 11, 12]]), output_attentions=True)
    assert not out.attentions or all(a is None for a in out.attentions)  # the reported fault
    for arch in ("gpt2", "gpt_neo"):
        w = models.analyze(tiny(arch), TEXT).attentions["decoder"]
        assert w.shape == (2, 4, 5, 5) and np.allclose(w.sum(-1), 1.0, atol=1e-5) and w.max() > 0.2


def test_C10_unconfigured_non_english_model_loads_from_its_folder(tiny_folder, tmp_path):
    """A Turkish model nobody configured: a plain transformers folder, no catalog entry, no settings."""
    import shutil

    folder = tmp_path / "bilinmeyen-turkce-model"
    shutil.copytree(tiny_folder("bert-mlm"), folder)
    loaded = models.load(str(folder))
    text = "İstanbul'da ışık söndü"
    a = models.analyze(loaded, text)
    assert loaded.family == "encoder" and loaded.head == "mlm" and loaded.spec.key == str(folder)
    assert [w.text for w in a.words] == ["İstanbul'da", "ışık", "söndü"]
    assert "".join(t.text for t in a.tokens if not t.special) == text.replace(" ", "")


@pytest.mark.parametrize("value", [-1, 0, 1, 2, 2.5, True, "64"])
def test_max_tokens_must_leave_room_for_text(tiny, value):
    """BERT adds 2 special tokens: max_tokens must be a whole number above 2 (1 gave 4 tokens, 0 meant the
    default, -1 an OverflowError)."""
    with pytest.raises(models.InvalidArgumentError, match="max_tokens"):
        models.analyze(tiny("bert"), TEXT, max_tokens=value)
    a = models.analyze(tiny("bert"), TEXT, max_tokens=3)
    assert len(a.tokens) == 3 and a.truncated > 0


@pytest.mark.parametrize("value", [0, -1, 1.5, None])
def test_top_k_must_be_positive(tiny, value):
    with pytest.raises(models.InvalidArgumentError, match="top_k"):
        models.analyze(tiny("gpt2"), TEXT, top_k=value)
    assert len(models.analyze(tiny("gpt2"), TEXT, top_k=10**9).next_token.tokens[-1]) == tiny("gpt2").config.vocab_size


@pytest.mark.parametrize("name", ["", "   ", None, 3])
def test_load_rejects_an_empty_or_non_text_name(name):
    with pytest.raises(models.UnknownModelError, match="catalog key"):
        models.load(name)


def test_every_engine_error_is_exported():
    from models import errors

    names = [n for n, v in vars(errors).items() if isinstance(v, type) and issubclass(v, errors.DikkatError)]
    assert len(names) >= 15 and all(getattr(models, n) is getattr(errors, n) for n in names)


def test_bad_device_dtype_and_text_type_are_invalid_argument_errors(tiny, tiny_folder):
    """All engine errors derive from DikkatError (one except in a notebook or page catches them all)."""
    folder = str(tiny_folder("gpt2"))
    with pytest.raises(models.InvalidArgumentError, match="Unknown device 'tpu'"):
        models.load(folder, device="tpu")
    with pytest.raises(models.InvalidArgumentError, match="Unknown dtype 'float99'"):
        models.load(folder, device="cpu", dtype="float99")
    with pytest.raises(models.InvalidArgumentError, match="must be a string, got int"):
        models.analyze(tiny("gpt2"), 5)
    from models.analysis import compare
    from models.lessons import positions

    with pytest.raises(models.InvalidArgumentError):
        compare.next_token_kl(np.zeros((2, 3)), np.zeros((2, 4)))
    with pytest.raises(ValueError):  # still a ValueError for callers that catch that
        positions.alibi_slopes(0)
