"""Render benchmark of the Explore page's model view against BertViz 1.4.1, on minilm-l6 (6 x 12 heads).

For 32, 128 and 512 tokens, measured side by side in one run:

- ``dikkat_bytes``: bytes the app sends for the model view grid (the PlotlyChart element's protobuf,
  taken from a Streamlit AppTest run of app.py), and ``+large``: the full-detail heatmap of the chosen
  head drawn under the grid;
- ``bertviz_bytes``: the same attention written by BertViz 1.4.1's
  ``model_view(attention, tokens, html_action="return")`` (the HTML it would put in a notebook; BertViz
  additionally loads require.js and d3 from a CDN, which this number does not include);
- ``submit_to_drawn_s``: in Debian's Chromium (Playwright) on ``streamlit run app.py``: time from
  submitting a new sentence of that length (Ctrl+Enter in the sentence box) to the model view of that
  sentence being drawn (mean of 2 fresh sentences, so the analysis cache does not help).

Needs the bench dependencies (``make bench-render`` installs them): bertviz==1.4.1 (with --no-deps)
and IPython, plus playwright and /usr/bin/chromium from the test set-up.
Run: ``.venv/bin/python bench/render.py`` (about 3 minutes on 2 cores).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "deploy"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

import launch  # noqa: E402  (deploy/launch.py: the app's command line, as `make run`)
import models  # noqa: E402

SIZES = (32, 128, 512)
WORDS = ["the", "cat", "sat", "on", "a", "mat", "and", "the", "dog", "ran", "to", "the", "park", "while", "a", "bird",
         "sang", "in", "the", "old", "tree", "near", "the", "house", "by", "the", "river"]


def sentence(n_tokens: int, variant: int, tokenizer) -> str:
    """English text of exactly ``n_tokens`` minilm tokens ([CLS] and [SEP] included); ``variant``
    changes one word so each text is new to the app's analysis cache."""
    words = [WORDS[(i + variant) % len(WORDS)] for i in range(n_tokens - 2)]
    text = " ".join(words)
    got = len(tokenizer(text)["input_ids"])
    if got != n_tokens:
        raise RuntimeError(f"text has {got} tokens, wanted {n_tokens}")
    return text


def app_bytes(text: str) -> tuple[int, int]:
    """(model view grid, large heatmap) element sizes in bytes, from an AppTest run of app.py."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.session_state["text"] = text
    at.session_state["view"] = "model"
    at.run()
    if at.exception:
        raise RuntimeError(at.exception[0].value)
    charts = [e for e in at.main if type(e).__name__ == "UnknownElement" and e.type == "plotly_chart"]
    return charts[0].proto.ByteSize(), charts[1].proto.ByteSize()


def bertviz_bytes(attention: np.ndarray, tokens: list[str]) -> tuple[int | None, float, str]:
    """Size in bytes of BertViz 1.4.1's model view HTML for the same weights, and the seconds it took."""
    try:
        import torch
        from bertviz import model_view
    except ImportError as exc:
        return None, 0.0, f"bertviz not installed ({exc}); run `make bench-render`"
    start = time.perf_counter()
    html = model_view(attention=[torch.from_numpy(layer[None]) for layer in attention], tokens=tokens,
                      html_action="return")
    size = len(html.data.encode("utf-8"))
    return size, time.perf_counter() - start, ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def idle(page) -> None:
    """Wait until the script run has reached the page's last element and the app is idle (a click or a
    submit during a running first run can be lost)."""
    page.get_by_text("NPZ: numpy.load").wait_for(timeout=600_000)
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=600_000)
    time.sleep(1.0)


def browser_times(texts: dict[int, list[str]]) -> dict[int, float]:
    """Mean seconds from submitting each text to its model view drawn, per size."""
    from playwright.sync_api import sync_playwright

    port = free_port()
    proc = subprocess.Popen(launch.streamlit_command(port, "127.0.0.1"), cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    out: dict[int, float] = {}
    try:
        for _ in range(180):
            try:
                urllib.request.urlopen(url + "/_stcore/health", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=shutil.which("chromium") or "/usr/bin/chromium",
                                        args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1400, "height": 1100})
            page.goto(url + "/?view=model", timeout=180_000)
            page.wait_for_selector(".js-plotly-plot", state="attached", timeout=180_000)
            box = page.locator("textarea").first
            idle(page)
            print("  browser ready", flush=True)
            times: dict[int, list[float]] = {n: [] for n in texts}
            # alternate the sizes, so every submission changes the token count the grid's title shows
            for variant in range(max(len(v) for v in texts.values())):
                for n, variants in texts.items():
                    box.fill(variants[variant])
                    start = time.perf_counter()
                    box.press("Control+Enter")
                    # drawn: the grid's title names this sentence's token count and plotly has laid it out
                    page.wait_for_function(
                        """n => { const t = document.querySelector('.js-plotly-plot .gtitle');
                                  return t && t.textContent.includes('· ' + n + ' tokens')
                                      && document.querySelector('.js-plotly-plot .heatmaplayer image'); }""",
                        arg=n, timeout=600_000)
                    times[n].append(time.perf_counter() - start)
                    print(f"  submitted {n} tokens: drawn after {times[n][-1]:.2f} s", flush=True)
                    idle(page)  # let the rest of the page (large heatmap, downloads) finish first
            out = {n: float(np.mean(v)) for n, v in times.items()}
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    return out


def main() -> None:
    loaded = models.load("minilm-l6", device="cpu")
    texts = {n: [sentence(n, v, loaded.tokenizer) for v in (1, 2)] for n in SIZES}
    rows = []
    for n in SIZES:
        a = models.analyze(loaded, texts[n][0])
        weights = a.attentions["encoder"]
        assert weights.shape == (6, 12, n, n), weights.shape
        grid, large = app_bytes(texts[n][0])
        bv, bv_s, note = bertviz_bytes(weights, [t.label for t in a.tokens])
        rows.append({"tokens": n, "dikkat_grid_bytes": grid, "dikkat_large_heatmap_bytes": large,
                     "bertviz_bytes": bv, "bertviz_build_s": round(bv_s, 2), "note": note})
        print(f"[{n} tokens] grid {grid:,} B, large heatmap {large:,} B, bertviz "
              f"{'n/a' if bv is None else f'{bv:,} B'} ({bv_s:.1f} s to build)", flush=True)
    timings = browser_times(texts)
    print()
    print(f"{'tokens':>6} | {'dikkat grid B':>14} | {'+large heatmap B':>16} | {'BertViz 1.4.1 B':>16} | "
          f"{'BertViz/grid':>12} | {'submit→drawn s':>14}")
    for row in rows:
        n, bv = row["tokens"], row["bertviz_bytes"]
        ratio = f"{bv / row['dikkat_grid_bytes']:.0f}x" if bv else "n/a"
        print(f"{n:>6} | {row['dikkat_grid_bytes']:>14,} | {row['dikkat_large_heatmap_bytes']:>16,} | "
              f"{(f'{bv:,}' if bv else 'n/a'):>16} | {ratio:>12} | {timings[n]:>14.2f}")
        row["submit_to_drawn_s"] = round(timings[n], 2)
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
