"""The shipped lesson walked through by a teacher and three students in real browsers (issue 50), for
tests/browser/test_lesson_browser.py (which asserts what the room sees) and bench/lesson_room.py (which times each
step on a server started as ``make serve`` starts it).

The teacher at 1280 x 720 (a projector) opens a class on the Class page and starts the shipped lesson in Turkish;
two students join by the link (a laptop at 1280 x 720, a phone at 390 x 844), a third (a late joiner, 1280 x 720)
at step 2. On every step: the teacher's Previous / Next and Ask / Reveal are in the first screen; every student's
page shows the step (its text in the lesson's box at the top of the main page, views/live_sections/stage.py) and no
question of an earlier step; on a step with a question, the phone shows the question first, above the page, in its
first screen; every student answers, the laptop reloads and changes its answer (step 1), and the count stays exact (one
answer per student, also in the revealed total). Each step's seconds from the teacher's click to every page
settled are returned."""

from __future__ import annotations

import json
import time
from pathlib import Path
from statistics import median

from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import sync_playwright

from live import lessons as L

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "test-results"
CHROMIUM = "/usr/bin/chromium"
RUN_COUNTER = (ROOT / "tests" / "browser_runs.js").read_text(encoding="utf-8")
SETTLED = (ROOT / "tests" / "browser_settled.js").read_text(encoding="utf-8")
WAIT = 300_000  # a limit for a hung page only: a first visit loads a model on a busy 2-core machine


STRINGS: dict = {}
for _file in sorted((ROOT / "assets" / "i18n").glob("*.json")):
    STRINGS.update(json.loads(_file.read_text(encoding="utf-8")))
TITLE_KEY = {"pruning": "prune_title", "kvcache": "kv_title", "positions": "pos_title", "experiments": "exp_title"}


def tr(key: str, **kw) -> str:
    return STRINGS[key]["tr"].format(**kw)


def _page(browser, width: int, height: int, phone: bool = False):
    context = browser.new_context(viewport={"width": width, "height": height}, is_mobile=phone, has_touch=phone,
                                  device_scale_factor=1)
    page = context.new_page()
    page.add_init_script(RUN_COUNTER)
    return page


def _settled(page) -> None:
    page.wait_for_function(SETTLED, arg=0, polling="raf", timeout=WAIT)


def _stage_says(page, text: str) -> None:
    """Wait until the lesson's box at the top of the main page holds ``text``."""
    page.wait_for_function(
        "t => { const s = document.querySelector('.st-key-live_stage'); return !!s && s.innerText.includes(t); }",
        arg=text, timeout=WAIT)


def _title_is(page, page_name: str) -> None:
    title = STRINGS[TITLE_KEY.get(page_name, f"{page_name}_title")]["tr"]
    page.wait_for_function("t => [...document.querySelectorAll('h1')].some(h => h.innerText.trim() === t)",
                           arg=title, timeout=WAIT)


def _press(page, key: str) -> None:
    page.locator(f".st-key-{key} button").first.click()


def _in_first_screen(page, selector: str, height: int) -> None:
    try:
        box = page.locator(selector).first.bounding_box(timeout=60_000)
    except PlaywrightTimeout:
        page.screenshot(path=str(RESULTS / "lesson-missing.png"))
        raise
    assert box is not None, selector
    assert box["y"] >= 0 and box["y"] + box["height"] <= height, (selector, box)


def _radios(page):
    return page.locator(".st-key-live_stage [role=radiogroup] label")


def _answer(page, index: int) -> None:
    _radios(page).nth(index).click()
    _press(page, "live_send")
    _stage_says(page, "Gönderildi")


def _step_shown(page, step: L.Step, n: int, total: int, title: str, who: str) -> None:
    try:
        _stage_says(page, tr("live_step_of", title=title, n=n, total=total))
        _title_is(page, step.page)
        _settled(page)
    except PlaywrightTimeout as exc:  # what the page shows instead, for the report
        page.screenshot(path=str(RESULTS / f"lesson-stuck-{who}-{n}.png"))
        stage = page.locator(".st-key-live_stage")
        shown = stage.first.inner_text()[:300] if stage.count() else "(no lesson box)"
        state = page.evaluate("() => [document.querySelector('[data-testid=stApp]')?.getAttribute("
                              "'data-test-script-state'), window.__dikkatRuns, window.__dikkatWaitingFor, "
                              "(window.__dikkatWatch || {}).wakes, "
                              "document.querySelectorAll('[data-testid=stMain] *').length]")
        (RESULTS / f"lesson-stuck-{who}-{n}.html").write_text(page.content(), encoding="utf-8")
        page.wait_for_timeout(2000)  # how fast the runs go on: a page that never stays still
        runs = page.evaluate("window.__dikkatRuns")
        raise AssertionError(f"step {n}: the {who}'s page ({page.url}) shows {shown!r}; script state, runs, "
                             f"waiting for, watchdog wakes, elements in the main area: {state}; runs 2 s "
                             f"later: {runs}") from exc


