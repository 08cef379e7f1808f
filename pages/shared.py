"""What every page shares: UI strings (tr/en), the cached model and analyses, the sidebar.

A loaded model is cached per process with ``st.cache_resource`` and shared by every browser session;
per-request settings (heads off, masks) travel with each call into ``models.analyze``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import streamlit as st

import models

ASSETS = Path(__file__).resolve().parent.parent / "assets"


@lru_cache(maxsize=1)
def _strings() -> dict[str, dict[str, str]]:
    merged: dict[str, dict[str, str]] = {}
    for path in sorted((ASSETS / "i18n").glob("*.json")):
        merged.update(json.loads(path.read_text(encoding="utf-8")))
    return merged


def lang() -> str:
    """Current interface language, ``"tr"`` or ``"en"``."""
    return st.session_state.get("lang", "en")


def t(key: str, **fmt) -> str:
    """UI string ``key`` in the current language (English if the Turkish one is missing)."""
    entry = _strings().get(key)
    if entry is None:
        return key
    text = entry.get(lang()) or entry.get("en") or key
    return text.format(**fmt) if fmt else text


def examples() -> list[dict]:
    """Example sentences shipped in ``assets/examples.json``."""
    return json.loads((ASSETS / "examples.json").read_text(encoding="utf-8"))["examples"]


@st.cache_resource(show_spinner=False, max_entries=4)
def get_model(name: str) -> models.LoadedModel:
    """``models.load(name)``, cached per process and shared by all sessions."""
    return models.load(name)


@st.cache_resource(show_spinner=False, max_entries=64)
def get_analysis(name: str, text: str, text_pair: str | None = None, target: str | None = None,
                 heads_off: frozenset = frozenset(), mask="native", max_tokens: int | None = None) -> models.Analysis:
    """``models.analyze`` cached by its (hashable) arguments; results are read-only."""
    return models.analyze(get_model(name), text, text_pair=text_pair, target=target, heads_off=heads_off,
                          mask=mask, max_tokens=max_tokens)


def load_model_ui(name: str) -> models.LoadedModel | None:
    """Load with a spinner that shows elapsed time; on failure show the reason and return None."""
    start = time.perf_counter()
    try:
        with st.spinner(t("loading", model=name), show_time=True):
            loaded = get_model(name)
    except models.DikkatError as exc:
        st.error(str(exc))
        return None
    elapsed = time.perf_counter() - start
    if elapsed > 1.0:
        st.toast(t("loaded_in", model=name, seconds=elapsed))
    return loaded


def analysis_ui(name: str, text: str, **kwargs) -> models.Analysis | None:
    """Analyse with a spinner; show errors as messages (never a traceback) and the truncation notice."""
    try:
        with st.spinner(t("analysing")):
            result = get_analysis(name, text, **kwargs)
    except models.DikkatError as exc:
        st.error(str(exc))
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


def sidebar() -> Selection:
    """The shared sidebar: interface language, model picker, sentence. Returns the selection."""
    with st.sidebar:
        st.radio(t("language"), ["en", "tr"], key="lang", horizontal=True,
                 format_func=lambda x: {"en": "English", "tr": "Türkçe"}[x])
        specs = models.list_models()
        keys = [s.key for s in specs]
        st.selectbox(t("model"), keys, key="model_key",
                     format_func=lambda k: f"{k} · {models.get_spec(k).family} · {models.get_spec(k).params_m:.0f}M")
        custom = st.text_input(t("model_custom"), key="model_custom").strip()
        st.text_area(t("sentence"), key="text", value=st.session_state.get("text", "Kedi fareyi kovaladı"))
    return Selection(model=custom or st.session_state["model_key"], text=st.session_state.get("text", ""), lang=lang())


def selection() -> Selection:
    """The current selection (set by :func:`sidebar` in ``app.py``)."""
    return st.session_state["_selection"]
