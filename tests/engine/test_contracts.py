"""Every public function keeps its contract (issue 47 point 1): the functions in the ``__all__`` of ``models``, its
subpackages and ``live`` are called with values that work, then with each parameter in turn replaced by an odd value
(None, NaN, ±inf, -1, 10**30, an empty string, bytes, a lone surrogate, an empty list, an object, a bool), then with
arguments hypothesis generates from their signatures (``st.from_type`` of the annotations made of builtins, the odd
values and the values that work; ``DIKKAT_CONTRACT_EXAMPLES`` examples: 300 in ``make check``, 3,000 in ``make
test``). The property: the call returns finite numbers (every float in what it returns, three levels deep) or raises
a :class:`models.DikkatError` (``live``'s own :class:`live.LiveError`), never a raw Python error; a refusal comes in
less than a second (a size that cannot be done is refused before the work starts; results are not timed). The
speech passes, which need Whisper's processor, are held to the same in tests/bundled/test_contracts_speech.py. The
public methods of what the engine returns (an analysis, an information flow) are called the same way.

The inventory keeps the next feature covered on the day it lands: a public function that is neither here nor in
the fuzzing tiers (tests/engine/test_fuzz_documented.py, test_fuzz_api.py, test_refused_arguments.py) fails, unless
:data:`NOT_YET` lists it; a listed function that is covered must leave the list."""

from __future__ import annotations

import collections.abc
import importlib
import inspect
import os
import re
import sys
import types
import typing

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import live
import models
from conftest import ROOT
from contract import ODD, Tally, call, finite, odd_calls
from models import atlas, flow, pruning, sparse, turkish, why
from models.analysis import attach_stacks, weight_budget_tokens
from tiny import build_tiny

PACKAGES = ("models", "models.pruning", "models.atlas", "models.experiments", "models.why", "models.flow",
            "models.sparse", "models.turkish", "models.speech", "models.analysis", "live")
FUZZED = ("engine/test_fuzz_documented.py", "engine/test_fuzz_api.py", "engine/test_refused_arguments.py",
          "bundled/test_contracts_speech.py")
# public functions without a contract here or a fuzz entry yet: each is taken off once it has one
NOT_YET: set[str] = set()
TEXT = "the cat chased the mouse"


@pytest.fixture(scope="module")
def dec(tmp_path_factory):
    return models.load(str(build_tiny("gpt2", tmp_path_factory.mktemp("contracts") / "gpt2")))


@pytest.fixture(scope="module")
def enc(tmp_path_factory):
    return models.load(str(build_tiny("bert", tmp_path_factory.mktemp("contracts") / "bert")))


