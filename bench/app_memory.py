"""Memory of the app under a class: distinct texts through every page, one fresh session each (as 30 students).

For each page (Explore, Information flow, Why, Head atlas, Head masks (Masks per head), Masks, Head pruning) a
process of its own runs the real page with Streamlit's AppTest (as the server runs it) for ``--texts`` distinct
1,000-token smollm2 texts, each in a new session, and the parent prints the pages side by side:
    budget at       the text after which the shared cache first dropped an entry (its budget reached)
    RSS MiB         resident memory then, and after the last text
    growth MiB/text the slope of resident memory over the texts after the budget was reached (least squares): what
                    each further student's text costs; ≈ 0 when everything a page keeps lives in the bounded cache
    cache MiB       what views.shared.CACHE holds by its own measure at the end (budget DIKKAT_CACHE_GIB)
    after gc MiB    resident memory after one full gc.collect(), then after glibc's malloc_trim(0): garbage in
                    reference cycles and memory freed but kept by the allocator, told apart from memory still held
    trims/gcs       malloc_trim calls and full collections models.memory made after the cache's evictions
    loose           objects a page made per text (analyses, flows, layers explained, arrays of 64 KiB or more) alive
                    at the end (before that gc.collect(): garbage in cycles counts) but reachable from no cache entry

AppTest's own objects are not the server's: each run's script runner and element tree are reference cycles holding
every message of the run (34 MiB per Head pruning run at 1,000 tokens, the figures' JSON), which the server flushes
to the browser and drops; the benchmark empties them after each run (release_runner_messages, drop_tree) so that
what is measured is the page's (before that: 25.8 MiB per text on Head pruning, all of it freed by gc.collect()).

Head atlas reads no text: its run for "text i" opens a distinct head of an atlas built at the start over 16 texts of
the shipped English corpus (in a temporary DIKKAT_ATLAS_ROOT). The budget is 0.125 GiB unless DIKKAT_CACHE_GIB says
otherwise, so eviction starts within the run; MALLOC_ARENA_MAX and DIKKAT_* pass on to the page processes.

    python bench/app_memory.py [--pages explore,flow,why,atlas,head_masks,masks,pruning] [--texts 16]
    python bench/app_memory.py --page flow --texts 16 --every 1      # one page, every text printed
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DIKKAT_CACHE_GIB", "0.125")
os.environ.setdefault("DIKKAT_AHEAD", "0")  # nothing computed in the background, nothing read from an earlier run
os.environ.setdefault("DIKKAT_WARM", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

WORDS = ["cat", "mouse", "garden", "river", "teacher", "student", "window", "morning", "evening", "forest", "mountain",
         "city", "train", "book", "letter", "music", "picture", "kitchen", "market", "village", "story", "summer",
         "winter", "bridge", "island", "doctor"]
MODEL = "smollm2-135m"
# page -> (file, session state set before the run, a second run's changes or None)
PAGES = {
    "explore": ("views/explore.py", {"view": "head"}, {"view": "model"}),
    "flow": ("views/flow.py", {}, None),
    "why": ("views/why.py", {}, None),
    "atlas": ("views/atlas.py", {"atlas_corpus": "en", "atlas_limit": 16, "atlas_max_tokens": 128}, None),
    "head_masks": ("views/masks.py", {"masks_section": "per_head", "masks_ph_text": "sidebar"}, None),
    "masks": ("views/masks.py", {"masks_section": "compare"}, None),
    "pruning": ("views/pruning.py", {}, None),
}


def _status(field: str) -> float:
    """``field`` of /proc/self/status in MiB (VmRSS: resident now, VmHWM: its peak)."""
    return int(re.search(rf"{field}:\s+(\d+)", Path("/proc/self/status").read_text()).group(1)) / 1024


def text_number(i: int, tokenizer, n_tokens: int = 1000) -> str:
    """A distinct English text of about ``n_tokens`` tokens."""
    sentence = []
    k = i
    while len(tokenizer(" ".join(sentence))["input_ids"]) < n_tokens:
        a, b = WORDS[k % len(WORDS)], WORDS[(k * 7 + 3) % len(WORDS)]
        sentence.append(f"The {a} near the {b} was seen on day {k}.")
        k += 1
    return " ".join(sentence)


def run_page(page: str, text: str, i: int) -> None:
    """One new session opening ``page`` with ``text`` (the atlas: its ``i``-th head)."""
    from streamlit.testing.v1 import AppTest

    release_runner_messages()
    file, state, then = PAGES[page]
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.session_state["model_key"] = MODEL
    at.session_state["text"] = text
    for key, value in state.items():
        at.session_state[key] = value
    if page == "atlas":
        at.session_state["atlas_layer"], at.session_state["atlas_head"] = (i * 7) % 30, i % 9
    at.switch_page(file)
    at.run()
    for key, value in (then or {}).items():
        at.session_state[key] = value
    if then:
        at.run()
    if at.exception:
        raise RuntimeError([e.value for e in at.exception])
    drop_tree(at)


def release_runner_messages() -> None:
    """Make AppTest's script runner drop its messages once it has parsed them: each run's LocalScriptRunner is a
    reference cycle (its callbacks point back to it) that kept every ForwardMsg of the run (34 MiB on Head pruning at
    1,000 tokens: the figures' JSON) until a full gc. The server's queue is flushed to the browser and emptied after
    each send, so left alone this harness object would count as the page's growth."""
    from streamlit.testing.v1 import local_script_runner as runner

    if getattr(runner.LocalScriptRunner.run, "_dikkat_releases", False):
        return
    real = runner.LocalScriptRunner.run

    def run(self, *args, **kwargs):
        tree = real(self, *args, **kwargs)
        self.forward_msg_queue.clear()
        for data in self.event_data:  # each ENQUEUE_FORWARD_MSG event's kwargs hold its message too
            data.pop("forward_msg", None)
        return tree

    run._dikkat_releases = True
    runner.LocalScriptRunner.run = run


def drop_tree(at) -> None:
    """Break the harness's own reference cycle: AppTest's element tree (each node points back to its root) holds the
    run's protos, the page's figures among them (one Head pruning run at 1,000 tokens: a 32.5 MiB tree), until a
    full gc. The server has no such tree (it sends the protos and drops them), so left alone it would count as the
    page's growth (36 MiB per text on Head pruning, all of it freed by gc.collect())."""
    stack = [getattr(at, "_tree", None)]
    while stack:
        node = stack.pop()
        if node is None:
            continue
        children = getattr(node, "children", None)
        if isinstance(children, dict):
            stack.extend(children.values())
            children.clear()
        for name in ("proto", "root"):
            if hasattr(node, name):
                try:
                    setattr(node, name, None)
                except (AttributeError, TypeError):
                    pass
    at._tree = None


def build_atlas() -> None:
    """The small atlas the atlas page shows (16 texts of the shipped English corpus, 128 tokens each)."""
    import models
    from models import atlas as A

    os.environ["DIKKAT_ATLAS_ROOT"] = tempfile.mkdtemp(prefix="dikkat-bench-atlas-")
    A.build_atlas(models.load(MODEL), A.shipped_corpus("en"), max_tokens=128, limit=16)


def loose_objects() -> dict[str, int]:
    """Per kind, objects a page makes per text that are alive (uncollected garbage included) but reachable from no entry
    of the shared cache (arrays: MiB of those of 64 KiB or more, found as referents of tracked objects)."""
    import numpy as np

    import models
    from models import flow as mflow, why as mwhy
    from views import shared

    warnings.simplefilter("ignore")  # isinstance on some objects of other libraries warns
    kinds = {"analysis": models.Analysis, "flow": mflow.Flow, "layer_why": mwhy.LayerWhy}
    held = set()
    stack = [value for value, _ in list(shared.CACHE._entries.values())]
    while stack:  # every object the cache's entries reach
        obj = stack.pop()
        if id(obj) in held or isinstance(obj, (type, type(sys))):
            continue
        held.add(id(obj))
        stack.extend(gc.get_referents(obj))
    found = {name: 0 for name in (*kinds, "arrays MiB")}
    for obj in gc.get_objects():
        for name, kind in kinds.items():
            if isinstance(obj, kind) and id(obj) not in held:
                found[name] += 1
    arrays = {id(a): a for o in gc.get_objects() if id(o) not in held for a in gc.get_referents(o)
              if isinstance(a, np.ndarray) and a.base is None and id(a) not in held and a.nbytes >= 1 << 16}
    found["arrays MiB"] = round(sum(a.nbytes for a in arrays.values()) / 2 ** 20, 1)
    return found


def _slope(xs: list[float], ys: list[float]) -> float:
    if len(xs) < 2:
        return float("nan")
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else float("nan")


def one_page(page: str, texts: int, every: int, quiet: bool) -> dict:
    """Run ``page`` for ``texts`` distinct texts in this process; a summary (MiB, counts)."""
    import models
    from views import shared

    import logging

    logging.getLogger("streamlit").setLevel(logging.ERROR)  # "missing ScriptRunContext" of bare-mode calls
    tok = models.load(MODEL).tokenizer
    if page == "atlas":
        build_atlas()
    if not quiet:
        print(f"{page}: cache budget {shared.CACHE.budget / 2 ** 20:.0f} MiB (DIKKAT_CACHE_GIB)")
        print(f"{'texts':>5} {'s/text':>7} {'RSS MiB':>8} {'cache MiB':>10} {'entries':>8} {'evictions':>10}")
    rss, budget_at = [], None
    start = time.perf_counter()
    for i in range(texts):
        run_page(page, text_number(i * 1000, tok), i)
        rss.append(_status("VmRSS"))
        if budget_at is None and shared.CACHE.evictions:
            budget_at = i
        if not quiet and ((i + 1) % every == 0 or i == 0):
            print(f"{i + 1:>5} {(time.perf_counter() - start) / (i + 1):>7.1f} {rss[-1]:>8.0f} "
                  f"{shared.CACHE.total / 2 ** 20:>10.0f} {len(shared.CACHE):>8} {shared.CACHE.evictions:>10}")
    # the slope over the texts after the budget was reached (skip the one that reached it); without eviction, over
    # the texts after the first (model loaded, pages imported)
    first = 1 if budget_at is None else budget_at + 1
    xs = list(range(first, texts))
    summary = {"page": page, "texts": texts, "budget_at": None if budget_at is None else budget_at + 1,
               "rss_budget": rss[budget_at] if budget_at is not None else None, "rss_end": rss[-1],
               "growth": _slope(xs, [rss[x] for x in xs]), "cache": shared.CACHE.total / 2 ** 20,
               "budget": shared.CACHE.budget / 2 ** 20, "seconds": (time.perf_counter() - start) / texts,
               "peak": _status("VmHWM")}
    try:
        from models import memory  # since issue 44: what the cache's evictions gave back

        summary["released"] = [memory.stats()["trims"], memory.stats()["collections"]]
    except ImportError:
        summary["released"] = None
    summary["loose"] = loose_objects()
    gc.collect()
    summary["rss_gc"] = _status("VmRSS")
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        summary["rss_trim"] = _status("VmRSS")
    except (OSError, AttributeError):
        summary["rss_trim"] = None
    return summary


def _cell(value, fmt: str = "{:.0f}") -> str:
    return "-" if value is None else fmt.format(value)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", default=",".join(PAGES), help="pages to run, each in a process of its own")
    parser.add_argument("--page", help="run one page in this process and print every --every texts")
    parser.add_argument("--texts", type=int, default=16)
    parser.add_argument("--every", type=int, default=4)
    parser.add_argument("--json", action="store_true", help="with --page: print the summary as one JSON line")
    args = parser.parse_args()
    if args.page:
        summary = one_page(args.page, args.texts, args.every, quiet=args.json)
        print(json.dumps(summary) if args.json else summary)
        return
    rows = []
    for page in args.pages.split(","):
        out = subprocess.run([sys.executable, __file__, "--page", page, "--texts", str(args.texts), "--json"],
                             capture_output=True, text=True)
        line = out.stdout.strip().splitlines()[-1:] if out.returncode == 0 else []
        if not line:
            print(f"{page}: failed\n{out.stderr[-3000:]}")
            continue
        rows.append(json.loads(line[0]))
        r = rows[-1]
        print(f"{page}: {r['texts']} texts, {r['seconds']:.1f} s each", flush=True)
    print(f"\ncache budget {rows[0]['budget']:.0f} MiB (DIKKAT_CACHE_GIB); MALLOC_ARENA_MAX="
          f"{os.environ.get('MALLOC_ARENA_MAX', '(glibc default)')}")
    print(f"{'page':<11} {'budget at':>9} {'RSS then':>9} {'RSS end':>8} {'growth MiB/text':>16} {'cache MiB':>10} "
          f"{'after gc':>9} {'after trim':>11} {'peak':>6} {'trims/gcs':>9}  "
          "loose (analyses, flows, layers, arrays MiB)")
    for r in rows:
        loose = r["loose"]
        print(f"{r['page']:<11} {_cell(r['budget_at']):>9} {_cell(r['rss_budget']):>9} {r['rss_end']:>8.0f} "
              f"{r['growth']:>16.1f} {r['cache']:>10.0f} {r['rss_gc']:>9.0f} {_cell(r['rss_trim']):>11} "
              f"{r['peak']:>6.0f} {'/'.join(map(str, r['released'])) if r.get('released') else '-':>9}  "
              f"{loose['analysis']}, {loose['flow']}, {loose['layer_why']}, {loose['arrays MiB']}")


if __name__ == "__main__":
    main()
