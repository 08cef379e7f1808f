"""Whether the class's pages are ready before the class arrives (issue 50 point 1): the server's warm-up
(``deploy/warm.py``, started by ``make serve``) opens every step of every shipped lesson once and writes its progress
here after each visit; the teacher's panel reads it and says "preparing: k of n" and then "ready".

One small JSON file per app process, named by the port it listens on (each replica of ``make serve REPLICAS=N`` has
its own caches and its own warm-up): ``<DIKKAT_CLASS_DATA or .data/class>/warm-<port>.json`` holding
``{"done": int, "total": int, "failed": int, "started": float, "updated": float}`` (times in seconds since the
epoch). Written whole to a temporary file and renamed (a reader never sees half of it).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Readiness", "read", "status_file", "write"]

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Readiness:
    """The warm-up's progress: ``done`` of ``total`` visits finished (``failed`` of them without their page),
    ``seconds`` since it started (until its last visit when done)."""

    done: int
    total: int
    failed: int
    seconds: float

    @property
    def ready(self) -> bool:
        return self.done >= self.total


def status_file(port: int, environ=None) -> Path:
    """The progress file of the app process listening on ``port``."""
    env = os.environ if environ is None else environ
    return Path(env.get("DIKKAT_CLASS_DATA") or ROOT / ".data" / "class") / f"warm-{int(port)}.json"


def write(port: int, done: int, total: int, failed: int = 0, started: float | None = None, environ=None) -> None:
    """Record the warm-up's progress for the process on ``port`` (``started``: its start, seconds since the
    epoch; default now). A folder that cannot be written is left alone: the warm-up goes on without it."""
    path = status_file(port, environ)
    now = time.time()
    body = {"done": int(done), "total": int(total), "failed": int(failed), "started": float(started or now),
            "updated": now}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_suffix(f".{os.getpid()}.part")
        part.write_text(json.dumps(body), encoding="utf-8")
        part.replace(path)
    except OSError:
        pass


def read(port: int, environ=None) -> Readiness | None:
    """The warm-up's progress for the process on ``port``, or None: no warm-up was started for it (``make run``,
    ``DIKKAT_WARM=0``) or its file does not read."""
    try:
        body = json.loads(status_file(port, environ).read_text(encoding="utf-8"))
        done, total, failed = int(body["done"]), int(body["total"]), int(body["failed"])
        seconds = float(body["updated"] if done >= total else time.time()) - float(body["started"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if total <= 0 or not 0 <= done <= total or not 0 <= failed <= done:
        return None
    return Readiness(done, total, failed, max(0.0, seconds))
