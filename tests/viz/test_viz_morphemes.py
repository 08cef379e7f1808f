"""Explore's morpheme level as pure functions (viz/morphemes.py) against hand-computed cases: a fake analysis of
``[CLS] x y1 y2 [SEP]`` whose word ``xy`` is two morphemes, ``x`` + ``y``, with the piece ``y1`` straddling them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
import pytest

from viz.heatmap import head_heatmap
from viz.head_view import head_view_data, head_view_html
from viz.morphemes import (LevelAxis, UnitsPrepared, heatmap_hover, legend_lines, merge_units, panel_hover,
                           prepare_units, straddling_pieces, unit_description, unit_hover, word_axis)
from viz.prepare import prepare


@dataclass(frozen=True)
class Tok:
    text: str
    label: str
    special: bool
    segment: int = 0


@dataclass(frozen=True)
class Morph:
    text: str
    kind: str
    label: str
    word: int
    tags: tuple = ()


@dataclass(frozen=True)
class Units:
    membership: np.ndarray
    labels: list
    morphemes: list


class FakeAnalysis:
    """``[CLS] x y1 y2 [SEP]``; one layer, two heads of row-stochastic weights."""

    def __init__(self):
        rng = np.random.default_rng(1)
        w = rng.random((1, 2, 5, 5)).astype(np.float32)
        self.attentions = {"encoder": w / w.sum(-1, keepdims=True)}
        self.tokens = [Tok("[CLS]", "[CLS]", True), Tok("x", "x", False), Tok("y1", "y1", False),
                       Tok("y2", "y2", False), Tok("[SEP]", "[SEP]", True)]

    def axis_tokens(self, stack):
        return self.tokens, self.tokens

    def axis_words(self, stack):
        return [], []


STEM = Morph("xy", "stem", "Noun", 0, ("Noun",))
SUFFIX = Morph("yy", "suffix", "Acc", 0, ("Acc",))
# pieces -> units [CLS], stem, suffix, [SEP]: y1 half in the stem, half in the suffix
M = np.array([[1, 0, 0, 0],
              [0, 1, 0, 0],
              [0, 0.5, 0.5, 0],
              [0, 0, 1, 0],
              [0, 0, 0, 1]], dtype=np.float32)
UNITS = Units(M, ["[CLS]", "xy", "yy", "[SEP]"], [None, STEM, SUFFIX, None])
NAMES = {"Noun": "noun", "Acc": "accusative", "Past": "past", "A3sg": "3sg"}.get
KINDS = {"stem": "stem", "suffix": "suffix", "unknown": "unknown word", "punct": "punctuation"}


def test_keys_summed_queries_averaged_by_share_and_rows_still_sum_to_one():
    a = FakeAnalysis()
    w = a.attentions["encoder"][0, 0].astype(np.float64)
    p = prepare_units(a, "encoder", UNITS)
    assert isinstance(p, UnitsPrepared)
    assert p.q_labels == p.k_labels == ["[CLS]", "xy", "yy", "[SEP]"]
    assert p.q_index == [(0,), (1, 2), (2, 3), (4,)] and p.k_index == p.q_index
    assert p.q_shares[1] == (1.0, 0.5) and p.q_units == [None, STEM, SUFFIX, None]
    # the stem's row: the mean of x's row (share 1) and half of y1's row (share 0.5), weighted by share
    row = (1.0 * w[1] + 0.5 * w[2]) / 1.5
    want = [row[0], row[1] + 0.5 * row[2], 0.5 * row[2] + row[3], row[4]]
    np.testing.assert_allclose(p.weights[0, 0, 1], want, rtol=1e-5)
    np.testing.assert_allclose(p.weights.sum(-1), 1.0, rtol=1e-5)
    assert p.weights.shape == (1, 2, 4, 4) and p.weights.dtype == np.float32


def test_whole_pieces_give_exactly_the_word_level():
    """Every entry 0 or 1: the rule is merge_words's (keys summed, queries averaged)."""
    from viz.transforms import merge_words

    a = FakeAnalysis()
    whole = Units(np.array([[1, 0, 0], [0, 1, 0], [0, 1, 0], [0, 1, 0], [0, 0, 1]], dtype=np.float32),
                  ["[CLS]", "xyy", "[SEP]"], [None, STEM, None])
    p = prepare_units(a, "encoder", whole)
    units = [(0,), (1, 2, 3), (4,)]
    np.testing.assert_allclose(p.weights, merge_words(a.attentions["encoder"], units, units), rtol=1e-6)


