"""The shipped lesson as the room meets it, timed (issue 50): a server started as ``make serve`` starts it (one
process, classroom mode, ``deploy/launch.py --classroom``: the computed-ahead job and the warm-up visit of every
lesson step running from its start), a teacher and three students in real browsers (Chromium: a projector at
1280 x 720, a laptop, a phone at 390 x 844, a late joiner), the whole lesson in Turkish
(tests/browser/lesson_walk.py: every step's controls in the first screen, no stale question, exact counts).

With ``--peers N`` the rest of the class joins by the link too: N students over Streamlit's websocket protocol
(bench/live_class.py's tab: every message read, the poll's fragment run on its timer, no drawing), who follow the
teacher as the browsers do, so that the server does a class's work while the browsers time it.

Two passes on the same server: the first lesson right after a fresh start (``--wait`` seconds after the server is
healthy, default 0: the class arriving at once), then the same lesson again with every cache filled. Per step, the
seconds from the teacher's click to every page settled (the teacher's and the three students'), and p50 / p95 per
pass. Goal (issue 50): p95 <= 1.5 s.

Usage::

    .venv/bin/python bench/lesson_room.py [--wait 0] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "tests" / "browser"), str(ROOT)]

import lesson_walk  # noqa: E402  (tests/browser/lesson_walk.py: the walk through the lesson)
import live_class as LC  # noqa: E402  (bench/live_class.py: a server as make serve starts it)


class Peers:
    """``n`` students over the protocol (bench/live_class.py's Tab) in an event loop of their own thread: they join by
    the class's link when :meth:`join` is called and follow until :meth:`close`."""

    def __init__(self, base: str, n: int):
        import asyncio
        import threading

        self.base, self.n, self.tabs = base, n, []
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def join(self, code: str) -> None:
        import asyncio

        async def one(i: int):
            tab = LC.Tab(self.base, i, f"peer {i + 1}", 0, f"room={code}&lang=tr&model_key={LC.MODEL}")
            self.tabs.append(tab)
            await tab.connect()
            await tab.act(timeout=300)

        async def every():
            await asyncio.gather(*(one(i) for i in range(self.n)), return_exceptions=True)

        if self.n:
            asyncio.run_coroutine_threadsafe(every(), self.loop).result(timeout=600)

    def close(self) -> tuple[int, list[str]]:
        """Stop every peer; returns how many joined (drew the class's Detach button) and their errors."""
        import asyncio

        joined = sum(1 for t in self.tabs if "live_detach" in t.drawn_keys())
        errors = [f"{t.name}: {e}" for t in self.tabs for e in t.errors]

        async def stop():
            await asyncio.gather(*(t.close() for t in self.tabs), return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(timeout=60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        return joined, errors


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wait", type=float, default=0.0, help="seconds between the server's start and the class")
    ap.add_argument("--json", type=Path, help="write both passes' steps and summaries to this file")
    ap.add_argument("--peers", type=int, default=0, help="students over the protocol beside the browsers (default 0)")
    ap.add_argument("--reload-every-question", action="store_true",
                    help="the laptop reloads and changes its answer on every question (default: step 1 only)")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    # make serve: deploy/launch.py --classroom with the computed-ahead job (DIKKAT_AHEAD=1) and the warm-up visits
    server = LC.start(1, {"DIKKAT_AHEAD": "1"})
    passes = {}
    try:
        print(f"server healthy after {time.perf_counter() - started:.1f} s", flush=True)
        time.sleep(args.wait)
        for name in ("first lesson after a fresh start", "again, caches filled"):
            reloads = frozenset(range(1, 100)) if args.reload_every_question else frozenset({1})
            peers = Peers(server.base, args.peers)
            try:
                steps = lesson_walk.walk(server.base, LC.TOKEN, reloads=reloads, on_room=peers.join)
            except AssertionError as exc:  # a page that did not show the step: said, and the next pass runs
                print(f"{name}: {exc}", flush=True)
                passes[name] = {"failed": str(exc)[:500], "n": 0, "p50_s": "-", "p95_s": "-", "max_s": "-"}
                continue
            finally:
                joined, errors = peers.close()
            passes[name] = {"steps": steps, **lesson_walk.summary(steps), "peers": joined, "peer_errors": errors[:5]}
            print(f"{name}: " + " ".join(f"{s['step']}:{s['settled_s']}" for s in steps), flush=True)
    finally:
        LC.stop(server)
    print(f"\n| pass | steps | p50 s | p95 s | max s | peers joined (of {args.peers}) |\n|---|---|---|---|---|---|")
    for name, p in passes.items():
        print(f"| {name} | {p['n']} | {p['p50_s']} | {p['p95_s']} | {p['max_s']} | {p.get('peers', '-')} |")
    if args.json:
        args.json.write_text(json.dumps(passes, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
