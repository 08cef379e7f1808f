"""Memory bounded by construction (issue 44): the engine's results are freed by reference counting alone (no cycle
left for a full garbage collection the server does not run), a cache hands what it drops to models.memory (memory
given back, garbage collected only for entries left alive), and heavy work above the server's memory budget waits for
running passes or is refused with a coded message."""

from __future__ import annotations

import gc
import threading
import time
import weakref

import numpy as np
import pytest

import models
from models import budget, memory
from models import flow as mflow
from models import why as mwhy

TEXT = "the cat chased the mouse and the dog saw the cat"


@pytest.fixture
def no_gc():
    """The garbage collector off: what is freed is freed by reference counting (as between a server's rare full
    collections)."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _freed(make) -> None:
    ref = weakref.ref(make())
    assert ref() is None, f"{type(make()).__name__} outlives its last reference (a reference cycle)"


def test_results_of_the_engine_are_freed_without_the_garbage_collector(tiny, no_gc):
    loaded = tiny("gpt2")

    def held():
        a = models.analyze(loaded, TEXT)
        dict(a.statistics), dict(a.overview)  # noqa: B018  (filled when first read)
        return a

    def on_demand():
        a = models.analyze(loaded, TEXT, keep=False)
        a.attentions["decoder"][1, 0]  # noqa: B018  (a layer computed again and kept by the stack)
        return a

    def flow():
        f = mflow.information_flow(loaded, models.analyze(loaded, TEXT))
        f.logit_lens(3, k=2), f.direct_effect(3), f.token_shares(1)  # noqa: B018
        return f

    for make in (held, on_demand, flow,
                 lambda: mwhy.explain(loaded, models.analyze(loaded, TEXT), layer=1, keep=False)):
        _freed(make)


def test_a_layer_explained_and_kept_goes_with_its_analysis(tiny, no_gc):
    loaded = tiny("gpt2")
    a = models.analyze(loaded, TEXT)
    why = weakref.ref(mwhy.explain(loaded, a, layer=1))
    assert why() is mwhy.explain(loaded, a, layer=1)  # kept: the second call runs no pass
    del a
    assert why() is None


def test_a_cache_hands_over_what_it_drops_and_sheds_under_pressure():
    handed = []
    cache = budget.ByteLRU(3_000_000, on_evict=lambda dropped: handed.append(sorted(s for _, s in dropped)),
                           sheddable=True)
    assert cache in budget.SHEDDABLE
    for key in "abcd":
        cache.put(key, np.zeros(1_000_000, dtype=np.uint8))
    assert len(handed) == 1 and len(handed[0]) == 1 and handed[0][0] >= 1_000_000  # "a", by its measured bytes
    assert cache.shed(1_500_000) >= 2_000_000 and list(cache.sizes()) == ["d"]  # down to what fits, oldest first
    assert len(handed) == 2 and len(handed[1]) == 2


def test_dropped_entries_give_memory_back_and_a_collection_only_for_those_left_alive(monkeypatch):
    trims, collections = [], []
    monkeypatch.setattr(memory, "trim", lambda: trims.append(1) or True)
    monkeypatch.setattr(memory.gc, "collect", lambda *a: collections.append(1) or 0)
    monkeypatch.setattr(memory, "_state", dict(memory._state, dropped=0, alive=0))
    monkeypatch.setattr(memory, "TRIM_BYTES", 100)
    monkeypatch.setattr(memory, "COLLECT_BYTES", 1_000)

    class Result:  # weakly referenceable, as the engine's results
        pass

    dropped = [(Result(), 60)]
    memory.after_eviction(dropped)
    assert dropped == [] and not trims  # 60 bytes dropped: not yet worth a trim
    memory.after_eviction([(Result(), 60)])
    assert len(trims) == 1 and not collections  # freed by reference counting: no collection
    kept = [Result() for _ in range(3)]  # still referenced elsewhere (a page reading it, or a cycle)
    memory.after_eviction([(k, 400) for k in kept[:2]])
    assert not collections
    memory.after_eviction([(kept[2], 400)])
    assert len(collections) == 1  # 1,200 bytes left alive: one full collection, then counted again from 0


def test_the_budget_comes_from_the_environment_or_the_machine(monkeypatch):
    monkeypatch.setenv("DIKKAT_MEMORY_GIB", "1.5")
    assert memory.budget_bytes() == int(1.5 * budget.GIB)
    monkeypatch.delenv("DIKKAT_MEMORY_GIB")
    machine = memory.machine_bytes()
    assert abs(memory.budget_bytes() - memory.DEFAULT_SHARE * machine) < budget.GIB / 100
    assert 0 < memory.resident() < machine and memory.RESERVE_MIN <= memory.reserve() < machine


def test_heavy_work_above_the_budget_is_refused_with_a_coded_message(tiny, monkeypatch):
    loaded = tiny("gpt2")
    shed = budget.ByteLRU(10 ** 9, sheddable=True)
    for key in "abcd":
        shed.put(key, np.zeros(100_000, dtype=np.uint8))
    monkeypatch.setenv("DIKKAT_MEMORY_GIB", "0.01")  # 10 MiB: below what this process holds
    monkeypatch.setenv("DIKKAT_MEMORY_WAIT_S", "0")
    refused = memory.stats()["refused"]
    with pytest.raises(models.ModelOutOfMemoryError) as caught:
        models.analyze(loaded, TEXT + " again")
    exc = caught.value
    assert exc.code == "memory_budget" and set(exc.params) == {"used", "budget"} and exc.params["budget"] == "0.0"
    assert float(exc.params["used"]) > 0 and "DIKKAT_MEMORY_GIB" in str(exc)
    assert memory.stats()["refused"] == refused + 1
    assert len(shed) <= 2  # the caches that may shed dropped their older half before refusing
    monkeypatch.setenv("DIKKAT_MEMORY_GIB", "1000")
    assert models.analyze(loaded, TEXT + " again").tokens


def test_a_full_machine_refuses_too(monkeypatch):
    monkeypatch.setenv("DIKKAT_MEMORY_GIB", "1000")
    monkeypatch.setenv("DIKKAT_MEMORY_WAIT_S", "0")
    monkeypatch.setattr(memory, "available_bytes", lambda: memory.RESERVE_MIN // 2)
    with pytest.raises(models.ModelOutOfMemoryError) as caught:
        memory.admit()
    assert caught.value.code == "memory_machine" and set(caught.value.params) == {"used", "budget"}


def test_heavy_work_waits_for_a_running_pass_to_end(monkeypatch):
    """Over the budget while another session's pass runs: the new pass waits for it instead of being refused."""
    full = threading.Event()
    monkeypatch.setattr(memory, "over", lambda: "process" if full.is_set() else None)
    monkeypatch.setattr(memory, "_free_some", lambda: None)
    monkeypatch.setenv("DIKKAT_MEMORY_WAIT_S", "10")
    started, release = threading.Event(), threading.Event()

    def other_pass():
        with memory.heavy():
            started.set()
            release.wait(10)
            full.clear()  # its memory given back as it ends

    thread = threading.Thread(target=other_pass)
    thread.start()
    started.wait(10)
    full.set()
    threading.Timer(0.5, release.set).start()
    waited = memory.stats()["waited"]
    start = time.monotonic()
    with memory.heavy():  # admitted once the other pass has ended
        pass
    thread.join(10)
    assert time.monotonic() - start >= 0.4 and memory.stats()["waited"] == waited + 1
    with memory.heavy():  # a pass inside an admitted one is not checked again
        full.set()
        with memory.heavy():
            pass
    full.clear()


