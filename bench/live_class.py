"""A live class without a browser (issue 29): one teacher per room and N students over Streamlit's websocket protocol,
one app process (memory store) against ``make serve REPLICAS=2`` (two processes behind nginx, the class in Redis).

Every tab, teacher's or student's, is a websocket session that speaks the frontend's protocol (the ``Student`` of
``bench/classroom.py``: query string, page hash, every widget's value, the ForwardMsg cache) and, like a browser tab
left open, also:

- reads every message as it comes, not only the answers to its own reruns;
- reruns a fragment when its timer fires: an ``auto_rerun`` message (``st.fragment(run_every=...)``: the student's
  poll of the room every second, the teacher's counts every two) starts a timer that sends a ``rerun_script``
  with the fragment's id and ``is_auto_rerun`` every interval; a full run's ``new_session`` clears the timers and
  the run sets them again (``stop_auto_rerun`` clears one), as the frontend does;
- carries a cookie of its own (nginx's sticky route ``dikkat_replica``), and when its websocket closes reconnects
  as the frontend does: ``/_stcore/health`` pinged after 0.1, 0.2, 0.4 ... s (at most 4 s), then a new websocket
  and, since it has fragment timers, one full rerun with its current URL, page and widget values.

The lesson (per server configuration; ``--rooms`` rooms at once, default 2, the ``--students`` split over them):

1. each teacher opens the Class page, types the teacher token (``DIKKAT_TEACHER_TOKEN``, set for the run) and opens
   a class; the room code is read from the page; the teacher goes to Explore with a sentence of the room's own;
2. the students connect (Explore, minilm-l6) and join by the code typed under "Join a live class" (typed, then the
   Join button: the sidebar path a student takes without the QR code). Join time: the click to the teacher's page
   being on the student's screen;
3. ``--changes`` changes, in this order and again: a new sentence, the Head pruning page, a head switched off there
   (layer 0, the next head), a new sentence, Explore, the lesson ``attention-intro`` started from the Class page
   (step 1, the Q/K/V page), Next (step 2). Both teachers change at the same moment. Every sentence holds a word
   only that room uses (a whole token of minilm-l6, absent from the app's texts and the lesson);
4. a question: the teacher asks from the Class page (its default, "which key does the query attend to most"), every
   student picks a known choice (student i: choice i mod the number of choices) and sends it, the teacher reveals.

Measured:

    change->page      per (change, student): seconds from the teacher's run that published the change (its
                      ``script_finished``: the page is pushed to the room at the end of the run) to the student's
                      run that shows the teacher's state finishing: the student's page is the teacher's page (its
                      page hash), the sentence box holds the teacher's sentence, for a head switched off the page's
                      link holds it (``off=``), for a lesson step the lesson box shows "step n of 16"; median and p95
                      over all pairs, also for asking and revealing the question. A pair not seen within
                      ``--timeout`` s counts as missed. "click->page" is the same from the teacher's click
    answers           sent (students whose Send run finished), counted (the revealed bars on the teacher's page),
                      lost = sent - counted; whether every choice's bar equals what was sent for it; how many
                      students' pages show the teacher's bars
    cross-talk        an element on any tab (student or teacher) holding a word of another room
    errors            an exception element, an ``st.error`` alert, a ref_hash to an unknown message
    lost runs         full runs of a tab that began (``new_session``) and never finished: a fragment run's
                      ``new_session`` came instead of the rest of the page and its ``script_finished``. Streamlit
                      1.67 does this when a fragment's timer asks for a run after a script run ended in its thread
                      but before the event loop sent that run's messages: ``AppSession.request_rerun`` finds the
                      ScriptRunner stopped, starts a new one, and then ignores the old one's pending events ("Ignoring
                      event from non-current ScriptRunner" in its debug log). A browser gets the same messages: the
                      page stays half drawn until the next full run (a student who was following stays on the old
                      state until the teacher's next change). A teacher's lost run is asked again (the browser's
                      Rerun), and that change's publish->page times are left out (its click->page times stay)
    replica killed    (REPLICAS >= 2) before the middle change, the replica that holds no teacher is killed
                      (SIGKILL); its students' websockets close and reconnect (nginx sends them to the other
                      replica; ``deploy/replicas.py`` starts the dead one again). Per such student: the seconds from
                      the kill to being back in the room with its current state (the teacher's page and sentence, the
                      "Detach" button of a following student); the changes after it count them like everyone
    load              the server's cores (CPU of its process tree, Redis included, over the lesson's wall time),
                      this client's, and the cores other processes kept busy (a warning above 0.2), the load average

The teachers are put on one replica (their cookies are chosen so) and the other one is killed: a teacher's session
that dies loses its room's secret by design (the README: a reload of the teacher's tab means opening a new class).
Goal (issue 29): 1 teacher + 30 students on 2 cores, change->page p95 <= 1.5 s, 0 answers lost, 0 cross-talk; after
a replica dies its students are back in the room with the current state.

    .venv/bin/python bench/live_class.py [--students 30] [--changes 7] [--replicas 1,2] [--rooms 2] [--json out.json]

The servers are started here, on free ports: ``--replicas 1`` is ``make serve`` (``deploy/launch.py --classroom``: one
process, the class in its memory); 2 is ``make serve REPLICAS=2``: a private ``redis-server``
(``deploy/launch.py``'s ``start_redis``, as ``--with-redis`` does) and ``deploy/replicas.py`` (nginx with a debug
header naming each request's replica, so that the bench knows where every tab is). ``DIKKAT_AHEAD=0`` (nothing
computed in the background) and HF_HUB_OFFLINE=1. Each replica is warmed up first (Explore and Head pruning).
Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import resource
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
import traceback
from collections import deque
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import classroom as C  # noqa: E402  (bench/classroom.py: the protocol's Student, the server's CPU, percentiles)
import launch  # noqa: E402  (deploy/launch.py, on sys.path through classroom: the app's command line, Redis)

import websockets  # noqa: E402
from streamlit.proto.Alert_pb2 import Alert  # noqa: E402
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg  # noqa: E402
from streamlit.proto.Slider_pb2 import Slider  # noqa: E402
from streamlit.proto.WidgetStates_pb2 import WidgetState  # noqa: E402

MODEL = "minilm-l6"
STUDENT_QUERY = f"model_key={MODEL}&lang=en"
LESSON = "attention-intro"
CYCLE = ("text", "page:pruning", "head", "text", "page:explore", "start", "next")
FINISHED, EARLY, FRAGMENT = 0, 2, 3  # ForwardMsg.ScriptFinishedStatus
SENT_RE = re.compile(rb"You can change it until the teacher reveals")  # live_sent (en): the answer was taken
CODE_RE = re.compile(rb"[?&]room=([A-Za-z0-9]{4,12})")
BAR_RE = re.compile(rb'"orientation":\s*"h"')


def sentence(word: str, room: int, change: int) -> str:
    return f"The {word} reads book number {100 * (room + 1) + change} in the garden."


def lesson_steps() -> list[dict]:
    """The shipped lesson's steps (page, params) as its TOML file holds them."""
    return tomllib.loads((ROOT / "lessons" / f"{LESSON}.toml").read_text(encoding="utf-8"))["steps"]


