"""The shared state of a live class (issue 29, live/): every behaviour on both stores (one process, and Redis as
the replicas of `make serve REPLICAS=N` share it), a restarted replica, two processes, TTLs, the rate limit, the
teacher's secret, and a Turkish text for every error code. A Redis of the tests' own is started for the run
(``redis_url`` in tests/conftest.py: Debian's ``redis-server``, `make redis`)."""

from __future__ import annotations

import ast
import json
import multiprocessing
import socket
import string
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

import live
from conftest import free_port
from live import rules

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "deploy"))

import launch  # noqa: E402

# the store's modules (live/ also holds the lessons, which read the model catalog: not these)
STORE_MODULES = ("__init__", "errors", "rules", "config", "base", "memory", "redis_store")
TOKEN = "teacher-token-for-tests"
PAGE = ("explore", {"text": "Kedi uyudu.", "layer": "2", "head": "3"})
QUESTION = {"text": "Which token does head 3 look at most?", "choices": ["Kedi", "uyudu", "."]}


class Clock:
    """A clock the test moves (presence, room expiry, the memory store's rate-limit windows)."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture(params=["memory", "redis"])
def kind(request):
    return request.param


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def new_store(kind, clock, request):
    """``new_store(**kwargs)``: the store under test. For Redis each call is a new RedisStore object on the same
    keys (another replica, or one restarted); for memory, the one store of the process."""
    prefix = f"t{uuid.uuid4().hex[:8]}:"
    url = request.getfixturevalue("redis_url") if kind == "redis" else None
    memory = {}

    def make(**kwargs):
        kwargs.setdefault("teacher_token", TOKEN)
        kwargs.setdefault("clock", clock)
        if kind == "redis":
            return live.RedisStore(url, prefix=prefix, **kwargs)
        return memory.setdefault("store", live.MemoryStore(**kwargs))

    return make


@pytest.fixture
def store(new_store):
    return new_store()


@pytest.fixture
def room(store):
    """``(code, secret)`` of an open room with one student ``s1`` joined."""
    code, secret = store.create_room(TOKEN)
    store.join(code, "s1")
    return code, secret


def _keys(store) -> list[str]:
    return sorted(store.redis.scan_iter(match=store.prefix + "*"))


# ---- rooms and the teacher's secret -----------------------------------------------------------------------------

def test_a_room_has_a_short_code_a_secret_and_a_fresh_state(store):
    code, secret = store.create_room(TOKEN)
    assert len(code) == rules.CODE_LENGTH and set(code) <= set(rules.ALPHABET)
    assert not set(code) & set("01OIL")
    assert len(secret) >= 43 and store.room_exists(code) and store.room_exists(code.lower())
    assert store.get_state(code) == {"page": None, "params": {}, "version": 0, "question": None, "revealed": False}
    assert store.version(code) == 0
    other, _ = store.create_room(TOKEN)
    assert other != code
    assert not store.room_exists("ABCDEF" if code != "ABCDEF" else "BCDEFG")
    assert not store.room_exists("") and not store.room_exists(None) and not store.room_exists("*")
    assert store.get_state("nope!") is None
    if isinstance(store, live.RedisStore):  # only the secret's hash is stored
        values = [store.redis.dump(k) for k in _keys(store)]
        assert not any(secret.encode() in v for v in values)


def test_only_the_servers_teacher_token_opens_a_room(new_store):
    store = new_store()
    for wrong in ("wrong", "", None, 42, TOKEN + "x"):
        with pytest.raises(live.NotTeacher) as err:
            store.create_room(wrong, client_key=f"c-{wrong}")
        assert err.value.code == "live_not_teacher"
    with pytest.raises(live.NotTeacher) as err:
        live.MemoryStore(teacher_token="").create_room(TOKEN)  # a server without a teacher token opens no room
    assert err.value.code == "live_no_teacher_token"


def test_wrong_teacher_tokens_are_rate_limited_per_client(store):
    for _ in range(store.teacher_limit):
        with pytest.raises(live.NotTeacher):
            store.create_room("guess", client_key="mallory")
    with pytest.raises(live.RateLimited) as err:
        store.create_room(TOKEN, client_key="mallory")  # even the right token: the limit is no oracle
    assert err.value.code == "live_rate_limited" and err.value.params["retry_s"] >= 1
    assert store.create_room(TOKEN, client_key="teacher")


def test_teacher_token_comes_from_the_environment_then_classroom_toml(tmp_path, monkeypatch):
    config = tmp_path / "classroom.toml"
    env = {"DIKKAT_CLASSROOM_CONFIG": str(config)}
    assert live.teacher_token(env) is None
    config.write_text('max_chars = 100\nteacher_token = "  from-toml  "\n', encoding="utf-8")
    assert live.teacher_token(env) == "from-toml"
    assert live.teacher_token({**env, "DIKKAT_TEACHER_TOKEN": "from-env"}) == "from-env"
    config.write_text("teacher_token = 12\n", encoding="utf-8")
    assert live.teacher_token(env) is None
    config.write_text("teacher_token = [oops\n", encoding="utf-8")
    assert live.teacher_token(env) is None
    monkeypatch.delenv("DIKKAT_TEACHER_TOKEN", raising=False)
    monkeypatch.setenv("DIKKAT_CLASSROOM_CONFIG", str(config))
    store = live.MemoryStore()  # no token given: read at each create_room
    with pytest.raises(live.NotTeacher) as err:
        store.create_room("from-toml")
    assert err.value.code == "live_no_teacher_token"
    config.write_text('teacher_token = "from-toml"\n', encoding="utf-8")
    assert store.create_room("from-toml")


def test_the_version_grows_by_one_with_every_change(store, room):
    code, secret = room
    assert store.set_state(code, secret, *PAGE) == 1
    assert store.get_state(code) == {"page": "explore", "params": PAGE[1], "version": 1, "question": None,
                                     "revealed": False}
    assert store.set_state(code, secret, "masks", {}) == 2 == store.version(code)
    qid = store.ask(code, secret, QUESTION)
    state = store.get_state(code)
    assert state["version"] == 3 and state["question"] == {**QUESTION, "id": qid} and not state["revealed"]
    assert state["page"] == "masks" and state["params"] == {}
    store.reveal(code, secret, qid, {"token": "Kedi", "weight": 0.61})
    state = store.get_state(code)
    assert state["version"] == 4 == store.version(code) and state["revealed"]
    second = store.ask(code, secret, {"text": "How many heads?"})
    assert second == qid + 1 and store.version(code) == 5 and not store.get_state(code)["revealed"]


def test_two_rooms_never_see_each_others_state_or_answers(store):
    a, a_secret = store.create_room(TOKEN)
    b, b_secret = store.create_room(TOKEN)
    store.set_state(a, a_secret, *PAGE)
    assert store.get_state(b)["page"] is None and store.version(b) == 0
    qa = store.ask(a, a_secret, QUESTION)
    qb = store.ask(b, b_secret, QUESTION)
    assert qa == qb == 1  # ids are per room
    store.join(a, "s1")
    store.join(b, "s2")
    store.answer(a, qa, "s1", "Kedi")
    with pytest.raises(live.NotJoined):
        store.answer(b, qb, "s1", "Kedi")  # joined a, not b
    store.answer(b, qb, "s2", "uyudu")
    assert store.present(a) == 1 == store.present(b)
    with pytest.raises(live.NotTeacher):
        store.set_state(b, a_secret, *PAGE)
    store.reveal(a, a_secret, qa)
    store.reveal(b, b_secret, qb)
    assert store.results(a, qa)["counts"] == {"Kedi": 1} and store.results(b, qb)["counts"] == {"uyudu": 1}
    store.close_room(a, a_secret)
    assert store.get_state(b)["question"]["id"] == qb


@pytest.mark.parametrize("wrong", [None, "", "wrong", 123, "x" * 43])
def test_a_wrong_or_missing_secret_changes_nothing(store, room, wrong):
    code, secret = room
    store.set_state(code, secret, *PAGE)
    qid = store.ask(code, secret, QUESTION)
    before = store.get_state(code)
    _, other_secret = store.create_room(TOKEN)
    for bad in (wrong, other_secret):
        for call in (lambda s: store.set_state(code, s, "masks", {}), lambda s: store.ask(code, s, QUESTION),
                     lambda s: store.reveal(code, s, qid, 1), lambda s: store.close_room(code, s)):
            with pytest.raises(live.NotTeacher) as err:
                call(bad)
            assert err.value.code == "live_not_teacher"
    assert store.get_state(code) == before and store.room_exists(code)
    assert not store.results(code, qid)["revealed"]


def test_closing_a_room_forgets_it(store, room):
    code, secret = room
    qid = store.ask(code, secret, QUESTION)
    store.answer(code, qid, "s1", "Kedi")
    store.close_room(code, secret)
    assert not store.room_exists(code) and store.get_state(code) is None
    for call in (lambda: store.version(code), lambda: store.join(code, "s1"), lambda: store.present(code),
                 lambda: store.answer(code, qid, "s1", "Kedi"), lambda: store.results(code, qid),
                 lambda: store.set_state(code, secret, *PAGE), lambda: store.close_room(code, secret)):
        with pytest.raises(live.NoSuchRoom) as err:
            call()
        assert err.value.code == "live_room_closed"
    if isinstance(store, live.RedisStore):
        assert not [k for k in _keys(store) if "{" in k], _keys(store)


@pytest.mark.parametrize("kind", ["memory"])  # Redis expires keys itself: test_every_redis_key_has_a_ttl
def test_a_room_expires_after_its_ttl_without_activity(new_store, kind, clock):
    store = new_store(ttl_s=100)
    code, secret = store.create_room(TOKEN)
    clock.advance(60)
    store.join(code, "s1")  # activity: the room lives on
    clock.advance(60)
    assert store.room_exists(code)
    clock.advance(101)
    assert not store.room_exists(code) and store.get_state(code) is None


# ---- presence ---------------------------------------------------------------------------------------------------

def test_presence_counts_students_seen_lately(store, clock):
    code, _ = store.create_room(TOKEN)
    assert store.present(code) == 0
    store.join(code, "s1")
    store.join(code, "s2")
    store.join(code, "s2")  # a reload: one student, one seat
    assert store.present(code) == 2
    clock.advance(8)
    store.heartbeat(code, "s1")
    clock.advance(5)
    assert store.present(code) == 1 and store.present(code, within_s=20) == 2
    with pytest.raises(live.InvalidRequest) as err:
        store.join(code, "not an id!")
    assert err.value.code == "live_invalid_student"
    with pytest.raises(live.NoSuchRoom):
        store.join("ZZZZZZ" if code != "ZZZZZZ" else "YYYYYY", "s1")


def test_a_full_room_takes_no_new_student(new_store, clock):
    store = new_store()
    store.max_students = 2
    code, _ = store.create_room(TOKEN)
    store.join(code, "a")
    store.join(code, "b")
    with pytest.raises(live.RoomFull) as err:
        store.join(code, "c")
    assert err.value.params == {"max_students": 2}
    store.heartbeat(code, "a")  # one already in comes back
    clock.advance(rules.KEEP_S + 1)
    store.join(code, "c")  # an hour later the others' seats are free
    assert store.present(code) == 1


# ---- questions and answers --------------------------------------------------------------------------------------

def test_a_student_answering_twice_counts_once_and_the_last_answer_wins(store, room):
    code, secret = room
    for s in ("s2", "s3"):
        store.join(code, s)
    qid = store.ask(code, secret, QUESTION)
    store.answer(code, qid, "s1", "Kedi")
    store.answer(code, qid, "s1", "uyudu")
    store.answer(code, qid, "s2", "uyudu")
    store.answer(code, qid, "s3", " Kedi ")
    assert store.results(code, qid)["total"] == 3
    store.reveal(code, secret, qid, {"token": "uyudu"})
    assert store.results(code, qid) == {"counts": {"uyudu": 2, "Kedi": 1}, "total": 3, "revealed": True,
                                        "measured": {"token": "uyudu"}}


def test_results_hide_the_counts_before_the_reveal_and_never_say_who(store, room):
    code, secret = room
    store.join(code, "student-two")
    qid = store.ask(code, secret, {"text": "How many layers?"})
    store.answer(code, qid, "s1", 6)
    store.answer(code, qid, "student-two", "6")  # a number and a text are different answers
    assert store.results(code, qid) == {"counts": {}, "total": 2, "revealed": False, "measured": None}
    store.reveal(code, secret, qid, 6)
    shown = store.results(code, qid)
    assert shown["counts"] == {6: 1, "6": 1} and shown["measured"] == 6
    assert "s1" not in repr(shown) and "student-two" not in repr(shown)
    store.reveal(code, secret, qid, 7)  # again: only what was measured changes
    assert store.results(code, qid) == {**shown, "measured": 7}
    if isinstance(store, live.RedisStore):  # who answered what is gone from Redis too
        assert not [k for k in _keys(store) if ":answers:" in k]


def test_answers_after_the_reveal_or_to_an_old_question_are_refused(store, room):
    code, secret = room
    first = store.ask(code, secret, QUESTION)
    store.answer(code, first, "s1", "Kedi")
    store.reveal(code, secret, first)
    with pytest.raises(live.QuestionClosed) as err:
        store.answer(code, first, "s1", "uyudu")
    assert err.value.code == "live_question_closed"
    assert store.results(code, first)["counts"] == {"Kedi": 1}
    second = store.ask(code, secret, {"text": "?"})
    third = store.ask(code, secret, {"text": "??"})
    with pytest.raises(live.QuestionClosed):
        store.answer(code, second, "s1", "x")  # the teacher moved on
    store.answer(code, third, "s1", "x")
    for missing in (0, 99, "1", True, None):
        with pytest.raises(live.NoSuchQuestion):
            store.answer(code, missing, "s1", "x")
        with pytest.raises(live.NoSuchQuestion):
            store.results(code, missing)
    with pytest.raises(live.NotJoined) as err:
        store.answer(code, third, "never-joined", "x")
    assert err.value.code == "live_not_joined"


def test_a_new_lesson_step_ends_the_question_of_the_last_one(store, room):
    """Issue 50 point 3: on 5 of 10 steps the class still saw the previous step's revealed question under the new
    step, and a late joiner first met an old question. A state naming another lesson step ends the current
    question (asked or revealed) for everyone; a change of the same step's widgets, or outside a lesson, keeps it."""
    code, secret = room
    step = rules.LESSON_STEP
    store.set_state(code, secret, "qkv", {step: "attention-intro:0", "layer": "1"})
    first = store.ask(code, secret, QUESTION)
    store.set_state(code, secret, "qkv", {step: "attention-intro:0", "layer": "2"})  # the same step, changed
    assert store.get_state(code)["question"]["id"] == first
    store.answer(code, first, "s1", "Kedi")
    store.reveal(code, secret, first)
    assert store.get_state(code)["revealed"]
    version = store.set_state(code, secret, "flow", {step: "attention-intro:1"})  # Next
    state = store.get_state(code)
    assert state["question"] is None and not state["revealed"] and state["version"] == version
    assert state["params"] == {step: "attention-intro:1"}
    assert store.results(code, first)["counts"] == {"Kedi": 1}  # what was answered stays counted
    second = store.ask(code, secret, {"text": "?"})
    store.set_state(code, secret, "flow", {step: "attention-intro:0"})  # Previous, before anyone answered
    with pytest.raises(live.QuestionClosed):
        store.answer(code, second, "s1", "x")
    assert store.get_state(code)["question"] is None
    third = store.ask(code, secret, {"text": "outside a lesson"})
    store.set_state(code, secret, "flow", {"layer": "3"})  # the lesson ended: the step changed, the question too
    assert store.get_state(code)["question"] is None
    fourth = store.ask(code, secret, {"text": "free"})
    store.set_state(code, secret, "masks", {"layer": "4"})  # no lesson before or after: kept
    assert store.get_state(code)["question"]["id"] == fourth != third


