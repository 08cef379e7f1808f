"""Lessons in a live class (issue 29): the teacher steps through a lesson file (``lessons/*.toml``,
:mod:`live.lessons`), each step opening its page with its link for the whole class; each student reads the step's
text from the same file in their own language. The teacher's session can also be saved as a lesson, downloaded
(never written into the app's ``lessons/``).

Texts of a lesson are plain text: shown escaped (:func:`views.shared.md`), never as Markdown or HTML."""

from __future__ import annotations

import functools
import tempfile
import time
import tomllib
from pathlib import Path

import streamlit as st

import pagestate
from live import lessons as L
from live import questions as Q
from views import shared
from views.shared import md, t, uploads

from . import asking, room


@functools.cache
def shipped() -> dict[str, L.Lesson]:
    """The lessons of ``lessons/``, by id (read once per process)."""
    return {lesson.id: lesson for lesson in L.shipped_lessons()}


def lesson(lesson_id: str | None) -> L.Lesson | None:
    """A lesson by id: a shipped one, or one the teacher loaded in this session."""
    if lesson_id is None:
        return None
    own = st.session_state.get("_live_own_lessons", {})
    return own.get(lesson_id) or shipped().get(lesson_id)


def _text(entry: dict | None) -> str:
    return (entry or {}).get(shared.lang()) or (entry or {}).get("en") or ""


def parse_step(value: str | None) -> tuple[L.Lesson, int] | None:
    """``"<lesson id>:<index>"`` (a broadcast's ``lesson_step``) as the lesson and the step's index, or None."""
    lesson_id, _, index = str(value or "").rpartition(":")
    found = lesson(lesson_id)
    if found is None or not index.isdigit() or int(index) >= len(found.steps):
        return None
    return found, int(index)


def show_step(value: str | None, container=None) -> None:
    """The step's place in its lesson, chapter and text in the viewer's language, as plain text."""
    found = parse_step(value)
    if found is None:
        return
    found_lesson, index = found
    box = container or st
    box.caption(t("live_step_of", title=_text(found_lesson.title), n=index + 1, total=len(found_lesson.steps)))
    _body(found_lesson.steps[index], box)


def _body(step: L.Step, container=None) -> None:
    """A step's chapter (bold) and text, escaped (:func:`views.shared.md`)."""
    box = container or st
    if step.chapter:
        box.markdown(f"**{md(_text(step.chapter))}**")
    box.markdown(md(_text(step.text)))


# ------------------------------------------------------------------------------------------- the teacher


def start(lesson_id: str) -> None:
    st.session_state["_live_lesson"] = lesson_id
    goto_step(0)


def goto_step(index: int) -> None:
    """Open step ``index`` of the teacher's lesson (its page and link) for the teacher, and so for the class."""
    found = lesson(st.session_state.get("_live_lesson"))
    if found is None or not 0 <= index < len(found.steps):
        return
    step = found.steps[index]
    st.session_state["_live_step"] = (found.id, index)
    room.go(step.page, step.query())


def redraw_class() -> None:
    """Make every following student's page run again on the state it already shows (the same page and link, a new
    version): a result the teacher ran on the shared pool (a pruning curve, an experiment) is then on their pages
    (issue 50 point 3: it appeared on the teacher's screen only). Nothing when this session leads no class, has pushed
    nothing yet, or does not broadcast."""
    sent = st.session_state.get("_live_sent")
    if room.is_teacher() and sent is not None and st.session_state.get("live_broadcast", True):
        room.push(*sent)


def current() -> tuple[L.Lesson, int] | None:
    """The teacher's lesson and the index of its step on screen, or None (no lesson started in this session)."""
    found = lesson(st.session_state.get("_live_lesson"))
    step_at = st.session_state.get("_live_step")
    if found is None or step_at is None or step_at[0] != found.id:
        return None
    return found, step_at[1]


def teacher_nav(found: L.Lesson, index: int) -> None:
    """The teacher's lesson on the main page (:mod:`views.live_sections.stage`): one line with the step's place and
    Previous / Next / Ask this step's question, then the step's text."""
    where, back, ahead, ask = st.columns([4, 1.3, 1.3, 2.4], vertical_alignment="center")
    where.caption(t("live_step_of", title=_text(found.title), n=index + 1, total=len(found.steps)))
    back.button(t("live_previous"), key="live_previous", on_click=goto_step, args=(index - 1,),
                disabled=index == 0, width="stretch")
    ahead.button(t("live_next"), key="live_next", on_click=goto_step, args=(index + 1,),
                 disabled=index + 1 >= len(found.steps), width="stretch")
    step = found.steps[index]
    _body(step)
    if step.question is not None and ask.button(t("live_ask_step"), key="live_ask_step", width="stretch"):
        state = dict(step.query())
        sent = st.session_state.get("_live_sent")
        if sent and sent[0] == step.page:  # the page as it is now, changed live or not
            state = {k: v for k, v in sent[1].items() if k != room.STEP}
        question = step.question if step.question.model else _with_model(step.question, step.question_model())
        if asking.ask(question, state, step=f"{found.id}:{index}"):
            st.rerun()


