"""The sidebar's part of a live class (issue 29), on every page: a student joins with the room code (typed, or from
the ``?room=`` of the teacher's link or QR code), follows the teacher, detaches to explore and rejoins, reads the
lesson step and answers the question; the teacher sees the room, how many are connected and answered, and leads
the lesson. A teacher's page reloaded (``?teach=CODE``, :mod:`views.live_sections.room`) asks for the teacher token
to lead the class again, or joins it as a student. On a server without a teacher token, and without a room in the
link, it shows nothing.

A fragment polls the room every :data:`STUDENT_POLL_S` seconds (:func:`views.live_sections.room.poll`; the teacher's
every two), and the teacher's change runs it at once (:mod:`.wake`; the poll is what remains when a wake is lost): when
the room changed, a following student's page moves (:func:`~views.live_sections.room.follow`). On a full run the
fragment's body runs inline first, so a run that is not the fragment's (a click, a test's ``AppTest.run``) follows the
room too.
"""

from __future__ import annotations

import streamlit as st

import live
from live import readiness
from views.shared import t

from . import asking, polling, room, steps, wake


def live_panel() -> None:
    """Draw the panel in the sidebar (``views/shared/sidebar.py`` calls it inside ``st.sidebar``)."""
    if room.is_teacher():
        _teacher()
    elif room.is_student():
        _student()
    else:
        _join()


# ------------------------------------------------------------------------------------------- joining


def _join_typed() -> None:
    try:
        room.join(str(st.session_state.get("live_code_input") or ""))
    except live.LiveError as exc:
        room.keep_error(exc)


def _resume(code: str) -> None:
    """Lead the class again with the typed token; the field is emptied at once. A class that is gone leaves the
    link."""
    token = str(st.session_state.get("live_token") or "")
    st.session_state["live_token"] = ""
    try:
        room.resume_room(code, token)
    except live.NoSuchRoom as exc:
        del st.query_params[room.TEACH]
        room.keep_error(exc)
    except live.LiveError as exc:
        room.keep_error(exc)


def _as_student(code: str) -> None:
    """Not the teacher: join the class as a student (the rate-limited join), the page's link becoming a student's."""
    del st.query_params[room.TEACH]
    st.query_params[room.ROOM] = code  # no key: the teacher's own link has none, so this join is rate limited
    st.session_state["_live_tried"] = code
    try:
        room.join(code)
    except live.LiveError as exc:
        room.keep_error(exc)


def _resume_form(code: str) -> None:
    """A teacher's page reloaded: the teacher token leads the class again; without it, join as a student."""
    with st.container(border=True, key="live_resume_box"):
        st.markdown(t("live_resume_title", code=code))
        room.show_error()
        st.text_input(t("live_token"), key="live_token", type="password", help=t("live_token_help"))
        st.button(t("live_resume"), key="live_resume", on_click=_resume, args=(code,), type="primary")
        st.button(t("live_resume_student"), key="live_resume_student", on_click=_as_student, args=(code,))


def _join() -> None:
    teach = room.linked_teach() if room.teaching_possible() else None
    if teach:
        _resume_form(teach)
        return
    linked = st.query_params.get(room.ROOM)
    if not linked and not room.teaching_possible() and "_live_error" not in st.session_state:
        return
    if linked and st.session_state.get("_live_tried") != linked:  # a link's room: tried once, on its first run
        st.session_state["_live_tried"] = linked
        st.session_state.setdefault("live_code_input", linked[:12])
        try:
            room.join(linked, key=st.query_params.get(room.KEY), seat=st.query_params.get(room.SEAT))
        except live.LiveError as exc:
            room.keep_error(exc)
        else:
            _student()
            return
    with st.expander(t("live_join_title"), expanded=bool(linked) or "_live_error" in st.session_state):
        room.show_error()
        st.text_input(t("live_code_label"), key="live_code_input", placeholder="ABC123")
        st.button(t("live_join"), key="live_join", on_click=_join_typed, type="primary")


# ------------------------------------------------------------------------------------------- a student


STUDENT_POLL_S = 2  # a student's poll: a heartbeat, kept answers sent, and a teacher's change when its wake was lost


@st.fragment(run_every=STUDENT_POLL_S)
def _student_poll() -> None:
    """Every :data:`STUDENT_POLL_S` s and when the room wakes it (:mod:`.wake`): heartbeat and the room's version; a
    change draws the app again (its page may move)."""
    polling.keep(STUDENT_POLL_S)
    if room.is_student():
        _enlist()
    if room.poll() and room.in_fragment_run():
        room.follow()  # a move to the teacher's page goes there at once: one full run, not this page's first
        st.rerun()
    if room.paused():  # drawn by the fragment each second: it goes by itself when the store answers again
        st.warning(t("live_paused"), icon=":material/pause_circle:")


