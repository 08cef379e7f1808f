"""The pages' side of the heavy-work pool (:mod:`models.jobs`): who this session is, starting or joining a job with a
message in the interface language when it is refused, and a job's place in the queue, progress and Stop button
(shown only to its starter or the class's teacher), redrawn every second.

Imported directly (``from views.shared import jobs as heavy``), not through ``views.shared``."""

from __future__ import annotations

import uuid
from typing import Any
from collections.abc import Callable, Hashable

import streamlit as st

import models
from models import jobs as J

from .output import show_error
from .strings import t

OWNER_KEY = "_heavy_owner"  # this session's id as the pool knows it (Session State: one per browser session)
POLL_S = 1.0


def owner() -> str:
    """This session's id for the pool (random, kept in Session State for the session's life)."""
    if OWNER_KEY not in st.session_state:
        st.session_state[OWNER_KEY] = uuid.uuid4().hex
    return st.session_state[OWNER_KEY]


def teacher() -> bool:
    """Whether this session leads a live class (a teacher may stop any job)."""
    try:
        from views.live_sections import room
        return room.is_teacher()
    except Exception:  # noqa: BLE001 - no class module, no teacher
        return False


def _kind(kind: str) -> str:
    """The job kind in the interface language."""
    return t(f"heavy_kind_{kind}")


def refused(exc: models.DikkatError) -> None:
    """Show why a job was not started (``heavy_busy`` with its kind translated; others as any engine error)."""
    if isinstance(exc, J.HeavyJobBusyError):
        st.error(t("errmsg_heavy_busy", kind=_kind(exc.params.get("kind", ""))))
    else:
        show_error(exc)


def start(kind: str, params: Hashable, fn: Callable[[J.Job], Any], *, again: bool = False) -> J.Job | None:
    """Start or join the job ``(kind, params)`` for this session; None (the reason shown) when it is refused.

    Args:
        kind: ``"atlas"``, ``"cost"``, ``"pruning_curve"`` or ``"experiment"`` (named in ``heavy_kind_<kind>``).
        params: hashable, naming the job fully (the model, the texts, the settings).
        fn: ``fn(job) -> result``, run on the pool's worker.
        again: compute again even when a finished result is kept.
    """
    try:
        return J.pool().submit(kind, params, owner(), fn, again=again)
    except (J.HeavyJobBusyError, J.HeavyQueueFullError) as exc:
        refused(exc)
        return None


def find(kind: str, params: Hashable) -> J.Job | None:
    """The pool's job ``(kind, params)`` (queued, running, or finished and kept), or None."""
    return J.pool().get(kind, params)


def panel(job: J.Job, key: str, text: Callable[[J.Job], str] | None = None) -> None:
    """The job's place in the queue or its progress bar, and Stop for its starter or the teacher.

    Args:
        job: the pool's job. key: the Stop button's widget key.
        text: the progress bar's text while it runs (default: the percentage).
    """
    pool = J.pool()
    place = pool.position(job)
    if place:
        st.progress(0.0, text=t("heavy_queued", position=place, workers=pool.workers))
    elif not job.finished:
        label = text(job) if text is not None else t("heavy_running", pct=f"{job.fraction:.0%}")
        st.progress(job.fraction, text=label)
    if job.owner != owner():
        st.caption(t("heavy_shared"))
    if job.stopping:
        st.caption(t("heavy_stopping"))
    elif not job.finished and pool.can_stop(job, owner(), teacher=teacher()) and st.button(t("heavy_stop"), key=key):
        pool.stop(job, owner(), teacher=teacher())
        st.caption(t("heavy_stopping"))


@st.fragment(run_every=POLL_S)
def follow(kind: str, params: Hashable, key: str, text: Callable[[J.Job], str] | None = None) -> None:
    """:func:`panel` (``text`` as there) redrawn every second while the job is queued or running; the whole page runs
    again when it ends."""
    job = find(kind, params)
    if job is None:
        return
    if job.finished:
        st.rerun()
    panel(job, key, text)


def stopped_note(job: J.Job | None) -> None:
    """Say that this session's job was stopped (``heavy_stopped``), or nothing."""
    if job is not None and job.state == "stopped":
        st.caption(t("heavy_stopped"))


def kept_run(kind: str, params: Hashable, *, cache_key: Hashable, ahead_job, loaded: models.LoadedModel,
             compute: Callable[[Callable[[float], None]], Any], pressed: bool, again: bool, stop_key: str,
             text: Callable[[J.Job], str] | None = None) -> Any:
    """A result that is computed on the heavy-work pool, put into the shared cache and kept on disk: the pruning curve
    and the experiments (issue 44 point 5; the Cost page's measurement keeps its own record).

    When ``pressed``, the job ``(kind, params)`` is started or joined (:func:`start`; a refusal is shown): on the
    pool's worker it runs ``compute(progress)`` (``progress(fraction)`` reports to the job and ends it early once its
    starter or the teacher pressed Stop), keeps the result on disk for ``ahead_job`` (:func:`~.cache.run_and_keep`)
    and in :data:`~.cache.CACHE` under ``cache_key`` (dropped first when ``again``). The session remembers what it
    asked for; while that job is queued or running its place or progress and Stop are shown (:func:`follow`), and
    the page runs again when it ends; a teacher's finished result makes the class's pages run again
    (:func:`views.live_sections.steps.redraw_class`), so it shows on every student's screen.

    Args:
        kind: ``"pruning_curve"`` or ``"experiment"``. params: hashable, naming the result fully (model, texts ...).
        cache_key: the result's key in the shared cache. ahead_job: :class:`models.ahead.Job` naming it on disk.
        loaded: the model it runs on. compute: ``compute(progress) -> result``.
        pressed: the page's Run button was pressed in this run. again: compute again although a result is kept.
        stop_key: the Stop button's widget key. text: the progress bar's text (default: the percentage).

    Returns:
        The result when this session's job ended in this run's view of it (done), else None: the page reads the
        cache as before; a failed job's error is shown (an engine error as any, another by its type and message).
    """
    from .cache import CACHE, run_and_keep
    from .output import message

    asked_key = f"_heavy_asked::{kind}"
    if pressed:
        def fn(job: J.Job) -> Any:
            if again:
                CACHE.discard(cache_key)
            return CACHE.get_or_create(cache_key, lambda: run_and_keep(ahead_job, loaded, lambda: compute(job.step)))

        # the page offers the button only when it has no result or to compute it again: a finished job the pool still
        # keeps is not served instead (its result may have left the cache and the disk since); a queued or running
        # one is joined
        if start(kind, params, fn, again=True) is not None:
            st.session_state[asked_key] = params
    if st.session_state.get(asked_key) != params:
        return None
    job = find(kind, params)
    if job is None:
        return None
    if not job.finished:
        follow(kind, params, stop_key, text)
        return None
    if job.state == "failed":
        st.session_state.pop(asked_key, None)
        show_error(job.error) if isinstance(job.error, models.DikkatError) else st.error(
            message(f"{type(job.error).__name__}: {job.error}"))
        return None
    stopped_note(job)
    if job.state != "done":
        return None
    told = f"_heavy_told::{kind}"
    if st.session_state.get(told) != job.seq:  # once per job: a teacher's result reaches the class's pages
        st.session_state[told] = job.seq
        if teacher():
            from views.live_sections import steps
            steps.redraw_class()
    return job.result
