"""Per-user cache of converted model folders (GGUF -> safetensors, packaged formats -> transformers).

A conversion is done once and written atomically: it is built in a temporary sibling folder, a
``.complete`` marker holding the conversion's version string is written last, and the folder is
renamed into place. A folder without the marker (an interrupted build) or with another version is
rebuilt. A process-wide lock plus an ``fcntl`` file lock keep two threads or two processes from
converting the same model at once.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import threading
from pathlib import Path
from collections.abc import Callable

_MARKER = ".complete"
_THREAD_LOCK = threading.Lock()


def cache_root() -> Path:
    """Folder holding every converted model: ``$DIKKAT_CACHE``, else ``$XDG_CACHE_HOME/dikkat``,
    else ``~/.cache/dikkat``. Created on first use."""
    explicit = os.environ.get("DIKKAT_CACHE")
    if explicit:
        root = Path(explicit)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = Path(base) / "dikkat"
    root.mkdir(parents=True, exist_ok=True)
    return root


def is_cached(key: str, version: str) -> bool:
    """True when ``key`` has a complete conversion of this ``version`` in the cache."""
    marker = cache_root() / key / _MARKER
    return marker.is_file() and marker.read_text().strip() == version


def invalidate(key: str) -> None:
    """Remove a cached conversion (used when a cached folder turns out to be corrupt)."""
    shutil.rmtree(cache_root() / key, ignore_errors=True)


def cached_folder(key: str, version: str, build: Callable[[Path], None]) -> Path:
    """Return ``cache_root()/key``, building it with ``build(tmp_folder)`` if it is missing or stale.

    ``build`` receives an empty folder and must write a complete transformers model folder into it
    (``config.json``, ``*.safetensors``, tokenizer files). Any exception from ``build`` propagates and
    leaves the cache as it was.
    """
    root = cache_root()
    target = root / key
    with _THREAD_LOCK:
        lock_path = root / f".{key}.lock"
        with open(lock_path, "w") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            try:
                if is_cached(key, version):
                    return target
                tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=root))
                try:
                    build(tmp)
                    (tmp / _MARKER).write_text(version)
                    if target.exists():
                        shutil.rmtree(target)
                    os.replace(tmp, target)
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
                return target
            finally:
                fcntl.flock(lock_file, fcntl.LOCK_UN)
