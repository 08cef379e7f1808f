"""viz.masks / viz.alignment: empty rows drawn as such, special-token filter, word merge, alignment rows."""

from __future__ import annotations

import json

import numpy as np
import pytest

import models
from models.analysis import compare
from viz import alignment as va
from viz import masks as vm


def test_mask_figure_marks_empty_rows_and_keeps_duplicate_labels():
    m = np.array([[False, False, False], [True, True, False], [True, True, True]])
    fig = vm.mask_figure(m, ["the", "cat", "the"], ["the", "cat", "the"], empty_label="no key allowed")
    spec = json.loads(fig.to_json())
    assert spec["layout"]["yaxis"]["ticktext"] == ["the", "cat", "the"]  # index axes: "the" twice survives
    hatches = [tr for tr in spec["data"] if tr.get("fill") == "toself"]
    assert len(hatches) == 1 and sorted(set(hatches[0]["y"])) == [-0.5, 0.5]  # row 0 only
    assert [a["text"] for a in spec["layout"]["annotations"]] == ["<b>no key allowed</b>"]
    with pytest.raises(ValueError):
        vm.mask_figure(m, ["a", "b"], ["a", "b", "c"])


def test_attention_figure_empty_row_zero_not_nan():
    w = np.array([[np.nan, np.nan], [0.3, 0.7]])
    fig = vm.attention_figure(w, ["a", "b"], ["a", "b"], mask=np.array([[False, False], [True, True]]))
    z = np.asarray(fig.data[0].z, dtype=float)
    assert np.isfinite(z).all() and z[0].sum() == 0.0
    assert sum(1 for tr in fig.data if getattr(tr, "fill", None) == "toself") == 1


def test_hide_special_renormalises_and_never_nan():
    w = np.array([[0.5, 0.25, 0.25], [0.2, 0.3, 0.5], [1.0, 0.0, 0.0]])
    out, q_keep, k_keep = va.hide_special(w, [False, False, False], [True, False, False])
    assert list(k_keep) == [1, 2] and list(q_keep) == [0, 1, 2]
    np.testing.assert_allclose(out, [[0.5, 0.5], [0.375, 0.625], [0.0, 0.0]])  # last row: nothing left -> 0
    out, q_keep, _ = va.hide_special(w, [True, False, False], [True, False, False], renormalise=False)
    np.testing.assert_allclose(out, [[0.3, 0.5], [0.0, 0.0]])
    same = va.renormalise_without(w, [True, False, False])
    assert same.shape == w.shape and np.all(same[:, 0] == 0)
    np.testing.assert_allclose(same[:2].sum(-1), 1.0)


def test_word_attention_sum_to_mean_from():
    w = np.array([[0.1, 0.2, 0.7], [0.3, 0.3, 0.4]])
    out = va.word_attention(w, [(0, 1)], [(0,), (1, 2)])
    np.testing.assert_allclose(out, [[0.2, 0.8]])  # mean of rows, sum of columns 1+2


def test_alignment_figure_draws_strongest_line_per_target_word():
    w = np.array([[0.05, 0.95], [0.06, 0.04]])
    fig = va.alignment_figure(w, ["cat", "the"], ["kedi", "fare"], threshold=0.5)
    lines = [tr for tr in fig.data if tr.mode == "lines"]
    # cat->fare (0.95 >= threshold) and the->kedi (below threshold, but the strongest for "the")
    assert sorted(tr.hovertext.split(":")[0] for tr in lines) == ["cat → fare", "the → kedi"]


def test_produced_word_rows_shift_by_start_token(tiny):
    """Cross-attention row i is produced while predicting target token i (decoder input shifted right)."""
    a = models.analyze(tiny("marian"), "kedi fareyi kovaladı", target="the cat chased a mouse")
    rows = compare.produced_word_rows(a)
    assert [w for w, _ in rows] == ["the", "cat", "chased", "a", "mouse"]
    assert a.target_tokens[0].special  # decoder start token
    assert rows[0][1] == (0,)  # "the" is produced at the start token's position
    for (_, positions), word in zip(rows, a.target_words):
        assert positions == tuple(i - 1 for i in word.tokens)
    assert compare.produced_word_rows(models.analyze(tiny("gpt2"), "the cat")) == []


