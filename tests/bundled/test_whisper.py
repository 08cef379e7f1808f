"""Whisper-base from the CTranslate2 packages: conversion, tokenizer fix, audio analysis, cross-attention."""

from __future__ import annotations

import json
import re
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import models  # noqa: E402
from models.speech import audio as A  # noqa: E402
from models.speech import convert_whisper as cw  # noqa: E402
from models.errors import (  # noqa: E402
    EmptyTextError,
    InvalidAudioError,
    InvalidHeadError,
    NoUsableModelError,
    UnknownLanguageError,
    UnsupportedOperationError,
)

AUDIO = ROOT / "assets" / "audio"
EN_WAV = AUDIO / "the_cat_chased_the_mouse_en.wav"
TR_WAV = AUDIO / "kedi_fareyi_kovaladi_tr.wav"


@pytest.fixture(scope="module")
def whisper():
    return models.load("whisper-base", device="cpu")


@pytest.fixture(scope="module")
def english(whisper):
    return A.analyze_wav(whisper, EN_WAV, language="en")


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


# ---------------------------------------------------------------------------- conversion, tokenizer


def test_load_finds_three_stacks(whisper):
    assert whisper.family == "encoder-decoder" and whisper.capture_path == "interface"
    assert whisper.stacks == {"encoder": (6, 8), "decoder": (6, 8), "cross": (6, 8)}
    assert whisper.processor is not None
    cfg = whisper.model.config
    assert (cfg.d_model, cfg.num_mel_bins, cfg.vocab_size) == (512, 80, 51865)
    assert whisper.model.generation_config.alignment_heads == [[3, 1], [4, 2], [4, 3], [4, 7], [5, 1], [5, 2], [5, 4],
                                                               [5, 6]]


def test_converted_folder_loads_with_plain_transformers(whisper):
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(str(whisper.folder), local_files_only=True)
    assert type(processor).__name__ == "WhisperProcessor"
    assert processor.feature_extractor.feature_size == 80 and processor.feature_extractor.sampling_rate == 16000
    assert (whisper.folder / "preprocessor_config.json").is_file()
    assert (whisper.folder / "generation_config.json").is_file()


def test_merge_fix_the_is_one_token(whisper):
    tok = whisper.tokenizer
    ids = tok(" the", add_special_tokens=False)["input_ids"]
    assert ids == [264] and tok.convert_ids_to_tokens(ids) == ["Ġthe"]
    merges = json.loads((whisper.folder / "tokenizer.json").read_text(encoding="utf-8"))["model"]["merges"]
    assert merges[0] in ("Ġ t", ["Ġ", "t"])
    assert len(tok) == 51865  # timestamp tokens added
    assert tok.decode([50258, 50259, 50359, 50363, 440, 3857], skip_special_tokens=True) == " The cat"


def test_fixed_tokenizer_json_without_the_fix_splits_the(tmp_path):
    """The packaged tokenizer.json really lacks the merge: " the" needs it."""
    from tokenizers import Tokenizer

    packaged = cw.data_dirs()[0] / "tokenizer.json"
    broken = Tokenizer.from_file(str(packaged)).encode(" the", add_special_tokens=False).ids
    fixed_path = tmp_path / "tokenizer.json"
    fixed_path.write_text(json.dumps(cw.fixed_tokenizer_json(packaged)), encoding="utf-8")
    fixed = Tokenizer.from_file(str(fixed_path)).encode(" the", add_special_tokens=False).ids
    assert len(broken) > 1 and fixed == [264]


def _ct2_string(s: str) -> bytes:
    raw = s.encode() + b"\0"
    return struct.pack("<H", len(raw)) + raw


