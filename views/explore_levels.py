"""Explore's level control (tokens / words / morphemes; issue 32): the link's values, the morpheme units of a text
(cached), the word level for a text that does not read as Turkish, and what the page says about the morphemes (the
heatmap's hover, the legend and the straddling pieces under the figure). Not a page: views/explore.py calls it, and
it holds no Session State of its own. The numbers are :mod:`viz.morphemes`'s.

The Information flow and Head pruning pages draw one ``(query, key)`` map at a time from an analysis of their own
(heads switched off, a mask, their own token limit): :func:`control` draws their level choice under the page's own
key, :func:`page_axes` groups that analysis's axes (the same fallbacks, said the same way) and :func:`describe`
writes the same legend under their figures.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import streamlit as st

import models
from models import turkish
from views import shared
from views.shared import t
from viz.morphemes import legend_lines, straddling_pieces, unit_hover, word_axis

if TYPE_CHECKING:
    from models.turkish.units import MorphemeUnits
    from viz.morphemes import LevelAxis

LEVELS = ["tokens", "words", "morphemes"]
# the link keeps the old key, "words": 1 is the word level (a link made before the morpheme level still opens it),
# "morphemes" the morpheme level; tokens are the default, not written
LEVEL_URL = {"tokens": "0", "words": "1", "morphemes": "morphemes"}
_FROM_URL = {"1": "words", "true": "words", "yes": "words", "on": "words", "morphemes": "morphemes",
             "morpheme": "morphemes", "m": "morphemes"}


def level_from_link(raw) -> str:
    """The level a link's (or a lesson's) ``words`` value asks for: ``1``/``true`` words, ``morphemes``; else
    tokens."""
    return _FROM_URL.get(str(raw if raw is not None else "").strip().lower(), "tokens")


def level_names() -> dict[str, str]:
    """Each level's name in the interface language."""
    return {"tokens": t("explore_level_tokens"), "words": t("opt_words"), "morphemes": t("explore_level_morphemes")}


@shared.cached
def morpheme_units(model: str, text: str, pair: str | None, stack: str):
    """``(query units, key units, None)`` of :func:`models.turkish.analysis_units` for the cached analysis, or
    ``(None, None, share)`` when the text does not read as Turkish (``share``: of its words the analyzer knows).
    Cached per model, text and stack (zeyrek's first use loads its lexicon, about 2 s)."""
    try:
        return (*turkish.analysis_units(shared.get_analysis(model, text, text_pair=pair), stack), None)
    except turkish.NotTurkishError as exc:
        return None, None, float(exc.params.get("share", 0.0))


def resolve(level: str, model: str, text: str, pair: str | None, stack: str, *, n: int,
            limit: int | None = None) -> tuple[str, tuple]:
    """The level to draw and the morpheme level's ``(query units, key units, None)`` (Nones at another level).

    Past ``limit`` tokens (a long input: ``n`` of them) words and morphemes give way to tokens, with a warning; a
    text that does not read as Turkish gives the word level, with an info box (never an error)."""
    none = (None, None, None)
    if level != "tokens" and limit is not None and n > limit:
        st.warning(t("explore_morph_long" if level == "morphemes" else "words_long", n=n, m=limit))
        return "tokens", none
    if level != "morphemes":
        return level, none
    units = _units_or_words(model, text, pair, stack)
    return ("morphemes", units) if units is not None else ("words", none)


def _units_or_words(model: str, text: str, pair: str | None, stack: str):
    """The morpheme units (a spinner while zeyrek loads), or None for the word level: a text that does not read as
    Turkish is told so in an info box (never an error), an engine error in a warning."""
    try:
        with st.spinner(t("explore_morph_loading")):
            units = morpheme_units(model, text, pair, stack)
    except models.DikkatError as exc:  # never a traceback: the word level instead, and why
        st.warning(t("explore_morph_error") + " " + shared.message(exc))
        return None
    if units[0] is None:
        st.info(t("explore_morph_not_turkish", share=units[2]))
        return None
    return units


def _names():
    lang = shared.lang()
    return functools.partial(turkish.label_name, lang=lang), {k: v[lang] for k, v in turkish.KIND_NAMES.items()}


