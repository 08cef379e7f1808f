"""Atlas builds in the background, one per atlas folder, shared by every caller in the process (every session of
the app): a page starts or joins a build and reads its progress and the parts written so far; it never waits
for the whole corpus."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..loading.model import LoadedModel
from .build import build_atlas, check_settings, folder_for
from .corpus import Corpus, check_language

_JOBS: dict[Path, "Job"] = {}
_LOCK = threading.Lock()


@dataclass
class Job:
    """One background build.

    Attributes:
        folder: the atlas folder. done, total: texts read / to read. seconds_left: the estimate (None until
        one text is timed). error: the exception that ended it, or None. finished: it has ended (complete,
        stopped, or failed). started: ``time.monotonic()`` at start.
    """

    folder: Path
    done: int = 0
    total: int = 0
    seconds_left: float | None = None
    error: BaseException | None = None
    finished: bool = False
    started: float = field(default_factory=time.monotonic)
    stop_event: threading.Event = field(default_factory=threading.Event, repr=False)
    thread: threading.Thread | None = field(default=None, repr=False)

    @property
    def stopping(self) -> bool:
        """A stop was asked for and the build has not ended yet."""
        return self.stop_event.is_set() and not self.finished

    def stop(self) -> None:
        """Ask the build to stop after its current text (what is done stays on disk; a later build resumes)."""
        self.stop_event.set()


def start(loaded: LoadedModel, corpus: Corpus, **settings) -> Job:
    """Start the build of (model, corpus, settings) in a daemon thread, or return the one already running.

    ``settings``: ``max_tokens``, ``limit``, ``repeats``, ``repeat_length`` as :func:`models.atlas.build_atlas`
    (checked here, in the caller's thread, so a bad value raises at once, as does a corpus in a language the
    tokenizer cannot read: :func:`models.atlas.corpus.check_language`).
    """
    check_language(loaded, corpus)
    s = check_settings(loaded, settings.get("max_tokens"), settings.get("limit"),
                       settings.get("repeats", 16), settings.get("repeat_length"))
    folder = folder_for(loaded, corpus, s, settings.get("root"))
    with _LOCK:
        job = _JOBS.get(folder)
        if job is not None and not job.finished:
            return job
        job = _JOBS[folder] = Job(folder=folder)

    def progress(done: int, total: int, left: float | None) -> None:
        job.done, job.total, job.seconds_left = done, total, left

    def run() -> None:
        try:
            build_atlas(loaded, corpus, max_tokens=s.max_tokens, limit=s.limit, repeats=s.repeats,
                        repeat_length=s.repeat_length, progress=progress, stop=job.stop_event.is_set,
                        root=settings.get("root"))
        except BaseException as exc:  # noqa: BLE001 - reported to the page, which shows it
            job.error = exc
        finally:
            job.finished = True

    job.thread = threading.Thread(target=run, name=f"atlas-{folder.name}", daemon=True)
    job.thread.start()
    return job


def running(folder: Path) -> Job | None:
    """The job of an atlas folder, running or ended, or None."""
    with _LOCK:
        return _JOBS.get(Path(folder))
