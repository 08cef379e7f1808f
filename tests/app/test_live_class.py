"""A live class in the app (issue 29): one AppTest as the teacher and two as students in one process, sharing the
process's room store: every test runs twice, on the one-process store (live.MemoryStore) and on a real Redis
(live.RedisStore, as the replicas of `make serve REPLICAS=N` share it; ``redis_url`` in tests/conftest.py). The
teacher opens a room on the Class page; the students join (a typed code, a link's ?room=); the teacher's page,
model, sentence, layer and heads switched off reach the students on their next run; a detached student stays where
they are and rejoining jumps to the teacher's page; a question is answered by both and revealed with the class's
counts beside the model's answer; a lesson is stepped through in Turkish and English and the session saved as a
lesson; no student session can act as the teacher; and a teacher who reloads the page leads the same class again
with the teacher token, while the same link without it makes a student at most.

A student's page follows from the sidebar's poll (views/live_sections/room.py: ``poll``), which a fragment runs
every two seconds in a browser and every full run runs inline first: here ``AppTest.run`` is that full run."""

from __future__ import annotations

import json
import time
import tomllib
from pathlib import Path

import pytest
import redis
from streamlit.testing.v1 import AppTest

import live
from live import lessons as L
from views import shared
from views.live_sections import redraw, room

APP = str(Path(__file__).resolve().parents[2] / "app.py")
TOKEN = "teacher-token-for-tests"
TEXT = "The cat chased the mouse"


@pytest.fixture(autouse=True, params=["memory", "redis"])
def store_kind(request, monkeypatch):
    """The server's teacher token, and a fresh store for each test: one process's memory, or an emptied database of
    the tests' Redis (``DIKKAT_REDIS_URL``, as ``make serve REPLICAS=N`` sets it). Every AppTest has the same
    session id and no address (one client), so the rate limits would carry over from test to test."""
    monkeypatch.setenv("DIKKAT_TEACHER_TOKEN", TOKEN)
    monkeypatch.delenv("REPLICAS", raising=False)
    monkeypatch.setattr(live, "_stores", {})
    if request.param == "redis":
        url = request.getfixturevalue("redis_url").rsplit("/", 1)[0] + "/1"  # tests/deploy use database 0
        with redis.Redis.from_url(url) as client:
            client.flushdb()
        monkeypatch.setenv("DIKKAT_REDIS_URL", url)
    else:
        monkeypatch.delenv("DIKKAT_REDIS_URL", raising=False)
    yield request.param
    used = live.store_from_env()
    assert isinstance(used, {"memory": live.MemoryStore, "redis": live.RedisStore}[request.param]), used


def _run(what) -> AppTest:
    """Run the app (an AppTest, or a widget of one just set or clicked) and check it raised nothing."""
    at = what.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def _app(lang: str = "en", **query) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=600)
    at.session_state["lang"] = lang
    at.session_state["model_key"] = "minilm-l6"
    at.session_state["text"] = TEXT
    for key, value in query.items():
        at.query_params[key] = value
    return _run(at)


def _title(at: AppTest, page: str) -> bool:
    key = {"pruning": "prune_title", "kvcache": "kv_title", "positions": "pos_title"}.get(page, f"{page}_title")
    return bool(at.title) and at.title[0].value == shared._strings()[key][at.session_state["lang"]]


def _said(at: AppTest) -> str:
    """Everything the sidebar and the page wrote as markdown, captions and messages."""
    parts = [str(e.value) for kind in ("markdown", "caption", "error", "info", "warning") for e in at.get(kind)]
    parts += [str(e.value) for kind in ("markdown", "caption", "error") for e in at.sidebar.get(kind)]
    return "\n".join(parts)


def _teacher(lang: str = "en") -> tuple[AppTest, str]:
    at = _app(lang)
    at.switch_page("views/live.py")
    _run(at)
    at.text_input(key="live_token").input(TOKEN)
    _run(at.button(key="live_open").click())
    code = at.session_state["_live_code"]
    assert not [w for w in at.text_input if w.key == "live_token"]  # the token is never drawn again
    assert at.session_state["live_token"] == "" if "live_token" in at.session_state else True
    assert TOKEN not in _said(at)
    assert f"?room={code}" in _said(at).replace("\\", "")  # the students' link, beside its QR code
    assert at.get("image"), "no QR code"
    assert _class_in_link(at) == {"teach": code}  # of the class, only its code in the teacher's link
    return at, code


def _class_in_link(at: AppTest) -> dict:
    """What the session's link holds beyond the page's own parameters (the sidebar's and the language)."""
    page = {k for keys in L.PARAMS.values() for k in keys} | set(L.SIDEBAR) | {"lang"}
    held = {k: v for k, v in dict(at.query_params).items() if k not in page}
    shown = held.pop(room.SHOWN, None)  # the version of the state the page was drawn for: a number, nothing else
    assert shown is None or shown.isdigit()  # a student's or the teacher's own, never broadcast
    secret = at.session_state["_live_secret"] if "_live_secret" in at.session_state else None  # noqa: SIM401  (AppTest's state has no .get)
    assert not secret or all(secret not in str(v) for v in dict(at.query_params).values())
    return held


def _join_typed(lang: str, code: str) -> AppTest:
    at = _app(lang)
    at.text_input(key="live_code_input").input(code.lower())
    return _run(at.button(key="live_join").click())


def _store() -> live.RoomStore:
    """The store the app's sessions share (the test's kind: :func:`store_kind`)."""
    return live.store_from_env()


