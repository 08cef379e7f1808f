"""Head pruning engine (models/pruning/) on tiny random models: batched ablation, gradient importance,
pruning curve, and exact restoration when heads are switched back on (case C07)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import models
from models import pruning

ARCHS = ("bert", "bert-mlm", "gpt2", "llama")
TEXTS = ["kedi fareyi kovaladı", "the cat chased the mouse ."]


@pytest.fixture(scope="module")
def tiny64(tiny_folder):
    """``tiny64(arch)``: the tiny model loaded in float64 (for finite differences)."""

    def get(arch):
        return models.load(str(tiny_folder(arch)), device="cpu", dtype="float64")

    return get


def test_head_list_and_metric_kind(tiny):
    llama = tiny("llama")
    heads = pruning.head_list(llama)
    assert len(heads) == 2 * 4 and heads[0] == ("decoder", 0, 0) and heads[-1] == ("decoder", 1, 3)
    assert pruning.metric_kind(llama) == "loss"
    assert pruning.metric_kind(tiny("bert")) == "embedding_distance"
    assert pruning.metric_kind(tiny("bert-mlm")) == "mask_loss"


@pytest.mark.parametrize("arch", ARCHS)
def test_batched_ablation_equals_one_at_a_time(tiny, arch):
    m = tiny(arch)
    batched = pruning.ablation_scores(m, TEXTS, batch_size=3)  # 8 heads + base row: 3 uneven batches
    single = pruning.ablation_scores_one_at_a_time(m, TEXTS)
    assert batched.forward_passes == 2 * 3 and single.forward_passes == 2 * 9
    for stack in single.values:
        assert batched.values[stack].shape == (2, 4)
        np.testing.assert_allclose(batched.values[stack], single.values[stack], atol=1e-5, rtol=0)
    assert batched.base == pytest.approx(single.base, abs=1e-5)
    # The scores measure something: not all zero, and they differ between heads.
    flat = batched.flat()
    assert np.abs(flat).max() > 1e-4 and np.ptp(flat) > 1e-4


def test_ablation_score_is_the_analyze_loss_difference(tiny):
    """The ablation score of a decoder head is analyze()'s loss with that head off minus the full loss."""
    m = tiny("gpt2")
    text = TEXTS[1]
    scores = pruning.ablation_scores(m, text)
    full = models.analyze(m, text).loss
    off = models.analyze(m, text, heads_off=[("decoder", 1, 2)]).loss
    assert scores.values["decoder"][1, 2] == pytest.approx(off - full, abs=1e-5)
    assert scores.base == pytest.approx(full, abs=1e-6)


def test_embedding_ablation_is_one_minus_cosine(tiny):
    m = tiny("bert")
    text = TEXTS[0]
    scores = pruning.ablation_scores(m, text)
    full = models.analyze(m, text).embedding
    off = models.analyze(m, text, heads_off=[("encoder", 0, 3)]).embedding
    expected = 1 - pruning.cosine(full, off)
    assert scores.values["encoder"][0, 3] == pytest.approx(expected, abs=1e-6)
    assert scores.base == pytest.approx(0.0, abs=1e-6)  # full vs full, up to batch rounding


def _fd_gradient(m, prep, i, eps):
    n = len(pruning.head_list(m))
    keep = np.ones((2, n))
    keep[0, i] += eps
    keep[1, i] -= eps
    plus, minus = pruning.evaluate(m, prep, keep)
    return (plus - minus) / (2 * eps)


def _fd_embedding_sensitivity(m, prep, i, eps):
    n = len(pruning.head_list(m))
    keep = torch.ones(2, n, dtype=m.dtype)
    keep[0, i] += eps
    keep[1, i] -= eps
    with torch.no_grad():
        out = pruning.core._forward(m, prep, 2, pruning.gates_from_keep(m, keep, all_layers=True))
        unit = pruning.core._unit_embedding(m, out)
    return float(((unit[0] - unit[1]) / (2 * eps)).norm())