def test_hidden_special_tokens_drop_their_units_and_the_rest_renormalise():
    a = FakeAnalysis()
    p = prepare_units(a, "encoder", UNITS, hide_special=True, mode="avg")
    assert p.renormalised and p.q_labels == ["xy", "yy"] and p.weights.shape == (1, 1, 2, 2)
    base = prepare(a, "encoder", hide_special=True, mode="avg").weights[0, 0].astype(np.float64)  # x, y1, y2
    row = (base[0] + 0.5 * base[1]) / 1.5
    np.testing.assert_allclose(p.weights[0, 0, 0], [row[0] + 0.5 * row[1], 0.5 * row[1] + row[2]], rtol=1e-5)
    np.testing.assert_allclose(p.weights.sum(-1), 1.0, rtol=1e-5)


def test_a_window_of_rows_keeps_the_units_it_touches():
    a = FakeAnalysis()
    p = prepare_units(a, "encoder", UNITS, layer=0, rows=(3, 5))
    assert p.q_labels == ["yy", "[SEP]"] and p.q_index == [(3,), (4,)]
    assert p.k_labels == ["[CLS]", "xy", "yy", "[SEP]"]
    np.testing.assert_allclose(p.weights.sum(-1), 1.0, rtol=1e-5)


def test_a_membership_of_the_wrong_size_is_refused():
    with pytest.raises(ValueError, match="memberships of 3 query"):
        prepare_units(FakeAnalysis(), "encoder", Units(M[:3], UNITS.labels, UNITS.morphemes))


def test_descriptions_hover_and_legend():
    past = Morph("dı", "suffix", "Past", 1, ("Past", "A3sg"))
    assert unit_description(SUFFIX, NAMES, KINDS) == "accusative"
    assert unit_description(past, NAMES, KINDS) == "past + 3sg"
    assert unit_description(STEM, NAMES, KINDS) == "stem: noun"
    assert unit_description(None, NAMES, KINDS) == ""
    assert unit_hover(["[CLS]", "yy"], [None, SUFFIX], NAMES, KINDS) == ["[CLS]", "yy — accusative"]
    units = [None, Morph("Kedi", "stem", "Noun", 5), STEM, SUFFIX, Morph("kovala", "stem", "Verb", 1), past,
             Morph("Zyx", "unknown", "Unk", 3), Morph(".", "punct", "Punc", 4), None]
    lines, more = legend_lines(units, NAMES, KINDS)
    assert lines == ["xyyy = xy + yy (accusative)", "kovaladı = kovala + dı (past + 3sg)", "Zyx (unknown word)"]
    assert not more
    assert legend_lines(units, NAMES, KINDS, most=1) == (lines[:1], True)
    # a sentence pair numbers its words apart: word 0 of sentence B is another word
    two, _ = legend_lines([STEM, SUFFIX, STEM, SUFFIX], NAMES, KINDS, segments=[0, 0, 1, 1])
    assert two == ["xyyy = xy + yy (accusative)"] * 2


def test_straddling_pieces_and_heatmap_hover():
    a = FakeAnalysis()
    assert straddling_pieces(a.tokens, [False, False, True, False, False]) == ["y1"]
    fig = head_heatmap(np.eye(2, dtype=np.float32), ["xy", "<b>"], ["xy", "yy"])
    heatmap_hover(fig, ["xy — stem: noun", "<b>"], ["xy — stem: noun", "yy — accusative"])
    custom = np.asarray(fig.data[0].customdata)
    assert custom[0, 1, 1] == "yy — accusative" and custom[1, 0, 0] != "<b>"  # escaped for plotly, as the labels
    assert list(fig.layout.xaxis.ticktext) == ["xy", "yy"]  # the axes keep the morphemes' text
    with pytest.raises(ValueError):
        heatmap_hover(fig, ["a"], ["b", "c"])
    bare = go.Figure(go.Heatmap(z=np.eye(2)))
    assert heatmap_hover(bare, ["a", "b"], ["c", "d"]).data[0].customdata is None
    assert heatmap_hover(fig, None, None) is fig  # not the morpheme level: as it was


@dataclass(frozen=True)
class Word:
    text: str
    tokens: tuple


