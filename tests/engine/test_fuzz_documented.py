"""Property-based fuzzing of every function the README documents beyond ``analyze`` (issue 27): information flow,
the experiments and their parts, pruning, masks, the lessons, the notebook helpers and the command line, on tiny
random models (a decoder and an encoder). Each argument is drawn from values that work and values that do not
(wrong types, out of range, NaN and infinity, huge sizes, a lone surrogate in a text). The property:

* only a :class:`models.DikkatError` is raised (never a TypeError, IndexError, MemoryError ... from inside);
* nothing uninitialised is returned: every float in a returned array (or dataclass of arrays) is finite and none
  is a denormal left over from ``np.empty`` (|x| < 1e-300 and x != 0);
* memory asked for stays bounded: the process's peak resident size grows by less than 2 GiB over the whole test
  (a request for an n × n matrix of a million tokens is refused before it is allocated).

``CALLS`` lists the functions covered; ``test_every_documented_function_is_fuzzed`` keeps the list and the README
in step; each function gets ``EXAMPLES`` examples.
"""

from __future__ import annotations

import dataclasses
import resource
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import models
from models import experiments, pruning
from models.analysis.masks import parse_mask, start_matrix
from models.experiments import alignment, bert_heads, clark, induction, patterns, prunable, sinks, timing
from models.experiments import grammar, inner_language
from models import atlas, sparse
from models.analysis.head_masks import HeadMasks, duo_attention
from models.atlas import embedding as atlas_embedding
from models.lessons import cost, kvcache, layer_input, positions, qkv

EXAMPLES = 100
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
GIB = 1 << 30

# values that are wrong for almost every parameter
BAD = st.one_of(st.none(), st.booleans(), st.integers(-(10 ** 12), 10 ** 12),
                st.sampled_from([-1, 0, 10 ** 6, 2 ** 63]),
                st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=4), st.just("a\ud800b"),
                st.lists(st.integers(-3, 3), max_size=3), st.just(np.array([1.5, np.nan])), st.just(object()))
TEXT = st.sampled_from(["the cat chased the mouse", "kedi fareyi kovaladı", "a", "the cat. the mouse!"])


def arg(good) -> st.SearchStrategy:
    """A parameter's strategy: mostly values that work (a strategy, or a list to pick from), sometimes :data:`BAD`."""
    good = good if isinstance(good, st.SearchStrategy) else st.sampled_from(good)
    return st.one_of(good, good, BAD)


def small(low: int = 0, high: int = 4) -> st.SearchStrategy:
    return arg(st.integers(low, high))


# an index of stored weights: ints in and out of range, slices, int lists, None and Ellipsis, up to five deep
INDEX = arg(st.lists(st.one_of(st.integers(-9, 9), st.sampled_from([slice(None), slice(1, 3), slice(None, None, 2),
                                                                   None, Ellipsis, [0, 2], [0, 9], 2 ** 63, 1.5])),
                     min_size=1, max_size=5).map(tuple))


@pytest.fixture(scope="module")
def dec(tiny):
    return tiny("gpt2")


@pytest.fixture(scope="module")
def enc(tiny):
    return tiny("bert")


@pytest.fixture(scope="module")
def dec_atlas(dec, tmp_path_factory):
    """The tiny decoder with an atlas of four texts, in a folder of its own (``.model``, ``.atlas``, ``.root``)."""
    import types

    root = tmp_path_factory.mktemp("atlas")
    a = atlas.build_atlas(dec, atlas.corpus_from_texts(["the cat chased the mouse", "kedi fareyi kovaladı",
                                                         "a b a b", "the cat. the mouse!"], name="fuzz"), root=root)
    return types.SimpleNamespace(model=dec, atlas=a, root=root)


@pytest.fixture(scope="module")
def dec_flow(dec):
    a = models.analyze(dec, "the cat chased the mouse")
    return a, models.information_flow(dec, a)


