"""A fragment's timer that never breaks a page (issues 48 and 50), in two ways that Streamlit 1.67 allows:

* **A run's last messages dropped.** A fragment's rerun (a ``run_every`` timer in the browser: a student's poll, a
  job's progress) that arrives after a run's script has ended in its thread but before the event loop has sent the
  run's last messages makes ``AppSession.request_rerun`` start a new ScriptRunner at once and ignore the old one's
  pending events ("Ignoring event from non-current ScriptRunner" in its debug log): the browser keeps a half-drawn page
  (``bench/live_class.py`` counted 4-19 such "lost runs" in a lesson of 30). A timer's tick then is now dropped (the
  timer fires again); a rerun a widget asks for waits, on the event loop, until the stopped runner's last event (its
  ``SHUTDOWN``, after all of its messages) has been handled, every :data:`AGAIN_S`, for at most :data:`GIVE_UP_S`.
  (Holding every tick so made the loop itself the bottleneck under a class of thirty woken at once.)
* **A page emptied by a tick from the page before.** A timer's tick carries the page the browser showed when it fired.
  One that runs after a move to another page (queued behind the move's run, or merged into it) starts a run whose
  ``new_session`` names the old page; the browser then clears every element of the page it shows and keeps the app's
  own (a live class's lesson box over an empty page, for good: the page's marker, drawn by the app, was still there).
  A timer's tick that arrives during a run is dropped (that run is the fragment's own, or a full run, which runs
  every fragment and arms its timer again), and so is one that arrives on an idle session whose page is no longer the
  tick's. A rerun a widget asks for (a click in a fragment, the live poll's watchdog) is left to Streamlit's queue (made
  to wait only for a stopped run's last messages): holding it until the run's end waited 5 s at a time under a class
  of thirty (``bench/live_class.py``).

A full rerun (a click outside a fragment, a new page) is left as Streamlit makes it. Where Streamlit's internals
differ (another version), :func:`install` changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time

AGAIN_S = 0.02  # a widget's deferred fragment rerun is tried again this often ...
GIVE_UP_S = 5.0  # ... for at most this long (a page's long run), then asked as Streamlit would

_log = logging.getLogger(__name__)


def _stopped(runner) -> bool:
    """Whether ``runner`` takes no more reruns: its script ended, its last events maybe not yet handled."""
    from streamlit.runtime.scriptrunner_utils.script_requests import ScriptRequestType

    requests = getattr(runner, "_requests", None)
    return getattr(requests, "_state", None) == ScriptRequestType.STOP


def install() -> bool:
    """Wrap ``AppSession.request_rerun`` once per process (above). Returns whether it is wrapped (False: this
    Streamlit lacks what the wrapper reads; its own behaviour is kept)."""
    try:
        from streamlit.runtime.app_session import AppSession
        from streamlit.runtime.scriptrunner_utils.script_requests import ScriptRequestType  # noqa: F401
    except ImportError:  # pragma: no cover - another Streamlit
        return False
    original = AppSession.request_rerun
    if getattr(original, "_waits_for_the_last_run", False):
        return True

    def request_rerun(self, client_state, _until: float | None = None) -> None:
        if client_state is None or not client_state.fragment_id:  # a full rerun: as Streamlit makes it
            original(self, client_state)
            return
        runner = getattr(self, "_scriptrunner", None)
        if runner is not None and client_state.is_auto_rerun:
            return  # a timer's tick while a run is under way (the fragment's own, or one that runs it) or its last
            # messages are on their way: the timer fires again
        if runner is not None and _stopped(runner):  # its last messages not all sent yet: after them
            until = time.monotonic() + GIVE_UP_S if _until is None else _until
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # not on the event loop: as Streamlit would
                loop = None
            if loop is not None and time.monotonic() < until:
                loop.call_later(AGAIN_S, request_rerun, self, client_state, until)
                return
            if loop is not None:
                _log.warning("a fragment's rerun waited %.1f s for the last run's messages", GIVE_UP_S)
        page, now = client_state.page_script_hash, getattr(self, "_client_state", None)
        if (runner is None and client_state.is_auto_rerun and page and now is not None and now.page_script_hash
                and page != now.page_script_hash):
            return  # sent from the page before a move: its run would empty the page the browser shows now
        original(self, client_state)

    request_rerun._waits_for_the_last_run = True  # type: ignore[attr-defined]
    request_rerun.__doc__ = original.__doc__
    AppSession.request_rerun = request_rerun  # type: ignore[method-assign]
    return True
