"""A plotly figure on a page (issue 13, issue 33, issue 48): numbers in the interface language's way, text at the
text size, titles wrapped to their column, plotly's own words in Turkish, and each figure as sent kept once for
every session."""

from __future__ import annotations

import copy
import functools
import hashlib
import json

import streamlit as st
from _plotly_utils.utils import convert_to_base64
from plotly.basedatatypes import BaseFigure

from viz import numbers as nb
from viz.text import wrap_title

from .cache import CACHE
from .keys import UNKEYED, key_of
from .output import empty_figure
from .scale import factor, scale_figure
from .strings import ASSETS, lang


# The main column's width at 1280 x 720 (a projector) less the figure's side margins: a figure in one of n columns
# wraps its title to MAIN_PX / n (issue 33: titles cut in the Masks page's two- and three-column rows).
MAIN_PX = 800
LINE_PX = 18  # one more line of a wrapped title


def plotly_chart(fig, *, container=None, columns: int | None = None, **kwargs):
    """``st.plotly_chart`` (in ``container`` when given, e.g. a column) with the figure's numbers (ticks,
    hover, cell text) written the interface language's way (:func:`viz.numbers.style`: plotly's
    ``layout.separators``, Turkish 0,25 and 131.072, and no SI suffix such as "1µ" on an axis or a colour bar),
    and its title wrapped to the width of one of ``columns`` columns (default 2 in a
    ``container``, 1 otherwise; the figure grows by the lines added). Its text is drawn at the sidebar's text size
    (:func:`views.shared.scale.scale_figure`, projector mode). Returns what ``st.plotly_chart`` returns (the
    selection event with ``on_select``); ``fig`` is empty afterwards (:func:`empty_figure`).

    Render once (issue 48): what is sent depends only on the figure as given, the language, the text size and
    ``columns``, so the figure as sent (styled, its arrays as plotly's typed arrays) is kept in the shared
    :data:`views.shared.cache.CACHE` under the key of those (:func:`_sent_key`); the 29 other students of a class
    that draw the same figure send the kept one, without styling and converting it again."""
    columns = columns or (2 if container is not None else 1)
    if lang() == "tr":  # plotly's own words (the mode bar's buttons, "double-click to zoom back out") in Turkish
        kwargs["config"] = {"locale": "tr", "locales": {"tr": {"dictionary": _plotly_tr()}},
                            **(kwargs.get("config") or {})}
    try:
        key = _sent_key(fig, columns)
        if key is None:
            sent = _as_sent(fig, columns)
        else:
            sent = CACHE.get_or_create(key, lambda: copy.deepcopy(_as_sent(fig, columns)))
        return (container or st).plotly_chart(_Outgoing(sent), **kwargs)
    finally:
        empty_figure(fig)


def _sent_key(fig, columns: int) -> tuple | None:
    """The key of ``fig`` as it will be sent: a digest of its traces', layout's and frames' properties (arrays by a
    digest of their bytes, :func:`views.shared.keys.key_of`), with the language, the text size and ``columns``; None
    for a figure with a property that cannot be keyed (it is styled and sent afresh). A kept figure no one has used
    (:class:`views.shared.figures.KeptFigure`) is keyed by its builder and arguments, without a digest."""
    if getattr(fig, "made", True) is False:
        return ("sent kept figure", fig.kept_key, lang(), factor(), columns)
    state = key_of((fig._data, fig._layout, [frame._props for frame in fig._frame_objs]), max_depth=64)
    if state is UNKEYED:
        return None
    # a digest of it, not the key itself: the cache's budget counts its values only, and a heatmap's cell texts would
    # stay alive in a key (repr: the key's strings, numbers and digests written out, each as Python reads it back)
    digest = hashlib.blake2b(repr(state).encode("utf-8", "backslashreplace"), digest_size=20).digest()
    return ("sent figure", digest, lang(), factor(), columns)


def _as_sent(fig, columns: int) -> dict:
    """``fig`` styled for this viewer (:func:`style`) as the dict plotly's ``to_dict`` gives, made of the figure's
    own properties (its arrays as typed arrays, in place)."""
    style(fig, columns)
    res: dict = {"data": list(fig._data), "layout": fig._layout}
    frames = [frame._props for frame in fig._frame_objs]
    if frames:
        res["frames"] = frames
    convert_to_base64(res)
    return res


def style(fig, columns: int) -> None:
    """Style ``fig`` in place for this viewer: numbers in the language's way, text at the text size, the title
    wrapped to one of ``columns`` columns (:func:`plotly_chart`)."""
    nb.style(fig, lang())
    f = factor()
    scale_figure(fig, f, width=MAIN_PX / columns)
    line = LINE_PX * f
    added = 0
    # a fixed-width figure wraps to its own width; a larger text size wraps a full-width figure's title too
    if fig.layout.title.text and (columns > 1 or f > 1):
        width = min(MAIN_PX / columns, fig.layout.width or MAIN_PX) - 20
        title, added = wrap_title(fig.layout.title.text, width, fig.layout.title.font.size or 15 * f)
        if added:
            margin = fig.layout.margin.t if fig.layout.margin.t is not None else 80
            fig.update_layout(title_text=title, margin_t=margin + round(line * added))
            if fig.layout.height is not None:
                fig.update_layout(height=fig.layout.height + round(line * added))
    if fig.layout.title.text and (fig.layout.title.y is None or added):
        # at the container's top, where the figure's top margin leaves it room (viz.text.top_axis_margin); at
        # plotly's "auto" place, the middle of the top margin, it ran into a top axis's title (issue 13). Plotly
        # anchors a title of several lines about a line higher than one line, however many: the pad moves its first
        # line down into the figure (one line's worth, measured in Chromium for 2 to 5 lines at 13 and 19.5 px)
        pad = (fig.layout.title.pad.t or 8) + (round(line) if added else 0)
        fig.layout.title.update(yref="container", y=1, yanchor="top", pad=dict(t=pad))  # the title alone: a
        # figure-wide update_layout walks every layout property (23 ms on the flow's route figure)


class _Outgoing(BaseFigure):
    """A figure on its way to ``st.plotly_chart``, which reads it once with ``to_dict()`` and serialises that dict:
    here the dict as sent (:func:`_as_sent`, or the one kept for every session), with no copy. plotly's own
    ``to_dict`` deep-copies every property first (a fifth of Information flow's rerun over cached results). Nothing
    else of plotly's figure API is served (``BaseFigure.__init__`` is not run); Streamlit only reads the dict."""

    def __init__(self, sent: dict) -> None:  # noqa: D107  (BaseFigure's own __init__ would copy it again)
        self._sent = sent

    def to_dict(self) -> dict:
        return self._sent


@functools.cache
def _plotly_tr() -> dict[str, str]:
    """plotly.js's interface words in Turkish (``assets/plotly_locale_tr.json``: plotly's own ``tr`` locale has
    only seven), passed inline in the chart's config (no locale script is fetched)."""
    return json.loads((ASSETS / "plotly_locale_tr.json").read_text(encoding="utf-8"))