def test_gqa_figure_groups():
    fig = vm.gqa_figure([(0, 1, 2), (3, 4, 5), (6, 7, 8)])
    lines = [tr for tr in fig.data if tr.mode == "lines"]
    assert len(lines) == 9
    # every query head's line ends at the centre of its group's key/value head
    ends = sorted({(tr.x[0], tr.x[1]) for tr in lines})
    assert ends[:3] == [(0, 1.0), (1, 1.0), (2, 1.0)] and ends[-1] == (8, 7.0)


def test_spectrogram_attention_figure_time_axis():
    """Spectrogram columns every 10 ms and encoder frames every 20 ms share one time axis; peaks sit at
    the centre of their frame."""
    from viz import audio_alignment as vaa

    spec = np.zeros((80, 10))
    w = np.zeros((2, 5))
    w[0, 1] = w[1, 4] = 1.0
    fig = vaa.spectrogram_attention_figure(spec, w, ["cat", "cat"], frame_seconds=0.02, peaks=w.argmax(-1))
    np.testing.assert_allclose(fig.data[0].x[[0, -1]], [0.005, 0.095])
    np.testing.assert_allclose(fig.data[1].x[[0, -1]], [0.01, 0.09])
    np.testing.assert_allclose(fig.data[2].x, [0.03, 0.09])
    assert list(fig.layout.yaxis2.ticktext) == ["cat", "cat"]
    with pytest.raises(ValueError):
        vaa.spectrogram_attention_figure(spec, w, ["one"], frame_seconds=0.02)


def test_produced_tokens_end_label(tiny):
    a = models.analyze(tiny("t5"), "kedi fareyi kovaladı", target="the cat")
    produced = compare.produced_tokens(a, end_label="</s>")
    assert [p for p, _ in produced] == [tok.label for tok in a.target_tokens[1:]] + ["</s>"]
    assert produced[-1][1] is True


def test_renormalised_note_gets_its_own_title_line_and_room():
    """Three narrow figures side by side cut a long title; the note goes on a second line, and the top
    margin grows by one title line for it."""
    from viz.masks import attention_figure

    w = np.full((3, 3), 1 / 3)
    plain = attention_figure(w, list("abc"), list("abc"), title="attention, layer 2, mean of heads")
    noted = attention_figure(w, list("abc"), list("abc"), title="attention, layer 2, mean of heads",
                             renormalised=True, renormalised_label="renormalised")
    assert noted.layout.title.text == "attention, layer 2, mean of heads"
    assert noted.layout.title.subtitle.text == "renormalised" and not plain.layout.title.subtitle.text
    assert noted.layout.margin.t == plain.layout.margin.t + 22


def test_key_labels_are_thinned_for_narrow_panels_keeping_the_last():
    """Issue 13: five panels a row at 1280 px drew 24 vertical key labels over 8-px cells, on top of each
    other. At most about MAX_KEY_TICKS non-empty labels are drawn, the last (end token, padding column) always."""
    from viz.masks import MAX_KEY_TICKS, _axis, attention_figure

    assert _axis(list("abcdefghi"), MAX_KEY_TICKS)["tickvals"] == list(range(9))
    ticks = _axis([f"t{i}" for i in range(24)], MAX_KEY_TICKS)["tickvals"]
    assert len(ticks) <= MAX_KEY_TICKS + 1 and ticks[0] == 0 and ticks[-1] == 23
    frames = [f"{i}" if i % 10 == 0 else "" for i in range(150)] + ["<|padding|>"]
    ticks = _axis(frames, MAX_KEY_TICKS)["tickvals"]
    assert ticks[-1] == 150 and all(frames[i] for i in ticks) and len(ticks) <= MAX_KEY_TICKS + 1
    fig = attention_figure(np.full((2, 24), 1 / 24), ["a", "b"], [f"t{i}" for i in range(24)])
    assert fig.layout.xaxis.ticktext[-1] == "t23" and len(fig.layout.xaxis.ticktext) <= MAX_KEY_TICKS + 1
