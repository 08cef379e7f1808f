"""What a class waits for on the Head pruning page, measured through Streamlit's AppTest in one run.

For each model, at the default sentence of each language: the time of the page's rerun after a click
that switches a new set of heads off (a grid row's pills, and the "layer N off" preset), median and
worst of several clicks, next to one plain forward pass of the model on that sentence (the ratio says
how much of the wait is the model itself). Then the pruning curve: the page's estimate
(``models.pruning.estimate_curve_seconds``) against the measured run of the shipped sentence set.

    python bench/pruning_page.py                          # minilm-l6 and smollm2-135m
    python bench/pruning_page.py --models smollm2-135m --clicks 8 --no-curve

Goals of issue 13 on a 2-core machine: a click answered in ≤ 1 s (minilm-l6) and ≤ 2 s (smollm2-135m).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
logging.getLogger("streamlit").setLevel(logging.ERROR)

import torch  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

import models  # noqa: E402
from models import pruning  # noqa: E402
from views.shared import DEFAULT_TEXTS  # noqa: E402


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _page(model: str, lang: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=900)
    at.session_state["model_key"] = model
    at.session_state["lang"] = lang
    at.run()
    at.switch_page("views/pruning.py")
    at.run()
    if at.exception:
        raise RuntimeError([e.value for e in at.exception])
    return at


def clicks(model: str, lang: str, n: int) -> tuple[list[float], float]:
    """Rerun times (s) after ``n`` pill clicks, each switching one more head off (a new head set every
    time), and after the "layer N off" preset."""
    at = _page(model, lang)
    times = []
    for i in range(n):
        pills = at.pills[i % len(at.pills)]
        on = list(pills.value or [])
        pills.set_value([h for h in on if h != on[(i // len(at.pills)) % len(on)]])
        times.append(_timed(at.run))
    at.selectbox(key="prune_layer_pick").set_value(len(at.pills) - 1)
    at.run()
    preset = _timed(at.button(key="prune_btn_layer_off").click().run)
    if at.exception:
        raise RuntimeError([e.value for e in at.exception])
    return times, preset


def plain_forward(model: str, text: str) -> float:
    """Fastest of 3 plain forward passes (no capture) on ``text``, in seconds."""
    loaded = models.load(model)
    enc = loaded.tokenizer(text, return_tensors="pt").to(loaded.device)
    best = float("inf")
    with torch.inference_mode():
        for _ in range(3):
            best = min(best, _timed(lambda: loaded.model(**enc)))
    return best


def curve(model: str) -> tuple[float, float]:
    """(estimate, measured) seconds of gradient importance + pruning curve on the shipped set."""
    loaded = models.load(model)
    texts = [s["text"] for s in json.loads((ROOT / "assets" / "sentences.json").read_text("utf-8"))["sentences"]]
    estimate = pruning.estimate_curve_seconds(loaded, texts).seconds
    start = time.perf_counter()
    importance = pruning.gradient_importance(loaded, texts)
    pruning.pruning_curve(loaded, texts, importance)
    return estimate, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["minilm-l6", "smollm2-135m"])
    parser.add_argument("--langs", nargs="+", default=["en", "tr"])
    parser.add_argument("--clicks", type=int, default=6)
    parser.add_argument("--no-curve", action="store_true")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    for model in args.models:
        for lang in args.langs:
            times, preset = clicks(model, lang, args.clicks)
            fwd = plain_forward(model, DEFAULT_TEXTS[lang])
            med = statistics.median(times)
            print(f"{model:<14} {lang}: click on a new head set: median {med:.2f} s, worst {max(times):.2f} s "
                  f"(÷ plain forward {med / fwd:.0f}×); 'layer off' preset {preset:.2f} s")
        if not args.no_curve:
            est, actual = curve(model)
            print(f"{model:<14} pruning curve: estimate {est:.1f} s, measured {actual:.1f} s, "
                  f"estimate ÷ measured {est / actual:.2f}")


if __name__ == "__main__":
    main()
