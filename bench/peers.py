"""The rest of a class for ``bench/browser.py --peers N``: N students who speak Streamlit's websocket protocol (the
clients of ``bench/classroom.py``) and do each of the browser's actions at the same moment as the one timed browser.

Why: a real class's 30 browsers run on 30 students' machines; only the server is shared. On this machine 30
Chromiums would take the two cores from the server they are meant to load (issue 27's 30-browser run: load 12-20,
most Ctrl+Enter never answered), so the figures would time the browsers, not the server. With one Chromium and
N-1 protocol peers the server does the whole class's work (every peer's rerun carries the same widget change a
browser's click sends, with the same query string, page and widget states, and keeps Streamlit's message cache as
the frontend does), while the one browser shows what a student sees.

What a peer does not do: draw (its CPU is its own machine's in a class), fetch the page's static files after the
first (a browser caches them; each peer fetches the index page and its scripts once on "open app"), or load an
iframe's components (the head view is an inline ``srcdoc``: nothing to fetch).

Each peer action must finish without an error and, where the page says so in its state, take effect: after "head
off" and "layer off" the query string the server set holds ``off=``; after "type sentence" the text area holds the
new sentence. A peer action that fails is printed and counted.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import classroom  # noqa: E402  (bench/classroom.py: the protocol client)
from classroom import Student, WidgetState  # noqa: E402

TIMEOUT_S = 120.0
PAGES = {"open pruning": "pruning", "open masks": "masks", "open flow": "flow", "open experiments": "experiments"}


def _static(url: str) -> int:
    """GET the index page and the scripts and styles it names (what a browser fetches before its websocket opens);
    the bytes received."""
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as r:
        html = r.read()
    total = len(html)
    base = url.split("/?")[0].rstrip("/")
    for path in re.findall(rb'(?:src|href)="(\./static/[^"]+|/static/[^"]+|static/[^"]+)"', html):
        asset = path.decode().lstrip(".").lstrip("/")
        with urllib.request.urlopen(f"{base}/{asset}", timeout=TIMEOUT_S) as r:
            total += len(r.read())
    return total


class Peer:
    """One protocol student of the class, doing the browser's actions by name (:data:`bench.browser` ``_actions``)."""

    def __init__(self, url: str, query: str, number: int, sentence: str, model_view: str):
        """``model_view``: the view control's label of the model view in the page's language (the wire value of a
        segmented control is its option's label)."""
        self.url, self.number, self.sentence, self.model_view = url, number, sentence, model_view
        ws = url.replace("http://", "ws://").rstrip("/") + "/_stcore/stream"
        self.student = Student(ws, url.rstrip("/"), number)
        self.student.query = query

    def _key(self, key: str) -> str:
        wid = self.student.key_ids.get(key)
        if wid is None:
            raise RuntimeError(f"the page drew no widget with key {key!r}")
        return wid

    def _changes(self, name: str) -> dict[str, WidgetState]:
        s = self.student
        if name == "type sentence":
            return s.type_text(self.sentence)
        if name == "model view":
            wid = self._key("view")
            return {wid: WidgetState(id=wid, string_array_value={"data": [self.model_view]})}
        if name == "layer":
            wid = self._key("layer")
            value = list(s.widgets[wid].double_array_value.data) if wid in s.widgets else [0.0]
            return {wid: WidgetState(id=wid, double_array_value={"data": [value[0] + 1]})}
        if name == "head off":  # the browser clicks pill 1 of layer 0: head 1 leaves the selection (the heads on)
            key = next(k for k in s.key_ids if k.startswith("prune_pills|") and k.endswith("|0"))
            wid = s.key_ids[key]
            on = [v for v in s.widgets[wid].string_array_value.data if v != "1"]
            return {wid: WidgetState(id=wid, string_array_value={"data": on})}
        if name == "layer off":
            wid = self._key("prune_btn_layer_off")
            return {wid: WidgetState(id=wid, trigger_value=True)}
        raise KeyError(name)

    async def act(self, name: str) -> tuple[float, int, str | None]:
        """Do the action ``name``; ``(seconds to script_finished, bytes received, error or None)``."""
        s = self.student
        t0 = time.perf_counter()
        try:
            if name == "open app":
                fetched = await asyncio.to_thread(_static, f"{self.url}/?{s.query}")
                await s.connect()
                run = await s.rerun(TIMEOUT_S)
                run.bytes_in += fetched
            elif name in PAGES:
                s.page_hash = s.pages[PAGES[name]]
                run = await s.rerun(TIMEOUT_S)
            else:
                run = await s.rerun(TIMEOUT_S, self._changes(name))
        except Exception as e:  # noqa: BLE001  (one peer's failure is counted, not fatal to the class)
            return float("nan"), 0, f"{type(e).__name__}: {e}"
        seconds = time.perf_counter() - t0
        error = "; ".join(run.errors) or None
        if error is None and name in ("head off", "layer off") and "off=" not in s.query:
            error = f"{name} took no effect (query string {s.query!r})"
        if error is None and name == "type sentence":
            wid = s.key_ids.get(classroom.TEXT_KEY)
            if wid is None or s.widgets[wid].string_value != self.sentence:
                error = "the text area does not hold the new sentence"
        return (float("nan") if error else seconds), run.bytes_in, error

    async def close(self) -> None:
        await self.student.close()