def hover(prep) -> tuple[list[str], list[str]]:
    """``"yi — accusative: definite object (-(y)I)"`` for each row and column of a morpheme-level ``prep``."""
    names, kinds = _names()
    return unit_hover(prep.q_labels, prep.q_units, names, kinds), unit_hover(prep.k_labels, prep.k_units, names, kinds)


def captions(prep, units, q_tokens, k_tokens, cross: bool) -> None:
    """Under the figure: what each morpheme is (stems plainly), and the pieces that straddle two morphemes (split
    in proportion to their characters, flagged), counted."""
    names, kinds = _names()
    lines, more = legend_lines(prep.q_units, names, kinds, segments=prep.q_segments)
    if lines:
        st.caption(t("explore_morph_legend", items=" · ".join(lines) + (" …" if more else "")))
    straddle = straddling_pieces(q_tokens, units[0].straddling)
    n_pieces = sum(not x.special for x in q_tokens)
    if cross:  # the keys are the source text's pieces
        straddle += straddling_pieces(k_tokens, units[1].straddling)
        n_pieces += sum(not x.special for x in k_tokens)
    st.caption("ℹ️ " + (t("explore_morph_straddle", n=len(straddle), total=n_pieces,
                              pieces=" · ".join(dict.fromkeys(straddle)))
                        if straddle else t("explore_morph_no_straddle")))


# ---- the level on a page that draws one map at a time (Information flow, Head pruning) -------------------------


def control(key: str, help_text: str) -> str:
    """The level choice (tokens / words / morphemes) under the page's own widget ``key`` (bound to the link by the
    page); returns the level asked for."""
    names = level_names()
    return st.segmented_control(t("explore_level"), LEVELS, key=key, required=True,
                                format_func=cast("Callable[[Any], str]", names.get), help=help_text) or "tokens"


def page_axes(analysis, stack: str, level: str) -> tuple[str, LevelAxis | MorphemeUnits | None,
                                                        LevelAxis | MorphemeUnits | None]:
    """``(level drawn, query axis, key axis)`` of ``analysis``'s ``stack`` at ``level``: the axes are None at the
    token level; the word level's are :func:`viz.morphemes.word_axis`; the morpheme level's are
    :func:`models.turkish.analysis_units` (a piece that straddles two morphemes has a share in each). A text that
    does not read as Turkish gives the word level with an info box, an engine error the word level with a warning,
    as on Explore (never an error)."""
    if level == "tokens":
        return "tokens", None, None
    if level == "morphemes":
        try:
            with st.spinner(t("explore_morph_loading")):
                return ("morphemes", *turkish.analysis_units(analysis, stack))
        except turkish.NotTurkishError as exc:
            st.info(t("explore_morph_not_turkish", share=float(exc.params.get("share", 0.0))))
        except models.DikkatError as exc:
            st.warning(t("explore_morph_error") + " " + shared.message(exc))
    (q_tokens, k_tokens), (q_words, k_words) = analysis.axis_tokens(stack), analysis.axis_words(stack)
    return "words", word_axis(q_tokens, q_words), word_axis(k_tokens, k_words)


def axis_hover(axis) -> list[str] | None:
    """``"yi — accusative: definite object (-(y)I)"`` for each unit of a morpheme-level axis (None at the other
    levels: the figure's hover keeps its labels)."""
    if axis is None or not any(m is not None for m in axis.morphemes):
        return None
    names, kinds = _names()
    return unit_hover(axis.labels, axis.morphemes, names, kinds)


def describe(axis, tokens) -> None:
    """Under a morpheme-level figure: what each morpheme is and the pieces that straddle two (as Explore's
    :func:`captions`); nothing at the other levels."""
    if axis is None or axis_hover(axis) is None:
        return
    names, kinds = _names()
    lines, more = legend_lines(axis.morphemes, names, kinds, segments=axis.segments)
    if lines:
        st.caption(t("explore_morph_legend", items=" · ".join(lines) + (" …" if more else "")))
    straddle = straddling_pieces(tokens, axis.straddling)
    n_pieces = sum(not x.special for x in tokens)
    st.caption("ℹ️ " + (t("explore_morph_straddle", n=len(straddle), total=n_pieces,
                              pieces=" · ".join(dict.fromkeys(straddle)))
                        if straddle else t("explore_morph_no_straddle")))