@pytest.mark.parametrize("arch", ARCHS)
def test_gradient_importance_matches_finite_differences(tiny64, arch):
    """Michel et al. (2019) eq. 2, E_x |dL/dξ_h|, against central differences on each gate (float64)."""
    m = tiny64(arch)
    assert m.dtype == torch.float64
    grad = pruning.gradient_importance(m, TEXTS)
    n = len(pruning.head_list(m))
    fd = np.zeros(n)
    for text in TEXTS:
        prep = pruning.prepare(m, text)
        for i in range(n):
            if prep.kind == "embedding_distance":
                fd[i] += _fd_embedding_sensitivity(m, prep, i, 1e-3)
            else:
                fd[i] += abs(_fd_gradient(m, prep, i, 1e-3))
    fd /= len(TEXTS)
    assert fd.max() > 1e-3  # the gates matter
    np.testing.assert_allclose(grad.flat(), fd, rtol=1e-3, atol=1e-9)
    assert (grad.flat() >= 0).all()


def test_gradient_importance_layer_normalisation(tiny):
    m = tiny("gpt2")
    raw = pruning.gradient_importance(m, TEXTS[0])
    norm = pruning.gradient_importance(m, TEXTS[0], normalize_layers=True)
    np.testing.assert_allclose(np.linalg.norm(norm.values["decoder"], axis=1), 1.0, rtol=1e-6)
    expected = raw.values["decoder"] / np.linalg.norm(raw.values["decoder"], axis=1, keepdims=True)
    np.testing.assert_allclose(norm.values["decoder"], expected, rtol=1e-6)


def _outputs(m, text, heads_off):
    a = models.analyze(m, text, heads_off=heads_off, keep_logits=True)
    out = {f"attn_{k}": v for k, v in a.attentions.items()}
    if a.logits is not None:
        out["logits"] = a.logits
    if a.embedding is not None:
        out["embedding"] = a.embedding
    return out


@pytest.mark.parametrize("arch", ARCHS)
def test_c07_head_off_then_on_restores_outputs_bit_identically(tiny, arch):
    """C07: a head switched off and back on gives exactly the outputs it gave before, every time
    (20 toggles in a row, alternating between two heads' states)."""
    m = tiny(arch)
    stack = "decoder" if m.family == "decoder" else "encoder"
    text = TEXTS[0]
    original = _outputs(m, text, ())
    pruned = _outputs(m, text, [(stack, 0, 1)])
    assert any(not np.array_equal(original[k], pruned[k]) for k in original)
    off: set = set()
    for step in range(20):
        head = (stack, 0, 1)
        off ^= {head}  # toggle
        now = _outputs(m, text, off)
        ref = pruned if off else original
        for key in original:
            assert np.array_equal(now[key], ref[key]), (step, key)
    assert not off
    # The batched evaluator and the greedy continuation are restored too.
    prep = pruning.prepare(m, text)
    n = len(pruning.head_list(m))
    keep = np.ones((3, n))
    keep[1, 1] = 0.0
    values = pruning.evaluate(m, prep, keep)
    again = pruning.evaluate(m, prep, np.ones((1, n)), batch_size=1)
    assert values[0] == values[2]
    assert values[1] != values[0]
    assert again[0] == pytest.approx(values[0], abs=1e-6)


def test_c07_continuation_restored_after_toggles(tiny):
    m = tiny("llama")
    first = pruning.greedy_continuation(m, "the cat", max_new_tokens=10)
    assert len(first.ids) == 10
    for _ in range(10):
        pruning.greedy_continuation(m, "the cat", [("decoder", 1, 0)], max_new_tokens=10)
        again = pruning.greedy_continuation(m, "the cat", max_new_tokens=10)
        assert np.array_equal(again.ids, first.ids) and again.text == first.text


@pytest.mark.parametrize("arch", ARCHS)
def test_every_head_off_changes_outputs(tiny, arch):
    m = tiny(arch)
    everything = pruning.head_list(m)
    original = _outputs(m, TEXTS[1], ())
    none_left = _outputs(m, TEXTS[1], everything)
    main = "logits" if "logits" in original else "embedding"
    assert not np.allclose(original[main], none_left[main], atol=1e-3)
    prep = pruning.prepare(m, TEXTS[1])
    full, empty = pruning.evaluate(m, prep, pruning.keep_matrix(m, [(), everything]))
    assert abs(empty - full) > 1e-3