def room_words(baseline: bytes) -> list[str]:
    """classroom.py's single-token words that no text of the app, no lesson and no warmed-up page holds."""
    corpus = b"\n".join(p.read_bytes() for p in [*sorted((ROOT / "assets" / "i18n").glob("*.json")),
                                                  *sorted((ROOT / "lessons").glob("*.toml"))]).lower()
    corpus += b"\n" + baseline.lower()
    return [w for w in C.vocabulary_words() if not re.search(rb"\b" + w.encode() + rb"\b", corpus)]


# ------------------------------------------------------------------------------------------------ one tab


@dataclass
class Watch:
    """A state a tab's page must reach: checked when a full run finishes (the page is complete)."""
    page: str | None = None  # page script hash
    text: str | None = None  # the sentence box's value
    off: str | None = None  # "stack.layer.head" that the page's link holds in off=
    marker: re.Pattern | None = None  # drawn in the run (or the early-finished run before it)
    key: str | None = None  # a widget whose user key starts so, drawn in the run
    bars: bool = False  # the answers' bars drawn (kept in ``counts``)
    settled: float | None = None
    counts: list[int] | None = None
    redrawn: bool = False  # the tab's run was lost and the bench asked for the page again
    done: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class RunState:
    started: float
    fragment: bool
    drawn: list = field(default_factory=list)
    keys: set = field(default_factory=set)
    hits: set = field(default_factory=set)
    bars: list = field(default_factory=list)
    text: list = field(default_factory=list)
    early: bool = False
    done: bool = False  # its script_finished came


def widget_state(kind: str, w) -> WidgetState | None:
    """:func:`classroom.widget_state`, and the kinds whose value the frontend sends as a list of formatted options:
    a select slider (classroom.py sends every slider as numbers; Explore has none) and a multiselect."""
    if (kind == "slider" and w.type == Slider.Type.SELECT_SLIDER) or kind == "multiselect":
        s = WidgetState(id=w.id)
        if w.set_value:
            s.string_array_value.data.extend(w.raw_value if kind == "slider" else w.raw_values)
        else:
            s.string_array_value.data.extend(w.options[int(i)] for i in w.default if 0 <= int(i) < len(w.options))
        return s
    return C.widget_state(kind, w)


def answer_bars(raw: bytes) -> list[int] | None:
    """The counts of ``viz.live.answers_figure`` in a plotly_chart element's bytes, None for another chart."""
    msg = ForwardMsg()
    msg.ParseFromString(raw)
    try:
        spec = json.loads(msg.delta.new_element.plotly_chart.spec)
    except ValueError:
        return None
    for trace in spec.get("data", []):
        if trace.get("type") == "bar" and trace.get("orientation") == "h" and "customdata" in str(
                trace.get("hovertemplate", "")):
            x = trace.get("x")
            if isinstance(x, dict) and "bdata" in x:  # plotly's typed array
                import base64

                import numpy as np
                x = np.frombuffer(base64.b64decode(x["bdata"]), dtype=x.get("dtype", "f8")).tolist()
            return [int(v) for v in x]
    return None