def _floats(value, depth: int = 0):
    """Every float array inside ``value`` (arrays, dataclasses, dicts, lists, tuples; two levels deep)."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "f":
            yield value
    elif depth < 3 and dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _floats(getattr(value, f.name), depth + 1)
    elif depth < 3 and isinstance(value, dict):
        for v in value.values():
            yield from _floats(v, depth + 1)
    elif depth < 3 and isinstance(value, (list, tuple)):
        for v in value[:50]:
            yield from _floats(v, depth + 1)


def check(call, errors: tuple = (models.DikkatError,)) -> None:
    """The property: ``call()`` returns initialised numbers or raises one of ``errors`` (a DikkatError)."""
    try:
        out = call()
    except errors:
        return
    for arr in _floats(out):
        assert np.isfinite(arr).all(), arr
        assert not ((np.abs(arr) < 1e-300) & (arr != 0)).any(), arr  # np.empty's leftovers


def _no_denormal(x: np.ndarray) -> np.ndarray:
    """``x`` with its denormals as 0: a filter hands back its input's own values, a denormal among them."""
    return np.where(np.abs(x) < 1e-300, 0.0, x)


def _masked(r) -> list[np.ndarray]:
    """The float arrays of a :mod:`models.why` result, where a masked key's logit is the model's own -inf set to 0
    (checked: -inf only for keys whose attention weight is 0); every other value is as returned."""
    weights = next((np.asarray(getattr(r, n)) for n in ("weights", "row_weights") if hasattr(r, n)), None)
    out = []
    for f in dataclasses.fields(r):
        v = getattr(r, f.name)
        if isinstance(v, np.ndarray) and v.dtype.kind == "f":
            bad = ~np.isfinite(v)
            if bad.any():
                assert (v[bad] == -np.inf).all() and weights is not None and bad.shape == weights.shape
                assert (weights[bad] == 0).all()  # a masked key: the model gives it no weight
                v = np.where(bad, 0.0, v)
            out.append(v)
    return out


def _composed(c) -> list[np.ndarray]:
    """A composition's scores where they are defined: NaN, by design, where the writing layer is not before the
    reading one (checked here) and for reading layers not computed."""
    layers = c.q.shape[0]
    not_before = np.arange(layers)[None, None, :, None] >= np.arange(layers)[:, None, None, None]  # l1 >= l2
    not_before = np.broadcast_to(not_before, c.q.shape)
    for x in (c.q, c.k, c.v):
        assert np.isnan(x[not_before]).all()
    return [x[~np.isnan(x)] for x in (c.q, c.k, c.v)]


