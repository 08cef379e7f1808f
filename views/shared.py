"""What every page shares: UI strings (tr/en), the cached model and analyses, the sidebar.

A loaded model is cached per process by :func:`models.load` and shared by every browser session;
per-request settings (heads off, masks) travel with each call into ``models.analyze``. Analyses, prepared
views and other results of every page share one cache bounded by bytes (:data:`CACHE`,
``DIKKAT_CACHE_GIB``, default 4 GiB), so an analysis is stored once for all pages.
"""

from __future__ import annotations

import functools
import json
import re
import time
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st

import models
from models import budget
from viz import numbers as nb

from . import hosting

ASSETS = Path(__file__).resolve().parent.parent / "assets"


@lru_cache(maxsize=1)
def _strings() -> dict[str, dict[str, str]]:
    """Every UI string, ``key -> {"en": ..., "tr": ...}``, from the files of ``assets/i18n/``.

    Raises:
        ValueError: a key defined in two files (one would silently replace the other).
    """
    merged: dict[str, dict[str, str]] = {}
    where: dict[str, str] = {}
    for path in sorted((ASSETS / "i18n").glob("*.json")):
        for key, entry in json.loads(path.read_text(encoding="utf-8")).items():
            if key in where:
                raise ValueError(f"UI string '{key}' is defined in both {where[key]} and {path.name}.")
            where[key] = path.name
            merged[key] = entry
    return merged


def lang() -> str:
    """Current interface language, ``"tr"`` or ``"en"``."""
    return st.session_state.get("lang", "en")


class _LocalNumber:
    """A number whose format spec (``{x:.3f}``, ``{n:,}``) writes it the way the interface language does
    (:mod:`viz.numbers`: Turkish ``1,749`` and ``131.072``)."""

    def __init__(self, value, language: str):
        self.value, self.language = value, language

    def __format__(self, spec: str) -> str:
        return nb.localise(format(self.value, spec), self.language)


class Md(str):
    """A string that is markdown on purpose (the app's own): :func:`t` inserts it as it is."""


# What makes text markdown or HTML in Streamlit: emphasis, code, links and images ([...](...), ![...]), HTML
# tags, entities (&lt;) and autolinks (<...>, www., e-mail addresses), headings, tables, strike-through,
# LaTeX ($), directives and icons (:red[...], :material/...:), and the backslash itself; at the start of a
# line also list items (-, +, 1.) and setext underlines (=). CommonMark lets a backslash escape any ASCII
# punctuation; only these are escaped, so the markdown source stays readable.
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>#|~$:&@!])|(?<=www)(\.)", re.IGNORECASE)
# a list item's marker is followed by a space (or ends the line); a setext underline is the whole line
_MD_LINE_START = re.compile(r"(?m)^([ \t]*)((?:[-+]|\d{1,9}[.)])(?=[ \t]|$)|[-=]+[ \t]*$)")


def md(text) -> Md:
    """``text`` (anything the user typed or chose, a model's output, an engine message) escaped so that
    Streamlit's markdown (``st.markdown``, ``st.caption``, ``st.error`` ..., widget labels) shows it as
    the same characters and never as a link, image, HTML, formatting or LaTeX. Newlines are kept."""
    if isinstance(text, Md):
        return text
    text = _MD_SPECIAL.sub(lambda m: "\\" + (m.group(1) or m.group(2)), str(text))
    return Md(_MD_LINE_START.sub(lambda m: m.group(1) + _escape_marker(m.group(2)), text))


def _escape_marker(marker: str) -> str:
    """``-`` -> ``\\-``, ``12.`` -> ``12\\.``, ``===`` -> ``\\===``."""
    if marker[0].isdigit():
        return marker[:-1] + "\\" + marker[-1]
    return "\\" + marker


def t(key: str, **fmt) -> str:
    """UI string ``key`` in the current language (English if the Turkish one is missing), for markdown
    (``st.markdown``, captions, messages, labels). Arguments other than numbers are shown as text
    (:func:`md`), unless marked :class:`Md`; numbers are written in the language's style (decimal comma and thousands dot in
    Turkish). For a place that is not markdown (a figure's title, a table's header) use :func:`t_plain`."""
    return _t(key, fmt, escape=True)


