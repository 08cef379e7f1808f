"""Memory of the app under a class: distinct 1,000-token smollm2 texts through Explore and Head pruning.

Runs the real pages in this process with Streamlit's AppTest (as the server would run them), one text after
another, each through Explore (head view, then model view) and the Head pruning page, and prints after
every ``--every`` texts:
    RSS MiB        the process's resident memory
    growth MiB     RSS above the level after the first text (model loaded, pages imported)
    cache MiB      what views.shared.CACHE holds by its own measure, and its entries and evictions
and at the end the mean RSS growth per text before the first eviction, and the peak RSS against the budget
(DIKKAT_CACHE_GIB; this benchmark sets 0.5 GiB unless the environment says otherwise, so eviction starts
within the run).

    python bench/app_memory.py [--texts 50] [--every 5]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DIKKAT_CACHE_GIB", "0.5")

from streamlit.testing.v1 import AppTest  # noqa: E402

WORDS = ("cat mouse garden river teacher student window morning evening forest mountain city train book "
         "letter music picture kitchen market village story summer winter bridge island doctor").split()


def _rss_mib() -> float:
    return int(re.search(r"VmRSS:\s+(\d+)", Path("/proc/self/status").read_text()).group(1)) / 1024


def _peak_mib() -> float:
    return int(re.search(r"VmHWM:\s+(\d+)", Path("/proc/self/status").read_text()).group(1)) / 1024


def text_number(i: int, tokenizer, n_tokens: int = 1000) -> str:
    """A distinct English text of about ``n_tokens`` tokens."""
    sentence = []
    k = i
    while len(tokenizer(" ".join(sentence))["input_ids"]) < n_tokens:
        a, b = WORDS[k % len(WORDS)], WORDS[(k * 7 + 3) % len(WORDS)]
        sentence.append(f"The {a} near the {b} was seen on day {k}.")
        k += 1
    return " ".join(sentence)


def run_pages(text: str) -> None:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.session_state["model_key"] = "smollm2-135m"
    at.session_state["text"] = text
    at.session_state["view"] = "head"
    at.run()
    at.session_state["view"] = "model"
    at.run()
    at.switch_page("views/pruning.py")
    at.run()
    if at.exception:
        raise RuntimeError([e.value for e in at.exception])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--texts", type=int, default=50)
    parser.add_argument("--every", type=int, default=5)
    args = parser.parse_args()
    import models
    from views import shared

    tok = models.load("smollm2-135m").tokenizer
    budget_mib = shared.CACHE.budget / 2 ** 20
    print(f"cache budget {budget_mib:.0f} MiB (DIKKAT_CACHE_GIB), model cache "
          f"{models.loading.loader._LOADED.budget / 2 ** 20:.0f} MiB")
    print(f"{'texts':>5} {'tokens':>6} {'s/text':>7} {'RSS MiB':>8} {'growth MiB':>11} {'cache MiB':>10} "
          f"{'entries':>8} {'evictions':>10}")
    base = None
    first_eviction = None
    start = time.perf_counter()
    for i in range(args.texts):
        text = text_number(i * 1000, tok)
        run_pages(text)
        if base is None:
            base = _rss_mib()
        if first_eviction is None and shared.CACHE.evictions:
            first_eviction = (i, _rss_mib())
        if (i + 1) % args.every == 0 or i == 0:
            rss = _rss_mib()
            print(f"{i + 1:>5} {len(tok(text)['input_ids']):>6} {(time.perf_counter() - start) / (i + 1):>7.1f} "
                  f"{rss:>8.0f} {rss - base:>11.0f} {shared.CACHE.total / 2 ** 20:>10.0f} {len(shared.CACHE):>8} "
                  f"{shared.CACHE.evictions:>10}")
    if first_eviction is not None and first_eviction[0] > 1:
        i, rss = first_eviction
        print(f"growth per text before the first eviction (texts 2..{i}): {(rss - base) / (i - 1):.1f} MiB")
    else:
        print(f"growth per text (no eviction): {(_rss_mib() - base) / max(1, args.texts - 1):.1f} MiB")
    print(f"peak RSS {_peak_mib():.0f} MiB; final RSS {_rss_mib():.0f} MiB; cache {shared.CACHE.total / 2 ** 20:.0f} "
          f"of {budget_mib:.0f} MiB")


if __name__ == "__main__":
    main()
