"""A session's part in a live class (issue 29): the teacher who opened a room, or a student who joined one, and
how a student's page follows the teacher's.

What lives where:

* the teacher's secret: this session's Session State only (server side; never in the URL, never shown). A class
  in a URL: ``?room=CODE&key=KEY`` in the link and QR code the teacher shows (the key, :meth:`live.BaseStore.link_key`,
  joins without the typed-code rate limits, issue 44), plus ``&seat=ID`` on a student's own page once joined (the
  student id, 128 random bits the server made, taken again only while the room holds that seat), ``?teach=CODE`` on
  the teacher's own page. A reload or a second tab (a new session, its Session State gone) finds the class again
  from it: a student takes the same seat again (:func:`join`: one student, one seat, one answer per question); a
  teacher is asked for the server's teacher token, and with it leads the room again
  (:func:`resume_room`; the room gets a new secret and the earlier session stops leading it). A student who copies
  the teacher's link has the code, which the projector shows anyway, but not the token: a student at most;
* the room's state (the page the class follows and its link's parameters, the question): the store
  (:func:`live.store_from_env`: one process's memory, or the Redis every replica shares).

Following: :func:`poll` (the sidebar's fragment every two seconds and when the room's change wakes it, :mod:`.wake`, and
inline on every full run) reads the room's version; when it grew and the student follows, the new page and parameters
become a pending move (``_live_goto``). ``app.py`` calls :func:`follow` after ``st.navigation``: it drops the page's
widget values from Session State (and the link values :mod:`views.shared.urlstate` keeps for a page visited again), so
the page's ``UrlState.read`` reads the teacher's, and opens the page with ``st.switch_page(..., query_params=...)``.
Broadcasting: :func:`broadcasting` wraps the page's run in ``app.py``; when the page has run (or stopped), the teacher's
page and link are pushed with ``set_state`` if they changed.
"""

from __future__ import annotations

import secrets
from contextlib import contextmanager

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

import live
import models
import pagestate
from live import config as live_config
from live import rules as live_rules
from live.base import teacher_elsewhere
from views import hosting, shared

from . import redraw
from .redraw import REDRAW_AFTER_S, SHOWN, in_fragment_run  # noqa: F401  (room.SHOWN, room.in_fragment_run ...)

ROOM = "room"  # the query parameter of a student's link: the room code, nothing else of a class
TEACH = "teach"  # the query parameter of the teacher's own page: the room code (a reload offers to lead it again)
STEP = live_rules.LESSON_STEP  # a broadcast parameter only: "<lesson id>:<step index from 0>"
KEY = "key"  # the room's link key beside ROOM in the teacher's link: a join that no wrong-code flood locks out
SEAT = "seat"  # a joined student's own link: their student id, so a reload or a second tab is the same student
OWN = (*pagestate.OWN, ROOM, KEY, SEAT, TEACH, SHOWN)  # each viewer's own: never broadcast or taken from the teacher
DEFAULT_PAGE = "explore"  # app.py's default page, whose url_path is ""
DESK = "live"  # the Class page: the teacher's desk, not broadcast
FOLLOWED = frozenset(pagestate.FOLLOWED)  # the pages a class follows (app.py: views/<page>.py)


def store() -> live.RoomStore:
    """This process's store (:func:`live.store_from_env`). Raises :class:`live.LiveUnavailable`."""
    return live.store_from_env()


def client_key() -> str:
    """Who asks, for the store's rate limits: the client's address (:func:`live.rules.client_address`: the
    connection's peer, or behind Dikkat's nginx the address nginx saw), so that a bot opening new browser sessions
    stays one client; this session's id where Streamlit has no address (no browser: AppTest)."""
    ctx = get_script_run_ctx()
    if ctx is None:
        return "none"
    remote, forwarded = None, ""
    try:  # the raw peer: st.context.ip_address hides 127.0.0.1 and ::1 (a proxy on this machine) as None
        from streamlit import runtime

        client = runtime.get_instance().get_client(ctx.session_id) if runtime.exists() else None
        context = client.client_context if client is not None else None
        if context is not None:
            remote = context.remote_ip
            forwarded = ",".join(v for k, v in context.headers if str(k).lower() == "x-forwarded-for")
    except (AttributeError, RuntimeError):  # no runtime (AppTest), or one shutting down
        remote = None
    return live_rules.client_key(ctx.session_id, remote, forwarded, live_config.behind_proxy())


