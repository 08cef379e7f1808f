"""The shared state of a live class (issue 29): the teacher moves, the students' pages follow, the class answers a
question and sees the counts beside what the model measured.

Pure Python (no Streamlit, no torch): the app's pages call it. ``store_from_env()`` gives the process's store, a
:class:`MemoryStore` for one app process or a :class:`RedisStore` shared by the replicas of ``make serve
REPLICAS=N``; both have the operations of :class:`RoomStore`::

    store = live.store_from_env()
    who = live.rules.client_key(session_id, remote_ip, forwarded_for, behind_proxy)  # an address, not a session
    code, secret = store.create_room(live.teacher_token(), client_key=who)          # the teacher's session
    store.set_state(code, secret, "explore", {"text": "Kedi uyudu.", "layer": "2"})
    code = store.join_attempt(typed, client_key=who, student_id=sid)                # a student's session
    if store.version(code) != seen:
        state = store.get_state(code)

Errors are :class:`LiveError` subclasses with a ``code`` (``assets/i18n/live_errors.json``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from . import config
from .base import BaseStore, RoomStore
from .config import teacher_token
from .errors import (InvalidAnswer, InvalidRequest, LiveError, LiveUnavailable, NoSuchQuestion, NoSuchRoom,
                     NotJoined, NotTeacher, QuestionClosed, RateLimited, RoomFull)
from .memory import MemoryStore
from .redis_store import RedisStore

__all__ = ["BaseStore", "InvalidAnswer", "InvalidRequest", "LiveError", "LiveUnavailable", "MemoryStore",
           "NoSuchQuestion", "NoSuchRoom", "NotJoined", "NotTeacher", "QuestionClosed", "RateLimited",
           "RedisStore", "RoomFull", "RoomStore", "store_from_env", "teacher_token"]

_lock = threading.Lock()
_stores: dict[str, RoomStore] = {}


def store_from_env(environ: Mapping[str, str] | None = None) -> RoomStore:
    """This process's store, made once and kept: a :class:`RedisStore` on ``DIKKAT_REDIS_URL`` when it is set,
    else one :class:`MemoryStore` (every session of this process sees the same rooms).

    Raises:
        LiveUnavailable: ``REPLICAS`` > 1 and no ``DIKKAT_REDIS_URL`` (each process would keep a class of its own;
            ``make serve`` starts a Redis for its replicas).
    """
    url = config.redis_url(environ)
    if url is None and config.replicas(environ) > 1:
        raise LiveUnavailable("Several app processes serve this class but no Redis is set (DIKKAT_REDIS_URL), so "
                              "they cannot share it.", code="live_needs_redis")
    with _lock:
        key = url or ""
        if key not in _stores:
            _stores[key] = RedisStore(url) if url else MemoryStore()
        return _stores[key]
