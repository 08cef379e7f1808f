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
