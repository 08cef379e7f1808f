"""A lesson under faults (issue 44): ``make serve REPLICAS=2`` behind nginx with the class's supervised Redis
(``deploy/class_redis.py``), a teacher per room and N students over Streamlit's websocket protocol
(``bench/live_class.py``'s ``Tab``: fragments on their timers, reconnects as the frontend does, nginx's cookie).

The lesson, ``--rounds`` times (a 45-minute lesson compressed into about ten minutes with the defaults):

1. the teachers open their classes; every student joins by the room's link (``?room=CODE&key=KEY``, read from the
   teacher's page, as the QR code carries it);
2. each round: the teacher's next change (``live_class.CYCLE``), then a question: asked, every student answers, every
   student's page is **reloaded** (a new websocket session on the link the page holds, ``&seat=`` included) and the
   student answers again with another choice, then the teacher reveals. With ``--visit``, in the first round every
   student first detaches, visits every page with a sentence of its own, and rejoins;
3. the faults, one per round from the second: the replica without the teachers killed (SIGKILL; deploy/replicas.py
   starts it again), Redis killed (SIGKILL; its keeper starts it again from its append-only file), Redis frozen for
   5 s (SIGSTOP, SIGCONT). Right after each fault the teacher makes the round's change.

Measured, read from the class's Redis itself and from the pages:

    seats            distinct students the room counts (its presence set) against the students: a reload that made a
                     second student shows here
    answers          per question: students whose answer was taken (their second answer), the revealed total, and
                     lost = sent - counted, counted twice = counted - sent (if > 0)
    change->page     seconds from the teacher's published change to each student's page showing it; p95 outside the
                     rounds with a fault, and per fault: until every student shows the change made right after it
                     (how long the class took to resume)
    memory           each replica's resident memory (VmRSS) every 5 s; peak, and the growth over the second half

    .venv/bin/python bench/class_soak.py [--students 30] [--rooms 2] [--rounds 7] [--visit] [--json out.json]
    (--env DIKKAT_MEMORY_GIB=... passes a setting to the servers)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(BENCH), str(ROOT / "deploy")]

import class_redis  # noqa: E402  (deploy/class_redis.py)
import classroom as C  # noqa: E402
import launch  # noqa: E402
import live_class as LC  # noqa: E402
import redis  # noqa: E402

KEY_RE = re.compile(rb"[?&]room=([A-Za-z0-9]{4,12})\\?&key=((?:\\?[A-Za-z0-9_-]){16})")  # markdown escapes
PAGES = ("", "flow", "why", "atlas", "masks", "pruning", "qkv")  # url paths: each student's own sentence on each
FAULTS = ("replica", "redis-kill", "redis-stop")


class Soak(LC.Lesson):
    """The lesson of the module's text, on one server with a kept Redis."""

    def __init__(self, args, server: LC.Server, keeper: class_redis.KeptRedis, words: list[str]):
        super().__init__(args, server.base, words, 2, kill=server.kill)
        self.server, self.keeper = server, keeper
        self.db = redis.Redis.from_url(keeper.url, decode_responses=True, socket_timeout=2)
        self.questions: list[dict] = []
        self.faults: list[dict] = []
        self.memory: list[tuple[float, list[int]]] = []
        self.t0 = time.perf_counter()

    # -- what Redis holds -----------------------------------------------------------------------------------
    def _redis(self, call, default=None):
        for _ in range(50):  # Redis may be down or reloading: the bench waits for it, as the app does
            try:
                return call()
            except redis.RedisError:
                time.sleep(0.2)
        return default

    def seats(self, room: LC.Room) -> int:
        return int(self._redis(lambda: self.db.zcard(f"dikkat:live:{{{room.code}}}:presence"), -1))

    # -- joining by the link --------------------------------------------------------------------------------
    async def join(self, room: LC.Room, s: LC.Tab) -> None:
        await asyncio.sleep(random.uniform(0, self.args.stagger))
        s.query = f"{LC.STUDENT_QUERY}&room={room.code}&key={room.link_key}"
        await s.connect()
        try:
            sent, _ = await s.act(timeout=self.args.timeout)  # the link's first run joins (and learns the pages)
            _, seen = await s.act(expect=self.state_watch(room, s, key="live_detach"), timeout=self.args.timeout)
            self.joins.append(seen - sent)
        except TimeoutError:
            self.missed.append(f"join by link, {s.name}: the teacher's page not shown")

    async def open_room(self, room: LC.Room) -> None:
        t = room.teacher
        await super().open_room(room)
        await t.act(page=self.page_hash(t, "live"), expect=LC.Watch(page=self.page_hash(t, "live")),
                    timeout=self.args.timeout)
        found = {m.groups() for raw in t.last.text for m in KEY_RE.finditer(raw)}
        if not found:
            near = [raw[m.start():m.start() + 80] for raw in t.last.text for m in re.finditer(rb"room", raw)][:3]
            raise RuntimeError(f"{t.name}: no link key on the Class page: {near}")
        room.link_key = next(iter(found))[1].decode().replace("\\", "")
        await t.act(page=self.page_hash(t, "explore"), expect=LC.Watch(page=self.page_hash(t, "explore")),
                    timeout=self.args.timeout)

    # -- a reload: a new session on the link the page holds -------------------------------------------------
    async def reload(self, room: LC.Room, s: LC.Tab) -> None:
        s.closing = True
        await s.close()
        for _, task in s.timers.values():
            task.cancel()
        s.timers.clear()
        s.widgets, s.active, s.cache, s.cache_run = {}, [], {}, {}
        s.closing = False
        await s.connect()
        try:
            await s.act(expect=LC.Watch(key="live_pick_"), timeout=self.args.timeout)
        except TimeoutError:
            self.missed.append(f"reload, {s.name}: the question not shown again")

    async def answer(self, s: LC.Tab, turn: int) -> bool:
        key = next((k for k in s.drawn_keys() if k.startswith("live_pick_")), None)
        if key is None:
            return False
        options = list(s.protos[s.key_ids[key]].options)
        await s.act(s.set_text(key, options[(s.number + turn) % len(options)]), timeout=self.args.timeout)
        try:
            await s.act(s.click("live_send"), expect=LC.Watch(marker=LC.SENT_RE), timeout=self.args.timeout)
            return True
        except TimeoutError:
            return False

    async def question(self, room: LC.Room) -> dict:
        t, timeout = room.teacher, self.args.timeout
        await t.act(page=self.page_hash(t, "live"), expect=LC.Watch(page=self.page_hash(t, "live")), timeout=timeout)
        watches = [(s, s.watch(LC.Watch(key="live_pick_"))) for s in room.students]
        await t.act(t.click("live_q_ask"), expect=LC.Watch(key="live_reveal_main"), timeout=timeout)
        await asyncio.gather(*(asyncio.wait_for(w.done.wait(), timeout) for _, w in watches), return_exceptions=True)
        first = await asyncio.gather(*(self.answer(s, 0) for s in room.students))
        await asyncio.gather(*(self.reload(room, s) for s in room.students))
        second = await asyncio.gather(*(self.answer(s, 1) for s in room.students))
        seats = self.seats(room)
        shown = LC.Watch(bars=True)
        await t.act(t.click("live_reveal_main"), expect=shown, timeout=timeout)
        counted = sum(shown.counts or [])
        sent = sum(1 for a, b in zip(first, second) if a or b)
        out = {"room": room.index + 1, "students": len(room.students), "seats": seats, "sent": sent,
               "counted": counted, "lost": max(0, sent - counted), "twice": max(0, counted - sent)}
        await t.act(page=self.page_hash(t, room.page), expect=LC.Watch(page=self.page_hash(t, room.page)),
                    timeout=timeout)
        return out

    # -- the faults -----------------------------------------------------------------------------------------
    async def fault(self, kind: str) -> float:
        t0 = time.perf_counter()
        if kind == "replica":
            await self.kill_replica()
        elif kind == "redis-kill":
            os.kill(self.keeper.proc.pid, signal.SIGKILL)
        else:
            os.kill(self.keeper.proc.pid, signal.SIGSTOP)
            await asyncio.sleep(5)
            os.kill(self.keeper.proc.pid, signal.SIGCONT)
        return t0

    async def visit(self, room: LC.Room, s: LC.Tab) -> None:
        """Detach, every page with a sentence of the student's own, rejoin."""
        timeout = self.args.timeout
        await s.act(s.click("live_detach"), expect=LC.Watch(key="live_rejoin"), timeout=timeout)
        for path in PAGES:
            page = s.pages.get(path)
            if page is None:
                continue
            await s.act(page=page, expect=LC.Watch(page=page), timeout=timeout)
            if "text" in s.key_ids:
                await s.act(s.set_text("text", f"Student {s.number} wrote sentence {path or 'explore'} today."),
                            timeout=timeout)
        await s.act(s.click("live_rejoin"), expect=self.state_watch(room, s, key="live_detach"), timeout=timeout)

    async def sample_memory(self) -> None:
        ports = [self.server.port + i for i in (1, 2)]
        while True:
            rss = []
            for port in ports:
                pid = self.server.replica_pid(port)
                try:
                    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines()
                                if x.startswith("VmRSS"))
                    rss.append(int(line.split()[1]) * 1024)
                except (OSError, StopIteration, TypeError):
                    rss.append(0)
            self.memory.append((time.perf_counter() - self.t0, rss))
            await asyncio.sleep(5)

    async def run(self) -> None:
        sampler = asyncio.create_task(self.sample_memory())
        try:
            for room in self.rooms:
                await self.open_room(room)
            await asyncio.gather(*(self.join(r, s) for r in self.rooms for s in r.students))
            if self.args.visit:
                await asyncio.gather(*(self.visit(r, s) for r in self.rooms for s in r.students))
            for i in range(self.args.rounds):
                kind = LC.CYCLE[i % len(LC.CYCLE)]
                fault = FAULTS[(i - 1) % len(FAULTS)] if i >= 1 and i - 1 < len(FAULTS) else None
                t0 = await self.fault(fault) if fault else None
                before = len(self.pairs)
                await asyncio.gather(*(self.change(r, i, kind) for r in self.rooms))
                if fault:  # the class resumed once every student shows the change made right after the fault
                    mine = self.pairs[before:]
                    self.faults.append({"fault": fault, "round": i + 1, "seen": len(mine),
                                        "students": self.args.students, "from_fault_s": time.perf_counter() - t0})
                    for p in mine:
                        p["fault"] = fault
                for result in await asyncio.gather(*(self.question(r) for r in self.rooms)):
                    self.questions.append({"round": i + 1, **result})
                await asyncio.sleep(self.args.gap)
        finally:
            sampler.cancel()