def test_continuation_changes_when_every_head_is_off(tiny):
    m = tiny("llama")
    a = pruning.greedy_continuation(m, "the cat chased", max_new_tokens=10)
    b = pruning.greedy_continuation(m, "the cat chased", pruning.head_list(m), max_new_tokens=10)
    assert not np.array_equal(a.ids, b.ids)


def test_mask_loss_uses_the_full_models_top_fill(tiny):
    m = tiny("bert-mlm")
    text = "the cat [MASK] the mouse"
    prep = pruning.prepare(m, text)
    a = models.analyze(m, text)
    (pos, fills), = a.mask_fills.items()
    labelled = (prep.labels[0] != -100).nonzero().flatten().tolist()
    assert labelled == [pos]
    assert int(prep.labels[0, pos]) == int(fills.ids[0, 0])
    full = pruning.evaluate(m, prep, np.ones((1, len(pruning.head_list(m)))))[0]
    assert full == pytest.approx(-np.log(fills.probs[0, 0]), abs=1e-5)


def test_pruning_curve(tiny):
    m = tiny("gpt2")
    importance = pruning.ablation_scores(m, TEXTS)
    curve = pruning.pruning_curve(m, TEXTS, importance, random_orders=2, seed=1)
    assert curve.shares.tolist() == list(pruning.DEFAULT_SHARES)
    assert curve.n_pruned.tolist() == [0, 1, 2, 2, 3, 4, 5, 6, 6, 7]
    assert curve.random.shape == (2, 10)
    # Share 0: every curve is the full model's mean loss.
    assert curve.by_importance[0] == pytest.approx(importance.base, abs=1e-5)
    assert np.allclose(curve.random[:, 0], importance.base, atol=1e-5)
    # The first head pruned is the least important, and the first step's loss is that head's ablation.
    least = importance.ranked()[0]
    assert curve.order[0] == least[0]
    assert curve.by_importance[1] == pytest.approx(importance.base + least[1], abs=1e-5)
    # One step recomputed by hand.
    k = curve.n_pruned[5]
    direct = np.mean([pruning.evaluate(m, pruning.prepare(m, t), pruning.keep_matrix(m, [curve.order[:k]]))[0]
                      for t in TEXTS])
    assert curve.by_importance[5] == pytest.approx(direct, abs=1e-5)
    with pytest.raises(ValueError):
        pruning.pruning_curve(m, TEXTS, np.zeros(3))


def test_curve_estimate_scales_the_probe_by_a_fitted_line(tiny):
    """The estimate probes the set's shortest text and scales its time to each text by the line ``a + b·n`` fitted
    to timed passes (issue 13: the page says how long the pruning curve will take before it runs). Scaling by
    tokens alone counted a pass's fixed cost once per token: an overestimate wherever ``a > 0``."""
    m = tiny("gpt2")
    texts = ["a b c d e f g h i j k l", "a b", "a b c d e"]
    est = pruning.estimate_curve_seconds(m, texts, random_orders=1)
    assert est.tokens == [len(m.tokenizer(t)["input_ids"]) for t in texts]
    assert est.probe_text == "a b"
    assert est.probe_seconds > 0
    assert est.batch_rows == 2 * len(pruning.DEFAULT_SHARES)  # (random_orders + 1) rows per share, one pass
    a, b, n0 = est.pass_seconds, est.token_seconds, min(est.tokens)
    assert a >= 0 and b >= 0 and a + b * n0 > 0
    assert est.seconds == pytest.approx(est.probe_seconds * sum(a + b * n for n in est.tokens) / (a + b * n0))
    assert est.seconds == pytest.approx(sum(est.text_seconds(n) for n in est.tokens))
    by_tokens = est.probe_seconds * sum(est.tokens) / n0
    assert est.seconds <= by_tokens * (1 + 1e-9)
    if a > 0:
        assert est.seconds < by_tokens
    # a set of one length: no slope to fit, every text costs the probe
    same = pruning.estimate_curve_seconds(m, ["a b", "a b"], random_orders=1)
    assert same.token_seconds == 0 and same.pass_seconds > 0
    assert same.seconds == pytest.approx(2 * same.probe_seconds)
    with pytest.raises(models.EmptyTextError):
        pruning.estimate_curve_seconds(m, [])


