"""Putting things on a page: figures and tables with the interface's number format, engine errors in the
interface language (paths scrubbed in classroom mode)."""

from __future__ import annotations



import pandas as pd
import streamlit as st

import models
from viz import numbers as nb

from .. import hosting
from .strings import Md, _strings, lang, md, t, t_plain


PLOTLY_SEPARATORS = nb.SEPARATORS  # decimal mark, then thousands separator, per language


def empty_figure(fig) -> None:
    """Clear a figure once it is sent. A plotly figure is a reference cycle (each trace and the layout point back to
    it), so its arrays stayed alive until a full garbage collection, which the server does not run after each script
    (issue 44: about 1.2 MiB per text on Head pruning at 120 tokens); its traces' and layout's properties (the arrays
    among them) are freed now. The figure is empty afterwards. A kept figure never made holds nothing of its own
    (:class:`views.shared.figures.KeptFigure`): it stays as it is."""
    if getattr(fig, "made", True) is False:
        return
    for props in getattr(fig, "_data", None) or ():
        if isinstance(props, dict):
            props.clear()
    layout = getattr(fig, "_layout", None)
    if isinstance(layout, dict):
        layout.clear()


def table(data, *, decimals: int | dict | None = None, container=None, **kwargs):
    """``st.table``: a static HTML table whose long text wraps inside its column (nothing cut, unlike
    ``st.dataframe``'s canvas, which cuts a column that does not fit), for small tables in narrow columns.

    ``st.table`` renders Markdown in headers and cells, so every header and text cell is escaped
    (:func:`md`); float columns are written the interface language's way (``decimals``: an int for all
    float columns, or ``column -> decimals``; 6 significant digits otherwise) and right-aligned.

    Args:
        data: a pandas DataFrame. container: where to draw it (default: the page).
        kwargs: passed to ``st.table`` (``hide_index`` ...).
    """
    floats = set(data.select_dtypes("floating").columns)
    numbers = floats | set(data.select_dtypes("integer").columns)
    per = decimals if isinstance(decimals, dict) else {c: decimals for c in floats}

    def cell(column, value):
        if column in floats:
            if value != value:
                return "—"
            d = per.get(column)
            return nb.num(float(value), d, lang()) if d is not None else nb.general(float(value), 6, lang())
        if column in numbers:
            return nb.integer(int(value), lang())
        return md(value)

    def head(column):
        return md(column if isinstance(column, str) else str(column))

    shown = pd.DataFrame({head(c): [cell(c, v) for v in data[c]] for c in data.columns})
    right = [head(c) for c in data.columns if c in numbers]
    styled = shown.style.set_properties(subset=right, **{"text-align": "right"}) if right else shown
    return (container or st).table(styled, **kwargs)


def dataframe(data, *, decimals: int | dict | None = None, container=None, **kwargs):
    """``st.dataframe`` with float columns written the interface language's way, still numeric (they sort
    and align as numbers).

    Args:
        data: a pandas DataFrame.
        decimals: decimals of every float column (int) or ``column -> decimals``; float columns without
            an entry show up to 6 significant digits.
        container: where to draw it (default: the page).
        kwargs: passed to ``st.dataframe`` (``column_config``, ``on_select`` ...).

    English uses ``column_config`` number formats; Turkish a pandas Styler whose display values use the
    decimal comma and the thousands dot (``0,4185``, ``7.780,3``), which plain number columns cannot. A
    column with no value at all (NaN: a statistic with no query to average) is shown as "—" in both
    (Streamlit writes a NaN cell as "None").
    """
    floats = list(data.select_dtypes("floating").columns)
    # a column with no value at all (a statistic no query has): "—"; Streamlit shows a NaN cell as "None",
    # whatever a Styler says
    empty = [c for c in floats if data[c].isna().all()]
    if empty:
        data = data.assign(**{c: "—" for c in empty})
        floats = [c for c in floats if c not in empty]
    per = decimals if isinstance(decimals, dict) else {c: decimals for c in floats if decimals is not None}
    per = {c: d for c, d in per.items() if c not in empty}
    if lang() == "en":
        config = {c: st.column_config.NumberColumn(format=f"%.{d}f") for c, d in per.items()}
        kwargs["column_config"] = {**config, **(kwargs.get("column_config") or {})}
    elif floats:
        def formatter(d):
            return lambda v: "" if v != v else (nb.num(v, d, lang()) if d is not None else nb.general(v, 6, lang()))

        data = data.style.format({c: formatter(per.get(c)) for c in floats})
    return (container or st).dataframe(data, **kwargs)


def message(text: object) -> Md:
    """An engine message (an exception's text, a reason the engine gave) ready for markdown: server paths
    scrubbed in classroom mode (:func:`hosting.scrub`), then shown as text (:func:`md`)."""
    return md(hosting.scrub(str(text)))


def model_name(loaded: models.LoadedModel) -> str:
    """The name a page shows for ``loaded``: its catalog key or hub id, or in classroom mode the teacher's name
    for a folder (never the folder's path)."""
    return hosting.scrub(loaded.name)


def error_text(exc: Exception) -> str:
    """An engine error (a :class:`models.DikkatError`, or the live class's ``live.LiveError``: both carry a ``code``
    and ``params``) as the interface shows it: the engine's own message in English; in Turkish, a
    translated headline chosen by the exception's class (the nearest class in its MRO with one), followed by
    the message in Turkish when the error carries a ``code`` with a translation (``errmsg_<code>``, filled
    with the error's ``params``), else by the engine's English message, which names the model or input at
    fault. Server paths in either are scrubbed in classroom mode."""
    translated = _translated(exc)
    detail = translated if translated is not None else message(str(exc))
    for cls in type(exc).__mro__:
        entry = _strings().get(f"err_{cls.__name__}")
        if entry is not None:
            headline = entry.get(lang())
            if not headline:
                return detail
            return t("err_detail_translated" if translated is not None else "err_detail", headline=headline,
                     detail=Md(detail))
    return detail


def _translated(exc: Exception) -> Md | None:
    """The error's message in the interface language (None in English, or without a translation)."""
    code = getattr(exc, "code", None)
    entry = _strings().get(f"errmsg_{code}") if code else None
    if lang() == "en" or not entry or lang() not in entry:
        return None
    params = {}
    for key, value in getattr(exc, "params", {}).items():
        if key == "family" and f"teach_family_{value}" in _strings():
            value = t_plain(f"teach_family_{value}")
        elif key == "why" and f"flow_why_{value}" in _strings():
            value = t_plain(f"flow_why_{value}")
        elif key == "stack" and f"stack_{value}" in _strings():  # "encoder" inside a Turkish sentence: kodlayıcı ...
            value = t_plain(f"stack_{value}")
        elif isinstance(value, str) and f"errpart_{value}" in _strings():  # a named part (the flow's checks ...)
            value = t_plain(f"errpart_{value}")
        params[key] = hosting.scrub(value) if isinstance(value, str) else value
    return Md(t(f"errmsg_{code}", **params))


def show_error(exc: Exception) -> None:
    """``st.error`` with :func:`error_text`."""
    st.error(error_text(exc))
