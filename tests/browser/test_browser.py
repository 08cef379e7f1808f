"""Real-browser test: the app served by ``streamlit run`` in Debian's Chromium driven by Playwright.

This machine has no internet, so a page that renders here needs none (case C05); the test also records
every request the page makes and checks that nothing is fetched from outside the app.
Screenshots are saved to ``test-results/``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote, urlparse

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "deploy"))

import replicas  # noqa: E402
from launch import streamlit_command  # noqa: E402  (deploy/launch.py: the flags of `make run`)

RESULTS = ROOT / "test-results"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SENTENCE_PIECES = ["Ked", "i", "fare", "yi", "ko", "val", "ad", "ı"]
SETTLED = (ROOT / "tests" / "browser_settled.js").read_text(encoding="utf-8")
RUN_COUNTER = (ROOT / "tests" / "browser_runs.js").read_text(encoding="utf-8")  # counts finished runs
# A wait for a script run ends when the run (and the page's drawing) has; the limit only stops a hung one. A first
# visit loads a model: Whisper's load and analysis took 104 s with both cores of a 2-core machine busy.
RUN_TIMEOUT = 600_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def app_url():
    """``streamlit run app.py`` on a free port, as ``make run`` starts it; yields its URL; stops it afterwards."""
    port = free_port()
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    log = open(RESULTS.parent / ".pytest_cache" / f"streamlit-{port}.log", "w") if (  # noqa: SIM115  (the server's)
        RESULTS.parent / ".pytest_cache").is_dir() else subprocess.DEVNULL
    proc = subprocess.Popen(streamlit_command(port, "127.0.0.1"), cwd=ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        replicas.wait_healthy(url, proc, timeout=90)  # the same wait `make serve` uses
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


def _new_page(browser, width: int, height: int):
    """A page of ``browser`` at ``width`` x ``height`` that counts the app's finished script runs (RUN_COUNTER)."""
    page = browser.new_page(viewport={"width": width, "height": height})
    page.add_init_script(RUN_COUNTER)
    return page


def _settled(page, since: int = 0) -> None:
    """Wait until the app has finished a script run after the ``since``-th (0: the page's first run) and has drawn
    it: no element stale or still loading, web fonts loaded, every plotly chart drawn at its container's width,
    every frame loaded, and nothing moving for a moment (tests/browser_settled.js). Waits on those events, not on
    a clock: a busy machine only takes longer."""
    try:
        page.wait_for_function(SETTLED, arg=since, polling="raf", timeout=RUN_TIMEOUT)
    except PlaywrightTimeout:
        waiting = page.evaluate("window.__dikkatWaitingFor")
        raise AssertionError(f"{page.url}: still waiting for {waiting} after {RUN_TIMEOUT // 1000} s") from None


@contextmanager
def _rerun(page):
    """``with _rerun(page): click()``: afterwards, wait until the script run the action started has finished and
    been drawn (:func:`_settled` after the runs counted before it)."""
    runs = page.evaluate("window.__dikkatRuns || 0")
    yield
    _settled(page, runs)