def test_a_question_asked_as_the_teacher_moves_belongs_to_its_step(store, room):
    """A teacher who presses Previous and then at once Ask asks before that run's page reaches the room: the room
    still names the step left. The question names its own step, so the page arriving after it keeps it (the class
    never saw it before: browser tier, 2 of 4 fresh clones), it is not shown under the step before, and a later move
    to any other step ends it."""
    code, secret = room
    step = rules.LESSON_STEP
    store.set_state(code, secret, "qkv", {step: "attention-intro:1"})
    asked = store.ask(code, secret, {**QUESTION, rules.QUESTION_STEP: "attention-intro:0"})
    early = store.get_state(code)
    assert early["question"] is None and not early["revealed"]  # not under step 2's page
    store.set_state(code, secret, "qkv", {step: "attention-intro:0", "qkv_layer": "0"})  # the step's page arrives
    state = store.get_state(code)
    assert state["question"]["id"] == asked and state["question"][rules.QUESTION_STEP] == "attention-intro:0"
    store.answer(code, asked, "s1", "Kedi")
    store.set_state(code, secret, "qkv", {step: "attention-intro:0", "qkv_layer": "1"})  # the same step, changed
    assert store.get_state(code)["question"]["id"] == asked
    store.set_state(code, secret, "qkv", {step: "attention-intro:1"})  # Next: another step ends it
    assert store.get_state(code)["question"] is None
    store.set_state(code, secret, "qkv", {step: "attention-intro:0"})  # and back does not bring it back
    assert store.get_state(code)["question"] is None
    with pytest.raises(live.QuestionClosed):
        store.answer(code, asked, "s1", "Fare")
    assert store.results(code, asked)["total"] == 1  # what was answered stays counted


