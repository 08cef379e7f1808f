"""One bounded pool for the heavy work of every session of the process (issue 44 point 5): atlas builds, pruning
curves, experiments and the Cost page's measurement.

* a bounded number of workers (``DIKKAT_HEAVY_WORKERS``, default one per two cores, at least 1) runs the jobs, the
  others wait in one first-in first-out queue (at most ``DIKKAT_HEAVY_QUEUE`` waiting, default 32);
* a job is named by its ``kind`` and its ``params`` (the model among them): asking for a job that is queued, running
  or done returns that job, so thirty presses of the same button are one run whose result is served to all;
* one session (an ``owner``) starts at most one job at a time: a second, different one is refused
  (:class:`HeavyJobBusyError`) until the first ends; joining someone else's identical job is always allowed;
* only the owner, or a teacher, stops a job (:class:`HeavyJobNotYoursError` otherwise); a stop is a request that
  the job's function reads through :meth:`Job.stopped`.

No Streamlit here: the pages (views/shared/jobs.py) show a job's place in the queue and its progress.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Hashable

from .errors import DikkatError

KEEP = 64  # finished jobs (and their results) kept per pool, least recently finished dropped first
ACTIVE = ("queued", "running")


class HeavyJobBusyError(DikkatError):
    """This session already has a heavy job queued or running (``kind``: which); it may start another after it."""


class HeavyQueueFullError(DikkatError):
    """The queue of heavy work is full (``limit`` jobs waiting); try again in a few minutes."""


class HeavyJobNotYoursError(DikkatError):
    """Only the session that started a job (or the class's teacher) may stop it."""


class HeavyJobStopped(Exception):
    """Raised inside a job's function by :meth:`Job.step` once a stop was asked for: it unwinds a computation that
    has no stop of its own (its progress callback calls ``step``); the job then ends ``stopped``, not ``failed``."""


def workers_from_env() -> int:
    """The number of workers: ``DIKKAT_HEAVY_WORKERS`` when it is a whole number ≥ 1, else one per two cores (at
    least 1; a value that is not a whole number ≥ 1 is ignored, as the README says)."""
    raw = os.environ.get("DIKKAT_HEAVY_WORKERS", "").strip()
    return int(raw) if raw.isdigit() and int(raw) >= 1 else max(1, (os.cpu_count() or 2) // 2)


@dataclass(eq=False)
class Job:
    """One heavy job.

    Attributes:
        key: ``(kind, params)``, the job's name. owner: the session that started it. state: ``queued``, ``running``,
        ``done``, ``failed`` or ``stopped``. fraction: progress in [0, 1]. detail: what the job reports beside the
        fraction (e.g. ``done``/``total`` texts, points measured so far). result: the function's return value once
        ``done``. error: the exception that ended it (``failed``). seq: its place in the order of submission.
        queued_at, started_at, ended_at: ``time.monotonic()`` seconds (None until then).
    """

    key: tuple
    owner: str
    seq: int
    state: str = "queued"
    fraction: float = 0.0
    detail: dict = field(default_factory=dict)
    result: Any = None
    error: BaseException | None = None
    queued_at: float = field(default_factory=time.monotonic)
    started_at: float | None = None
    ended_at: float | None = None
    stop_event: threading.Event = field(default_factory=threading.Event, repr=False)
    done_event: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def kind(self) -> str:
        """The job's kind (``"atlas"``, ``"cost"``, ``"pruning_curve"``, ``"experiment"`` ...)."""
        return self.key[0]

    @property
    def finished(self) -> bool:
        """It has ended: done, failed or stopped."""
        return self.state not in ACTIVE

    @property
    def stopping(self) -> bool:
        """A stop was asked for and the job has not ended yet."""
        return self.stop_event.is_set() and not self.finished

    def stopped(self) -> bool:
        """Whether a stop was asked for (the job's function reads it between steps and returns early)."""
        return self.stop_event.is_set()

    def progress(self, fraction: float, **detail) -> None:
        """Report progress: ``fraction`` in [0, 1] (clipped) and any detail the page shows."""
        self.fraction = min(1.0, max(0.0, float(fraction)))
        self.detail.update(detail)

    def step(self, fraction: float, **detail) -> None:
        """:meth:`progress`, then raise :class:`HeavyJobStopped` when a stop was asked for: the progress callback
        of a computation that reads no stop flag itself (pruning curves, experiments)."""
        self.progress(fraction, **detail)
        if self.stopped():
            raise HeavyJobStopped(self.kind)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the job ends or ``timeout`` seconds pass; True when it has ended."""
        return self.done_event.wait(timeout)


class Pool:
    """A bounded pool of workers and the jobs it knows (see the module's docstring).

    Args:
        workers: threads that run jobs at the same time (≥ 1).
        queue_limit: most jobs waiting for a worker; one more is refused with :class:`HeavyQueueFullError`.
    """

    def __init__(self, workers: int = 1, queue_limit: int = 32) -> None:
        self.workers, self.queue_limit = max(1, int(workers)), max(0, int(queue_limit))
        self._executor = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="dikkat-heavy")
        self._lock = threading.Lock()
        self._jobs: OrderedDict[tuple, Job] = OrderedDict()
        self._seq = 0

    def get(self, kind: str, params: Hashable) -> Job | None:
        """The job named ``(kind, params)``: queued, running, or finished and still kept; else None."""
        with self._lock:
            return self._jobs.get((kind, params))

    def active_of(self, owner: str) -> Job | None:
        """The job ``owner`` started that is queued or running, or None."""
        with self._lock:
            return next((j for j in self._jobs.values() if j.owner == owner and not j.finished), None)

    def submit(self, kind: str, params: Hashable, owner: str, fn: Callable[[Job], Any], *,
               again: bool = False) -> Job:
        """Start the job ``(kind, params)`` for ``owner``, or return the identical one queued, running or done.

        Args:
            kind, params: the job's name (params hashable: the model, the texts, the settings).
            owner: the session asking (a stable id per session).
            fn: ``fn(job) -> result``, run on a worker; it reports through ``job.progress`` and reads
                ``job.stopped()``.
            again: compute again even when a finished result is kept (a queued or running one is still joined).
        Returns:
            The job (``job.owner`` is the session that started it: ``owner`` only when this call started it).
        Raises:
            HeavyJobBusyError: ``owner`` already has a different job queued or running (code ``heavy_busy``).
            HeavyQueueFullError: ``queue_limit`` jobs are waiting already (code ``heavy_queue_full``).
        """
        key = (kind, params)
        with self._lock:
            job = self._jobs.get(key)
            if job is not None and (not job.finished or (job.state == "done" and not again)):
                return job
            mine = next((j for j in self._jobs.values() if j.owner == owner and not j.finished), None)
            if mine is not None:
                raise HeavyJobBusyError(
                    "You already have a heavy job queued or running; wait for it to end (or stop it) before "
                    "starting another.", code="heavy_busy", kind=mine.kind)
            waiting = sum(j.state == "queued" for j in self._jobs.values())
            if waiting >= self.queue_limit:
                raise HeavyQueueFullError(
                    f"The server's queue of heavy work is full ({waiting} jobs waiting); try again in a few minutes.",
                    code="heavy_queue_full", limit=waiting)
            self._seq += 1
            job = Job(key=key, owner=owner, seq=self._seq)
            self._jobs[key] = job
            self._jobs.move_to_end(key)
            self._trim()
        self._executor.submit(self._run, job, fn)
        return job

    def idle(self, timeout: float | None = None) -> bool:
        """Block until no job is queued or running, at most ``timeout`` seconds; True when none is."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                active = [j for j in self._jobs.values() if not j.finished]
            if not active:
                return True
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            active[0].wait(left)

    def position(self, job: Job) -> int:
        """0 while the job runs or has ended; else its place in the queue (1: next to run)."""
        if job.state != "queued":
            return 0
        with self._lock:
            return 1 + sum(j.state == "queued" and j.seq < job.seq for j in self._jobs.values())

    def can_stop(self, job: Job, who: str, *, teacher: bool = False) -> bool:
        """Whether ``who`` may stop ``job``: its owner, or a teacher."""
        return teacher or job.owner == who

    def stop(self, job: Job, who: str, *, teacher: bool = False) -> None:
        """Ask ``job`` to stop (a queued job never starts; a running one ends after its current step).

        Raises:
            HeavyJobNotYoursError: ``who`` neither started it nor is a teacher (code ``heavy_not_yours``).
        """
        if not self.can_stop(job, who, teacher=teacher):
            raise HeavyJobNotYoursError("Only the session that started this job, or the teacher, can stop it.",
                                        code="heavy_not_yours")
        job.stop_event.set()

    def _run(self, job: Job, fn: Callable[[Job], Any]) -> None:
        """Run one job on a worker thread, recording its end (never raises)."""
        if job.stop_event.is_set():
            self._end(job, "stopped")
            return
        job.state, job.started_at = "running", time.monotonic()
        try:
            result = fn(job)
        except HeavyJobStopped:
            self._end(job, "stopped")
            return
        except BaseException as exc:  # noqa: BLE001 - kept on the job, which the page shows
            job.error = exc
            self._end(job, "failed")
            return
        job.result = result
        self._end(job, "stopped" if job.stop_event.is_set() else "done")

    def _end(self, job: Job, state: str) -> None:
        """Record the end of ``job`` and wake whoever waits on it."""
        with self._lock:
            job.state, job.ended_at = state, time.monotonic()
            if state == "done":
                job.fraction = 1.0
            self._trim()
        job.done_event.set()

    def _trim(self) -> None:
        """Drop the oldest finished jobs beyond :data:`KEEP` (the lock held)."""
        finished = [k for k, j in self._jobs.items() if j.finished]
        for key in finished[:max(0, len(finished) - KEEP)]:
            del self._jobs[key]


_POOL: Pool | None = None
_POOL_LOCK = threading.Lock()


def pool() -> Pool:
    """The process's pool, made on first use with :func:`workers_from_env` and ``DIKKAT_HEAVY_QUEUE`` (default 32)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            queue = int(os.environ.get("DIKKAT_HEAVY_QUEUE", "32") or 32)
            _POOL = Pool(workers_from_env(), queue)
        return _POOL
