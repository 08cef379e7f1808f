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

Each model and language: once as the class's first visit (the model loads, nothing cached: "(1st)"), then
``--runs`` times (≥ 5 for a p95 worth reading); printed: median and p95 seconds and the median kB per action, and
the machine's load average. The goal (issue 27): every action ≤ 1.5 s p95 for one
student, page opens ≤ 2 s, on 2 cores. For 30 students at once see bench/classroom.py (the websocket protocol
without 30 browsers, which would take the two cores themselves).

    .venv/bin/python bench/browser.py [--models minilm-l6,smollm2-135m] [--langs en,tr] [--runs 5] [--classroom]
                                      [--tree OTHER_CHECKOUT]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "deploy"))

import replicas  # noqa: E402
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
    """A Playwright page that counts finished script runs and the websocket bytes the server sends."""

    def __init__(self, browser, url: str):
        self.page = browser.new_page(viewport={"width": 1280, "height": 720})
        self.page.add_init_script(RUN_COUNTER)
        self.bytes = 0
        self.page.on("websocket", lambda ws: ws.on("framereceived", self._count))
        self.url = url

    def _count(self, payload) -> None:
        self.bytes += len(payload)

    def timed(self, action) -> tuple[float, int]:
        """Seconds from ``action()`` to the page settled after the script run it started, and the bytes received."""
        runs = self.page.evaluate("window.__dikkatRuns || 0")
        sent = self.bytes
        start = time.perf_counter()
        action()
        try:
            self.page.wait_for_function(SETTLED, arg=runs, polling="raf", timeout=TIMEOUT_MS)
        except PlaywrightTimeout:  # an action that started no run (or hung): reported, not waited for forever
            waiting = self.page.evaluate("window.__dikkatWaitingFor")
            print(f"  no settled run after {TIMEOUT_MS // 1000} s (waiting for {waiting})", file=sys.stderr)
            return float("nan"), self.bytes - sent
        return time.perf_counter() - start, self.bytes - sent


def _actions(p: Page, lang: str):
    """``(name, action)`` pairs; an action may need the one before it (the order is a lesson's)."""
    page, words = p.page, MENU[lang]

    def open_app():
        page.goto(p.url)

    def type_sentence():
        box = page.locator("textarea").first
        box.fill(SENTENCES[lang])
        box.press("Control+Enter")

    def layer():
        page.get_by_role("slider").first.focus()
        page.keyboard.press("ArrowRight")

    def nav(name):
        return lambda: page.locator("[data-testid=stSidebarNav] a", has_text=words[name]).first.click()

    def head_off():
        page.locator(".st-key-prune_grid button[data-variant=pills]").nth(1).click()

    return [("open app", open_app), ("type sentence", type_sentence),
            ("model view", lambda: page.get_by_role("radio", name=words["model"]).click()), ("layer", layer),
            ("open pruning", nav("pruning")), ("head off", head_off),
            ("layer off", lambda: page.get_by_role("button", name=words["layer_off"]).click()),
            ("open masks", nav("masks")), ("open flow", nav("flow")), ("open experiments", nav("experiments"))]


def measure(url: str, models: list[str], langs: list[str], runs: int) -> dict:
    """``(model, lang, action) -> [(seconds, bytes), ...]`` over ``runs`` fresh pages each."""
    out: dict = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
        for model in models:
            for lang in langs:
                # the class's first visit: the model loads, nothing is cached yet (shown apart from the runs)
                first = Page(browser, f"{url}/?model_key={model}&lang={lang}")
                for name, action in _actions(first, lang):
                    print(f"{model} {lang} first visit: {name}", file=sys.stderr, flush=True)
                    out.setdefault((model, lang, name + " (1st)"), []).append(first.timed(action))
                first.page.close()
                for _ in range(runs):
                    p = Page(browser, f"{url}/?model_key={model}&lang={lang}")
                    for name, action in _actions(p, lang):
                        out.setdefault((model, lang, name), []).append(p.timed(action))
                    p.page.close()
        browser.close()
    return out


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="minilm-l6,smollm2-135m")
    ap.add_argument("--langs", default="en,tr")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--classroom", action="store_true", help="serve in classroom mode (make serve)")
    ap.add_argument("--tree", default=str(ROOT), help="serve the app of another checkout (a before/after table)")
    args = ap.parse_args()
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
        results = measure(url, args.models.split(","), args.langs.split(","), args.runs)
        load_after = os.getloadavg()
    finally:
        server.terminate()
        server.wait(timeout=15)
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} (1 min; 2 cores); "
          f"{args.runs} runs each; seconds from the click to the page settled (incl. 300 ms quiet)")
    print(f"{'model':<14} {'lang':<4} {'action':<17} {'median s':>9} {'p95 s':>7} {'median kB':>10}")
    for (model, lang, name), values in results.items():
        secs = [s for s, _ in values]
        kb = statistics.median(b for _, b in values) / 1024
        print(f"{model:<14} {lang:<4} {name:<17} {statistics.median(secs):>9.2f} {p95(secs):>7.2f} {kb:>10.0f}")


if __name__ == "__main__":
    main()