@pytest.mark.parametrize("value", [True, None, [], {}, "", "   ", "x" * 81, "a\nb", float("nan"), float("inf"),
                                   2 ** 60, b"bytes"])
def test_an_answer_is_a_short_text_or_a_number(store, room, value):
    code, secret = room
    qid = store.ask(code, secret, {"text": "?"})
    with pytest.raises(live.InvalidAnswer):
        store.answer(code, qid, "s1", value)
    assert store.results(code, qid)["total"] == 0


def test_answers_are_normalised_and_choices_enforced(store, room):
    code, secret = room
    store.join(code, "s2")
    qid = store.ask(code, secret, {"text": "?", "choices": [1, 2, "üç"]})
    store.answer(code, qid, "s1", 2.0)
    store.answer(code, qid, "s2", " üç ")
    with pytest.raises(live.InvalidAnswer) as err:
        store.answer(code, qid, "s2", "4")
    assert err.value.code == "live_answer_not_a_choice"
    store.reveal(code, secret, qid)
    assert store.results(code, qid)["counts"] == {2: 1, "üç": 1}


@pytest.mark.parametrize("call, code", [
    (lambda s, c, k: s.set_state(c, k, "Explore!", {}), "live_invalid_page"),
    (lambda s, c, k: s.set_state(c, k, "explore", {"layer": 2}), "live_invalid_params"),
    (lambda s, c, k: s.set_state(c, k, "explore", {"bad key": "1"}), "live_invalid_params"),
    (lambda s, c, k: s.set_state(c, k, "explore", {f"k{i}": "x" * 3000 for i in range(12)}), "live_state_too_large"),
    (lambda s, c, k: s.ask(c, k, {"id": 3, "text": "?"}), "live_invalid_question"),
    (lambda s, c, k: s.ask(c, k, {"text": "x" * 5000}), "live_invalid_question"),
    (lambda s, c, k: s.ask(c, k, {"text": object()}), "live_invalid_question"),
    (lambda s, c, k: s.ask(c, k, "not a dict"), "live_invalid_question"),
    (lambda s, c, k: s.ask(c, k, {"choices": ["a"]}), "live_invalid_choices"),
    (lambda s, c, k: s.ask(c, k, {"choices": ["a", "a"]}), "live_invalid_choices"),
    (lambda s, c, k: s.ask(c, k, {"choices": ["a", None]}), "live_invalid_choices"),
    (lambda s, c, k: s.reveal(c, k, 1, {"x": object()}), "live_invalid_measured"),
])
def test_what_the_room_does_not_take_is_refused_with_a_code(store, room, call, code):
    room_code, secret = room
    store.ask(room_code, secret, {"text": "?"})
    version = store.version(room_code)
    with pytest.raises(live.InvalidRequest) as err:
        call(store, room_code, secret)
    assert err.value.code == code
    assert store.version(room_code) == version


