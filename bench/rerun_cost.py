"""What one more student costs (issue 48): the CPU milliseconds of one session's rerun of a page when every result is
already cached, and the bytes it sends, per page and common action.

With 30 students on 2 cores every click reruns 30 page scripts: 2 cores give 2,000 ms of CPU per second, so 30 reruns
answer within a second only if a rerun over cached results costs well under 60 ms (goal: 40 ms). The compute is
shared across sessions (the app's caches); what each session pays is the page script itself: its tables, figures
and their serialised payloads.

For each page and action, on minilm-l6 with the default sentence, through Streamlit's AppTest (the real app.py and
page, as the server runs them):

1. a first session opens the page and makes the action (the caches are filled: models, analyses, figures);
2. ``--sessions`` fresh sessions each open the page, then make the action; each run's CPU time in the thread that
   runs the script (``time.thread_time``: the page's work, not AppTest's parsing of its messages) is recorded, and
   the median reported (the scripts compiled once for all sessions, as a server's runtime does);
3. bytes: the element protos the run drew (``ByteSize``), all of them (``open``: a new session gets everything)
   and, for an action, those that differ from the same session's run before (Streamlit sends an unchanged element
   of 10 KB or more as a reference to the browser's cache, so the changed bytes are what the action costs the
   network; small unchanged elements are re-sent but count little).

``--tree OTHER`` measures another checkout the same way in the same run (side by side: before/after a change), each
tree in a process of its own.

    .venv/bin/python bench/rerun_cost.py [--sessions 5] [--pages explore,why] [--tree ../old-checkout] [--json f]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
MODEL = "minilm-l6"
TEXT = "The cat chased the mouse because it was hungry."
# page -> (file, state before the first run, [(action, session-state changes)])
ACTIONS: dict[str, tuple[str, dict, list[tuple[str, dict]]]] = {
    "explore": ("views/explore.py", {}, [("layer 3", {"layer": 3}), ("model view", {"view": "model"}),
                                         ("heatmap", {"view": "heatmap"})]),
    "pruning": ("views/pruning.py", {}, [("show layer 2", {"prune_show_layer": 2})]),
    "masks": ("views/masks.py", {"masks_section": "compare"},
              [("add sliding window", {"masks_kinds": ["bidirectional", "causal", "sliding_window"]})]),
    "flow": ("views/flow.py", {}, [("threshold 0.1", {"flow_threshold": 0.1})]),
    "why": ("views/why.py", {}, [("head 3", {"why_head": 3})]),
    "qkv": ("views/qkv.py", {}, [("head 3", {"qkv_head": 3})]),
}


def _elements(at) -> dict[tuple, tuple[int, str]]:
    """Every element the run drew: its delta path -> (its proto's bytes, a digest of them)."""
    out: dict[tuple, tuple[int, str]] = {}

    def walk(node, path):
        children = getattr(node, "children", None)
        if isinstance(children, dict):
            for key, child in children.items():
                walk(child, (*path, key))
            return
        proto = getattr(node, "proto", None)
        if proto is not None and hasattr(proto, "SerializeToString"):
            raw = proto.SerializeToString()
            out[path] = (len(raw), hashlib.blake2b(raw, digest_size=8).hexdigest())

    walk(at._tree, ())
    return out


def _run(at) -> tuple[float, dict]:
    SCRIPT_CPU.clear()
    at.run()
    cpu = sum(SCRIPT_CPU) * 1000
    if at.exception:
        raise RuntimeError([e.value for e in at.exception])
    return cpu, _elements(at)


def _session(root: Path, file: str, state: dict):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(root / "app.py"), default_timeout=600)
    at.session_state["lang"] = "en"
    at.session_state["model_key"] = MODEL
    at.session_state["text"] = TEXT
    for key, value in state.items():
        at.session_state[key] = value
    at.switch_page(file)
    return at


def _share_compiled_scripts() -> None:
    """One compiled app.py and page for every AppTest session, as a server has (its ScriptCache is the runtime's);
    AppTest gives each session a cache of its own, which would count compiling the scripts (about 30 ms) in every
    session's first run."""
    from streamlit.runtime.scriptrunner.script_cache import ScriptCache
    from streamlit.testing.v1 import app_test, local_script_runner

    shared = ScriptCache()
    local_script_runner.ScriptCache = app_test.ScriptCache = lambda: shared