def _answered(code: str, qid: int) -> set[str]:
    """The student ids the store holds an answer of (before the reveal), whichever store it is."""
    store = _store()
    if isinstance(store, live.RedisStore):
        return set(store.redis.hkeys(store._key(code, f"answers:{qid}")))
    return set(store._rooms[code].questions[qid].answers)


def _answer(at: AppTest, value: str) -> None:
    qid = at.session_state["_live_state"]["question"]["id"]
    at.radio(key=f"live_pick_{qid}").set_value(value)
    _run(at.button(key="live_send").click())


def _stage(at: AppTest):
    """The block of the class's lines at the top of the main area (views/live_sections/stage.py), or None."""
    def walk(node):
        if getattr(getattr(node, "proto", None), "id", "").endswith("live_stage"):
            return node
        for child in getattr(node, "children", {}).values():
            found = walk(child)
            if found is not None:
                return found
        return None

    return walk(at.main)


def _stage_markdown(at: AppTest) -> list[str]:
    """Every markdown of the class's lines (the step, the question, the answers)."""
    block = _stage(at)
    assert block is not None, "no class's lines on the main page"
    return [str(e.value) for e in block.get("markdown")]


def _bars(at: AppTest) -> dict[str, int]:
    """The revealed figure's bars: label -> count (plotly JSON of the chart; tests/plotly_json.py decodes arrays)."""
    from plotly_json import decode

    charts = [json.loads(c.proto.spec) for c in _stage(at).get("plotly_chart")]
    assert charts, "no results chart"
    fig = charts[-1]
    bar = fig["data"][0]
    ticks = fig["layout"]["yaxis"]["ticktext"]
    return {str(t).split(" ◀")[0].replace("<b>", "").replace("</b>", ""): int(x)
            for t, x in zip(ticks, decode(bar["x"]))}


def test_students_follow_detach_rejoin_and_answer_a_question():
    teacher, code = _teacher("en")
    first = _join_typed("tr", code)  # a typed code, lower case, in Turkish
    second = _app("en", room=code)  # the teacher's link (QR code)
    for student in (first, second):
        assert student.session_state["_live_code"] == code and student.session_state["_live_follow"]
        # the room code and the student's own seat are all a student's link holds (never the teacher's secret)
        assert _class_in_link(student) == {"room": code, "seat": student.session_state["_live_student"]}
    assert _store().present(code) == 2

    # Explore -> layer 3: both students' next run shows it
    teacher.switch_page("views/explore.py")
    _run(teacher)
    _run(teacher.slider(key="layer").set_value(3))
    assert "· 2 connected" in _said(teacher)
    for student in (first, second):
        _run(student)
        assert _title(student, "explore") and student.slider(key="layer").value == 3
        assert student.text_area(key="text").value == TEXT and student.selectbox(key="model_key").value == "minilm-l6"
    assert first.session_state["lang"] == "tr" and second.session_state["lang"] == "en"  # their own language

    # Head pruning with a head switched off
    teacher.switch_page("views/pruning.py")
    teacher.query_params["off"] = "encoder.0.1,encoder.2.3"
    _run(teacher)
    for student in (first, second):
        _run(student)
        assert _title(student, "pruning")
        assert sorted(map(tuple, student.session_state[shared.HEADS_OFF_KEY]["minilm-l6"])) == [
            ("encoder", 0, 1), ("encoder", 2, 3)]

    late = _app("en", room=code)  # a late joiner is on the teacher's page at once
    assert _title(late, "pruning") and shared.HEADS_OFF_KEY in late.session_state

    # the second student detaches and stays; the first follows to Q/K/V; rejoining jumps there
    _run(second.button(key="live_detach").click())
    assert "Exploring on your own" in _said(second)
    teacher.switch_page("views/qkv.py")
    _run(teacher)
    _run(first)
    _run(second)
    assert _title(first, "qkv") and _title(second, "pruning")
    _run(second.button(key="live_rejoin").click())
    _run(second)
    assert _title(second, "qkv") and second.session_state["_live_follow"]

    # a question on the page the class sees: both answer, the teacher sees the count, reveals
    teacher.switch_page("views/live.py")
    _run(teacher)
    teacher.number_input(key="live_q_layer").set_value(0)
    teacher.number_input(key="live_q_head").set_value(2)
    teacher.number_input(key="live_q_query").set_value(3)
    _run(teacher.button(key="live_q_ask").click())
    question = _store().get_state(code)["question"]
    assert question["kind"] == "top_key" and len(question["choices"]) >= 2
    assert "chased" in question["prompt"]["en"] and "chased" in question["prompt"]["tr"]
    for student, pick in ((first, question["choices"][0]), (second, question["choices"][1])):
        _run(student)
        assert _title(student, "qkv")  # asking moves nobody
        _answer(student, pick)
    _run(first.radio(key=f"live_pick_{question['id']}").set_value(question["choices"][2]))
    _run(first.button(key="live_send").click())  # changed before the reveal: still one answer
    assert _answered(code, question["id"]) == {first.session_state["_live_student"],
                                               second.session_state["_live_student"]}
    _run(teacher)
    assert "2 answered" in _said(teacher)
    _run(teacher.button(key="live_reveal_main").click())
    results = _store().results(code, question["id"])
    assert results["total"] == 2 and results["measured"]["answer"] in question["choices"]
    assert not _answered(code, question["id"])  # who answered what is gone
    labels = question["labels"]
    for student, lang in ((first, "tr"), (second, "en")):
        _run(student)
        bars = _bars(student)
        assert bars[labels[question["choices"][2]][lang]] == 1 and bars[labels[question["choices"][1]][lang]] == 1
        assert sum(bars.values()) == 2
        said = "Model:" if lang == "tr" else "The model:"
        assert said in _said(student)
        assert ("yanıt (adsız)" if lang == "tr" else "answers (anonymous)") in _said(student)
    assert "The model:" in _said(teacher)


