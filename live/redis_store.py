"""A live class's state in Redis, shared by every app process of a class (``make serve REPLICAS=N``) and kept when
one restarts.

Keys (``prefix`` is ``dikkat:live:`` by default; ``{CODE}`` is a Redis Cluster hash tag, so a room's keys live
together): ``{CODE}:secret`` (the teacher secret's SHA-256), ``{CODE}:state`` (hash: page, params, version,
current question and whether it is revealed), ``{CODE}:presence`` (sorted set: student id -> last seen),
``{CODE}:questions`` (hash: id -> the question; at the reveal first marked closed, then its frozen counts and
what was measured),
``{CODE}:qseq`` (the last question id) and ``{CODE}:answers:<id>`` (hash: student id -> answer, deleted at the
reveal). Every key has a TTL (``ttl_s``, 12 h), set when it is written and refreshed on the room's activity; the
rate-limit buckets (``rl:<bucket>``: a client's, and ``rl:join:server`` that every replica counts in) expire with
their window. Redis errors become
:class:`~live.errors.LiveUnavailable`.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from typing import cast

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from . import rules
from .base import BaseStore, no_room, room_code
from .errors import (LiveUnavailable, NoSuchQuestion, NotJoined, NotTeacher, QuestionClosed, RoomFull)

TOUCH_EVERY_S = 60.0  # a room's keys get their TTL back at most this often per process (writes set their own)


DEADLINE_S = 1.0  # one Redis call's socket deadline (connect, read, write)
LISTEN_S = 1.0  # the change listener's wait for a message, and its pause before subscribing again after a failure
RETRY_AFTER_S = 1.0  # after a failure, calls fail at once for this long (a page with 5 calls waits one deadline)


def _unavailable(exc: Exception | None = None) -> LiveUnavailable:
    what = type(exc).__name__ if exc is not None else "not answering"
    return LiveUnavailable(f"The live class store (Redis) cannot be used: {what}.", code="live_unavailable")


def _available(method):
    """Turn a Redis failure (down, unreachable, timeout, still loading its file) into :class:`LiveUnavailable`,
    and note the outage (:meth:`RedisStore.outage_s`): for :data:`RETRY_AFTER_S` after a failure every call fails
    at once, so a page waits at most about one :data:`DEADLINE_S` for a Redis that stopped answering."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        if self._down_since is not None and time.monotonic() - self._failed_at < RETRY_AFTER_S:
            raise _unavailable()
        try:
            result = method(self, *args, **kwargs)
        except redis.RedisError as exc:
            self._failed_at = time.monotonic()
            if self._down_since is None:
                self._down_since = self._failed_at
            raise _unavailable(exc) from exc
        self._down_since = None
        return result

    return wrapper