def t_plain(key: str, **fmt) -> str:
    """:func:`t` for places that show text as it is (figure titles, table headers): arguments unescaped."""
    return _t(key, fmt, escape=False)


def _t(key: str, fmt: dict, escape: bool) -> str:
    entry = _strings().get(key)
    if entry is None:
        return key
    text = entry.get(lang()) or entry.get("en") or key
    if not fmt:
        return Md(text) if escape else text
    # every argument but a number is shown as text (a str, a Path, a list of names ...)
    fmt = {k: (md(v) if escape and not isinstance(v, (int, float, np.number)) else v) for k, v in fmt.items()}
    if lang() != "en":
        fmt = {k: _LocalNumber(v, lang()) if isinstance(v, (float, np.floating)) else v for k, v in fmt.items()}
    return Md(text.format(**fmt)) if escape else text.format(**fmt)


PLOTLY_SEPARATORS = {"en": ".,", "tr": ",."}  # decimal mark, then thousands separator


def plotly_chart(fig, *, container=None, **kwargs):
    """``st.plotly_chart`` (in ``container`` when given, e.g. a column) with the figure's numbers (ticks,
    hover, cell text) written the interface language's way: plotly's ``layout.separators`` (Turkish 0,25
    and 131.072). Returns what ``st.plotly_chart`` returns (the selection event with ``on_select``)."""
    fig.update_layout(separators=PLOTLY_SEPARATORS.get(lang(), ".,"))
    if fig.layout.title.text and fig.layout.title.y is None:
        # at the container's top, where the figure's top margin leaves it room (viz.text.top_axis_margin); at
        # plotly's "auto" place, the middle of the top margin, it ran into a top axis's title (issue 13)
        fig.update_layout(title=dict(yref="container", y=1, yanchor="top", pad=dict(t=8)))
    return (container or st).plotly_chart(fig, **kwargs)


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
            return nb.num(float(value), d, lang()) if d is not None else nb.localise(f"{float(value):,.6g}", lang())
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
            return lambda v: "" if v != v else (nb.num(v, d, lang()) if d is not None else nb.localise(f"{v:,.6g}", lang()))

        data = data.style.format({c: formatter(per.get(c)) for c in floats})
    return (container or st).dataframe(data, **kwargs)


def message(text: str) -> Md:
    """An engine message (an exception's text, a reason the engine gave) ready for markdown: server paths
    scrubbed in classroom mode (:func:`hosting.scrub`), then shown as text (:func:`md`)."""
    return md(hosting.scrub(str(text)))


def model_name(loaded: models.LoadedModel) -> str:
    """The name a page shows for ``loaded``: its catalog key or hub id, or in classroom mode the teacher's name
    for a folder (never the folder's path)."""
    return hosting.scrub(loaded.name)


def error_text(exc: models.DikkatError) -> str:
    """An engine error as the interface shows it: the engine's own message in English; in Turkish, a
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


def _translated(exc: models.DikkatError) -> Md | None:
    """The error's message in the interface language (None in English, or without a translation)."""
    code = getattr(exc, "code", None)
    entry = _strings().get(f"errmsg_{code}") if code else None
    if lang() == "en" or not entry or lang() not in entry:
        return None
    params = {}
    for key, value in getattr(exc, "params", {}).items():
        if key == "family" and f"teach_family_{value}" in _strings():
            value = t_plain(f"teach_family_{value}")
        params[key] = hosting.scrub(value) if isinstance(value, str) else value
    return t(f"errmsg_{code}", **params)


def show_error(exc: models.DikkatError) -> None:
    """``st.error`` with :func:`error_text`."""
    st.error(error_text(exc))


def examples() -> list[dict]:
    """Example sentences shipped in ``assets/examples.json``."""
    return json.loads((ASSETS / "examples.json").read_text(encoding="utf-8"))["examples"]