def test_a_lesson_steps_in_each_students_language_and_saves_as_a_lesson(monkeypatch):
    written = []
    save = L.save_lesson

    def keep(lesson, path):  # what the download button serves is the file save_lesson wrote
        save(lesson, path)
        written.append(Path(path).read_text(encoding="utf-8"))

    monkeypatch.setattr(L, "save_lesson", keep)
    teacher, code = _teacher("tr")
    english = _app("en", room=code)
    turkish = _app("tr", room=code)
    lesson = L.load_lesson(L.LESSONS / "attention-intro.toml")
    assert f"{lesson.title['tr']}: {len(lesson.steps)} adım" in _said(teacher)  # in the teacher's language
    teacher.selectbox(key="live_lesson_pick").set_value(lesson.id)
    _run(teacher.button(key="live_lesson_start").click())
    assert _title(teacher, lesson.steps[0].page)
    _run(teacher.button(key="live_next").click())
    step = lesson.steps[1]
    assert _title(teacher, step.page)
    assert step.text["tr"][:40] in _said(teacher).replace("\\", "")
    for student, lang in ((english, "en"), (turkish, "tr")):
        _run(student)
        assert _title(student, step.page) and student.session_state["lang"] == lang
        assert step.text[lang][:40] in _said(student).replace("\\", "")
        assert step.text[{"en": "tr", "tr": "en"}[lang]][:40] not in _said(student).replace("\\", "")
    _run(teacher.button(key="live_previous").click())
    step = lesson.steps[0]
    assert step.question is not None
    _run(teacher.button(key="live_ask_step").click())
    question = _store().get_state(code)["question"]
    assert question["prompt"] == step.question.prompt
    for student in (english, turkish):
        _run(student)
        assert _title(student, step.page)
        _answer(student, question["choices"][0])
    _run(teacher.button(key="live_reveal_main").click())
    assert _store().results(code, question["id"])["measured"]["answer"] == "2"  # tests/app/test_lesson_steps.py
    for student in (english, turkish):
        _run(student)
        assert sum(_bars(student).values()) == 2
    # the session as a lesson: the states broadcast, the question asked; a file that loads again
    teacher.switch_page("views/live.py")
    _run(teacher)
    assert teacher.get("download_button"), "no download button"
    saved = L.parse_lesson(tomllib.loads(written[-1]))
    assert [s.page for s in saved.steps] == [lesson.steps[0].page, lesson.steps[1].page, lesson.steps[0].page]
    assert saved.steps[-1].question is not None and saved.steps[-1].params["qkv_query"] == 3
    assert not list(L.LESSONS.glob("class-*.toml"))  # never written into the app's lessons/


def test_no_student_session_can_act_as_the_teacher():
    teacher, code = _teacher("en")
    secret = teacher.session_state["_live_secret"]
    teacher.switch_page("views/explore.py")
    _run(teacher)
    version = _store().version(code)
    # every name a link could carry; none reaches the session's teacher state
    forged = {"room": code, "secret": secret[:10] + "x", "_live_secret": "x", "live_secret": "x", "_live_code": code,
              "live_broadcast": "1", "student": "someone-else", "_live_student": "someone-else"}
    student = _app("en", **forged)
    assert student.session_state["_live_code"] == code
    assert "_live_secret" not in student.session_state and student.session_state["_live_student"] != "someone-else"
    assert not [b for b in student.get("toggle") if b.key == "live_broadcast"]
    for key in ("live_reveal_main", "live_previous", "live_next", "live_ask_step"):
        assert not [b for b in student.button if b.key == key], key
    assert _title(student, "explore")  # it followed the teacher there
    _run(student.checkbox(key="hide_special").check())
    student.switch_page("views/pruning.py")
    _run(student)
    assert _store().version(code) == version  # a student's pages are never broadcast
    student.switch_page("views/live.py")
    _run(student)
    assert not [b for b in student.button if b.key in ("live_q_ask", "live_reveal_main", "live_close")]
    with pytest.raises(live.NotTeacher):
        _store().set_state(code, "x", "explore", {})
    with pytest.raises(live.NotTeacher):
        _store().ask(code, secret[:-1], {"prompt": "?"})
    # a wrong teacher token is refused, in the viewer's language
    intruder = _app("tr")
    intruder.switch_page("views/live.py")
    _run(intruder)
    intruder.text_input(key="live_token").input("guess")
    _run(intruder.button(key="live_open").click())
    assert "_live_secret" not in intruder.session_state
    assert "Bunu yalnızca bu dersin öğretmeni yapabilir" in _said(intruder)
    # answers go under the session's own student id, whatever the link says
    qid = _store().ask(code, secret, {"prompt": {"en": "?", "tr": "?"}, "choices": ["a", "b"],
                                      "labels": {"a": {"en": "A", "tr": "A"}, "b": {"en": "B", "tr": "B"}}})
    _run(student)
    _answer(student, "a")
    assert _answered(code, qid) == {student.session_state["_live_student"]}


@pytest.mark.parametrize("lang, wrong, limited", [
    ("en", "No class has this code", "Too many wrong attempts"),
    ("tr", "Bu kodla açık bir ders yok", "Çok fazla yanlış deneme"),
])
def test_wrong_codes_are_refused_and_rate_limited_in_the_viewers_language(lang, wrong, limited, monkeypatch):
    monkeypatch.setattr(live.BaseStore, "join_limit", 3)  # a class's limit is 150 (live/rules.py): 150 runs here
    at = _app(lang)
    at.text_input(key="live_code_input").input("ZZZZZZ")
    _run(at.button(key="live_join").click())
    assert wrong in _said(at) and "_live_code" not in at.session_state
    for _ in range(live.BaseStore.join_limit):
        _run(at.button(key="live_join").click())
    assert limited in _said(at)
    again = _app(lang)  # a new session of the same client (AppTest: no address, one session id) is limited too
    again.text_input(key="live_code_input").input("ZZZZZZ")
    _run(again.button(key="live_join").click())
    assert limited in _said(again)


