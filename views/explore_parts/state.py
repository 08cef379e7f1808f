"""Explore's state: what the page's controls hold, read once by views/explore.py (``read_state``) into one frozen
:class:`ExploreState` that each view takes as its argument; the sizes of the views; the preparation of the weights
drawn (cached) and the head view's window slider (a long input is paged)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import streamlit as st

import models
from views import explore_levels as lv
from views import shared
from views.shared import t
from viz.morphemes import prepare_units
from viz.prepare import Prepared, prepare as prepare_view

if TYPE_CHECKING:
    from streamlit.delta_generator import DeltaGenerator

# The head view draws at most this many tokens (or words) per column; longer inputs are paged.
URL = shared.UrlState("explore")  # the page's link state, one for the page and its parts
HEAD_VIEW_MAX = 48
# The head view drawn 1.4 times its natural size (13 px labels -> 18 px, readable on a projector; issue 33).
HEAD_VIEW_ZOOM = 1.4
# Long inputs (weights computed on demand): the heatmap is pooled to at most HEATMAP_MAX cells a side, with
# a ZOOM x ZOOM window at full resolution; words are merged up to WORDS_MAX_LONG tokens; the token list
# shows the first TOKENS_LISTED tokens.
HEATMAP_MAX = 256
ZOOM = 96
WORDS_MAX_LONG = 2048
TOKENS_LISTED = 600


@dataclass(frozen=True)
class ExploreState:
    """Everything the page's views read, as the controls left it in this run (the options as drawn: an option the
    stack or the input rules out is off here, its warning shown)."""

    model: str  # the sidebar's model and text
    text: str
    family: str  # the model's family (an encoder takes a second sentence, ``pair``)
    pair: str | None
    analysis: models.Analysis
    view: str  # one of views/explore.py's VIEWS
    stack: str
    level: str  # the level drawn: ``tokens``, ``words`` or ``morphemes`` (after the fallbacks of lv.resolve)
    units: tuple  # the morpheme level's (query units, key units, None); Nones at another level
    hide_special: bool
    hide_first: bool
    avg: bool
    rollout: bool
    value: bool
    side_by_side: bool  # the head view beside the model view
    fmt: str  # the figures' image format: ``png`` or ``svg``
    mode: str  # ``heads``, ``avg`` or ``rollout``
    n_layers: int
    n_heads_raw: int  # the stack's heads
    n_heads: int  # the heads drawn: 1 for the mean or the rollout
    head_names: tuple[str, ...]
    layer: int
    head: int
    hv_start: int  # a long input's head view window (its first row); 0 otherwise (the head view pages its own)
    q_tokens: Sequence[models.Token]
    k_tokens: Sequence[models.Token]
    notes: tuple[str, ...]  # what the options did, in words (C03, C04), captioned under the figure
    long_notes: tuple[str, ...]  # what a long text's reader must know, said once above the figure
    notice_slot: DeltaGenerator  # where those notes go (an st.empty)

    @property
    def long_mode(self) -> bool:
        """A long input: its weights are not held, each map computed on demand."""
        return not self.analysis.kept

    @property
    def words(self) -> bool:
        return self.level == "words"

    @property
    def morphemes(self) -> bool:
        return self.level == "morphemes"

    @property
    def n_tokens(self) -> int:
        return max(len(self.q_tokens), len(self.k_tokens))

    @property
    def stem(self) -> str:
        """The file name of the figures and exports of the chosen map, without extension."""
        return (f"dikkat_{self.model.replace('/', '_')}_{self.stack}_L{self.layer}"
                + (f"_H{self.head}" if self.n_heads > 1 else f"_{self.mode}"))


@dataclass(frozen=True)
class Shown:
    """What a view drew of the chosen map: the matrix the CSV export writes and its labels (None: nothing, the
    summary table), and the notes for the notice above the figure it adds (the head view's window)."""

    matrix: np.ndarray | None
    q_labels: Sequence[str] = ()
    k_labels: Sequence[str] = ()
    long_notes: tuple[str, ...] = ()


@shared.cached
def prepare(model: str, text: str, pair: str | None, stack: str, hide_special: bool, hide_first: bool,
            level: str, mode: str, value: bool = False, layer: int | None = None, head: int | None = None,
            rows: tuple[int, int] | None = None) -> Prepared:
    """:func:`viz.prepare.prepare` of the cached analysis (cached too; the result is shared, read-only); with
    ``value`` the weights are value-weighted by the cached flow's norms (:func:`shared.get_flow`); ``level``
    ``tokens``, ``words`` or (a Turkish text) ``morphemes``: :func:`viz.morphemes.prepare_units`."""
    norms = shared.get_flow(model, text, text_pair=pair, stack=stack).value_norms if value else None
    a = shared.get_analysis(model, text, text_pair=pair)
    args: dict[str, Any] = dict(hide_special=hide_special, hide_first=hide_first, mode=mode, layer=layer, head=head,
                                rows=rows)
    if level == "morphemes":
        return prepare_units(a, stack, *lv.morpheme_units(model, text, pair, stack)[:2], **args, value_norms=norms)
    return prepare_view(a, stack, words=level == "words", **args, value_norms=norms)


def prepared(state: ExploreState) -> Prepared | None:
    """The weights the view draws (a spinner meanwhile): every layer of a held analysis; of a long input the chosen
    layer only (the head view's window of query rows, the other views' chosen head), none for its summary table (it
    reads the statistics). Raises :class:`models.DikkatError` as :func:`prepare`."""
    args = (state.model, state.text, state.pair, state.stack, state.hide_special, state.hide_first, state.level,
            state.mode, state.value)
    with st.spinner(t("preparing") if not state.long_mode else t("computing_layer", layer=state.layer)):
        if not state.long_mode:
            return prepare(*args)
        if state.view == "head":
            # the window's query rows (cross-attention has fewer queries than keys: keep a full window)
            n_q = len(state.q_tokens)
            r0 = max(0, min(state.hv_start, n_q - HEAD_VIEW_MAX))
            return prepare(*args, layer=state.layer, rows=(r0, min(n_q, r0 + HEAD_VIEW_MAX)))
        if state.view == "summary":
            return None  # the summary reads the statistics only
        return prepare(*args, layer=state.layer, head=None if state.n_heads == 1 else state.head)


def first_shown(state: ExploreState, prep: Prepared | None) -> Shown:
    """The chosen map of ``prep`` (its layer and head inside ``prep.weights``) and its labels, before a view draws
    part of it (a heatmap's zoom window, the head view's window)."""
    if prep is None:
        return Shown(None)
    p_layer = 0 if state.long_mode else state.layer
    p_head = 0 if (state.long_mode and state.view != "head") else state.head
    matrix = prep.weights[p_layer, p_head] if state.view != "summary" else None
    return Shown(matrix, prep.q_labels, prep.k_labels)


def computed_or_stop(lazy, stack: str):
    """``lazy[stack]`` of ``Analysis.statistics`` / ``overview`` (one more pass the first time, with a spinner);
    an engine error is shown and the page stops."""
    try:
        with st.spinner(t("computing_overview")):
            return lazy[stack]
    except models.DikkatError as exc:
        shared.show_error(exc)
        shared.stop()


def hv_slider(n_rows: int) -> int:
    """The head view's first row: a slider when ``n_rows`` exceeds HEAD_VIEW_MAX (long inputs are paged)."""
    if n_rows <= HEAD_VIEW_MAX:
        URL.drop("hv_start")
        return 0
    URL.read("hv_start")
    shared.clamp("hv_start", n_rows - HEAD_VIEW_MAX + 1)
    start = st.slider(t("hv_window"), 0, n_rows - HEAD_VIEW_MAX, value=0, step=1, key="hv_start")
    URL.sync("hv_start")
    return int(start)
