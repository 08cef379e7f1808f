"""Unit tests of viz/transforms.py against hand-computed 3-token examples."""

from __future__ import annotations

import numpy as np
import pytest

from viz import transforms as tf

# One head's weights over 3 tokens; each row sums to 1.
W = np.array([[0.5, 0.3, 0.2],
              [0.1, 0.6, 0.3],
              [0.2, 0.2, 0.6]], dtype=np.float32)


def test_merge_words_sums_key_pieces_and_averages_query_pieces():
    """C04: tokens 1 and 2 are one word. Row of token 0: keys 1+2 summed -> [0.5, 0.5].
    Row of the word: mean of rows 1 and 2 after summing their keys: ([0.1, 0.9] + [0.2, 0.8]) / 2."""
    units = tf.word_units(3, [(1, 2)])
    assert units == [(0,), (1, 2)]
    merged = tf.merge_words(W, units, units)
    np.testing.assert_allclose(merged, [[0.5, 0.5], [0.15, 0.85]], atol=1e-6)
    np.testing.assert_allclose(merged.sum(-1), 1.0, atol=1e-6)


def test_merge_words_works_on_stacked_heads():
    stacked = np.stack([W, np.eye(3, dtype=np.float32)])[None]  # (1 layer, 2 heads, 3, 3)
    merged = tf.merge_words(stacked, [(0,), (1, 2)], [(0,), (1, 2)])
    assert merged.shape == (1, 2, 2, 2)
    np.testing.assert_allclose(merged[0, 1], [[1.0, 0.0], [0.0, 1.0]], atol=1e-6)


def test_word_units_rejects_overlap_and_out_of_range():
    with pytest.raises(ValueError):
        tf.word_units(3, [(0, 1), (1, 2)])
    with pytest.raises(ValueError):
        tf.word_units(3, [(3,)])


def test_special_filter_renormalises_rows():
    """Token 0 is special: drop its row and column, rows [0.6, 0.3] and [0.2, 0.6] renormalise to
    [2/3, 1/3] and [1/4, 3/4]."""
    keep = tf.keep_mask(3, drop_flags=[True, False, False])
    out = tf.filter_tokens(W, keep, keep)
    np.testing.assert_allclose(out, [[2 / 3, 1 / 3], [0.25, 0.75]], atol=1e-6)
    raw = tf.filter_tokens(W, keep, keep, renormalise=False)
    np.testing.assert_allclose(raw, [[0.6, 0.3], [0.2, 0.6]], atol=1e-6)


def test_filter_keeps_zero_rows_zero_not_nan():
    """A query whose only weight was on a hidden key stays all zeros (C03 on a causal first row)."""
    causal = np.array([[1.0, 0.0, 0.0], [0.9, 0.1, 0.0], [0.8, 0.1, 0.1]], dtype=np.float32)
    keep_q = np.ones(3, dtype=bool)
    keep_k = tf.keep_mask(3, drop=[0])
    out = tf.filter_tokens(causal, keep_q, keep_k)
    assert not np.isnan(out).any()
    np.testing.assert_allclose(out, [[0.0, 0.0], [1.0, 0.0], [0.5, 0.5]], atol=1e-6)


def test_rollout_hand_computed():
    """Abnar & Zuidema 2020 on 2 layers. Layer 0 has heads I and W (mean (I+W)/2), layer 1 heads W, W.
    A_l = 0.5 mean + 0.5 I; R_0 = A_0; R_1 = A_1 @ A_0 computed by hand."""
    eye = np.eye(3, dtype=np.float32)
    weights = np.stack([np.stack([eye, W]), np.stack([W, W])])  # (2, 2, 3, 3)
    out = tf.rollout(weights)
    assert out.shape == (2, 1, 3, 3)
    a0 = [[0.875, 0.075, 0.05], [0.025, 0.9, 0.075], [0.05, 0.05, 0.9]]
    np.testing.assert_allclose(out[0, 0], a0, atol=1e-6)
    r1 = [[0.665, 0.19625, 0.13875], [0.07125, 0.73125, 0.1975], [0.13, 0.1375, 0.7325]]
    np.testing.assert_allclose(out[1, 0], r1, atol=1e-6)
    np.testing.assert_allclose(out.sum(-1), 1.0, atol=1e-6)


def test_rollout_zero_row_becomes_identity_row_and_rejects_cross():
    weights = np.zeros((1, 1, 2, 2), dtype=np.float32)
    weights[0, 0, 1] = [0.5, 0.5]
    out = tf.rollout(weights)
    np.testing.assert_allclose(out[0, 0], [[1.0, 0.0], [0.25, 0.75]], atol=1e-6)
    with pytest.raises(ValueError):
        tf.rollout(np.zeros((1, 1, 2, 3)))


def test_average_heads():
    weights = np.stack([W, np.eye(3, dtype=np.float32)])[None]
    out = tf.average_heads(weights)
    assert out.shape == (1, 1, 3, 3)
    np.testing.assert_allclose(out[0, 0, 0], [0.75, 0.15, 0.1], atol=1e-6)


def test_pool_mean_over_query_bins_sum_over_key_bins():
    m = np.array([[1.0, 0.0, 0.0, 0.0],
                  [0.5, 0.5, 0.0, 0.0],
                  [0.2, 0.2, 0.6, 0.0],
                  [0.1, 0.1, 0.1, 0.7]], dtype=np.float32)
    out = tf.pool(m, 2)
    np.testing.assert_allclose(out, [[1.0, 0.0], [0.3, 0.7]], atol=1e-6)
    assert tf.pool(m, 8).shape == (4, 4)


def test_head_statistics_hand_computed():
    """Tokens: [CLS] a ##b (word of tokens 1, 2) and '.' would be punctuation; here key 2 is flagged."""
    weights = W[None, None]
    stats = tf.head_statistics(weights, special=[True, False, False], punctuation=[False, False, True],
                               word_of=[-1, 0, 0])
    ent = -(W * np.log(W)).sum(-1).mean()
    assert stats["entropy"][0, 0] == pytest.approx(ent, rel=1e-5)
    # distance: row0 0.3*1+0.2*2=0.7; row1 0.1+0.3=0.4; row2 0.2*2+0.2=0.6 -> mean 0.5667
    assert stats["distance"][0, 0] == pytest.approx((0.7 + 0.4 + 0.6) / 3, rel=1e-5)
    assert stats["previous"][0, 0] == pytest.approx((0.1 + 0.2) / 2, rel=1e-5)
    assert stats["first"][0, 0] == pytest.approx((0.5 + 0.1 + 0.2) / 3, rel=1e-5)
    assert stats["special"][0, 0] == pytest.approx((0.5 + 0.1 + 0.2) / 3, rel=1e-5)
    assert stats["punctuation"][0, 0] == pytest.approx((0.2 + 0.3 + 0.6) / 3, rel=1e-5)
    # same word: query 1 -> key 2 (0.3), query 2 -> key 1 (0.2)
    assert stats["same_word"][0, 0] == pytest.approx(0.25, rel=1e-5)


def test_is_punctuation():
    assert tf.is_punctuation(".") and tf.is_punctuation("?!") and tf.is_punctuation(" ,")
    assert not tf.is_punctuation("ı") and not tf.is_punctuation("") and not tf.is_punctuation("a.")