def linked_teach() -> str | None:
    """The room code of this page's ``?teach=`` (a teacher's page reloaded), normalised; None when there is none
    or it cannot be a code (so it is safe to show)."""
    return live_rules.normalize_code(st.query_params.get(TEACH))


def code() -> str | None:
    """The room this session teaches or has joined."""
    return st.session_state.get("_live_code")


def room_code() -> str:
    """:func:`code` as the stores take it: ``""`` when this session is in no room (a store refuses it as it refuses
    any code of no room: :class:`live.NoSuchRoom`)."""
    return code() or ""


def room_secret() -> str:
    """:func:`secret` as the stores take it: ``""`` when this session teaches no room (refused as not the teacher)."""
    return secret() or ""


def student() -> str:
    """This session's student id in its room as the stores take it (``""`` before it joins one)."""
    return str(st.session_state.get("_live_student") or "")


def is_teacher() -> bool:
    return bool(st.session_state.get("_live_secret")) and code() is not None


def is_student() -> bool:
    return code() is not None and not st.session_state.get("_live_secret")


def following() -> bool:
    return is_student() and bool(st.session_state.get("_live_follow", True))


def teaching_possible() -> bool:
    """Whether this server can hold a class: a teacher token is set (else no room can be opened here)."""
    return bool(live.teacher_token())


def keep_error(exc: Exception | None) -> None:
    """Keep an error for the panel to show (in the viewer's language) on its next draw."""
    st.session_state["_live_error"] = exc


def show_error(container=None) -> None:
    """The kept error, translated (:func:`views.shared.error_text`: ``errmsg_<code>``), then forgotten."""
    exc = st.session_state.pop("_live_error", None)
    if exc is not None:
        (container or st).error(shared.error_text(exc))


# -------------------------------------------------------------------------------------------- the teacher


def _lead(room: str, secret: str) -> None:
    """Make this session the teacher of ``room`` (whatever it was in before)."""
    for key in [k for k in st.session_state if str(k).startswith("_live_")]:
        del st.session_state[key]
    st.session_state.update({"_live_code": room, "_live_secret": secret, "_live_record": []})


def open_room(token: str) -> None:
    """Open a room with the server's teacher token; the secret goes to this session's state only."""
    room, secret = store().create_room(token, client_key=client_key())
    _lead(room, secret)


def resume_room(room: str, token: str) -> None:
    """Lead the open room ``room`` again from this session (the teacher's page was reloaded): the server's teacher
    token is checked by the store (rate limited per client, as opening a room), which gives the room a new secret,
    for this session only. The class stays where it is: the page it follows is taken as already sent, and the
    lesson step it shows (a shipped lesson's) as the teacher's. Raises :class:`live.LiveError`."""
    secret = store().resume_room(room, token, client_key=client_key())
    normal = live_rules.normalize_code(room)
    assert normal is not None  # the store has just found a room with this code
    _lead(normal, secret)
    state = store().get_state(normal) or {}
    if state.get("page"):
        st.session_state["_live_sent"] = (state["page"], dict(state.get("params") or {}))
    lesson_id, _, index = str((state.get("params") or {}).get(STEP, "")).rpartition(":")
    if lesson_id and index.isdigit():
        st.session_state["_live_lesson"] = lesson_id
        st.session_state["_live_step"] = (lesson_id, int(index))