def _with_model(question: Q.Question, model: str | None) -> Q.Question:
    return Q.parse_question({**question.table(), "model": model}) if model else question


def picker() -> None:
    """The Class page's lesson picker: a shipped lesson (or a lesson file loaded here), and Start."""
    uploaded = st.file_uploader(t("live_lesson_file"), type=["toml"], key="live_lesson_upload")
    if uploaded is not None and uploads.admit(uploaded):  # at most so many files and bytes per session (issue 44)
        try:
            own = L.parse_lesson(tomllib.loads(uploaded.getvalue().decode("utf-8")))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            st.error(t("live_lesson_unreadable", reason=str(exc)))
        except L.LessonError as exc:
            shared.show_error(exc)
        else:
            st.session_state.setdefault("_live_own_lessons", {})[own.id] = own
    every = {**shipped(), **st.session_state.get("_live_own_lessons", {})}
    # the options are the lessons' ids: a label in the interface language would not match after a switch of it
    # shown by title (issue 50: the picker showed the id); a title two lessons share is told apart by the id
    titles = {i: _text(lesson.title) or i for i, lesson in every.items()}
    shared_titles = {x for x in titles.values() if list(titles.values()).count(x) > 1}
    labels = {i: f"{x} ({i})" if x in shared_titles else x for i, x in titles.items()}
    chosen = st.selectbox(t("live_lesson"), list(every), key="live_lesson_pick",
                          format_func=lambda lesson_id: labels.get(lesson_id, lesson_id))
    if chosen:
        st.caption(t("live_lesson_about", title=_text(every[chosen].title), n=len(every[chosen].steps)))
    if chosen and st.button(t("live_lesson_start"), key="live_lesson_start"):
        if chosen not in shipped():
            st.session_state.setdefault("_live_own_lessons", {})[chosen] = every[chosen]
        start(chosen)
        st.rerun()


# ---------------------------------------------------------------------------------- saving a session


def _typed(page: str, key: str, text: str):
    """A link's text as the TOML value a lesson file holds for ``key`` on ``page`` (:func:`pagestate.typed`), or None
    when it cannot be one (the page does not declare it, or the text is not of its kind)."""
    own = pagestate.page(page).by_key if page in pagestate.FOLLOWED else {}
    spec = {**pagestate.SIDEBAR, **own}.get(key)
    return None if spec is None else pagestate.typed(spec, text)


def _step(entry: dict, number: int) -> L.Step | None:
    """A recorded state as a lesson step (parameters a lesson cannot hold dropped), or None."""
    page = entry["page"]
    params = {k: _typed(page, k, v) for k, v in entry["params"].items() if k != room.STEP}
    params = {k: v for k, v in params.items() if v is not None}
    text = {"en": f"Step {number}: {shared._strings()['page_' + page]['en']}",
            "tr": f"Adım {number}: {shared._strings()['page_' + page]['tr']}"}
    question = Q.parse_question(entry["question"]) if entry.get("question") else None
    for _ in range(len(params) + 2):
        step = L.Step(page=page, text=text, params=dict(params), question=question)
        try:
            L.validate_lesson(L.Lesson(id="check", title=text, steps=(step,)))
            return step
        except L.LessonError as exc:
            where = str(exc.params.get("where", ""))
            bad = where.split(".")[3] if where.startswith("steps.1.params.") else None
            if bad in params:
                params.pop(bad)
            elif question is not None:
                question = None
            else:
                return None
    return None


def session_lesson() -> L.Lesson | None:
    """The states the teacher broadcast in this session, as a lesson (None: none could be a step)."""
    made = [s for s in (_step(e, i + 1) for i, e in enumerate(st.session_state.get("_live_record", []))) if s]
    if not made:
        return None
    stamp = time.strftime("%Y%m%d-%H%M")
    return L.Lesson(id=f"class-{stamp}", title={"en": f"Class of {stamp}", "tr": f"{stamp} dersi"}, steps=tuple(made))


def save_button() -> None:
    """"Save this session as a lesson": written with :func:`live.lessons.save_lesson` to a temporary file and
    offered for download."""
    made = session_lesson()
    if made is None:
        st.caption(t("live_save_nothing"))
        return
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{made.id}.toml"
        try:
            L.save_lesson(made, path)
        except L.LessonError as exc:
            shared.show_error(exc)
            return
        data = path.read_text(encoding="utf-8")
    st.download_button(t("live_save", n=len(made.steps)), data=data, file_name=f"{made.id}.toml",
                       mime="application/toml", key="live_save")
