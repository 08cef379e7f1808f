"""Atlas builds in the background (on the heavy-work pool, :mod:`models.jobs`), one per atlas folder, shared by
every caller in the process (every session of the app): a page starts or joins a build and reads its progress and
the parts written so far; it never waits for the whole corpus."""

from __future__ import annotations

import threading
from pathlib import Path

from .. import jobs as heavy_jobs

from ..loading.model import LoadedModel
from .build import build_atlas, check_settings, folder_for
from .corpus import Corpus, check_language

_JOBS: dict[Path, Job] = {}
_LOCK = threading.Lock()


class Job:
    """One build, as the Atlas page reads it: a view of its job on the heavy-work pool (:mod:`models.jobs`).

    Attributes:
        folder: the atlas folder. heavy: the pool's job. done, total: texts read / to read. seconds_left: the estimate
        (None until two texts are timed). tokens_per_second: on Ray, the workers' throughput (else None). error: the
        exception that ended it, or None. finished: it has ended (complete, stopped, or failed). owner: the session
        that started it.
    """

    def __init__(self, folder: Path, heavy: heavy_jobs.Job) -> None:
        self.folder, self.heavy = folder, heavy

    done = property(lambda self: int(self.heavy.detail.get("done", 0)))
    total = property(lambda self: int(self.heavy.detail.get("total", 0)))
    seconds_left = property(lambda self: self.heavy.detail.get("left"))
    tokens_per_second = property(lambda self: self.heavy.detail.get("rate"))
    error = property(lambda self: self.heavy.error)
    finished = property(lambda self: self.heavy.finished)
    owner = property(lambda self: self.heavy.owner)

    @property
    def stopping(self) -> bool:
        """A stop was asked for and the build has not ended yet."""
        return self.heavy.stopping

    def stop(self, who: str = "", *, teacher: bool = False) -> None:
        """Ask the build to stop after its current text (what is done stays on disk; a later build resumes).

        Raises:
            HeavyJobNotYoursError: ``who`` did not start it and is not a teacher.
        """
        heavy_jobs.pool().stop(self.heavy, who, teacher=teacher)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the build ends or ``timeout`` seconds pass; True when it has ended."""
        return self.heavy.wait(timeout)


def start(loaded: LoadedModel, corpus: Corpus, owner: str = "", **settings) -> Job:
    """Start the build of (model, corpus, settings) on the heavy-work pool, or return the one queued or running.

    ``owner``: the session asking (at most one heavy job per session, :meth:`models.jobs.Pool.submit`).
    ``settings``: ``max_tokens``, ``limit``, ``repeats``, ``repeat_length`` as :func:`models.atlas.build_atlas`;
    ``ray``: ``(address, workers)`` to build on Ray (:func:`models.atlas.cluster.build_atlas_ray`; workers None for
    the default), else in this process
    (checked here, in the caller's thread, so a bad value raises at once, as does a corpus in a language the
    tokenizer cannot read: :func:`models.atlas.corpus.check_language`).

    Raises:
        HeavyJobBusyError, HeavyQueueFullError: as :meth:`models.jobs.Pool.submit`. InvalidArgumentError: a Ray
        address Ray cannot take (code ``ray_address``).
    """
    check_language(loaded, corpus)
    s = check_settings(loaded, settings.get("max_tokens"), settings.get("limit"),
                       settings.get("repeats", 16), settings.get("repeat_length"))
    folder = folder_for(loaded, corpus, s, settings.get("root"))

    ray = settings.get("ray")
    if ray is not None:
        from .cluster import check_address

        check_address(ray[0])

    def run(job: heavy_jobs.Job) -> None:
        def progress(done: int, total: int, left: float | None, run=None) -> None:
            rate = run.eta.tokens_per_second() if run is not None else None
            job.progress(done / total if total else 0.0, done=done, total=total, left=left, rate=rate)

        if ray is not None:
            from .cluster import build_atlas_ray

            build_atlas_ray(loaded.name, corpus, address=ray[0], workers=ray[1], max_tokens=s.max_tokens,
                            limit=s.limit, repeats=s.repeats, repeat_length=s.repeat_length, progress=progress,
                            stop=job.stopped, root=settings.get("root"))
            return
        build_atlas(loaded, corpus, max_tokens=s.max_tokens, limit=s.limit, repeats=s.repeats,
                    repeat_length=s.repeat_length, progress=progress, stop=job.stopped, root=settings.get("root"))

    heavy = heavy_jobs.pool().submit("atlas", str(folder), owner, run, again=True)
    with _LOCK:
        job = _JOBS.get(folder)
        if job is None or job.heavy is not heavy:
            job = _JOBS[folder] = Job(folder, heavy)
        return job


def running(folder: Path) -> Job | None:
    """The job of an atlas folder, running or ended, or None."""
    with _LOCK:
        return _JOBS.get(Path(folder))