def still_teacher() -> bool:
    """Whether this teacher's session still leads its room; when the room is gone, or was taken up again in another
    tab or on another device (:func:`resume_room` there), the session's part in it is dropped and the reason kept
    for the panel. A store that cannot be reached keeps the session as it is (asked again next run)."""
    try:
        if store().teaches(room_code(), room_secret()):
            return True
        error: Exception = teacher_elsewhere()
    except live.NoSuchRoom as exc:
        error = exc
    except live.LiveError:
        return True
    forget()
    _drop_link(TEACH)
    keep_error(error)
    return False


def _drop_link(name: str) -> None:
    if name in st.query_params:
        del st.query_params[name]


def close_room() -> None:
    """End the class (the store forgets it) and this session's part in it."""
    try:
        store().close_room(room_code(), room_secret())
    finally:
        forget()
        _drop_link(TEACH)


def forget() -> None:
    """Drop this session's part in a room (teacher or student)."""
    for key in ("_live_code", "_live_secret", "_live_sent", "_live_seen", "_live_state", "_live_applied",
                "_live_goto", "_live_step", "_live_lesson", "_live_drawn", "_live_key"):
        st.session_state.pop(key, None)


def secret() -> str | None:
    return st.session_state.get("_live_secret")


def page_name(page) -> str:
    """The app page ``page`` (an ``st.Page``) is: its URL path, the default page's being ``""``."""
    return page.url_path or DEFAULT_PAGE


def teacher_params() -> dict[str, str]:
    """What the teacher's page shows, as a link: the URL's parameters (less the viewer's own), the sidebar's model
    and sentence always (their defaults follow each viewer's language), the heads switched off on the Head
    pruning page for this model (``off``), and the lesson step being taught."""
    params = {k: v for k, v in st.query_params.to_dict().items() if k not in OWN}
    for key in pagestate.SIDEBAR:
        if isinstance(st.session_state.get(key), str):
            params[key] = hosting.clip(st.session_state[key])
    off = shared.heads.link_value(params.get("model_key", ""))
    if off:
        params["off"] = off
    else:
        params.pop("off", None)
    step = st.session_state.get("_live_step")
    if step is not None:
        params[STEP] = f"{step[0]}:{step[1]}"
    return params


def broadcast(name: str) -> None:
    """Push the teacher's page ``name`` and :func:`teacher_params` when they changed since the last push (and
    broadcasting is on); record it for "Save this session as a lesson"."""
    if not is_teacher() or not st.session_state.get("live_broadcast", True) or name not in FOLLOWED:
        return
    params = teacher_params()
    if st.session_state.get("_live_sent") == (name, params):
        return
    push(name, params)


UNSENT = "_live_unsent"  # the teacher's page the store could not take (it was down): pushed when it answers again


def push(name: str, params: dict) -> None:
    """Make ``name`` with ``params`` the room's state (a new version); kept to push again while the store is down."""
    st.session_state.pop(UNSENT, None)
    try:
        store().set_state(room_code(), room_secret(), name, params)
    except live.NoSuchRoom as exc:
        forget()
        keep_error(exc)
        return
    except live.LiveUnavailable:  # the panel says the class is paused; the teacher's poll pushes it again
        st.session_state[UNSENT] = (name, params)
        return
    except live.LiveError as exc:
        keep_error(exc)
        return
    st.session_state["_live_sent"] = (name, params)
    record = st.session_state.setdefault("_live_record", [])
    if not record or (record[-1]["page"], record[-1]["params"]) != (name, params):
        record.append({"page": name, "params": dict(params), "question": None})


def push_unsent() -> None:
    """From the teacher's poll: the page the store could not take while it was down (Redis killed, frozen or
    reloading), pushed now, so the class moves on by itself once the store answers (issue 44: after a Redis restart the
    students stayed on the old page until the teacher's next change)."""
    unsent = st.session_state.get(UNSENT)
    if unsent is not None and is_teacher() and st.session_state.get("live_broadcast", True):
        push(*unsent)


@contextmanager
def broadcasting(page):
    """``app.py``: ``with broadcasting(page): shared.run_page(page)``: after the page's run, also one that ended early
    (:func:`views.shared.stop`: ``st.stop`` would leave nothing able to run after it), the teacher's page goes to the
    class (:func:`broadcast`) and the viewer's link and page get the run's number (:func:`mark_drawn`); a rerun asked
    mid-way does neither."""
    yield
    broadcast(page_name(page))
    mark_drawn()


