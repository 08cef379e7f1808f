"""UI strings in Turkish and English (``assets/i18n/*.json``), the interface language, and escaping: nothing a
user typed is ever rendered as Markdown or HTML (:func:`md`, :func:`t`)."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

import numpy as np
import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from viz import numbers as nb



ASSETS = Path(__file__).resolve().parent.parent.parent / "assets"


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


_FIXED = "_dikkat_lang"  # on Streamlit's run context: (that run's cursors, the language) once the widget is drawn


def lang() -> str:
    """Current interface language, ``"tr"`` or ``"en"``. Once the sidebar has drawn the language's widget the value
    is fixed for the rest of the run (Streamlit refuses to set a drawn widget's value), and read from the run's
    context instead of Session State (:func:`fix_lang`): a page calls this for every string it writes, and each
    Session State read cost ~10 µs, 6 % of a class's server time (py-spy, ``bench/live_class.py``, issue 48)."""
    ctx = get_script_run_ctx(suppress_warning=True)
    fixed = getattr(ctx, _FIXED, None)
    if ctx is not None and fixed is not None and fixed[0] is ctx.cursors:  # the same run (each makes a new dict)
        return fixed[1]
    return st.session_state.get("lang", "en")


def fix_lang() -> None:
    """Right after the language's widget is drawn (``views/shared/sidebar.py``): :func:`lang` is this run's value
    from now on, until the run ends."""
    ctx = get_script_run_ctx(suppress_warning=True)
    if ctx is not None:
        setattr(ctx, _FIXED, (ctx.cursors, st.session_state.get("lang", "en")))


class _LocalNumber:
    """A number whose format spec (``{x:.3f}``, ``{n:,}``) writes it the way the interface language does
    (:mod:`viz.numbers`: Turkish ``1,749`` and ``131.072``). A percent spec (``{share:.0%}``, the value a
    share in 0..1) puts the sign on the language's side and never writes a share that is not zero as 0:
    ``30%`` / ``%30``, ``<1%`` / ``<%1`` (:func:`viz.numbers.percent`)."""

    def __init__(self, value, language: str):
        self.value, self.language = value, language

    def __format__(self, spec: str) -> str:
        if spec.endswith("%"):
            digits = spec[:-1].rpartition(".")[2]
            return nb.percent(float(self.value), int(digits) if digits.isdigit() else 0, self.language,
                              sign="+" in spec)
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
    (:func:`md`), unless marked :class:`Md`; numbers are written in the language's style (decimal comma and
    thousands dot in Turkish). For a place that is not markdown (a figure's title, a table's header) use
    :func:`t_plain`."""
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
    # every number (a float, or an int with a spec such as {share:.0%}) in the language's style, English too
    fmt = {k: _LocalNumber(v, lang()) if isinstance(v, (int, float, np.number)) and not isinstance(v, bool) else v
           for k, v in fmt.items()}
    return Md(text.format(**fmt)) if escape else text.format(**fmt)