def _measure(value) -> int:
    """Bytes an entry of :data:`CACHE` holds (its model not counted: the model cache counts it). For an
    analysis, what it held when created is measured once; the layers its on-demand stacks keep and the
    statistics and overview maps (filled when first read) at each use."""
    if isinstance(value, models.Analysis):
        fixed = value.__dict__.get("_fixed_nbytes")
        if fixed is None:
            fixed = value.__dict__["_fixed_nbytes"] = budget.nbytes(
                value, skip=(models.LoadedModel, OrderedDict, models.store.LazyMap))
        grown = sum(stack.cached_nbytes for stack in value.attentions.values())
        for lazy in (value.statistics, value.overview):
            if getattr(lazy, "computed", True):
                grown += budget.nbytes(dict(lazy))
        return fixed + grown
    return budget.nbytes(value, skip=(models.LoadedModel,))


# Analyses, prepared views and page results of every session, least recently used dropped first.
CACHE = budget.ByteLRU(budget.budget_from_env("DIKKAT_CACHE_GIB", 4), measure=_measure)


def cached(fn):
    """Decorator: cache ``fn``'s results in :data:`CACHE` by its name and (hashable) arguments, computed
    once even when several sessions ask at once; results are shared, read-only."""
    name = (fn.__code__.co_filename, fn.__qualname__)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        key = (name, args, tuple(sorted(kwargs.items())))
        try:
            hash(key)
        except TypeError:
            return fn(*args, **kwargs)
        value = CACHE.get_or_create(key, lambda: fn(*args, **kwargs))
        if isinstance(value, models.Analysis):
            CACHE.remeasure(key)  # it may hold more since: layers its stacks kept, statistics, overview
        return value

    return wrapper


def get_model(name: str) -> models.LoadedModel:
    """``models.load`` of the model a page names (:func:`hosting.source`: in classroom mode only the catalog and
    the teacher's list, else :class:`models.ModelNotAllowedError`): cached per process (bounded by bytes) and
    shared by all sessions."""
    return models.load(hosting.source(name))


def get_analysis(name: str, text: str, text_pair: str | None = None, target: str | None = None,
                 heads_off: frozenset = frozenset(), mask="native", max_tokens: int | None = None) -> models.Analysis:
    """``models.analyze`` cached in :data:`CACHE` by its (hashable) arguments; results are read-only.

    A ``max_tokens`` that does not cut this text is dropped from the key, so pages with different limits
    share one analysis of a short text (not for encoder-decoders, where it also cuts the generated target)."""
    if max_tokens is not None and text_pair is None and target is None and get_model(name).family != "encoder-decoder":
        n = len(get_model(name).tokenizer(text)["input_ids"])
        if n <= max_tokens:
            max_tokens = None
    return _analysis(name, text, text_pair, target, heads_off, mask, max_tokens)


@cached
def _analysis(name, text, text_pair, target, heads_off, mask, max_tokens) -> models.Analysis:
    return models.analyze(get_model(name), text, text_pair=text_pair, target=target, heads_off=heads_off,
                          mask=mask, max_tokens=max_tokens)


def _show_device(loaded: models.LoadedModel) -> None:
    """Write the device in use into the sidebar slot made by :func:`sidebar` (if this run has one)."""
    slot = st.session_state.get("_device_slot")
    if slot is None:
        return
    kv = f" · {t('device_kv_heads', n=loaded.num_key_value_heads)}" if loaded.num_key_value_heads else ""
    shape = ", ".join(f"{t(f'stack_{stack}')} {layers}×{heads}" for stack, (layers, heads) in loaded.stacks.items())
    slot.caption(t("device_line", device=str(loaded.device), dtype=str(loaded.dtype).replace("torch.", ""),
                   path=Md(t(f"capture_{loaded.capture_path}")), shape=Md(md(shape) + kv)))


def load_model_ui(name: str) -> models.LoadedModel | None:
    """Load with a spinner that shows the elapsed time (and what is happening); on failure show the reason
    and return None. Shows the device in use in the sidebar."""
    start = time.perf_counter()
    try:
        with st.spinner(t("loading", model=name), show_time=True):
            loaded = get_model(name)
    except models.DikkatError as exc:
        show_error(exc)
        return None
    except OSError as exc:  # a folder or hub id transformers cannot read
        reason = message(str(exc).splitlines()[0]) if str(exc) else type(exc).__name__
        st.error(t("load_failed", model=name, reason=reason))
        return None
    elapsed = time.perf_counter() - start
    if elapsed > 1.0:
        st.toast(t("loaded_in", model=name, seconds=elapsed))
    _show_device(loaded)
    return loaded