def test_holds_at_least_stops_at_the_limit_and_follows_closures_not_modules():
    big = np.zeros(1 << 20, dtype=np.uint8)
    assert budget.holds_at_least({"a": [big[:10]]}, 1 << 20)  # a view counts its base
    assert not budget.holds_at_least(["small", 1, 2.0], 1 << 10)
    assert budget.holds_at_least(lambda b=big: b, 1 << 20)  # a default
    assert not budget.holds_at_least(test_holds_at_least_stops_at_the_limit_and_follows_closures_not_modules, 1 << 10)
    assert not budget.holds_at_least([big], 1 << 20, skip=(np.ndarray,))
    assert budget.holds_at_least(list(range(50)), 1, max_objects=10)


def test_a_walk_stops_at_a_cache_entry_and_counts_the_cache_s_bytes():
    """Issue 48: what a page holds is walked on each of 30 students' runs; a value of the shared cache counts the
    bytes the cache measured for it and is not followed (a walk into it cost 6 % of a class's server time). An entry
    replaced, dropped or evicted is no longer counted; the same object under two keys is counted until both go."""

    cache = budget.ByteLRU(1000, measure=lambda v: 600)
    entry = [np.zeros(10_000)]  # 80 kB, if a walk went into it
    cache.put("a", entry)
    assert cache.counted(entry) == 600 and cache.counted([np.zeros(10_000)]) is None
    assert budget.holds_at_least({"page": [entry]}, 500, counted=cache.counted)
    assert not budget.holds_at_least({"page": [entry]}, 2_000, counted=cache.counted)  # 600 + the dict and list
    assert budget.holds_at_least({"page": [entry]}, 2_000)  # walked into without the cache's count
    assert budget.holds_at_least({"page": [entry, np.zeros(200)]}, 2_000, counted=cache.counted)
    cache.put("b", entry)  # the same object under a second key
    cache.discard("a")
    assert cache.counted(entry) == 600
    cache.put("b", [])  # replaced
    assert cache.counted(entry) is None
    other = [4]
    cache.put("c", other)  # 1,200 bytes over a budget of 1,000: the least recently used goes
    assert cache.counted(other) == 600 and len(cache) == 1 and cache.counted(cache.get("c")) == 600
    cache.clear()
    assert cache.counted(other) is None