# -------------------------------------------------------------------------------------------- a student


def _seat(typed: str, seat: str | None) -> str | None:
    """``seat`` when the room ``typed`` names holds it (a reload or a second tab of a joined student), else None."""
    if not seat or not live_rules.is_student(seat) or live_rules.normalize_code(typed) is None:
        return None
    try:
        return seat if store().seated(typed, seat) else None
    except live.NoSuchRoom:
        return None


def join(typed: str, key: str | None = None, seat: str | None = None) -> None:
    """Join the room ``typed`` names and follow it. With the link's ``key`` the join is not rate limited; a typed
    code is (per client address and for the server: the store counts wrong codes). The student id is the link's
    ``seat`` when the room holds it (the same student after a reload), else the session's, made once (128 random
    bits). Raises :class:`live.LiveError`."""
    student = _seat(typed, seat) or st.session_state.get("_live_student") or secrets.token_urlsafe(16)
    st.session_state["_live_student"] = student
    room = store().join_attempt(typed, client_key(), student_id=student, link_key=key or None)
    forget()
    st.session_state.update({"_live_code": room, "_live_follow": True, "_live_key": key or None})


def student_link() -> dict[str, str]:
    """What a joined student's own link holds of the class: the room, its link key (when joined by the link) and
    the student's seat."""
    link = {ROOM: code(), SEAT: st.session_state.get("_live_student")}
    if st.session_state.get("_live_key"):
        link[KEY] = st.session_state["_live_key"]
    return {k: v for k, v in link.items() if v}


def sent_answer(qid: int):
    """The answer this student has sent to the open question ``qid``: the session's, else the store's (a reloaded
    page shows what was sent before); None when none was."""
    answers = st.session_state.setdefault("_live_answers", {})
    if (code(), qid) not in answers:
        try:
            value = store().answer_of(room_code(), qid, student())
        except live.LiveError:
            return None
        if value is None:
            return None
        answers[(code(), qid)] = value
    return answers[(code(), qid)]


def leave() -> None:
    """A student leaves the room (and its code, key and seat leave the page's link)."""
    forget()
    for name in (ROOM, KEY, SEAT):
        _drop_link(name)


def set_following(on: bool) -> None:
    """Detach (explore freely) or rejoin: rejoining moves to the room's current state at once."""
    st.session_state["_live_follow"] = on
    if on:
        st.session_state.pop("_live_applied", None)
        st.session_state.pop("_live_seen", None)


def poll() -> bool:
    """A student's look at the room: a heartbeat (the teacher's count), its version, and when that grew its state;
    a following student whose room shows another page or link gets a pending move (:func:`follow`).

    Returns:
        whether the page must be drawn again (the state changed, the room is gone, or a kept answer was sent).
    """
    if not is_student():
        return False
    if run_lost():
        return True
    room, seat_id = room_code(), student()
    try:
        rooms = store()
        sent = send_pending(rooms)
        rooms.heartbeat(room, seat_id)
        version = rooms.version(room)
        if version == st.session_state.get("_live_seen"):
            return sent
        state = rooms.get_state(room)
    except live.NoSuchRoom as exc:
        leave()
        keep_error(exc)
        return True
    except live.LiveUnavailable:  # the panel says the class is paused (:func:`paused`) until it answers again
        return False
    except live.LiveError as exc:
        keep_error(exc)
        return False
    if state is None:
        leave()
        return True
    st.session_state["_live_seen"] = state["version"]
    st.session_state["_live_state"] = state
    target = (state["page"], state["params"])
    if following() and state["page"] in FOLLOWED and st.session_state.get("_live_applied") != target:
        st.session_state["_live_applied"] = target
        st.session_state["_live_goto"] = target
    return True