def reads_text(loaded: models.LoadedModel) -> bool:
    """True for a text model; for a speech model (input features, e.g. Whisper) show why a text page cannot use
    it and where its attention is shown instead, and return False."""
    if getattr(loaded.model, "main_input_name", "input_ids") == "input_features":
        st.info(t("speech_model_no_text", model=model_name(loaded)))
        return False
    return True


def analysis_ui(name: str, text: str, **kwargs) -> models.Analysis | None:
    """Analyse with a spinner; show errors as messages (never a traceback) and the truncation notice."""
    try:
        with st.spinner(t("analysing")):
            result = get_analysis(name, text, **kwargs)
    except models.DikkatError as exc:
        show_error(exc)
        return None
    if result.truncated:
        st.warning(t("truncated", n=result.truncated, limit=result.max_tokens))
    return result


@dataclass(frozen=True)
class Selection:
    """What the sidebar chose: model name, sentence, interface language."""

    model: str
    text: str
    lang: str


DEFAULT_TEXT = "Kedi fareyi kovaladı"
# The first sentence a class sees, in the interface language, so the default model of that language reads it
# well (the English default model, minilm-l6, is English-only: the Turkish sentence came out as
# "Ked·i·fare·yi·ko·val·ad·ı").
DEFAULT_TEXTS = {"tr": DEFAULT_TEXT, "en": "The cat chased the mouse."}


def default_text(language: str | None = None) -> str:
    """The default sentence of ``language`` (the interface language when None)."""
    return DEFAULT_TEXTS.get(language or lang(), DEFAULT_TEXT)


def url_init(key: str, options=None, kind: type = str, bounds: tuple[int, int] | None = None) -> None:
    """Before the widget ``key`` is created: take its value from the URL query string, unless Session State
    already has one.

    The page state (model, sentence, view, layer, head, options) lives in the URL so that a shared link
    opens the same view; :func:`url_sync` writes it back on every run. (Streamlit's own
    ``bind="query-params"`` is not used: it writes the translated label of an option widget into the URL,
    so a link would depend on the interface language.) Reading whenever Session State has no value (not
    only on the first run) also restores a value lost when the first run is interrupted by a click.
    An unknown value is ignored.

    Args:
        key: widget key and query parameter name.
        options: the widget's options (the value must be one of them, compared as ``str``).
        kind: ``bool`` (``1``/``true``), ``int`` or ``str`` when there are no options; ``list`` for a
            multiselect: comma-separated options (unknown ones and repeats dropped).
        bounds: ``int`` only: the value must lie in ``lo..hi`` (a number input refuses anything else).
    """
    raw = st.query_params.get(key)
    if raw is None or key in st.session_state:
        return
    if kind is list:
        by_text = {str(option): option for option in (options or ())}
        picked = [by_text[part] for part in dict.fromkeys(raw.split(",")) if part in by_text]
        if picked or not raw:  # "" is an emptied choice (url_sync writes it so); junk alone is ignored
            st.session_state[key] = picked
        return
    if options is not None:
        for option in options:
            if str(option) == raw:
                st.session_state[key] = option
                return
        try:  # a number written another way ("5" for the option 5.0)
            number = float(raw)
        except ValueError:
            return
        for option in options:
            if isinstance(option, (int, float)) and not isinstance(option, bool) and option == number:
                st.session_state[key] = option
                return
    elif kind is bool:
        st.session_state[key] = raw.lower() in ("1", "true", "yes", "on")
    elif kind is int:
        try:
            value = int(raw)
        except ValueError:
            return
        if bounds is None or bounds[0] <= value <= bounds[1]:
            st.session_state[key] = value
    else:
        st.session_state[key] = raw


def url_drop(key: str) -> None:
    """Remove ``key`` from the URL (its widget is not shown in this run, so its value is gone)."""
    if key in st.query_params:
        del st.query_params[key]


