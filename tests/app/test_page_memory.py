"""Memory bounded by construction, in the app (issue 44): once the shared cache's budget is reached, a page that reads
distinct texts keeps nothing more per text outside the cache, with no garbage collection between runs (the server's
per-run full collection is off); and heavy work above the server's memory budget is refused with the engine's message
in the interface language. bench/app_memory.py measures the same in resident memory over every page."""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from links import open_linked

from models.loading import loader
from views import shared

WORDS = ["cat", "mouse", "garden", "river", "teacher", "student", "window", "morning", "evening", "forest", "mountain",
         "city", "train", "book"]
# page -> (file, link parameters)
PAGES = {
    "explore": ("views/explore.py", {"view": "head"}),
    "flow": ("views/flow.py", {}),
    "why": ("views/why.py", {}),
    "masks": ("views/masks.py", {"masks_section": "compare"}),
    "head_masks": ("views/masks.py", {"masks_section": "per_head", "masks_ph_text": "sidebar"}),
    "pruning": ("views/pruning.py", {}),
}


def _text(i: int, sentences: int = 10) -> str:
    """A distinct English text of about ``12 · sentences`` tokens."""
    return " ".join(f"The {WORDS[(i + k) % len(WORDS)]} near the {WORDS[(3 * i + 7 * k) % len(WORDS)]} was seen on "
                    f"day {100 * i + k}." for k in range(sentences))


def _loose_bytes() -> int:
    """Bytes of numpy arrays and torch tensors alive (garbage in cycles included: nothing is collected) that no entry
    of the shared cache or of the model cache reaches."""
    held: set[int] = set()
    stack = [v for v, _ in list(shared.CACHE._entries.values()) + list(loader._LOADED._entries.values())]
    while stack:
        obj = stack.pop()
        if id(obj) in held or isinstance(obj, (type, type(sys))):
            continue
        held.add(id(obj))
        stack.extend(gc.get_referents(obj))
    seen, total = set(), 0
    for obj in gc.get_objects():  # tracked objects (tensors among them); arrays are found as their referents
        if id(obj) in held:
            continue
        for item in [obj, *gc.get_referents(obj)]:
            if id(item) in held or id(item) in seen:
                continue
            if isinstance(item, np.ndarray) and item.base is None:
                seen.add(id(item))
                total += item.nbytes
            elif isinstance(item, torch.Tensor) and not isinstance(item, torch.nn.Parameter):
                seen.add(id(item))
                total += item.untyped_storage().nbytes()
    return total


@pytest.mark.parametrize("page", PAGES)
def test_a_page_keeps_nothing_per_text_outside_the_cache(page, smollm2, monkeypatch):
    """Six distinct ~120-token texts in one session with a cache budget of about one text: what is alive outside the
    caches after the sixth is what it was after the third (before the fix, every run's page namespace stayed alive in
    a reference cycle with the run's analysis, flow and figures: ~0.2-5 MiB per text here, ~200 MiB on Information
    flow at 256 tokens)."""
    file, params = PAGES[page]
    monkeypatch.setattr(shared.CACHE, "budget", 1 << 20)  # every new text evicts the last one's entries
    shared.CACHE.clear()
    gc.collect()
    gc.disable()
    try:
        at = open_linked(file, "smollm2-135m", params, _text(0))
        loose = []
        for i in range(1, 7):
            at.session_state["text"] = _text(i)
            at.run()
            assert not at.exception, [e.message for e in at.exception]
            if i in (3, 6):
                loose.append(_loose_bytes())
        assert shared.CACHE.evictions
    finally:
        gc.enable()
        shared.CACHE.clear()
    growth = (loose[1] - loose[0]) / 3  # small values a run's namespace keeps for its widgets' functions: < 0.1 MiB
    assert growth < 1 << 20, f"{page}: {growth / 2 ** 20:.2f} MiB per text alive outside the caches ({loose})"


def test_heavy_work_above_the_memory_budget_is_refused_with_a_message(minilm, monkeypatch):
    """DIKKAT_MEMORY_GIB below what the server holds: a new text's analysis is not started; the page says why, in
    English and in Turkish, instead of the process meeting the OOM killer."""
    monkeypatch.setenv("DIKKAT_MEMORY_GIB", "0.01")
    monkeypatch.setenv("DIKKAT_MEMORY_WAIT_S", "0")
    at = open_linked("views/explore.py", "minilm-l6", {}, "A sentence no test has analysed, to be refused.")
    errors = " ".join(e.value for e in at.error)
    assert "memory budget of 0.0 GiB" in errors and "was not started" in errors, errors
    assert not at.exception
    at = open_linked("views/explore.py", "minilm-l6", {}, "Henüz çözümlenmemiş, reddedilecek bir cümle.")
    at.radio(key="lang").set_value("tr").run()
    errors = " ".join(e.value for e in at.error)
    assert "bellek bütçesinin üstünde" in errors and "başlatılmadı" in errors, errors
    monkeypatch.setenv("DIKKAT_MEMORY_GIB", "1000")
    at.run()
    assert not at.error and not at.exception


def test_a_run_forgets_what_holds_memory_and_keeps_what_its_widgets_read(minilm):
    """views/shared/pagerun.py: the namespace of a finished run keeps its definitions and small values (a
    ``format_func`` may read ``labels`` after the run) and drops what holds 64 KiB or more, closures included."""
    from views.shared import pagerun

    big = np.zeros(100_000, dtype=np.float32)
    namespace = {"__file__": "views/flow.py", "np": np, "shared": shared, "labels": ["kedi", "fareyi"], "L": "tr",
                 "weights_row": big[:10].copy(), "analysis": {"attentions": big}, "table": [big],
                 "closure": (lambda b=big: b), "t": shared.t,
                 "model": torch.nn.Linear(200, 200)}  # the model: counted by the model cache
    exec("show = lambda i: f'{i} · {labels[i]}'", namespace)  # a format_func of the page: reads its globals  # noqa: S102
    dropped = pagerun.forget_run(namespace)
    assert dropped == ["analysis", "table", "closure"], dropped
    assert namespace["show"](1) == "1 · fareyi" and "model" in namespace and "__file__" in namespace
    runs = dict(pagerun.RUNS)
    open_linked("views/flow.py", "minilm-l6", {}, "The cat chased the mouse.")
    # this Streamlit's pages are run by run_page itself (a namespace to forget), not by page.run()
    assert pagerun.RUNS["own"] == runs["own"] + 2 and pagerun.RUNS["fallback"] == runs["fallback"]


def test_an_app_test_leaves_pythons_collector_as_it_is():
    """Issue 48: app.py settles the heap (gc.freeze after each model's load, models/memory.py) in a server only.
    AppTest mocks Streamlit's runtime, so ``runtime.exists()`` alone took a test process for a server: its later
    tests' leak checks (gc.get_objects skips frozen objects) and memory tests ran on a frozen heap."""
    from streamlit.testing.v1 import AppTest

    from models import memory

    at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "app.py"), default_timeout=600)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert memory._SETTLED["on"] is False and gc.get_freeze_count() == 0
