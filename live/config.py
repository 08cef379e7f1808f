"""Where a live class's settings come from: the environment, then the classroom config file.

* ``DIKKAT_TEACHER_TOKEN``, else ``teacher_token = "..."`` in ``classroom.toml`` (the file
  ``DIKKAT_CLASSROOM_CONFIG`` names, else ``classroom.toml`` in the repository root: the file
  :mod:`views.hosting` reads): who may open a room on this server.
* ``DIKKAT_REDIS_URL`` (``redis://host:port/0``): the Redis every app process of a class shares
  (``make serve REPLICAS=N`` starts one and sets it); ``REPLICAS`` > 1 without it is refused, since each process
  would hold a class of its own. ``REPLICAS`` > 1 also says the app runs behind Dikkat's own nginx, whose
  ``X-Forwarded-For`` names each client's address (:func:`behind_proxy`, :func:`live.rules.client_address`).
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from collections.abc import Mapping

from .errors import InvalidRequest

ROOT = Path(__file__).resolve().parent.parent


def _environ(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    """``environ``, or the process's environment when None.

    Raises:
        InvalidRequest: not a mapping of names to strings (code ``live_bad_environ``).
    """
    if environ is None:
        return os.environ
    if not isinstance(environ, Mapping):
        raise InvalidRequest(f"environ must be a mapping of variable names to strings (like os.environ), got "
                             f"{type(environ).__name__}.", code="live_bad_environ", value=type(environ).__name__)
    return environ


def config_path(environ: Mapping[str, str] | None = None) -> Path:
    """The classroom config file: ``DIKKAT_CLASSROOM_CONFIG``, else ``classroom.toml`` in the repository root."""
    env = _environ(environ)
    return Path(env.get("DIKKAT_CLASSROOM_CONFIG") or ROOT / "classroom.toml")


def teacher_token(environ: Mapping[str, str] | None = None) -> str | None:
    """The server's teacher token: ``DIKKAT_TEACHER_TOKEN``, else the config file's ``teacher_token`` (surrounding
    spaces dropped); None when neither sets a non-empty string (then no room can be opened). A config file that
    cannot be read counts as none (the classroom mode reports it when the server starts)."""
    env = _environ(environ)
    token = (env.get("DIKKAT_TEACHER_TOKEN") or "").strip()
    if token:
        return token
    path = config_path(env)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    written = data.get("teacher_token")
    return (written.strip() or None) if isinstance(written, str) else None


def redis_url(environ: Mapping[str, str] | None = None) -> str | None:
    """``DIKKAT_REDIS_URL``, or None when it is not set."""
    env = _environ(environ)
    return (env.get("DIKKAT_REDIS_URL") or "").strip() or None


def replicas(environ: Mapping[str, str] | None = None) -> int:
    """``REPLICAS`` (what ``make serve REPLICAS=N`` passes on), 1 when unset or not a number."""
    env = _environ(environ)
    try:
        return max(1, int(env.get("REPLICAS", "1")))
    except ValueError:
        return 1


def behind_proxy(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this app process serves behind Dikkat's own nginx: ``REPLICAS`` > 1 (``make serve REPLICAS=N``
    passes it on to the replicas that ``deploy/replicas.py`` starts on 127.0.0.1, where only that nginx reaches
    them). Then the last ``X-Forwarded-For`` entry, which nginx writes, is the client's address
    (:func:`live.rules.client_address`)."""
    return replicas(environ) > 1
