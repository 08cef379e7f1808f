"""Predict, then measure (issue 29): the teacher asks the class a question about the state on screen, each student
answers once (changeable until the reveal), and the reveal shows the class's answers beside the model's own.

What the store keeps of a question (at most 4 KB): its ``kind``, ``prompt`` ``{en, tr}``, ``choices`` (the answer
values :func:`live.questions.choices_for` gives) and their ``labels`` ``{value: {en, tr}}``. What it was asked about
(model, question table, page state) stays in the teacher's session, where the reveal measures it
(:func:`live.questions.measure`, cached per model, question and state). Who answered what is never shown: the
store keeps the answers under each student's id (made server side, in the student's session) and forgets them at
the reveal, keeping the counts. Prompts and labels are shown as text (escaped), never as Markdown or HTML.
"""

from __future__ import annotations

import json

import streamlit as st

import live
import models
from live import questions as Q
from live import rules as live_rules
from views import shared
from views.shared import md, t, t_plain
from viz import numbers as nb
from viz.live import answers_figure

from . import room

UNITS = ("weight", "share", "nats", "1 - cos")


# ------------------------------------------------------------------------------------- measured on the model


def _question(table: str) -> Q.Question:
    return Q.parse_question(json.loads(table))


@shared.cached
def choices(model: str, table: str, state: tuple) -> list[Q.Choice]:
    """:func:`live.questions.choices_for` of the question (its TOML table as JSON) on ``model`` in ``state``
    (``(param, value)`` pairs), cached for every session."""
    return Q.choices_for(shared.get_model(model), _question(table), dict(state))


@shared.cached
def measured(model: str, table: str, state: tuple) -> Q.Measured:
    """:func:`live.questions.measure` of the question on ``model`` in ``state``, cached for every session."""
    return Q.measure(shared.get_model(model), _question(table), dict(state))


def _key(question: Q.Question, state: dict) -> tuple[str, str, tuple]:
    return question.model or state.get("model_key", ""), json.dumps(question.table(), sort_keys=True), \
        tuple(sorted(state.items()))


def ask(question: Q.Question, state: dict, step: str | None = None) -> bool:
    """Ask the class ``question`` about ``state`` (the page's link): its choices are worked out on the teacher's
    model, then the store makes it the room's current question. ``step``: the lesson step it belongs to
    (``"<lesson id>:<index>"``), kept with it so the step's page arriving after it does not end it
    (:func:`live.rules.ends_question`). Errors are kept for the panel."""
    model, table, pairs = _key(question, state)
    try:
        with st.spinner(t("live_preparing")):
            picks = choices(model, table, pairs)
        payload = {"kind": question.kind, "prompt": dict(question.prompt), "choices": [c.value for c in picks],
                   "labels": {c.value: dict(c.label) for c in picks}}
        if step is not None:
            payload[live_rules.QUESTION_STEP] = step
        qid = room.store().ask(room.room_code(), room.room_secret(), payload)
    except (live.LiveError, models.DikkatError) as exc:
        room.keep_error(exc)
        return False
    st.session_state.setdefault("_live_asked", {})[qid] = (model, table, pairs)
    record = st.session_state.get("_live_record") or []
    if record:
        record[-1]["question"] = question.table()
    return True


def reveal(qid: int) -> None:
    """Measure the question on the teacher's model and reveal it with the class's counts."""
    asked = st.session_state.get("_live_asked", {}).get(qid)
    try:
        result = None
        if asked is not None:
            with st.spinner(t("live_measuring")):
                m = measured(*asked)
            result = {"answer": m.answer, "value": round(float(m.value), 6), "unit": m.unit}
        room.store().reveal(room.room_code(), room.room_secret(), qid, result)
    except (live.LiveError, models.DikkatError) as exc:
        room.keep_error(exc)


# ------------------------------------------------------------------------------------------- on screen


def _text(entry) -> str:
    """A ``{en, tr}`` text in the interface language (plain text)."""
    if isinstance(entry, dict):
        return str(entry.get(shared.lang()) or entry.get("en") or "")
    return str(entry or "")


def label(question: dict, value) -> str:
    """A choice's label in the interface language."""
    return _text((question.get("labels") or {}).get(str(value))) or str(value)


