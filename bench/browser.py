"""What a student waits for in a real browser (issue 27): every page open and common action timed from the
click to the page settled, in Debian's Chromium driven by Playwright, against ``streamlit run app.py``.

``bench/pruning_page.py`` times the script through AppTest (0.33 s for a click); a student waits for more: the
websocket round trips, every element sent again, frames redrawn, plotly laying figures out. Here each action is
timed until the page has *settled* (tests/browser_settled.js, the wait the browser tests use: the run finished,
no stale element, fonts loaded, every chart drawn at its column's width, every frame loaded, nothing moving for
300 ms; those 300 ms are part of every figure below, as a student's eye needs them too), and the bytes the
server sent over the websocket during it are counted (before compression).

Actions (the order a lesson takes them; each run of the list starts from a fresh browser page):

    open app          the app's first page (Explore) on the model, the default sentence
    type sentence     a new sentence in the sidebar's text box (Ctrl+Enter)
    model view        Explore's view switched to the model view
    layer             Explore's layer slider one step to the right (keyboard)
    open pruning      the Head pruning page from the menu
    head off          one head switched off in the grid
    layer off         "switch layer 0 off"
    open masks        the Masks page from the menu
    open flow         the Information flow page from the menu
    open experiments  the Experiments page from the menu

Each model and language (``--langs``, or ``--lang tr`` for the Turkish UI alone: the app's ``lang`` URL parameter,
which sets the sidebar's language switch): once as the class's first visit (the model loads, nothing cached:
"(1st)"), then ``--runs`` times (≥ 5 for a p95 worth reading); printed: median and p95 seconds and the median kB
per action, and the machine's load average. The goal (issue 27): every action ≤ 1.5 s p95 for one student, page
opens ≤ 2 s, on 2 cores.

``--students N`` (e.g. 30, a class): N browser contexts (separate sessions, one Chromium) against the one server,
doing each action at the same moment, as when the teacher says "now switch head 1 off": every student's action
starts together and the next action starts when all have settled. Median and p95 are then over every student of
every run, the kB column is per student, and "class MB" is what the server sent to all N for that action (median
over the runs). The N browsers' own drawing shares the machine's cores with the server, so on 2 cores this is
an upper bound; bench/classroom.py times 30 students over the websocket protocol without browsers.

``--peers 29`` (a class of 30 on a machine too small for 30 browsers): one Chromium student and 29 protocol students
(bench/peers.py) who do each action at the same moment with the same widget change, so the server does the whole
class's work and the browser shows what one student waits for. The peers' own seconds (to the run finished, no
drawing) and failures get columns of their own.

    .venv/bin/python bench/browser.py [--models minilm-l6,smollm2-135m] [--langs en,tr | --lang tr] [--runs 5]
                                      [--students 30 | --peers 29] [--classroom] [--tree OTHER_CHECKOUT]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeout
from playwright.async_api import async_playwright

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "deploy"))
sys.path.insert(0, str(ROOT / "bench"))

import replicas  # noqa: E402
from peers import Peer  # noqa: E402  (bench/peers.py: the rest of the class over the websocket protocol)
from launch import classroom_env, streamlit_command  # noqa: E402

TIMEOUT_MS = 120_000  # a first visit loads a model: seconds, not minutes
SETTLED = (ROOT / "tests" / "browser_settled.js").read_text(encoding="utf-8")
RUN_COUNTER = (ROOT / "tests" / "browser_runs.js").read_text(encoding="utf-8")
SENTENCES = {"en": "The dog slept under the old table.", "tr": "Köpek eski masanın altında uyudu."}
MENU = {"en": {"pruning": "Head pruning", "masks": "Masks", "flow": "Information flow", "experiments": "Experiments",
               "model": "Model view", "layer_off": "Switch layer 0 off"},
        "tr": {"pruning": "Kafa budama", "masks": "Maskeler", "flow": "Bilgi akışı", "experiments": "Deneyler",
               "model": "Model görünümü", "layer_off": "0. katmanı kapat"}}


class Page:
    """A Playwright page (its own browser context: one student's session) that counts finished script runs and the
    websocket bytes the server sends. Open it with :meth:`open`."""

    def __init__(self, page, url: str, who: str = ""):
        self.page = page
        self.bytes = 0
        self.url = url
        self.who = who
        page.on("websocket", lambda ws: ws.on("framereceived", self._count))

    @classmethod
    async def open(cls, browser, url: str, who: str = "") -> Page:
        """A fresh page of ``browser`` (a new context: cookies and session of its own), 1280 × 720 px, that counts
        its script runs; ``who`` starts its lines on stderr."""
        page = await browser.new_page(viewport={"width": 1280, "height": 720})  # a new context per page
        await page.add_init_script(RUN_COUNTER)
        return cls(page, url, who)

    def _count(self, payload) -> None:
        self.bytes += len(payload)

    async def timed(self, action) -> tuple[float, int]:
        """Seconds from ``action()`` to the page settled after the script run it started, and the bytes received;
        NaN seconds for an action that failed or started no run within ``TIMEOUT_MS`` (reported on stderr)."""
        runs = await self.page.evaluate("window.__dikkatRuns || 0")
        sent = self.bytes
        start = time.perf_counter()
        try:
            await action(self.page)
            await self.page.wait_for_function(SETTLED, arg=runs, polling="raf", timeout=TIMEOUT_MS)
        except PlaywrightTimeout:  # an action that started no run (or hung): reported, not waited for forever
            waiting = await self.page.evaluate("window.__dikkatWaitingFor")
            print(f"  {self.who}no settled run after {TIMEOUT_MS // 1000} s (waiting for {waiting})", file=sys.stderr)
            return float("nan"), self.bytes - sent
        except PlaywrightError as exc:  # one student's failed click must not stop the class
            print(f"  {self.who}action failed: {str(exc).splitlines()[0]}", file=sys.stderr)
            return float("nan"), self.bytes - sent
        return time.perf_counter() - start, self.bytes - sent


def _actions(url: str, lang: str):
    """``(name, action)`` pairs, ``action`` an ``async (page) -> None``; an action may need the one before it (the
    order is a lesson's)."""
    words = MENU[lang]

    async def open_app(page):
        await page.goto(url)

    async def type_sentence(page):
        box = page.locator("textarea").first
        await box.fill(SENTENCES[lang])
        await box.press("Control+Enter")

    async def model_view(page):
        await page.get_by_role("radio", name=words["model"]).click()

    async def layer(page):
        await page.get_by_role("slider").first.focus()
        await page.keyboard.press("ArrowRight")

    def nav(name):
        async def go(page):
            await page.locator("[data-testid=stSidebarNav] a", has_text=words[name]).first.click()
        return go

    async def head_off(page):
        await page.locator(".st-key-prune_grid button[data-variant=pills]").nth(1).click()

    async def layer_off(page):
        await page.get_by_role("button", name=words["layer_off"]).click()

    return [("open app", open_app), ("type sentence", type_sentence), ("model view", model_view), ("layer", layer),
            ("open pruning", nav("pruning")), ("head off", head_off), ("layer off", layer_off),
            ("open masks", nav("masks")), ("open flow", nav("flow")), ("open experiments", nav("experiments"))]


async def _round(browser, url: str, lang: str, students: int, label: str, out: dict, key: tuple,
                 peers: int = 0) -> None:
    """One run of the action list by ``students`` fresh pages at once (and ``peers`` protocol students, see
    bench/peers.py): each action started on every page and peer together, the next when all have settled;
    ``out[key + (name + label,)]`` gets one list of ``(seconds, bytes)`` per round, ``out[key + (name + label,
    "peers")]`` the peers' ``(seconds, bytes, error)``."""
    pages = [await Page.open(browser, url, f"student {i + 1}: " if students > 1 else "") for i in range(students)]
    base, query = url.split("/?", 1)
    class_ = [Peer(base, query, i + 2, SENTENCES[lang], MENU[lang]["model"]) for i in range(peers)]
    for name, action in _actions(url, lang):
        if label:
            print(f"{key[0]} {lang} first visit: {name}", file=sys.stderr, flush=True)
        done = await asyncio.gather(*(p.timed(action) for p in pages), *(c.act(name) for c in class_))
        out.setdefault(key + (name + label,), []).append(list(done[:students]))
        if peers:
            out.setdefault(key + (name + label, "peers"), []).append(list(done[students:]))
            for c, (_, _, error) in zip(class_, done[students:]):
                if error:
                    print(f"  peer {c.number}: {name}: {error}", file=sys.stderr)
    await asyncio.gather(*(p.page.context.close() for p in pages), *(c.close() for c in class_))


async def measure(url: str, models: list[str], langs: list[str], runs: int, students: int = 1, peers: int = 0) -> dict:
    """``(model, lang, action) -> [[(seconds, bytes) per student] per round]``: the class's first visit (action
    names ending " (1st)"), then ``runs`` rounds, each by ``students`` fresh pages at once."""
    out: dict = {}
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
        for model in models:
            for lang in langs:
                page_url = f"{url}/?model_key={model}&lang={lang}"
                # the class's first visit: the model loads, nothing is cached yet (shown apart from the runs)
                await _round(browser, page_url, lang, students, " (1st)", out, (model, lang), peers)
                for r in range(runs):
                    if students > 1:
                        print(f"{model} {lang} run {r + 1} of {runs}", file=sys.stderr, flush=True)
                    await _round(browser, page_url, lang, students, "", out, (model, lang), peers)
        await browser.close()
    return out


def p95(values: list[float]) -> float:
    """The 95th percentile (nearest rank) of ``values``; NaN for none."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))] if ordered else float("nan")


def table(results: dict, students: int) -> list[str]:
    """The printed rows: per model, language and action the median and p95 seconds over every student and run (failed
    actions left out and counted), the median kB per student, and with ``students`` > 1 the MB sent to the class;
    with peers, their median and p95 seconds to the run finished (over the websocket, no drawing) and failures."""
    has_peers = any(len(k) == 4 for k in results)
    lines = [f"{'model':<14} {'lang':<4} {'action':<22} {'median s':>9} {'p95 s':>7} {'median kB':>10}"
             + (f" {'class MB':>9}" if students > 1 else "")
             + (f" {'peers med s':>11} {'peers p95 s':>11}" if has_peers else "")]
    for key, rounds in results.items():
        if len(key) == 4:
            continue
        model, lang, name = key
        values = [v for r in rounds for v in r]
        secs = [s for s, _ in values if not math.isnan(s)]
        kb = statistics.median(b for _, b in values) / 1024
        row = f"{model:<14} {lang:<4} {name:<22} {statistics.median(secs) if secs else float('nan'):>9.2f} " \
              f"{p95(secs):>7.2f} {kb:>10.0f}"
        if students > 1:
            row += f" {statistics.median(sum(b for _, b in r) for r in rounds) / 2 ** 20:>9.1f}"
        failed = len(values) - len(secs)
        note = f"  ({failed} of {len(values)} failed)" if failed else ""
        if has_peers:
            peer = [v for r in results.get(key + ("peers",), []) for v in r]
            psecs = [s for s, _, _ in peer if not math.isnan(s)]
            row += f" {statistics.median(psecs) if psecs else float('nan'):>11.2f} {p95(psecs):>11.2f}"
            if len(peer) > len(psecs):
                note += f"  (peers: {len(peer) - len(psecs)} of {len(peer)} failed)"
        lines.append(row + note)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="minilm-l6,smollm2-135m")
    ap.add_argument("--langs", "--lang", default="en,tr", help="UI languages, comma-separated (en, tr)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--students", type=int, default=1, help="browser contexts doing each action at once")
    ap.add_argument("--peers", type=int, default=0,
                    help="protocol students (bench/peers.py) doing each action with the browser: a class of peers + 1")
    ap.add_argument("--classroom", action="store_true", help="serve in classroom mode (make serve)")
    ap.add_argument("--tree", default=str(ROOT), help="serve the app of another checkout (a before/after table)")
    args = ap.parse_args()
    langs = args.langs.split(",")
    if args.students < 1 or args.runs < 0 or args.peers < 0 or not set(langs) <= set(MENU):
        ap.error(f"--students must be ≥ 1, --runs and --peers ≥ 0, languages among {', '.join(MENU)}")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env = classroom_env(env) if args.classroom else env
    cmd = streamlit_command(port, "127.0.0.1", classroom=args.classroom)
    server = subprocess.Popen(cmd, cwd=args.tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        replicas.wait_healthy(url, server, timeout=90)
        load_before = os.getloadavg()
        results = asyncio.run(measure(url, args.models.split(","), langs, args.runs, args.students,
                                      args.peers))
        load_after = os.getloadavg()
    finally:
        server.terminate()
        server.wait(timeout=15)
    who = f"{args.students} students at once" if args.students > 1 else "one student"
    who += f" and {args.peers} protocol students (bench/peers.py) with them" if args.peers else ""
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} (1 min; {os.cpu_count()} cores); "
          f"{who}, {args.runs} runs each; seconds from the click to the page settled (incl. 300 ms quiet)")
    print("\n".join(table(results, args.students)))


if __name__ == "__main__":
    main()
