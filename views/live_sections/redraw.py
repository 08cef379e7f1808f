"""A full run the browser never fully got, drawn again: a student's and the teacher's (issue 29, issue 50).

Streamlit 1.67 can drop the rest of a run's messages: when a fragment's timer (a student's poll every second, the
teacher's counts every two) asks for a run after a full run's script has ended but before all its messages were sent,
the new script runner starts and the old one's queue is ignored ("Ignoring event from non-current ScriptRunner";
bench/live_class.py counted 3-17 such runs in a 30-student lesson). The script did run, so the session's state says
the page was drawn, but the browser shows a half-drawn or old page (a teacher's lesson step with an empty page under
it, in a class of 29: bench/lesson_room.py). The browser sends the link it holds with every request: :func:`mark`
puts the number of the full run in it (:data:`SHOWN`) as the run's last message, so a fragment's run whose link lacks
it :data:`REDRAW_AFTER_S` seconds after that run (time for its messages to arrive) means the run was cut
(:func:`lost`)."""

from __future__ import annotations

import time

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

SHOWN = "live_v"  # a viewer's link: the number of the last full run drawn (a student's or the teacher's)
REDRAW_AFTER_S = 3.0  # a full run whose end the browser has not shown after this long is made again


def in_fragment_run() -> bool:
    """Whether this run redraws fragments only (a fragment's timer or widget), not the whole page."""
    ctx = get_script_run_ctx()
    return bool(ctx is not None and ctx.fragment_ids_this_run)


def mark(version: int) -> None:
    """At the end of a full run: put ``version`` (what the run drew) in the link, the run's last message."""
    if st.query_params.get(SHOWN) != str(version):
        st.query_params[SHOWN] = str(version)
    st.session_state["_live_drawn"] = (version, time.monotonic())


def lost() -> bool:
    """From a fragment's run: whether the last full run never fully reached the browser (then at most once per
    :data:`REDRAW_AFTER_S`; the caller draws the page again)."""
    drawn = st.session_state.get("_live_drawn")  # (version, monotonic time) of the last full run
    # only a fragment's run carries the browser's own link: in a full run the link is the one this run is setting
    if drawn is None or not in_fragment_run() or st.query_params.get(SHOWN) == str(drawn[0]):
        return False
    if time.monotonic() - drawn[1] < REDRAW_AFTER_S:
        return False
    st.session_state["_live_drawn"] = (drawn[0], time.monotonic())  # at most one redraw per REDRAW_AFTER_S
    return True
