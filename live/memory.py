"""A live class's state in this process (one app process: ``make run``, ``make serve`` with one replica), under one
lock. Several app processes share a :class:`live.redis_store.RedisStore` instead."""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass, field

from . import rules
from .base import BaseStore, no_room, room_code
from .errors import NoSuchQuestion, NotJoined, NotTeacher, QuestionClosed, RoomFull


@dataclass
class _Question:
    question: dict
    answers: dict[str, object] = field(default_factory=dict)  # student id -> value, until revealed
    revealed: bool = False
    counts: dict | None = None  # frozen when revealed
    total: int = 0
    measured: object = None


@dataclass
class _Room:
    secret_hash: str
    touched: float
    page: str | None = None
    params: dict[str, str] = field(default_factory=dict)
    version: int = 0
    current: int | None = None  # the current question's id
    presence: dict[str, float] = field(default_factory=dict)  # student id -> last seen
    link_key: str = field(default_factory=rules.new_link_key)  # the link's ?key= (joins without rate limits)
    questions: dict[int, _Question] = field(default_factory=dict)


class MemoryStore(BaseStore):
    """:class:`live.base.RoomStore` in a dict, for one process (threads of one Streamlit server). Rooms expire
    ``ttl_s`` after their last activity; keyword arguments as :class:`live.base.BaseStore`."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._lock = threading.RLock()
        self._rooms: dict[str, _Room] = {}
        self._buckets: dict[str, list] = {}  # bucket -> [hits, window end]

    def _room(self, code, touch: bool = True) -> _Room:
        """The live room ``code`` (held lock), its activity time refreshed when ``touch``.

        Raises:
            NoSuchRoom: none (or it expired).
        """
        code = room_code(code)
        now = self.clock()
        room = self._rooms.get(code)
        if room is not None and now - room.touched > self.ttl_s:
            del self._rooms[code]
            room = None
        if room is None:
            raise no_room()
        if touch:
            room.touched = now
        return room

    def _teacher(self, code, secret) -> _Room:
        room = self._room(code)
        if not rules.secret_matches(secret, room.secret_hash):
            raise NotTeacher("Only the teacher of this class can do this.", code="live_not_teacher")
        return room

    def _create(self, code: str, secret_hash: str) -> bool:
        with self._lock:
            now = self.clock()
            for old in [c for c, r in self._rooms.items() if now - r.touched > self.ttl_s]:
                del self._rooms[old]
            if code in self._rooms:
                return False
            self._rooms[code] = _Room(secret_hash=secret_hash, touched=now)
            return True

    def _link_of(self, code: str) -> str | None:
        with self._lock:
            try:
                return self._room(code, touch=False).link_key
            except LookupError:
                return None

    def seated(self, code: str, student_id: str) -> bool:
        """Whether ``student_id`` holds a seat in the room (joined, seen within :data:`live.rules.KEEP_S`): a
        student's page reloaded, or opened in a second tab, with its ``?seat=`` takes it again (one student, one
        seat). False for anything that is no student id.

        Raises:
            NoSuchRoom: the room is closed or expired.
        """
        if not rules.is_student(student_id):
            return False
        with self._lock:
            seen = self._room(code, touch=False).presence.get(student_id)
            return seen is not None and self.clock() - seen <= rules.KEEP_S

    def answer_of(self, code: str, question_id: int, student_id: str):
        """The answer ``student_id`` has given to the open question ``question_id`` (None: none yet, or the question
        is revealed): what a reloaded student's screen shows as sent.

        Raises:
            NoSuchRoom.
        """
        if not rules.is_student(student_id):
            return None
        with self._lock:
            found = self._room(code, touch=False).questions.get(question_id)
            return None if found is None or found.revealed else copy.deepcopy(found.answers.get(student_id))

    def _rekey(self, code: str, secret_hash: str) -> bool:
        with self._lock:
            try:
                room = self._room(code)
            except LookupError:
                return False
            room.secret_hash = secret_hash
            return True

    def teaches(self, code: str, secret: str) -> bool:
        """Whether ``secret`` is the room's teacher secret now (False once :meth:`resume_room` gave it another).

        Raises:
            NoSuchRoom: the room is closed or expired.
        """
        with self._lock:
            return rules.secret_matches(secret, self._room(code, touch=False).secret_hash)

    def room_exists(self, code: str) -> bool:
        """Whether a room has this code (False for a closed or expired one, or a string that is no code)."""
        with self._lock:
            try:
                self._room(code, touch=False)
            except LookupError:
                return False
            return True

    def set_state(self, code: str, secret: str, page: str, params: dict[str, str]) -> int:
        """Make ``page`` with ``params`` (what its URL holds) the page the class follows; a new lesson step ends the
        current question (:func:`live.rules.ends_question`).

        Returns:
            the new version.

        Raises:
            NoSuchRoom, NotTeacher, InvalidRequest (a page name or params the room does not take).
        """
        page, params = rules.check_state(page, params)
        with self._lock:
            room = self._teacher(code, secret)
            asked = room.questions[room.current].question if room.current is not None else None
            if rules.ends_question(room.params, params, asked):
                room.current = None
            room.page, room.params = page, params
            room.version += 1
            version = room.version
        self._changed(room_code(code))
        return version

    def get_state(self, code: str) -> dict | None:
        """``{"page", "params", "version", "question", "revealed"}`` (see :mod:`live.base`), or None when no room
        has this code."""
        with self._lock:
            try:
                room = self._room(code)
            except LookupError:
                return None
            question = None
            if room.current is not None and rules.shown(room.params, room.questions[room.current].question):
                question = {**copy.deepcopy(room.questions[room.current].question), "id": room.current}
            return {"page": room.page, "params": dict(room.params), "version": room.version, "question": question,
                    "revealed": question is not None and room.current is not None
                    and room.questions[room.current].revealed}

    def version(self, code: str) -> int:
        """The room's state version (cheap: poll it, read :meth:`get_state` when it changes).

        Raises:
            NoSuchRoom: the room is closed or expired.
        """
        with self._lock:
            return self._room(code, touch=False).version

    def join(self, code: str, student_id: str) -> None:
        """Count ``student_id`` in the room, seen now (again after a reload: one student, one seat).

        Raises:
            NoSuchRoom, InvalidRequest (not a student id), RoomFull.
        """
        rules.check_student(student_id)
        with self._lock:
            room = self._room(code)
            now = self.clock()
            for gone in [s for s, seen in room.presence.items() if now - seen > rules.KEEP_S]:
                del room.presence[gone]
            if student_id not in room.presence and len(room.presence) >= self.max_students:
                raise RoomFull(f"This class is full ({self.max_students} students).", code="live_room_full",
                               max_students=self.max_students)
            room.presence[student_id] = now

    def heartbeat(self, code: str, student_id: str) -> None:
        """The student is still there: as :meth:`join`."""
        self.join(code, student_id)

    def present(self, code: str, within_s: float = rules.PRESENT_S) -> int:
        """How many students were seen in the last ``within_s`` seconds.

        Raises:
            NoSuchRoom: the room is closed or expired.
        """
        with self._lock:
            room = self._room(code, touch=False)
            since = self.clock() - within_s
            return sum(seen >= since for seen in room.presence.values())

    def ask(self, code: str, secret: str, question: dict) -> int:
        """Ask the class ``question`` (the teacher's object; ``choices``, when given, are the only answers taken):
        it becomes the current question, unrevealed, and the version grows.

        Returns:
            the question's id (1, 2, ... in the room).

        Raises:
            NoSuchRoom, NotTeacher, InvalidRequest (not a JSON object of at most 4 KB, or bad choices).
        """
        question = rules.check_question(question)
        with self._lock:
            room = self._teacher(code, secret)
            question_id = len(room.questions) + 1
            room.questions[question_id] = _Question(question)
            room.current = question_id
            room.version += 1
        self._changed(room_code(code))
        return question_id

    def _question(self, room: _Room, question_id) -> _Question:
        qid = rules.check_question_id(question_id)
        found = room.questions.get(qid) if qid is not None else None
        if found is None:
            raise NoSuchQuestion("This class has no such question.", code="live_no_such_question")
        return found

    def answer(self, code: str, question_id: int, student_id: str, value) -> None:
        """Record a joined student's answer to the current question; a later answer replaces the earlier one
        until the question is revealed.

        Raises:
            NoSuchRoom, NoSuchQuestion, InvalidRequest (not a student id), NotJoined, QuestionClosed (revealed,
            or no longer the current question), InvalidAnswer (not a short text or a number, or not a choice).
        """
        rules.check_student(student_id)
        with self._lock:
            room = self._room(code)
            question = self._question(room, question_id)
            if student_id not in room.presence or self.clock() - room.presence[student_id] > rules.KEEP_S:
                raise NotJoined("Join the class before answering.", code="live_not_joined")
            if question.revealed or room.current != question_id:
                raise QuestionClosed("This question is closed.", code="live_question_closed")
            question.answers[student_id] = rules.check_answer(value, question.question)

    def reveal(self, code: str, secret: str, question_id: int, measured=None) -> None:
        """Close a question and show its counts with what the model measured; the counts are frozen here, later
        answers are refused. Revealing again only replaces ``measured``. The version grows.

        Raises:
            NoSuchRoom, NotTeacher, NoSuchQuestion, InvalidRequest (``measured`` not JSON data of at most 4 KB).
        """
        measured = rules.check_measured(measured)
        with self._lock:
            room = self._teacher(code, secret)
            question = self._question(room, question_id)
            if not question.revealed:
                question.counts = rules.counts_of(question.answers.values())
                question.total = len(question.answers)
                question.answers.clear()  # who answered what is not kept past the reveal
                question.revealed = True
            question.measured = measured
            room.version += 1
        self._changed(room_code(code))

    def results(self, code: str, question_id: int) -> dict:
        """``{"counts": {answer: n}, "total": n, "revealed": bool, "measured": ...}``: before the reveal ``counts``
        is ``{}`` and ``measured`` None (``total`` says how many answered); never who answered what.

        Raises:
            NoSuchRoom, NoSuchQuestion.
        """
        with self._lock:
            question = self._question(self._room(code, touch=False), question_id)
            if not question.revealed:
                return {"counts": {}, "total": len(question.answers), "revealed": False, "measured": None}
            return {"counts": dict(question.counts or {}), "total": question.total, "revealed": True,
                    "measured": copy.deepcopy(question.measured)}

    def close_room(self, code: str, secret: str) -> None:
        """End the class: the room and everything in it is forgotten.

        Raises:
            NoSuchRoom, NotTeacher.
        """
        with self._lock:
            self._teacher(code, secret)
            del self._rooms[room_code(code)]
        self._changed(room_code(code))

    def _window(self, bucket: str) -> tuple[int, float]:
        with self._lock:
            entry = self._buckets.get(bucket)
            now = self.clock()
            if entry is None or entry[1] <= now:
                return 0, 0.0
            return entry[0], entry[1] - now

    def allow(self, bucket: str, limit: int, per_s: float) -> bool:
        """Count one hit in ``bucket``: True while it has had at most ``limit`` hits in its window of ``per_s``
        seconds (the window starts at the first hit and the count starts again after it)."""
        with self._lock:
            now = self.clock()
            if len(self._buckets) > 10_000:
                self._buckets = {b: e for b, e in self._buckets.items() if e[1] > now}
            entry = self._buckets.get(bucket)
            if entry is None or entry[1] <= now:
                entry = self._buckets[bucket] = [0, now + per_s]
            entry[0] += 1
            return entry[0] <= limit