def test_ct2_reader_on_a_tiny_file():
    w = np.arange(6, dtype=np.float16).reshape(2, 3)
    body = struct.pack("<I", 6) + _ct2_string("TinySpec") + struct.pack("<II", 1, 2)
    body += _ct2_string("a/weight") + struct.pack("<B", 2) + struct.pack("<II", 2, 3) + struct.pack("<B", 4)
    body += struct.pack("<I", w.nbytes) + w.tobytes()
    body += (_ct2_string("a/heads") + struct.pack("<B", 0) + struct.pack("<B", 2) + struct.pack("<I", 2)
             + struct.pack("<h", 8))
    body += struct.pack("<I", 1) + _ct2_string("b/weight") + _ct2_string("a/weight")
    spec, v = cw.read_ct2_model(body)
    assert spec == "TinySpec" and int(v["a/heads"]) == 8
    np.testing.assert_array_equal(v["a/weight"], w)
    assert v["b/weight"] is v["a/weight"]
    with pytest.raises(NoUsableModelError):
        cw.read_ct2_model(body[:-3])
    with pytest.raises(NoUsableModelError):
        cw.read_ct2_model(body + b"\0")


# ---------------------------------------------------------------------------- audio I/O


def test_shipped_clips_are_small_16k_mono():
    for path in (EN_WAV, TR_WAV):
        audio, rate = A.read_wav(path)
        assert rate == 16000 and audio.ndim == 1 and audio.dtype == np.float32
        assert 1.0 < audio.size / rate < 5.0 and path.stat().st_size < 200_000


def test_resample_keeps_a_tone_and_the_length(tmp_path):
    t = np.arange(22050) / 22050
    tone = (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    out = A.resample(tone, 22050, 16000)
    assert out.shape == (16000,)
    spectrum = np.abs(np.fft.rfft(out[1000:-1000] * np.hanning(14000)))
    assert abs(np.argmax(spectrum) * 16000 / 14000 - 440) < 3
    A.write_wav(tmp_path / "x.wav", out)
    back, rate = A.read_wav(tmp_path / "x.wav")
    assert rate == 16000 and np.abs(back - out).max() < 1e-4


def test_bad_inputs(whisper, minilm):
    with pytest.raises(InvalidAudioError):
        A.analyze_audio(whisper, np.zeros(0, np.float32), 16000)
    with pytest.raises(InvalidAudioError):
        A.analyze_audio(whisper, np.array([0.0, np.nan], np.float32), 16000)
    with pytest.raises(UnknownLanguageError, match="tr"):
        A.analyze_audio(whisper, np.zeros(1600, np.float32), 16000, language="klingon")
    with pytest.raises(InvalidHeadError):
        A.analyze_audio(whisper, np.zeros(1600, np.float32), 16000, heads_off=[("cross", 6, 0)])
    with pytest.raises(EmptyTextError):
        A.analyze_audio(whisper, np.zeros(1600, np.float32), 16000, target="  ")
    with pytest.raises(UnsupportedOperationError):
        A.analyze_audio(minilm, np.zeros(1600, np.float32), 16000)
    with pytest.raises(InvalidAudioError):
        A.read_wav(Path(__file__))
    assert A.language_token(whisper, "turkish") == A.language_token(whisper, "<|tr|>") == 50268


def test_crop_keeps_rows_summing_to_one():
    w = torch.softmax(torch.randn(2, 10, 10), dim=-1)
    col = A._crop(w, 4, True, True, True)
    assert col.shape == (2, 5, 5)
    torch.testing.assert_close(col.sum(-1), torch.ones(2, 5))
    torch.testing.assert_close(col[:, :4, :4], w[:, :4, :4])
    renorm = A._crop(w, 4, False, True, False)
    assert renorm.shape == (2, 10, 4)
    torch.testing.assert_close(renorm.sum(-1), torch.ones(2, 10))


# ---------------------------------------------------------------------------- the English clip


def test_english_clip_transcribes(english):
    assert _words(english.transcript) == ["the", "cat", "chased", "the", "mouse"]
    assert english.analysis.target == english.transcript


def test_shapes_rows_and_labels(english):
    a = english.analysis
    n = english.frames
    assert n == pytest.approx(english.duration_seconds / 0.02, abs=1) and english.padding_frames == 1500 - n
    T, S = len(a.target_tokens), len(a.tokens)
    assert n + 1 == S and a.tokens[-1].special and a.tokens[-1].label == "<|padding|>"
    assert a.attentions["encoder"].shape == (6, 8, S, S)
    assert a.attentions["decoder"].shape == (6, 8, T, T)
    assert a.attentions["cross"].shape == (6, 8, T, S)
    for stack, w in a.attentions.items():
        assert w.dtype == np.float32
        np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-4, err_msg=stack)
    assert [t.label for t in a.target_tokens[:4]] == ["<|startoftranscript|>", "<|en|>", "<|transcribe|>",
                                                      "<|notimestamps|>"]
    assert all(t.special for t in a.target_tokens[:4]) and not any(t.special for t in a.target_tokens[4:])
    for t in a.target_tokens[4:]:
        assert a.target[t.start:t.end] == t.text
    assert [w.text for w in a.target_words] == ["The", "cat", "chased", "the", "mouse", "."]
    assert a.tokens[10].label == "0.20s" and a.text[a.tokens[10].start:a.tokens[10].end] == "0.20s"
    assert english.spectrogram.shape == (80, 2 * n) and english.spectrogram.dtype == np.float32
    assert english.frame_seconds == 0.02 and "1500" in english.note
    assert a.loss is not None and a.loss < 1.0
    assert a.next_token.ids.shape == (T, 10)