def url_sync(key: str, default=None) -> None:
    """Write the widget ``key``'s current value into the URL query string (removed when it is ``default``;
    a list as comma-separated values)."""
    value = st.session_state.get(key)
    if value is None or value == default or (isinstance(value, str) and not value.strip() and not default):
        if key in st.query_params:
            del st.query_params[key]
        return
    if isinstance(value, (list, tuple)):
        text = ",".join(map(str, value))
    else:
        text = ("1" if value else "0") if isinstance(value, bool) else str(value)
    if st.query_params.get(key) != text:
        st.query_params[key] = text


class UrlState:
    """A page's widgets kept in the URL (issue 13: a link reopens the page as it was shown).

    Before each widget, :meth:`bind` takes its value from the URL (:func:`url_init`; a text is cut to the
    classroom's limit) or else sets ``default``; the page's end calls :meth:`finish`, which writes every
    widget bound in this run back to the URL (:func:`url_sync`) and drops the page's other keys (their widgets
    are not on screen, so their values are gone). A widget bound here takes its default from Session State,
    not from a ``value=`` argument (Streamlit warns when both set it).

    Args:
        keys: every widget key the page may bind (its query parameters).
    """

    def __init__(self, keys: tuple[str, ...]):
        self.keys = keys
        self.bound: dict = {}

    def bind(self, key: str, default=None, options=None, kind: type = str,
             bounds: tuple[int, int] | None = None) -> None:
        """Before the widget ``key``: its value from the URL, else ``default`` (arguments as :func:`url_init`)."""
        url_init(key, options, kind, bounds=bounds)
        if kind is str and options is None and isinstance(st.session_state.get(key), str):
            st.session_state[key] = hosting.clip(st.session_state[key])
        if key not in st.session_state and default is not None:
            st.session_state[key] = default
        self.bound[key] = default

    def finish(self) -> None:
        """Write the bound widgets' values to the URL; drop the page's keys not bound in this run."""
        for key in self.keys:
            if key in self.bound:
                url_sync(key, self.bound[key])
            else:
                url_drop(key)


def spec_text(spec: models.ModelSpec, field: str) -> str:
    """A catalog entry's ``title``, ``languages`` or ``licence`` in the interface language: the
    ``catalog_<key>_<field>`` UI string when it has one for this language, else the catalog's English."""
    entry = _strings().get(f"catalog_{spec.key}_{field}", {})
    return entry.get(lang()) or getattr(spec, field)


def _model_label(key: str) -> str:
    if key not in models.CATALOG:  # a model from the classroom teacher's list
        return f"{key} · {t('classroom_teacher_model')}"
    return _catalog_label(key)


def _catalog_label(key: str) -> str:
    """The picker's label of a catalog entry. It must not depend on the interface language: the browser
    keeps the label of the chosen option, and a label that changes with the language would no longer match
    on the next run, resetting the model to the first entry. The caption under the picker is translated."""
    spec = models.get_spec(key)
    mark = "" if spec.installed else " ✗"
    # short enough for the sidebar (family and languages are in the caption under it)
    return f"{key} · {spec.params_m:.0f}M{mark}"


def _model_chosen() -> None:
    st.session_state["_model_chosen_by_user"] = True


def _settable(value) -> bool:
    """Whether a widget value may be written back through Session State: the values of option widgets
    (radio, selectbox, multiselect, segmented control, pills), sliders and number or text inputs.

    Buttons and download buttons (a bool), an empty upload or recording (None), an uploaded file, the data
    editor and selectable charts and tables (dict-like states) refuse a value set through Session State:
    the assignment itself succeeds in a callback, but drawing the widget then raises
    ``StreamlitValueAssignmentNotAllowedError``. Checkboxes and toggles (a bool, not a label) need no
    write-back."""
    if isinstance(value, (list, tuple)):
        return all(_settable(v) for v in value)
    return isinstance(value, (str, int, float)) and not isinstance(value, bool)


