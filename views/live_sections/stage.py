"""The lesson on the main page in a live class (issue 50 point 2): the step's text, the open question, the answer
control and the revealed result sit at the top of the main area, above the page the step opens, at the page's
text size (projector mode enlarges them); the teacher's Previous / Next and Ask / Reveal are in its first line, so
they are in the first screen at 1280 x 720. On a phone the sidebar is collapsed: an open question is the first
thing on the page. The sidebar keeps the class's navigation only (:mod:`views.live_sections.panel`: the room,
following or exploring, leaving, the teacher's counts).

``app.py`` draws it on every page, after the sidebar's poll has read the room (a student's ``_live_state``) and
before the page runs. Nothing is drawn outside a class, or in a class with no lesson step and no question."""

from __future__ import annotations

import streamlit as st

import live

from . import asking, room, steps


def stage() -> None:
    """Draw the class's current step and question at the top of the main area (nothing outside a class)."""
    if room.is_teacher():
        _teacher()
    elif room.is_student():
        _student()


def _teacher() -> None:
    try:
        state = room.store().get_state(room.room_code()) or {}
    except live.LiveError:  # the sidebar's counts say the class is paused; the lesson's controls stay
        state = {}
    at = steps.current()
    if at is not None and _moving(state, f"{at[0].id}:{at[1]}"):
        state = {}  # its question ends when this run's page is sent (live.rules.ends_question): not shown meanwhile
        st.session_state[MOVED] = True  # drawn again once the page has arrived, if a question is open then (arrived)
    if at is None and not state.get("question"):
        return
    with st.container(border=True, key="live_stage"):
        if at is not None:
            steps.teacher_nav(*at)
        asking.teacher(state)


MOVED = "_live_moved"  # the teacher's stage was drawn while the page was on its way to the room


def arrived() -> None:
    """``app.py``, after the page's run (and its push to the room, :func:`room.broadcasting`): a teacher whose stage
    was drawn while the page was on its way, and whose room now shows a question, runs again to draw it. A question
    asked as the teacher pressed Next or Previous names the step on its way, so the room shows it only once that
    step's page has arrived (:func:`live.rules.shown`); the class answered a question whose Reveal the teacher could
    not see (browser tier)."""
    if not st.session_state.pop(MOVED, False):
        return
    try:
        open_now = bool((room.store().get_state(room.room_code()) or {}).get("question"))
    except live.LiveError:
        return
    if open_now:
        st.rerun()


def _moving(state: dict, step: str) -> bool:
    """Whether the teacher's page is moving to ``step`` (Next or Previous pressed: the room still holds the step
    before, whose question is sent away at the end of this run)."""
    return bool(st.session_state.get("live_broadcast", True)) and (state.get("params") or {}).get(room.STEP) != step


def _student() -> None:
    state = st.session_state.get("_live_state") or {}
    step = (state.get("params") or {}).get(room.STEP)
    if not state.get("question") and steps.parse_step(step) is None:
        return
    with st.container(border=True, key="live_stage"):
        asking.student(state)  # the question first: it is what a student acts on (a phone shows it first)
        steps.show_step(step)
