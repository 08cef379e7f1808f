"""The operations of a live class (:class:`RoomStore`) and what both stores share: opening a room with the server's
teacher token, leading it again from a new session (a reloaded page) with the same token, and joining by a typed
code under two rate limits, one per client address and one for the whole server (:class:`BaseStore`; the numbers
and what they leave an attacker: :mod:`live.rules`).

A room's state is what a page's URL holds, ``{"page": "explore", "params": {"text": "..."}}``, with a ``version``
that grows by one with every change (the page, a question asked or revealed), the current ``question`` (the
teacher's object with its ``"id"``, or None) and whether it is ``revealed``. A new room has ``page`` None,
``params`` ``{}`` and version 0.
"""

from __future__ import annotations

import logging
import math
import secrets
import time
from typing import Protocol, runtime_checkable
from collections.abc import Callable

from . import config, rules
from .errors import LiveUnavailable, NoSuchRoom, NotTeacher, RateLimited

_log = logging.getLogger(__name__)


@runtime_checkable
class RoomStore(Protocol):
    """What the app needs of a live class's shared state. Teacher operations take the room's secret (returned once
    by :meth:`create_room`, or by :meth:`resume_room` to a reloaded teacher's page, which ends the earlier one; see
    :meth:`teaches`) and raise :class:`~live.errors.NotTeacher` without it; an unknown, closed or expired
    room raises :class:`~live.errors.NoSuchRoom` (only :meth:`get_state` and :meth:`room_exists` answer None /
    False). A typed code goes through :meth:`join_attempt` (rate limited), never straight to the others."""

    def create_room(self, teacher_token: str, client_key: str = "") -> tuple[str, str]: ...
    def resume_room(self, code: str, teacher_token: str, client_key: str = "") -> str: ...
    def teaches(self, code: str, secret: str) -> bool: ...
    def room_exists(self, code: str) -> bool: ...
    def join_attempt(self, code: str, client_key: str, student_id: str | None = None,
                     link_key: str | None = None) -> str: ...
    def link_key(self, code: str, secret: str) -> str: ...
    def seated(self, code: str, student_id: str) -> bool: ...
    def answer_of(self, code: str, question_id: int, student_id: str): ...
    def set_state(self, code: str, secret: str, page: str, params: dict[str, str]) -> int: ...
    def get_state(self, code: str) -> dict | None: ...
    def version(self, code: str) -> int: ...
    def join(self, code: str, student_id: str) -> None: ...
    def heartbeat(self, code: str, student_id: str) -> None: ...
    def present(self, code: str, within_s: float = rules.PRESENT_S) -> int: ...
    def ask(self, code: str, secret: str, question: dict) -> int: ...
    def answer(self, code: str, question_id: int, student_id: str, value) -> None: ...
    def reveal(self, code: str, secret: str, question_id: int, measured=None) -> None: ...
    def results(self, code: str, question_id: int) -> dict: ...
    def close_room(self, code: str, secret: str) -> None: ...
    def allow(self, bucket: str, limit: int, per_s: float) -> bool: ...
    def outage_s(self) -> float | None: ...
    def watch(self, callback: Callable[[str], None]) -> None: ...


