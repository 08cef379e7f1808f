"""Head atlas page (issue 28): what every head of the sidebar's model does over a whole corpus.

Glue only: the corpus, the build (a background job shared by every session), the metrics, examples, related heads,
causal labels and the queries-and-keys plane come from :mod:`models.atlas`; the figures and the text snippets from
:mod:`viz.atlas`. The page never waits for a build: a fragment shows its progress every second and the atlas of the
texts read so far is shown as soon as the first part is on disk. Its parts live in :mod:`views.atlas_sections`.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import pandas as pd
import streamlit as st

import models
from models import atlas as A
from models.atlas import jobs
from models.atlas.build import PART_TEXTS, REPEATS, check_settings
from views import hosting, shared
from views.shared import jobs as heavy
from views.atlas_sections.build import corpus_and_settings, status
from views.atlas_sections.common import (URL, VERSION_KEY, add_verdicts, atlas_at, atlas_object_clear, corpus_name,
                                         files_gone, heads_frame, interval, on_grid, on_row, stack_name, t, tp)
from views.atlas_sections.head import head_section
from viz import atlas as va

L = shared.lang()
RANKED, FOUND = 12, 20


def _metric_picker() -> tuple[str, bool]:
    """The metric (translated name, one-line definition under it) and whether the lowest come first."""
    URL.bind("atlas_metric", options=A.RANKABLE)
    URL.bind("atlas_lowest")
    c1, c2, _ = st.columns([3, 2, 2], vertical_alignment="bottom")
    names = {m: tp(f"atlas_m_{m}") for m in A.RANKABLE}  # bound now, not at format time
    c1.selectbox(t("atlas_metric"), list(A.RANKABLE), key="atlas_metric",
                 format_func=cast("Callable[[Any], str]", names.get))
    c2.toggle(t("atlas_lowest"), key="atlas_lowest")
    metric = st.session_state.get("atlas_metric") or "previous"
    st.caption(t(f"atlas_d_{metric}"))
    return metric, bool(st.session_state.get("atlas_lowest"))


def _grid(atlas: A.Atlas, metric: str, stack: str, selected: tuple, container, columns: int) -> None:
    """The metric over the stack's layers × heads; a click opens a head."""
    layers, heads = atlas.stacks[stack]
    values = atlas.metric(metric, stack)
    if not np.isfinite(values).any():
        container.info(t("atlas_all_nan", metric=tp(f"atlas_m_{metric}"), stack=stack_name(stack)))
        return
    fig = va.metric_grid(values, selected=selected[1:] if selected[0] == stack else None,
                         title=tp("atlas_grid_title", metric=tp(f"atlas_m_{metric}"), stack=stack_name(stack)),
                         score_title=tp("atlas_col_value"), layer_title=tp("atlas_layer"),
                         head_title=tp("atlas_head"), lang=L)
    key = f"atlas_grid_{stack}_{st.session_state.get(VERSION_KEY, 0)}"
    shared.plotly_chart(fig, container=container, columns=columns, key=key, selection_mode="points", width="stretch",
                        on_select=functools.partial(on_grid, stack, key, layers, heads))
    container.caption(t("atlas_grid_help"))


def _ranking(atlas: A.Atlas, metric: str, lowest: bool, container) -> None:
    """The heads ranked by the metric, with its 95 % interval; a row opens a head."""
    df = atlas.rank(metric, top=RANKED, ascending=lowest)
    df = df[np.isfinite(df[metric].to_numpy(dtype=float))]
    container.markdown(f"**{t('atlas_ranking')}**")
    if df.empty:
        return
    shown, heads = heads_frame(df, len(atlas.stacks) > 1, metric, tp("atlas_col_value"))
    shown[tp("atlas_col_interval")] = [interval(lo, hi) for lo, hi in zip(df[f"{metric}_lo"], df[f"{metric}_hi"])]
    add_verdicts(shown, df)
    key = f"atlas_rank_{st.session_state.get(VERSION_KEY, 0)}"
    shared.dataframe(shown, decimals={tp("atlas_col_value"): 3}, container=container, hide_index=True, key=key,
                     on_select=functools.partial(on_row, key, heads), selection_mode="single-row")
    container.caption(t("atlas_ranking_help"))
    container.caption(t("atlas_verdict_help"))


def _show(name: str, atlas: A.Atlas, metric: str, lowest: bool) -> None:
    """The atlas: the grids and the ranking first, then the picked head."""
    table = atlas.table()
    stacks = list(atlas.stacks)
    best = atlas.rank(metric, top=1, ascending=lowest).iloc[0]
    default = (str(best["stack"]), int(best["layer"]), int(best["head"]))
    URL.bind("atlas_stack", default[0], options=stacks)
    chosen = st.session_state.get("atlas_stack")
    stack = cast(str, chosen) if chosen in stacks else default[0]
    st.session_state["atlas_stack"] = stack
    layers, heads = atlas.stacks[stack]
    shared.clamp("atlas_layer", layers, default[1])
    shared.clamp("atlas_head", heads, default[2])
    selected = (stack, int(st.session_state.get("atlas_layer", default[1])),
                int(st.session_state.get("atlas_head", default[2])))
    if metric == "induction_repeat" and table["induction_repeat"].isna().all():
        st.caption(t("atlas_no_repeats"))
    if len(stacks) == 1:
        left, right = st.columns([1, 1], gap="medium")
        _grid(atlas, metric, stacks[0], selected, left, 2)
        _ranking(atlas, metric, lowest, right)
    else:
        for column, s in zip(st.columns(len(stacks)), stacks):
            _grid(atlas, metric, s, selected, column, len(stacks))
        _ranking(atlas, metric, lowest, st.container())
    st.divider()
    head_section(name, atlas, table, selected, default)