def test_an_answer_and_a_reveal_at_once_count_every_accepted_answer(store, room):
    """Students keep changing their answers while the teacher reveals: an answer is either in the frozen counts
    (the last one a student got accepted) or refused, never accepted and lost."""
    code, secret = room
    students = [f"s{i}" for i in range(16)]
    for s in students:
        store.join(code, s)
    qid = store.ask(code, secret, {"text": "?"})
    accepted, refused = [], []

    def student(sid: str) -> None:
        i, until = int(sid[1:]), time.time() + 60
        while time.time() < until:
            i += 1
            value = "abc"[i % 3]
            try:
                store.answer(code, qid, sid, value)
            except live.QuestionClosed:
                refused.append(sid)
                return
            accepted.append((sid, value))

    threads = [threading.Thread(target=student, args=(s,)) for s in students]
    for t in threads:
        t.start()
    deadline = time.time() + 30
    while len(accepted) < 3 * len(students) and time.time() < deadline:
        time.sleep(0.001)
    store.reveal(code, secret, qid)
    for t in threads:
        t.join()
    assert sorted(refused) == sorted(students)  # every student was still answering at the reveal
    last = {sid: value for sid, value in accepted}
    expected = {}
    for value in last.values():
        expected[value] = expected.get(value, 0) + 1
    result = store.results(code, qid)
    assert result["total"] == len(last) and result["counts"] == expected, (len(accepted), last)


# ---- every change reported, so a server wakes its students at once (issue 48) -------------------------------------


def _reported(seen: list, count: int, timeout: float = 10.0) -> list:
    deadline = time.monotonic() + timeout
    while len(seen) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)  # and nothing more comes
    return list(seen)


def test_every_change_of_a_rooms_version_is_reported_to_watchers_of_any_process(new_store, kind):
    """A watcher (views/live_sections/wake.py) is told the room's code after each change of its version: the page,
    a question asked, revealed, the room closed; not after what leaves the version (a join, an answer, a heartbeat).
    With Redis the watcher is another process's store (a new RedisStore on the same keys: another replica)."""
    teacher, other = new_store(), new_store()
    seen: list[str] = []
    other.watch(seen.append)
    code, secret = teacher.create_room(TOKEN)
    teacher.join(code, "s1")
    teacher.set_state(code, secret, "explore", {"text": "Kedi uyudu."})
    qid = teacher.ask(code, secret, QUESTION)
    teacher.heartbeat(code, "s1")
    teacher.answer(code, qid, "s1", "Kedi")
    teacher.reveal(code, secret, qid)
    assert teacher.version(code) == 3
    teacher.close_room(code, secret)
    assert _reported(seen, 4) == [code] * 4