def test_broadcasting_off_keeps_the_class_where_it_is_and_a_closed_class_lets_its_students_go():
    teacher, code = _teacher("en")
    student = _app("en", room=code)
    _run(teacher.toggle(key="live_broadcast").set_value(False))
    teacher.switch_page("views/qkv.py")
    _run(teacher)
    assert _store().version(code) == 0 and _title(_run(student), "explore")
    _run(teacher.toggle(key="live_broadcast").set_value(True))  # on again: the page on screen goes out
    assert _store().get_state(code)["page"] == "qkv" and _title(_run(student), "qkv")
    teacher.switch_page("views/live.py")
    _run(teacher)
    _run(teacher.button(key="live_close").click())
    assert "_live_code" not in teacher.session_state and not _store().room_exists(code)
    _run(student)
    assert "_live_code" not in student.session_state
    assert "closed or has expired" in _said(student)
    _run(student)  # its link's room is not tried again
    assert "_live_code" not in student.session_state and "closed or has expired" not in _said(student)


def test_a_teacher_who_reloads_leads_the_same_class_and_the_link_alone_makes_a_student_at_most():
    teacher, code = _teacher("en")
    student = _app("en", room=code)
    teacher.switch_page("views/explore.py")
    _run(teacher)
    _run(teacher.slider(key="layer").set_value(3))
    _run(student)
    assert _title(student, "explore") and student.slider(key="layer").value == 3
    link = dict(teacher.query_params)  # what a reload opens again
    assert link["teach"] == code and "room" not in link and TOKEN not in str(link)
    version = _store().version(code)

    # the teacher's link without the token (a student who copied it off the projector): asked for the token, a
    # wrong one refused; joining goes through the student's join
    copied = _app("en", **link)
    assert "_live_code" not in copied.session_state and "_live_secret" not in copied.session_state
    assert not [b for b in copied.get("toggle") if b.key == "live_broadcast"]
    copied.text_input(key="live_token").input("guess")
    _run(copied.button(key="live_resume").click())
    assert "_live_secret" not in copied.session_state and "_live_code" not in copied.session_state
    assert "not the teacher token" in _said(copied) and copied.text_input(key="live_token").value == ""
    _run(copied.button(key="live_resume_student").click())
    assert copied.session_state["_live_code"] == code and "_live_secret" not in copied.session_state
    assert _class_in_link(copied) == {"room": code, "seat": copied.session_state["_live_student"]}
    assert not [b for b in copied.get("toggle") if b.key == "live_broadcast"]
    assert _store().present(code) == 2 and _store().version(code) == version

    # the teacher's reload: a new session on the same link; the token leads the same class, as it was
    again = _app("en", **link)
    assert "_live_code" not in again.session_state
    again.text_input(key="live_token").input(TOKEN)
    _run(again.button(key="live_resume").click())
    assert again.session_state["_live_code"] == code
    assert again.session_state["_live_secret"] not in ("", teacher.session_state["_live_secret"])
    assert TOKEN not in _said(again) and not [w for w in again.text_input if w.key == "live_token"]
    assert _class_in_link(again) == {"teach": code}
    assert _store().version(code) == version and _store().get_state(code)["params"]["layer"] == "3"
    assert "· 2 connected" in _said(again)
    again.switch_page("views/qkv.py")
    _run(again)
    for follower in (student, copied):
        _run(follower)
        assert _title(follower, "qkv")

    # the session before the reload leads no more, and says why
    _run(teacher)
    assert "_live_code" not in teacher.session_state and "teach" not in dict(teacher.query_params)
    assert "now led from another tab or device" in _said(teacher)
    assert _store().get_state(code)["page"] == "qkv"

    # a student's reload: its link's room, joined again
    reloaded = _app("en", **dict(student.query_params))
    assert reloaded.session_state["_live_code"] == code and reloaded.session_state["_live_follow"]
    assert _title(reloaded, "qkv") and "_live_secret" not in reloaded.session_state

    # reloaded on the Class page: one token field (the sidebar's), which can also open a new class instead
    desk = _app("en", **dict(again.query_params))
    desk.switch_page("views/live.py")
    _run(desk)
    assert "type the teacher token in the sidebar" in _said(desk)
    assert len([w for w in desk.text_input if w.key == "live_token"]) == 1
    desk.text_input(key="live_token").input(TOKEN)
    _run(desk.button(key="live_open").click())
    assert desk.session_state["_live_code"] != code and _store().room_exists(code)  # a new class; the old goes on
    assert _class_in_link(desk) == {"teach": desk.session_state["_live_code"]}


# an image the browser would fetch, a link, HTML and LaTeX (tests/app/test_hosting_app.py)
PAYLOAD = "![x](http://beacon.invalid/b.png) [login](http://evil.invalid) <b>bold</b> $x^2$ **loud**"


