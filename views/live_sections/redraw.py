"""A full run the browser never fully got, drawn again: a student's and the teacher's (issue 29, issue 50).

Streamlit 1.67 can drop the rest of a run's messages: when a fragment's timer (a student's poll every two seconds, the
teacher's counts every two) asks for a run after a full run's script has ended but before all its messages were sent,
the new script runner starts and the old one's queue is ignored ("Ignoring event from non-current ScriptRunner";
bench/live_class.py counted 3-17 such runs in a 30-student lesson). The script did run, so the session's state says
the page was drawn, but the browser shows a half-drawn or old page (a teacher's lesson step with an empty page under
it, in a class of 29: bench/lesson_room.py). The browser sends the link it holds with every request: :func:`mark`
puts the number of the full run in it (:data:`SHOWN`) as the run's last message, so a fragment's run whose link lacks
it :data:`REDRAW_AFTER_S` seconds after that run (time for its messages to arrive) means the run was cut
(:func:`lost`).

The link is not the page: bench/lesson_room.py's second lesson left a student's step 1 as the lesson's box over an
empty page for 300 s with the run's number in its link (the elements lost or cleared while the link's message
arrived). So :func:`mark` also draws a marker holding the number at the end of the main area (:data:`MARKER`, hidden
by app.css), and the poll's watchdog in the browser (:mod:`.polling`) asks for the page again (:func:`asked`) when
the marker of the last full run is not in the page: what the viewer sees, whatever removed it."""

from __future__ import annotations

import time

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

SHOWN = "live_v"  # a viewer's link: the number of the last full run drawn (a student's or the teacher's)
REDRAW_AFTER_S = 3.0  # a full run whose end the browser has not shown after this long is made again
OPEN = "_live_open"  # (monotonic time a full run began, redraws made for it) until the run's end closes it
MAX_REDRAWS = 3  # a run that never ends (a page that fails) is drawn again at most this many times
MARKER = "dk-drawn"  # class of the element that holds a full run's number at the end of the main area
ASKED = "_live_redraw_asked"  # the browser found the last full run's marker missing: (run number, times asked)


def begin() -> None:
    """At the start of every full run (``app.py``): the run is open until :func:`mark` closes it at its end. A run
    that began and never ended was stopped part-way (a fragment's run took its place, issue 50: the lesson walk's
    student showed the lesson's box over an empty page, the link holding the number of the run before, which had
    ended), and the browser holds what it drew before it stopped; :func:`lost` finds it."""
    ctx = get_script_run_ctx()
    if ctx is not None and ctx.fragment_ids_this_run:
        return
    redraws = (st.session_state.get(OPEN) or (0.0, 0))[1]
    st.session_state[OPEN] = (time.monotonic(), redraws)


def in_fragment_run() -> bool:
    """Whether this run redraws fragments only (a fragment's timer or widget), not the whole page."""
    ctx = get_script_run_ctx()
    return bool(ctx is not None and ctx.fragment_ids_this_run)


def mark(version: int) -> None:
    """At the end of a full run: the marker holding ``version`` (what the run drew) at the end of the main area, then
    ``version`` in the link, the run's last message."""
    with st.container(key="live_drawn"):  # hidden by app.css; found by the poll's watchdog (:mod:`.polling`)
        st.html(f'<span class="{MARKER}" data-run="{int(version)}"></span>')
    if st.query_params.get(SHOWN) != str(version):
        st.query_params[SHOWN] = str(version)
    st.session_state["_live_drawn"] = (version, time.monotonic())
    st.session_state.pop(OPEN, None)


def lost() -> bool:
    """From a fragment's run: whether the last full run never fully reached the browser (then at most once per
    :data:`REDRAW_AFTER_S`; the caller draws the page again): it began and never ended (:func:`begin`; at most
    :data:`MAX_REDRAWS` times in a row), or it ended but the browser's link lacks its number."""
    drawn = st.session_state.get("_live_drawn")  # (version, monotonic time) of the last full run
    # only a fragment's run carries the browser's own link: in a full run the link is the one this run is setting
    if drawn is None or not in_fragment_run():
        return False
    asked = st.session_state.get(ASKED)
    if asked is not None and asked[0] == drawn[0] and asked[1] > 0:  # the page lacks the run's marker
        st.session_state[ASKED] = (asked[0], -asked[1])  # answered; counted against MAX_REDRAWS for this run
        return asked[1] <= MAX_REDRAWS
    opened = st.session_state.get(OPEN)
    if opened is not None:  # the last full run began and never ended: stopped part-way
        if opened[1] >= MAX_REDRAWS or time.monotonic() - opened[0] < REDRAW_AFTER_S:
            return False
        st.session_state[OPEN] = (time.monotonic(), opened[1] + 1)
        return True
    if st.query_params.get(SHOWN) == str(drawn[0]):
        return False
    if time.monotonic() - drawn[1] < REDRAW_AFTER_S:
        return False
    st.session_state["_live_drawn"] = (drawn[0], time.monotonic())  # at most one redraw per REDRAW_AFTER_S
    return True


def asked(version: int | None) -> None:
    """The poll's watchdog (:mod:`.polling`): the browser's page lacks the marker of full run ``version``; the next
    fragment's run draws the page again (:func:`lost`), at most :data:`MAX_REDRAWS` times for one run (a page that
    fails before its end never draws its marker)."""
    if version is None:
        return
    before = st.session_state.get(ASKED)
    times = abs(before[1]) if before is not None and before[0] == version else 0
    st.session_state[ASKED] = (version, times + 1)


def last_drawn() -> int | None:
    """The number of this session's last full run that ended (:func:`mark`), or None."""
    drawn = st.session_state.get("_live_drawn")
    return None if drawn is None else int(drawn[0])