def test_curve_estimate_line_arithmetic():
    """The fitted line's clamps and the per-text scaling, on numbers (no timing)."""
    from models.pruning.curve import _fit_line

    assert _fit_line(4, 1.0, 12, 3.0) == pytest.approx((0.0, 0.25))  # through the origin: pure token scaling
    assert _fit_line(4, 2.0, 12, 4.0) == pytest.approx((1.0, 0.25))
    assert _fit_line(4, 2.0, 12, 1.5) == (2.0, 0.0)  # the longer text timed faster (noise): flat
    assert _fit_line(4, 1.0, 12, 9.0) == (0.0, 1.0)  # steeper than the origin line: a clamped to 0
    assert _fit_line(4, 2.0, 4, 2.0) == (2.0, 0.0)  # one length: flat
    est = pruning.CurveEstimate(0.0, 2.0, "x", [4, 8, 12], pass_seconds=1.0, token_seconds=0.25, batch_rows=10)
    assert [est.text_seconds(n) for n in est.tokens] == pytest.approx([2.0, 3.0, 4.0])  # by tokens: 2, 4, 6
    zero = pruning.CurveEstimate(0.0, 2.0, "x", [4, 8], pass_seconds=0.0, token_seconds=0.0)
    assert zero.text_seconds(8) == pytest.approx(4.0)  # no line: by tokens


def test_rank_correlation():
    a = np.array([1.0, 2.0, 3.0, 4.0])
    assert pruning.rank_correlation(a, a * 10 + 3) == pytest.approx(1.0)
    assert pruning.rank_correlation(a, -a) == pytest.approx(-1.0)
    # ties get average ranks: ranks (1, 2.5, 2.5, 4) vs (1, 2, 3, 4)
    tied = np.array([0.0, 5.0, 5.0, 9.0])
    assert pruning.rank_correlation(tied, a) == pytest.approx(np.corrcoef([1, 2.5, 2.5, 4], [1, 2, 3, 4])[0, 1])
    for constant in ((np.ones(4), a), (a, np.full(4, 2.5)), (np.array([]), np.array([]))):  # undefined: said why
        with pytest.raises(models.UndefinedError, match="constant") as exc:
            pruning.rank_correlation(*constant)
        assert exc.value.code == "rank_constant"


def test_rank_sentences_and_embed(tiny):
    m = tiny("bert")
    texts = ["the cat chased the mouse", "dün", "kedi fareyi kovaladı"]
    embs = pruning.embed(m, texts)
    assert embs.shape == (3, 32) and embs.dtype == np.float32
    np.testing.assert_allclose(embs[2], models.analyze(m, texts[2]).embedding, atol=1e-6)
    r = pruning.rank_sentences(m, "kedi fareyi kovaladı", texts)
    assert r.order[0] == 2 and r.similarity[2] == pytest.approx(1.0, abs=1e-6)
    assert r.rank_of("kedi fareyi kovaladı") == 1
    off = pruning.embed(m, texts, [("encoder", 1, 0)])
    np.testing.assert_allclose(off[0], models.analyze(m, texts[0], heads_off=[("encoder", 1, 0)]).embedding, atol=1e-6)


def test_bad_heads_raise(tiny):
    m = tiny("gpt2")
    with pytest.raises(models.InvalidHeadError):
        pruning.keep_matrix(m, [[("decoder", 5, 0)]])
    with pytest.raises(models.InvalidHeadError):
        pruning.greedy_continuation(m, "the cat", [("encoder", 0, 0)])
    with pytest.raises(models.EmptyTextError):
        pruning.ablation_scores(m, "   ")
    with pytest.raises(models.UnsupportedOperationError):
        pruning.greedy_continuation(tiny("bert"), "the cat")


@pytest.mark.parametrize("arch", ["bert", "bert-mlm", "gpt2", "llama", "mistral"])
def test_prefix_reuse_gives_the_same_metric(tiny, arch):
    """Running the layers before the first gated layer once (batch 1) and repeating their output gives
    the metric of running every row through every layer."""
    m = tiny(arch)
    prep = pruning.prepare(m, TEXTS[1])
    heads = pruning.head_list(m)
    rows = [[h] for h in heads if h[1] == 1] + [[h for h in heads if h[1] == 1 and h[2] < 2]]
    keep = pruning.keep_matrix(m, rows)
    assert pruning.core._layer_blocks(m)  # supported on these models
    reused = pruning.evaluate(m, prep, keep, reuse_prefix=True)
    plain = pruning.evaluate(m, prep, keep, reuse_prefix=False)
    np.testing.assert_allclose(reused, plain, atol=1e-6, rtol=0)
    assert np.ptp(plain) > 1e-5