def _language_changed() -> None:
    """Switching the interface language also switches the default model, unless the user picked one.

    It also writes the widgets' values back into Session State. Streamlit (1.67) keeps the value of a
    radio, selectbox or multiselect in the browser as the option's *label*; with translated labels the old
    label no longer matches after the switch and the widget would fall back to its default (the masks
    page's section, the chosen masks ...). A value set from a callback wins over the browser's label.
    Only values Streamlit lets a script set are written back (:func:`_settable`).
    """
    for key in list(st.session_state):
        if key == "lang" or str(key).startswith("_"):
            continue
        value = st.session_state[key]
        if _settable(value):
            st.session_state[key] = value
    if not st.session_state.get("_model_chosen_by_user") and not st.query_params.get("model_key"):
        st.session_state["model_key"] = models.default_model_for_language(st.session_state.get("lang", "en"))
    if st.session_state.get("text") in DEFAULT_TEXTS.values():  # an untouched default follows the language
        st.session_state["text"] = default_text(st.session_state.get("lang", "en"))


def _use_example() -> None:
    chosen = st.session_state.get("example")
    if chosen:
        st.session_state["text"] = chosen
    st.session_state["example"] = None


def sidebar() -> Selection:
    """The shared sidebar: interface language, model picker, sentence, device. Returns the selection.

    Every widget's value is kept in the URL query string (:func:`url_init`, :func:`url_sync`), so a
    shared link reopens the same model, sentence and language.
    """
    with st.sidebar:
        url_init("lang", ["en", "tr"])
        st.radio(t("language"), ["en", "tr"], key="lang", horizontal=True, on_change=_language_changed,
                 format_func=lambda x: {"en": "English", "tr": "Türkçe"}[x])
        url_sync("lang", "en")
        keys = hosting.offered()
        url_init("model_key", keys)
        if "model_key" not in st.session_state:
            # Turkish interface -> multilingual-e5-small when installed (issue 7), else minilm-l6
            st.session_state["model_key"] = models.default_model_for_language(lang())
        st.selectbox(t("model"), keys, key="model_key", format_func=_model_label, on_change=_model_chosen)
        url_sync("model_key", models.default_model_for_language(lang()))
        classroom = hosting.current().classroom
        if not classroom:
            url_init("model_custom")
        if not classroom and str(st.session_state.get("model_custom") or "").strip():
            # a folder or hub model replaces the list's: describing the list's model would mislead (issue 13)
            st.caption(t("catalog_not_in_use", model=st.session_state["model_key"]))
        elif st.session_state["model_key"] in models.CATALOG:
            spec = models.get_spec(st.session_state["model_key"])
            state = t("installed") if spec.installed else t("not_installed", hint=spec.install_hint)
            st.caption(" · ".join([md(spec_text(spec, "title")), t(f"teach_family_{spec.family}"),
                                   f"{spec.layers}×{spec.heads}", md(spec_text(spec, "languages")),
                                   f"{t('licence')}: {md(spec_text(spec, 'licence'))}", state]))
        else:
            st.caption(t("classroom_teacher_model_note"))
        custom = ""
        if classroom:
            # no folder paths or hub ids from the browser or a link: the server's disk is not an oracle
            url_drop("model_custom")
            st.session_state.pop("model_custom", None)
            st.caption(t("classroom_note"))
        else:
            custom = st.text_input(t("model_custom"), key="model_custom",
                                   placeholder="owner/name · /path/to/folder").strip()
            url_sync("model_custom", "")
            if custom:
                st.caption(t("custom_note", name=custom))
        st.selectbox(t("examples"), [e["text"] for e in examples()], index=None, key="example",
                     placeholder=t("examples_pick"), on_change=_use_example)
        # the default must stay the same on every run: a widget whose default changes is a new widget
        url_init("text")
        if isinstance(st.session_state.get("text"), str):  # a link's text, cut like a typed one
            st.session_state["text"] = hosting.clip(st.session_state["text"])
        if "text" not in st.session_state:  # the language's own default sentence (set once, like the model)
            st.session_state["text"] = default_text()
        st.text_area(t("sentence"), key="text", help=t("sentence_help"), max_chars=hosting.current().max_chars)
        url_sync("text", default_text())
        st.session_state["_device_slot"] = st.empty()
    return Selection(model=custom or st.session_state["model_key"], text=hosting.clip(st.session_state.get("text", "")),
                     lang=lang())


def selection() -> Selection:
    """The current selection (set by :func:`sidebar` in ``app.py``)."""
    return st.session_state["_selection"]
