"""The heavy-work pool (models/jobs.py, issue 44 point 5): one job per session, identical jobs computed once and
shared, a bounded number of workers with a queue, and only the starter (or a teacher) stops a job. No timing:
jobs block on events the test sets."""

from __future__ import annotations

import threading

import pytest

from models import jobs as J


def _blocked(gate: threading.Event, calls: list):
    def run(job):
        calls.append(job.key)
        gate.wait(30)
        return len(calls)
    return run


def test_eight_jobs_from_one_session_one_runs_the_others_refused():
    pool, gate, calls = J.Pool(workers=1), threading.Event(), []
    first = pool.submit("atlas", ("minilm", 0), "s1", _blocked(gate, calls))
    refused = 0
    for i in range(1, 8):
        with pytest.raises(J.HeavyJobBusyError) as err:
            pool.submit("atlas", ("minilm", i), "s1", _blocked(gate, calls))
        assert err.value.code == "heavy_busy" and err.value.params == {"kind": "atlas"}
        refused += 1
    assert refused == 7 and pool.active_of("s1") is first
    gate.set()
    assert first.wait(30) and first.state == "done"
    assert len(calls) == 1
    # once it has ended the session may start another
    assert pool.submit("atlas", ("minilm", 1), "s1", _blocked(gate, calls)).wait(30) and len(calls) == 2


def test_thirty_presses_of_the_same_job_one_run_served_to_all():
    pool, gate, calls = J.Pool(workers=1), threading.Event(), []
    params = ("minilm-l6", "cpu", (16, 32), 1)
    got = {pool.submit("cost", params, f"s{i}", _blocked(gate, calls)) for i in range(30)}
    assert len(got) == 1
    job = got.pop()
    assert job.owner == "s0"
    gate.set()
    assert job.wait(30) and job.result == 1
    # pressed again after it has ended: served, not computed again
    assert pool.submit("cost", params, "s31", _blocked(gate, calls)) is job and calls == [("cost", params)]


def test_another_session_cannot_stop_a_job_its_starter_and_the_teacher_can():
    pool, gate = J.Pool(workers=1), threading.Event()
    job = pool.submit("experiment", ("sinks", "minilm"), "alice", lambda j: gate.wait(30))
    with pytest.raises(J.HeavyJobNotYoursError):
        pool.stop(job, "bob")
    assert not job.stop_event.is_set() and not pool.can_stop(job, "bob")
    assert pool.can_stop(job, "bob", teacher=True) and pool.can_stop(job, "alice")
    pool.stop(job, "alice")
    gate.set()
    assert job.wait(30) and job.state == "stopped"


def test_a_bounded_pool_queues_the_rest_and_says_where():
    pool, gate = J.Pool(workers=1, queue_limit=2), threading.Event()
    started = threading.Event()

    def first(job):
        started.set()
        gate.wait(30)

    running = pool.submit("cost", 1, "a", first)
    assert started.wait(30)
    second = pool.submit("cost", 2, "b", lambda j: None)
    third = pool.submit("cost", 3, "c", lambda j: None)
    assert (pool.position(running), pool.position(second), pool.position(third)) == (0, 1, 2)
    with pytest.raises(J.HeavyQueueFullError):
        pool.submit("cost", 4, "d", lambda j: None)
    pool.stop(second, "b")  # a queued job that was stopped never starts
    gate.set()
    assert third.wait(30) and second.state == "stopped" and third.state == "done"


def test_a_failed_job_is_kept_with_its_error_and_may_be_started_again():
    pool = J.Pool(workers=1)

    def fail(job):
        raise RuntimeError("boom")

    job = pool.submit("pruning_curve", "x", "a", fail)
    assert job.wait(30) and job.state == "failed" and str(job.error) == "boom"
    again = pool.submit("pruning_curve", "x", "a", lambda j: 7)
    assert again is not job and again.wait(30) and again.result == 7


def test_workers_from_env(monkeypatch):
    monkeypatch.setenv("DIKKAT_HEAVY_WORKERS", "3")
    assert J.workers_from_env() == 3
    for junk in ("0", "two", "-1"):
        monkeypatch.setenv("DIKKAT_HEAVY_WORKERS", junk)
        assert J.workers_from_env() >= 1


def test_a_stop_ends_a_computation_at_its_next_step_and_idle_waits_for_every_job():
    """``Job.step`` is the progress callback of a computation that reads no stop flag itself (a pruning curve, an
    experiment): once a stop is asked it raises, the job ends ``stopped`` (not ``failed``) and keeps no result;
    ``Pool.idle`` returns once nothing is queued or running."""
    pool, gate, steps = J.Pool(workers=1), threading.Event(), []

    def curve(job):
        for i in range(10):
            job.step(i / 10, point=i)
            steps.append(i)
            if i == 2:
                gate.wait(30)
        return "whole curve"

    job = pool.submit("pruning_curve", ("minilm", ("a",)), "alice", curve)
    queued = pool.submit("experiment", ("sinks", "minilm"), "bob", lambda j: "sinks")
    assert not pool.idle(0)
    pool.stop(job, "alice")
    gate.set()
    assert pool.idle(30) and job.finished and queued.finished
    assert job.state == "stopped" and job.result is None and job.error is None and steps == [0, 1, 2]
    assert job.detail == {"point": 3} and queued.result == "sinks"