def test_prompts_and_answers_are_shown_as_text():
    """A question's prompt and its choices' labels reach a student's screen as the same characters: escaped for
    Streamlit's markdown (the prompt, the radio's options, the model's answer) and for plotly (the bars' labels)."""
    import re

    teacher, code = _teacher("en")
    student = _app("en", room=code)
    labels = {"a": {"en": PAYLOAD, "tr": PAYLOAD}, "b": {"en": "<i>b</i>", "tr": "<i>b</i>"}}
    qid = _store().ask(code, teacher.session_state["_live_secret"],
                       {"prompt": {"en": PAYLOAD, "tr": PAYLOAD}, "choices": ["a", "b"], "labels": labels})
    _run(student)
    # the radio's options as sent to the browser (its format_func applied), and every markdown of the class's lines
    shown = [str(o) for o in student.radio(key=f"live_pick_{qid}").options]
    shown += _stage_markdown(student)
    _answer(student, "a")
    _store().reveal(code, teacher.session_state["_live_secret"], qid, {"answer": "a", "value": 1.0, "unit": "weight"})
    _run(student)
    shown += _stage_markdown(student)
    assert any("beacon" in s for s in shown)
    for text in shown:
        for pattern in (r"(?<!\\)\]\(", r"(?<!\\)<b>", r"(?<!\\)://(beacon|evil)", r"(?<!\\)\$x", r"(?<!\\)\*\*loud"):
            assert not re.search(pattern, text), (pattern, text)
    ticks = json.loads(_stage(student).get("plotly_chart")[-1].proto.spec)["layout"]["yaxis"]["ticktext"]
    assert all("<i>" not in t and "<b>bold" not in t for t in ticks) and any("&lt;i&gt;" in t for t in ticks)


def test_a_run_the_browser_never_fully_got_is_drawn_again(monkeypatch):
    """Streamlit 1.67 can drop the rest of a run's messages (a poll timer's run asked for between a full run's end
    and the sending of its messages: bench/live_class.py counted 3-17 in a 30-student lesson). The browser then shows
    a half-drawn or old page and sends the link it holds with its next request; the version the run put in the link
    as its last message is missing, so the poll draws the run again (and makes the move again). A browser that got
    the whole run is left alone."""
    teacher, code = _teacher("en")
    student = _app("en", room=code)
    teacher.switch_page("views/explore.py")
    _run(teacher)
    _run(teacher.slider(key="layer").set_value(4))
    _run(student)
    assert _title(student, "explore") and student.slider(key="layer").value == 4
    version = student.query_params[room.SHOWN]
    assert version == str(student.session_state["_live_runs"]) == str(student.session_state["_live_drawn"][0])
    monkeypatch.setattr(redraw, "REDRAW_AFTER_S", 0.0)
    drawn_at = student.session_state["_live_drawn"][1]
    _run(student)  # the link holds the version: the run reached the browser, nothing is made again
    assert "_live_goto" not in student.session_state

    # the run that moved this student was cut: the browser is still on the Class page's link, without the version,
    # and its poll's timer asks for a fragment run (AppTest runs the whole script: the first run stands for it)
    student.switch_page("views/live.py")
    del student.query_params[room.SHOWN]
    fragment = iter([True])
    monkeypatch.setattr(redraw, "in_fragment_run", lambda: next(fragment, False))
    _run(student)
    assert student.session_state["_live_drawn"][1] > drawn_at
    assert student.query_params[room.SHOWN] == str(student.session_state["_live_runs"]) != version
    assert _title(student, "explore") and student.slider(key="layer").value == 4


def test_a_second_run_for_the_same_step_cut_is_drawn_again(monkeypatch):
    """Issue 50's lesson walk in Chromium: a student's page ran twice for one state of the room (the move to the
    teacher's page, then the page it opened); the second run was cut after the lesson's box, and the page showed the
    box over an empty page for 300 s. The link held the room's version, which the first run had already put there,
    so the cut went unseen; every full run is numbered now, and the poll finds the second one's number missing."""
    teacher, code = _teacher("en")
    student = _app("en", room=code)
    teacher.switch_page("views/explore.py")
    _run(teacher)
    _run(student)
    first = student.query_params[room.SHOWN]
    _run(student)  # a second full run for the same state of the room
    assert student.query_params[room.SHOWN] != first
    monkeypatch.setattr(redraw, "REDRAW_AFTER_S", 0.0)
    student.query_params[room.SHOWN] = first  # it was cut: the browser's link holds the first run's number
    fragment = iter([True])
    monkeypatch.setattr(redraw, "in_fragment_run", lambda: next(fragment, False))
    found, real = [], redraw.lost
    monkeypatch.setattr(redraw, "lost", lambda: found.append(real()) or found[-1])
    _run(student)
    assert found[0] is True  # the poll found the cut run and drew the page again, whole
    assert _title(student, "explore") and student.query_params[room.SHOWN] == str(student.session_state["_live_runs"])


def test_a_run_stopped_part_way_is_drawn_again(monkeypatch):
    """Issue 50's lesson walk in a fresh clone: a student's page showed the lesson's box over an empty page for 300 s
    with the number of the run before in its link: a full run had begun (the box drawn) and was stopped part-way,
    so it never put its number there and nothing looked wrong. A full run is open from its start to its end; a poll
    that finds the last one open draws the page again (at most MAX_REDRAWS times in a row)."""
    teacher, code = _teacher("en")
    student = _app("en", room=code)
    teacher.switch_page("views/explore.py")
    _run(teacher)
    _run(student)
    assert redraw.OPEN not in student.session_state  # the run ended
    monkeypatch.setattr(redraw, "REDRAW_AFTER_S", 0.0)
    student.session_state[redraw.OPEN] = (0.0, 0)  # a run began long ago and never ended
    fragment = iter([True])
    monkeypatch.setattr(redraw, "in_fragment_run", lambda: next(fragment, False))
    found, real = [], redraw.lost
    monkeypatch.setattr(redraw, "lost", lambda: found.append(real()) or found[-1])
    _run(student)
    assert found[0] is True and redraw.OPEN not in student.session_state  # drawn again, and that run ended
    assert _title(student, "explore")
    student.session_state[redraw.OPEN] = (0.0, redraw.MAX_REDRAWS)  # a page that never ends: no more redraws
    fragment = iter([True])
    found.clear()
    _run(student)
    assert found[0] is False


