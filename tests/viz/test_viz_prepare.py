"""Explore's options pipeline as a pure function (viz/prepare.py) against hand-computed 5-token cases."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from viz.prepare import prepare


@dataclass(frozen=True)
class Tok:
    text: str
    label: str
    special: bool
    segment: int = 0


@dataclass(frozen=True)
class Wd:
    text: str
    start: int
    end: int
    segment: int
    tokens: tuple


class FakeAnalysis:
    """[CLS] x y1 y2 [SEP]; words: x = (1,), y = (2, 3); one layer, two heads of row-stochastic weights."""

    def __init__(self):
        rng = np.random.default_rng(0)
        w = rng.random((1, 2, 5, 5)).astype(np.float32)
        self.attentions = {"encoder": w / w.sum(-1, keepdims=True)}
        self.tokens = [Tok("[CLS]", "[CLS]", True), Tok("x", "x", False), Tok("y1", "y1", False),
                       Tok("y2", "y2", False), Tok("[SEP]", "[SEP]", True)]
        self.words = [Wd("x", 0, 1, 0, (1,)), Wd("y", 2, 4, 0, (2, 3))]

    def axis_tokens(self, stack):
        return self.tokens, self.tokens

    def axis_words(self, stack):
        return self.words, self.words


def test_hide_special_then_words_by_hand():
    a = FakeAnalysis()
    w = a.attentions["encoder"][0, 1]
    kept = w[1:4, 1:4] / w[1:4, 1:4].sum(-1, keepdims=True)  # rows renormalised over x, y1, y2
    want = np.array([[kept[0, 0], kept[0, 1] + kept[0, 2]],  # x -> x, x -> y (sum over y's keys)
                     [kept[1:, 0].mean(), (kept[1:, 1] + kept[1:, 2]).mean()]])  # y's rows averaged
    p = prepare(a, "encoder", hide_special=True, words=True)
    assert p.renormalised and p.q_labels == ["x", "y"] and p.k_labels == ["x", "y"]
    assert p.q_index == [(1,), (2, 3)] and p.n_tokens == (5, 5)
    np.testing.assert_allclose(p.weights[0, 1], want, rtol=1e-6)
    np.testing.assert_allclose(p.weights.sum(-1), 1, rtol=1e-6)


def test_average_then_hide_first_and_a_window_of_rows():
    a = FakeAnalysis()
    mean = a.attentions["encoder"].mean(1)[0]
    p = prepare(a, "encoder", hide_first=True, mode="avg", layer=0, rows=(2, 4))
    want = mean[2:4, 1:] / mean[2:4, 1:].sum(-1, keepdims=True)  # the first key hidden; rows 2, 3 only
    assert p.weights.shape == (1, 1, 2, 4) and p.q_labels == ["y1", "y2"] and p.q_index == [(2,), (3,)]
    np.testing.assert_allclose(p.weights[0, 0], want, rtol=1e-6)


def test_no_option_is_the_weights_as_they_are():
    a = FakeAnalysis()
    p = prepare(a, "encoder")
    assert not p.renormalised and p.weights.dtype == np.float32
    np.testing.assert_array_equal(p.weights, a.attentions["encoder"])


def test_bad_options_say_what_is_wrong():
    import pytest

    a = FakeAnalysis()
    with pytest.raises(ValueError, match="mode must be one of heads, avg, rollout"):
        prepare(a, "encoder", mode="average")
    for rows in ((4, 1), (3, 50), (-1, 2)):
        with pytest.raises(ValueError, match="rows must be"):
            prepare(a, "encoder", rows=rows)
    with pytest.raises(IndexError, match="layer 1 is out of range: there are 1"):
        prepare(a, "encoder", layer=1)
    with pytest.raises(IndexError, match="head -3 is out of range"):
        prepare(a, "encoder", layer=0, head=-3)
    np.testing.assert_array_equal(prepare(a, "encoder", layer=-1, head=-1).weights,
                                  prepare(a, "encoder", layer=0, head=1).weights)


def test_rollout_of_some_rows_is_those_rows_of_the_rollout():
    from viz import transforms as tf

    a = FakeAnalysis()
    full = tf.rollout(a.attentions["encoder"])
    np.testing.assert_allclose(prepare(a, "encoder", mode="rollout", layer=0, rows=(1, 3)).weights, full[:, :, 1:3])


def test_value_weighting_by_hand():
    """Kobayashi et al. 2020: each weight times its key's ‖W_O v‖, rows renormalised; before the heads' mean and
    before hiding tokens; the same layer whole or asked for alone."""
    a = FakeAnalysis()
    norms = np.array([[[1.0, 2.0, 0.5, 1.0, 4.0], [3.0, 1.0, 1.0, 1.0, 1.0]]], dtype=np.float32)  # (1, 2, 5)
    w = a.attentions["encoder"][0]
    want = w * norms[0][:, None, :]
    want /= want.sum(-1, keepdims=True)
    p = prepare(a, "encoder", value_norms=norms)
    np.testing.assert_allclose(p.weights[0], want, rtol=1e-6)
    np.testing.assert_allclose(prepare(a, "encoder", value_norms=norms, layer=0, head=1).weights[0, 0], want[1],
                               rtol=1e-6)
    np.testing.assert_allclose(prepare(a, "encoder", value_norms=norms, mode="avg").weights[0, 0], want.mean(0),
                               rtol=1e-6)
    kept = want[0][1:4, 1:4] / want[0][1:4, 1:4].sum(-1, keepdims=True)
    np.testing.assert_allclose(prepare(a, "encoder", value_norms=norms, hide_special=True).weights[0, 0], kept,
                               rtol=1e-6)
    try:
        prepare(a, "encoder", value_norms=norms[:, :1])
    except ValueError as exc:
        assert "value_norms must be" in str(exc)
    else:
        raise AssertionError("a wrong shape was accepted")