def test_cross_attention_peaks_move_forward(whisper, english):
    a = english.analysis
    peaks = A.cross_attention_peaks(english, A.alignment_heads(whisper))
    rows = [i for i, t in enumerate(a.target_tokens) if not t.special and re.search(r"\w", t.text)]
    word_peaks = peaks[rows]
    assert len(word_peaks) == 5
    assert (np.diff(word_peaks) >= -2).all(), word_peaks  # 40 ms tolerance
    assert word_peaks[-1] - word_peaks[0] > english.frames // 2, word_peaks
    # The same holds for the last half of the layers, all heads.
    half = A.cross_attention_peaks(english)[rows]
    assert (np.diff(half) >= -2).all(), half


def test_heads_off_changes_only_what_comes_after(whisper, english):
    """Switching off all heads of the last cross-attention layer leaves the encoder and the earlier
    layers' maps as they were, and changes the predictions (the loss)."""
    off = [("cross", 5, h) for h in range(8)]
    r = A.analyze_wav(whisper, EN_WAV, language="en", target=english.transcript, heads_off=off)
    a, base = r.analysis, english.analysis
    assert [t.id for t in a.target_tokens] == [t.id for t in base.target_tokens]
    assert a.heads_off == frozenset(off)
    np.testing.assert_allclose(a.attentions["encoder"], base.attentions["encoder"], atol=1e-5)
    np.testing.assert_allclose(a.attentions["cross"][:5], base.attentions["cross"][:5], atol=1e-5)
    np.testing.assert_allclose(a.attentions["cross"][5], base.attentions["cross"][5], atol=1e-5)  # weights, not outputs
    assert abs(a.loss - base.loss) > 1e-3


def test_turkish_clip_with_a_given_target(whisper):
    r = A.analyze_wav(whisper, TR_WAV, language="tr", target="Kedi fareyi kovaladı.")
    a = r.analysis
    assert r.transcript == "Kedi fareyi kovaladı." and a.target_tokens[1].label == "<|tr|>"
    assert [w.text for w in a.target_words] == ["Kedi", "fareyi", "kovaladı", "."]
    assert "".join(a.target_tokens[i].text for i in a.target_words[2].tokens) == "kovaladı"
    np.testing.assert_allclose(a.attentions["cross"].sum(-1), 1.0, atol=1e-4)
    assert a.attentions["cross"].shape == (6, 8, len(a.target_tokens), r.frames + 1)


def test_text_analysis_of_a_speech_model_is_a_clear_error(whisper):
    with pytest.raises(models.UnsupportedOperationError, match="analyze_audio"):
        models.analyze(whisper, "The cat chased the mouse")


