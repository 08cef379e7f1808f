"""Experiment 3 (issue 15): what BERT's heads look at (Clark et al. 2019) and Kovaleva et al.'s (2019) map types,
on a tiny random BERT (against a direct computation), on hand-made maps, and on the bundled encoders."""

from __future__ import annotations

import numpy as np
import pytest

import models
from models.errors import InvalidArgumentError, UnsupportedOperationError
from models.experiments import bert_heads, clark, patterns

TINY_SENTENCES = ["kedi fareyi kovaladı.", "the cat chased the mouse, a cat."]


# ------------------------------------------------------------------------------------------- tiny random BERT


def _direct(loaded, sentences):
    """Per-head shares computed straight from ``models.analyze(...).attentions``: every query of every sentence
    weighs the same; previous over q >= 1, next over q <= n - 2."""
    sums, counts = {}, {}
    for text in sentences:
        a = models.analyze(loaded, text)
        w = np.asarray(a.attentions["encoder"][:], dtype=np.float64)  # (layers, heads, n, n)
        n = w.shape[-1]
        labels = [t.label for t in a.tokens]
        assert labels[0] == "[CLS]" and labels[-1] == "[SEP]", labels
        punct = [k for k, t in enumerate(a.tokens) if t.text in (".", ",")]
        assert punct, labels
        values = {
            "first": (w[..., :, 0].sum(-1), n),
            "separator": (w[..., :, n - 1].sum(-1), n),
            "punctuation": (w[..., :, punct].sum(-1).sum(-1), n),
            "previous": (sum(w[..., q, q - 1] for q in range(1, n)), n - 1),
            "next": (sum(w[..., q, q + 1] for q in range(n - 1)), n - 1),
            "current": (sum(w[..., q, q] for q in range(n)), n),
        }
        for name, (s, c) in values.items():
            sums[name] = sums.get(name, 0) + s
            counts[name] = counts.get(name, 0) + c
    return {name: sums[name] / counts[name] for name in sums}, counts


