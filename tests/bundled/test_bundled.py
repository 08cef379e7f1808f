"""Integration tests of the engine on the bundled real models (installed by `make test`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import models

SENTENCES = ["Kedi fareyi kovaladı", "The cat chased the mouse", "İstanbul'da ışıklı şoförler, ÇOK güzel!"]


def _rejoin(a: models.Analysis) -> str:
    """Rebuild the input from the tokens' own spans: text between tokens is copied from the input."""
    out, pos = [], 0
    for tok in a.tokens:
        if tok.special:
            continue
        assert tok.start >= pos
        out.append(a.text[pos:tok.start])
        out.append(tok.text)
        assert tok.text == a.text[tok.start:tok.end]
        pos = tok.end
    out.append(a.text[pos:])
    return "".join(out)


@pytest.mark.parametrize("text", SENTENCES)
def test_minilm_shapes_and_labels(minilm, text):
    a = models.analyze(minilm, text)
    n = len(a.tokens)
    assert a.attentions["encoder"].shape == (6, 12, n, n)
    assert a.tokens[0].special and a.tokens[0].label == "[CLS]" and a.tokens[-1].label == "[SEP]"
    assert _rejoin(a) == text
    assert a.embedding.shape == (384,)


def test_minilm_words_of_kedi_fareyi_kovaladi(minilm):
    a = models.analyze(minilm, "Kedi fareyi kovaladı")
    assert [w.text for w in a.words] == ["Kedi", "fareyi", "kovaladı"]  # C04
    assert "".join(a.tokens[i].text for i in a.words[2].tokens) == "kovaladı"
    assert len(a.words[2].tokens) > 1


@pytest.mark.parametrize("text", SENTENCES)
def test_C02_smollm2_is_causal_with_exact_labels(smollm2, text):
    a = models.analyze(smollm2, text)
    n = len(a.tokens)
    w = a.attentions["decoder"]
    assert w.shape == (30, 9, n, n)
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-5)
    iu = np.triu_indices(n, 1)
    assert (w[..., iu[0], iu[1]] == 0).all()
    assert _rejoin(a) == text
    labels = "".join(t.text for t in a.tokens)
    assert "Ä" not in labels and "Ġ" not in labels  # byte-level forms never leak into labels


def test_smollm2_predicts_plausible_english(smollm2):
    a = models.analyze(smollm2, "The cat chased the")
    top = [s.strip().lower() for s in a.next_token.tokens[-1]]
    assert {"mouse", "cat", "dog", "rat", "bird", "ball"} & set(top[:10]), top
    assert 0 < a.next_token.probs[-1, 0] <= 1 and a.loss > 0
    assert a.kv_heads == 3


def test_smollm2_second_load_reads_safetensors_not_gguf(smollm2):
    """A new process loads the cached safetensors: GGUF parsing is made to fail and must not be hit."""
    code = (
        "import time, transformers.modeling_gguf_pytorch_utils as g\n"
        "def boom(*a, **k): raise AssertionError('GGUF reparsed')\n"
        "g.load_gguf_checkpoint = boom\n"
        "import models\n"
        "t = time.perf_counter(); m = models.load('smollm2-135m', device='cpu')\n"
        "print(round(time.perf_counter() - t, 2))\n"
    )
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    print("smollm2 cached load seconds:", out.stdout.strip().splitlines()[-1])


def test_cli_on_default_model():
    out = subprocess.run(
        [sys.executable, "-m", "models", "analyze", "--model", "minilm-l6", "--text", "Kedi fareyi kovaladı"],
        capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=os.getcwd()),
    )
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads(out.stdout)
    n = len(summary["tokens"])
    assert summary["attentions"]["encoder"] == [6, 12, n, n] and summary["words"] == ["Kedi", "fareyi", "kovaladı"]


def test_smollm2_reads_4096_tokens_with_weights_on_demand(smollm2):
    """Issue 10: a 4,096-token text is not cut (the model reads 8,192); no layers x heads x n² array is held;
    the weights of a layer, computed when indexed, are causal with rows summing to 1; the statistics and
    the overview cover every head."""
    from models import budget

    text = "The cat chased the mouse across the old garden while the dog slept in the warm sun. " * 300
    a = models.analyze(smollm2, text, max_tokens=4096)
    n = len(a.tokens)
    assert n == 4096 and a.truncated > 0 and not a.kept
    assert a.attentions["decoder"].shape == (30, 9, n, n)
    assert budget.nbytes(a, skip=(models.LoadedModel,)) < 64 * 2 ** 20  # vs 30·9·4096²·4 B = 16.9 GiB
    for layer, head in ((0, 4), (29, 8)):
        w = a.attentions["decoder"][layer, head]
        assert w.shape == (n, n)
        np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-4)
        assert not np.triu(w, 1).any()  # causal: nothing above the diagonal
    assert a.overview["decoder"].shape == (30, 9, 64, 64)
    np.testing.assert_allclose(a.overview["decoder"].sum(-1), 1.0, atol=1e-4)
    for name, values in a.statistics["decoder"].items():
        assert values.shape == (30, 9), name
        if name != "same_word":  # every English word here is one token: no query has a same-word partner
            assert np.isfinite(values).all(), name
    assert np.isnan(a.statistics["decoder"]["same_word"]).all()
    assert a.next_token.ids.shape == (n, 10) and 0 < a.loss < 10
    assert models.default_max_tokens(smollm2) == 8192  # without max_tokens: cut at the model's own limit only