def test_word_axis_groups_a_words_pieces_and_keeps_the_rest_alone():
    a = FakeAnalysis()
    axis = word_axis(a.tokens, [Word("x", (1,)), Word("yy", (2, 3))])
    assert isinstance(axis, LevelAxis) and axis.labels == ["[CLS]", "x", "yy", "[SEP]"]
    np.testing.assert_array_equal(axis.membership, [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 1, 0],
                                                    [0, 0, 0, 1]])
    assert axis.morphemes == [None] * 4 and axis.segments == [0] * 4
    with pytest.raises(ValueError):
        word_axis(a.tokens, [Word("x", (1,)), Word("xy", (1, 2))])  # a piece in two words


def test_merge_units_sums_keys_and_averages_queries_by_share():
    """By hand on one map: the word level equals merge_words; a straddling piece counts in each unit by its share;
    a map of contributions (not rows of 1) gives each unit's contributions added up."""
    from viz.transforms import merge_words

    w = FakeAnalysis().attentions["encoder"][0, 1].astype(np.float64)
    words = word_axis(FakeAnalysis().tokens, [Word("x", (1,)), Word("yy", (2, 3))])
    units = [(0,), (1,), (2, 3), (4,)]
    np.testing.assert_allclose(merge_units(w, words), merge_words(w, units, units), rtol=1e-6)
    got = merge_units(w, UNITS, UNITS)
    row = (1.0 * w[1] + 0.5 * w[2]) / 1.5  # the stem's row: x (share 1) and half of y1
    np.testing.assert_allclose(got[1], [row[0], row[1] + 0.5 * row[2], 0.5 * row[2] + row[3], row[4]], rtol=1e-5)
    np.testing.assert_allclose(got.sum(-1), 1.0, rtol=1e-5)
    norms = 3.0 * w  # contributions: the suffix column of [CLS]'s row = half of y1's + y2's
    assert merge_units(norms, UNITS)[0, 2] == pytest.approx(3.0 * (0.5 * w[0, 2] + w[0, 3]), rel=1e-5)
    assert got.dtype == np.float32 and merge_units(np.stack([w, w]), UNITS).shape == (2, 4, 4)
    with pytest.raises(ValueError, match="do not match"):
        merge_units(w, M[:3])
    with pytest.raises(ValueError, match="no piece"):
        merge_units(w, np.hstack([M, np.zeros((5, 1), dtype=np.float32)]))


def test_panel_hover_names_the_units_in_every_panel():
    from viz.pruning import attention_before_after

    fig = attention_before_after(np.eye(2), np.eye(2) * 0.5, ["xy", "<b>"], ["xy", "yy"])
    panel_hover(fig, ["xy — stem: noun", "<b>"], ["xy — stem: noun", "yy — accusative"])
    assert len(fig.data) == 3
    for trace in fig.data:
        custom = np.asarray(trace.customdata)
        assert custom[0, 1, 1] == "yy — accusative" and custom[1, 0, 0] == "&lt;b&gt;"  # escaped for plotly
        assert "%{customdata[0]}" in trace.hovertemplate and "%{y}" not in trace.hovertemplate
    with pytest.raises(ValueError):
        panel_hover(fig, ["a"], ["b", "c"])
    bare = attention_before_after(np.eye(2), np.eye(2), ["a", "b"], ["c", "d"])
    assert panel_hover(bare, None, None).data[0].customdata is None  # not the morpheme level: as it was


def test_the_head_view_tooltip_names_each_morpheme():
    """The head view's labels stay the morphemes' text; the tooltip of each is its hover text (the position first,
    written by assets/headview.js), sent as data, never markup."""
    w = np.full((1, 2, 2), 0.5, dtype=np.float32)
    data = head_view_data(w, ["xy", "yy"], ["xy", "yy"], head_names=["0"],
                          query_hover=["xy — stem: noun", "yy — accusative"], key_hover=["xy — stem: noun", "<b>"])
    assert data["q"] == ["xy", "yy"] and data["qhover"] == ["xy — stem: noun", "yy — accusative"]
    assert data["khover"] == ["xy — stem: noun", "<b>"]
    assert "qhover" not in head_view_data(w, ["xy", "yy"], ["xy", "yy"], head_names=["0"])  # the token level
    with pytest.raises(ValueError):
        head_view_data(w, ["xy", "yy"], ["xy", "yy"], head_names=["0"], query_hover=["one"])
    doc = head_view_html(w, ["xy", "yy"], ["xy", "yy"], head_names=["0"], query_hover=["a", "b"],
                         key_hover=["c", "<b>"])
    assert "\\u003cb\\u003e" in doc and "<b>" not in doc  # escaped inside the data block
    assert "tips ? tips[i] : label" in doc  # the script reads the tooltips