def test_a_failing_watcher_never_fails_the_change(store, room):
    code, secret = room

    def broken(_code):
        raise RuntimeError("a watcher's bug")

    store.watch(broken)
    assert store.set_state(code, secret, "explore", {"text": "Kedi uyudu."}) == 1
    assert store.get_state(code)["params"] == {"text": "Kedi uyudu."}


# ---- joining by a typed code, and its rate limit ----------------------------------------------------------------

def test_guessing_room_codes_is_rate_limited_and_the_limit_resets(new_store, clock):
    store = new_store()
    store.join_window_s = 0.5
    code, _ = store.create_room(TOKEN)
    assert store.join_attempt(f" {code[:3].lower()}-{code[3:]} ", "alice", "s1") == code
    assert store.present(code) == 1
    wrong = "ZZZZZZ" if code != "ZZZZZZ" else "YYYYYY"
    for guess in [wrong] * (store.join_limit - 1) + ["not a code"]:
        with pytest.raises(live.NoSuchRoom) as err:
            store.join_attempt(guess, "mallory")
        assert err.value.code == "live_no_such_room"
    for guess in (wrong, code):  # now refused whether right or wrong
        with pytest.raises(live.RateLimited) as err:
            store.join_attempt(guess, "mallory")
        assert err.value.code == "live_rate_limited" and err.value.params["retry_s"] >= 1
    assert store.join_attempt(code, "bob") == code  # another client is not held up
    for _ in range(5):  # right codes are not counted
        assert store.join_attempt(code, "alice") == code
    clock.advance(1)
    time.sleep(0.6)  # Redis expires the window itself
    assert store.join_attempt(code, "mallory", "s9") == code
    assert store.present(code) == 2


def _wrong(code: str) -> str:
    return "ZZZZZZ" if code != "ZZZZZZ" else "YYYYYY"


def test_a_new_browser_session_from_the_same_address_is_still_limited(store):
    """The join bucket is the client's address (rules.client_key, as views/live_sections/room.py makes it), not its
    browser session: a bot opening a new session for every guess is one client."""
    store.join_limit = 4
    code, _ = store.create_room(TOKEN)
    for i in range(store.join_limit):  # each guess from a new session, one address
        with pytest.raises(live.NoSuchRoom):
            store.join_attempt(_wrong(code), rules.client_key(f"session-{i}", "203.0.113.7", "", False))
    for guess in (_wrong(code), code):  # a new session still: refused, right code or wrong (no oracle)
        with pytest.raises(live.RateLimited) as err:
            store.join_attempt(guess, rules.client_key("session-new", "203.0.113.7", "", False))
        assert err.value.code == "live_rate_limited"
    # behind Dikkat's nginx every peer is 127.0.0.1: the address nginx appended counts, not what the client wrote
    for i in range(store.join_limit):
        with pytest.raises(live.NoSuchRoom):
            store.join_attempt(_wrong(code), rules.client_key(f"s{i}", "198.51.100.9", f"10.1.2.{i}, 198.51.100.9",
                                                              True))
    with pytest.raises(live.RateLimited):
        store.join_attempt(code, rules.client_key("s9", "198.51.100.9", "192.0.2.77, 198.51.100.9", True))
    # another address (another school) is not held up, and right codes are never counted
    for _ in range(store.join_limit + 2):
        assert store.join_attempt(code, rules.client_key("other", "192.0.2.1", "", False)) == code
    assert store.join_attempt(code, rules.client_key("session-1", None, "", False)) == code  # no address: the session


def test_the_servers_bucket_refuses_everyone_after_its_limit(new_store, clock):
    """Wrong codes from many addresses fill one bucket for the whole server (every replica: one Redis key); once
    full, every code is refused, the right one too, until its window ends."""
    replicas = [new_store(), new_store()]  # two replicas on one Redis (one store for memory)
    for replica in replicas:
        replica.server_join_limit, replica.server_join_window_s = 6, 0.5
    code, _ = replicas[0].create_room(TOKEN)
    for i in range(6):  # one wrong code from each of six addresses, on either replica
        with pytest.raises(live.NoSuchRoom):
            replicas[i % 2].join_attempt(_wrong(code), f"ip:203.0.113.{i}")
    for guess in (_wrong(code), code):
        for replica in replicas:
            with pytest.raises(live.RateLimited) as err:
                replica.join_attempt(guess, "ip:192.0.2.200", "s1")  # a new address, never wrong before
            assert err.value.code == "live_server_rate_limited" and err.value.params["retry_s"] >= 1
    assert replicas[0].present(code) == 0
    clock.advance(1)
    time.sleep(0.6)  # Redis expires the window itself
    assert replicas[1].join_attempt(code, "ip:192.0.2.200", "s1") == code
    assert replicas[0].present(code) == 1


def test_a_flood_of_wrong_codes_never_locks_out_a_class_that_joins_by_its_link(new_store):
    """Issue 44: 600 wrong codes from 4 addresses stopped every join for 10 minutes. The teacher's link and QR code
    carry the room's link key: a join with it is neither limited nor counted, on every replica; a wrong key, or the
    code alone, is an ordinary (limited) attempt; only the teacher reads the key."""
    replicas = [new_store(), new_store()]
    for replica in replicas:
        replica.server_join_limit = 6
    code, secret = replicas[0].create_room(TOKEN)
    key = replicas[1].link_key(code, secret)
    assert len(key) >= 16 and key == replicas[0].link_key(code, secret)
    with pytest.raises(live.NotTeacher):
        replicas[0].link_key(code, "not-the-secret")
    for i in range(6):  # the flood, from four addresses
        with pytest.raises(live.NoSuchRoom):
            replicas[i % 2].join_attempt(_wrong(code), f"ip:203.0.113.{i % 4}")
    for n, replica in enumerate(replicas * 15):  # thirty students behind one school address, by the link
        assert replica.join_attempt(code.lower(), "ip:198.51.100.1", f"student-{n}", link_key=key) == code
    assert replicas[0].present(code) == 30
    for wrong_key in (key[:-1] + ("A" if key[-1] != "A" else "B"), "", None):  # no key, or a wrong one: limited
        with pytest.raises(live.RateLimited):
            replicas[1].join_attempt(code, "ip:198.51.100.2", "late", link_key=wrong_key)
    with pytest.raises(live.RateLimited):  # the key opens only its own room
        replicas[0].join_attempt(_wrong(code), "ip:198.51.100.3", "other", link_key=key)