def test_a_teacher_run_the_browser_never_fully_got_is_drawn_again(monkeypatch):
    """Issue 50: with 29 students polling, the teacher's Start left the lesson's step over an empty page for 300 s in
    Chromium (bench/lesson_room.py --peers 27): the full run was cut as a student's can be. The teacher's full runs
    are numbered in the link too; the counts' fragment run finds the number missing and draws the page again."""
    teacher, code = _teacher("en")
    teacher.switch_page("views/explore.py")
    _run(teacher)
    runs = teacher.session_state["_live_runs"]
    assert teacher.query_params[room.SHOWN] == str(runs)
    monkeypatch.setattr(redraw, "REDRAW_AFTER_S", 0.0)
    _run(teacher)  # the link holds the number: nothing drawn twice
    assert teacher.session_state["_live_runs"] == runs + 1
    del teacher.query_params[room.SHOWN]  # the run was cut: the browser's link lacks its number
    fragment = iter([True])
    monkeypatch.setattr(redraw, "in_fragment_run", lambda: next(fragment, False))
    found, real = [], redraw.lost
    monkeypatch.setattr(redraw, "lost", lambda: found.append(real()) or found[-1])
    _run(teacher)
    assert found[0] is True  # the counts' run found the cut run, asked for the page again, which was drawn whole
    assert teacher.session_state["_live_runs"] == runs + 2 and teacher.query_params[room.SHOWN] == str(runs + 2)
    assert _title(teacher, "explore") and teacher.slider(key="layer") is not None


def test_a_page_that_ends_early_still_reaches_the_class_and_ends_with_its_marker():
    """Q/K/V with no sentence ends early (views.shared.stop). With ``st.stop`` the end of the run could not be done
    (any read of the session's state raised again): the teacher's page never reached the class, and a student's such
    page lacked its marker and was drawn again by the watchdog (a review of the marker's change)."""
    teacher, code = _teacher("en")
    student = _app("en", room=code)
    teacher.switch_page("views/qkv.py")
    _run(teacher)
    teacher.sidebar.text_area(key="text").set_value("   ")
    _run(teacher)
    assert _title(teacher, "qkv") and not teacher.get("plotly_chart")  # the page ended early, after its notice
    assert _store().get_state(code)["params"]["text"] == "   "  # ... and still reached the class
    _run(student)
    assert _title(student, "qkv") and student.sidebar.text_area(key="text").value == "   "
    for at in (teacher, student):
        runs = at.session_state["_live_runs"]
        assert at.query_params[room.SHOWN] == str(runs)
        assert [h.proto.body for h in at.main.get("html") if redraw.MARKER in h.proto.body] == [
            f'<span class="{redraw.MARKER}" data-run="{runs}"></span>']


def test_a_page_whose_browser_lacks_the_runs_marker_is_drawn_again_a_few_times_at_most(monkeypatch):
    """Every full run of a live page ends the main area with a hidden marker holding its number (its link may say the
    run arrived while the page lost it: bench/lesson_room.py's empty step); when the browser's watchdog says the
    marker is missing (views/live_sections/polling.py), the poll's fragment run draws the page again, at most
    MAX_REDRAWS times for one run (a page that fails before its end never draws its marker)."""
    teacher, code = _teacher("en")
    student = _app("en", room=code)
    teacher.switch_page("views/explore.py")
    _run(teacher)
    _run(student)

    def markers() -> list[str]:
        return [h.proto.body for h in student.main.get("html") if redraw.MARKER in h.proto.body]

    runs = student.session_state["_live_runs"]
    assert markers() == [f'<span class="{redraw.MARKER}" data-run="{runs}"></span>']
    assert student.query_params[room.SHOWN] == str(runs)  # the link says the run arrived: only the marker can tell
    found, real = [], redraw.lost
    monkeypatch.setattr(redraw, "lost", lambda: found.append(real()) or found[-1])
    for times, redrawn in ((1, True), (redraw.MAX_REDRAWS, True), (redraw.MAX_REDRAWS + 1, False)):
        runs = student.session_state["_live_runs"]
        student.session_state[redraw.ASKED] = (runs, times)  # the watchdog's word (redraw.asked), the n-th time
        once = iter([True])
        monkeypatch.setattr(redraw, "in_fragment_run", lambda once=once: next(once, False))
        _run(student)
        assert found[0] is redrawn
        assert student.session_state["_live_runs"] == runs + 1  # a full run (the faked fragment run's, or its redraw)
        assert markers() == [f'<span class="{redraw.MARKER}" data-run="{runs + 1}"></span>']
        assert student.session_state[redraw.ASKED] == (runs, -times)  # answered, whether drawn again or not
        assert _title(student, "explore")
        found.clear()


