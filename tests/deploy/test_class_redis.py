"""The class's store survives its faults (issue 44): the Redis that ``deploy/launch.py --with-redis`` starts writes
an append-only file and is started again when it dies (``deploy/class_redis.py``), and the app's client gives up on
a Redis that stopped answering within its deadline and says so (``live/redis_store.py``: ``outage_s``)."""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

import live

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "deploy"))

import class_redis  # noqa: E402
import launch  # noqa: E402

TOKEN = "teacher-token-for-tests"
QUESTION = {"prompt": {"en": "Which?", "tr": "Hangisi?"}, "choices": ["a", "b", "c"]}


def _class(store: live.RedisStore) -> tuple[str, str, int]:
    """A room with a page shown, a question open and 8 answers: (code, secret, question id)."""
    code, secret = store.create_room(TOKEN)
    store.set_state(code, secret, "explore", {"text": "Kedi uyudu.", "layer": "2"})
    qid = store.ask(code, secret, QUESTION)
    for i in range(8):
        store.join(code, f"student-{i}")
        store.answer(code, qid, f"student-{i}", "abc"[i % 3])
    return code, secret, qid


def _until(check, timeout: float = 20.0):
    """``check()`` once it returns a value without raising LiveUnavailable (the store reconnects by itself)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except live.LiveUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_a_class_survives_its_redis_killed_and_the_server_restarted(tmp_path):
    kept = class_redis.KeptRedis(tmp_path / "class", say=lambda line: None)
    url = kept.start()
    try:
        store = live.RedisStore(url, teacher_token=TOKEN)
        code, secret, qid = _class(store)
        first = kept.proc.pid
        os.kill(first, signal.SIGKILL)  # as the OOM killer would
        with pytest.raises(live.LiveUnavailable):  # the outage is seen, not waited out ...
            for _ in range(100):
                store.results(code, qid)
                time.sleep(0.01)
        assert store.outage_s() is not None
        res = _until(lambda: store.results(code, qid))  # ... and the class comes back by itself
        assert kept.restarts == 1 and kept.proc.pid != first
        assert store.outage_s() is None
        assert res["total"] == 8 and not res["revealed"]
        state = store.get_state(code)
        assert state["page"] == "explore" and state["params"]["layer"] == "2" and state["question"]["id"] == qid
        assert store.teaches(code, secret)
        store.answer(code, qid, "student-0", "c")  # the class goes on: an answer changed before the reveal
        store.reveal(code, secret, qid)
        assert store.results(code, qid)["counts"] == {"a": 2, "b": 3, "c": 3}
    finally:
        kept.stop()
    assert kept.proc.poll() is not None
    again = class_redis.KeptRedis(tmp_path / "class", say=lambda line: None)  # `make serve` started again
    assert again.start() == url  # the same port and password, from the folder
    try:
        store = live.RedisStore(url, teacher_token=TOKEN)
        assert store.results(code, qid)["total"] == 8 and store.teaches(code, secret)
        assert store.results(code, qid)["counts"] == {"a": 2, "b": 3, "c": 3}
    finally:
        again.stop()
    assert oct((tmp_path / "class" / "redis.json").stat().st_mode & 0o777) == "0o600"


def test_changes_are_reported_again_after_redis_was_killed_and_came_back(tmp_path):
    """Issue 48: a replica's listener (live/redis_store.py: ``watch``) subscribes again once the kept Redis is back,
    so students are woken at once again, not only by their poll."""
    kept = class_redis.KeptRedis(tmp_path / "class", say=lambda line: None)
    url = kept.start()
    try:
        teacher, replica = live.RedisStore(url, teacher_token=TOKEN), live.RedisStore(url, teacher_token=TOKEN)
        seen: list[str] = []
        replica.watch(seen.append)
        code, secret, _ = _class(teacher)
        deadline = time.monotonic() + 10
        while seen.count(code) < 2 and time.monotonic() < deadline:  # the page and the question, reported
            time.sleep(0.05)
        assert seen == [code, code]
        os.kill(kept.proc.pid, signal.SIGKILL)
        _until(lambda: teacher.version(code))  # back, restarted from its file
        before = len(seen)

        def reported():  # a change made now is reported (the listener may need a moment to subscribe again)
            teacher.set_state(code, secret, "explore", {"text": f"Kedi uyudu {len(seen)}."})
            time.sleep(0.3)
            if len(seen) == before:
                raise live.LiveUnavailable("not reported yet")
            return seen[-1]

        assert _until(reported) == code and kept.restarts == 1
    finally:
        kept.stop()


def test_one_folder_serves_one_class_redis(tmp_path):
    kept = class_redis.KeptRedis(tmp_path, say=lambda line: None)
    kept.start()
    try:
        with pytest.raises(SystemExit, match="used by another server"):
            class_redis.KeptRedis(tmp_path, say=lambda line: None).start()
    finally:
        kept.stop()


def test_the_launcher_keeps_its_redis_in_the_class_folder(tmp_path):
    script = ("import os, redis; r = redis.Redis.from_url(os.environ['DIKKAT_REDIS_URL']); r.set('kept', 'yes'); "
              "print(r.config_get('appendonly')['appendonly'], r.config_get('appendfsync')['appendfsync'])")
    env = {**os.environ, "DIKKAT_CLASS_DATA": str(tmp_path)}
    import subprocess

    out = subprocess.run([sys.executable, str(ROOT / "deploy" / "launch.py"), "--with-redis", "--",
                          sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0 and out.stdout.split() == ["yes", "everysec"], out.stderr
    check = "import os, redis; print(redis.Redis.from_url(os.environ['DIKKAT_REDIS_URL']).get('kept').decode())"
    out = subprocess.run([sys.executable, str(ROOT / "deploy" / "launch.py"), "--with-redis", "--",
                          sys.executable, "-c", check], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0 and out.stdout.strip() == "yes", out.stderr


@pytest.fixture
def silent_redis():
    """A socket that takes connections and never answers (a frozen Redis, a half-open link)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held, stop = [], threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"redis://127.0.0.1:{server.getsockname()[1]}/0"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def test_a_frozen_redis_is_reported_within_3_s_and_a_page_of_calls_waits_about_one_deadline(silent_redis):
    store = live.RedisStore(silent_redis, teacher_token=TOKEN)
    code = live.rules.new_code()
    start = time.monotonic()
    with pytest.raises(live.LiveUnavailable) as err:
        store.get_state(code)
    first = time.monotonic() - start
    assert err.value.code == "live_unavailable" and first < 3.0  # redis-py's own retries took 14.9 s
    assert store.outage_s() is not None
    start = time.monotonic()
    for call in (lambda: store.version(code), lambda: store.present(code),
                 lambda: store.heartbeat(code, "s"), lambda: store.results(code, 1)):
        with pytest.raises(live.LiveUnavailable):
            call()
    assert time.monotonic() - start < 1.0  # the rest of the page's calls fail at once


def test_a_stopped_redis_pauses_the_class_and_it_resumes_by_itself(tmp_path):
    """SIGSTOP for 2 s, as bench/class_soak.py freezes it: calls fail within the deadline while it is stopped and
    the store answers again, with everything, once it continues."""
    proc, url = launch.start_redis(folder=tmp_path)
    try:
        store = live.RedisStore(url, teacher_token=TOKEN)
        code, _, qid = _class(store)
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            start = time.monotonic()
            with pytest.raises(live.LiveUnavailable):
                store.results(code, qid)
            assert time.monotonic() - start < 3.0 and store.outage_s() is not None
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        assert _until(lambda: store.results(code, qid))["total"] == 8
        assert store.outage_s() is None
    finally:
        launch.stop_redis(proc)
