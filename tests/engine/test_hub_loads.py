"""Hub loads across sessions (models/loading/hub.py, issue 44 point 5): one download per hub id while others wait
for it, a failure remembered for DIKKAT_HUB_RETRY_S, and a total deadline. The download is replaced by a function
that blocks on an event the test sets, or fails: no network, no timing."""

from __future__ import annotations

import threading

import pytest

import models
from models.loading import hub


@pytest.fixture(autouse=True)
def _clean():
    hub._FAILED.clear()
    yield
    hub._FAILED.clear()


def test_a_failing_hub_load_is_remembered(monkeypatch):
    calls = []

    def fail(hub_id):
        calls.append(hub_id)
        raise models.HubUnreachableError("no hub", code="hub_unreachable", model=hub_id, seconds=10)

    monkeypatch.setattr(hub, "_download", fail)
    with pytest.raises(models.HubUnreachableError) as first:
        hub.download("someone/broken-model")
    assert first.value.code == "hub_unreachable"
    with pytest.raises(models.HubUnreachableError) as again:
        models.load("someone/broken-model")  # another session a moment later: answered at once, not tried again
    assert again.value.code == "hub_failed_recently" and again.value.params["reason"] == "hub_unreachable"
    assert calls == ["someone/broken-model"]
    monkeypatch.setenv("DIKKAT_HUB_RETRY_S", "0.000001")  # once the failure is old enough, it is tried again
    with pytest.raises(models.HubUnreachableError):
        hub.download("someone/broken-model")
    assert len(calls) == 2


def test_five_sessions_asking_for_one_hub_model_share_one_download(monkeypatch, tmp_path):
    gate, calls, got = threading.Event(), [], []

    def slow(hub_id):
        calls.append(hub_id)
        gate.wait(30)
        return tmp_path

    monkeypatch.setattr(hub, "_download", slow)
    threads = [threading.Thread(target=lambda: got.append(hub.download("someone/shared-model"))) for _ in range(5)]
    for thread in threads:
        thread.start()
    for _ in range(3000):  # until all five wait for the one download (threading.Event's waiters), at most ~30 s
        flight = hub._FLIGHTS.get("someone/shared-model")
        if flight is not None and len(flight.done._cond._waiters) == 5:
            break
        threading.Event().wait(0.01)
    gate.set()
    for thread in threads:
        thread.join(30)
    assert got == [tmp_path] * 5 and calls == ["someone/shared-model"]


def test_a_hub_load_past_its_deadline_is_told(monkeypatch, tmp_path):
    gate = threading.Event()
    monkeypatch.setattr(hub, "_download", lambda hub_id: gate.wait(30) and tmp_path)
    monkeypatch.setenv("DIKKAT_HUB_DEADLINE_S", "0.01")
    try:
        with pytest.raises(models.HubUnreachableError) as late:
            hub.download("someone/stuck-model")  # blocked until the test lets it go: always past the deadline
        assert late.value.code == "hub_deadline" and late.value.params["model"] == "someone/stuck-model"
    finally:
        gate.set()