def test_an_outage_pauses_the_class_on_every_screen_and_loses_no_answer(monkeypatch):
    """The class's store stops answering (Redis killed, frozen or reloading: tests/deploy/test_class_redis.py makes
    the real ones): the teacher's and the student's panels say the class is paused, an answer sent meanwhile is
    kept on the student's screen and reaches the store by itself once it answers again; then the notice goes."""
    teacher, code = _teacher("en")
    student = _app("tr", room=code)
    store = _store()
    qid = store.ask(code, teacher.session_state["_live_secret"], {"prompt": {"en": "Which?", "tr": "Hangisi?"},
                                                                  "choices": ["a", "b"]})
    _run(student)
    paused = {lang: shared._strings()["live_paused"][lang] for lang in ("en", "tr")}

    def down(*args, **kwargs):
        raise live.LiveUnavailable("The live class store (Redis) cannot be used: TimeoutError.",
                                   code="live_unavailable")

    with monkeypatch.context() as outage:
        for name in ("answer", "heartbeat", "version", "get_state", "present", "teaches", "results"):
            outage.setattr(store, name, down)
        outage.setattr(store, "outage_s", lambda: 4.0)
        _answer(student, "b")
        assert paused["tr"] in [w.value for w in student.sidebar.warning]
        assert shared._strings()["live_pending"]["tr"].split("(")[0] in _said(student)
        assert not student.sidebar.error  # no error: the answer is kept, not refused
        assert student.session_state[room.PENDING] == {(code, qid): "b"}
        _run(teacher)
        assert paused["en"] in [w.value for w in teacher.sidebar.warning]
        assert not _answered(code, qid)
        teacher.switch_page("views/qkv.py")  # the teacher moves on meanwhile: the store cannot take it ...
        outage.setattr(store, "set_state", down)
        _run(teacher)
        assert teacher.session_state[room.UNSENT][0] == "qkv" and not teacher.sidebar.error
    assert (store.get_state(code) or {}).get("page") != "qkv"
    # the store answers again: the kept answer is sent by the poll's fragment run, with the room's version unchanged
    # since the student's last look, which must draw the page again (a walk with Redis killed: the teacher counted
    # the answer 3.5 s after the kill, the phone said "kept" for 150 s+)
    fragment, polls, poll = iter([True]), [], room.poll
    monkeypatch.setattr(room, "in_fragment_run", lambda: next(fragment, False))
    monkeypatch.setattr(room, "poll", lambda: polls.append(poll()) or polls[-1])
    _run(student)
    assert polls == [True, False]  # the fragment's run sent the answer and asked for the whole page again
    assert _answered(code, qid) == {student.session_state["_live_student"]}
    assert not student.session_state[room.PENDING]
    assert paused["tr"] not in [w.value for w in student.sidebar.warning]
    assert shared._strings()["live_sent"]["tr"].split("{")[0] in _said(student)
    _run(teacher)  # ... and the teacher's poll pushes its move once the store answers
    assert store.get_state(code)["page"] == "qkv" and room.UNSENT not in teacher.session_state
    assert paused["en"] not in [w.value for w in teacher.sidebar.warning]


def test_a_class_in_one_process_says_what_a_restart_loses(store_kind):
    teacher, _ = _teacher("tr")
    notice = shared._strings()["live_one_process"]["tr"].split(":")[0]
    assert (notice in _said(teacher)) == (store_kind == "memory")


def test_a_reloaded_page_or_a_second_tab_is_the_same_student_with_one_answer(monkeypatch):
    """Issue 44: one student answered the same question 3 times, two students showed as 4. A student who joined by
    the teacher's link (room and link key) gets their seat in their own link; a reload or a second tab of that link
    is the same student: counted once, the answer sent shown again and changed, never counted twice. A seat the
    room never gave is not taken (a new student)."""
    teacher, code = _teacher("en")
    key = _store().link_key(code, teacher.session_state["_live_secret"])
    assert f"key={key}" in _said(teacher).replace("\\", "")  # the students' link beside the QR code carries it
    student = _app("tr", room=code, key=key)
    seat = student.session_state["_live_student"]
    link = {k: v for k, v in dict(student.query_params).items() if k != "lang"}
    assert link["room"] == code and link["seat"] == seat and link["key"] == key
    qid = _store().ask(code, teacher.session_state["_live_secret"], {"prompt": {"en": "Which?", "tr": "Hangisi?"},
                                                                     "choices": ["a", "b"]})
    _run(student)
    _answer(student, "a")
    for again in (_app("tr", **link), _app("en", **link)):  # the reload, then a second tab
        assert again.session_state["_live_student"] == seat and again.session_state["_live_code"] == code
        assert again.radio(key=f"live_pick_{qid}").value == "a"  # what was sent before, read back from the store
        assert [b for b in again.button if b.key == "live_send"][0].label == \
            shared._strings()["live_change"][again.session_state["lang"]]
    _answer(again, "b")
    assert _answered(code, qid) == {seat} and _store().present(code) == 1
    assert _store().results(code, qid)["total"] == 1
    forged = _app("en", room=code, key=key, seat="made-up-seat-0123456789")
    assert forged.session_state["_live_student"] != "made-up-seat-0123456789"
    assert _store().present(code) == 2


def test_a_flood_of_wrong_codes_does_not_stop_a_student_joining_by_the_link(monkeypatch):
    monkeypatch.setattr(live.BaseStore, "server_join_limit", 3)  # 600 on a real server (live/rules.py)
    teacher, code = _teacher("en")
    key = _store().link_key(code, teacher.session_state["_live_secret"])
    for i in range(3):
        with pytest.raises(live.NoSuchRoom):
            _store().join_attempt("ZZZZZZ", f"ip:203.0.113.{i}")
    typed = _join_typed("en", code)  # the typed code is refused while the server's bucket is full ...
    assert "_live_code" not in typed.session_state and "Too many wrong class codes" in _said(typed)
    student = _app("tr", room=code, key=key)  # ... the link is not
    assert student.session_state["_live_code"] == code and _store().present(code) == 1


