"""The Head atlas page's top: the corpus (shipped or uploaded), the build's settings, the build in the background and
its progress (a fragment redrawn every second), and one line on what is on disk."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pandas as pd
import streamlit as st

import models
from models import atlas as A
from models.atlas import corpus as atlas_corpus
from models.atlas import jobs
from models.atlas.build import MAX_TOKENS, REPEATS
from models import jobs as heavy_jobs
from views import hosting, shared
from views.shared import jobs as heavy
from views.shared import uploads

from .common import URL, duration, corpus_name, parts, t, tp

CORPORA = list(URL.options("atlas_corpus"))
PROGRESS_S = 1.0  # the progress bar's refresh
REFRESH_S = 15.0  # while a build runs, the atlas shown is redrawn with the new parts at most this often


@st.cache_resource(max_entries=4, show_spinner=False)
def _shipped_file(language: str, stamp: tuple) -> A.Corpus:
    return A.shipped_corpus(language)


def _shipped(language: str) -> A.Corpus | None:
    """The shipped corpus (read again only when its file changes), or None with a message when it is missing."""
    path = atlas_corpus.ASSETS / f"{language}.jsonl"
    try:
        stat = path.stat()
    except OSError:
        st.warning(t("atlas_no_shipped", corpus=tp(f"atlas_corpus_{language}"), file=path.name))
        return None
    return _shipped_file(language, (str(path), stat.st_mtime_ns, stat.st_size))


def _uploaded(column: str) -> A.Corpus | None:
    """The uploaded corpus (parsed once per file and column), or None: nothing uploaded, or the engine's reason
    shown."""
    file = st.session_state.get("atlas_upload")
    if file is None:
        st.info(t("atlas_upload_needed"))
        return None
    if not uploads.admit(file):  # at most so many files and bytes per session (issue 44)
        return None
    key = (file.file_id, column)
    kept = st.session_state.get("atlas_upload_corpus")
    if kept is not None and kept[0] == key:
        return kept[1]
    try:
        corpus = A.corpus_from_bytes(file.getvalue(), name=file.name, suffix=Path(file.name).suffix or ".txt",
                                     column=column or None)
    except models.DikkatError as exc:
        shared.show_error(exc)
        return None
    st.session_state["atlas_upload_corpus"] = (key, corpus)
    return corpus


@st.fragment(run_every=PROGRESS_S)
def _progress(folder: str, shown_parts: int) -> None:
    """The running build's progress, time left and Stop button, redrawn every second; the whole page is run again
    when the build ends, when its first part arrives, and at most every :data:`REFRESH_S` when more arrive."""
    job = jobs.running(Path(folder))
    if job is None:
        return
    if job.finished:
        st.rerun()
    place = heavy_jobs.pool().position(job.heavy)
    if place:
        st.progress(0.0, text=t("heavy_queued", position=place, workers=heavy_jobs.pool().workers))
    elif job.total:
        text = t("atlas_progress", done=job.done, total=job.total)
        if job.tokens_per_second:
            text += t("atlas_progress_rate", rate=job.tokens_per_second)
        if job.seconds_left is not None:
            text += t("atlas_progress_left", left=duration(job.seconds_left))
        st.progress(min(1.0, job.done / job.total), text=text)
    else:
        st.progress(0.0, text=t("atlas_progress_start"))
    me, teacher = heavy.owner(), heavy.teacher()
    if job.owner != me:
        st.caption(t("heavy_shared"))
    # only the session that started the build, or the class's teacher, may stop it (issue 44)
    if (not job.stopping and not job.finished and heavy_jobs.pool().can_stop(job.heavy, me, teacher=teacher)
            and st.button(t("atlas_stop"), key="atlas_stop")):
        job.stop(me, teacher=teacher)
    if job.stopping:
        st.caption(t("atlas_stopping"))
    written = parts(Path(folder))
    stale = time.monotonic() - st.session_state.get("atlas_shown_at", 0.0) > REFRESH_S
    if written > shown_parts and (shown_parts == 0 or stale):
        st.rerun()


ENGINES = list(URL.options("atlas_engine"))


def _engine() -> tuple[str, int | None] | None:
    """Where the build runs (inside the settings' expander; never Ray in classroom mode, where the class shares
    one machine): None for this server, else Ray's ``(address, workers)`` (workers None: Ray's default)."""
    if hosting.current().classroom:
        return None
    URL.bind("atlas_engine", "here", options=ENGINES)
    st.selectbox(t("atlas_engine"), ENGINES, key="atlas_engine", help=t("atlas_engine_help"),
                 format_func=cast("Callable[[Any], str]", {e: tp(f"atlas_engine_{e}") for e in ENGINES}.get))
    engine = st.session_state.get("atlas_engine") or "here"
    if engine == "here":
        return None
    URL.bind("atlas_workers", 0, bounds=(0, 4096))
    st.number_input(t("atlas_workers"), min_value=0, max_value=4096, step=1, key="atlas_workers")
    workers = int(st.session_state.get("atlas_workers") or 0) or None
    if engine == "ray_local":
        return "local", workers
    URL.bind("atlas_ray_address")
    st.text_input(t("atlas_ray_address"), key="atlas_ray_address", placeholder="auto",
                  help=t("atlas_ray_address_help"))
    return str(st.session_state.get("atlas_ray_address") or "").strip() or "auto", workers


def _settings(loaded: models.LoadedModel, column) -> tuple[int, int, int, tuple | None]:
    """The build's settings in an expander: ``(max_tokens, limit (0: all), repeats, engine)`` (:func:`_engine`)."""
    limit = max(2, int(loaded.max_positions or MAX_TOKENS))
    URL.bind("atlas_max_tokens", min(MAX_TOKENS, limit), bounds=(2, limit))
    URL.bind("atlas_limit", bounds=(0, atlas_corpus.MAX_TEXTS))
    URL.bind("atlas_repeats", REPEATS)
    if not 2 <= int(st.session_state.get("atlas_max_tokens") or 0) <= limit:  # a link or a model with more positions
        st.session_state["atlas_max_tokens"] = min(MAX_TOKENS, limit)
    with column.expander(t("atlas_settings")):
        st.number_input(t("atlas_max_tokens"), min_value=2, max_value=limit, step=64, key="atlas_max_tokens",
                        help=t("atlas_max_tokens_help", limit=limit))
        st.number_input(t("atlas_limit"), min_value=0, max_value=atlas_corpus.MAX_TEXTS, step=16, key="atlas_limit",
                        help=t("atlas_limit_help"))
        st.number_input(t("atlas_repeats"), min_value=0, max_value=URL.bounds("atlas_repeats")[1], step=1,
                        key="atlas_repeats", help=t("atlas_repeats_help"), disabled=loaded.family != "decoder")
        engine = _engine()
    return (int(st.session_state["atlas_max_tokens"]), int(st.session_state["atlas_limit"]),
            int(st.session_state["atlas_repeats"]), engine)