def test_statistics_kept_without_their_analysis_refuse_with_a_code(tiny, no_gc):
    """The lazy statistics hold their analysis weakly (no cycle): read after it is freed they cannot be computed,
    and say so with a coded error (an AttributeError from inside before)."""
    a = models.analyze(tiny("gpt2"), TEXT)
    stats = a.statistics
    del a
    with pytest.raises(models.UnsupportedOperationError) as err:
        dict(stats)
    assert err.value.code == "analysis_freed"


def test_a_settled_heap_freezes_what_is_alive_and_still_frees_a_dropped_cycle(monkeypatch):
    """Issue 48: a server's full collections walked every object of torch, transformers and the models (17 of up to
    1.06 s in one lesson). With the settled heap on, what is alive is frozen out of the collector's walks, and again
    after each model's load; a collection the memory budget asks for still frees a dropped model in a reference
    cycle (frozen before it was dropped), and freezes again after. Off (a library user's process), nothing freezes."""
    monkeypatch.setattr(memory, "_SETTLED", {"on": False, "freezes": 0})
    try:
        memory.settle()
        assert gc.get_freeze_count() == 0  # off: Python's collector as it is

        class Model:  # a loaded model's part, in a reference cycle
            pass

        model = Model()
        model.me = model
        gone = weakref.ref(model)
        memory.keep_heap_settled()
        assert gc.get_freeze_count() > 0 and memory._SETTLED["freezes"] == 1
        memory.keep_heap_settled()  # once per process: a second call freezes nothing more
        assert memory._SETTLED["freezes"] == 1
        del model
        gc.collect()
        assert gone() is not None  # frozen: the collector's own collections leave it
        memory.collect()
        assert gone() is None and gc.get_freeze_count() > 0  # the budget's collection frees it, and freezes again
    finally:
        gc.unfreeze()


def test_a_models_load_settles_the_heap_once(tiny_folder, monkeypatch):
    """The settled heap freezes what a model's load made (models/loading/loader.py calls :func:`memory.settle`); a
    model from the cache loads nothing and settles nothing."""
    from models.loading import loader

    calls = []
    monkeypatch.setattr(memory, "settle", lambda: calls.append(1))
    monkeypatch.setattr(loader, "_LOADED", budget.ByteLRU(1 << 30))
    first = models.load(str(tiny_folder("bert")), device="cpu")
    assert calls == [1]
    assert models.load(str(tiny_folder("bert")), device="cpu") is first and calls == [1]