def test_lesson_files_count_against_the_sessions_uploads(monkeypatch):
    """Issue 44 point 5: the Class page's lesson file upload was read whatever the session had uploaded; it now goes
    through the same per-session bound as the Atlas page's (views/shared/uploads.admit): the third file past a
    bound of two is refused with the message in the teacher's language and not read as a lesson."""
    monkeypatch.setenv("DIKKAT_UPLOADS_PER_SESSION", "2")
    teacher, _ = _teacher("tr")
    title = L.load_lesson(L.LESSONS / "attention-intro.toml").title["tr"]
    assert title in teacher.selectbox(key="live_lesson_pick").options  # the title, not the id (issue 50)
    assert "attention-intro" not in teacher.selectbox(key="live_lesson_pick").options
    lesson = (L.LESSONS / "attention-intro.toml").read_text(encoding="utf-8")
    strings = json.loads((Path(APP).parent / "assets/i18n/jobs.json").read_text(encoding="utf-8"))
    for i in range(3):
        own = lesson.replace('id = "attention-intro"', f'id = "own-{i}"')
        assert own != lesson
        teacher.file_uploader(key="live_lesson_upload").set_value((f"own{i}.toml", own.encode(), "text/plain"))
        _run(teacher)
    assert set(teacher.session_state["_live_own_lessons"]) == {"own-0", "own-1"}
    # two lessons with one title are told apart by their ids
    assert {f"{title} (attention-intro)", f"{title} (own-0)"} <= set(teacher.selectbox(key="live_lesson_pick").options)
    assert [e.value for e in teacher.error] == [strings["upload_too_many"]["tr"].format(count=2, limit=2)]


def test_the_students_link_carries_the_class_language():
    """Issue 50 point 5: students opening the QR code landed in English while the class was in Turkish (the link
    carried no language). The link holds the teacher's interface language; a student opening it reads the class in
    that language (and may switch afterwards, their own setting)."""
    import re
    from urllib.parse import parse_qsl

    teacher, code = _teacher("tr")
    shown = _said(teacher).replace("\\", "")
    query = dict(parse_qsl(re.search(r"\?(room=" + code + r"[^\s)\]<\"']*)", shown).group(1)))
    assert query["lang"] == "tr" and query["room"] == code and query.get("key")
    at = AppTest.from_file(APP, default_timeout=600)
    at.session_state["model_key"] = "minilm-l6"
    for name, value in query.items():
        at.query_params[name] = value
    _run(at)
    assert at.session_state["lang"] == "tr" and at.session_state["_live_code"] == code
    _run(at.radio(key="lang").set_value("en"))  # the student's own choice
    assert at.session_state["lang"] == "en" and at.session_state["_live_code"] == code


def test_a_result_the_teacher_runs_reaches_every_students_page(monkeypatch, tmp_path):
    """Issue 50 point 3: when step 9 asked the teacher to run an experiment, the result appeared on the teacher's
    screen only (the students' pages had no reason to run again). The run is on the shared pool and cache; once it
    ends, the teacher's page pushes the same state again (a new version, nothing else changed), so each following
    student's poll draws its page again and finds the result."""
    from conftest import press_heavy

    monkeypatch.setenv("DIKKAT_AHEAD_ROOT", str(tmp_path / "ahead"))
    shared.CACHE.discard(("experiments", "clark", "minilm-l6"))
    teacher, code = _teacher("en")
    student = _app("tr", room=code)
    teacher.switch_page("views/experiments.py")
    teacher.session_state["exp_which"] = "clark"
    _run(teacher)
    _run(student)
    state = _store().get_state(code)
    assert state["page"] == "experiments" and not any("This run took" in c.value for c in teacher.caption)
    press_heavy(teacher, "exp_run_clark")
    assert not teacher.exception and any("This run took" in c.value for c in teacher.caption)
    after = _store().get_state(code)
    assert after["version"] == state["version"] + 1  # told once ...
    assert (after["page"], after["params"]) == (state["page"], state["params"])  # ... with the same state
    _run(teacher)
    assert _store().version(code) == after["version"]  # not again on the teacher's next runs
    _run(student)
    took = json.loads((Path(APP).parent / "assets/i18n/experiments.json").read_text(encoding="utf-8"))["exp_took"]["tr"]
    assert any(took.split("{")[0].strip() in c.value for c in student.caption), [c.value for c in student.caption]
    shared.CACHE.discard(("experiments", "clark", "minilm-l6"))


def test_the_teacher_sees_whether_every_lesson_step_was_opened_ahead(tmp_path, monkeypatch):
    """Issue 50 point 1: make serve's warm-up (deploy/warm.py) writes its progress for the app's port
    (live/readiness.py); the teacher's panel says "k of n" while it runs and "ready" when done, in the teacher's
    language; without a warm-up it says nothing."""
    from live import readiness

    monkeypatch.setenv("DIKKAT_CLASS_DATA", str(tmp_path))
    teacher, _ = _teacher("tr")
    nothing = ("Derslerin sayfaları hazırlanıyor", "Dersin her adımı hazır")
    assert not any(x in _said(teacher) for x in nothing)  # no warm-up for this server: nothing said
    port = 8501  # AppTest's server.port option: the default
    readiness.write(port, 3, 17)
    _run(teacher)
    assert "Derslerin sayfaları hazırlanıyor: 17 sayfadan 3 tanesi hazır" in _said(teacher)
    readiness.write(port, 17, 17, failed=1, started=time.time() - 95)
    _run(teacher)
    said = _said(teacher)
    assert "Dersin her adımı hazır: 17 sayfa 95 sn içinde" in said and "1 tanesi önceden açılamadı" in said
    (tmp_path / "warm-8501.json").write_text("{not json", encoding="utf-8")
    _run(teacher)
    assert not any(x in _said(teacher) for x in nothing)  # a file that does not read: nothing said, nothing raised
