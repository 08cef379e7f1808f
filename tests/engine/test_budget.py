"""Memory bounded by bytes (issue 10): measured entry sizes, least-recently-used eviction, one computation for
concurrent requests, the model cache, and a model placed by accelerate over CPU and disk."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch

import models
from models import budget
from models.loading import loader as loading

TEXT = "kedi fareyi kovaladı the cat chased the mouse"


def test_nbytes_counts_arrays_tensors_and_shared_buffers_once():
    a = np.zeros((256, 256), dtype=np.float32)  # 262,144 bytes
    t = torch.zeros(1000, dtype=torch.float64)  # 8,000 bytes
    obj = {"a": a, "view": a[:10], "again": a, "t": t, "t_view": t[:5], "list": [a, "x"]}
    size = budget.nbytes(obj)
    assert 262_144 + 8_000 <= size < 262_144 + 8_000 + 4_000  # containers add a little, buffers once
    assert budget.nbytes(obj, skip=(np.ndarray,)) < 8_000 + 4_000


def test_lru_evicts_least_recently_used_down_to_the_byte_budget():
    cache = budget.ByteLRU(3_000_000)
    make = lambda: np.zeros(1_000_000, dtype=np.uint8)  # noqa: E731  1 MB each (+ object headers)
    for key in "abc":
        cache.get_or_create(key, make)
    assert list(cache.sizes()) == ["a", "b", "c"] and cache.total <= 3_000_000
    cache.get("a")  # a is now the most recently used
    cache.get_or_create("d", make)
    assert list(cache.sizes()) == ["c", "a", "d"] and cache.evictions == 1
    big = np.zeros(5_000_000, dtype=np.uint8)
    cache.put("big", big)  # larger than the budget: served, everything else dropped
    assert list(cache.sizes()) == ["big"] and cache.get("big") is big
    assert all(size >= 1_000_000 for size in cache.sizes().values())


def test_concurrent_requests_compute_once():
    cache = budget.ByteLRU(10 ** 9)
    calls = []

    def slow():
        calls.append(1)
        time.sleep(0.2)
        return np.ones(10)

    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.get_or_create("k", slow))) for _ in range(5)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(calls) == 1 and len(results) == 5 and all(r is results[0] for r in results)


def test_budget_from_env(monkeypatch):
    monkeypatch.setenv("DIKKAT_TEST_GIB", "0.5")
    assert budget.budget_from_env("DIKKAT_TEST_GIB", 3) == 1 << 29
    monkeypatch.setenv("DIKKAT_TEST_GIB", "lots")
    assert budget.budget_from_env("DIKKAT_TEST_GIB", 3) == 3 << 30


def test_model_cache_drops_least_recently_used_model(tiny_folder, monkeypatch):
    monkeypatch.setattr(loading, "_LOADED", budget.ByteLRU(1))  # room for one model only
    first = models.load(str(tiny_folder("llama")), device="cpu")
    assert models.load(str(tiny_folder("llama")), device="cpu") is first
    models.load(str(tiny_folder("gpt2")), device="cpu")
    assert len(loading._LOADED) == 1
    again = models.load(str(tiny_folder("llama")), device="cpu")
    assert again is not first  # it was dropped and loaded again
    assert loading._LOADED.total >= budget.nbytes(again.model)


def test_on_demand_analysis_is_small_and_its_layer_cache_is_bounded(tiny):
    a = models.analyze(tiny("llama"), TEXT * 4, keep=False)
    fixed = budget.nbytes(a, skip=(models.LoadedModel,))
    assert fixed < 200_000  # tokens, statistics, overview, one mask: no layers x heads x n² weights
    stack = a.attentions["decoder"]
    assert stack.cached_nbytes == 0
    layer = stack[1]
    assert stack.cached_nbytes == layer.nbytes


def test_device_map_with_disk_offload_gives_the_same_weights_and_logits(tiny_folder, tmp_path):
    """A tiny Llama placed by accelerate: layer 1 offloaded to disk, the rest on CPU."""
    folder = str(tiny_folder("llama"))
    single = models.load(folder, device="cpu")
    placed = models.load(folder, device="cpu", device_map={
        "model.embed_tokens": "cpu", "model.layers.0": "cpu", "model.layers.1": "disk", "model.norm": "cpu",
        "model.rotary_emb": "cpu", "lm_head": "cpu"}, offload_folder=tmp_path / "offload")
    assert placed is not single and placed.model.hf_device_map["model.layers.1"] == "disk"
    assert placed.capture_path == "interface"
    for kwargs in ({}, {"heads_off": {("decoder", 1, 2)}}, {"mask": "sliding_window:3"}):
        want = models.analyze(single, TEXT, keep_logits=True, **kwargs)
        got = models.analyze(placed, TEXT, keep_logits=True, **kwargs)
        assert np.array_equal(got.logits, want.logits), kwargs
        np.testing.assert_array_equal(np.asarray(got.attentions["decoder"]), np.asarray(want.attentions["decoder"]))
        lazy = models.analyze(placed, TEXT, keep=False, **kwargs).attentions["decoder"]
        np.testing.assert_array_equal(lazy[1], np.asarray(want.attentions["decoder"])[1])
    with pytest.raises(models.InvalidArgumentError):
        models.load(folder, device_map=3)


def test_an_analysis_does_not_keep_a_dropped_model_and_loads_it_again(tiny_folder, monkeypatch):
    import gc

    monkeypatch.setattr(loading, "_LOADED", budget.ByteLRU(1))
    folder = str(tiny_folder("llama"))
    a = models.analyze(models.load(folder, device="cpu"), TEXT, keep=False)
    want = np.asarray(models.analyze(models.load(folder, device="cpu"), TEXT, keep=True).attentions["decoder"])
    models.load(str(tiny_folder("gpt2")), device="cpu")  # drops the Llama from the model cache
    gc.collect()
    assert a.attentions["decoder"].replay._loaded() is None  # the analysis did not keep it alive
    assert np.array_equal(a.attentions["decoder"][1], want[1])  # loaded again, same weights
