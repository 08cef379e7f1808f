"""The Cost page's Measure on the heavy-work pool (issue 44 point 5): two sessions pressing the same measurement get
one run, only its starter sees Stop, and a second, different job of the same session is refused with a message in
the interface language. Each job blocks on an event the test sets: no timing."""

from __future__ import annotations

import json
import threading

from streamlit.testing.v1 import AppTest

from conftest import ROOT
from models import jobs as J
from models.lessons import cost

STRINGS = {}
for name in ("jobs.json", "teach.json", "errors.json"):
    STRINGS.update(json.loads((ROOT / "assets/i18n" / name).read_text(encoding="utf-8")))


def _cost_page(lang: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.session_state["model_key"] = "minilm-l6"
    at.session_state["lang"] = lang
    at.run()
    at.switch_page("views/cost.py")
    at.run()
    return at


def _press(at: AppTest, lengths: list[int]) -> None:
    at.multiselect(key="cost_lengths").set_value(lengths)
    at.number_input(key="cost_repeats").set_value(1)
    at.button(key="cost_run").click().run()


def test_two_sessions_pressing_the_same_measure_one_run_only_the_starter_stops(minilm, monkeypatch):
    gate, calls, real = threading.Event(), [], cost.measure_cost

    def counted(*args, **kwargs):
        calls.append(args[1])
        gate.wait(120)
        return real(*args, **kwargs)

    monkeypatch.setattr(cost, "measure_cost", counted)
    alice, bob = _cost_page("en"), _cost_page("tr")
    _press(alice, [16, 32])
    _press(bob, [32, 16])  # the same measurement, in another order
    params = alice.session_state["cost_job::minilm-l6"]
    assert bob.session_state["cost_job::minilm-l6"] == params
    job = J.pool().get("cost", params)
    assert job is not None and not job.finished
    assert [b.label for b in alice.button if b.key == "cost_stop_btn"] == [STRINGS["heavy_stop"]["en"]]
    assert not [b for b in bob.button if b.key == "cost_stop_btn"]  # another session cannot stop it
    assert STRINGS["heavy_shared"]["tr"] in [c.value for c in bob.caption]
    # the same session asks for a different measurement while its own runs: refused, said in its language
    _press(alice, [16])
    assert [e.value for e in alice.error] == [STRINGS["errmsg_heavy_busy"]["en"].format(
        kind=STRINGS["heavy_kind_cost"]["en"])]
    gate.set()
    assert job.wait(300) and job.state == "done"
    for at in (alice, bob):
        at.run()
        assert not at.exception and len(at.dataframe[0].value) == 4  # 2 lengths x 2 implementations
    assert len(calls) == 1  # computed once for both sessions
    _press(bob, [16, 32])  # pressed again: served
    assert len(calls) == 1 and len(bob.dataframe[0].value) == 4


def _pruning_page(folder: str, lang: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.session_state["model_key"] = "minilm-l6"
    at.session_state["model_custom"] = folder
    at.session_state["text"] = "kedi fareyi kovaladı"
    at.session_state["lang"] = lang
    at.run()
    at.switch_page("views/pruning.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_pruning_curve_runs_once_on_the_pool_and_its_starter_stops_it(tiny_folder, monkeypatch, tmp_path,
                                                                         request):
    """Issue 44 point 5: the curve ran inside the pressing session's script, once per student who pressed; now two
    sessions pressing it are one job on the pool, only the starter sees Stop, a Stop ends it without keeping a
    half-made curve (said in the session's language), and pressed again it runs to the end for both."""
    from models import pruning
    from views import shared

    monkeypatch.setenv("DIKKAT_AHEAD_ROOT", str(tmp_path / "ahead"))

    def forget_curves():  # before, and after: a later test of the same tiny model expects no curve yet
        for key in [k for k in shared.CACHE.sizes() if isinstance(k, tuple) and k and k[0] == "prune_curve"]:
            shared.CACHE.discard(key)

    forget_curves()
    request.addfinalizer(forget_curves)
    gate, calls, real = threading.Event(), [], pruning.gradient_importance

    def counted(*args, **kwargs):
        calls.append(1)
        gate.wait(120)
        kwargs["progress"](0.5)  # a step: a Stop asked meanwhile ends the job here
        return real(*args, **kwargs)

    monkeypatch.setattr(pruning, "gradient_importance", counted)
    folder = str(tiny_folder("gpt2"))
    alice, bob = _pruning_page(folder, "en"), _pruning_page(folder, "tr")
    alice.button(key="prune_btn_curve").click().run()
    bob.button(key="prune_btn_curve").click().run()
    job = J.pool().get("pruning_curve", alice.session_state["_heavy_asked::pruning_curve"])
    assert job is not None and not job.finished
    assert bob.session_state["_heavy_asked::pruning_curve"] == job.key[1]
    assert [b.label for b in alice.button if b.key == "prune_curve_stop"] == [STRINGS["heavy_stop"]["en"]]
    assert not [b for b in bob.button if b.key == "prune_curve_stop"]
    alice.button(key="prune_curve_stop").click().run()
    gate.set()
    assert J.pool().idle(300) and job.state == "stopped" and len(calls) == 1
    bob.run()
    assert STRINGS["heavy_stopped"]["tr"] in [c.value for c in bob.caption]
    assert not any("%40'ta" in c.value for c in bob.caption)  # nothing half-made shown or kept
    assert not [k for k in shared.CACHE.sizes() if isinstance(k, tuple) and k and k[0] == "prune_curve"]
    bob.button(key="prune_btn_curve").click().run()
    assert J.pool().idle(300)
    for at in (alice, bob):
        at.run()
        assert not at.exception, [e.value for e in at.exception]
    assert any("at 40 %" in c.value for c in alice.caption) and any("%40'ta" in c.value for c in bob.caption)
    assert len(calls) == 2  # the stopped run and the whole one: never one per session


def test_a_session_running_an_experiment_cannot_start_a_curve_too(tiny_folder, monkeypatch, tmp_path, request):
    """One heavy job per session (issue 44 point 5), whatever the page: the curve asked while this session's
    experiment runs is refused with the experiment named, in the session's language."""
    from models import experiments as E

    monkeypatch.setenv("DIKKAT_AHEAD_ROOT", str(tmp_path / "ahead"))
    gate, real = threading.Event(), E.run

    def held(*args, **kwargs):
        gate.wait(120)
        return real(*args, **kwargs)

    monkeypatch.setattr(E, "run", held)
    at = _pruning_page(str(tiny_folder("gpt2")), "tr")
    at.switch_page("views/experiments.py")
    at.session_state["exp_which"] = "clark"
    at.run()
    from views import shared
    shared.CACHE.discard(("experiments", "clark", "minilm-l6"))
    request.addfinalizer(lambda: shared.CACHE.discard(("experiments", "clark", "minilm-l6")))  # later tests start clean
    at.run()
    at.button(key="exp_run_clark").click().run()
    assert [b.key for b in at.button if b.key == "exp_stop_clark"] == ["exp_stop_clark"]
    at.switch_page("views/pruning.py")
    at.run()
    at.button(key="prune_btn_curve").click().run()
    assert [e.value for e in at.error] == [STRINGS["errmsg_heavy_busy"]["tr"].format(
        kind=STRINGS["heavy_kind_experiment"]["tr"])]
    gate.set()
    assert J.pool().idle(600)