def paused() -> bool:
    """Whether the class's store has stopped answering (Redis down, frozen or reloading): the panel says "class
    paused, reconnecting" and nothing is lost; it goes by itself when the store answers again."""
    try:
        return store().outage_s() is not None
    except live.LiveError:
        return True


def one_process() -> bool:
    """Whether this server keeps the class in its own memory (no Redis): a restart of the server ends it."""
    try:
        return isinstance(store(), live.MemoryStore)
    except live.LiveError:
        return False


PENDING = "_live_pending"  # (room, question id) -> an answer the store could not take yet (it was down)


def send_pending(rooms: live.RoomStore | None = None) -> bool:
    """Send the answers kept while the store was down (:func:`views.live_sections.asking` keeps them): each one
    sent becomes the student's answer; one the room no longer takes (revealed meanwhile) is dropped with its
    reason. Returns whether one was sent or dropped (the page is then drawn again to say so). Raises
    :class:`live.LiveUnavailable` while the store is still down (the answers stay kept)."""
    pending = st.session_state.get(PENDING) or {}
    rooms = rooms or store()
    handled = False
    for (room, qid), value in list(pending.items()):
        try:
            rooms.answer(room, qid, student(), value)
        except live.LiveUnavailable:
            raise
        except live.LiveError as exc:
            keep_error(exc)
        else:
            st.session_state.setdefault("_live_answers", {})[(room, qid)] = value
        del pending[(room, qid)]
        handled = True
    return handled


def mark_drawn() -> None:
    """At the end of a full run of a student's or the teacher's page: the run's number, put in the link
    (:func:`.redraw.mark`), so that a run the browser never fully got is found (:func:`run_lost`). Every full run is
    numbered, not each version of the room's state: one version may take several runs, and any of them may be cut."""
    if not (is_student() or is_teacher()):
        return
    runs = st.session_state["_live_runs"] = int(st.session_state.get("_live_runs", 0)) + 1
    redraw.mark(runs)


def run_lost() -> bool:
    """Whether the last full run drawn for this viewer never fully reached its browser (:func:`.redraw.lost`); for a
    following student, the move to the teacher's page is then made again."""
    if not redraw.lost():
        return False
    applied = st.session_state.get("_live_applied")
    if following() and applied is not None:
        st.session_state["_live_goto"] = applied
    return True


def go(name: str, params: dict[str, str]) -> None:
    """Ask for a move to page ``name`` with ``params`` (a lesson step of the teacher's own): made by :func:`follow`
    on this run or, from a fragment, the next full one."""
    st.session_state["_live_goto"] = (name, dict(params))


def _heads_off(model: str, params: dict[str, str]) -> None:
    """The heads the teacher switched off (``off``), set for ``model`` as a link opened now would."""
    spec = models.CATALOG.get(model)
    if spec is not None:
        shared.heads.heads_from_class(model, pagestate.model_stacks(spec), params.get("off", ""))


def follow() -> None:
    """``app.py`` after ``st.navigation``, and a student's poll fragment that found a change: make a pending move
    (:func:`poll`, :func:`go`). From the fragment, ``st.switch_page`` reruns the whole app on the teacher's page at
    once (a run of the old page first cost every student one more run per change). The page's widget values
    and the link values kept for it are dropped, so its ``UrlState.read`` reads the new link; then the page opens with
    it (the viewer's language and, for a student, ``?room=`` kept; for the teacher, ``?teach=``)."""
    goto = st.session_state.pop("_live_goto", None)
    if not goto or goto[0] not in FOLLOWED:
        return
    name, params = goto
    for key in {*pagestate.keys_of(name), *params} - set(OWN):
        st.session_state.pop(key, None)
        shared.url_drop(key)
    _heads_off(params.get("model_key", ""), params)
    query = {k: v for k, v in params.items() if k != STEP and (k != "off" or name == "pruning")}
    if shared.lang() != "en":
        query["lang"] = shared.lang()
    if is_student():
        query.update(student_link())
    elif is_teacher():
        query[TEACH] = code()
    st.switch_page(f"views/{name}.py", query_params=query)
