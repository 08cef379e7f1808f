"""A teacher's change wakes the students' pages at once (issue 48): without it a student's page noticed the change at
its next poll, up to a poll interval later (the poll's wait was most of the p95 of the teacher's change reaching the
class).

Each student's poll fragment (:mod:`views.live_sections.panel`) enlists its session here with the room's code and the
fragment's id (:func:`enlist`). The process's store reports every change of a room's version (:meth:`live.base.
BaseStore.watch`: at once in this process, through Redis pub/sub from any replica), and :func:`_changed` asks each
enlisted session of that room for one run of its poll fragment, as the fragment's timer in the browser would, with the
session's last link and page (what Streamlit's "run on save" reruns with). That run is the poll itself
(:func:`views.live_sections.room.poll`): it reads the new state and moves the page, so a woken page and a polled one
take the same path, and the poll stays the guarantee when a wake is lost.

The run is asked on Streamlit's event loop, only of a session that has no script run under way (a run whose last
messages are not all sent yet counts as under way: :mod:`views.shared.reruns`), so the page it names is the one the
browser was last sent. A busy session is asked again every :data:`AGAIN_S`, for at most :data:`TRY_S`. (Telling the
browser to fire its own timer at once instead, an ``auto_rerun`` of 150 ms, made every woken page run together a
moment later: from the teacher's click, p95 3.8 s against 2.9 s, ``bench/live_class.py``.)

Streamlit has no public call for a run the browser did not ask for; this uses the runtime's session manager and the
session's saved client state. Where those are missing (another Streamlit, AppTest) nothing is woken and the poll does
it all.
"""

from __future__ import annotations

import logging
import threading
import time

from streamlit.runtime.scriptrunner import get_script_run_ctx

AGAIN_S = 0.05  # a session busy with a run is asked again this often ...
TRY_S = 10.0  # ... for at most this long (then its poll finds the change)

_log = logging.getLogger(__name__)
_lock = threading.Lock()
_rooms: dict[str, dict[str, str]] = {}  # room code -> {session id: its poll fragment's id}
_watched: set[int] = set()  # the stores (their id()) this module watches


def enlist(code: str, store) -> None:
    """In a student's poll fragment's body (its own run or inline in a full run): this session is woken by room
    ``code``'s changes (:func:`_changed`), and no other room's; ``store`` (a :class:`live.RoomStore`) is watched
    from now on. Outside a script run (a plain call in a test) it does nothing."""
    from streamlit.runtime.scriptrunner_utils.script_run_context import ThreadState

    ctx = get_script_run_ctx()
    if ctx is None:
        return
    fragment_id = ThreadState.get().fragment_id
    if not fragment_id:
        return
    with _lock:
        if id(store) not in _watched:
            _watched.add(id(store))
            store.watch(_changed)
        for other, sessions in list(_rooms.items()):
            if other != code and sessions.pop(ctx.session_id, None) is not None and not sessions:
                del _rooms[other]
        _rooms.setdefault(code, {})[ctx.session_id] = fragment_id


def enlisted(code: str) -> dict[str, str]:
    """The sessions room ``code`` wakes: session id -> its poll fragment's id (a copy)."""
    with _lock:
        return dict(_rooms.get(code, {}))


def _forget(code: str, session_id: str) -> None:
    with _lock:
        sessions = _rooms.get(code)
        if sessions is not None:
            sessions.pop(session_id, None)
            if not sessions:
                del _rooms[code]


def _runtime():
    """Streamlit's running runtime and its event loop, or (None, None) (no server: AppTest, a plain call)."""
    from streamlit import runtime

    if not runtime.exists():
        return None, None
    instance = runtime.get_instance()
    objs = getattr(instance, "_async_objs", None)
    return (instance, objs.eventloop) if objs is not None else (None, None)


def _changed(code: str) -> None:
    """The store's watcher (any thread): ask every session enlisted in room ``code`` for a run of its poll."""
    sessions = enlisted(code)
    if not sessions:
        return
    instance, loop = _runtime()
    if loop is None:
        return
    until = time.monotonic() + TRY_S
    for session_id, fragment_id in sessions.items():
        try:
            loop.call_soon_threadsafe(_wake, instance, loop, code, session_id, fragment_id, until)
        except RuntimeError:  # the loop is closed: the server is stopping
            return


def _wake(instance, loop, code: str, session_id: str, fragment_id: str, until: float) -> None:
    """On the event loop: one run of ``fragment_id`` for the session, when it has no run under way (else again in
    :data:`AGAIN_S`, until ``until``); a session that has gone is forgotten."""
    from streamlit.proto.ClientState_pb2 import ClientState

    try:
        info = instance._session_mgr.get_active_session_info(session_id)
        if info is None:
            _forget(code, session_id)
            return
        session = info.session
        if session._scriptrunner is not None:  # a run under way, or its last messages not yet sent
            if time.monotonic() < until:
                loop.call_later(AGAIN_S, _wake, instance, loop, code, session_id, fragment_id, until)
            return
        state = ClientState()
        state.CopyFrom(session._client_state)  # the last run's link and page, as "run on save" reruns
        state.fragment_id, state.is_auto_rerun = fragment_id, True
        session.request_rerun(state)
    except AttributeError:  # another Streamlit's internals: the poll does it
        _log.debug("no live wake in this Streamlit", exc_info=True)
