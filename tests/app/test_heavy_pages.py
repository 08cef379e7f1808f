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