def start(args) -> tuple[LC.Server, class_redis.KeptRedis, Path]:
    """``make serve REPLICAS=2``: the kept Redis (in a temporary class folder), nginx and two replicas."""
    folder = Path(tempfile.mkdtemp(prefix="dikkat_soak_"))
    keeper = class_redis.KeptRedis(folder / "class", say=lambda line: print("  " + line, flush=True))
    url = keeper.start()
    port = C.free_port(span=2)
    log = folder / "server.log"
    env = launch.classroom_env(dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
                                    DIKKAT_TEACHER_TOKEN=LC.TOKEN, DIKKAT_AHEAD="0", DIKKAT_REDIS_URL=url,
                                    REPLICAS="2"))
    env.update(dict(kv.split("=", 1) for kv in args.env))
    cmd = [sys.executable, "-c", LC.REPLICAS_DEBUG, "--replicas", "2", "--port", str(port), "--address", "127.0.0.1"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    server = LC.Server(f"http://127.0.0.1:{port}", proc, log, port, 2, None)
    try:
        C.wait_healthy(server.base, proc, log)
    except BaseException:
        C.stop_server(proc)
        keeper.stop()
        raise
    return server, keeper, folder


def summarise(lesson: Soak, wall: float) -> dict:
    outside = [p["page_s"] for p in lesson.pairs if "fault" not in p and p["page_s"] is not None]
    mem = lesson.memory
    half = [m for m in mem if m[0] >= mem[-1][0] / 2] if mem else []
    growth = [(half[-1][1][i] - half[0][1][i]) / 2**20 for i in range(2)] if len(half) > 1 else [None, None]
    return {"students": lesson.args.students, "rooms": len(lesson.rooms), "rounds": lesson.args.rounds,
            "wall_s": wall, "joins": len(lesson.joins), "questions": lesson.questions,
            "answers_lost": sum(q["lost"] for q in lesson.questions),
            "answers_twice": sum(q["twice"] for q in lesson.questions),
            "seats_over": max((q["seats"] - q["students"] for q in lesson.questions), default=None),
            "change_p95_s": C.pct(outside, 95), "change_median_s": C.pct(outside, 50), "faults": lesson.faults,
            "redis_restarts": lesson.keeper.restarts, "missed": lesson.missed,
            "errors": [f"{t.name}: {e}" for t in lesson.tabs for e in t.errors],
            "reconnect": lesson.reconnect,
            "rss_peak_mib": [max(m[1][i] for m in mem) / 2**20 for i in range(2)] if mem else None,
            "rss_growth_second_half_mib": growth, "memory": mem}


async def main_async(args) -> dict:
    server, keeper, folder = start(args)
    try:
        baseline = await LC.warm_up(server, max(args.timeout, 180))
        random.seed(args.seed)
        lesson = Soak(args, server, keeper, LC.room_words(baseline))
        t0 = time.perf_counter()
        try:
            await lesson.run()
        finally:
            await asyncio.gather(*(t.close() for t in lesson.tabs), return_exceptions=True)
        out = summarise(lesson, time.perf_counter() - t0)
        out["server_tracebacks"] = server.log.read_text(errors="replace").count("Traceback")
        return out
    finally:
        C.stop_server(server.proc)
        keeper.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--students", type=int, default=30)
    ap.add_argument("--rooms", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7, help="changes, each followed by a question (default 7)")
    ap.add_argument("--visit", action="store_true", help="each student visits every page with its own sentence")
    ap.add_argument("--gap", type=float, default=2.0)
    ap.add_argument("--stagger", type=float, default=1.0)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    args.changes = args.rounds
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    out = asyncio.run(main_async(args))
    f = C.fmt
    print(f"\n{out['students']} students in {out['rooms']} rooms, {out['rounds']} rounds, {out['wall_s']:.0f} s")
    print(f"answers: lost {out['answers_lost']}, counted twice {out['answers_twice']}; seats over students "
          f"{out['seats_over']}; change->page outside faults median {f(out['change_median_s'])} s, p95 "
          f"{f(out['change_p95_s'])} s")
    for x in out["faults"]:
        print(f"  {x['fault']:<11} round {x['round']}: {x['seen']}/{x['students']} students saw the next change, "
              f"{x['from_fault_s']:.1f} s after the fault")
    print(f"Redis restarts {out['redis_restarts']}; replica killed: {out['reconnect']}")
    print(f"RSS peak per replica {out['rss_peak_mib']} MiB; growth over the second half "
          f"{out['rss_growth_second_half_mib']} MiB; missed {len(out['missed'])}, errors {len(out['errors'])}, "
          f"server tracebacks {out['server_tracebacks']}")
    for line in (out["missed"] + out["errors"])[:10]:
        print("   ", line[:300])
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, **out}, indent=1))


if __name__ == "__main__":
    main()
