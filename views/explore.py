"""Explore page: head view, model view, head heatmap and head summary table of one sentence.

Glue only: widgets (each bound to the URL query string, so a shared link reopens the same view), the
cached analysis from :mod:`views.shared`, the numpy transforms of :mod:`viz.transforms` and the figure
builders of :mod:`viz`. The page's state is read once (:func:`read_state`, which draws the controls above the
figure) into one :class:`~views.explore_parts.state.ExploreState`; each view of :mod:`views.explore_parts` takes it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn, cast

import streamlit as st

import models
from views import explore_levels as lv
from views import shared
from views.explore_parts import figures, tables
from views.explore_parts.state import (
    TOKENS_LISTED, URL, WORDS_MAX_LONG, ExploreState, Shown, first_shown, hv_slider, prepared,
)
from views.shared import t

VIEWS = list(URL.options("view"))
OPTIONS = ["hide_special", "hide_first", "avg", "rollout", "value"]


def _read_pair(family: str) -> str | None:
    """The optional second sentence of an encoder, from the link (its field is drawn below the figure)."""
    if family == "encoder":
        URL.read("pair")
    return (st.session_state.get("pair") or "").strip() or None if family == "encoder" else None


def _pair_field(family: str) -> None:
    """The optional second sentence of an encoder (drawn below the figure: the figure comes first on the screen;
    also before the page stops on an error, so a pair that caused it can be changed)."""
    if family != "encoder":
        URL.drop("pair")
        return
    with st.expander(t("pair_expander"), expanded=bool(st.session_state.get("pair"))):
        shared.text_field(t("pair_label"), key="pair", help=t("pair_help"))
        URL.sync("pair")


def _notices(state: ExploreState, more: tuple[str, ...] = ()) -> None:
    """What a long text's reader must know, said once above the figure (issue 33: three notices stacked for one
    512-token text): what was cut, that weights are computed on demand, which window the head view draws."""
    notes = state.long_notes + more
    if notes:
        (state.notice_slot.warning if state.analysis.truncated else state.notice_slot.info)("\n\n".join(notes))


def _stop(family: str, state: ExploreState | None = None) -> NoReturn:
    if state is not None:
        _notices(state)
    _pair_field(family)
    shared.stop()


def _analysis_notes(analysis: models.Analysis) -> None:
    typed = [x.label for x in analysis.tokens + (analysis.target_tokens or []) if x.typed]
    if typed:  # the tokenizer made them the model's own control tokens: say so (issue 13)
        st.info(t("typed_special", tokens=" · ".join(dict.fromkeys(typed))))
    for missing, why in analysis.missing_stacks.items():  # never a silent gap: which stack is not shown, and why
        st.warning(t("missing_stack", stack=t(f"stack_{missing}")) + " " + shared.message(why))


def _controls(stacks: list[str]) -> tuple[str, str, str, dict[str, bool], bool, str]:
    """One row above the figure (issue 33: the figure in the first screen at 1280 x 720): the view, the stack and the
    options (in a popover that names the ones ticked; a ticked option is never hidden: its note is under the
    figure), each read from the link and written back. Returns ``(view, stack, level asked for, options, side by
    side asked for, image format)``."""
    top = st.container(horizontal=True, gap="small", vertical_alignment="bottom")
    with top:
        URL.read("view")
        st.segmented_control(t("view"), VIEWS, key="view", required=True, default="head",
                             format_func=lambda v: t(f"view_{v}"))
        URL.sync("view")
    view = st.session_state.get("view") or "head"
    if len(stacks) > 1:
        with top:
            URL.read("stack", stacks)
            st.selectbox(t("stack"), stacks, key="stack", format_func=lambda s: t(f"stack_{s}"), width=230)
            URL.sync("stack", stacks[0])
    stack = cast(str, st.session_state.get("stack")) if st.session_state.get("stack") in stacks else stacks[0]
    labels = {key: t(f"opt_{key}") for key in OPTIONS}
    level_names = lv.level_names()
    for key in OPTIONS:
        URL.read(key)
    if st.session_state.get("level") not in lv.LEVELS:  # from the link's (or this session's) old key, "words"
        URL.read("words")
        st.session_state["level"] = lv.level_from_link(st.session_state.get("words"))
    level = st.session_state["level"]
    chosen = [labels[k] for k in OPTIONS if st.session_state.get(k)] + (
        [level_names[level]] if level != "tokens" else [])
    with top, st.popover(t("options") + (f" ({len(chosen)})" if chosen else ""), help=t("options_help")):
        st.segmented_control(t("explore_level"), lv.LEVELS, key="level", required=True,
                             format_func=cast("Callable[[Any], str]", level_names.get), help=t("explore_level_help"))
        level = st.session_state.get("level") or "tokens"
        st.session_state["words"] = lv.LEVEL_URL[level]  # the link's value, under the old key
        URL.sync("words")
        for key in OPTIONS:
            st.checkbox(labels[key], key=key, help=t(f"help_{key}"))
            URL.sync(key)
        URL.read("side")
        st.checkbox(t("opt_side"), key="side", help=t("help_side"), disabled=view not in ("head", "model"))
        URL.sync("side")
        URL.read("img_fmt")
        st.segmented_control(t("image_format"), ["PNG", "SVG"], key="img_fmt", required=True, default="PNG",
                             help=t("image_format_help"), disabled=view == "summary")
        URL.sync("img_fmt")
    options = {k: bool(st.session_state.get(k)) for k in OPTIONS}
    return view, stack, level, options, bool(st.session_state.get("side")), st.session_state.get("img_fmt") or "PNG"


def _option_notes(options: dict[str, bool], level: str, mode: str) -> tuple[str, ...]:
    """What the options did, in words (C03, C04)."""
    said = [("hide_special", "note_special"), ("hide_first", "note_first")]
    notes = [t(note) for key, note in said if options[key]]
    notes += [t("note_words")] if level == "words" else []
    notes += [t("explore_note_morphemes")] if level == "morphemes" else []
    notes += [t("note_avg")] if mode == "avg" else ([t("note_rollout")] if mode == "rollout" else [])
    return tuple(notes + ([t("note_value")] if options["value"] else []))


def read_state(sel: shared.Selection, family: str, pair: str | None, analysis: models.Analysis) -> ExploreState:
    """The page's state, read once: draws the controls above the figure (view, stack, options; what an option the
    stack or the input rules out means; layer and head; a long input's head view window) and returns what they
    hold, as every view reads it."""
    stacks = list(analysis.attentions)
    view, stack, level, options, side, img_fmt = _controls(stacks)
    if options["rollout"] and stack == "cross":
        st.warning(t("rollout_cross"))
        options["rollout"] = False
    if options["value"] and (stack == "cross" or analysis.capture_path != "interface"):
        st.warning(t("value_unavailable"))
        options["value"] = False
    long_mode = not analysis.kept
    q_tokens, k_tokens = analysis.axis_tokens(stack)
    n_tokens = max(len(q_tokens), len(k_tokens))
    if long_mode and options["rollout"]:
        st.warning(t("rollout_long", n=len(q_tokens)))
        options["rollout"] = False
    # the level drawn: tokens for a long input past WORDS_MAX_LONG, words for a text that does not read as Turkish
    # (each said in a box, never an error), with the morpheme level's query and key units
    level, units = lv.resolve(level, sel.model, sel.text, pair, stack, n=n_tokens,
                              limit=WORDS_MAX_LONG if long_mode else None)
    mode = "rollout" if options["rollout"] else ("avg" if options["avg"] else "heads")
    n_layers, n_heads_raw = analysis.attentions[stack].shape[:2]
    n_heads = 1 if mode in ("avg", "rollout") else n_heads_raw
    head_names = [t("mean_head")] if mode == "avg" else ([t("rollout_head")] if mode == "rollout" else
                                                          [str(h) for h in range(n_heads)])
    notes = _option_notes(options, level, mode)
    notice_slot = st.empty()
    long_notes = tuple(note for note in (shared.truncation_text(analysis, sel.model),
                                         t("long_mode", n=n_tokens) if long_mode else None) if note)
    sel_cols = st.columns([4, 1])
    # drawn in every view (a widget that is not drawn forgets its value): the layer inactive in the summary table,
    # the head used by the heatmaps only
    layer, head = shared.layer_head("layer", "head", n_layers, n_heads_raw, columns=sel_cols[:2], slider=True,
                                    labels=("layer", "head"),
                                    layer_label=t("rollout_layer") if mode == "rollout" else None,
                                    disabled=(view == "summary", n_heads == 1 or view not in ("model", "heatmap")),
                                    head_help=t("head_help"), url=URL)
    assert head is not None  # no mean over heads offered: always a head
    URL.sync_bound()  # at once: the page may stop before its end
    if analysis.layer_labels.get(stack):
        sel_cols[0].caption(t("hybrid_layers", blocks=", ".join(map(str, analysis.layer_labels[stack]))))
    hv_start = hv_slider(n_tokens) if view == "head" and long_mode else 0
    return ExploreState(
        model=sel.model, text=sel.text, family=family, pair=pair, analysis=analysis, view=view, stack=stack,
        level=level, units=units, **options, side_by_side=side and view in ("head", "model") and bool(analysis.kept),
        fmt=img_fmt.lower(), mode=mode, n_layers=n_layers, n_heads_raw=n_heads_raw, n_heads=n_heads,
        head_names=tuple(head_names), layer=layer, head=0 if n_heads == 1 else head, hv_start=hv_start,
        q_tokens=q_tokens, k_tokens=k_tokens, notes=notes, long_notes=long_notes, notice_slot=notice_slot)


def _prepared_or_stop(state: ExploreState):
    """The weights the view draws (:func:`~views.explore_parts.state.prepared`); an engine error, or nothing left
    to draw once the options hid their tokens, is said and the page stops."""
    try:
        prep = prepared(state)
    except models.DikkatError as exc:
        shared.show_error(exc)
        _stop(state.family, state)
    if prep is not None and (not len(prep.q_labels) or not len(prep.k_labels)):
        st.info(t("nothing_left"))
        _stop(state.family, state)
    return prep


def draw_view(state: ExploreState, prep) -> Shown:
    """The chosen view; returns what it drew of the chosen map (the CSV export's)."""
    shown = first_shown(state, prep)
    if state.view in ("head", "model") and state.side_by_side:  # on a wide screen (issue 33): head beside model view
        side = st.columns(2, gap="medium")
        with side[0]:
            shown = figures.head_view(state, prep, zoom=1.0, width_px=420)
        with side[1]:
            return figures.model_view(state, prep, shown, large=False)
    if state.view == "head":
        return figures.head_view(state, prep)
    if state.view == "model":
        return figures.model_view(state, prep, shown)
    if state.view == "heatmap":
        return figures.heatmap(state, prep, shown)
    tables.summary(state)
    return shown


def below_figure(state: ExploreState, prep, shown: Shown) -> None:
    """Under the figure: the notices above it, what the options did, the tokens, the pair's field, the exports."""
    _notices(state, shown.long_notes)
    if state.morphemes and prep is not None and state.view != "summary":  # what each morpheme is; straddling pieces
        lv.captions(prep, state.units, state.q_tokens, state.k_tokens, cross=state.stack == "cross")
    for note in state.notes:  # what the options did, in words (C03, C04), under the figure they changed
        st.caption("ℹ️ " + note)
    q_tokens = state.q_tokens
    with st.expander(t("tokens_expander", n=len(q_tokens)), expanded=False):
        st.markdown(shared.md(" · ".join(x.label for x in q_tokens[:TOKENS_LISTED])
                              + (" …" if len(q_tokens) > TOKENS_LISTED else "")))
        if state.words and not state.long_mode and prep is not None:
            st.markdown(t("words_line") + " " + shared.md(" · ".join(prep.q_labels)))
        if state.morphemes and not state.long_mode and prep is not None:
            st.markdown(t("explore_morph_line") + " " + shared.md(" · ".join(prep.q_labels)))
    _pair_field(state.family)
    tables.exports(state, shown)


# ---------------------------------------------------------------- page
sel, loaded = shared.page_start("explore_title", "explore_intro", caption=True, text=True)
pair = _read_pair(loaded.family)
if not sel.text.strip():
    st.info(t("type_sentence"))
    _stop(loaded.family)
analysis = shared.analysis_ui(sel.model, sel.text, notice=False, text_pair=pair)
if analysis is None:
    _stop(loaded.family)
_analysis_notes(analysis)
state = read_state(sel, loaded.family, pair, analysis)
prep = _prepared_or_stop(state)
below_figure(state, prep, draw_view(state, prep))
