"""The class's first visit, made by the server itself (issue 27): no student waits for a model to load.

A browser's first visit to a fresh server loads the model, builds its capture and analyses the default sentence
(seconds on two cores); every later visit reads them from the process's caches. ``make serve`` (deploy/launch.py
``--classroom``) and ``make serve REPLICAS=N`` (deploy/replicas.py, once per replica) start this in the background:
it waits until the app answers, then opens each page of :data:`VISITS` once over Streamlit's own websocket protocol
(``ws://HOST:PORT/_stcore/stream``, subprotocol ``streamlit``: a ``BackMsg`` ``rerun_script`` with the page's query
string up, ``ForwardMsg`` down until ``script_finished``), as a browser tab would, and closes it. The visits load the
default model and the decoder the shipped lesson uses, and analyse their default sentences.

``DIKKAT_WARM=0`` turns it off; ``DIKKAT_WARM="model_key=minilm-l6;why?model_key=gemma3-270m"`` names other visits
(``[page?]query`` strings, ``;``-separated: a page's url path, then its query string; an empty one is the app's first
page as a student opens it).

    python deploy/warm.py --url http://127.0.0.1:8501 [--visit "model_key=smollm2-135m"] [--timeout 600]

prints one line per visit (``warm: <query> <seconds> s``) on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import time
import urllib.request

VISITS = ("", "model_key=smollm2-135m")  # the app's first page on the default model; the lesson's decoder
FINISHED_EARLY_FOR_RERUN = 2  # streamlit.proto ForwardMsg.ScriptFinishedStatus


def wait_healthy(base: str, timeout: float) -> bool:
    """Whether ``base``/_stcore/health answered ``ok`` within ``timeout`` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"{base}/_stcore/health", timeout=5) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.5)
    return False


async def visit(base: str, query: str, timeout: float) -> float:
    """Open the app at ``base`` with ``query`` as one browser tab's first run; returns the seconds until the run
    finished.

    Raises:
        RuntimeError: the run drew an exception, or did not finish within ``timeout`` seconds.
    """
    import websockets
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    url = re.sub(r"^http", "ws", base) + "/_stcore/stream"
    page, query = split_visit(query)
    msg = BackMsg()
    msg.rerun_script.query_string = query
    msg.rerun_script.page_name = page  # st.navigation picks the page by its url path
    info = msg.rerun_script.context_info
    info.timezone, info.timezone_offset, info.locale = "UTC", 0, "en-US"
    info.url = f"{base}/{page}" + (f"?{query}" if query else "")
    start = time.perf_counter()
    async with websockets.connect(url, subprotocols=["streamlit"], origin=base, max_size=None, ping_interval=None,
                                  open_timeout=60) as ws:
        await ws.send(msg.SerializeToString())
        while True:
            left = timeout - (time.perf_counter() - start)
            if left <= 0:
                raise RuntimeError(f"no end of the run within {timeout:.0f} s")
            try:
                data = await asyncio.wait_for(ws.recv(), left)
            except TimeoutError:
                raise RuntimeError(f"no end of the run within {timeout:.0f} s") from None
            fwd = ForwardMsg()
            fwd.ParseFromString(data)
            kind = fwd.WhichOneof("type")
            if kind == "delta" and fwd.delta.WhichOneof("type") == "new_element" \
                    and fwd.delta.new_element.WhichOneof("type") == "exception":
                raise RuntimeError(f"the page raised {fwd.delta.new_element.exception.type}")
            if kind == "page_not_found":
                raise RuntimeError(f"no page {page!r}")
            if kind == "navigation" and page:  # the page that runs is the one asked for (by its url path)
                ran = {p.page_script_hash: p.url_pathname for p in fwd.navigation.app_pages}.get(
                    fwd.navigation.page_script_hash)
                if ran is not None and ran.strip("/") != page:
                    raise RuntimeError(f"opened {ran!r} instead of {page!r}")
            if kind == "script_finished" and fwd.script_finished != FINISHED_EARLY_FOR_RERUN:
                return time.perf_counter() - start