def status(loaded, corpus: A.Corpus, atlas: A.Atlas | None, job, running: bool) -> None:
    """One line on what is on disk; the progress while a build runs; the error that ended the last one."""
    name = corpus_name(corpus.name, own=True)  # the shipped corpus or this session's own upload
    if atlas is not None:
        done, total = atlas.done()
        key = "atlas_status_complete" if atlas.complete else "atlas_status_partial"
        st.caption(t(key, model=shared.model_name(loaded), corpus=name, done=done, total=total))
        _cut(atlas)
    elif not running:
        st.info(t("atlas_status_none", model=shared.model_name(loaded), corpus=name))
    if running:
        _progress(str(job.folder), parts(job.folder))
    elif job is not None and job.error is not None and not (atlas is not None and atlas.complete):
        if isinstance(job.error, models.DikkatError):
            shared.show_error(job.error)
            st.caption(t("atlas_build_failed"))
        else:
            st.error(t("atlas_build_crashed", reason=shared.message(f"{type(job.error).__name__}: {job.error}")))


def _cut(atlas: A.Atlas) -> None:
    """The texts cut to the token limit, with how much was cut (in an expander; a text is shown as text only)."""
    cut = atlas.cut_texts()
    if cut.empty:
        return
    with st.expander(t("atlas_cut", texts=len(cut), max_tokens=atlas.manifest["settings"]["max_tokens"],
                       tokens=int(cut["truncated"].sum()))):
        shared.dataframe(pd.DataFrame({
            tp("atlas_col_text"): cut["text"].to_numpy(dtype=int) + 1,
            tp("atlas_col_cut"): cut["truncated"].to_numpy(dtype=int),
            tp("atlas_col_start"): [str(s) for s in cut["start"]],
        }).head(200), hide_index=True)


def corpus_and_settings(loaded: models.LoadedModel, spec) -> tuple[A.Corpus | None, tuple, list]:
    """The corpus choice, the settings and the place of the build button, in one row above the atlas."""
    default = "tr" if shared.lang() == "tr" and "Turkish" in (spec.languages if spec is not None else "") else "en"
    URL.bind("atlas_corpus", default, options=CORPORA)
    row = st.columns([5, 3, 3], vertical_alignment="bottom")
    corpus_names = {c: tp(f"atlas_corpus_{c}") for c in CORPORA}
    row[0].segmented_control(t("atlas_corpus"), CORPORA, key="atlas_corpus", required=True,
                             format_func=cast("Callable[[Any], str]", corpus_names.get), help=t("atlas_corpus_help"))
    settings = _settings(loaded, row[1])
    choice = st.session_state.get("atlas_corpus") or default
    if choice != "upload":
        return _shipped(choice), settings, row
    URL.bind("atlas_column")
    up, col = st.columns([3, 1])
    up.file_uploader(t("atlas_upload"), type=[s.lstrip(".") for s in atlas_corpus.SUFFIXES], key="atlas_upload")
    col.text_input(t("atlas_column"), key="atlas_column", placeholder="text", help=t("atlas_column_help"))
    return _uploaded(str(st.session_state.get("atlas_column") or "").strip()), settings, row