def test_head_view_and_model_view_render_offline_C05(app_url, minilm):
    """The head view and the model view draw "Kedi fareyi kovaladı" in a real browser with no internet;
    a new sentence typed as the very first action on a fresh server is analysed (not lost); every request
    the page makes goes to the app itself."""
    import models

    second = "Fareyi kedi kovaladı"
    second_labels = [x.label for x in models.analyze(minilm, second).tokens]
    RESULTS.mkdir(exist_ok=True)
    requests: list[tuple[str, str]] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = _new_page(browser, 1400, 1100)
        page.on("request", lambda r: requests.append((r.url, r.resource_type)))
        # a link that carries the Turkish sentence (English's own first sentence is English)
        page.goto(app_url + "/?text=" + quote("Kedi fareyi kovaladı"), timeout=120_000)

        # head view: an iframe whose inline script draws an SVG with the tokens in two columns
        frame = page.frame_locator("iframe").first
        frame.locator("#hv-svg").wait_for(timeout=RUN_TIMEOUT)
        shown = "els => els.map(e => e.firstChild.nodeValue)"  # the drawn text (a <title> tooltip follows)
        left = frame.locator("text.hv-q").evaluate_all(shown)
        right = frame.locator("text.hv-k").evaluate_all(shown)
        assert left == ["[CLS]"] + SENTENCE_PIECES + ["[SEP]"], left
        assert right == left
        drawn = int(frame.locator("body").get_attribute("data-drawn"))
        assert drawn > 100  # 12 heads x 10 x 10 candidate lines, those >= 1 % drawn
        frame.locator("text.hv-q", has_text="fare").hover()
        focused = int(frame.locator("body").get_attribute("data-drawn"))
        assert 0 < focused < drawn  # hovering a token shows only its lines
        page.screenshot(path=str(RESULTS / "explore_head_view.png"), full_page=True)
        # C08: the head view saves itself as SVG, made in the browser from the drawing (one click)
        with page.expect_download() as download:
            frame.locator("#hv-svg-dl").click()
        svg_path = RESULTS / download.value.suggested_filename
        download.value.save_as(svg_path)
        assert svg_path.suffix == ".svg"
        svg = svg_path.read_text(encoding="utf-8")
        assert svg.lstrip().startswith("<?xml") and ">ı</text>" in svg and ">Ked</text>" in svg

        # the first action on this fresh server: a new sentence (Ctrl+Enter) redraws the head view
        _settled(page)  # the first run has finished
        box = page.locator("textarea").first
        box.fill(second)
        with _rerun(page):
            box.press("Control+Enter")
        page.wait_for_function("n => document.querySelector('iframe') && [...document.querySelectorAll('iframe')]"
                               ".some(f => f.contentDocument && f.contentDocument.querySelectorAll('text.hv-q')"
                               ".length === n && f.contentDocument.querySelector('text.hv-q[data-index=\"1\"]')"
                               ".firstChild.nodeValue === 'Fare')", arg=len(second_labels), timeout=60_000)
        frame = page.frame_locator("iframe").first
        assert frame.locator("text.hv-q").evaluate_all(shown) == second_labels
        assert box.input_value() == second

        # model view: the clickable grid, then one map opened large with the tokens on its axes
        with _rerun(page):
            page.get_by_role("radio", name="Model view").click()
        page.get_by_text("Model view · encoder self-attention").wait_for()
        grid = page.locator(".js-plotly-plot").first
        x, y = grid.evaluate("""gd => { const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
            const tr = gd._fullData[1]; const i = 2 * 12 + 7;
            return [xa._offset + xa.l2p(tr.x[i]), ya._offset + ya.l2p(tr.y[i])]; }""")
        box = grid.bounding_box()
        with _rerun(page):
            page.mouse.click(box["x"] + x, box["y"] + y)
        page.get_by_text("Layer 2, head 7", exact=True).wait_for()
        large = page.locator(".js-plotly-plot", has_text="layer 2 · head 7")
        large.wait_for()
        ticks = large.locator(".xtick text").all_text_contents()
        assert ticks == second_labels, ticks
        assert "layer=2" in page.evaluate("location.href") and "head=7" in page.evaluate("location.href")
        page.screenshot(path=str(RESULTS / "explore_model_view.png"), full_page=True)
        # C08: the camera button of the figure's own mode bar downloads it (PNG by default)
        grid.hover()
        with page.expect_download() as download:
            grid.locator('.modebar-btn[data-title="Download plot as a PNG"]').click(force=True)
        png_path = RESULTS / download.value.suggested_filename
        download.value.save_as(png_path)
        assert png_path.name == "dikkat_minilm-l6_encoder_modelview.png"
        assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        browser.close()

    outside = [(u, kind) for u, kind in requests
               if urlparse(u).scheme in ("http", "https", "ws", "wss") and urlparse(u).hostname not in
               ("127.0.0.1", "localhost")]
    # Streamlit's frontend asks for an optional metrics config it ignores when unreachable; nothing the
    # page draws with (scripts, styles, fonts, images, frames) may come from outside.
    assert not [r for r in outside if r[1] in ("script", "stylesheet", "font", "image", "document", "media")], outside