def test_a_seat_is_taken_again_only_while_the_room_holds_it_and_its_answer_is_read_back(store, clock):
    """One student, one seat (issue 44): a reloaded page or a second tab sends its seat (the student id) and takes it
    again while the room holds it; an id the room never saw, or junk, holds no seat. The store reads back a seat's
    answer to the open question (a reloaded page shows it), and nothing after the reveal."""
    code, secret = store.create_room(TOKEN)
    store.join(code, "seat-a")
    assert store.seated(code, "seat-a") and not store.seated(code, "seat-b")
    for junk in ("", "x" * 65, "a b", None, 3, "<script>"):
        assert not store.seated(code, junk)
    qid = store.ask(code, secret, QUESTION)
    assert store.answer_of(code, qid, "seat-a") is None
    store.answer(code, qid, "seat-a", "uyudu")
    store.answer(code, qid, "seat-a", "Kedi")  # changed: still one answer
    assert store.answer_of(code, qid, "seat-a") == "Kedi" and store.results(code, qid)["total"] == 1
    assert store.answer_of(code, qid, "seat-b") is None and store.answer_of(code, 99, "seat-a") is None
    store.reveal(code, secret, qid)
    assert store.answer_of(code, qid, "seat-a") is None
    clock.advance(rules.KEEP_S + 1)  # gone an hour: the seat is free
    assert not store.seated(code, "seat-a")


def test_the_limits_fit_a_class_and_cost_a_guesser_years():
    """The numbers rules.py's docstring states: 30 students behind one address with 3 typos each (90), four such
    classes with 5 typos per student on one server (600), pass; at the server's bucket a bot needs years for ten
    rooms."""
    assert rules.JOIN_LIMIT >= 30 * 3 and rules.SERVER_JOIN_LIMIT >= 4 * 30 * 5
    codes = len(rules.ALPHABET) ** rules.CODE_LENGTH
    assert codes == 887_503_681
    per_s = rules.SERVER_JOIN_LIMIT / rules.SERVER_JOIN_WINDOW_S
    assert per_s == 1.0 and rules.JOIN_LIMIT / rules.JOIN_WINDOW_S == 0.25
    years = codes / 10 / per_s / 86400 / 365.25
    assert round(years, 1) == 2.8
    assert round(100 * (1 - (1 - 100 / codes) ** (per_s * rules.TTL_S)), 2) == 0.49  # 100 rooms, 12 h
    assert round(100 * (1 - (1 - 10 / codes) ** (30 * rules.TTL_S)), 1) == 1.4  # 30/s without a limit, 10 rooms


@pytest.mark.parametrize("remote, forwarded, behind, expected", [
    (None, "", False, None),  # no connection (AppTest): no address
    ("203.0.113.7", "", False, "203.0.113.7"),  # a browser straight to the app
    ("203.0.113.7", "1.2.3.4", False, "203.0.113.7"),  # its own header: uvicorn ignored it, and so do we
    ("203.0.113.7", "1.2.3.4", True, "203.0.113.7"),
    ("198.51.100.9", "198.51.100.9", True, "198.51.100.9"),  # through Dikkat's nginx
    ("198.51.100.9", "10.9.9.9, 198.51.100.9", True, "198.51.100.9"),  # a written entry before nginx's: not it
    ("10.9.9.9", "10.9.9.9, 127.0.0.1", True, "127.0.0.1"),  # a client on this machine through nginx, writing
    ("127.0.0.1", "127.0.0.1", True, "127.0.0.1"),
    ("[2001:db8::1]", "", False, "[2001:db8::1]"),
    ("2001:db8::1", "[2001:db8::1]:5000", True, "2001:db8::1"),
    ("5.6.7.8", "5.6.7.8", False, rules.LOOPBACK_CLIENT),  # a proxy of this machine that is not Dikkat's nginx:
    ("5.6.7.9", "5.6.7.9", False, rules.LOOPBACK_CLIENT),  # its header is anyone's words, one client for all
])
def test_the_client_address_believes_only_dikkats_own_proxy(remote, forwarded, behind, expected):
    assert rules.client_address(remote, forwarded, behind) == expected
    assert rules.client_key("sid", remote, forwarded, behind) == (f"ip:{expected}" if expected else "session:sid")


def test_behind_proxy_is_make_serve_with_replicas():
    assert not live.config.behind_proxy({}) and not live.config.behind_proxy({"REPLICAS": "1"})
    assert live.config.behind_proxy({"REPLICAS": "3"}) and not live.config.behind_proxy({"REPLICAS": "x"})


# ---- a teacher's page reloaded: the room led again ----------------------------------------------------------