# name -> (model fixture or None, strategy of keyword arguments, call(model, kwargs))
CALLS = {
    # information flow (README "Information flow")
    "information_flow": ("dec", st.fixed_dictionaries({"stack": arg(["decoder", "encoder", "cross"])}),
                         lambda m, a, f, kw: models.information_flow(m, a, **kw)),
    "Flow.token_shares": ("dec", st.fixed_dictionaries({"layer": small(), "rows": arg(st.one_of(
        st.none(), st.integers(-6, 6), st.lists(st.integers(-6, 6), max_size=3)))}),
        lambda m, a, f, kw: f.token_shares(**kw)),
    "Flow.weights": ("dec", st.fixed_dictionaries({"layer": small()}), lambda m, a, f, kw: f.weights(**kw)),
    "Flow.value_weighted": ("dec", st.fixed_dictionaries({"layer": small(), "head": arg(st.one_of(
        st.none(), st.integers(-1, 5))), "which": st.sampled_from(["layer", "head", "bad"])}),
        lambda m, a, f, kw: f.value_weighted(
            {"layer": f.weights(0), "head": f.weights(0)[0], "bad": np.ones((2, 2))}[kw.pop("which")], **kw)),
    "Flow.route": ("dec", st.fixed_dictionaries({"position": small(-6, 6), "threshold": arg(st.floats(0, 1))}),
                   lambda m, a, f, kw: f.route(**kw)),
    "Flow.logit_lens": ("dec", st.fixed_dictionaries({"position": small(-6, 6), "k": small(1, 8)}),
                        lambda m, a, f, kw: f.logit_lens(**kw)),
    "Flow.direct_effect": ("dec", st.fixed_dictionaries({"position": small(-6, 6)}),
                           lambda m, a, f, kw: f.direct_effect(**kw)),
    "DirectEffect.top": ("dec", st.fixed_dictionaries({"layer": small(), "head": small(), "k": small(1, 8)}),
                         lambda m, a, f, kw: f.direct_effect().top(**kw)),
    # published findings (README "Published findings")
    "experiments.get": (None, st.fixed_dictionaries({"key": arg(list(experiments.EXPERIMENTS) + ["x"])}),
                        lambda m, a, f, kw: experiments.get(**kw)),
    "experiments.estimate_seconds": ("dec", st.fixed_dictionaries({"key": arg(["sinks", "clark", "x"]),
                                                                   "model": arg([True])}),
                                     lambda m, a, f, kw: experiments.estimate_seconds(
                                         kw["key"], m if kw["model"] is True else kw["model"])),
    "experiments.run": ("dec", st.fixed_dictionaries({"key": arg(["sinks", "clark", "prunable", "x"]),
                                                      "model": arg([True]), "progress": arg([None, print])}),
                        lambda m, a, f, kw: experiments.run(kw["key"], m if kw["model"] is True else kw["model"],
                                                            progress=kw["progress"])),
    "sinks.first_token_share": ("dec", st.fixed_dictionaries({"text": arg([None, "the cat chased the mouse"]),
                                                              "max_tokens": small(1, 40)}),
                                lambda m, a, f, kw: sinks.first_token_share(m, **kw)),
    "sinks.streaming_losses": ("dec", st.fixed_dictionaries({
        "windows": arg(st.lists(st.integers(-1, 8), max_size=3)), "sinks": small(0, 4), "max_tokens": small(2, 40)}),
        lambda m, a, f, kw: sinks.streaming_losses(m, "the cat chased the mouse the cat", **kw)),
    "induction.induction_heads": ("dec", st.fixed_dictionaries({"length": small(1, 12), "sequences": small(0, 2),
                                                                "top": small(0, 3), "controls": small(0, 2)}),
                                  lambda m, a, f, kw: induction.induction_heads(m, **kw)),
    "induction.repeated_text": ("dec", st.fixed_dictionaries({"length": small(0, 40), "seed": small(-1, 3)}),
                                lambda m, a, f, kw: induction.repeated_text(m, **kw)),
    "clark.what_heads_look_at": ("enc", st.fixed_dictionaries({"sentences": arg(st.one_of(
        st.none(), st.lists(TEXT, max_size=2), st.lists(st.tuples(TEXT, TEXT), max_size=1)))}),
        lambda m, a, f, kw: bert_heads.what_heads_look_at(m, **kw)),
    "clark.bert_attention_targets": ("enc", st.fixed_dictionaries({"sentences": arg(st.lists(TEXT, max_size=2))}),
                                     lambda m, a, f, kw: clark.bert_attention_targets(m, **kw)),
    "patterns.pattern_counts": ("enc", st.fixed_dictionaries({"sentences": arg(st.lists(TEXT, max_size=2))}),
                                lambda m, a, f, kw: patterns.pattern_counts(m, **kw)),
    "patterns.pattern_type": (None, st.fixed_dictionaries({"weights": arg(st.builds(
        lambda n: np.full((n, n), 1.0 / max(n, 1)), st.integers(0, 5))), "special": arg([[True, False, False]])}),
        lambda m, a, f, kw: patterns.pattern_type(kw["weights"], kw["special"])),
    "alignment.whisper_alignment": ("dec", st.fixed_dictionaries({"max_new_tokens": small(0, 4)}),
                                    lambda m, a, f, kw: alignment.whisper_alignment(m, **kw)),
    "timing.dtw": (None, st.fixed_dictionaries({"cost": arg(st.builds(
        lambda r, c: np.arange(r * c, dtype=float).reshape(r, c), st.integers(0, 4), st.integers(0, 4)))}),
        lambda m, a, f, kw: timing.dtw(**kw)),
    "timing.median_filter": (None, st.fixed_dictionaries({"x": arg([np.arange(12.0).reshape(2, 6)]),
                                                          "width": small(-1, 9)}),
                             lambda m, a, f, kw: _no_denormal(timing.median_filter(**kw))),
    "prunable.heads_that_can_go": ("dec", st.fixed_dictionaries({"texts": arg(st.lists(TEXT, max_size=2)),
                                                                 "random_orders": small(0, 2)}),
                                   lambda m, a, f, kw: prunable.heads_that_can_go(m, **kw)),
    "grammar.grammar_probes": ("dec", st.fixed_dictionaries({"limit": arg(st.integers(1, 2)), "top": small(-1, 5),
                                                              "controls": small(-1, 2), "seed": small(-1, 2)}),
                               lambda m, a, f, kw: grammar.grammar_probes(m, **kw)),
    "grammar.roles": (None, st.fixed_dictionaries({"text": arg(TEXT), "subject": arg(["kedi", "the", ""]),
                                                   "obj": arg(["fareyi", "mouse"]), "verb": arg(["kovaladı"])}),
                      lambda m, a, f, kw: grammar.roles(**kw)),
    "inner_language.inner_language": ("dec", st.fixed_dictionaries({
        "tasks": arg([("fr",), ("en",), ("fr", "en"), ["en", "en"]]), "limit": arg(st.integers(1, 2)),
        "shots": small(-1, 9)}), lambda m, a, f, kw: inner_language.inner_language(m, **kw)),
    "inner_language.prompt": (None, st.fixed_dictionaries({"index": small(-1, 50), "source": arg(["fr", "en", "de"]),
                                                           "shots": small(-1, 50)}),
                              lambda m, a, f, kw: inner_language.prompt(inner_language.load_pairs(), **kw)),
    "inner_language.lens_probabilities": ("dec", st.fixed_dictionaries({
        "ids": arg([[0, 1], [5], (3,), np.arange(4)]), "position": small(-6, 6)}),
        lambda m, a, f, kw: inner_language.lens_probabilities(f, **kw)),
    # head pruning (the Head pruning page's engine)
    "pruning.prepare": ("dec", st.fixed_dictionaries({"text": arg(TEXT), "max_tokens": arg(st.one_of(
        st.none(), st.integers(-5, 100)))}), lambda m, a, f, kw: pruning.prepare(m, **kw)),
    "pruning.evaluate": ("dec", st.fixed_dictionaries({"rows": small(0, 3), "batch_size": small(-1, 5),
                                                       "gate": arg(st.floats(0, 1))}),
                         lambda m, a, f, kw: pruning.evaluate(
                             m, pruning.prepare(m, "the cat chased"),
                             np.full((kw["rows"], 8), kw["gate"]) if type(kw["rows"]) is int and 0 <= kw["rows"]
                             < 5 and isinstance(kw["gate"], float) else kw["gate"], batch_size=kw["batch_size"])),
    "pruning.ablation_scores": ("dec", st.fixed_dictionaries({"texts": arg(st.one_of(TEXT, st.lists(TEXT, max_size=2))),
                                                              "batch_size": small(-1, 9), "max_tokens": arg(
                                                                  st.one_of(st.none(), st.integers(-2, 70)))}),
                                lambda m, a, f, kw: pruning.ablation_scores(m, **kw).values),
    "pruning.gradient_importance": ("enc", st.fixed_dictionaries({"texts": arg(st.lists(TEXT, max_size=2)),
                                                                  "batch_size": small(-1, 9)}),
                                    lambda m, a, f, kw: pruning.gradient_importance(m, **kw).values),
    "pruning.pruning_curve": ("dec", st.fixed_dictionaries({"texts": arg(st.lists(TEXT, max_size=1)),
                                                            "shares": arg(st.lists(st.floats(-1, 2), max_size=3)),
                                                            "importance": arg([np.arange(8.0), np.ones(3)])}),
                              lambda m, a, f, kw: pruning.pruning_curve(m, kw["texts"], kw["importance"],
                                                                        shares=kw["shares"], random_orders=1)),
    "pruning.greedy_continuation": ("dec", st.fixed_dictionaries({"text": arg(TEXT), "max_new_tokens": small(-1, 4),
                                                                  "heads_off": arg([(), {("decoder", 0, 1)}])}),
                                    lambda m, a, f, kw: pruning.greedy_continuation(m, **kw)),
    "pruning.embed": ("enc", st.fixed_dictionaries({"texts": arg(st.one_of(TEXT, st.lists(TEXT, max_size=2))),
                                                    "max_tokens": arg(st.one_of(st.none(), st.integers(-2, 70)))}),
                      lambda m, a, f, kw: pruning.embed(m, **kw)),
    "pruning.rank_sentences": ("enc", st.fixed_dictionaries({"query": arg(TEXT), "texts": arg(st.lists(TEXT,
                                                                                                     max_size=3))}),
                               lambda m, a, f, kw: pruning.rank_sentences(m, **kw)),
    "pruning.heads_from_text": ("dec", st.fixed_dictionaries({"raw": arg(st.text(max_size=12))}),
                                lambda m, a, f, kw: pruning.heads_from_text(kw["raw"], m.stacks)),
    # masks (README "From Python")
    "MaskMode.matrix": (None, st.fixed_dictionaries({"mask": arg(["causal", "sliding_window:3", "strided:2",
                                                                  "sink_window:2,1", "bidirectional"]),
                                                     "n": arg(st.integers(-2, 10 ** 7))}),
                        lambda m, a, f, kw: parse_mask(kw["mask"]).matrix(kw["n"])),
    "start_matrix": (None, st.fixed_dictionaries({"kind": arg(["causal", "previous", "x"]),
                                                  "n": arg(st.integers(-2, 10 ** 7))}),
                     lambda m, a, f, kw: start_matrix(**kw)),
    # the lessons' engine
    "qkv.qkv_steps": ("dec", st.fixed_dictionaries({"text": arg(TEXT), "layer": small(-1, 3), "head": small(-1, 5),
                                                    "stack": arg([None, "decoder", "cross"])}),
                      lambda m, a, f, kw: qkv.qkv_steps(m, **kw)),
    "qkv.softmax_row": (None, st.fixed_dictionaries({"scores": arg([np.array([1.0, 2.0, -np.inf])]),
                                                     "temperature": arg(st.floats(-1, 4))}),
                        lambda m, a, f, kw: qkv.softmax_row(**kw)),
    "layer_input.layer_capture": ("dec", st.fixed_dictionaries({"text": arg(TEXT), "layer": small(-1, 3),
                                                                "max_tokens": arg(st.one_of(st.none(),
                                                                                            st.integers(-1, 9)))}),
                                  lambda m, a, f, kw: layer_input.layer_capture(m, **kw)),
    "positions.word_order_experiment": ("enc", st.fixed_dictionaries({"text_a": arg(TEXT), "text_b": arg(TEXT)}),
                                        lambda m, a, f, kw: positions.word_order_experiment(m, **kw)),
    "positions.sinusoidal_encoding": (None, st.fixed_dictionaries({"n": small(-1, 10 ** 7), "d": small(-1, 10 ** 7)}),
                                      lambda m, a, f, kw: positions.sinusoidal_encoding(**kw)),
    "positions.alibi_bias": (None, st.fixed_dictionaries({"n": small(-1, 10 ** 7), "slope": arg(st.floats(-1, 1))}),
                             lambda m, a, f, kw: np.nan_to_num(positions.alibi_bias(**kw), nan=0.0)),  # NaN: blocked
    "positions.alibi_slopes": (None, st.fixed_dictionaries({"heads": small(-1, 10 ** 7)}),
                               lambda m, a, f, kw: positions.alibi_slopes(**kw)),
    "positions.rope_dot_grid": (None, st.fixed_dictionaries({"positions": small(-1, 10 ** 6),
                                                             "head_dim": small(-1, 130),
                                                             "theta": arg(st.floats(-1, 1e6))}),
                                lambda m, a, f, kw: positions.rope_dot_grid(None, **kw)),
    "kvcache.compare_generation": ("dec", st.fixed_dictionaries({"prompt": arg(TEXT), "max_new_tokens": small(-1, 3),
                                                                 "implementation": arg(["sdpa", "captured"])}),
                                   lambda m, a, f, kw: kvcache.compare_generation(m, **kw)),
    "cost.measure_cost": ("dec", st.fixed_dictionaries({
        "lengths": arg(st.lists(st.one_of(st.integers(-2, 24), st.just(10 ** 6)), max_size=2)),
        "repeats": small(-1, 2)}),
        lambda m, a, f, kw: cost.measure_cost(m, **kw)),
    "cost.attention_matrix_size": (None, st.fixed_dictionaries({"n": small(-1, 10 ** 9), "layers": small(-1, 4)}),
                                   lambda m, a, f, kw: cost.attention_matrix_size(**kw)),
    # head atlas (README "Head atlas")
    "atlas.build_atlas": ("dec_atlas", st.fixed_dictionaries({
        "corpus": arg(st.builds(lambda t: atlas.corpus_from_texts(t, name="f"),
                                st.lists(TEXT, min_size=1, max_size=3))),
        "max_tokens": arg(st.one_of(st.none(), st.integers(-1, 70))),
        "limit": arg(st.one_of(st.none(), st.integers(-1, 3))),
        "repeats": small(-1, 2)}),
        lambda m, a, f, kw: atlas.build_atlas(m.model, kw.pop("corpus"), root=m.root, **kw).table()),
    "atlas.corpus_from_texts": (None, st.fixed_dictionaries({"texts": arg(st.lists(arg(TEXT), max_size=3))}),
                                lambda m, a, f, kw: atlas.corpus_from_texts(kw["texts"])),
    "Atlas.rank": ("dec_atlas", st.fixed_dictionaries({"metric": arg(list(atlas.RANKABLE)), "top": small(-1, 5)}),
                   lambda m, a, f, kw: m.atlas.rank(**kw)),
    "Atlas.examples": ("dec_atlas", st.fixed_dictionaries({"stack": arg(["decoder", "encoder"]), "layer": small(-1, 2),
                                                           "head": small(-1, 4), "k": small(-1, 3)}),
                       lambda m, a, f, kw: m.atlas.examples(**kw)),
    "Atlas.related": ("dec_atlas", st.fixed_dictionaries({"stack": arg(["decoder"]), "layer": small(-1, 2),
                                                          "head": small(-1, 4), "k": small(-1, 9)}),
                      lambda m, a, f, kw: m.atlas.related(**kw)),
    "Atlas.metric": ("dec_atlas", st.fixed_dictionaries({"name": arg(list(atlas.RANKABLE)),
                                                         "stack": arg(["decoder", "x"])}),
                     lambda m, a, f, kw: m.atlas.metric(**kw)),
    "atlas.find_heads": ("dec_atlas", st.fixed_dictionaries({"metric": arg(list(atlas.RANKABLE)), "top": small(-1, 5),
                                                             "model": arg([None, "x"])}),
                         lambda m, a, f, kw: atlas.find_heads(root=m.root, **kw)),
    "atlas.causal_labels": ("dec_atlas", st.fixed_dictionaries({"texts": small(-1, 2), "sequences": small(-1, 2),
                                                                "k": small(-1, 2)}),
                            lambda m, a, f, kw: atlas.causal_labels(m.model, m.atlas, save=False, **kw)),
    "joint_embedding": ("dec_atlas", st.fixed_dictionaries({"stack": arg(["decoder"]), "layer": small(-1, 2),
                                                            "head": small(-1, 4), "texts": small(-1, 3)}),
                        lambda m, a, f, kw: atlas_embedding.joint_embedding(m.model, m.atlas, **kw)),
    # why a head attends (README "Why a head attends"), on the analysis of the flow's text
    "why.neuron_view": ("dec", st.fixed_dictionaries({"stack": arg([None, "decoder", "cross"]), "layer": small(-1, 3),
                                                      "head": small(-1, 5), "i": small(-7, 7), "j": small(-7, 7)}),
                        lambda m, a, f, kw: _masked(models.why.neuron_view(m, a, **kw))),
    "why.row_terms": ("dec", st.fixed_dictionaries({"stack": arg([None]), "layer": small(-1, 3), "head": small(-1, 5),
                                                    "i": small(-7, 7)}),
                      lambda m, a, f, kw: _masked(models.why.row_terms(m, a, **kw))),
    "why.score_terms": ("dec", st.fixed_dictionaries({"stack": arg([None]), "layer": small(-1, 3), "head": small(-1, 5),
                                                      "i": small(-7, 7), "j": small(-7, 7), "k": small(-1, 9)}),
                        lambda m, a, f, kw: _masked(models.why.score_terms(m, a, **kw))),
    "why.rope_split": ("dec", st.fixed_dictionaries({"stack": arg([None]), "layer": small(-1, 3), "head": small(-1, 5),
                                                     "i": small(-7, 7)}),
                       lambda m, a, f, kw: _masked(models.why.rope_split(m, a, **kw))),
    # masks per head (README "Masks per head")
    "HeadMasks": ("dec", st.fixed_dictionaries({
        "default": arg(["full", "sink_window:2,1", "vertical_slash:2,2", "block_sparse:2,1", "a_shape:3,1", "x",
                        "sliding_window:0", "vertical_slash:9", "block_sparse:99,1"]),
        "heads": arg(st.dictionaries(st.tuples(st.integers(-1, 3), st.integers(-1, 5)),
                                     st.sampled_from(["full", "causal", "strided:2", "sliding_window:40"]),
                                     max_size=2)),
        "layers": arg(st.dictionaries(st.integers(-1, 3), st.sampled_from(["full", "bidirectional"]), max_size=2)),
        "fit": arg([False, True])}),
        lambda m, a, f, kw: np.asarray(models.analyze(m, "the cat chased the mouse", mask=HeadMasks(**kw))
                                       .attentions["decoder"])),
    "head_masks.duo_attention": (None, st.fixed_dictionaries({
        "scores": arg(st.sampled_from([np.ones((2, 4)), np.zeros(3), np.full((2, 2), np.nan)])), "k": small(-1, 9),
        "window": small(-1, 70), "sinks": small(-1, 5)}), lambda m, a, f, kw: duo_attention(**kw)),
    "sparse.kept_share": ("dec", st.fixed_dictionaries({"budget": small(-1, 8), "stack": arg([None, "decoder", "x"]),
                                                        "kinds": arg([["sliding_window", "vertical_slash"], ["x"],
                                                                      []])}),
                          lambda m, a, f, kw: sparse.kept_share(a, **kw)),
    "sparse.kv_bytes": ("dec", st.fixed_dictionaries({"spec": arg(["sink_window:4,1", "full", "x"]),
                                                      "n": small(-1, 100)}),
                        lambda m, a, f, kw: sparse.kv_bytes(m, n=kw["n"], spec=kw["spec"])),
    "sparse.make_needles": ("dec", st.fixed_dictionaries({"lengths": arg([[64], [10], [10 ** 6], []]),
                                                          "depths": arg([[0.5], [-1.0], [2.0]])}),
                            lambda m, a, f, kw: sparse.make_needles(m, **kw)),
    "sparse.run_needle": ("dec", st.fixed_dictionaries({"needle": arg(["x", None]), "mask": arg([None, "x"])}),
                          lambda m, a, f, kw: sparse.run_needle(m, **kw)),
    "sparse.retrieval_scores": (None, st.fixed_dictionaries({"runs": arg([[]])}),
                                lambda m, a, f, kw: sparse.retrieval_scores(**kw)),
    "sparse.duo_compare": ("dec", st.fixed_dictionaries({"lengths": arg([[64], [10]]), "draws": small(-1, 1),
                                                         "fractions": arg([[0.1], [0.0], [2.0]])}),
                           lambda m, a, f, kw: sparse.duo_compare(m, depths=(0.5,), **kw)),
    # stored weights and masks, indexed as the README shows (a.attentions[stack][layer, head], a.masks[stack][layer])
    "attentions[stack][key]": ("dec", st.fixed_dictionaries({"key": INDEX, "keep": arg([True, False])}),
                               lambda m, a, f, kw: models.analyze(m, "the cat chased", keep=kw["keep"])
                               .attentions["decoder"][kw["key"]]),
    "masks[stack][key]": ("dec", st.fixed_dictionaries({"key": INDEX}),
                          lambda m, a, f, kw: models.analyze(m, "the cat chased").masks["decoder"][kw["key"]]),
    "why.composition": ("dec", st.fixed_dictionaries({"stack": arg([None, "decoder", "x"]), "layer": arg(
        st.one_of(st.none(), st.integers(-1, 3)))}), lambda m, a, f, kw: _composed(models.why.composition(m, **kw))),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_documented_functions_raise_only_dikkat_errors(name, request):
    fixture, kwargs, call = CALLS[name]
    model = request.getfixturevalue(fixture) if fixture else None
    analysis, fl = request.getfixturevalue("dec_flow") if name.startswith(("Flow", "DirectEffect", "why.",
                                                                            "inner_language.lens", "sparse.kept")) \
        else (None, None)
    if name == "information_flow":
        analysis = request.getfixturevalue("dec_flow")[0]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    @SETTINGS
    @given(kw=kwargs)
    def fuzz(kw):
        check(lambda: call(model, analysis, fl, dict(kw)))

    fuzz()
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    assert grown < 2 * GIB, f"{name}: peak memory grew by {grown / GIB:.1f} GiB"


NOTEBOOK = {"head_view": ("layer", "stack"), "model_view": ("stack",), "heatmap": ("layer", "head", "stack")}


@pytest.mark.parametrize("helper", sorted(NOTEBOOK))
def test_notebook_helpers_raise_only_dikkat_errors(helper, dec_flow):
    from viz import notebook as nb

    analysis = dec_flow[0]
    strategies = {"layer": small(-1, 3), "head": small(-1, 5), "stack": arg([None, "decoder", "encoder"])}

    @SETTINGS
    @given(kw=st.fixed_dictionaries({k: strategies[k] for k in NOTEBOOK[helper]}),
           options=st.fixed_dictionaries({"hide_special": arg([False, True]), "words": arg([False, True])}))
    def fuzz(kw, options):  # viz/ does not import the engine: its own error, a ValueError
        check(lambda: getattr(nb, helper)(analysis, **kw, **options), (nb.NotebookArgumentError,))

    fuzz()


@SETTINGS
@given(argv=st.lists(st.one_of(st.sampled_from(["analyze", "list", "--model", "--text", "--mask", "--head-off",
                                                "--out", "--device", "--text-pair", "--target"]),
                               st.sampled_from(["causal", "decoder:0:1", "x:1", "cpu", "/", "/nonexistent/a.npz",
                                                "the cat", "a\ud800b", "-1", ""])), max_size=8))
def test_the_command_line_answers_with_a_message_not_a_traceback(argv, tiny_folder, tmp_path_factory, capsys):
    """``python -m models``: every argument list ends in exit status 0 or 2 (argparse's usage error, or
    ``error: ...`` on stderr), never an exception."""
    from models.__main__ import main

    if "analyze" in argv and "--model" not in argv:
        argv += ["--model", str(tiny_folder("gpt2"))]
    try:
        status = main(argv)
    except SystemExit as exc:  # argparse: usage error (2) or --help (0)
        status = exc.code
    capsys.readouterr()
    assert status in (0, 2)


def test_every_documented_function_is_fuzzed():
    """Each name in the README's Python sections that is a function of the engine is in :data:`CALLS` (or one
    of the notebook helpers, or a plain lookup that takes no argument a user chooses)."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    documented = ["token_shares", "value_weighted", "route", "logit_lens", "direct_effect", "first_token_share",
                  "streaming_losses", "induction_heads", "what_heads_look_at", "bert_attention_targets",
                  "pattern_counts", "pattern_type", "whisper_alignment", "dtw", "median_filter", "heads_that_can_go",
                  "estimate_seconds", "information_flow", "neuron_view", "row_terms", "score_terms", "rope_split",
                  "composition", "grammar_probes", "inner_language", "lens_probabilities", "HeadMasks",
                  "duo_attention", "kept_share", "kv_bytes", "make_needles", "run_needle", "retrieval_scores",
                  "duo_compare"]
    covered = " ".join(CALLS)
    for name in documented:
        assert name in readme, name
        assert name in covered, name
    assert len(CALLS) >= 45
    print(f"{len(CALLS)} functions x {EXAMPLES} examples, 3 notebook helpers, the command line", file=sys.stderr)
