"""A decoder's next-token readout may not see its target (issue 47 point 5): XLNet's language-model head without a
permutation mask lets every position attend every other, so its "prediction" at position i read token i + 1. Such
a model keeps its attention maps (its own) and loses the readout, with a note that the sidebar says in both
languages; a causal decoder keeps its readout."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import models
from tiny import _tokenizer, build_tiny
from conftest import ROOT


@pytest.fixture(scope="module")
def xlnet(tmp_path_factory):
    import transformers as tf

    folder = tmp_path_factory.mktemp("xlnet")
    config = tf.XLNetConfig(vocab_size=320, d_model=32, n_layer=2, n_head=4, d_inner=64, bos_token_id=5,
                            eos_token_id=6, pad_token_id=0)
    torch.manual_seed(0)
    tf.XLNetLMHeadModel(config).eval().save_pretrained(str(folder))
    _tokenizer(folder, "decoder")
    return models.load(str(folder))


def test_a_readout_that_sees_its_target_is_taken_away(xlnet):
    assert (xlnet.family, xlnet.head) == ("decoder", "none")
    assert [n["code"] for n in xlnet.notes] == ["readout_sees_target"]
    a = models.analyze(xlnet, "the cat chased the mouse", keep_logits=True)
    assert a.next_token is None and a.logits is None  # no prediction shown
    w = np.asarray(a.attentions["decoder"])
    assert (w[..., np.triu(np.ones(w.shape[-2:], dtype=bool), 1)] > 0).any()  # why: later tokens are attended
    assert np.allclose(w.sum(-1), 1, atol=1e-5)  # the maps themselves are the model's


def test_a_causal_decoder_keeps_its_readout(tmp_path):
    loaded = models.load(str(build_tiny("gpt2", tmp_path / "gpt2")))
    assert loaded.head == "lm" and loaded.notes == []
    assert models.analyze(loaded, "the cat chased the mouse").next_token is not None


def test_the_note_is_said_in_both_languages():
    strings = json.loads((ROOT / "assets" / "i18n" / "sidebar.json").read_text(encoding="utf-8"))
    said = strings["device_readout_sees_target"]
    assert said["en"] and said["tr"] and said["en"] != said["tr"]


def test_a_model_without_its_readout_is_pruned_by_its_last_hidden_state(xlnet):
    """Head pruning measures such a model as one without a head (``embedding_distance``): the mean-pooled last hidden
    state, which its language-model class returns only when asked (a TypeError inside before)."""
    from models import pruning
    from models.pruning.effects import embed

    text = "the cat chased the mouse"
    assert pruning.metric_kind(xlnet) == "embedding_distance"
    prep = pruning.prepare(xlnet, text)
    ids = torch.tensor([[t for t in xlnet.tokenizer(text)["input_ids"]]])
    with torch.no_grad():
        last = xlnet.model(input_ids=ids, output_hidden_states=True).hidden_states[-1][0].mean(0)
    np.testing.assert_allclose(prep.reference.numpy(), (last / last.norm()).numpy(), atol=1e-6)
    scores = pruning.ablation_scores(xlnet, text)
    values = scores.values["decoder"]
    assert scores.metric == "embedding_distance" and np.isfinite(values).all() and (np.abs(values) > 0).any()
    assert embed(xlnet, [text]).shape == (1, 32)
