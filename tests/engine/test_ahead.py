"""Results computed ahead (models/ahead.py): kept on disk without pickle, read back equal, keyed by what they depend
on, computed once per machine."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from conftest import TEST_DEVICE
from models import ahead, pruning
from models.experiments import SinksResult
from models.experiments.induction import InductionResult
from models.experiments.sinks import FirstTokenShare


@pytest.fixture()
def ahead_root(tmp_path, monkeypatch):
    monkeypatch.setenv("DIKKAT_AHEAD_ROOT", str(tmp_path / "ahead"))
    return tmp_path / "ahead"


@pytest.fixture(scope="module")
def gpt2(tiny):
    return tiny("gpt2")


def _induction() -> InductionResult:
    rng = np.random.default_rng(0)
    return InductionResult(scores=rng.random((2, 4)).astype(np.float32), loss_first=3.25, loss_second=float("nan"),
                           top=[("decoder", 1, 2), ("decoder", 0, 3)], loss_second_off=float("inf"),
                           loss_second_random=np.array([1.5, 2.5]), length=50, sequences=np.int64(4), seconds=1.0)


def test_a_result_reads_back_equal(ahead_root, gpt2):
    job = ahead.experiment_job("induction", "smollm2-135m")
    result = _induction()
    path = ahead.save(job, gpt2, result)
    back = ahead.load(job, gpt2)
    assert type(back) is InductionResult
    np.testing.assert_array_equal(back.scores, result.scores)
    assert back.scores.dtype == np.float32
    assert back.top == [("decoder", 1, 2), ("decoder", 0, 3)] and isinstance(back.top[0], tuple)
    assert math.isnan(back.loss_second) and back.loss_second_off == math.inf and back.loss_first == 3.25
    assert back.sequences == 4 and back.length == 50
    # plain JSON beside an array file: nothing pickled
    assert json.loads(path.read_text())["job"]["params"] == {"key": "induction"}
    with np.load(path.with_suffix(".npz"), allow_pickle=False) as npz:
        assert len(npz.files) == 2


def test_dicts_with_tuple_keys_frozen_dataclasses_and_live_fields(ahead_root, gpt2):
    share = FirstTokenShare(per_head=np.ones((2, 2)), per_layer=np.ones(2), tokens=7, first_token="<s>", loss=1.0,
                            seconds=0.5)
    kept = {("decoder", 1): share, "model": gpt2, "off": frozenset()}  # SinksResult.share is typed object
    job = ahead.experiment_job("sinks", "x")
    ahead.save(job, gpt2, SinksResult(share=kept, streaming=None, seconds=1.5))
    back = ahead.load(job, gpt2).share
    assert back[("decoder", 1)].first_token == "<s>" and back[("decoder", 1)].tokens == 7
    assert back["model"] is None and back["off"] is None  # live objects are not kept


def curve(texts=("a b", "c d"), orders: int = 3) -> pruning.PruningCurve:
    """A small pruning curve of ten steps, as the tiny gpt2 (8 heads) would give."""
    rng = np.random.default_rng(1)
    shares = np.round(np.arange(10) / 10, 1)
    return pruning.PruningCurve(shares=shares, n_pruned=np.rint(shares * 8).astype(int), by_importance=rng.random(10),
                                random=rng.random((orders, 10)), metric="loss",
                                order=[("decoder", i // 4, i % 4) for i in range(8)], texts=list(texts), total_heads=8,
                                seconds=2.5)


def test_the_key_holds_the_parameters_the_device_and_the_engine(ahead_root, gpt2, monkeypatch):
    job = ahead.curve_job("smollm2-135m", ["a b", "c d"])
    ahead.save(job, gpt2, curve())
    assert ahead.load(job, gpt2) is not None
    assert ahead.load(ahead.curve_job("smollm2-135m", ["a b"]), gpt2) is None  # other texts
    assert ahead.load(ahead.curve_job("minilm-l6", ["a b", "c d"]), gpt2) is None  # another model
    monkeypatch.setattr(gpt2, "dtype", __import__("torch").bfloat16)
    assert ahead.load(job, gpt2) is None  # computed in float32: not this precision's result
    monkeypatch.undo()
    ahead.engine_digest.cache_clear()
    monkeypatch.setattr(ahead, "ENGINE", ahead_root)  # other engine code: another digest
    ahead.root()
    (ahead_root / "x.py").write_text("changed = 1\n")
    try:
        assert ahead.load(job, gpt2) is None
    finally:
        ahead.engine_digest.cache_clear()


def test_a_broken_file_is_missing_not_an_error(ahead_root, gpt2):
    job = ahead.experiment_job("induction", "smollm2-135m")
    path = ahead.save(job, gpt2, _induction())
    path.write_text('{"result": {"__dataclass__": "os:system", "fields": {}}}')
    assert ahead.load(job, gpt2) is None  # a class outside the engine is never built
    path.write_text("{")
    assert ahead.load(job, gpt2) is None


def test_compute_ahead_once_per_machine(ahead_root, gpt2, tiny_folder):
    folder = str(tiny_folder("gpt2"))
    job = ahead.curve_job(folder, ["the cat chased the mouse", "kedi fareyi kovaladı"], random_orders=1)
    lines = []
    counts = ahead.compute_ahead([job], device=TEST_DEVICE, log=lines.append)  # where the fixtures' gpt2 runs
    assert counts == {"done": 1, "kept": 0, "failed": 0, "busy": 0}, lines
    curve = ahead.load(job, gpt2)
    assert isinstance(curve, pruning.PruningCurve)
    fresh = pruning.pruning_curve(gpt2, job.params["texts"], pruning.gradient_importance(gpt2, job.params["texts"]),
                                  random_orders=1)
    np.testing.assert_allclose(curve.by_importance, fresh.by_importance, rtol=1e-6)
    assert curve.order == fresh.order
    assert ahead.compute_ahead([job], device="cpu") == {"done": 0, "kept": 1, "failed": 0, "busy": 0}
    # a second process while one computes: it does nothing
    hold = ahead._lock()
    assert next(hold) is True
    try:
        assert ahead.compute_ahead([job], device="cpu")["busy"] == 1
    finally:
        next(hold, None)


def test_a_failed_job_is_reported_and_skipped(ahead_root, tiny_folder):
    folder = str(tiny_folder("bert"))
    lines = []
    counts = ahead.compute_ahead([ahead.experiment_job("induction", folder)], device="cpu", log=lines.append)
    assert counts["failed"] == 1 and counts["done"] == 0
    assert "induction" in lines[0]


def test_default_jobs_cover_every_experiment_and_model():
    from models.experiments import EXPERIMENTS

    jobs = ahead.default_jobs(installed_only=False)
    assert {(j.params["key"], j.model) for j in jobs if j.kind == "experiment"} == {
        (e.key, m) for e in EXPERIMENTS.values() for m in e.models}
    curve = [j for j in jobs if j.kind == "pruning_curve"]
    assert {j.model for j in curve} == {"smollm2-135m", "minilm-l6"}
    assert curve[0].params["texts"] == ahead.curve_texts() and len(ahead.curve_texts()) > 3
    atlases = [(j.model, j.params["corpus"]) for j in jobs if j.kind == "atlas"]
    assert sorted(atlases) == [("minilm-l6", "en"), ("minilm-l6", "tr"), ("smollm2-135m", "en"), ("smollm2-135m", "tr")]


def test_an_atlas_job_is_kept_once_complete_with_its_labels(ahead_root, gpt2, tmp_path, monkeypatch):
    """An atlas is kept by the atlas store: the job is done when the atlas build_atlas would open is complete and
    its causal labels are stored (here three texts in the shipped corpus's place, on the tiny decoder)."""
    from models import atlas

    monkeypatch.setenv("DIKKAT_ATLAS_ROOT", str(tmp_path / "atlas"))
    few = atlas.corpus_from_texts(["the cat chased the mouse", "the mouse chased the cat", "a cat"], name="few")
    monkeypatch.setattr(atlas, "shipped_corpus", lambda lang: few)
    job = ahead.atlas_job(gpt2.name, "en")
    assert not ahead._kept(job, gpt2)
    built = ahead.compute(job, gpt2)
    assert built.complete and built.labels() is not None
    assert ahead._kept(job, gpt2)
