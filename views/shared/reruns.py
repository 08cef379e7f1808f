"""No run's last messages dropped for a fragment's timer (issues 48 and 50).

Streamlit 1.67 drops the rest of a run when a fragment's rerun (a ``run_every`` timer in the browser: a student's
poll every second, a job's progress) arrives after the run's script has ended in its thread but before the event
loop has sent the run's last messages: ``AppSession.request_rerun`` finds its ScriptRunner stopped, starts a new one
at once, and from then on ignores the old one's pending events ("Ignoring event from non-current ScriptRunner" in its
debug log). The browser keeps a half-drawn page; in a live class the student stays on the old step until the page's
watchdog asks for it again (:mod:`views.live_sections.redraw`, 4 s or more). The more sessions a server runs at once,
the longer the event loop takes to send a run's messages and the more often a tick lands in that gap:
``bench/live_class.py`` counted 4-19 such "lost runs" in a lesson of 30 students.

:func:`install` makes such a fragment rerun wait, on the event loop, until the stopped runner's last event (its
``SHUTDOWN``, after all of its messages) has been handled, every :data:`AGAIN_S`, for at most :data:`GIVE_UP_S`; then
it is asked as before and starts a runner that loses nothing. A full rerun (a click) is left as Streamlit makes it:
it replaces the page anyway. Where Streamlit's internals differ (another version), nothing is changed.
"""

from __future__ import annotations

import asyncio
import logging
import time

AGAIN_S = 0.005  # a deferred fragment rerun is tried again this often ...
GIVE_UP_S = 5.0  # ... for at most this long, then asked as Streamlit would

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
        runner = getattr(self, "_scriptrunner", None)
        if client_state is not None and client_state.fragment_id and runner is not None and _stopped(runner):
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
        original(self, client_state)

    request_rerun._waits_for_the_last_run = True  # type: ignore[attr-defined]
    request_rerun.__doc__ = original.__doc__
    AppSession.request_rerun = request_rerun  # type: ignore[method-assign]
    return True
