"""Every public function keeps its contract (issue 47 point 1): the functions in the ``__all__`` of ``models``, its
subpackages and ``live`` are called with values that work, then with each parameter in turn replaced by an odd value
(None, NaN, ±inf, -1, 10**30, an empty string, bytes, a lone surrogate, an empty list, an object, a bool). The
property: the call returns finite numbers (every float in what it returns, two levels deep) or raises a
:class:`models.DikkatError` (``live``'s own :class:`live.LiveError`), never a raw Python error, and in less than
a second (a size that cannot be done is refused before the work starts).

The inventory keeps the next feature covered on the day it lands: a public function that is neither here nor in
the fuzzing tiers (tests/engine/test_fuzz_documented.py, test_fuzz_api.py, test_refused_arguments.py) fails, unless
:data:`NOT_YET` lists it; a listed function that is covered must leave the list."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
import re
import time

import numpy as np
import pytest
import torch

import live
import models
from conftest import ROOT
from models import atlas, flow, pruning, sparse, turkish, why
from models.analysis import attach_stacks, weight_budget_tokens
from tiny import build_tiny

PACKAGES = ("models", "models.pruning", "models.atlas", "models.experiments", "models.why", "models.flow",
            "models.sparse", "models.turkish", "models.speech", "models.analysis", "live")
ODD = (None, float("nan"), float("inf"), float("-inf"), -1, 10 ** 30, "", b"x", "a\ud800b", [], object(), True)
FUZZED = ("test_fuzz_documented.py", "test_fuzz_api.py", "test_refused_arguments.py")
# public functions without a contract here or a fuzz entry yet: each is taken off once it has one
NOT_YET = {
    "models.analyze_audio", "models.speech.analyze_audio", "models.speech.analyze_wav",  # a speech model's pass
    "models.atlas.second_copy_effects",  # the tiny tokenizers have too few tokens for its random sequences
}
TEXT = "the cat chased the mouse"


def finite(value, depth: int = 0) -> bool:
    """Every float in ``value`` is finite (arrays, tensors, dicts, lists, tuples and dataclasses, 3 levels)."""
    if depth > 3:
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, np.ndarray) and value.dtype.kind == "f":
        return bool(np.isfinite(value).all())
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return bool(torch.isfinite(value).all())
    if isinstance(value, dict):
        return all(finite(v, depth + 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(finite(v, depth + 1) for v in value[:100])
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return all(finite(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value))
    return True


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
        "models.pruning.estimate_curve_seconds": (pruning.estimate_curve_seconds, {"loaded": dec, "texts": ["the cat"]}),
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
        "live.teacher_token": (live.teacher_token, {"environ": {"DIKKAT_TEACHER_TOKEN": "t"}}),
        "live.store_from_env": (live.store_from_env, {"environ": {}}),
    }


def _call(fn, kwargs) -> None:
    start = time.perf_counter()
    try:
        result = fn(**kwargs)
    except (models.DikkatError, live.LiveError):
        result = None
    assert time.perf_counter() - start < 1.0, "took a second or more: not refused before the work"
    assert finite(result), "returned a number that is not finite"


def test_every_public_function_keeps_its_contract(dec, enc):
    faults = []
    for name, (fn, good) in cases(dec, enc).items():
        try:
            result = fn(**good)
        except Exception as exc:  # noqa: BLE001  (reported)
            faults.append(f"{name}: values that work raised {type(exc).__name__}: {exc}")
            continue
        assert finite(result), name
        for param in good:
            for odd in ODD:
                try:
                    _call(fn, dict(good, **{param: odd}))
                except AssertionError as exc:
                    faults.append(f"{name}({param}={odd!r:.30}): {exc}")
                except Exception as exc:  # noqa: BLE001  (a raw Python error: the fault this test is for)
                    faults.append(f"{name}({param}={odd!r:.30}): {type(exc).__name__}: {str(exc)[:100]}")
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
    fuzzed = "".join((ROOT / "tests" / "engine" / f).read_text(encoding="utf-8") for f in FUZZED)
    here = set(cases(dec, enc))
    covered = {name for name in _public_functions()
               if name in here or re.search(rf"\b{re.escape(name.rsplit('.', 1)[1])}\b", fuzzed)}
    missing = sorted(_public_functions() - covered - NOT_YET)
    assert not missing, f"public functions without a contract test (add them to cases()): {missing}"
    assert not sorted(NOT_YET & covered), "covered now: take them off NOT_YET"
    assert _public_functions() >= NOT_YET, sorted(NOT_YET - _public_functions())
