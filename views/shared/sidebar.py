"""The sidebar every page shares: model, language, text (or a sentence pair), examples; and
:class:`Selection`, what the pages read from it."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from collections.abc import Callable

import streamlit as st

import models

from .. import hosting
from .fields import text_field
from .scale import scale_control
from .strings import ASSETS, _strings, fix_lang, lang, md, t
from .urlstate import UrlState

URL = UrlState("app")  # the sidebar's parameters (pagestate.declared: SIDEBAR_PARAMS), written at once


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


@functools.cache
def example_texts() -> tuple[str, ...]:
    """The example sentences shipped in ``assets/examples.json``, read once per process (the sidebar of every run of
    every session lists them)."""
    return tuple(e["text"] for e in json.loads((ASSETS / "examples.json").read_text(encoding="utf-8"))["examples"])


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
    """Switching the interface language keeps the model (issue 50 point 6: switching to Turkish swapped the model to
    multilingual-e5-small, an 18.5 s load in the middle of a lesson); only a first visit starts on the language's
    default model (:func:`sidebar`). An untouched default sentence follows the language.

    It writes the widgets' values back into Session State. Streamlit (1.67) keeps the value of a
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
    if st.session_state.get("text") in DEFAULT_TEXTS.values():  # an untouched default follows the language
        st.session_state["text"] = default_text(st.session_state.get("lang", "en"))


def _use_example() -> None:
    chosen = st.session_state.get("example")
    if chosen:
        st.session_state["text"] = chosen
    st.session_state["example"] = None


def sidebar(live_panel: Callable[[], None] | None = None) -> Selection:
    """The shared sidebar: interface language, the live class's panel (``live_panel``, drawn below the language),
    model picker, sentence, device. Returns the selection.

    Every widget's value is kept in the URL query string (:data:`URL`, declared in :mod:`pagestate`), so a
    shared link reopens the same model, sentence and language.
    """
    with st.sidebar:
        URL.bind("lang")
        st.radio(t("language"), URL.options("lang"), key="lang", horizontal=True, on_change=_language_changed,
                 format_func=lambda x: {"en": "English", "tr": "Türkçe"}[x])
        URL.sync("lang")
        fix_lang()  # the widget is drawn: the language is this run's from here on (views/shared/strings.py)
        if live_panel is not None:
            live_panel()  # a live class (issue 29): app.py passes it (the live sections import this package)
        scale_control()  # text size: Normal / Large / Projector (issue 29)
        keys = hosting.offered()
        URL.bind("model_key", options=keys)
        if "model_key" not in st.session_state:
            # Turkish interface -> multilingual-e5-small when installed (issue 7), else minilm-l6
            st.session_state["model_key"] = models.default_model_for_language(lang())
        st.selectbox(t("model"), keys, key="model_key", format_func=_model_label)
        URL.sync("model_key", models.default_model_for_language(lang()))
        classroom = hosting.current().classroom
        if not classroom:
            URL.bind("model_custom")
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
            URL.drop("model_custom")
            st.session_state.pop("model_custom", None)
            st.caption(t("classroom_note"))
        else:
            custom = st.text_input(t("model_custom"), key="model_custom",
                                   placeholder="owner/name · /path/to/folder").strip()
            URL.sync("model_custom")
            if custom:
                st.caption(t("custom_note", name=custom))
        st.selectbox(t("examples"), list(example_texts()), index=None, key="example",
                     placeholder=t("examples_pick"), on_change=_use_example)
        # the default must stay the same on every run: a widget whose default changes is a new widget
        URL.bind("text")
        if "text" not in st.session_state:  # the language's own default sentence (set once, like the model)
            st.session_state["text"] = default_text()
        text_field(t("sentence"), key="text", area=True, help=t("sentence_help"))  # a link's text cut like a typed one
        URL.sync("text", default_text())
        st.session_state["_device_slot"] = st.empty()
    return Selection(model=custom or st.session_state["model_key"], text=hosting.clip(st.session_state.get("text", "")),
                     lang=lang())


def selection() -> Selection:
    """The current selection (set by :func:`sidebar` in ``app.py``)."""
    return st.session_state["_selection"]