def test_a_teacher_leads_the_room_again_with_the_token_and_the_old_secret_stops(new_store):
    store = new_store()
    code, old = store.create_room(TOKEN, client_key="ip:teacher")
    store.set_state(code, old, *PAGE)
    store.join(code, "s1")
    qid = store.ask(code, old, QUESTION)
    store.answer(code, qid, "s1", "Kedi")
    before = store.get_state(code)
    assert store.teaches(code, old) and not store.teaches(code, "x") and not store.teaches(code, None)
    for wrong in ("wrong", "", None):  # no token, a wrong one: refused before the code is even looked at
        for room_code in (code, _wrong(code), "nonsense"):
            with pytest.raises(live.NotTeacher) as err:
                store.resume_room(room_code, wrong, client_key=f"ip:student-{wrong}")
            assert err.value.code == "live_not_teacher"
    with pytest.raises(live.NoSuchRoom) as err:  # a teacher (the token) is told a room is gone
        store.resume_room(_wrong(code), TOKEN, client_key="ip:teacher")
    assert err.value.code == "live_room_closed"
    other = new_store()  # another replica after a reload, for Redis
    new = other.resume_room(code.lower(), TOKEN, client_key="ip:teacher")
    assert new != old and len(new) >= 43
    assert other.teaches(code, new) and not other.teaches(code, old) and not store.teaches(code, old)
    with pytest.raises(live.NotTeacher):
        store.set_state(code, old, "masks", {})  # the earlier session leads no more
    assert other.get_state(code) == before and other.present(code) == 1  # the class is where it was
    assert other.results(code, qid)["total"] == 1
    assert other.set_state(code, new, "masks", {}) == before["version"] + 1
    if isinstance(other, live.RedisStore):  # the secret keeps a TTL, and only its hash is stored
        assert other.redis.ttl(other._key(code, "secret")) > 0
        assert not any(new.encode() in other.redis.dump(k) for k in _keys(other))
    other.close_room(code, new)
    with pytest.raises(live.NoSuchRoom):
        other.teaches(code, new)
    with pytest.raises(live.NoSuchRoom):
        other.resume_room(code, TOKEN)


def test_wrong_tokens_to_lead_a_room_again_are_rate_limited_with_opening_one(store):
    code, _ = store.create_room(TOKEN)
    for i in range(store.teacher_limit):
        call = store.resume_room if i % 2 else (lambda c, t, client_key: store.create_room(t, client_key=client_key))
        with pytest.raises(live.NotTeacher):
            call(code, "guess", client_key="ip:203.0.113.7")
    with pytest.raises(live.RateLimited):  # even the right token: the limit is no oracle
        store.resume_room(code, TOKEN, client_key="ip:203.0.113.7")
    assert store.resume_room(code, TOKEN, client_key="ip:192.0.2.1")


def test_allow_counts_hits_in_a_window(store, clock):
    assert all(store.allow("b1", 3, 0.4) for _ in range(3))
    assert not store.allow("b1", 3, 0.4) and store.allow("b2", 3, 0.4)
    clock.advance(1)
    time.sleep(0.5)
    assert store.allow("b1", 3, 0.4)


# ---- Redis: a restarted replica, TTLs, two processes ------------------------------------------------------------

@pytest.mark.parametrize("kind", ["redis"])  # a MemoryStore dies with its process
def test_a_restarted_replica_sees_the_same_room(new_store, kind, clock):
    first = new_store()
    code, secret = first.create_room(TOKEN)
    first.set_state(code, secret, *PAGE)
    first.join(code, "s1")
    qid = first.ask(code, secret, QUESTION)
    first.answer(code, qid, "s1", "Kedi")
    first.redis.close()
    again = new_store()  # a new process's store on the same Redis
    assert again.room_exists(code) and again.version(code) == 2
    assert again.get_state(code)["params"] == PAGE[1] and again.present(code) == 1
    assert again.results(code, qid)["total"] == 1
    again.answer(code, qid, "s1", "uyudu")
    again.reveal(code, secret, qid, "uyudu")
    assert again.results(code, qid)["counts"] == {"uyudu": 1}


@pytest.mark.parametrize("kind", ["redis"])
def test_every_redis_key_has_a_ttl(new_store, kind, clock):
    store = new_store(ttl_s=3600)
    code, secret = store.create_room(TOKEN)
    store.set_state(code, secret, *PAGE)
    store.join(code, "s1")
    qid = store.ask(code, secret, QUESTION)
    store.answer(code, qid, "s1", "Kedi")
    store.ask(code, secret, {"text": "?"})
    store.reveal(code, secret, qid)
    with pytest.raises(live.NoSuchRoom):
        store.join_attempt("ZZZZZ2" if code != "ZZZZZ2" else "YYYYY2", "guesser")
    store.allow("bucket", 5, 30)
    keys = _keys(store)
    assert len(keys) >= 7, keys
    ttls = {k: store.redis.ttl(k) for k in keys}
    assert all(0 < t <= 3600 for t in ttls.values()), ttls
    # activity gives them their TTL back
    store.redis.expire(store._key(code, "secret"), 50)
    clock.advance(120)
    store.heartbeat(code, "s1")
    assert store.redis.ttl(store._key(code, "secret")) > 3000


def test_an_unreachable_redis_is_live_unavailable():
    store = live.RedisStore(f"redis://127.0.0.1:{free_port()}/0", teacher_token=TOKEN)
    for call in (lambda: store.room_exists("ABCDEF"), lambda: store.create_room(TOKEN),
                 lambda: store.version("ABCDEF")):
        with pytest.raises(live.LiveUnavailable) as err:
            call()
        assert err.value.code == "live_unavailable"


def _teacher_process(url: str, prefix: str, code: str, secret: str, out) -> None:
    store = live.RedisStore(url, prefix=prefix)
    deadline = time.time() + 30
    store.set_state(code, secret, *PAGE)
    while store.present(code) < 1 and time.time() < deadline:
        time.sleep(0.02)
    qid = store.ask(code, secret, QUESTION)
    while store.results(code, qid)["total"] < 1 and time.time() < deadline:
        time.sleep(0.02)
    store.reveal(code, secret, qid, {"token": "Kedi"})
    out.put(("teacher", qid))