def test_continuation_decodes_characters_split_over_byte_tokens(smollm2):
    """smollm2's tokens are bytes: decoding each generated piece alone, or cutting generation after the first
    byte of "ı", showed U+FFFD ("kı\ufffdom", issue 13). The text is the prompt and continuation decoded
    together minus the prompt, with an unfinished last character dropped."""
    text = "Çekoslovakyalılaştıramadıklarımızdan"
    c = pruning.greedy_continuation(smollm2, text, max_new_tokens=10)
    tok = smollm2.tokenizer
    prompt_ids = tok(text)["input_ids"]
    alone = tok.decode(c.ids, skip_special_tokens=True)
    together = tok.decode(prompt_ids + c.ids.tolist(), skip_special_tokens=True)[len(tok.decode(prompt_ids)):]
    assert "\ufffd" in alone  # this prompt's continuation ends inside a character
    assert "\ufffd" not in c.text and c.text == together.rstrip("\ufffd") and c.text


def test_numbers_never_show_negative_zero():
    """"(all heads on: -0.000)" read as a change to a class (issue 13)."""
    from viz import numbers as nb

    assert nb.num(-1e-7, 3) == "0.000" and nb.num(-1e-7, 3, sign=True) == "+0.000"
    assert nb.num(-0.0, 3, "tr") == "0,000" and nb.num(-0.0006, 3) == "-0.001"
    assert nb.num(float("nan"), 2) == "nan"


def _scores(values: dict) -> pruning.HeadScores:
    return pruning.HeadScores(values={s: np.array(v, dtype=np.float64) for s, v in values.items()}, kind="ablation",
                              metric="loss", base=1.0, texts=["x"])


def test_presets_pick_heads_from_scores_by_hand():
    """The Head pruning page's presets, computed on a hand-made score grid (2 layers x 3 heads)."""
    scores = _scores({"decoder": [[0.5, 0.1, 0.9], [0.2, 0.2, 0.0]]})
    # most important per layer: head 2 of layer 0; heads 0 and 1 tie in layer 1, the lower index stays
    assert pruning.keep_best_per_layer(scores) == {("decoder", 0, 0), ("decoder", 0, 1), ("decoder", 1, 1),
                                                   ("decoder", 1, 2)}
    assert pruning.least_important(scores, 2) == {("decoder", 1, 2), ("decoder", 0, 1)}
    assert pruning.least_important(scores, 0) == frozenset()
    assert len(pruning.least_important(scores, 6)) == 6
    for bad in (7, -1, 1.5, True):
        with pytest.raises(models.InvalidHeadError, match="from 0 to 6"):
            pruning.least_important(scores, bad)
    stacks = {"decoder": (2, 3)}
    assert pruning.whole_layer(stacks, "decoder", 1) == {("decoder", 1, 0), ("decoder", 1, 1), ("decoder", 1, 2)}
    for stack, layer in (("decoder", 2), ("encoder", 0), ("decoder", -1)):
        with pytest.raises(models.InvalidHeadError, match="No layer"):
            pruning.whole_layer(stacks, stack, layer)


def test_heads_off_link_text_round_trips_and_ignores_junk():
    stacks = {"encoder": (6, 8), "decoder": (6, 8)}
    heads = {("decoder", 3, 1), ("encoder", 0, 7), ("decoder", 0, 2)}
    text = pruning.heads_to_text(heads)
    assert text == "decoder.0.2,decoder.3.1,encoder.0.7"
    assert pruning.heads_from_text(text, stacks) == heads
    junk = "decoder.6.0,decoder.0.8,cross.0.0,decoder.².1,decoder.1,decoder.1.1.1,  encoder.5.5 ,x" + ",a" * 20_000
    assert pruning.heads_from_text(junk, stacks) == {("encoder", 5, 5)}