def test_switching_the_language_keeps_the_chosen_model(app_url, smollm2):
    """A teacher picks smollm2-135m, switches the interface to Turkish, then changes an option: the model
    stays smollm2-135m; the masks page's section stays where it was. (The browser keeps a chosen option's
    label; a label that changed with the language reset the widget on the next run.)"""
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = _new_page(browser, 1400, 1000)
        page.goto(app_url + "/?model_key=smollm2-135m")
        _settled(page)
        page.get_by_text("decoder self-attention 30×9").wait_for()
        with _rerun(page):
            page.get_by_text("Türkçe", exact=True).click()
        page.get_by_text("kod çözücü öz-dikkati 30×9").wait_for()
        page.get_by_role("button", name="Seçenekler").click()  # the options' popover (issue 33)
        with _rerun(page):
            page.get_by_text("Sözcük düzeyi", exact=True).click()
        page.wait_for_function("() => location.href.includes('words=1')", timeout=60_000)
        url = page.evaluate("location.href")
        assert "model_key=smollm2-135m" in url and "lang=tr" in url, url
        assert "SmolLM2" in page.locator("[data-testid=stSidebar]").inner_text()

        # the same for a radio with translated labels: the masks page's section survives the switch
        page.goto(app_url + "/masks")
        _settled(page)
        with _rerun(page):
            page.get_by_text("BERT vs GPT", exact=True).click()
        with _rerun(page):
            page.get_by_text("Türkçe", exact=True).click()
        page.get_by_text("BERT ve GPT", exact=True).wait_for()
        box = page.locator("textarea").first
        box.fill("Kedi fareyi kovaladı ve kaçtı")
        with _rerun(page):
            box.press("Control+Enter")
        section = page.locator("[data-testid=stRadio]", has_text="Bölüm").locator("label:has(input:checked)")
        assert section.inner_text() == "BERT ve GPT"
        browser.close()


# Issue 33: a teacher's every click was followed by scrolling (Explore's head view began at y = 671 px, Head
# pruning's grid at 762 px on a 720 px screen). The page's main figure starts in the first screen at 1280 x 720,
# with at least FIRST_SCREEN_SHOWN px of it visible.
FIRST_SCREEN_SHOWN = 200
FIRST_SCREEN = [("/?model_key=minilm-l6", "iframe"), ("/?model_key=smollm2-135m&view=model", ".js-plotly-plot"),
                ("/?model_key=minilm-l6&view=heatmap", ".js-plotly-plot"),
                ("/pruning?model_key=minilm-l6", ".st-key-prune_grid"),
                ("/pruning?model_key=smollm2-135m", ".st-key-prune_grid"),
                # projector mode (issue 29): the text 1.5 times larger, the figure still in the first screen
                ("/?model_key=minilm-l6&scale=projector", "iframe"),
                ("/pruning?model_key=minilm-l6&scale=projector", ".st-key-prune_grid")]


def test_the_main_figure_is_in_the_first_screen(app_url):
    tops = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = _new_page(browser, 1280, 720)
        for path, selector in FIRST_SCREEN:
            for lang in ("en", "tr"):
                page.goto(app_url + path + f"&lang={lang}")
                _settled(page)
                tops[(path, lang)] = page.locator(selector).first.evaluate("e => e.getBoundingClientRect().top")
        browser.close()
    late = {k: v for k, v in tops.items() if v > 720 - FIRST_SCREEN_SHOWN}
    assert not late, late