class Tab(C.Student):
    """A browser tab left open on the app: reads every message, reruns fragments on their timers, reconnects."""

    def __init__(self, base: str, number: int, name: str, room: int, query: str, page_name: str = "",
                 keep_text: bool = False, cookie: str | None = None, teacher: bool = False):
        ws = re.sub(r"^http", "ws", base) + "/_stcore/stream"
        super().__init__(ws, base, number)
        self.base, self.name, self.room, self.query, self.page_name = base, name, room, query, page_name
        self.keep_text, self.teacher = keep_text, teacher
        self.cookie = cookie or f"dikkat_replica={secrets.token_hex(16)}"
        self.replica: str | None = None
        self.pages: dict[str, str] = {}  # url path ("" = the default page) -> page script hash
        self.run = RunState(0.0, False)
        self.timers: dict[str, tuple[float, asyncio.Task]] = {}
        self.no_polls = False
        self.watches: list[Watch] = []
        self.finished = asyncio.Condition()
        self.protos: dict[str, object] = {}  # widget id -> its last drawn proto
        self.raw: dict[str, bytes] = {}  # cached message hash -> its bytes
        self.foreign: re.Pattern | None = None  # another room's words
        self.crosstalk: list[str] = []
        self.errors: list[str] = []
        self.reconnects: list[dict] = []
        self.full_runs = self.fragment_runs = 0
        self.lost_runs = 0  # full runs whose rest never came: a fragment run began before their script_finished
        self.redraws = 0
        self.bytes_total = 0
        self.reader: asyncio.Task | None = None
        self.last: RunState | None = None  # the last full run
        self.closing = False
        self.down_since: float | None = None
        self.trace: deque = deque(maxlen=2000)  # the last messages and sends, for a state that never came

    # -- connection ---------------------------------------------------------------------------------------
    async def connect(self) -> None:
        self.ws = await websockets.connect(self.url, subprotocols=["streamlit"], origin=self.origin,
                                           additional_headers={"Cookie": self.cookie}, max_size=None,
                                           ping_interval=None, open_timeout=60)
        route = self.ws.response.headers.get("X-Dikkat-Replica")  # "a, b" when nginx tried a dead one first
        self.replica = route.split(",")[-1].strip() if route else self.replica
        self.reader = asyncio.create_task(self._read())

    async def close(self) -> None:
        self.closing = True
        for _, task in self.timers.values():
            task.cancel()
        if self.ws is not None:
            await self.ws.close()
        if self.reader is not None:
            self.reader.cancel()

    async def _read(self) -> None:
        ws = self.ws
        while True:
            try:
                data = await ws.recv()
            except websockets.ConnectionClosed:
                break
            try:
                await self._on_message(data)
            except Exception as e:  # noqa: BLE001  (a bench bug must show, not stop the tab silently)
                self.errors.append(f"client: {type(e).__name__}: {e}")
        if not self.closing:
            asyncio.create_task(self._reconnect())

    def _healthy(self) -> bool:
        req = urllib.request.Request(self.base + "/_stcore/health", headers={"Cookie": self.cookie})
        try:
            with urllib.request.urlopen(req, timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    async def _reconnect(self) -> None:
        """The frontend's way back: ping the health endpoint with a growing wait, then a new websocket, then one
        full rerun (it has fragment timers); the session on the server is a new one."""
        t0 = time.perf_counter()
        self.ws, self.down_since, before = None, t0, self.replica
        attempt = 0
        while not self.closing:
            attempt += 1
            wait = min(4.0, 0.1 * 2 ** (attempt - 1))
            await asyncio.sleep(wait if attempt == 1 else wait * random.uniform(0.7, 1.0))
            if not await asyncio.to_thread(self._healthy):
                continue
            try:
                await self.connect()
            except (TimeoutError, OSError, websockets.WebSocketException):
                continue
            break
        if self.closing:
            return
        self.down_since = None
        self.reconnects.append({"down_s": time.perf_counter() - t0, "from": before, "to": self.replica})
        if self.timers:
            await self.send()

    # -- sending ------------------------------------------------------------------------------------------
    async def send(self, changes: dict[str, WidgetState] | None = None, *, fragment: str = "",
                   page: str | None = None) -> float:
        """One ``rerun_script`` (a widget change, a click, a page change, or a fragment's timer); returns when."""
        changes = changes or {}
        msg = self._client_state(changes)
        cs = msg.rerun_script
        if page is not None:  # a click in the page menu: the frontend drops the link's parameters
            self.query = ""
            cs.query_string, cs.page_script_hash = "", page
            cs.context_info.url = f"{self.origin}/"
        elif not self.page_hash and self.page_name:
            cs.page_name = self.page_name  # the first run of a deep link (/live)
        if fragment:
            cs.fragment_id, cs.is_auto_rerun = fragment, True
        for wid, state in changes.items():
            if not state.HasField("trigger_value"):
                self.widgets[wid] = state
        t = time.perf_counter()
        self.trace.append((round(t, 2), "send", "auto" if fragment else page and page[:8] or ",".join(
            self.protos.get(w) and w.rsplit("-", 1)[-1] or w[-12:] for w in changes) or "rerun"))
        if self.ws is None:
            return t
        try:
            await self.ws.send(msg.SerializeToString())
        except websockets.ConnectionClosed:
            pass
        return t

    def _timer(self, fragment: str, interval: float) -> None:
        if self.no_polls and interval >= 1:  # a test's tab whose poll never fires: only a wake's nudge runs it
            self._stop_timer(fragment)
            return
        if fragment in self.timers and self.timers[fragment][0] == interval:
            return
        self._stop_timer(fragment)

        async def tick() -> None:
            while True:
                await asyncio.sleep(interval)
                if self.ws is not None:
                    await self.send(fragment=fragment)

        self.timers[fragment] = (interval, asyncio.create_task(tick()))

    def _stop_timer(self, fragment: str) -> None:
        old = self.timers.pop(fragment, None)
        if old is not None:
            old[1].cancel()

    # -- receiving ----------------------------------------------------------------------------------------
    async def _on_message(self, data: bytes) -> None:
        now = time.perf_counter()
        self.bytes_total += len(data)
        msg = ForwardMsg()
        msg.ParseFromString(data)
        kind = msg.WhichOneof("type")
        raw = data
        if kind == "ref_hash":
            if msg.ref_hash not in self.cache:
                self.errors.append(f"ref_hash {msg.ref_hash} to a message never received")
                return
            self.cache_run[msg.ref_hash] = self.runs
            raw, msg = self.raw[msg.ref_hash], self.cache[msg.ref_hash]
            kind = msg.WhichOneof("type")
        elif msg.metadata.cacheable and msg.hash:
            self.cache[msg.hash], self.raw[msg.hash], self.cache_run[msg.hash] = msg, data, self.runs
        if kind in ("new_session", "script_finished", "page_info_changed", "navigation") and not (
                kind == "script_finished" and msg.script_finished == FRAGMENT):
            self.trace.append((round(now, 2), kind, msg.script_finished if kind == "script_finished" else
                               bool(msg.metadata.run.fragment_ids) if kind == "new_session" else
                               msg.page_info_changed.query_string[-60:] if kind == "page_info_changed" else
                               msg.navigation.page_script_hash[:8]))
        if kind == "new_session":
            self.max_age = msg.new_session.config.max_cached_message_age or self.max_age
            fragment = bool(msg.metadata.run.fragment_ids)
            if fragment and not self.run.fragment and not self.run.done and self.run.started:
                # Streamlit dropped the rest of a full run (its page, its script_finished): a fragment's timer asked
                # for a run after the script ended but before the server sent its messages, and AppSession
                # started a new ScriptRunner, whose predecessor's events it then ignores
                self.lost_runs += 1
                self.trace.append((round(now, 2), "LOST full run", round(self.run.started, 2)))
                async with self.finished:
                    self.finished.notify_all()
            hits = self.run.hits if self.run.early and not fragment else set()
            if not fragment:
                for fid in list(self.timers):  # the frontend's cleanupAutoReruns on a full run
                    self._stop_timer(fid)
            self.run = RunState(now, fragment, hits=hits)
        elif kind == "auto_rerun":
            self._timer(msg.auto_rerun.fragment_id, msg.auto_rerun.interval)
        elif kind == "stop_auto_rerun":
            for fid in msg.stop_auto_rerun.fragment_ids:
                self._stop_timer(fid)
        elif kind == "page_info_changed":
            self.query = msg.page_info_changed.query_string
        elif kind == "navigation":
            self.page_hash = msg.navigation.page_script_hash
            for p in msg.navigation.app_pages:
                self.pages[p.url_pathname] = p.page_script_hash
        elif kind == "script_finished":
            await self._finished(msg.script_finished, now)
        elif kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
            self._element(msg.delta.new_element, raw)

    def _element(self, el, raw: bytes) -> None:
        run, ekind = self.run, el.WhichOneof("type")
        if ekind is None:
            return
        sub = getattr(el, ekind)
        wid = getattr(sub, "id", "") if ekind not in C.FIGURES else ""
        if wid:
            state = widget_state(ekind, sub)
            if state is not None:
                if sub.set_value or wid not in self.widgets:
                    self.widgets[wid] = state
                run.drawn.append(wid)
            if wid.startswith("$$ID-") and wid.count("-") >= 2:
                key = wid.split("-", 2)[2]
                self.key_ids[key] = wid
                run.keys.add(key)
                self.protos[wid] = sub
        if ekind == "exception":
            self.errors.append(f"exception {el.exception.type}: {el.exception.message[:200]}")
        elif ekind == "alert" and el.alert.format == Alert.ERROR:
            self.errors.append(f"error alert: {el.alert.body[:200]}")
        if self.foreign is not None:
            hit = self.foreign.search(raw)
            if hit:
                self.crosstalk.append(f"{self.name}: a {ekind} holds {hit.group(0).decode()!r}")
        if self.keep_text:
            run.text.append(raw)
        for w in self.watches:
            if w.marker is not None and w.marker.search(raw):
                run.hits.add(id(w))
        if ekind == "plotly_chart" and BAR_RE.search(raw):
            counts = answer_bars(raw)
            if counts is not None:
                run.bars.append(counts)

    async def _finished(self, status: int, now: float) -> None:
        run = self.run
        run.done = True
        if status == EARLY:
            run.early = True
            return
        if status == FRAGMENT or run.fragment:
            self.fragment_runs += 1
            self.active = list(dict.fromkeys(self.active + run.drawn))
            return
        self.full_runs += 1
        self.active = run.drawn
        self.runs += 1  # the frontend's ForwardMsgCache: forget messages unused for more than max_age runs
        for h in [h for h, r in self.cache_run.items() if self.runs - r > self.max_age]:
            del self.cache[h], self.cache_run[h], self.raw[h]
        self.last = run
        for w in list(self.watches):
            if self._meets(w, run):
                w.settled = now
                w.counts = run.bars[-1] if run.bars else None
                self.watches.remove(w)
                w.done.set()
        async with self.finished:
            self.finished.notify_all()

    def value(self, key: str) -> str | None:
        wid = self.key_ids.get(key)
        state = self.widgets.get(wid) if wid else None
        return state.string_value if state is not None else None

    def _meets(self, w: Watch, run: RunState) -> bool:
        if w.page is not None and self.page_hash != w.page:
            return False
        if w.text is not None and self.value("text") != w.text:
            return False
        if w.off is not None and w.off not in parse_qs(self.query).get("off", [""])[0].split(","):
            return False
        if w.marker is not None and id(w) not in run.hits:
            return False
        if w.key is not None and not any(k.startswith(w.key) for k in run.keys):
            return False
        return not w.bars or bool(run.bars)

    # -- acting -------------------------------------------------------------------------------------------
    def watch(self, w: Watch) -> Watch:
        self.watches.append(w)
        return w

    async def act(self, changes: dict[str, WidgetState] | None = None, *, page: str | None = None,
                  expect: Watch | None = None, timeout: float = 60, redraw: bool = False) -> tuple[float, float | None]:
        """Send a change and wait for the full run that shows ``expect`` (else the next full run that started after
        the send, or was lost). When a run is lost and ``redraw``, ask for the page again as the browser's Rerun
        does (a teacher whose page did not come). Returns (sent, finished) times. Raises TimeoutError."""
        redraw = redraw or self.teacher
        if expect is not None:
            self.watch(expect)
        t = await self.send(changes, page=page)
        deadline, lost = t + timeout, self.lost_runs
        while True:
            if expect is not None and expect.done.is_set():
                return t, expect.settled
            if expect is None and self.last is not None and self.last.started > t:
                return t, time.perf_counter()
            if self.lost_runs > lost:
                lost = self.lost_runs
                if expect is None:
                    return t, None
                if redraw:
                    self.redraws += 1
                    expect.redrawn = True
                    await self.send()
            left = deadline - time.perf_counter()
            if left <= 0:
                if expect is not None and expect in self.watches:
                    self.watches.remove(expect)
                raise TimeoutError(f"{self.name}: no page with {expect or 'a full run'} within {timeout:.0f} s "
                                   f"(page {self.page_hash[:8]}, query {self.query[:120]!r}, "
                                   f"errors {self.errors[-3:]}; "
                                   f"after the send: {[e for e in self.trace if t - 0.5 <= e[0] <= t + 4][:30]})")
            async with self.finished:
                try:
                    await asyncio.wait_for(self.finished.wait(), left)
                except TimeoutError:
                    pass

    def click(self, key: str) -> dict[str, WidgetState]:
        wid = self.key_ids.get(key)
        if wid is None:
            raise RuntimeError(f"{self.name}: no widget {key!r} on the page")
        return {wid: WidgetState(id=wid, trigger_value=True)}

    def set_text(self, key: str, text: str) -> dict[str, WidgetState]:
        wid = self.key_ids.get(key)
        if wid is None:
            raise RuntimeError(f"{self.name}: no widget {key!r} on the page")
        return {wid: WidgetState(id=wid, string_value=text)}

    def drawn_keys(self) -> set[str]:
        return self.last.keys if self.last is not None else set()


# ------------------------------------------------------------------------------------------------ a lesson


@dataclass
class Room:
    index: int
    teacher: Tab
    words: list[str]
    students: list[Tab] = field(default_factory=list)
    code: str = ""
    page: str = "explore"
    text: str = ""
    off: list[str] = field(default_factory=list)
    step: int | None = None
    used: int = 0  # words used so far

    def next_word(self) -> str:
        if self.used >= len(self.words):
            raise SystemExit("not enough distinct words for so many text changes")
        self.used += 1
        return self.words[self.used - 1]


class Lesson:
    """One configuration's live class: rooms, joins, changes, a replica killed, a question."""

    def __init__(self, args, base: str, words: list[str], replicas: int, kill=None):
        self.args, self.base, self.replicas, self.kill = args, base, replicas, kill
        self.steps = lesson_steps()
        self.pairs: list[dict] = []
        self.missed: list[str] = []
        self.joins: list[float] = []
        self.teacher_s: list[float] = []
        self.notes: list[str] = []
        self.answers: dict = {}
        self.reconnect: dict | None = None
        self.killed = False
        n = max(1, args.rooms)
        per = len(words) // n
        self.rooms = [Room(r, Tab(base, -1 - r, f"teacher {r + 1}", r, "lang=en", page_name="live",
                                  keep_text=True, teacher=True), words[r * per:(r + 1) * per]) for r in range(n)]
        for i in range(args.students):
            room = self.rooms[i % n]
            room.students.append(Tab(base, i, f"student {i + 1} (room {room.index + 1})", room.index, STUDENT_QUERY))
        for room in self.rooms:
            others = [w for o in self.rooms if o is not room for w in o.words]
            pattern = re.compile(rb"\b(" + b"|".join(w.encode() for w in others) + rb")\b") if others else None
            for tab in [room.teacher, *room.students]:
                tab.foreign = pattern

    @property
    def tabs(self) -> list[Tab]:
        return [t for r in self.rooms for t in [r.teacher, *r.students]]

    def page_hash(self, tab: Tab, name: str) -> str:
        return tab.pages["" if name == "explore" else name]

    # -- the teachers -------------------------------------------------------------------------------------
    async def open_room(self, room: Room) -> None:
        t, timeout = room.teacher, self.args.timeout
        if self.replicas > 1 and room.index > 0:  # every teacher on the first teacher's replica (see the docstring)
            t.cookie = await asyncio.to_thread(same_replica, self.base, self.rooms[0].teacher.replica)
        await t.connect()
        await t.act(timeout=timeout)
        if "live_token" not in t.drawn_keys():
            raise RuntimeError(f"{t.name}: the Class page drew no token field (is DIKKAT_TEACHER_TOKEN set?)")
        await t.act({**t.set_text("live_token", TOKEN), **t.click("live_open")}, expect=Watch(key="live_close"),
                    timeout=timeout)
        found = {m.group(1).decode() for raw in t.last.text for m in CODE_RE.finditer(raw)}
        if len(found) != 1:
            raise RuntimeError(f"{t.name}: room code not found on the Class page ({found})")
        room.code = found.pop()
        room.text = sentence(room.next_word(), room.index, 0)
        await t.act(page=self.page_hash(t, "explore"), expect=Watch(page=self.page_hash(t, "explore")),
                    timeout=timeout)
        await t.act(t.set_text("text", room.text), expect=Watch(page=self.page_hash(t, "explore"), text=room.text),
                    timeout=timeout)

    def state_watch(self, room: Room, tab: Tab, **extra) -> Watch:
        """The room's current state on ``tab``'s page."""
        off = room.off[-1] if room.page == "pruning" and room.off else None
        return Watch(page=self.page_hash(tab, room.page), text=room.text, off=off, **extra)

    async def change(self, room: Room, number: int, kind: str) -> None:
        """The teacher's change ``kind``; every student of the room watches for its state."""
        t, timeout = room.teacher, self.args.timeout
        marker = None
        changes: dict = {}
        page = None
        if kind == "text":
            room.text = sentence(room.next_word(), room.index, number + 1)
            changes = t.set_text("text", room.text)
        elif kind.startswith("page:"):
            room.page = kind.split(":", 1)[1]
            page = self.page_hash(t, room.page)
        elif kind == "head":
            if room.page != "pruning":
                raise RuntimeError("a head is switched off on the Head pruning page")
            key = next(k for k in t.drawn_keys() if k.startswith(f"prune_pills|{MODEL}|") and k.endswith("|0"))
            wid = t.key_ids[key]
            options = [o.content for o in t.protos[wid].options]
            head = len(room.off) % len(options)
            now_on = list(t.widgets[wid].string_array_value.data)
            state = WidgetState(id=wid)
            state.string_array_value.data.extend(v for v in now_on if v != options[head])
            changes = {wid: state}
            room.off.append(f"{key.split('|')[2]}.0.{head}")
        elif kind in ("start", "next"):
            if kind == "next" and room.step is None:
                kind = "start"
            if kind == "start":  # from the Class page (not broadcast): pick the lesson, then Start
                await t.act(page=self.page_hash(t, "live"), expect=Watch(page=self.page_hash(t, "live")),
                            timeout=timeout)
                if t.value("live_lesson_pick") != LESSON:
                    await t.act(t.set_text("live_lesson_pick", LESSON), timeout=timeout)
                room.step = 0
                changes = t.click("live_lesson_start")
            else:
                room.step += 1
                changes = t.click("live_next")
            step = self.steps[room.step]
            room.page, room.text = step["page"], step["params"]["text"]
            marker = re.compile(rf"step {room.step + 1} of {len(self.steps)}\b".encode())
        else:
            raise ValueError(kind)
        watches = [(s, s.watch(self.state_watch(room, s, marker=marker))) for s in room.students]
        expect = self.state_watch(room, t, marker=marker)
        sent, published = await t.act(changes, page=page, expect=expect, timeout=timeout)
        if expect.redrawn:  # the teacher's own run was lost: when it published is not known, only the click
            published = None
        else:
            self.teacher_s.append(published - sent)
        await self.collect(room, number, kind, watches, sent, published)

    async def collect(self, room: Room, number: int, kind: str, watches, sent: float, published: float | None) -> None:
        deadline = time.perf_counter() + self.args.timeout
        for s, w in watches:
            try:
                await asyncio.wait_for(w.done.wait(), max(0.01, deadline - time.perf_counter()))
            except TimeoutError:
                if w in s.watches:
                    s.watches.remove(w)
                what = f"change {number + 1} ({kind})" if number >= 0 else f"the question ({kind})"
                self.missed.append(f"{what}, {s.name}: not seen within {self.args.timeout:.0f} s, "
                                   f"{s.lost_runs} lost runs "
                                   f"(expected page {str(w.page)[:8]} off {w.off}; page {s.page_hash[:8]}, box "
                                   f"{str(s.value('text'))[:40]!r}, query {s.query[-80:]!r}; "
                                   f"last: {list(s.trace)[-8:]})")
                continue
            self.pairs.append({"change": number + 1, "kind": kind, "room": room.index + 1, "student": s.number,
                               "replica": s.replica, "after_kill": self.killed,
                               "page_s": None if published is None else w.settled - published,
                               "click_s": w.settled - sent})

    # -- the students -------------------------------------------------------------------------------------
    async def join(self, room: Room, s: Tab) -> None:
        timeout = self.args.timeout
        await asyncio.sleep(random.uniform(0, self.args.stagger))
        await s.connect()
        await s.act(timeout=timeout)
        await s.act(s.set_text("live_code_input", room.code), timeout=timeout)  # typed (committed on Enter/blur)
        try:
            sent, seen = await s.act(s.click("live_join"), expect=self.state_watch(room, s, key="live_detach"),
                                     timeout=timeout)
        except TimeoutError:
            self.missed.append(f"join, {s.name}: the teacher's page not shown within {timeout:.0f} s "
                               f"({s.lost_runs} lost runs)")
            return
        self.joins.append(seen - sent)

    # -- a replica killed ---------------------------------------------------------------------------------
    async def kill_replica(self) -> None:
        teachers = {r.teacher.replica for r in self.rooms}
        replicas = sorted({t.replica for t in self.tabs if t.replica})
        target = next((r for r in replicas if r not in teachers), None)
        if target is None:
            self.reconnect = {"error": f"every replica holding students holds a teacher ({replicas})"}
            return
        on = [s for r in self.rooms for s in r.students if s.replica == target]
        watches = [(r, s, s.watch(self.state_watch(r, s, key="live_detach"))) for r in self.rooms for s in r.students
                   if s in on]
        t0 = time.perf_counter()
        self.kill(target)
        self.killed = True
        deadline = t0 + max(self.args.timeout, 120)
        back: list[float] = []
        lost: list[str] = []
        for _r, s, w in watches:
            try:
                await asyncio.wait_for(w.done.wait(), max(0.01, deadline - time.perf_counter()))
                back.append(w.settled - t0)
            except TimeoutError:
                if w in s.watches:
                    s.watches.remove(w)
                lost.append(f"{s.name}: reconnected {len(s.reconnects)}x, on {s.replica}, page {s.page_hash[:8]}, "
                            f"box {str(s.value('text'))[:40]!r}, panel keys "
                            f"{sorted(k for k in s.drawn_keys() if k.startswith('live_'))}")
        self.reconnect = {"replica": target, "students_on_it": len(on), "back": len(back), "back_s": back,
                          "not_back": lost, "now_on": sorted({s.replica or "?" for s in on}),
                          "reconnects": [x for s in on for x in s.reconnects]}

    # -- a question ---------------------------------------------------------------------------------------
    async def question(self, room: Room) -> dict:
        t, timeout = room.teacher, self.args.timeout
        await t.act(page=self.page_hash(t, "live"), expect=Watch(page=self.page_hash(t, "live")), timeout=timeout)
        watches = [(s, s.watch(Watch(key="live_pick_"))) for s in room.students]
        sent, published = await t.act(t.click("live_q_ask"), expect=Watch(key="live_reveal_main"), timeout=timeout)
        await self.collect(room, -1, "ask", watches, sent, published)
        counts_sent: dict[int, int] = {}
        confirmed = 0

        async def answer(s: Tab) -> None:
            nonlocal confirmed
            key = next((k for k in s.drawn_keys() if k.startswith("live_pick_")), None)
            if key is None:
                return
            await asyncio.sleep(random.uniform(0, self.args.stagger))
            options = list(s.protos[s.key_ids[key]].options)
            choice = s.number % len(options)
            try:  # the choice is on the student's screen whether its run comes or not
                await s.act(s.set_text(key, options[choice]), timeout=timeout)
            except TimeoutError as e:
                s.errors.append(f"the picked answer's run did not come: {e}")
            w = Watch(marker=SENT_RE)
            try:
                await s.act(s.click("live_send"), expect=w, timeout=timeout)
                confirmed += 1
            except TimeoutError as e:
                s.errors.append(f"answer not confirmed: {e}")
            counts_sent[choice] = counts_sent.get(choice, 0) + 1  # sent: the click went out and its run finished

        await asyncio.gather(*(answer(s) for s in room.students))
        watches = [(s, s.watch(Watch(bars=True))) for s in room.students]
        shown = Watch(bars=True)
        sent, published = await t.act(t.click("live_reveal_main"), expect=shown, timeout=timeout)
        revealed = shown.counts or []
        await self.collect(room, -1, "reveal", watches, sent, published)
        seen_equal = sum(1 for _, w in watches if w.counts == revealed)
        expected = [counts_sent.get(i, 0) for i in range(len(revealed))]
        return {"sent": sum(counts_sent.values()), "confirmed": confirmed, "counted": sum(revealed),
                "per_choice_equal": expected == revealed, "sent_per_choice": expected, "revealed": revealed,
                "students_seeing_counts": seen_equal}

    # -- the whole lesson ---------------------------------------------------------------------------------
    async def run(self) -> None:
        for room in self.rooms:  # one after the other: the second teacher's cookie follows the first's replica
            await self.open_room(room)
        await asyncio.gather(*(self.join(r, s) for r in self.rooms for s in r.students))
        await asyncio.sleep(self.args.gap)
        kill_at = self.args.changes // 2 if self.kill is not None else None
        for i in range(self.args.changes):
            if i == kill_at:
                await self.kill_replica()
                await asyncio.sleep(self.args.gap)
            kind = CYCLE[i % len(CYCLE)]
            await asyncio.gather(*(self.change(r, i, kind) for r in self.rooms))
            await asyncio.sleep(self.args.gap)
        if kill_at is not None and kill_at >= self.args.changes:
            await self.kill_replica()
        results = await asyncio.gather(*(self.question(r) for r in self.rooms))
        self.answers = {k: sum(r[k] for r in results) for k in ("sent", "confirmed", "counted",
                                                                 "students_seeing_counts")}
        self.answers["per_choice_equal"] = all(r["per_choice_equal"] for r in results)
        self.answers["rooms"] = results
        for p in self.pairs:
            if p["change"] == -1:
                p["change"] = None


def same_replica(base: str, replica: str | None) -> str:
    """A cookie nginx routes to ``replica`` (its debug header names the replica of each request)."""
    for _ in range(200):
        cookie = f"dikkat_replica={secrets.token_hex(16)}"
        req = urllib.request.Request(base + "/_stcore/health", headers={"Cookie": cookie})
        with urllib.request.urlopen(req, timeout=10) as r:
            if r.headers.get("X-Dikkat-Replica") == replica:
                return cookie
    raise RuntimeError(f"no cookie routed to {replica}")


# ------------------------------------------------------------------------------------------------ servers

TOKEN = "bench-" + secrets.token_hex(12)
# deploy/replicas.py as `make serve REPLICAS=N` runs it, with nginx's debug header (the replica of each request)
REPLICAS_DEBUG = ("import sys; sys.path.insert(0, 'deploy'); import replicas; s = replicas.start; "
                  "replicas.start = lambda *a, **k: s(*a, **{**k, 'debug': True}); replicas.main(sys.argv[1:])")


@dataclass
class Server:
    base: str
    proc: subprocess.Popen
    log: Path
    port: int
    replicas: int
    redis: subprocess.Popen | None = None

    def pids(self) -> list[int]:
        return [self.proc.pid] + ([self.redis.pid] if self.redis is not None else [])

    def replica_pid(self, port: int) -> int | None:
        for pid in C.tree(self.proc.pid):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"streamlit" in b" ".join(argv) and b"--server.port" in argv and \
                    argv[argv.index(b"--server.port") + 1] == str(port).encode():
                return pid
        return None

    def kill(self, replica: str) -> None:
        pid = self.replica_pid(int(replica.rsplit(":", 1)[1]))
        if pid is None:
            raise RuntimeError(f"no process for replica {replica}")
        os.kill(pid, signal.SIGKILL)


def start(replicas: int, extra_env: dict[str, str] | None = None) -> Server:
    """``make serve`` (one process) or ``make serve REPLICAS=N`` (a private Redis, the replicas behind nginx)."""
    port = C.free_port(span=replicas if replicas > 1 else 0)
    log = Path(tempfile.mkstemp(prefix="dikkat_live_class_", suffix=".log")[1])
    env = launch.classroom_env(dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
                                    DIKKAT_TEACHER_TOKEN=TOKEN, DIKKAT_AHEAD="0"))
    env.pop("DIKKAT_REDIS_URL", None)
    env.update(extra_env or {})
    redis = None
    if replicas > 1:
        redis, env["DIKKAT_REDIS_URL"] = launch.start_redis()
        env["REPLICAS"] = str(replicas)
        cmd = [sys.executable, "-c", REPLICAS_DEBUG, "--replicas", str(replicas), "--port", str(port),
               "--address", "127.0.0.1"]
    else:
        env.pop("REPLICAS", None)
        cmd = [sys.executable, str(ROOT / "deploy" / "launch.py"), "--port", str(port), "--address", "127.0.0.1",
               "--classroom"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    server = Server(f"http://127.0.0.1:{port}", proc, log, port, replicas, redis)
    try:
        C.wait_healthy(server.base, proc, log)
    except BaseException:
        stop(server)
        raise
    return server


def stop(server: Server) -> None:
    C.stop_server(server.proc)
    if server.redis is not None:
        launch.stop_redis(server.redis)


async def server_warmed(server: Server, timeout: float, extra_env: dict[str, str]) -> None:
    """Wait for the server's own warm-up (``deploy/warm.py``, which ``make serve`` starts for each replica: every
    lesson step opened once, Gemma 3 and Whisper loaded) to end, so that the lesson measured does not share the
    cores with it (before: the first changes ran beside a 10 s model load): its log has one ``warm:`` line per
    visit and replica."""
    import warm  # deploy/warm.py (deploy/ is on sys.path through classroom)

    visits = warm.visits_from_env({**os.environ, **extra_env})
    want = len(visits or []) * max(server.replicas, 1)
    deadline = time.monotonic() + timeout
    while want and time.monotonic() < deadline:
        # counted anywhere in a line: a replica's model-load progress bar (no line end) may come just before it
        done = server.log.read_text(errors="replace").count("warm: ")
        if done >= want:
            return
        await asyncio.sleep(1.0)
    if want:
        print(f"the server's warm-up did not end within {timeout:.0f} s", flush=True)


async def warm_up(server: Server, timeout: float) -> bytes:
    """Each app process draws Explore and Head pruning once (the model loads); returns the bytes drawn."""
    bases = [f"http://127.0.0.1:{server.port + i}" for i in range(1, server.replicas + 1)] \
        if server.replicas > 1 else [server.base]
    seen = b""
    for base in bases:
        tab = Tab(base, -100, "warm-up", -1, STUDENT_QUERY, keep_text=True)
        await tab.connect()
        try:
            await tab.act(timeout=timeout)
            seen += b"".join(tab.last.text)
            for name in ("pruning", "live"):
                await tab.act(page=tab.pages[name], expect=Watch(page=tab.pages[name]), timeout=timeout)
                seen += b"".join(tab.last.text)
            if tab.errors:
                raise RuntimeError(f"warm-up on {base}: {tab.errors[:3]}")
        finally:
            await tab.close()
    return seen


# ------------------------------------------------------------------------------------------------ a run


async def run_config(args, replicas: int) -> dict:
    server = start(replicas, dict(kv.split("=", 1) for kv in args.env))
    try:
        t0 = time.perf_counter()
        await server_warmed(server, 600, dict(kv.split("=", 1) for kv in args.env))
        baseline = await warm_up(server, max(args.timeout, 180))
        words = room_words(baseline)
        print(f"server {server.base} "
              f"({'one process, memory store' if replicas <= 1 else f'{replicas} replicas behind nginx, Redis'}), "
              f"warm-up {time.perf_counter() - t0:.0f} s, {len(words)} room words, log {server.log}", flush=True)
        random.seed(args.seed + replicas)
        lesson = Lesson(args, server.base, words, replicas, kill=server.kill if replicas > 1 else None)
        pids = server.pids()
        cpu0 = sum(C.cpu_seconds(p) for p in pids)
        busy0, me0, load0 = C.machine_busy_seconds(), resource.getrusage(resource.RUSAGE_SELF), os.getloadavg()
        t0 = time.perf_counter()
        error = None
        try:
            await lesson.run()
        except Exception as e:  # noqa: BLE001  (reported with what was measured until then)
            error = f"{type(e).__name__}: {e}"
            traceback.print_exc()
            print(f"  the lesson stopped: {error}", flush=True)
        wall = time.perf_counter() - t0
        me1 = resource.getrusage(resource.RUSAGE_SELF)
        client = (me1.ru_utime + me1.ru_stime) - (me0.ru_utime + me0.ru_stime)
        server_cpu = sum(C.cpu_seconds(p) for p in pids) - cpu0  # a killed replica's CPU is lost with it
        busy = C.machine_busy_seconds() - busy0
        restarted = None
        if lesson.reconnect and "replica" in lesson.reconnect:
            restarted = "starting it again" in server.log.read_text(errors="replace")
            lesson.reconnect["restarted"] = restarted
        tabs = lesson.tabs
        out = {"replicas": replicas, "rooms": len(lesson.rooms), "students": args.students,
               "room_sizes": [len(r.students) for r in lesson.rooms], "changes": args.changes,
               "kinds": [CYCLE[i % len(CYCLE)] for i in range(args.changes)], "pairs": lesson.pairs,
               "expected_pairs": args.students * args.changes, "missed": lesson.missed, "join_s": lesson.joins,
               "teacher_s": lesson.teacher_s, "answers": lesson.answers,
               "crosstalk": [c for t in tabs for c in t.crosstalk],
               "errors": [f"{t.name}: {e}" for t in tabs for e in t.errors] + ([error] if error else []),
               "reconnect": lesson.reconnect, "wall_s": wall, "server_cores": server_cpu / wall,
               "client_cores": client / wall, "other_cores": max(0.0, busy - server_cpu - client) / wall,
               "loadavg_before": load0, "loadavg_after": os.getloadavg(),
               "lost_runs": sum(t.lost_runs for t in tabs), "teacher_redraws": sum(t.redraws for t in tabs),
               "student_full_runs": sum(t.full_runs for r in lesson.rooms for t in r.students),
               "student_fragment_runs": sum(t.fragment_runs for r in lesson.rooms for t in r.students),
               "student_mib_in": sum(t.bytes_total for r in lesson.rooms for t in r.students) / 2**20}
        tracebacks = server.log.read_text(errors="replace").count("Traceback")
        if tracebacks:
            out["errors"].append(f"server log {server.log}: {tracebacks} tracebacks")
        await asyncio.gather(*(t.close() for t in tabs), return_exceptions=True)
        return out
    finally:
        stop(server)


def summary(r: dict) -> dict:
    changes = [p for p in r["pairs"] if p["kind"] not in ("ask", "reveal")]
    page = [p["page_s"] for p in changes if p["page_s"] is not None]
    click = [p["click_s"] for p in changes]
    asked = [p["page_s"] for p in r["pairs"] if p["kind"] in ("ask", "reveal") and p["page_s"] is not None]
    a = r["answers"] or {}
    return {"seen": len(changes), "page_median_s": C.pct(page, 50), "page_p95_s": C.pct(page, 95),
            "page_max_s": max(page) if page else None, "click_median_s": C.pct(click, 50),
            "click_p95_s": C.pct(click, 95), "question_median_s": C.pct(asked, 50), "question_p95_s": C.pct(asked, 95),
            "join_median_s": C.pct(r["join_s"], 50), "teacher_median_s": C.pct(r["teacher_s"], 50),
            "answers_sent": a.get("sent"), "answers_counted": a.get("counted"),
            "answers_lost": None if a.get("sent") is None else a["sent"] - a["counted"],
            "n_crosstalk": len(r["crosstalk"]), "n_errors": len(r["errors"]), "n_missed": len(r["missed"])}


def report(results: list[dict]) -> None:
    f = C.fmt
    print()
    print(f"{'repl':>4} {'rooms':>5} {'stud':>4} {'chg':>3} {'seen':>9} {'med s':>6} {'p95 s':>6} {'max s':>6} "
          f"{'clk p95':>7} {'Q p95':>6} {'join s':>6} {'sent':>4} {'cnt':>4} {'lost':>4} {'x-talk':>6} {'err':>4} "
          f"{'lost runs':>9} "
          f"{'killed: on/back':>15} {'back med/max s':>14} {'srv cores':>9} {'other':>5} {'load 1m':>7}")
    for r in results:
        s, k = summary(r), r.get("reconnect") or {}
        back = k.get("back_s") or []
        print(f"{r['replicas']:>4} {r['rooms']:>5} {r['students']:>4} {r['changes']:>3} "
              f"{s['seen']:>4}/{r['expected_pairs']:<4} {f(s['page_median_s']):>6} {f(s['page_p95_s']):>6} "
              f"{f(s['page_max_s']):>6} {f(s['click_p95_s']):>7} {f(s['question_p95_s']):>6} "
              f"{f(s['join_median_s']):>6} "
              f"{s['answers_sent'] if s['answers_sent'] is not None else '-':>4} "
              f"{s['answers_counted'] if s['answers_counted'] is not None else '-':>4} "
              f"{s['answers_lost'] if s['answers_lost'] is not None else '-':>4} {s['n_crosstalk']:>6} "
              f"{s['n_errors']:>4} {r['lost_runs']:>9} "
              f"{(str(k.get('students_on_it')) + '/' + str(k.get('back'))) if 'back' in k else '-':>15} "
              f"{(f(C.pct(back, 50)) + '/' + f(max(back))) if back else '-':>14} {r['server_cores']:>9.2f} "
              f"{r['other_cores']:>5.2f} {r['loadavg_after'][0]:>7.2f}")
    print("\n  repl: app processes (1 = one process, the class in memory; 2 = two behind nginx, the class in Redis);"
          " seen: (change, student) pairs whose page showed the teacher's state, of changes x students;"
          "\n  med/p95/max s: the teacher's publishing run finished -> the student's page finished in that state;"
          " clk p95: from the teacher's click; Q p95: a question asked and revealed -> on the students' pages;"
          "\n  join s: the Join click -> the teacher's page on the student's screen (median); sent/cnt/lost: answers"
          " sent, counted in the revealed bars, sent - counted; lost runs: full runs Streamlit never finished sending;"
          "\n  killed: on/back: students on the replica killed mid-lesson / back in the room with its current state;"
          " back s: kill -> back; srv cores / other: cores kept busy by the server / by other processes;"
          " load 1m: the load average at the end")
    for r in results:
        s, a, k = summary(r), r.get("answers") or {}, r.get("reconnect")
        print(f"\n  REPLICAS={r['replicas']}: rooms of {r['room_sizes']} students, changes {r['kinds']}, "
              f"{r['wall_s']:.0f} s; the teachers' own run {C.fmt(s['teacher_median_s'])} s (median); students ran "
              f"{r['student_full_runs']} full and {r['student_fragment_runs']} fragment runs, "
              f"{r['student_mib_in']:.0f} MiB in; {r['lost_runs']} full runs lost (the rest of their page and their "
              f"script_finished never sent, see the docstring), {r['teacher_redraws']} teacher redraws; "
              f"load average {r['loadavg_before'][0]:.2f} -> "
              f"{r['loadavg_after'][0]:.2f}; this client {r['client_cores']:.2f} cores")
        by_kind: dict[str, list[float]] = {}
        for p in r["pairs"]:
            if p["page_s"] is not None:
                by_kind.setdefault(p["kind"], []).append(p["page_s"])
        print("    by kind (median / p95 s): " + ", ".join(
            f"{kind} {C.fmt(C.pct(v, 50))}/{C.fmt(C.pct(v, 95))}" for kind, v in by_kind.items()))
        after = [p["page_s"] for p in r["pairs"] if p["page_s"] is not None and p["after_kill"] and p["change"]]
        if k:
            if "error" in k:
                print(f"    replica kill: {k['error']}")
            else:
                print(f"    replica {k['replica']} killed: {k['students_on_it']} students on it, {k['back']} back in"
                      f" the room with its current state (median {C.fmt(C.pct(k['back_s'], 50))} s, max "
                      f"{C.fmt(max(k['back_s']) if k['back_s'] else None)} s), now on {k['now_on']}; "
                      "deploy/replicas.py "
                      f"started it again: {k.get('restarted')}; changes after the kill: {len(after)} pairs, p95 "
                      f"{C.fmt(C.pct(after, 95))} s")
                for line in k["not_back"][:5]:
                    print(f"      not back: {line}")
        if a:
            print(f"    answers: {a.get('sent')} sent ({a.get('confirmed')} confirmed on the student's page), "
                  f"{a.get('counted')} counted, every choice's bar equal to what was sent: {a.get('per_choice_equal')};"
                  f" {a.get('students_seeing_counts')} students' pages show the teacher's bars")
        if r["other_cores"] > 0.2:
            print(f"    WARNING: other processes kept {r['other_cores']:.1f} cores busy during the lesson; its times"
                  " are not the server's alone")
        for what in ("missed", "crosstalk", "errors"):
            for line in r[what][:5]:
                print(f"    {what}: {line}")
            if len(r[what]) > 5:
                print(f"    ... {len(r[what]) - 5} more {what}")
    goal = [r for r in results if r["students"] >= 30]
    for r in goal:
        s = summary(r)
        k = r.get("reconnect") or {}
        ok = (s["page_p95_s"] is not None and s["page_p95_s"] <= 1.5 and s["answers_lost"] == 0
              and not r["crosstalk"] and not r["missed"]
              and (r["replicas"] <= 1 or (k.get("back") == k.get("students_on_it") and k.get("students_on_it"))))
        killed = ", the killed replica's students back" if r["replicas"] > 1 else ""
        print(f"\nGoal REPLICAS={r['replicas']} (p95 <= 1.5 s, 0 answers lost, 0 cross-talk, every student seen"
              f"{killed}): {'met' if ok else 'NOT met'}")


async def main_async(args) -> list[dict]:
    results = []
    for replicas in args.replicas:
        r = await run_config(args, replicas)
        s = summary(r)
        print(f"REPLICAS={replicas}: {s['seen']}/{r['expected_pairs']} seen, change->page median "
              f"{C.fmt(s['page_median_s'])} s, p95 {C.fmt(s['page_p95_s'])} s, answers lost {s['answers_lost']}, "
              f"{s['n_crosstalk']} cross-talk, {s['n_errors']} errors", flush=True)
        results.append(r)
    return results


def parse_args(argv: list[str] | None = None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--students", type=int, default=30, help="students in all, split over the rooms (default 30)")
    ap.add_argument("--rooms", type=int, default=2, help="classes at once, each with its teacher (default 2)")
    ap.add_argument("--changes", type=int, default=len(CYCLE),
                    help=f"teacher's changes, in the order {', '.join(CYCLE)} and again (default {len(CYCLE)})")
    ap.add_argument("--replicas", default="1,2", type=lambda s: [int(x) for x in s.split(",") if x.strip()],
                    help="configurations: 1 = one process (memory store), N >= 2 = N replicas, nginx, Redis "
                         "(default 1,2)")
    ap.add_argument("--gap", type=float, default=2.0, help="seconds between two changes (default 2)")
    ap.add_argument("--stagger", type=float, default=1.0,
                    help="students join / answer after uniform 0..S s (default 1)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds a state may take to reach a page (default 60)")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                    help="an environment variable for the servers (repeatable), e.g. STREAMLIT_LOGGER_LEVEL=debug")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="write every figure and every (change, student) time to this file")
    return ap.parse_args(argv)


def main() -> None:
    args = parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the finally clauses stop the servers
    results = asyncio.run(main_async(args))
    report(results)
    if args.json:
        args.json.write_text(json.dumps({"args": {k: (str(v) if isinstance(v, Path) else v)
                                                  for k, v in vars(args).items()},
                                         "results": [dict(r, **summary(r)) for r in results]}, indent=1))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