def _find(metric: str, lowest: bool) -> None:
    """The heads of every atlas on disk ranked by the metric."""
    st.subheader(t("atlas_find_title"))
    st.caption(t("atlas_find_help", metric=tp(f"atlas_m_{metric}")))
    try:
        found = A.find_heads(metric, top=FOUND, ascending=lowest)
    except models.AtlasFilesGoneError:
        files_gone()
        return
    except models.DikkatError as exc:
        shared.show_error(exc)
        return
    if found.empty:
        st.caption(t("atlas_find_none"))
        return
    shared.dataframe(add_verdicts(pd.DataFrame({
        tp("atlas_col_model"): [hosting.scrub(str(m)) for m in found["model"]],
        tp("atlas_col_corpus"): [corpus_name(str(c)) for c in found["corpus"]],
        tp("atlas_col_stack"): [stack_name(str(s)) for s in found["stack"]],
        tp("atlas_col_layer"): found["layer"].to_numpy(dtype=int),
        tp("atlas_col_head"): found["head"].to_numpy(dtype=int),
        tp("atlas_col_value"): found["value"].to_numpy(dtype=float),
        tp("atlas_col_texts"): found["texts"].to_numpy(dtype=int),
    }), found), decimals={tp("atlas_col_value"): 3}, hide_index=True)


def _opened(folder) -> tuple[A.Atlas | None, bool]:
    """The atlas in ``folder`` (None before its manifest) with its table read, and whether it is complete. A part
    that went since its build finished is left out, and said (the Resume button reads its texts again); when files
    went while they were read, they are read again once from a fresh object, else said and the atlas treated as not
    built (:func:`files_gone`)."""
    for _ in range(2):
        try:
            atlas = atlas_at(folder)
            if atlas is None:
                return None, False
            atlas.table()
            complete = atlas.complete
            if not complete and atlas.finished:
                st.warning(t("atlas_files_gone"))
            return atlas, complete
        except models.AtlasFilesGoneError:
            A.forget_open()
            atlas_object_clear()
    files_gone()
    return None, False


def _page() -> None:
    sel = shared.selection()
    st.title(t("atlas_title"))
    spec = models.CATALOG.get(sel.model)
    if spec is not None and spec.reads != "text":  # said before loading a model the page cannot use
        st.info(t("atlas_speech", model=sel.model))
        shared.stop()
    st.caption(t("atlas_intro"))
    loaded = shared.load_model_ui(sel.model)
    if loaded is None:
        shared.stop()
    if not loaded.reads_text:
        st.info(t("atlas_speech", model=shared.model_name(loaded)))
        shared.stop()
    corpus, (max_tokens, limit, repeats, engine), row = corpus_and_settings(loaded, spec)
    atlas = job = None
    running = False
    if corpus is not None:
        try:
            settings = check_settings(loaded, max_tokens, limit or None, repeats, None)
            folder = A.folder_for(loaded, corpus, settings)
        except models.DikkatError as exc:
            shared.show_error(exc)
            corpus = None
    if corpus is not None:
        job = jobs.running(folder)
        running = job is not None and not job.finished
        atlas, complete = _opened(folder)
        # a class shares one machine: students build only the shipped corpora with the default settings (the
        # teacher's `make atlases` has them ready); another corpus or setting is for a personal copy
        allowed = not hosting.current().classroom or (
            corpus.source == "shipped" and settings == check_settings(loaded, None, None, REPEATS, None))
        if not running and not complete and not allowed:
            st.info(t("atlas_classroom_builds"))
        elif not running and not complete and row[2].button(
                t("atlas_resume" if atlas is not None else "atlas_build"), key="atlas_build", type="primary",
                help=t("atlas_build_help"), width="stretch"):
            try:
                job = jobs.start(loaded, corpus, owner=heavy.owner(), max_tokens=settings.max_tokens,
                                 limit=settings.limit, repeats=settings.repeats, ray=engine)
                running = True
            except models.DikkatError as exc:
                heavy.refused(exc)  # at most one heavy job per session, a full queue, or the engine's reason
        try:
            status(loaded, corpus, atlas, job, running)
        except models.AtlasFilesGoneError:
            files_gone()
            atlas = None
    metric, lowest = _metric_picker()
    shown = False
    if atlas is not None and not atlas.table().empty:  # read by _opened: no file is opened again here
        st.session_state["atlas_shown_at"] = time.monotonic()
        try:
            _show(sel.model, atlas, metric, lowest)
            shown = True
        except models.AtlasFilesGoneError:
            files_gone()
    if not shown:  # no atlas to show yet (an upload to come, a build's first part): a link's head waits for it
        for key in ("atlas_layer", "atlas_head"):
            URL.bind(key)
        URL.bind("atlas_stack")
        if running:
            st.info(t("atlas_waiting_part", n=PART_TEXTS))
    URL.finish()
    st.divider()
    _find(metric, lowest)


_page()
