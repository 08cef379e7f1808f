"""A live class in a real browser (issue 29): the app served as ``make run`` serves it (with a teacher token), one
Chromium page as the teacher and two as students, each its own browser session. The teacher opens a class on the
Class page; one student arrives by the link's ``?room=`` (the QR code's), the other types the code; the teacher
starts the shipped lesson and steps through it, and the students' pages follow by the sidebar's poll (a fragment,
every two seconds, and at once when woken) with no click of theirs; a detached student stays, and Rejoin jumps to
the teacher's page; the step's
question is answered by both and revealed, with the class's answers beside the model's, at the top of the main
page (views/live_sections/stage.py).

Screenshots at 1280 x 720: ``docs/screenshots/live-{en,tr}-1280.png`` (a student's screen after the reveal, in
English and in Turkish) and ``live-teacher-en-1280.png`` (the teacher's desk with the class code and QR code)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "deploy"))

import replicas  # noqa: E402
from launch import streamlit_command  # noqa: E402

SHOTS = ROOT / "docs" / "screenshots"
RESULTS = ROOT / "test-results"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SETTLED = (ROOT / "tests" / "browser_settled.js").read_text(encoding="utf-8")
RUN_COUNTER = (ROOT / "tests" / "browser_runs.js").read_text(encoding="utf-8")
TOKEN = "browser-test-teacher-token"
WAIT = 300_000  # a limit for a hung page only: a first visit loads a model on a busy 2-core machine
TITLES = {"qkv": {"en": "Q/K/V step by step", "tr": "Adım adım sorgu, anahtar, değer (Q/K/V)"},
          "explore": {"en": "Explore attention", "tr": "Dikkati keşfet"}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def app_url():
    """The app on a free port with a teacher token set; stopped afterwards."""
    port = _free_port()
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", DIKKAT_TEACHER_TOKEN=TOKEN)
    env.pop("DIKKAT_REDIS_URL", None)
    (ROOT / "test-results").mkdir(exist_ok=True)
    log = open(ROOT / "test-results" / "live-app-server.log", "wb")  # noqa: SIM115  (for a failing test's report)
    proc = subprocess.Popen(streamlit_command(port, "127.0.0.1"), cwd=ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        replicas.wait_healthy(url, proc, timeout=90)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _page(browser):
    """A page of its own browser context (its own Streamlit session) at 1280 x 720, counting finished runs."""
    page = browser.new_context(viewport={"width": 1280, "height": 720}).new_page()
    page.add_init_script(RUN_COUNTER)
    return page


def _settled(page) -> None:
    """Wait until the page has finished a run and drawn it (tests/browser_settled.js)."""
    page.wait_for_function(SETTLED, arg=0, polling="raf", timeout=WAIT)


def _shows(page, text: str) -> None:
    """Wait until ``text`` is on the page (the sidebar included)."""
    page.wait_for_function("t => document.body.innerText.includes(t)", arg=text, timeout=WAIT)


def _title_is(page, page_name: str, lang: str) -> None:
    page.wait_for_function("t => [...document.querySelectorAll('h1')].some(h => h.innerText.trim() === t)",
                           arg=TITLES[page_name][lang], timeout=WAIT)


def _click(page, name: str) -> None:
    page.get_by_role("button", name=name, exact=True).first.click()


def _open_class(teacher, app_url: str) -> str:
    """The teacher opens a class on the Class page with the token; returns the class code the desk shows."""
    teacher.goto(app_url + "/live", timeout=120_000)
    teacher.get_by_label("Teacher token", exact=True).fill(TOKEN)
    _click(teacher, "Open a class")
    teacher.locator(".live-code").wait_for(timeout=WAIT)
    return teacher.locator(".live-code").inner_text().replace("\u2009", "").strip()


def _answer(page, label: str, send: str) -> None:
    page.locator(".st-key-live_stage [role=radiogroup] label").filter(has_text=label).first.click()
    _click(page, send)


def _report(pages: dict) -> str:
    """What each page showed and the server's last lines, for a failing run's log (CI keeps only its output)."""
    lines = []
    for name, page in pages.items():
        try:
            runs = page.evaluate("window.__dikkatRuns")
            text = page.evaluate("document.body.innerText")[:1200]
            page.screenshot(path=str(RESULTS / f"live-failed-{name}.png"))
        except Exception as exc:  # noqa: BLE001  (a report must not hide the failure it reports)
            runs, text = None, f"(unreadable: {exc})"
        lines.append(f"--- {name}: {page.url} (runs seen: {runs})\n{text}")
    log = ROOT / "test-results" / "live-app-server.log"
    tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-60:] if log.exists() else []
    return "\n".join([*lines, "--- server log (last 60 lines)", *tail])


def test_a_student_whose_page_lost_what_it_drew_is_drawn_again(app_url):
    """bench/lesson_room.py: a student's step showed the lesson's box over an empty page for 300 s, its link holding
    the run's number (views/live_sections/redraw.py). Here the student's page loses what its last full run drew (the
    run's marker taken out of the page, as the page's elements were): the poll's watchdog finds the marker missing
    and the page is drawn again, with a new marker; without it nothing runs the page again."""
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        teacher, student = _page(browser), _page(browser)
        try:
            code = _open_class(teacher, app_url)
            student.goto(f"{app_url}/?room={code}&lang=en", timeout=120_000)
            _shows(student, "Following the teacher")
            _click(teacher, "Start the lesson")
            _title_is(student, "qkv", "en")
            _settled(student)
            marker = ".dk-drawn"
            drawn = student.evaluate(
                f"Math.max(...[...document.querySelectorAll('{marker}')].map(e => +e.dataset.run))"
            )
            assert drawn >= 1
            student.evaluate(f"document.querySelectorAll('{marker}').forEach(e => e.className = 'gone')")
            student.wait_for_function(
                f"n => [...document.querySelectorAll('{marker}')].some(e => +e.dataset.run > n)", arg=drawn,
                timeout=60_000)
            _title_is(student, "qkv", "en")
        except Exception:
            print(_report({"teacher": teacher, "student": student}))
            raise
        finally:
            browser.close()


def test_a_teacher_and_two_students(app_url):
    SHOTS.mkdir(parents=True, exist_ok=True)
    RESULTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        teacher, turkish, english = _page(browser), _page(browser), _page(browser)
        try:
            _lesson(app_url, teacher, turkish, english)
        except Exception:
            print(_report({"teacher": teacher, "turkish": turkish, "english": english}))
            raise
        finally:
            browser.close()


def _lesson(app_url, teacher, turkish, english) -> None:
    """The class's walk: see the module's docstring."""
    # the teacher opens a class: the code is drawn big, with the QR code of the students' link
    code = _open_class(teacher, app_url)
    teacher.locator(".st-key-live_qr img").wait_for(timeout=WAIT)
    assert len(code) == 6 and teacher.locator(".st-key-live_qr img").count() == 1
    assert TOKEN not in teacher.content() and "secret" not in teacher.url
    _settled(teacher)
    teacher.screenshot(path=str(SHOTS / "live-teacher-en-1280.png"))

    # one student by the link (the QR code's), one by the typed code
    turkish.goto(f"{app_url}/?room={code}&lang=tr", timeout=120_000)
    _shows(turkish, "Öğretmeni izliyorsunuz")
    english.goto(app_url + "/?lang=en", timeout=120_000)
    _settled(english)  # the page drawn before a click, as a student sees it (a click mid-run can be redrawn away)
    english.get_by_text("Join a live class", exact=True).click()
    english.get_by_label("Class code", exact=True).wait_for(state="visible", timeout=WAIT)
    english.get_by_label("Class code", exact=True).fill(code.lower())
    english.screenshot(path=str(RESULTS / "live-join-en-1280.png"))
    _click(english, "Join")
    _shows(english, "Following the teacher")
    _shows(teacher, "2 connected")

    # the lesson's first step: both students' pages follow by themselves
    _click(teacher, "Start the lesson")
    _title_is(teacher, "qkv", "en")
    _title_is(turkish, "qkv", "tr")
    _title_is(english, "qkv", "en")
    _shows(turkish, "Sorgular, anahtarlar ve değerler")  # the step's text in the student's language
    _shows(english, "Queries, keys and values")

    # the English student detaches and stays; the teacher moves on; Rejoin jumps there
    _click(english, "Detach")
    _shows(english, "Exploring on your own")
    _click(teacher, "Next ▶")
    _shows(teacher, "step 2 of")
    _settled(teacher)
    teacher.screenshot(path=str(RESULTS / "live-teacher-step-en-1280.png"))
    _click(teacher, "Next ▶")
    _title_is(teacher, "explore", "en")
    _title_is(turkish, "explore", "tr")
    english.wait_for_timeout(3000)  # three polls of the detached student's: it must not have moved
    _title_is(english, "qkv", "en")
    _click(english, "Rejoin")
    _title_is(english, "explore", "en")
    _shows(english, "Following the teacher")

    # back to the first step, whose question both answer; the teacher sees the count and reveals
    _click(teacher, "◀ Previous")
    _shows(teacher, "step 2 of")
    _click(teacher, "◀ Previous")
    _title_is(turkish, "qkv", "tr")
    _click(teacher, "Ask this step's question")
    _shows(turkish, "en çok ağırlığı")
    _shows(english, "which key does the query")
    _answer(turkish, "2 · cat", "Yanıtımı gönder")
    _shows(turkish, "Gönderildi")
    _answer(english, "1 · the", "Send my answer")
    _shows(english, "You can change it")
    _shows(teacher, "2 answered")
    _click(teacher, "Reveal the answer")
    for page, lang, said in ((turkish, "tr", "Model:"), (english, "en", "The model:")):
        _shows(page, said)
        page.locator(".st-key-live_stage [data-testid=stPlotlyChart]").first.wait_for(timeout=WAIT)
        _settled(page)
        page.screenshot(path=str(SHOTS / f"live-{lang}-1280.png"))
    # the teacher's desk puts the revealed question first, for the projector
    teacher.locator("[data-testid=stSidebarNav] a").filter(has_text="Class").first.click()
    _shows(teacher, "Class code and QR code")
    _settled(teacher)
    teacher.screenshot(path=str(RESULTS / "live-teacher-results-en-1280.png"))


# Streamlit arms a fragment's timer with setInterval(..., seconds * 1000) (its frontend's handleAutoRerun): this page
# drops those of 1 and 2 seconds, as a full run whose auto_rerun message never arrived leaves a page with none.
NO_POLL_TIMERS = """
window.__droppedTimers = 0;
const realSetInterval = window.setInterval;
window.setInterval = function (fn, ms, ...rest) {
  if (ms === 1000 || ms === 2000) { window.__droppedTimers += 1; return 0; }
  return realSetInterval.call(window, fn, ms, ...rest);
};
"""


def test_a_student_whose_page_lost_its_poll_timer_still_follows(app_url):
    """A student's page with no fragment timer (views/live_sections/polling.py): the student still follows the teacher's
    lesson steps (the server's wake runs the poll, views/live_sections/wake.py), and the poll itself, whose timer is
    gone, is woken by the page's watchdog once it has been quiet for its STALL intervals; without both the page stayed
    where it was for good."""
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        teacher, student = _page(browser), _page(browser)
        student.add_init_script(NO_POLL_TIMERS)
        try:
            code = _open_class(teacher, app_url)
            student.goto(f"{app_url}/?room={code}&lang=en", timeout=120_000)
            _shows(student, "Following the teacher")
            _settled(student)
            _click(teacher, "Start the lesson")
            _title_is(teacher, "qkv", "en")
            _title_is(student, "qkv", "en")
            _click(teacher, "Next ▶")
            _shows(teacher, "step 2 of")
            _click(teacher, "Next ▶")
            _title_is(teacher, "explore", "en")
            _title_is(student, "explore", "en")
            assert student.evaluate("window.__droppedTimers") > 0  # Streamlit's timer was asked for, and never ran
            # the moves came from the server's wake; the poll, with no timer, is woken by the watchdog (8 s quiet)
            student.wait_for_function("() => ((window.__dikkatWatch || {}).wakes || 0) >= 1", timeout=60_000)
        except Exception:
            print(_report({"teacher": teacher, "student": student}))
            raise
        finally:
            browser.close()