# Pages whose text issue 13 found cut or overlapping, and the rest of their kind: each at 1280 x 720 (a
# projector) and 1920 x 1080, in both languages. A long Turkish word (word level: one label) and a long
# input (rotated, thinned labels) on the views that draw labels.
LONG_WORD = "Çekoslovakyalılaştıramadıklarımızdanmışsınız ve daha uzun sözcüklerle gelen bir cümle"
LAYOUT_PAGES = [
    "/?model_key=minilm-l6&words=1&text=" + quote(LONG_WORD),
    "/?model_key=smollm2-135m&view=model",
    "/?model_key=smollm2-135m&view=heatmap&text=" + quote(LONG_WORD * 2),
    "/pruning?model_key=minilm-l6",
    "/pruning?model_key=smollm2-135m",
    "/masks?masks_section=encdec",
    "/masks?masks_section=compare&masks_kinds=causal,sliding_window,strided",
    # a decoder adds the KL and drift figures side by side, whose long titles wrap (issue 33)
    "/masks?model_key=smollm2-135m&masks_section=compare&masks_kinds=causal,sliding_window,strided",
    "/qkv", "/positions", "/cost", "/kvcache",
    "/flow?model_key=smollm2-135m", "/flow?model_key=minilm-l6&text=" + quote(LONG_WORD),
    "/why?model_key=smollm2-135m", "/why?model_key=minilm-l6&text=" + quote(LONG_WORD),
    # the Head atlas's controls (an atlas on disk or none, whichever the cache holds) and its upload row
    "/atlas?model_key=minilm-l6", "/atlas?model_key=minilm-l6&atlas_corpus=upload",
]
# Projector mode (issue 29): Explore, Head pruning and Masks again with every text 1.5 times larger (the sidebar's
# "Text size", kept in the link), the head summary table (a zoomed data frame) among them
LAYOUT_PAGES += [path + "&scale=projector" for path in LAYOUT_PAGES if path.startswith(("/?", "/pruning?", "/masks?"))]
LAYOUT_PAGES.append("/?model_key=minilm-l6&view=summary&scale=projector")


def _layout_problems(app_url: str, paths: list[str], shot, prepare=None) -> str:
    """Open each path in both languages at 1280 x 720 and 1920 x 1080, run ``prepare(page, lang)`` if given, and
    measure what the browser drew with tests/browser_layout.js; screenshots are saved as ``shot(number, path, lang,
    width)``. Returns one line per problem ("" when none)."""
    check = (Path(__file__).parents[1] / "browser_layout.js").read_text(encoding="utf-8")
    RESULTS.mkdir(exist_ok=True)
    found = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        for width, height in ((1280, 720), (1920, 1080)):
            page = _new_page(browser, width, height)
            for number, path in enumerate(paths):
                for lang in ("en", "tr"):
                    page.goto(app_url + path + ("&" if "?" in path else "?") + f"lang={lang}")
                    _settled(page)  # measured once the run is over and its charts are drawn, not after a pause
                    if prepare is not None:
                        prepare(page, lang)
                    problems = page.evaluate(check)
                    page.screenshot(path=str(RESULTS / shot(number, path, lang, width)))
                    if problems:
                        found[(path, lang, width)] = problems
            page.close()
        browser.close()
    return "\n".join(f"{path} {lang} {width}px: {problem}" for (path, lang, width), problems in found.items()
                     for problem in problems)


def test_no_text_is_cut_or_drawn_over_other_text(app_url):
    """Issue 13: titles, notes and long words cut at the head view's edge, a figure title running into its
    axis title, rotated labels over each other, panel titles cut by the figure above, table columns and
    button labels cut. tests/browser_layout.js measures what the browser drew; screenshots are saved."""
    report = _layout_problems(app_url, LAYOUT_PAGES, lambda number, path, lang, width: (
        f"layout-{number:02d}-{path.strip('/').split('?')[0] or 'explore'}{'-projector' * ('scale=' in path)}-{lang}-"
        f"{width}.png"))
    (RESULTS / "layout-problems.txt").write_text(report, encoding="utf-8")
    assert not report, report


# Each experiment after its run (issue 15): figures side by side, the published-vs-ours table, long captions.
EXPERIMENT_PAGES = [("sinks", "smollm2-135m"), ("induction", "smollm2-135m"), ("clark", "multilingual-e5-small"),
                    ("alignment", "whisper-base"), ("prunable", "minilm-l6")]


def test_every_experiments_result_is_drawn_without_cut_or_overlapping_text(app_url):
    """The first visit presses the run button; the server's shared cache then shows the same result to every later
    visit (other language, other width) with no run."""

    def run_once(page, lang: str) -> None:
        done = page.get_by_text("This run took" if lang == "en" else "Bu çalıştırma", exact=False)
        if not done.count():
            with _rerun(page):
                page.get_by_role("button", name="Run the experiment" if lang == "en" else "Deneyi çalıştır").click()
                done.first.wait_for(timeout=RUN_TIMEOUT)

    paths = [f"/experiments?exp_which={which}&model_key={model}" for which, model in EXPERIMENT_PAGES]
    paths += [path + "&scale=projector" for path in paths]  # projector mode (issue 29): every text 1.5 times larger
    report = _layout_problems(app_url, paths, lambda number, path, lang, width: (
        f"experiments-{EXPERIMENT_PAGES[number % len(EXPERIMENT_PAGES)][0]}{'-projector' * ('scale=' in path)}-{lang}-"
        f"{width}.png"), prepare=run_once)
    assert not report, report