def _unit(unit: str) -> str:
    return t_plain(f"live_unit_{UNITS.index(unit)}") if unit in UNITS else unit


def prompt(question: dict, container=None) -> None:
    (container or st).markdown(f"**{t('live_question')}** {md(_text(question.get('prompt')))}")


def results(state: dict, container=None) -> None:
    """The revealed question: the class's answers as bars beside the model's (:func:`viz.live.answers_figure`) on
    the left, and the count and the model's answer with the number behind it on the right."""
    question, where = state.get("question"), container or st
    if not question or not state.get("revealed"):
        return
    try:
        res = room.store().results(room.room_code(), question["id"])
    except live.LiveError as exc:
        where.error(shared.error_text(exc))
        return
    values = list(question.get("choices") or [])
    counts = [int(res["counts"].get(v, 0)) for v in values]
    said = res.get("measured") or {}
    index = values.index(said["answer"]) if said.get("answer") in values else None
    fig = answers_figure([label(question, v) for v in values], counts, model_index=index,
                         model_label=t_plain("live_model"), count_title=t_plain("live_students_axis"),
                         lang=shared.lang())
    chart, words = where.columns([3, 2], vertical_alignment="center")
    shared.plotly_chart(fig, container=chart, columns=2, key=f"live_results_{question['id']}",
                        config={"displayModeBar": False})
    words.caption(t("live_answered_total", n=int(res.get("total", 0))))
    if index is not None:
        words.markdown(t("live_model_said", answer=label(question, said["answer"]),
                         value=nb.number(float(said.get("value", 0.0)), 3, shared.lang()),
                         unit=_unit(str(said.get("unit", "")))))


def _send(qid: int) -> None:
    """A student's answer: the picked choice, under the student id kept in this session (never one the browser
    names)."""
    value = st.session_state.get(f"live_pick_{qid}")
    if value is None:
        return
    try:
        room.store().answer(room.room_code(), qid, room.student(), value)
    except live.LiveUnavailable:  # kept, and sent by the poll as soon as the store answers (never lost)
        st.session_state.setdefault(room.PENDING, {})[(room.code(), qid)] = value
        return
    except live.LiveError as exc:
        room.keep_error(exc)
        return
    (st.session_state.get(room.PENDING) or {}).pop((room.code(), qid), None)
    st.session_state.setdefault("_live_answers", {})[(room.code(), qid)] = value


def student(state: dict) -> None:
    """The current question for a student: its prompt, the choices, the answer sent; after the reveal, the
    results."""
    question = state.get("question")
    if not question:
        return
    prompt(question)
    if state.get("revealed"):
        results(state)
        return
    qid = question["id"]
    sent = room.sent_answer(qid)
    values = list(question.get("choices") or [])
    if f"live_pick_{qid}" not in st.session_state and sent in values:
        st.session_state[f"live_pick_{qid}"] = sent
    st.radio(t("live_your_answer"), values, index=None, key=f"live_pick_{qid}", horizontal=True,
             format_func=lambda v: md(label(question, v)))
    st.button(t("live_change") if sent is not None else t("live_send"), key="live_send", on_click=_send,
              args=(qid,), type="primary")
    pending = (st.session_state.get(room.PENDING) or {}).get((room.code(), qid))
    if pending is not None:
        st.caption(t("live_pending", answer=label(question, pending)))
    elif sent is not None:
        st.caption(t("live_sent", answer=label(question, sent)))


def teacher(state: dict, container=None) -> None:
    """The current question for the teacher: its prompt, Reveal (the count of answers is the panel's, live), and
    after the reveal the results."""
    question, box = state.get("question"), container or st
    if not question:
        return
    prompt(question, box)
    if state.get("revealed"):
        results(state, box)
        return
    if box.button(t("live_reveal"), key="live_reveal_main", type="primary"):
        reveal(question["id"])
        st.rerun()


def answered(state: dict) -> int | None:
    """How many students answered the open question (None: none is open)."""
    question = state.get("question")
    if not question or state.get("revealed"):
        return None
    try:
        return int(room.store().results(room.room_code(), question["id"])["total"])
    except live.LiveError:
        return None