def _enlist() -> None:
    """This session is woken by its room's changes (:mod:`.wake`), not only at its next poll."""
    try:
        wake.enlist(room.room_code(), room.store())
    except live.LiveError:  # no store (REPLICAS without Redis): the panel says so
        pass


def _student() -> None:
    _student_poll()
    if not room.is_student():  # the room closed meanwhile
        _join()
        return
    for name, value in room.student_link().items():  # a reload or a second tab (a new session): the same seat
        if st.query_params.get(name) != value:
            st.query_params[name] = value
    state = st.session_state.get("_live_state") or {}
    with st.container(border=True, key="live_panel"):
        if room.following():
            st.markdown(t("live_following", code=room.code()))
            st.button(t("live_detach"), key="live_detach", on_click=room.set_following, args=(False,),
                      help=t("live_detach_help"))
        else:
            st.markdown(t("live_exploring", code=room.code()))
            st.button(t("live_rejoin"), key="live_rejoin", on_click=room.set_following, args=(True,), type="primary",
                      help=t("live_rejoin_help"))
        room.show_error()
        if state.get("page") is None:
            st.caption(t("live_waiting"))
        elif (state.get("question") or {}) and not state.get("revealed"):  # the question is on the main page
            st.caption(t("live_question_above"))
        st.button(t("live_leave"), key="live_leave", on_click=room.leave, type="tertiary")


# ------------------------------------------------------------------------------------------- the teacher


@st.fragment(run_every=2)
def _teacher_counts() -> None:
    """Every two seconds: how many students are connected and, while a question is open, how many answered. A
    session that no longer leads the room (closed, or led from another tab now) draws the whole app again, which
    says so (:func:`~views.live_sections.room.still_teacher`)."""
    polling.keep(2)
    if room.run_lost():  # the teacher's last full run never fully reached the browser: draw the page again
        st.rerun()
    room.push_unsent()  # a change the store could not take while it was down
    try:
        leads = room.store().teaches(room.room_code(), room.room_secret()) if room.in_fragment_run() else True
    except live.NoSuchRoom:
        leads = False
    except live.LiveError:
        st.warning(t("live_paused"), icon=":material/pause_circle:")
        return
    if not leads:
        st.rerun()
    try:
        present = room.store().present(room.room_code())
        state = room.store().get_state(room.room_code()) or {}
    except live.LiveError:
        st.warning(t("live_paused"), icon=":material/pause_circle:")
        return
    line = t("live_teacher_counts", code=room.code(), n=present)
    answered = asking.answered(state)
    if answered is not None:
        line += " · " + t("live_answered_count", n=answered)
    st.markdown(line)
    readiness_line()


def readiness_line() -> None:
    """Whether the server has opened every lesson step ahead (``deploy/warm.py`` writes its progress for this
    process's port, :mod:`live.readiness`): "preparing k of n" with a bar, then "ready". Nothing without a warm-up."""
    ready = readiness.read(st.get_option("server.port"))
    if ready is None:
        return
    if ready.ready:
        line = t("live_ready", n=ready.total, s=round(ready.seconds))
        st.caption(line + (" " + t("live_ready_failed", n=ready.failed) if ready.failed else ""))
    else:
        st.caption(t("live_preparing", done=ready.done, total=ready.total))
        st.progress(ready.done / ready.total)


def _teacher() -> None:
    if not room.still_teacher():  # closed, expired, or led from another tab now
        _join()
        return
    if st.query_params.get(room.TEACH) != room.code():  # a reload finds the class again (with the token)
        st.query_params[room.TEACH] = room.room_code()
    if room.ROOM in st.query_params:  # a student before: not now
        del st.query_params[room.ROOM]
    if "live_broadcast" not in st.session_state:
        st.session_state["live_broadcast"] = True
    with st.container(border=True, key="live_panel"):
        _teacher_counts()
        st.toggle(t("live_broadcast"), key="live_broadcast", help=t("live_broadcast_help"))
        room.show_error()
        if steps.current() is None:  # a lesson's step, its question and Reveal are on the main page (stage.py)
            st.caption(t("live_teacher_hint"))
        if room.one_process():
            st.caption(t("live_one_process"))