SCRIPT_CPU: list[float] = []  # CPU seconds of each script run, in the script's own thread


def _time_the_script_thread() -> None:
    """Record each script run's CPU time in the thread that runs it (``time.thread_time``): the page's cost on a
    server. AppTest's own work in the test's thread (it parses every message into an element tree, which a server
    does not) is left out."""
    from streamlit.runtime.scriptrunner import script_runner

    real = script_runner.ScriptRunner._run_script

    def timed(self, *args, **kwargs):
        start = time.thread_time()
        try:
            return real(self, *args, **kwargs)
        finally:
            SCRIPT_CPU.append(time.thread_time() - start)

    script_runner.ScriptRunner._run_script = timed


def measure(root: Path, pages: list[str], sessions: int) -> dict:
    """``{page: {action: {"cpu_ms": median, "cpu_ms_all": [...], "bytes": median, "changed_bytes": median}}}``."""
    _share_compiled_scripts()
    _time_the_script_thread()
    out: dict = {}
    for page in pages:
        file, state, actions = ACTIONS[page]
        warm = _session(root, file, state)  # 1. fill the caches
        _run(warm)
        for _, change in actions:
            for key, value in change.items():
                warm.session_state[key] = value
            _run(warm)
        rows: dict[str, dict[str, list]] = {"open": {"cpu": [], "bytes": [], "changed": []}}
        rows.update({name: {"cpu": [], "bytes": [], "changed": []} for name, _ in actions})
        for _ in range(sessions):  # 2. one more student each
            at = _session(root, file, state)
            cpu, before = _run(at)
            total = sum(b for b, _ in before.values())
            rows["open"]["cpu"].append(cpu), rows["open"]["bytes"].append(total), rows["open"]["changed"].append(total)
            for name, change in actions:
                for key, value in change.items():
                    at.session_state[key] = value
                cpu, after = _run(at)
                changed = sum(b for path, (b, h) in after.items() if before.get(path, (0, ""))[1] != h)
                rows[name]["cpu"].append(cpu)
                rows[name]["bytes"].append(sum(b for b, _ in after.values()))
                rows[name]["changed"].append(changed)
                before = after
        out[page] = {name: {"cpu_ms": round(statistics.median(r["cpu"]), 1),
                            "cpu_ms_all": [round(x, 1) for x in r["cpu"]],
                            "bytes": int(statistics.median(r["bytes"])),
                            "changed_bytes": int(statistics.median(r["changed"]))}
                     for name, r in rows.items()}
        print(f"  {root.name}: {page} done", file=sys.stderr, flush=True)
    return out


def _child(root: Path, pages: list[str], sessions: int) -> None:
    os.chdir(root)
    sys.path.insert(0, str(root))
    print(json.dumps(measure(root, pages, sessions)))


def _in_process_of_its_own(root: Path, pages: list[str], sessions: int) -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", DIKKAT_AHEAD="0", DIKKAT_WARM="0")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(root), "--pages", ",".join(pages),
           "--sessions", str(sessions)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=5, help="fresh sessions measured per page (default 5)")
    ap.add_argument("--pages", default=",".join(ACTIONS), help="pages, comma-separated (default: all)")
    ap.add_argument("--tree", type=Path, help="another checkout, measured the same way in the same run")
    ap.add_argument("--json", type=Path, help="write every figure to this file")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    pages = [p for p in args.pages.split(",") if p]
    if args.child:
        _child(args.child, pages, args.sessions)
        return
    trees = {"this": HERE} | ({"other": args.tree.resolve()} if args.tree else {})
    results = {name: _in_process_of_its_own(root, pages, args.sessions) for name, root in trees.items()}
    head = "| page | action | " + " | ".join(f"CPU ms ({n}) | bytes ({n}) | changed bytes ({n})" for n in results)
    print(head + " |\n|" + "---|" * (2 + 3 * len(results)))
    for page in pages:
        for action in results["this"][page]:
            cells = []
            for r in results.values():
                row = r.get(page, {}).get(action)
                cells += ([f"{row['cpu_ms']:.0f}", f"{row['bytes']:,}", f"{row['changed_bytes']:,}"] if row
                          else ["-"] * 3)
            print(f"| {page} | {action} | " + " | ".join(cells) + " |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
