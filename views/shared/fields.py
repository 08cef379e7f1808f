"""The one text field of every page: a text box whose text a classroom cuts at ``max_chars``
(:mod:`views.hosting`), typed or arrived in a link."""

from __future__ import annotations

import streamlit as st

from .. import hosting


def text_field(label: str, *, key: str, area: bool = False, container=None, **kwargs) -> str:
    """Draw a text box (``st.text_input``, or ``st.text_area`` when ``area``) and return its text.

    In classroom mode the text already in Session State (from a link, an example or an earlier run) is cut at
    ``max_chars`` before the box is drawn, and the box takes no more than ``max_chars`` characters; in personal
    mode the box has no limit. ``key`` is the widget's Session State key and link parameter, unchanged.

    Args:
        label: the label as shown.
        key: the widget key (keyword only, so the house tests read it as a page's key).
        area: a multi-line box.
        container: where to draw (a column, the sidebar ...; default ``st``).
        kwargs: passed to the widget (``help``, ``placeholder``, ``on_change`` ...).
    """
    value = st.session_state.get(key)
    if isinstance(value, str) and hosting.clip(value) != value:
        st.session_state[key] = hosting.clip(value)
    where = st if container is None else container
    widget = where.text_area if area else where.text_input
    return widget(label, key=key, max_chars=hosting.current().max_chars, **kwargs)