def cases(dec, enc) -> dict:
    """name -> (function, keyword arguments that work)."""
    scores = pruning.ablation_scores(dec, TEXT)
    a, turkish_a = models.analyze(dec, TEXT), models.analyze(enc, "kedi fareyi kovaladı")
    units = turkish.analysis_units(turkish_a, "encoder", check_language=False)
    heads = sum(h for _, h in dec.stacks.values()) * next(iter(dec.stacks.values()))[0]
    corpus = atlas.corpus_from_bytes(b"the cat\nthe mouse\n", name="c.txt", suffix=".txt")
    held = models.analyze(dec, TEXT)
    held_flow = models.information_flow(dec, held)
    # the tiny word-piece tokenizer decodes no token with a leading space, so it has no whole-word vocabulary of
    # its own for the repeated random sequences: give it the ids of its whole words (what _vocabulary keeps)
    words = [dec.tokenizer.convert_tokens_to_ids(w) for w in ("kedi", "fare", "kova", "the", "cat", "chased")]
    dec.__dict__.setdefault("_induction_vocab", {})["ids"] = np.asarray(sorted(words), dtype=np.int64)
    return {
        "models.atlas.check_language": (atlas.check_language, {"loaded": dec, "corpus": corpus, "sample": 4}),
        "models.atlas.folder_for": (atlas.folder_for, {"loaded": dec, "corpus": corpus, "settings": atlas.Settings(),
                                                       "root": str(ROOT / "test-results" / "atlases")}),
        "models.analysis.attach_stacks": (attach_stacks, {"result": held, "stacks": dict(held.attentions)}),
        "models.why.explain": (why.explain, {"loaded": dec, "analysis": a, "stack": "decoder", "layer": 0}),
        "models.flow.special_share": (flow.special_share, {"analysis": a, "flow": models.information_flow(dec, a)}),
        "models.turkish.analysis_units": (turkish.analysis_units, {"analysis": turkish_a, "stack": "encoder",
                                                                   "check_language": False}),
        "models.turkish.membership": (turkish.membership, {"tokens": turkish_a.tokens,
                                                           "morphemes": turkish.segment("kedi fareyi kovaladı")}),
        "models.turkish.morpheme_attention": (turkish.morpheme_attention, {
            "weights": np.asarray(turkish_a.attentions["encoder"])[0, 0], "query": units[0], "key": units[1]}),
        "models.pruning.ablation_scores_one_at_a_time": (pruning.ablation_scores_one_at_a_time,
                                                          {"loaded": dec, "texts": "the cat"}),
        "models.pruning.estimate_curve_seconds": (pruning.estimate_curve_seconds,
                                                  {"loaded": dec, "texts": ["the cat"]}),
        "models.pruning.gates_from_keep": (pruning.gates_from_keep, {"loaded": dec, "keep": torch.ones(1, heads)}),
        "models.get_spec": (models.get_spec, {"key": "minilm-l6"}),
        "models.default_model_for_language": (models.default_model_for_language, {"lang": "tr"}),
        "models.is_hub_id": (models.is_hub_id, {"name": "owner/name"}),
        "models.default_max_tokens": (models.default_max_tokens, {"loaded": dec}),
        "models.analysis.weight_budget_tokens": (weight_budget_tokens, {"loaded": dec}),
        "models.analysis.default_max_tokens": (models.default_max_tokens, {"loaded": dec}),
        "models.list_models": (models.list_models, {}),
        "models.clear_cache": (models.clear_cache, {}),
        "models.atlas.forget_open": (atlas.forget_open, {}),
        "models.turkish.segment": (turkish.segment, {"text": "kedi fareyi kovaladı"}),
        "models.turkish.segment_words": (turkish.segment_words, {"text": "kedi fareyi kovaladı"}),
        "models.turkish.turkish_share": (turkish.turkish_share, {"text": "kedi fareyi kovaladı"}),
        "models.atlas.bootstrap": (atlas.bootstrap, {"per_text": np.ones((3, 2, 14)), "draws": 10, "seed": 0,
                                                     "level": 0.9}),
        "models.atlas.induction_pairs": (atlas.induction_pairs, {"ids": [1, 2, 3, 1, 2, 3]}),
        "models.atlas.pooled": (atlas.pooled, {"sums": np.ones((2, 2, 14))}),
        "models.atlas.corpus_from_bytes": (atlas.corpus_from_bytes, {"data": b"a b c\nd e f\n", "name": "x.txt",
                                                                     "suffix": ".txt"}),
        "models.atlas.shipped_corpus": (atlas.shipped_corpus, {"language": "en"}),
        "models.atlas.shipped_clips": (atlas.shipped_clips, {}),
        "models.atlas.load_corpus": (atlas.load_corpus, {"source": str(ROOT / "assets" / "corpora" / "en.jsonl")}),
        "models.pruning.cosine": (pruning.cosine, {"a": np.ones((2, 3)), "b": np.ones((2, 3))}),
        "models.pruning.heads_to_text": (pruning.heads_to_text, {"heads": [("decoder", 0, 1)]}),
        "models.pruning.whole_layer": (pruning.whole_layer, {"stacks": {"decoder": (2, 4)}, "stack": "decoder",
                                                             "layer": 0}),
        "models.pruning.least_important": (pruning.least_important, {"scores": scores, "k": 2}),
        "models.pruning.keep_best_per_layer": (pruning.keep_best_per_layer, {"scores": scores}),
        "models.pruning.keep_matrix": (pruning.keep_matrix, {"loaded": dec, "rows": [[("decoder", 0, 1)]]}),
        "models.pruning.check_heads": (pruning.check_heads, {"loaded": dec, "heads": [("decoder", 0, 1)]}),
        "models.pruning.metric_kind": (pruning.metric_kind, {"loaded": dec}),
        "models.flow.proximity": (flow.proximity, {"parts": torch.ones(2, 3, 4), "whole": torch.ones(3, 4)}),
        "models.sparse.pattern_at": (sparse.pattern_at, {"kind": "vertical_slash", "budget": 8}),
        "models.atlas.second_copy_effects": (atlas.second_copy_effects, {"loaded": dec, "sequences": 2, "length": 3,
                                                                         "max_tokens": 16}),
        # the public methods of what the engine returns (an analysis, an information flow)
        "Flow.direct_effect": (held_flow.direct_effect, {"position": -1}),
        "Flow.logit_lens": (held_flow.logit_lens, {"position": -1, "k": 3}),
        "Flow.route": (held_flow.route, {"position": -1, "threshold": 0.04}),
        "Flow.token_shares": (held_flow.token_shares, {"layer": 1, "rows": None}),
        "Flow.value_weighted": (held_flow.value_weighted, {"weights": np.asarray(held.attentions["decoder"][1]),
                                                           "layer": 1, "head": None}),
        "Flow.weights": (held_flow.weights, {"layer": 1}),
        "Analysis.axis_tokens": (held.axis_tokens, {"stack": "decoder"}),
        "Analysis.axis_words": (held.axis_words, {"stack": "decoder"}),
        "Analysis.head_mask": (held.head_mask, {"layer": 1, "head": 0, "stack": None}),
        "Analysis.sink_share": (held.sink_share, {"stack": "decoder", "layer": 1, "head": None}),
        "live.teacher_token": (live.teacher_token, {"environ": {"DIKKAT_TEACHER_TOKEN": "t"}}),
        "live.store_from_env": (live.store_from_env, {"environ": {}}),
    }