def split_visit(visit: str) -> tuple[str, str]:
    """``"why?model_key=x"`` -> ``("why", "model_key=x")``; a visit without a page (``"model_key=x"``, ``""``) is the
    app's first page: ``("", query)``."""
    head, sep, tail = visit.partition("?")
    if sep and "=" not in head and "&" not in head:
        return head.strip("/"), tail
    return "", visit.lstrip("?")


def lesson_visits(folder=None) -> list[str]:
    """One visit per step of every shipped lesson (``lessons/*.toml``, or ``folder``'s), in lesson order: the step's
    page and link (:meth:`live.lessons.Step.query`), the Explore page as the app's first page. A lesson that does not
    read is left out (the Class page says why when it is picked)."""
    from pathlib import Path
    from urllib.parse import urlencode

    root = Path(__file__).resolve().parent.parent
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from live import lessons

    out = []
    for path in sorted(Path(folder or lessons.LESSONS).glob("*.toml")):
        try:
            found = lessons.load_lesson(path)
        except (lessons.LessonError, OSError, ValueError):
            continue
        for step in found.steps:
            page = "" if step.page == "explore" else step.page
            query = urlencode(step.query())
            out.append(f"{page}?{query}" if page else query)
    return out


def visits_from_env(environ=None) -> list[str] | None:
    """The visits ``DIKKAT_WARM`` asks for: None when it is ``0`` (no warm-up); when unset, :data:`VISITS` and then
    every step of the shipped lessons (:func:`lesson_visits`), each once."""
    value = (os.environ if environ is None else environ).get("DIKKAT_WARM")
    if value is None or value == "1":
        return list(dict.fromkeys([*VISITS, *lesson_visits()]))
    if value == "0":
        return None
    return [q.strip().lstrip("?") for q in value.split(";")]


def _readiness():
    """live/readiness.py (the progress the teacher's panel reads), with the repository on ``sys.path``."""
    from pathlib import Path

    root = str(Path(__file__).resolve().parent.parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    from live import readiness

    return readiness


def warm(base: str, visits: list[str], timeout: float = 600, say=print) -> dict[str, float | str]:
    """Every visit of ``visits`` (query strings) in turn once the app at ``base`` answers; returns query ->
    seconds, or the reason it failed (a failure is reported, never raised: the app serves on without it). The
    progress is written for the app's teacher panel after each visit (:mod:`live.readiness`, by the app's port)."""
    from urllib.parse import urlsplit

    out: dict[str, float | str] = {}
    port, started = urlsplit(base).port or 80, time.time()
    progress = _readiness()
    progress.write(port, 0, len(visits), started=started)
    if not wait_healthy(base, timeout):
        say(f"warm: {base} did not answer within {timeout:.0f} s")
        return out
    for query in visits:
        try:
            out[query] = asyncio.run(visit(base, query, timeout))
            say(f"warm: {query or '(first page)'} {out[query]:.1f} s")
        except (OSError, RuntimeError) as exc:
            out[query] = str(exc)
            say(f"warm: {query or '(first page)'} failed: {exc}")
        progress.write(port, len(out), len(visits), sum(not isinstance(v, float) for v in out.values()), started)
    return out


def start(base: str, environ=None, python: str = sys.executable):
    """Start this module on ``base`` in the background (a ``subprocess.Popen``), or None when ``DIKKAT_WARM=0``."""
    import subprocess

    env = dict(os.environ if environ is None else environ)
    if visits_from_env(env) is None:
        return None
    return subprocess.Popen([python, os.path.abspath(__file__), "--url", base], env=env, stdout=subprocess.DEVNULL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8501", help="the app's address")
    parser.add_argument("--visit", action="append", default=None, help="a query string to open (repeatable)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for the app and for each visit")
    args = parser.parse_args(argv)
    visits = args.visit if args.visit is not None else visits_from_env()
    if visits is None:
        return 0
    done = warm(args.url.rstrip("/"), visits, args.timeout, say=lambda line: print(line, file=sys.stderr, flush=True))
    return 0 if all(isinstance(v, float) for v in done.values()) and len(done) == len(visits) else 1


if __name__ == "__main__":
    sys.exit(main())
