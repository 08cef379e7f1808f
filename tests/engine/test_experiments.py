"""The experiments' arithmetic and wiring (issue 15) on hand-made arrays and tiny random models; the measured effects
on the bundled models are in tests/bundled/test_experiments_bundled.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

import models
import models.experiments as E
from models.experiments import induction, prunable, sinks


def test_induction_score_reads_the_diagonal_one_token_after_the_first_occurrence():
    # 2 specials-free copies of length 3 at start 1 (a BOS at 0): n = 7; queries 4, 5, 6 look at keys 2, 3, 4
    n, start, length = 7, 1, 3
    w = np.zeros((2, n, n))
    w[0, [4, 5, 6], [2, 3, 4]] = [1.0, 0.5, 0.0]  # head 0: an induction head on two of three queries
    w[1, np.arange(n), np.arange(n)] = 1.0          # head 1: attends itself
    np.testing.assert_allclose(induction.induction_scores(w, start, length), [0.5, 0.0])


def test_copy_losses_are_the_cross_entropy_of_each_copy_without_its_first_token():
    # vocab 3, ids: BOS 0, copy [1, 2], copy [1, 2]; logits put log-probabilities we can write down
    ids = [0, 1, 2, 1, 2]
    logp = np.log(np.array([[0.2, 0.5, 0.3], [0.1, 0.1, 0.8], [0.6, 0.3, 0.1], [0.25, 0.25, 0.5], [1 / 3] * 3]))
    first, second = induction._copy_losses(logp.astype(np.float32), ids, start=1, length=2)
    # first copy: predict token 2 at position 2 from row 1 (p 0.8); second: token 2 at position 4 from row 3 (p 0.5)
    assert first == pytest.approx(-math.log(0.8), abs=1e-6)
    assert second == pytest.approx(-math.log(0.5), abs=1e-6)


def test_flat_share_stops_at_the_first_step_above_the_rise():
    shares = np.array([0.0, 0.1, 0.2, 0.3, 0.4])
    assert prunable.flat_share(shares, np.array([2.0, 2.1, 2.19, 2.5, 2.0]), 0.2) == 0.2  # 2.5 > 2.2 at 0.3
    assert prunable.flat_share(shares, np.array([0.0, 0.2, 0, 0, 0]), 0.1) == 0.0
    assert prunable.flat_share(shares, np.zeros(5), 0.0) == 0.4
    with pytest.raises(models.InvalidArgumentError):
        prunable.flat_share(shares, np.zeros(4), 0.1)


def test_induction_refuses_more_top_heads_than_the_controls_can_match(tiny):
    with pytest.raises(models.InvalidArgumentError):
        induction.induction_heads(tiny("llama"), top=10_000)


def test_first_token_share_is_the_mean_weight_on_key_zero(tiny):
    llama = tiny("llama")
    text = "the cat chased the mouse and the dog"
    got = sinks.first_token_share(llama, text)
    weights = np.asarray(models.analyze(llama, text, keep=True).attentions["decoder"][:])
    np.testing.assert_allclose(got.per_head, weights[..., 0].mean(-1), atol=1e-6)
    np.testing.assert_allclose(got.per_layer, weights[..., 0].mean((-1, -2)), atol=1e-6)


def test_streaming_losses_are_the_losses_under_each_mask(tiny):
    llama = tiny("llama")
    text = "the cat chased the mouse and the dog ran after the cat"
    got = sinks.streaming_losses(llama, text, windows=(2, 3), sinks=1)
    assert got.full == pytest.approx(models.analyze(llama, text).loss, abs=1e-6)
    for i, w in enumerate((2, 3)):
        assert got.window[i] == pytest.approx(models.analyze(llama, text, mask=f"sliding_window:{w}").loss, abs=1e-6)
        assert got.with_sinks[i] == pytest.approx(models.analyze(llama, text, mask=f"sink_window:{w},1").loss,
                                                  abs=1e-6)
    assert got.window[0] != got.with_sinks[0]  # the sink changes what the window sees


def test_experiments_refuse_the_wrong_kind_of_model_with_a_code(tiny):
    bert, llama = tiny("bert"), tiny("llama")
    for key in ("sinks", "induction"):
        with pytest.raises(models.UnsupportedOperationError) as err:
            E.run(key, bert)
        assert err.value.code == "needs_causal_lm"
    with pytest.raises(models.UnsupportedOperationError) as err:
        E.run("clark", llama)
    assert err.value.code == "needs_encoder"
    # the tiny WordPiece tokenizer has no whole words with a leading space to draw random sequences from
    with pytest.raises(models.UnsupportedOperationError) as err:
        E.run("induction", llama)
    assert err.value.code == "induction_vocab"
    with pytest.raises(models.InvalidArgumentError):
        E.get("nope")
    with pytest.raises(models.InvalidArgumentError):
        sinks.streaming_losses(llama, "a b c", windows=(0,))


def test_every_experiment_names_its_source_and_bundled_models():
    assert list(E.EXPERIMENTS) == ["sinks", "induction", "clark", "alignment", "prunable", "grammar", "inner_language",
                                  "retrieval_heads"]
    for exp in E.EXPERIMENTS.values():
        assert exp.sources and all(s.url.startswith(("https://arxiv.org/abs/", "https://doi.org/"))
                                   for s in exp.sources), exp.key
        assert all(models.get_spec(m) for m in exp.models)


def test_a_progress_callback_sees_the_fraction_rise_to_one(tiny):
    seen = []
    sinks.streaming_losses(tiny("llama"), "the cat chased the mouse", windows=(2,), sinks=1, progress=seen.append)
    assert seen[0] == 0.0 and seen[-1] == 1.0 and seen == sorted(seen) and len(seen) == 4


def test_odd_arguments_get_a_dikkat_error_not_a_python_one(tiny):
    llama, bert = tiny("llama"), tiny("bert")
    for kwargs in ({"windows": 5}, {"windows": []}, {"windows": ["a"]}):
        with pytest.raises(models.InvalidArgumentError):
            sinks.streaming_losses(llama, "the cat chased the mouse", **kwargs)
    with pytest.raises(models.InvalidArgumentError):  # one token: no next-token loss
        sinks.streaming_losses(llama, "cat", windows=(2,))
    with pytest.raises(models.InvalidArgumentError):
        induction.induction_heads(llama, seed=-1)
    with pytest.raises(models.InvalidArgumentError):
        prunable.heads_that_can_go(bert, ["the cat"], random_orders=0)
    share = sinks.first_token_share(llama, "the cat chased the mouse")
    assert len(share.per_layer) == 2 and not np.isnan(share.bottom_top()).any()  # 2 layers: layer 0 against 1
    from models.experiments import bert_heads
    assert bert_heads.what_heads_look_at(bert, "the cat chased the mouse").targets.sentences == [
        "the cat chased the mouse"]  # a string is one sentence, not its characters


def _counting_passes(loaded) -> list[int]:
    """Count the forward passes through ``loaded.model`` from now on (``count[0]``)."""
    count, forward = [0], loaded.model.forward

    def counted(*args, **kwargs):
        count[0] += 1
        return forward(*args, **kwargs)

    loaded.model.forward = counted
    return count


@pytest.mark.parametrize("arch", ["gpt2", "bert"])
def test_the_grammar_estimate_counts_the_passes_the_probes_make(tiny, arch):
    # the cost model's units (sentences read, suffixes scored or sentences embedded, with every set of heads off)
    # make as many forward passes as grammar_probes does, on a causal LM and on an encoder
    from models.experiments import grammar

    loaded = tiny(arch)
    count = _counting_passes(loaded)
    try:
        for kwargs in ({"limit": 2, "top": 1, "controls": 1}, {"limit": 3, "top": 2, "controls": 0}):
            plan = E._grammar_plan(loaded, **kwargs)
            assert ("score_order" in plan) == (arch == "gpt2") and ("embed" in plan) == (arch == "bert")
            count[0] = 0
            grammar.grammar_probes(loaded, **kwargs)
            assert count[0] == E._passes(plan), (kwargs, plan)
    finally:
        del loaded.model.forward
    full = E._grammar_plan(loaded)  # the registry's estimate: grammar_probes' defaults, every item
    sets = grammar.load_pairs()
    assert full["read_order"] == 4 * len(sets["word_order"]) and full["read_agreement"] == len(sets["agreement"])


def test_the_inner_language_estimate_counts_the_passes_the_run_makes(tiny):
    from models.experiments import inner_language

    gpt2 = tiny("gpt2")
    assert E.estimate_seconds("inner_language", gpt2) > 0  # also pays the flow's one-off probe pass
    count = _counting_passes(gpt2)
    try:
        r = inner_language.inner_language(gpt2, limit=3, shots=1)
    finally:
        del gpt2.model.forward
    plan = E._inner_plan(gpt2, limit=3, shots=1)
    assert plan == {"prompt_fr": len(r.words), "prompt_en": len(r.words)}  # the pairs the run keeps, per task
    assert count[0] == E._passes(plan) == 2 * 2 * len(r.words)  # an analysis and the flow's pass per prompt
