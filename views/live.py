"""Class page (issue 29): the teacher's desk of a live class. The teacher types the server's teacher token (never
shown back, never in a link) and opens a room: a big room code and a QR code of the app's address with
``?room=CODE`` for the projector (the teacher's own page holds ``?teach=CODE``: after a reload the sidebar asks for
the token again and the teacher leads the same class, :mod:`views.live_sections.room`); picks a lesson, asks
questions about the page on screen, reveals the class's answers beside the model's, saves the session as a lesson.
Students join in the sidebar (every page) and see the question and the results there; here they read how to join.

Its parts live in :mod:`views.live_sections`; the following itself happens in ``app.py`` around every page.
"""

from __future__ import annotations

import html
from urllib.parse import urlencode, urlsplit, urlunsplit

import segno
import streamlit as st

import live
from views import shared
from views.live_sections import builder, panel, room, steps
from views.shared import t

st.title(t("live_title"))
st.caption(t("live_intro"))


def _open() -> None:
    """Open a room with the typed token; the field is emptied at once (the token is never drawn again)."""
    token = str(st.session_state.get("live_token") or "")
    st.session_state["live_token"] = ""
    try:
        room.open_room(token)
    except live.LiveError as exc:
        room.keep_error(exc)


def _close() -> None:
    try:
        room.close_room()
    except live.LiveError as exc:
        room.keep_error(exc)


def _address() -> str:
    """The address students open: the app's as this browser sees it (editable: a teacher on ``localhost`` types the
    machine's network address)."""
    if "live_address" not in st.session_state:
        seen = st.context.url or "http://localhost:8501"
        parts = urlsplit(seen)
        st.session_state["live_address"] = urlunsplit((parts.scheme, parts.netloc, "/", "", ""))
    return str(st.session_state["live_address"]).strip()


def _link(address: str, code: str, key: str | None, lang: str) -> str:
    """The students' link: the app's address with the room's code and link key (a join by it is not rate limited,
    so a flood of wrong typed codes never locks out the class), and the class's language, the teacher's interface
    language (issue 50: students opening the QR code landed in English while the class was in Turkish; each
    student may switch afterwards)."""
    parts = urlsplit(address if "://" in address else "http://" + address)
    query = {room.ROOM: code, **({room.KEY: key} if key else {}), "lang": lang}
    return urlunsplit((parts.scheme, parts.netloc, parts.path or "/", urlencode(query), ""))


def _link_key(code: str) -> str | None:
    """The room's link key (asked once per session; None while the store does not answer)."""
    if st.session_state.get("_live_link_key", (None,))[0] != code:
        try:
            st.session_state["_live_link_key"] = (code, room.store().link_key(code, room.room_secret()))
        except live.LiveError:
            return None
    return st.session_state["_live_link_key"][1]


def _qr_svg(link: str) -> str:
    """The QR code of ``link`` as inline SVG (segno: paths only, no text of the link inside)."""
    return segno.make(link, error="m").svg_inline(scale=7, border=2, dark="#000000", light="#ffffff")


def _room_card() -> None:
    """The big room code and the QR code of the students' link, for the projector."""
    code = room.room_code()
    link = _link(_address(), code, _link_key(code), shared.lang())
    left, right = st.columns([3, 2], vertical_alignment="center")
    with left:
        st.markdown(t("live_code_heading"))
        st.html(f'<div class="live-code" style="font: 700 88px/1.1 ui-monospace, monospace; letter-spacing: .12em">'
                f"{html.escape(code[:3])}&#8201;{html.escape(code[3:])}</div>")
        st.markdown(t("live_join_at", link=link))
        if urlsplit(link).hostname in ("localhost", "127.0.0.1", "::1"):
            st.warning(t("live_localhost"))
    with right.container(key="live_qr"):
        st.image(_qr_svg(link), width=260)


def _desk() -> None:
    """The room (code and QR code; once a question is asked, the question and its results come first, the code in
    one line), the lesson, a question about the page on screen, saving the session."""
    try:
        state = room.store().get_state(room.room_code()) or {}
    except live.LiveError as exc:
        shared.show_error(exc)
        return
    if state.get("question"):
        link = _link(_address(), room.room_code(), _link_key(room.room_code()), shared.lang())
        st.markdown(t("live_code_line", code=room.code(), link=link))  # the question is above (live_sections/stage)
        with st.expander(t("live_show_code")):
            _room_card()
    else:
        _room_card()
    room.show_error()
    with st.expander(t("live_settings"), expanded=False):
        st.text_input(t("live_address"), key="live_address", help=t("live_address_help"))
        st.button(t("live_close"), key="live_close", on_click=_close)
    left, right = st.columns(2, gap="large")
    with left:
        st.subheader(t("live_lessons"))
        steps.picker()
        st.subheader(t("live_save_heading"))
        steps.save_button()
    with right:
        st.subheader(t("live_ask_heading"))
        builder.builder()


def _start() -> None:
    """No room here: the teacher opens one; a student reads how to join."""
    room.show_error()
    if room.is_student():
        st.info(t("live_student_here", code=room.code()))  # the question and its results are above (stage.py)
    else:
        st.markdown(t("live_how_to_join"))
    st.subheader(t("live_teach"))
    if not room.teaching_possible():
        st.info(t("live_no_token"))
        return
    panel.readiness_line()  # whether every lesson step was opened ahead (make serve's warm-up)
    resuming = None if room.is_student() else room.linked_teach()
    if resuming:  # the sidebar asks for the token (one field): lead this class again there, or open a new one here
        st.info(t("live_resume_here", code=resuming))
    else:
        st.text_input(t("live_token"), key="live_token", type="password", help=t("live_token_help"))
    st.button(t("live_open_new") if resuming else t("live_open"), key="live_open", on_click=_open,
              type="secondary" if resuming else "primary")


if room.is_teacher():
    _desk()
else:
    _start()