def _student_process(url: str, prefix: str, code: str, out) -> None:
    store = live.RedisStore(url, prefix=prefix)
    deadline = time.time() + 30
    store.join(code, "student")
    seen = []
    while time.time() < deadline:
        state = store.get_state(code)
        if state["version"] and state["page"] not in seen:
            seen.append(state["page"])
        if state["question"] is not None:
            store.answer(code, state["question"]["id"], "student", "Kedi")
            break
        store.heartbeat(code, "student")
        time.sleep(0.02)
    while not store.get_state(code)["revealed"] and time.time() < deadline:
        time.sleep(0.02)
    out.put(("student", seen, store.results(code, state["question"]["id"])))


def test_two_processes_on_one_redis_see_each_others_updates(redis_url):
    prefix = f"mp{uuid.uuid4().hex[:8]}:"
    code, secret = live.RedisStore(redis_url, prefix=prefix, teacher_token=TOKEN).create_room(TOKEN)
    ctx = multiprocessing.get_context("spawn")  # no fork of a process that may hold torch's threads
    out = ctx.Queue()
    procs = [ctx.Process(target=_teacher_process, args=(redis_url, prefix, code, secret, out)),
             ctx.Process(target=_student_process, args=(redis_url, prefix, code, out))]
    for p in procs:
        p.start()
    got = dict((item[0], item[1:]) for item in (out.get(timeout=60) for _ in procs))
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    (qid,) = got["teacher"]
    seen, results = got["student"]
    assert seen == ["explore"] and qid == 1
    assert results == {"counts": {"Kedi": 1}, "total": 1, "revealed": True, "measured": {"token": "Kedi"}}


# ---- configuration, the launcher's Redis, errors' translations, imports -----------------------------------------

def test_store_from_env_picks_redis_or_one_memory_store(redis_url):
    memory = live.store_from_env({})
    assert isinstance(memory, live.MemoryStore) and live.store_from_env({"REPLICAS": "1"}) is memory
    shared = live.store_from_env({"DIKKAT_REDIS_URL": redis_url, "REPLICAS": "3"})
    assert isinstance(shared, live.RedisStore) and live.store_from_env({"DIKKAT_REDIS_URL": redis_url}) is shared
    with pytest.raises(live.LiveUnavailable) as err:
        live.store_from_env({"REPLICAS": "2"})
    assert err.value.code == "live_needs_redis"
    assert isinstance(memory, live.RoomStore) and isinstance(shared, live.RoomStore)


def test_the_launcher_starts_a_private_redis_for_the_replicas():
    proc, url = launch.start_redis()
    try:
        assert url.startswith("redis://:") and "@127.0.0.1:" in url
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:  # a password ...
            sock.sendall(b"*1\r\n$4\r\nPING\r\n")
            assert sock.recv(64).startswith(b"-NOAUTH")
        assert url.split("@")[0].split(":")[-1] not in " ".join(proc.args)  # ... not on its command line
        store = live.RedisStore(url, teacher_token=TOKEN)
        code, _ = store.create_room(TOKEN)
        assert store.room_exists(code)
    finally:
        launch.stop_redis(proc)
    assert proc.poll() is not None
    script = "import os, redis; redis.Redis.from_url(os.environ['DIKKAT_REDIS_URL']).set('x', 1); print('ok')"
    out = subprocess.run([sys.executable, str(ROOT / "deploy" / "launch.py"), "--with-redis", "--",
                          sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    with socket.socket() as taken:  # a port in use: the reason is told
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(SystemExit, match="did not start.*\n.*"):
            launch.start_redis(port=taken.getsockname()[1], timeout=5)
    assert launch.run_with_redis([sys.executable, "-c", "import os, sys; sys.exit(os.environ['DIKKAT_REDIS_URL'] "
                                  "!= 'redis://given')"], {"DIKKAT_REDIS_URL": "redis://given"}) == 0


def _live_error_calls():
    """(where, class, call) of every ``X(...)`` in live/ with X a LiveError subclass (raised or returned)."""
    classes = {name for name in dir(live.errors) if isinstance(getattr(live.errors, name), type)
               and issubclass(getattr(live.errors, name), live.LiveError)}
    for path in (ROOT / "live" / f"{name}.py" for name in STORE_MODULES):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in classes:
                yield f"{path.name}:{node.lineno}", node.func.id, node


def test_every_live_error_code_has_a_turkish_text_filled_by_its_params():
    strings = json.loads((ROOT / "assets" / "i18n" / "live_errors.json").read_text(encoding="utf-8"))
    problems, used = [], set()
    calls = list(_live_error_calls())
    for where, cls, call in calls:
        kw = {k.arg: k.value for k in call.keywords if k.arg}
        code = kw.pop("code", None)
        if not isinstance(code, ast.Constant):
            problems.append(f"{where} {cls}: no constant code")
            continue
        used.add(code.value)
        tr = (strings.get(f"errmsg_{code.value}") or {}).get("tr")
        wanted = {name for _, name, _, _ in string.Formatter().parse(tr or "") if name}
        if not tr:
            problems.append(f"{where}: no Turkish errmsg_{code.value}")
        elif wanted != set(kw):
            problems.append(f"{where}: errmsg_{code.value} takes {sorted(wanted)}, the raise passes {sorted(kw)}")
    assert len(calls) >= 30, len(calls)
    assert not problems, "\n".join(problems)
    unused = {k for k in strings if k.startswith("errmsg_")} - {f"errmsg_{c}" for c in used}
    assert not unused, unused
    assert strings["err_LiveError"]["tr"]


def test_the_store_imports_neither_streamlit_nor_torch():
    for path in (ROOT / "live" / f"{name}.py" for name in STORE_MODULES):
        names = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
        assert not names & {"streamlit", "torch", "transformers", "models", "views", "viz", "numpy"}, (path, names)
    out = subprocess.run([sys.executable, "-c", "import live, sys; print(sorted({'torch', 'streamlit', 'models'} "
                          "& set(sys.modules)))"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