@pytest.mark.parametrize("padding", ["column", "renormalize"])
def test_weights_on_demand_equal_eager_for_every_layer(whisper, english, padding):
    """keep=False: nothing n² is held; every layer of every stack, replayed and cropped block by block, equals
    Whisper's eager output_attentions cropped the same way, and the kept analysis' weights."""
    from transformers import WhisperForConditionalGeneration

    off = [("encoder", 2, 1), ("cross", 1, 3)]
    kw = dict(language="en", target=english.transcript, heads_off=off, padding=padding)
    lazy = A.analyze_wav(whisper, EN_WAV, keep=False, **kw)
    kept = A.analyze_wav(whisper, EN_WAV, keep=True, **kw)
    a, k = lazy.analysis, kept.analysis
    assert all(s.on_demand for s in a.attentions.values()) and not any(s.on_demand for s in k.attentions.values())
    assert a.loss == pytest.approx(k.loss, abs=1e-4)  # the fused kernel, to float rounding
    eager = WhisperForConditionalGeneration.from_pretrained(str(whisper.folder), attn_implementation="eager").eval()
    feats = whisper.processor.feature_extractor(A.read_wav(EN_WAV)[0], sampling_rate=16000, return_tensors="pt")
    with torch.no_grad():
        gates = {}
        for stack, layer, head in off:  # the eager model with the same heads off: zero their slice of o_proj's input
            mod = (eager.model.encoder.layers[layer].self_attn if stack == "encoder"
                   else eager.model.decoder.layers[layer].encoder_attn)
            gates[mod.out_proj] = head
        hooks = [m.register_forward_pre_hook(lambda m, args, h=h: (args[0].unflatten(-1, (8, 64)).index_fill(
            -2, torch.tensor([h]), 0.0).flatten(-2),)) for m, h in gates.items()]
        out = eager(input_features=feats["input_features"],
                    decoder_input_ids=torch.tensor([[t.id for t in a.target_tokens]]), output_attentions=True)
        for hook in hooks:
            hook.remove()
    n, pad = lazy.frames, padding == "column"
    ref = {"encoder": [A._crop(w[0], n, True, True, pad) for w in out.encoder_attentions],
           "decoder": [w[0] for w in out.decoder_attentions],
           "cross": [A._crop(w[0], n, False, True, pad) for w in out.cross_attentions]}
    for stack, layers in ref.items():
        assert a.attentions[stack].shape == k.attentions[stack].shape == (6, 8) + tuple(layers[0].shape[1:])
        every = np.asarray(a.attentions[stack])  # one replay for the stack (indexing a layer is tested on tiny models)
        for layer, want in enumerate(layers):
            got = every[layer]
            np.testing.assert_allclose(got, want.numpy(), atol=1e-5, rtol=0, err_msg=f"{stack} {layer}")
            np.testing.assert_allclose(got, k.attentions[stack][layer], atol=1e-6, rtol=0)
            if stack != "encoder" or not pad:  # every row but the padding frames' mean: the very bits kept
                assert np.array_equal(got, k.attentions[stack][layer]), (stack, layer)
            else:
                assert np.array_equal(got[:, :n], k.attentions[stack][layer][:, :n]), (stack, layer)
    for name in ("entropy", "distance"):
        np.testing.assert_allclose(a.statistics["encoder"][name], k.statistics["encoder"][name], atol=1e-5)
    np.testing.assert_allclose(a.overview["cross"], k.overview["cross"], atol=1e-6)


def test_a_long_clip_keeps_no_weights(whisper):
    clip, rate = A.read_wav(EN_WAV)
    r = A.analyze_audio(whisper, np.tile(clip, 10), rate, language="en", max_new_tokens=8)
    enc = r.analysis.attentions["encoder"]
    assert r.frames > 600 and enc.on_demand and enc.shape == (6, 8, r.frames + 1, r.frames + 1)
    np.testing.assert_allclose(enc[5].sum(-1), 1.0, atol=1e-4)
    assert r.analysis.overview["encoder"].shape[-1] == 64