class BaseStore:
    """What both stores share. Subclasses provide the operations of :class:`RoomStore` and ``_create`` /
    ``_window``.

    Args:
        teacher_token: the server's teacher token; None reads :func:`live.config.teacher_token` at each
            :meth:`create_room` (the environment, then ``classroom.toml``).
        ttl_s: a room is forgotten this long after its last activity.
        clock: seconds, for presence and room expiry (tests pass a clock they move).
    """

    join_limit, join_window_s = rules.JOIN_LIMIT, rules.JOIN_WINDOW_S
    server_join_limit, server_join_window_s = rules.SERVER_JOIN_LIMIT, rules.SERVER_JOIN_WINDOW_S
    teacher_limit, teacher_window_s = rules.TEACHER_LIMIT, rules.TEACHER_WINDOW_S
    max_students = rules.MAX_STUDENTS

    def __init__(self, *, teacher_token: str | None = None, ttl_s: float = rules.TTL_S,
                 clock: Callable[[], float] = time.time) -> None:
        self._teacher_token = teacher_token
        self.ttl_s = ttl_s
        self.clock = clock
        self._watchers: list[Callable[[str], None]] = []

    def watch(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(code)`` after every change of a room's version (a page, a question asked or revealed, the
        room closed), whichever process made it, so a server can wake its students' pages at once instead of waiting
        for their next poll (issue 48). It runs in the thread that made the change (this process's store) or in the
        store's listener thread (:class:`live.redis_store.RedisStore`: Redis pub/sub), so it must be quick and must
        not raise. A change made while the store's listener was disconnected is not reported: the poll stays the
        guarantee, this only its shortcut."""
        self._watchers.append(callback)

    def _changed(self, code: str) -> None:
        """Report a room's new version to every :meth:`watch` callback (never raises: a watcher's fault is the
        watcher's, and the change is made already)."""
        for callback in list(self._watchers):
            try:
                callback(code)
            except Exception:  # noqa: BLE001  (a store's write never fails for a watcher)
                _log.exception("a live class watcher failed")

    def outage_s(self) -> float | None:
        """Seconds since the store stopped answering, None while it answers (a store in this process always
        does)."""
        return None

    # -- what a subclass provides -----------------------------------------------------------------------------
    def _create(self, code: str, secret_hash: str) -> bool:  # pragma: no cover - abstract
        """Make the room ``code`` with its secret's hash; False when the code is taken."""
        raise NotImplementedError

    def _window(self, bucket: str) -> tuple[int, float]:  # pragma: no cover - abstract
        """``(hits in the bucket's current window, seconds until it ends)``; ``(0, 0.0)`` for none."""
        raise NotImplementedError

    def _teacher(self, code: str, secret: str | None) -> object:  # pragma: no cover - abstract
        """The room ``code`` when ``secret`` is its teacher's (the store's own record of it).

        Raises:
            NoSuchRoom, NotTeacher; LiveUnavailable (Redis)."""
        raise NotImplementedError

    def _link_of(self, code: str) -> str | None:  # pragma: no cover - abstract
        """The room's link key (:func:`live.rules.new_link_key`), made when the room was; None when no room has
        the code."""
        raise NotImplementedError

    def _rekey(self, code: str, secret_hash: str) -> bool:  # pragma: no cover - abstract
        """Give the open room ``code`` this secret's hash instead of its own; False when no room has the code."""
        raise NotImplementedError

    def room_exists(self, code: str) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def join(self, code: str, student_id: str) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def allow(self, bucket: str, limit: int, per_s: float) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    # -- shared -----------------------------------------------------------------------------------------------
    def _not_limited(self, bucket: str, limit: int) -> None:
        """Raise :class:`RateLimited` when ``bucket`` (a client's) already has ``limit`` hits in its window."""
        hits, left = self._window(bucket)
        if hits >= limit:
            retry_s = max(1, math.ceil(left))
            raise RateLimited(f"Too many wrong attempts; try again in {retry_s} s.", code="live_rate_limited",
                              retry_s=retry_s)

    def _server_not_limited(self) -> None:
        """Raise :class:`RateLimited` when the whole server has had :attr:`server_join_limit` wrong codes lately."""
        hits, left = self._window(rules.SERVER_JOIN_BUCKET)
        if hits >= self.server_join_limit:
            retry_s = max(1, math.ceil(left))
            raise RateLimited(f"Too many wrong class codes were tried on this server lately; try again in {retry_s} "
                              "s.", code="live_server_rate_limited", retry_s=retry_s)

    def _check_token(self, teacher_token, where: str) -> None:
        """Check the server's teacher token, counting a wrong one in the client's bucket ``where``.

        Raises:
            RateLimited: ``where`` is full (right token or not).
            NotTeacher: no token is set on this server, or ``teacher_token`` is not it.
        """
        self._not_limited(where, self.teacher_limit)
        server = self._teacher_token if self._teacher_token is not None else config.teacher_token()
        if not server:
            raise NotTeacher("No teacher token is set on this server (DIKKAT_TEACHER_TOKEN or teacher_token in "
                             "classroom.toml), so no room can be opened.", code="live_no_teacher_token")
        if not rules.token_matches(teacher_token, server):
            self.allow(where, self.teacher_limit, self.teacher_window_s)
            raise NotTeacher("This is not the teacher token of this server.", code="live_not_teacher")

    def create_room(self, teacher_token: str, client_key: str = "") -> tuple[str, str]:
        """Open a room. Give the secret to the teacher's session only: it is returned this once, and the store
        keeps only its hash.

        Args:
            teacher_token: must equal the server's teacher token.
            client_key: who is asking (the client's address, :func:`live.rules.client_address`; a session id where
                there is none): wrong tokens are counted per client key, :attr:`teacher_limit` per
                :attr:`teacher_window_s` seconds.

        Returns:
            ``(code, secret)``: the room code students type, and the teacher secret
            (``secrets.token_urlsafe(32)``).

        Raises:
            NotTeacher: no teacher token is set on this server, or ``teacher_token`` is not it.
            RateLimited: too many wrong tokens from this client key lately.
            LiveUnavailable: the store cannot be reached, or no free code was found.
        """
        self._check_token(teacher_token, rules.bucket("teacher", client_key))
        secret = secrets.token_urlsafe(32)
        for _ in range(20):  # 887 million codes: a second try is already rare
            code = rules.new_code()
            if self._create(code, rules.hash_secret(secret)):
                return code, secret
        raise LiveUnavailable("No free room code was found; try again.", code="live_no_free_code")

    def resume_room(self, code: str, teacher_token: str, client_key: str = "") -> str:
        """Lead the open room ``code`` from a new session: the teacher's page was reloaded (its Session State, which
        held the secret, is gone) or opened on another device. The server's teacher token proves it, as for
        :meth:`create_room`, and is checked before the code, so an unknown code tells nothing to one without it.
        The room gets a new secret and keeps everything else; its earlier secret stops working (one session leads:
        :meth:`teaches` tells the earlier one).

        Args:
            code: the room's code (the teacher's own link holds it).
            teacher_token: must equal the server's teacher token.
            client_key: as :meth:`create_room` (wrong tokens counted in the same bucket).

        Returns:
            the room's new teacher secret (``secrets.token_urlsafe(32)``), for the new session only.

        Raises:
            RateLimited: too many wrong tokens from this client key lately.
            NotTeacher: no teacher token is set on this server, or ``teacher_token`` is not it.
            NoSuchRoom: no room has this code (closed, expired, never made).
            LiveUnavailable: the store cannot be reached.
        """
        self._check_token(teacher_token, rules.bucket("teacher", client_key))
        normal = rules.normalize_code(code)
        secret = secrets.token_urlsafe(32)
        if normal is None or not self._rekey(normal, rules.hash_secret(secret)):
            raise no_room()
        return secret

    def join_attempt(self, code: str, client_key: str, student_id: str | None = None,
                     link_key: str | None = None) -> str:
        """Check a room code a student typed, and join the room when ``student_id`` is given. Wrong codes are
        counted per client key and for the whole server: after :attr:`join_limit` from this client in
        :attr:`join_window_s` seconds, or :attr:`server_join_limit` from anyone in :attr:`server_join_window_s`,
        every attempt, right or wrong, is refused until the window ends (so the limit is no oracle). Right codes
        are not counted. A join by the room's link (``link_key`` the room's, :meth:`link_key`) is neither limited
        nor counted: a flood of wrong codes from anywhere never locks out a class that joins by its link or QR
        code (a wrong link key is an ordinary, limited attempt).

        Args:
            code: what the student typed (or a link's ``?room=``).
            client_key: who is asking: the client's address (:func:`live.rules.client_address`), so that a new
                browser session is the same client; a session id where there is none.
            student_id: the student joining, or None to check the code only.
            link_key: the link's key (``?key=``), or None for a typed code.

        Returns:
            the code as stored (upper case, spaces and dashes dropped).

        Raises:
            RateLimited: too many wrong codes from this client (``live_rate_limited``) or on this server
                (``live_server_rate_limited``) lately.
            NoSuchRoom: no room has this code.
            InvalidRequest: ``student_id`` is not a student id.
            RoomFull: the room has :attr:`max_students` students already.
        """
        if student_id is not None:
            rules.check_student(student_id)
        normal = rules.normalize_code(code)
        if link_key is not None and normal is not None and rules.link_key_matches(link_key, self._link_of(normal)):
            if student_id is not None:
                self.join(normal, student_id)
            return normal
        where = rules.bucket("join", client_key)
        self._not_limited(where, self.join_limit)
        self._server_not_limited()
        if normal is not None and self.room_exists(normal):
            if student_id is not None:
                self.join(normal, student_id)
            return normal
        self.allow(where, self.join_limit, self.join_window_s)
        self.allow(rules.SERVER_JOIN_BUCKET, self.server_join_limit, self.server_join_window_s)
        raise NoSuchRoom("No class has this code; check it on the teacher's screen.", code="live_no_such_room")


    def link_key(self, code: str, secret: str) -> str:
        """The room's link key, for the teacher's link and QR code (``?room=CODE&key=KEY``).

        Raises:
            NoSuchRoom, NotTeacher; LiveUnavailable (Redis).
        """
        self._teacher(code, secret)
        key = self._link_of(room_code(code))
        if key is None:
            raise no_room()
        return key


def room_code(code) -> str:
    """``code`` as a store's key part.

    Raises:
        NoSuchRoom: it cannot be a room code.
    """
    normal = rules.normalize_code(code)
    if normal is None:
        raise NoSuchRoom("No class has this code; check it on the teacher's screen.", code="live_no_such_room")
    return normal


def no_room() -> NoSuchRoom:
    """The error of a room that is not there (closed or expired)."""
    return NoSuchRoom("This class is closed or has expired.", code="live_room_closed")


def teacher_elsewhere() -> NotTeacher:
    """The error a teacher's session is told when :meth:`RoomStore.teaches` says its secret no longer leads the room:
    the class was taken up again (:meth:`BaseStore.resume_room`) in another tab or on another device."""
    return NotTeacher("This class is now led from another tab or device.", code="live_teacher_elsewhere")