def test_targets_equal_a_direct_computation_on_a_tiny_bert(tiny):
    loaded = tiny("bert")
    seen = []
    r = clark.bert_attention_targets(loaded, TINY_SENTENCES, progress=seen.append)
    expected, counts = _direct(loaded, TINY_SENTENCES)
    assert set(r.per_head) == set(clark.TARGETS) == set(expected)
    for name in clark.TARGETS:
        assert r.per_head[name].dtype == np.float64 and r.per_head[name].shape == (2, 4)
        np.testing.assert_allclose(r.per_head[name], expected[name], rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(r.per_layer[name], expected[name].mean(axis=1), rtol=1e-6, atol=1e-9)
        assert r.per_layer[name].shape == (2,)
        assert r.queries[name] == counts[name]
    np.testing.assert_allclose(r.special_per_layer, r.per_layer["first"] + r.per_layer["separator"])
    assert r.first_token == "[CLS]" and r.separator_tokens == ["[SEP]"]
    assert r.sentences == TINY_SENTENCES and len(r.tokens) == 2 and r.seconds > 0
    assert seen[0] == 0.0 and seen[-1] == 1.0 and seen == sorted(seen)
    assert clark.estimate_targets_seconds(loaded, TINY_SENTENCES) > 0
    assert patterns.estimate_patterns_seconds(loaded, TINY_SENTENCES) > 0


def test_pattern_counts_cover_every_map_on_a_tiny_bert(tiny):
    loaded = tiny("bert")
    p = patterns.pattern_counts(loaded, TINY_SENTENCES + [("kedi fare", "the cat")])
    assert p.maps == 2 * 4 * 3 == sum(p.counts.values()) == int(p.per_layer.sum())
    assert list(p.counts) == list(patterns.PATTERN_TYPES)
    assert p.head_counts.shape == (2, 4, 5) and (p.head_counts.sum(-1) == 3).all()
    assert p.per_head.shape == (2, 4) and set(p.per_head.ravel()) <= set(patterns.PATTERN_TYPES)
    assert abs(sum(p.shares.values()) - 1) < 1e-12


def test_only_encoders_and_valid_sentences(tiny):
    with pytest.raises(UnsupportedOperationError) as exc:
        clark.bert_attention_targets(tiny("gpt2"), ["the cat"])
    assert exc.value.code == "needs_encoder" and set(exc.value.params) == {"model", "family"}
    with pytest.raises(UnsupportedOperationError):
        patterns.pattern_counts(tiny("t5"), ["the cat"])
    for bad in ([], [3], [("a", "b", "c")]):
        with pytest.raises(InvalidArgumentError):
            clark.bert_attention_targets(tiny("bert"), bad)


def test_default_inputs_are_the_shipped_sentences():
    texts = clark.default_sentences()
    assert len(texts) == 12 and texts[0] == "Kedi fareyi kovaladı"
    pairs = clark.default_pairs()  # Clark's input: consecutive sentences of one text, two by two
    assert len(pairs) == 11 and pairs[0][0].startswith("The old house at the end of the lane")
    assert pairs[0][1].startswith("The garden had grown wild") and pairs[-1][1].endswith(".")
    assert " ".join(" ".join(p) for p in pairs) == " ".join(clark.long_text().split())


# ------------------------------------------------------------------------------------------- hand-made maps

N = 8
SPECIAL = np.array([1, 0, 0, 0, 0, 0, 0, 1], dtype=bool)  # [CLS] w1 .. w6 [SEP]


def _shift(offset: int, n: int = N) -> np.ndarray:
    """Every query on key ``q + offset`` (clipped to the sequence)."""
    w = np.zeros((n, n))
    for q in range(n):
        w[q, min(max(q + offset, 0), n - 1)] = 1.0
    return w


def test_pattern_type_on_hand_made_maps():
    sep = np.zeros((N, N))
    sep[:, N - 1] = 1.0
    cls = np.zeros((N, N))
    cls[:, 0] = 1.0
    assert patterns.pattern_type(sep, SPECIAL) == "vertical"
    assert patterns.pattern_type(cls, SPECIAL) == "vertical"
    assert patterns.pattern_type(_shift(-1), SPECIAL) == "diagonal"
    assert patterns.pattern_type(_shift(1), SPECIAL) == "diagonal"
    assert patterns.pattern_type(np.eye(N), SPECIAL) == "diagonal"
    assert patterns.pattern_type(0.5 * sep + 0.5 * _shift(-1), SPECIAL) == "vertical+diagonal"
    assert patterns.pattern_type(np.full((N, N), 1 / N), SPECIAL) == "heterogeneous"
    # a stripe on a content word is no delimiter column: heterogeneous by these rules
    word = np.zeros((N, N))
    word[:, 3] = 1.0
    assert patterns.pattern_type(word, SPECIAL) == "heterogeneous"
    # punctuation columns count as delimiters
    punct = np.zeros(N, dtype=bool)
    punct[6] = True
    assert patterns.pattern_type(word, SPECIAL, punctuation=np.arange(N) == 3) == "vertical"
    # a weak line over uniform attention: neither half on the line nor on the delimiters
    assert patterns.pattern_type(0.4 * _shift(-1) + 0.6 * np.full((N, N), 1 / N), SPECIAL, punct) == "heterogeneous"
    assert patterns.pattern_type(0.6 * _shift(-1) + 0.4 * np.full((N, N), 1 / N), SPECIAL, punct) == "diagonal"


def test_pattern_type_block_needs_a_pair():
    # [CLS] a a a [SEP] b b b [SEP]: each word attends uniformly over its own sentence's words
    special = np.array([1, 0, 0, 0, 1, 0, 0, 0, 1], dtype=bool)
    segments = np.array([0, 0, 0, 0, 0, 1, 1, 1, 1])
    n = len(special)
    w = np.full((n, n), 1 / n)
    for q in range(n):
        if not special[q]:
            w[q] = (segments == segments[q]) & ~special
            w[q] /= w[q].sum()
    assert patterns.pattern_type(w, special, segments=segments) == "block"
    assert patterns.pattern_type(w, special) == "heterogeneous"  # one segment: no block
    f = patterns.pattern_features(w, special, segments=segments)
    assert f.block == pytest.approx(1.0)


def test_pattern_features_and_chance():
    sep = np.zeros((N, N))
    sep[:, N - 1] = 1.0
    f = patterns.pattern_features(sep, SPECIAL)
    # the +1 line holds one query's weight (the word before [SEP]); that row leaves the vertical share
    assert f.offset == 1 and f.diagonal == pytest.approx(1 / 7) and f.vertical == pytest.approx(7 / 8)
    assert f.block is None
    prev = patterns.pattern_features(_shift(-1), SPECIAL)
    assert prev.offset == -1 and prev.diagonal == pytest.approx(1.0)
    # a 3-token uniform map gives its two special columns 2/3 of the weight, but no more than chance
    assert patterns.pattern_type(np.full((3, 3), 1 / 3), [True, False, True]) == "heterogeneous"
    with pytest.raises(InvalidArgumentError):
        patterns.pattern_type(np.ones((3, 4)), [True, False, True])
    with pytest.raises(InvalidArgumentError):
        patterns.pattern_type(np.eye(3), [True, False])


def test_sources_and_published():
    urls = {s.url for s in clark.SOURCES}
    assert urls == {"https://arxiv.org/abs/1906.04341", "https://arxiv.org/abs/1908.08593"}
    assert clark.PUBLISHED["clark"]["sep_layers_1based"] == (6, 10)
    assert clark.PUBLISHED["kovaleva"]["heterogeneous_share_range"] == (0.32, 0.61)


# ------------------------------------------------------------------------------------------- bundled encoders


@pytest.fixture(scope="module")
def e5():
    return models.load("multilingual-e5-small", device="cpu")


def test_minilm_heads_look_at_cls_and_neighbours(minilm):
    """minilm-l6 (all-MiniLM-L6-v2, a distilled, contrastively fine-tuned 6-layer BERT), the 12 shipped sentences.
    Measured per layer (0-based), mean share of attention:

        layer            0      1      2      3      4      5
        [CLS]          0.295  0.628  0.648  0.590  0.661  0.412
        [SEP]          0.114  0.028  0.018  0.041  0.036  0.038
        punctuation    0.054  0.028  0.035  0.048  0.037  0.030
        previous       0.188  0.136  0.133  0.104  0.099  0.099
        next           0.061  0.099  0.046  0.041  0.054  0.060

    Clark's special-token attention shows, but on [CLS], not [SEP] (layers 1-4 put 0.63-0.70 on special tokens,
    layer 0 0.41). Head 0-2 puts 1.000 of its weight on the previous token, head 1-8 0.663 on the next.
    Kovaleva types over 864 maps: vertical 502, diagonal 21, vertical+diagonal 43, block 0, heterogeneous 298.
    """
    r = clark.bert_attention_targets(minilm)
    special = r.special_per_layer
    assert special[1:5].min() > special[0] + 0.15, special
    assert r.per_layer["first"][1:5].min() > 0.5 > r.per_layer["separator"].max(), r.per_layer
    assert r.per_head["previous"][0, 2] > 0.95 and r.per_head["next"][1, 8] > 0.55
    assert (0, 2) in r.heads_above("previous") and (1, 8) in r.heads_above("next")
    assert r.per_layer["current"].max() < 0.2  # "most heads put little attention on the current token"
    p = patterns.pattern_counts(minilm)
    assert p.maps == 6 * 12 * 12
    assert p.counts["vertical"] >= 0.45 * p.maps and p.counts["heterogeneous"] >= 0.25 * p.maps, p.counts
    assert p.counts["diagonal"] >= 10 and p.counts["vertical+diagonal"] >= 20 and p.counts["block"] == 0, p.counts
    assert p.per_head[0, 2] == "diagonal" and p.per_head[1, 8] == "diagonal"


def test_e5_puts_over_half_on_sep_in_layers_6_to_10(e5):
    """multilingual-e5-small (12-layer BERT, XLM-R tokenizer: <s> ... </s>). The shipped sentences read two by two
    (``<s> A </s></s> B </s>``, Clark's input format), share on </s> per layer (0-based):

        layer     0     1     2     3     4     5     6     7     8     9     10    11
        </s>    0.246 0.189 0.094 0.065 0.090 0.610 0.546 0.594 0.587 0.555 0.476 0.401

    Over half in layers 5-9, i.e. Clark's "layers 6-10" counted from 1. On ``default_pairs`` (consecutive sentences
    of the long text, ~60 tokens a pair): 0.505 0.419 0.512 0.474 0.476 in layers 5-9 (mean 0.477), 0.032-0.114 in
    layers 0-4. The 12 single sentences: <s> 0.57-0.76 in
    layers 1-4, then </s> jumps from 0.04 (layer 4) to 0.39 (layer 5) and stays 0.28-0.40; every special token
    together 0.42 in layer 0, 0.55-0.83 above. Head 0-2 puts 0.666 on the previous token; heads 1-7 and 2-6 more
    than half on the next (2-6: 0.915). Kovaleva types over 1728 maps: vertical 1399, diagonal 35,
    vertical+diagonal 54, block 0, heterogeneous 240.
    """
    texts = clark.default_sentences()
    pairs = clark.bert_attention_targets(e5, [(texts[i], texts[i + 1]) for i in range(0, 12, 2)])
    sep = pairs.per_layer["separator"]
    assert sep[5:10].min() > 0.5 and sep[1:5].max() < 0.25 and sep[10:].max() < 0.5, sep
    assert pairs.separator_tokens == ["</s>"] and pairs.first_token == "<s>"
    story = bert_heads.what_heads_look_at(e5)  # what the page runs
    sep = story.targets.per_layer["separator"]
    assert sep[5:10].mean() > 0.42 and sep[5:10].min() > 0.38 and sep[:5].max() < 0.15, sep
    r = clark.bert_attention_targets(e5)
    assert r.per_layer["separator"][5:10].min() > 0.3 > 0.15 > r.per_layer["separator"][1:5].max()
    assert r.per_layer["first"][1:5].min() > 0.5
    assert r.special_per_layer[1:].min() > r.special_per_layer[0] + 0.1
    assert r.per_head["previous"][0, 2] > 0.6 and r.per_head["next"][2, 6] > 0.85
    assert {(1, 7), (2, 6)} <= set(r.heads_above("next"))
    p = patterns.pattern_counts(e5)
    assert p.maps == 12 * 12 * 12
    assert p.counts["vertical"] >= 0.7 * p.maps and p.counts["heterogeneous"] >= 0.08 * p.maps, p.counts
    assert p.counts["diagonal"] >= 20 and p.counts["vertical+diagonal"] >= 30 and p.counts["block"] == 0, p.counts
    assert p.per_head[2, 6] == "diagonal" and (p.per_head[5:10] == "vertical").mean() > 0.9