TALLY = Tally()


def test_every_public_function_keeps_its_contract(dec, enc):
    faults = []
    for name, (fn, good) in cases(dec, enc).items():
        try:
            result = fn(**good)
        except Exception as exc:  # noqa: BLE001  (reported)
            faults.append(f"{name}: values that work raised {type(exc).__name__}: {exc}")
            continue
        assert finite(result), name
        faults += odd_calls(name, fn, good, TALLY)
    assert not faults, "\n".join(faults)


def _public_functions() -> set[str]:
    out = set()
    for package in PACKAGES:
        module = importlib.import_module(package)
        for name in module.__all__:
            value = getattr(module, name, None)
            if callable(value) and not inspect.isclass(value) and inspect.isroutine(value):
                out.add(f"{package}.{name}")
    return out


def test_every_public_function_is_covered_or_listed(dec, enc):
    fuzzed = "".join((ROOT / "tests" / f).read_text(encoding="utf-8") for f in FUZZED)
    here = set(cases(dec, enc))
    covered = {name for name in _public_functions()
               if name in here or re.search(rf"\b{re.escape(name.rsplit('.', 1)[1])}\b", fuzzed)}
    missing = sorted(_public_functions() - covered - NOT_YET)
    assert not missing, f"public functions without a contract test (add them to cases()): {missing}"
    assert not sorted(NOT_YET & covered), "covered now: take them off NOT_YET"
    assert _public_functions() >= NOT_YET, sorted(NOT_YET - _public_functions())


# ----------------------------------------------------------------------------- generated from the signatures

EXAMPLES = int(os.environ.get("DIKKAT_CONTRACT_EXAMPLES", "300"))  # make test: 3,000
PLAIN = (int, float, str, bool, bytes, type(None))


def _plain(hint) -> bool:
    """A hint hypothesis can generate without building the project's objects: builtins, their containers,
    unions and literals."""
    if hint in PLAIN:
        return True
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        return True
    if origin in (typing.Union, types.UnionType, list, tuple, dict, set, frozenset, collections.abc.Sequence,
                  collections.abc.Iterable):
        return bool(args) and all(a is Ellipsis or _plain(a) for a in args)
    return False


def _strategy(fn, param: str, good) -> st.SearchStrategy:
    """Values for one parameter: the odd ones, the one that works, and what hypothesis builds from the annotation
    (``st.from_type``) where it is made of builtins."""
    try:
        hint = typing.get_type_hints(inspect.unwrap(fn)).get(param)
    except Exception:  # noqa: BLE001  (an annotation naming what the module imports only for the checker)
        hint = None
    parts = [st.sampled_from(ODD), st.just(good)]
    if hint is not None and _plain(hint):
        parts.append(st.from_type(hint))
    return st.one_of(*parts)


class _Cases(dict):
    def __repr__(self) -> str:  # hypothesis prints the fixture with a failing example
        return f"<{len(self)} public functions>"


@pytest.fixture(scope="module")
def generated(dec, enc):
    return _Cases({name: (fn, good, {p: _strategy(fn, p, v) for p, v in good.items()})
                   for name, (fn, good) in cases(dec, enc).items() if good})


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_generated_arguments_keep_the_contract(generated, data):
    """Arguments built from each public function's signature (``st.from_type`` of its annotations, the odd values
    and the values that work, one to three parameters at a time): a finite result or a coded refusal within a
    second."""
    name = data.draw(st.sampled_from(sorted(generated)), label="function")
    fn, good, strategies = generated[name]
    params = data.draw(st.lists(st.sampled_from(sorted(good)), min_size=1, max_size=3, unique=True), label="params")
    kwargs = dict(good, **{p: data.draw(strategies[p], label=p) for p in params})
    fault = call(fn, kwargs, GENERATED)
    assert fault is None, f"{name}: {fault}"


GENERATED = Tally()


def test_tally_reads_zero_faults():
    """What README's testing section reports (run after the two tests above, in this file's order)."""
    print(f"contracts: {TALLY.calls} odd-value calls, {GENERATED.calls} generated; raw errors "
          f"{TALLY.raw + GENERATED.raw}, not finite {TALLY.not_finite + GENERATED.not_finite}, refusals of a second "
          f"or more {TALLY.slow + GENERATED.slow}", file=sys.stderr)
    assert TALLY.raw + GENERATED.raw + TALLY.not_finite + GENERATED.not_finite + TALLY.slow + GENERATED.slow == 0