def walk(app_url: str, token: str, shots: Path | None = None, reloads: frozenset[int] = frozenset({1}),
         on_room=None) -> list[dict]:
    """Walk the shipped lesson ``attention-intro`` on the app at ``app_url`` (its teacher token ``token``) as
    the module says, asserting what the room sees; the laptop reloads and changes its answer on the steps numbered
    in ``reloads`` (from 1; a step without a question is passed over); screenshots of each step for the teacher and
    the phone in ``shots`` (JPEG) when given; ``on_room(code)`` is called once the class is open (a benchmark's
    students over the protocol join then). Returns one ``{"step", "page", "settled_s"}`` per step.

    Found by it (issue 50): a student stayed on step 3 for good when the teacher moved to step 4 (3 of 7 walks, with
    or without a reload): its poll had lost its timer in the browser (views/live_sections/polling.keep).

    Raises:
        AssertionError: a page that does not show what the room should see (the page's screenshot in
            test-results/).
    """
    lesson = next(x for x in L.shipped_lessons() if x.id == "attention-intro")
    total, title = len(lesson.steps), lesson.title["tr"]
    RESULTS.mkdir(exist_ok=True)
    if shots is not None:
        shots.mkdir(parents=True, exist_ok=True)
    timings = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        teacher = _page(browser, 1280, 720)
        teacher.goto(app_url + "/live?lang=tr", timeout=120_000)
        teacher.locator(".st-key-live_token input").fill(token)
        _press(teacher, "live_open")
        teacher.locator(".live-code").wait_for(timeout=WAIT)
        code = teacher.locator(".live-code").inner_text().replace("\u2009", "").strip()
        link = f"{app_url}/?room={code}&lang=tr"
        if on_room is not None:
            on_room(code)
        laptop, phone = _page(browser, 1280, 720), _page(browser, 390, 844, phone=True)
        late = None
        for student in (laptop, phone):
            student.goto(link, timeout=120_000)
            student.wait_for_function("t => document.body.innerText.includes(t)", arg=tr("live_following", code=code)
                                      .replace("**", ""), timeout=WAIT)
        _settled(teacher)
        _press(teacher, "live_lesson_start")
        for index, step in enumerate(lesson.steps):
            n = index + 1
            if index == 1:  # a late joiner: the current step only, no question of the step before
                late = _page(browser, 1280, 720)
                late.goto(link, timeout=120_000)
            students = [s for s in (laptop, phone, late) if s is not None]
            clicked = time.perf_counter()
            _step_shown(teacher, step, n, total, title, "teacher")
            for who, student in zip(("laptop", "phone", "late"), students):
                _step_shown(student, step, n, total, title, who)
            timings.append({"step": n, "page": step.page, "settled_s": round(time.perf_counter() - clicked, 2)})
            for page in [teacher, *students]:  # Next cleared the question before it, everywhere
                assert _radios(page).count() == 0, (n, "a question of an earlier step is still shown")
                assert page.locator(".st-key-live_stage [data-testid=stPlotlyChart]").count() == 0, n
            for key in ("live_previous", "live_next"):
                _in_first_screen(teacher, f".st-key-{key} button", 720)
            if step.question is not None:
                _in_first_screen(teacher, ".st-key-live_ask_step button", 720)
                _press(teacher, "live_ask_step")
                teacher.locator(".st-key-live_reveal_main button").wait_for(timeout=WAIT)
                _in_first_screen(teacher, ".st-key-live_reveal_main button", 720)
                for student in students:
                    _radios(student).first.wait_for(timeout=WAIT)
                # on the phone the open question is first: above the page's title, in its first screen
                stage_y = phone.locator(".st-key-live_stage").bounding_box()["y"]
                assert stage_y < phone.locator("h1").first.bounding_box()["y"]
                _in_first_screen(phone, ".st-key-live_stage [role=radiogroup]", 844)
                _settled(phone)
                _shot(phone, shots, f"step-{n:02d}-phone-question")
                for k, student in enumerate(students):
                    _answer(student, k % _radios(student).count())
                if n in reloads:  # a reload keeps the seat and its answer; changing it is still one answer
                    laptop.reload()
                    _stage_says(laptop, "Gönderildi")
                    _answer(laptop, 1)
                teacher.wait_for_function(
                    "t => document.querySelector('[data-testid=stSidebar]').innerText.includes(t)",
                    arg=tr("live_answered_count", n=len(students)), timeout=WAIT)
                _press(teacher, "live_reveal_main")
                for page in [teacher, *students]:
                    _stage_says(page, tr("live_answered_total", n=len(students)))
                    page.locator(".st-key-live_stage [data-testid=stPlotlyChart]").first.wait_for(timeout=WAIT)
                    _settled(page)
            _settled(teacher)
            _shot(teacher, shots, f"step-{n:02d}-teacher")
            _shot(phone, shots, f"step-{n:02d}-phone")
            if n < total:
                _press(teacher, "live_next")
        browser.close()
    return timings


def _shot(page, shots: Path | None, name: str) -> None:
    if shots is not None:
        page.screenshot(path=str(shots / f"{name}.jpg"), type="jpeg", quality=70)


def percentile(values: list[float], q: float) -> float:
    """The ``q``-quantile (0..1) of ``values`` by the nearest rank (seconds)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


def summary(timings: list[dict]) -> dict:
    """p50 and p95 of the steps' seconds from the teacher's click to every page settled."""
    values = [t["settled_s"] for t in timings]
    return {"n": len(values), "p50_s": round(median(values), 2), "p95_s": round(percentile(values, 0.95), 2),
            "max_s": max(values)}