class RedisStore(BaseStore):
    """:class:`live.base.RoomStore` in Redis (redis-py).

    Args:
        url: ``redis://[:password@]host:port/db`` (``DIKKAT_REDIS_URL``), or
        client: a ``redis.Redis`` made with ``decode_responses=True`` (instead of ``url``).
        prefix: every key's start (tests use one each).
        **kwargs: as :class:`live.base.BaseStore` (``teacher_token``, ``ttl_s``, ``clock``).
    """

    def __init__(self, url: str | None = None, *, client: redis.Redis | None = None, prefix: str = "dikkat:live:",
                 **kwargs) -> None:
        super().__init__(**kwargs)
        if client is None:
            if not url:
                raise ValueError("RedisStore needs a url or a client")
            # a short deadline and no retry but one at once on a dropped connection (redis-py retries 3 times with
            # backoff by default: 14.9 s for a Redis that stopped answering); a restarted Redis is reconnected to
            retry = Retry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,))
            client = redis.Redis.from_url(url, decode_responses=True, socket_timeout=DEADLINE_S,
                                          socket_connect_timeout=DEADLINE_S, retry=retry, health_check_interval=30)
        self.redis = client
        self._down_since: float | None = None  # time.monotonic() of the first failure of the current outage
        self._failed_at = 0.0
        self.prefix = prefix
        self._touched: dict[str, float] = {}
        self._listener: threading.Thread | None = None
        self._listen_lock = threading.Lock()
        self._subscribed = threading.Event()

    # -- a change, told to every process (issue 48) ----------------------------------------------------------
    @property
    def _channel(self) -> str:
        return f"{self.prefix}changed"

    def _publish(self, code: str) -> None:
        """Tell every process's listener (:meth:`watch`) that room ``code`` changed; the change is written already,
        so a failure here only leaves the students to their poll."""
        try:
            self.redis.publish(self._channel, code)
        except redis.RedisError:
            pass

    def watch(self, callback) -> None:
        """As :meth:`live.base.BaseStore.watch`: the first call starts this process's listener, a daemon thread
        subscribed to the store's channel (every process's :meth:`set_state`, :meth:`ask`, :meth:`reveal` and
        :meth:`close_room` publish the room's code there), which calls the callbacks with each code; it connects
        again after Redis went away (a change published meanwhile is not reported)."""
        super().watch(callback)
        with self._listen_lock:
            if self._listener is None:
                self._listener = threading.Thread(target=self._listen, name="dikkat-live-changes", daemon=True)
                self._listener.start()
        self._subscribed.wait(LISTEN_S)  # a change made after this call is reported (while Redis answers)

    def _listen(self) -> None:
        while True:
            pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
            try:
                pubsub.subscribe(self._channel)
                pubsub.get_message(timeout=LISTEN_S)  # the subscription's confirmation: subscribed from here on
                self._subscribed.set()
                while True:
                    message = pubsub.get_message(timeout=LISTEN_S)
                    if message is not None and message.get("type") == "message":
                        self._changed(str(message["data"]))
            except (redis.RedisError, OSError, ValueError):
                time.sleep(LISTEN_S)  # Redis down or restarting: subscribe again
            finally:
                try:
                    pubsub.close()
                except (redis.RedisError, OSError):
                    pass

    def outage_s(self) -> float | None:
        """Seconds since this process's calls started failing (Redis down, frozen or still loading), None while
        it answers: what the class's screens show as "paused, reconnecting"."""
        return None if self._down_since is None else time.monotonic() - self._down_since

    # -- keys -------------------------------------------------------------------------------------------------
    def _key(self, code: str, part: str) -> str:
        return f"{self.prefix}{{{code}}}:{part}"

    def _keys(self, code: str, last_question: int = 0) -> list[str]:
        """Every key of a room whose last question id is ``last_question``."""
        return ([self._key(code, part) for part in ("secret", "state", "presence", "questions", "qseq")]
                + [self._key(code, f"answers:{i}") for i in range(1, last_question + 1)])

    def _ttl(self) -> int:
        return max(1, int(self.ttl_s))

    def _touch(self, code: str) -> None:
        """Give the room's keys their TTL back (at most every :data:`TOUCH_EVERY_S` seconds from this process)."""
        now = self.clock()
        if now - self._touched.get(code, float("-inf")) < TOUCH_EVERY_S:
            return
        last = int(self.redis.get(self._key(code, "qseq")) or 0)
        pipe = self.redis.pipeline(transaction=False)
        for key in self._keys(code, last):
            pipe.expire(key, self._ttl())
        pipe.execute()
        if len(self._touched) > 10_000:
            self._touched.clear()
        self._touched[code] = now

    def _teacher(self, code, secret) -> str:
        """The room code after checking the teacher secret.

        Raises:
            NoSuchRoom, NotTeacher.
        """
        code = room_code(code)
        stored = cast("str | None", self.redis.get(self._key(code, "secret")))  # decode_responses=True: a str
        if stored is None:
            raise no_room()
        if not rules.secret_matches(secret, stored):
            raise NotTeacher("Only the teacher of this class can do this.", code="live_not_teacher")
        self._touch(code)
        return code

    # -- rooms and state --------------------------------------------------------------------------------------
    @_available
    def _create(self, code: str, secret_hash: str) -> bool:
        if not self.redis.set(self._key(code, "secret"), secret_hash, nx=True, ex=self._ttl()):
            return False
        state = self._key(code, "state")
        last = int(self.redis.get(self._key(code, "qseq")) or 0)
        pipe = self.redis.pipeline()
        pipe.delete(*self._keys(code, last)[1:])  # leftovers of an expired room of the same code
        pipe.hset(state, mapping={"page": "", "params": "{}", "version": 0, "current": 0, "revealed": 0,
                                  "link": rules.new_link_key()})
        pipe.expire(state, self._ttl())
        pipe.execute()
        return True

    @_available
    def _link_of(self, code: str) -> str | None:
        if not self.redis.exists(self._key(code, "secret")):
            return None
        state = self._key(code, "state")
        self.redis.hsetnx(state, "link", rules.new_link_key())  # a room made before rooms had one
        return cast("str | None", self.redis.hget(state, "link"))  # decode_responses=True: a str

    @_available
    def seated(self, code: str, student_id: str) -> bool:
        """As :meth:`live.memory.MemoryStore.seated`; also LiveUnavailable."""
        if not rules.is_student(student_id):
            return False
        seen = self.redis.zscore(self._key(room_code(code), "presence"), student_id)
        return seen is not None and self.clock() - seen <= rules.KEEP_S

    @_available
    def answer_of(self, code: str, question_id: int, student_id: str):
        """As :meth:`live.memory.MemoryStore.answer_of`; also LiveUnavailable."""
        if not rules.is_student(student_id):
            return None
        raw = self.redis.hget(self._key(room_code(code), f"answers:{rules.check_question_id(question_id)}"),
                              student_id)
        return None if raw is None else json.loads(raw)

    @_available
    def _rekey(self, code: str, secret_hash: str) -> bool:
        # only an existing key is replaced, its TTL kept: a room that expired meanwhile stays gone
        if not self.redis.set(self._key(code, "secret"), secret_hash, xx=True, keepttl=True):
            return False
        self._touched.pop(code, None)
        self._touch(code)
        return True

    @_available
    def teaches(self, code: str, secret: str) -> bool:
        """As :meth:`live.memory.MemoryStore.teaches` (one Redis read); also LiveUnavailable."""
        code = room_code(code)
        stored = cast("str | None", self.redis.get(self._key(code, "secret")))  # decode_responses=True: a str
        if stored is None:
            raise no_room()
        return rules.secret_matches(secret, stored)

    @_available
    def room_exists(self, code: str) -> bool:
        """Whether a room has this code (False for a closed or expired one, or a string that is no code)."""
        normal = rules.normalize_code(code)
        return normal is not None and bool(self.redis.exists(self._key(normal, "secret")))

    @_available
    def set_state(self, code: str, secret: str, page: str, params: dict[str, str]) -> int:
        """As :meth:`live.memory.MemoryStore.set_state`; also LiveUnavailable."""
        page, params = rules.check_state(page, params)
        code = self._teacher(code, secret)
        state = self._key(code, "state")
        old, current = self.redis.hmget(state, ["params", "current"])  # only the teacher writes: no race to guard
        raw = self.redis.hget(self._key(code, "questions"), str(current)) if current else None
        asked = json.loads(raw)["question"] if raw else None
        pipe = self.redis.pipeline()
        if rules.ends_question(json.loads(old) if old else None, params, asked):
            pipe.hdel(state, "current")
        pipe.hset(state, mapping={"page": page, "params": json.dumps(params, ensure_ascii=False)})
        pipe.hincrby(state, "version", 1)
        pipe.expire(state, self._ttl())
        version = int(pipe.execute()[-2])
        self._publish(code)
        return version

    @_available
    def get_state(self, code: str) -> dict | None:
        """As :meth:`live.memory.MemoryStore.get_state`; also LiveUnavailable."""
        normal = rules.normalize_code(code)
        if normal is None:
            return None
        pipe = self.redis.pipeline(transaction=True)
        pipe.exists(self._key(normal, "secret"))
        pipe.hgetall(self._key(normal, "state"))
        exists, state = pipe.execute()
        if not exists or not state:
            return None
        self._touch(normal)
        current = int(state.get("current") or 0)
        question = None
        if current:
            raw = self.redis.hget(self._key(normal, "questions"), str(current))
            question = {**json.loads(raw)["question"], "id": current} if raw else None
        params = json.loads(state.get("params") or "{}")
        if not rules.shown(params, question):
            question = None
        return {"page": state.get("page") or None, "params": params,
                "version": int(state.get("version") or 0), "question": question,
                "revealed": question is not None and state.get("revealed") == "1"}

    @_available
    def version(self, code: str) -> int:
        """As :meth:`live.memory.MemoryStore.version` (one Redis read); also LiveUnavailable."""
        code = room_code(code)
        pipe = self.redis.pipeline(transaction=False)
        pipe.exists(self._key(code, "secret"))
        pipe.hget(self._key(code, "state"), "version")
        exists, version = pipe.execute()
        if not exists or version is None:
            raise no_room()
        return int(version)

    @_available
    def close_room(self, code: str, secret: str) -> None:
        """As :meth:`live.memory.MemoryStore.close_room`; also LiveUnavailable."""
        code = self._teacher(code, secret)
        last = int(self.redis.get(self._key(code, "qseq")) or 0)
        self.redis.delete(*self._keys(code, last))
        self._touched.pop(code, None)
        self._publish(code)

    # -- presence ---------------------------------------------------------------------------------------------
    @_available
    def join(self, code: str, student_id: str) -> None:
        """As :meth:`live.memory.MemoryStore.join`; also LiveUnavailable."""
        rules.check_student(student_id)
        code = room_code(code)
        if not self.redis.exists(self._key(code, "secret")):
            raise no_room()
        presence, now = self._key(code, "presence"), self.clock()
        pipe = self.redis.pipeline()
        pipe.zremrangebyscore(presence, "-inf", f"({now - rules.KEEP_S}")
        pipe.zscore(presence, student_id)
        pipe.zcard(presence)
        _, seen, seats = pipe.execute()
        if seen is None and seats >= self.max_students:
            raise RoomFull(f"This class is full ({self.max_students} students).", code="live_room_full",
                           max_students=self.max_students)
        pipe = self.redis.pipeline()
        pipe.zadd(presence, {student_id: now})
        pipe.expire(presence, self._ttl())
        pipe.execute()
        self._touch(code)

    def heartbeat(self, code: str, student_id: str) -> None:
        """The student is still there: as :meth:`join`."""
        self.join(code, student_id)

    @_available
    def present(self, code: str, within_s: float = rules.PRESENT_S) -> int:
        """As :meth:`live.memory.MemoryStore.present`; also LiveUnavailable."""
        code = room_code(code)
        pipe = self.redis.pipeline(transaction=False)
        pipe.exists(self._key(code, "secret"))
        pipe.zcount(self._key(code, "presence"), self.clock() - within_s, "+inf")
        exists, count = pipe.execute()
        if not exists:
            raise no_room()
        return int(count)

    # -- questions --------------------------------------------------------------------------------------------
    @_available
    def ask(self, code: str, secret: str, question: dict) -> int:
        """As :meth:`live.memory.MemoryStore.ask`; also LiveUnavailable."""
        question = rules.check_question(question)
        code = self._teacher(code, secret)
        qseq, questions, state = (self._key(code, p) for p in ("qseq", "questions", "state"))
        question_id = int(self.redis.incr(qseq))
        record = {"question": question, "revealed": False, "counts": None, "total": 0, "measured": None}
        pipe = self.redis.pipeline()
        pipe.expire(qseq, self._ttl())
        pipe.hset(questions, str(question_id), json.dumps(record, ensure_ascii=False))
        pipe.expire(questions, self._ttl())
        pipe.hset(state, mapping={"current": question_id, "revealed": 0})
        pipe.hincrby(state, "version", 1)
        pipe.expire(state, self._ttl())
        pipe.execute()
        self._publish(code)
        return question_id

    @_available
    def answer(self, code: str, question_id: int, student_id: str, value) -> None:
        """As :meth:`live.memory.MemoryStore.answer`; also LiveUnavailable. Atomic against a reveal: an answer
        either is counted in the frozen counts or is refused."""
        rules.check_student(student_id)
        code = room_code(code)
        number = rules.check_question_id(question_id)
        questions, state, answers = (self._key(code, p) for p in ("questions", "state", f"answers:{number}"))
        secret = self._key(code, "secret")

        def check_and_write(pipe) -> None:
            if not pipe.exists(secret):
                raise no_room()
            raw = pipe.hget(questions, str(number)) if number else None
            if raw is None:
                raise NoSuchQuestion("This class has no such question.", code="live_no_such_question")
            seen = pipe.zscore(self._key(code, "presence"), student_id)
            if seen is None or self.clock() - seen > rules.KEEP_S:
                raise NotJoined("Join the class before answering.", code="live_not_joined")
            record = json.loads(raw)
            if record["revealed"] or record.get("closed") or int(pipe.hget(state, "current") or 0) != number:
                raise QuestionClosed("This question is closed.", code="live_question_closed")
            checked = rules.check_answer(value, record["question"])
            pipe.multi()  # watched: a reveal, a new question or a closed room in between, and this runs again
            pipe.hset(answers, student_id, rules.value_key(checked))
            pipe.expire(answers, self._ttl())

        # presence is not watched: every heartbeat writes it
        self.redis.transaction(check_and_write, secret, questions, state)
        self._touch(code)

    def _question(self, code: str, question_id) -> tuple[int, dict]:
        number = rules.check_question_id(question_id)
        raw = self.redis.hget(self._key(code, "questions"), str(number)) if number else None
        if number is None or raw is None:
            raise NoSuchQuestion("This class has no such question.", code="live_no_such_question")
        return number, json.loads(raw)

    @_available
    def reveal(self, code: str, secret: str, question_id: int, measured=None) -> None:
        """As :meth:`live.memory.MemoryStore.reveal`; also LiveUnavailable."""
        measured = rules.check_measured(measured)
        code = self._teacher(code, secret)
        number, _ = self._question(code, question_id)
        questions, state, answers = (self._key(code, p) for p in ("questions", "state", f"answers:{number}"))

        def close(pipe) -> None:  # first no answer is taken any more (an answer watches ``questions``) ...
            raw = pipe.hget(questions, str(number))
            if raw is None:  # the room was closed meanwhile
                raise no_room()
            record = json.loads(raw)
            pipe.multi()
            if not record.get("closed"):
                pipe.hset(questions, str(number), json.dumps({**record, "closed": True}, ensure_ascii=False))

        def freeze(pipe) -> None:  # ... then the answers, which no longer change, are counted
            raw = pipe.hget(questions, str(number))
            if raw is None:
                raise no_room()
            record = json.loads(raw)
            if not record["revealed"]:
                values = [json.loads(v) for v in pipe.hvals(answers)]
                record.update(revealed=True, total=len(values),
                              counts=[[v, n] for v, n in rules.counts_of(values).items()])
            record["measured"] = measured
            current = int(pipe.hget(state, "current") or 0)
            pipe.multi()
            pipe.hset(questions, str(number), json.dumps(record, ensure_ascii=False))
            pipe.expire(questions, self._ttl())
            pipe.delete(answers)  # who answered what is not kept past the reveal
            if current == number:
                pipe.hset(state, "revealed", 1)
            pipe.hincrby(state, "version", 1)
            pipe.expire(state, self._ttl())

        # two steps, so that a class answering fast never starves the reveal (no watch on the answers)
        self.redis.transaction(close, questions)
        self.redis.transaction(freeze, questions, state)
        self._publish(code)

    @_available
    def results(self, code: str, question_id: int) -> dict:
        """As :meth:`live.memory.MemoryStore.results`; also LiveUnavailable."""
        code = room_code(code)
        if not self.redis.exists(self._key(code, "secret")):
            raise no_room()
        number, record = self._question(code, question_id)
        if not record["revealed"]:
            total = int(self.redis.hlen(self._key(code, f"answers:{number}")))
            return {"counts": {}, "total": total, "revealed": False, "measured": None}
        return {"counts": {v: n for v, n in record["counts"]}, "total": record["total"], "revealed": True,
                "measured": record["measured"]}

    # -- rate limits ------------------------------------------------------------------------------------------
    @_available
    def _window(self, bucket: str) -> tuple[int, float]:
        pipe = self.redis.pipeline(transaction=False)
        pipe.get(self.prefix + "rl:" + bucket)
        pipe.pttl(self.prefix + "rl:" + bucket)
        hits, left_ms = pipe.execute()
        if hits is None or left_ms is None or left_ms < 0:
            return 0, 0.0
        return int(hits), left_ms / 1000

    @_available
    def allow(self, bucket: str, limit: int, per_s: float) -> bool:
        """As :meth:`live.memory.MemoryStore.allow`, across processes (the window's key is made with its expiry,
        then counted up, in one transaction); also LiveUnavailable."""
        key = self.prefix + "rl:" + bucket
        pipe = self.redis.pipeline()
        pipe.set(key, 0, nx=True, px=max(1, int(per_s * 1000)))
        pipe.incr(key)
        return int(pipe.execute()[1]) <= limit