def test_the_layout_check_finds_text_outside_a_chart_and_text_over_text():
    """The check itself (tests/browser_layout.js), on plotly charts drawn in a blank page: nothing in a chart that
    fits its box; "outside" for one drawn wider than its box (as Streamlit's first draw of a 560 px mask in a 263 px
    column was), "overlap" for two texts drawn over each other. Waiting for a settled page must not hide these."""
    import plotly

    check = (ROOT / "tests" / "browser_layout.js").read_text(encoding="utf-8")
    plotly_js = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    heatmap = "[{type: 'heatmap', z: [[0, 0.05], [0.1, 0.3]], x: ['0,80s', '1,60s']}]"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        page.set_content('<div data-testid="stMain"><div style="width: 263px"><div id="chart"></div></div></div>')
        page.add_script_tag(path=str(plotly_js))

        def drawn(layout: str) -> list:
            page.evaluate(f"() => Plotly.newPlot('chart', {heatmap}, {{separators: ',.', ...{layout}}})")
            return page.evaluate(check)

        assert drawn("{width: 263, height: 300}") == []
        wide = drawn("{width: 560, height: 300}")
        assert {(kind, text) for kind, _, text in wide} >= {("outside", "1,60s"), ("outside", "0,3")}, wide
        over = drawn("{width: 263, height: 300, annotations: [{x: 0, y: 0, text: 'birinci'}, "
                     "{x: 0, y: 0, text: 'ikinci'}]}")
        assert [kind for kind, _, _ in over] == ["overlap"], over
        browser.close()


def test_the_uploaders_errors_are_in_the_pages_language(app_url):
    """Issue 50 point 6: Streamlit writes an uploaded file's error in English whatever the page's language. On the
    Turkish interface (views/shared/uploader_words.py) a PDF given to the Head atlas's corpus upload (TXT, CSV,
    JSONL or Parquet) reads "application/pdf türündeki dosyalar kabul edilmiyor." in the tooltip over its chip,
    and every other message Streamlit writes there, put into the uploader, is rewritten with its parts (the size
    limit) kept; in English it stays Streamlit's."""
    from views.shared import uploader_words

    pdf = {"name": "notlar.pdf", "mimeType": "application/pdf", "buffer": b"%PDF-1.4\n"}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = _new_page(browser, 1280, 720)
        for lang, said in (("tr", "application/pdf türündeki dosyalar kabul edilmiyor."),
                           ("en", "application/pdf files are not allowed.")):
            page.goto(app_url + f"/atlas?model_key=minilm-l6&atlas_corpus=upload&lang={lang}")
            _settled(page)
            page.locator("[data-testid=stFileUploader] input[type=file]").first.set_input_files(files=[pdf])
            page.locator("[data-testid=stFileChip]").first.hover()  # the error is the tooltip over the file's chip
            page.wait_for_function("t => document.querySelector('[data-testid=stTooltipErrorContent]')?.innerText"
                                   ".trim() === t", arg=said, timeout=RUN_TIMEOUT)
            if lang == "tr":
                assert "not allowed" not in page.locator("[data-testid=stFileUploader]").first.inner_text()
                for en, tr in uploader_words.pairs():  # each message, as Streamlit would write it there
                    shown = en.replace("{size}", "10.0MB").replace("{type}", "text/html")
                    page.evaluate("t => { const p = document.createElement('p'); p.className = 'dk-probe'; "
                                  "p.textContent = t; document.querySelector('[data-testid=stFileUploader]')"
                                  ".appendChild(p); }", shown)
                    page.wait_for_function("t => [...document.querySelectorAll('.dk-probe')].some(p => "
                                           "p.textContent === t)", arg=tr.replace("{size}", "10.0MB")
                                           .replace("{type}", "text/html"), timeout=10_000)
        browser.close()
