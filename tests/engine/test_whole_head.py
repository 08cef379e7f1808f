"""Switching a head off switches all of it off (issue 47 point 5, models/anatomy/whole_head.py): on the fallback
path, a layer whose heads reach the output beside their weights (Nyströmformer adds a depthwise convolution of each
head's values) is switched off where the heads meet, not at the softmax; one whose softmax gate removes the whole
head (ConvBERT, XLNet) keeps it. Either way the logits equal plain transformers' with the head's slice of the
output projection's input zeroed."""

from __future__ import annotations

import numpy as np
import pytest

import archsweep
import models

TEXT = "kedi fareyi kovaladı the cat chased the mouse"


@pytest.mark.parametrize("model_type, gate", [("nystromformer", "o_proj"), ("convbert", "softmax")])
def test_a_switched_off_head_is_wholly_off(model_type, gate, tmp_path):
    cls = archsweep.build(model_type, tmp_path / model_type)
    loaded = models.load(str(tmp_path / model_type), device="cpu")
    assert loaded.capture_path == "fallback"
    assert {s.gate for s in loaded.sites} == {gate}
    if gate == "o_proj":
        assert [s.o_proj for s in loaded.sites] == [
            f"nystromformer.encoder.layer.{i}.attention.output.dense" for i in range(len(loaded.sites))]
    a = models.analyze(loaded, TEXT, keep_logits=True)
    off = models.analyze(loaded, TEXT, heads_off=[("encoder", 0, 1)], keep_logits=True)
    want = archsweep._head_zeroed_logits(tmp_path / model_type, cls, a, "encoder", loaded.sites[0].heads, 1)
    assert np.abs(off.logits - want).max() < 1e-5
    assert np.abs(off.logits - a.logits).max() > 1e-4  # the head mattered
    back = models.analyze(loaded, TEXT, keep_logits=True)
    np.testing.assert_array_equal(back.logits, a.logits)
    # the maps are the model's own, switched off or not at the projection: head 1 still attends
    assert np.asarray(off.attentions["encoder"])[0, 1].sum() > 0


def test_before_the_fix_the_softmax_gate_left_part_of_the_head_on(tmp_path, monkeypatch):
    """What the sweep found: with the proof switched off, Nyströmformer's heads stay gated at the softmax and
    the logits are not those of the head switched off."""
    from models.anatomy import probe

    monkeypatch.setattr(probe, "incomplete_softmax_gates", lambda *args: {})
    cls = archsweep.build("nystromformer", tmp_path / "nys")
    loaded = models.load(str(tmp_path / "nys"), device="cpu")
    assert {s.gate for s in loaded.sites} == {"softmax"}
    a = models.analyze(loaded, TEXT, keep_logits=True)
    off = models.analyze(loaded, TEXT, heads_off=[("encoder", 0, 1)], keep_logits=True)
    want = archsweep._head_zeroed_logits(tmp_path / "nys", cls, a, "encoder", loaded.sites[0].heads, 1)
    assert np.abs(off.logits - want).max() > 1e-4
