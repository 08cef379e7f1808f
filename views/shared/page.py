"""The top every model page shares: its title and introduction, then the sidebar's model loaded."""

from __future__ import annotations


import streamlit as st


import models


from .cache import load_model_ui, reads_text
from .pagerun import stop
from .sidebar import Selection, selection
from .strings import t


def page_start(title: str, intro: str, *, caption: bool = False,
               text: bool = False) -> tuple[Selection, models.LoadedModel]:
    """Draw the page's title and introduction (string keys ``title`` and ``intro``; the introduction as a
    caption when ``caption``) and load the model chosen in the sidebar.

    Stops the page (``st.stop``) when the model cannot be loaded (the reason is shown by
    :func:`load_model_ui`) or, with ``text=True``, when it reads no text (a speech model: :func:`reads_text`
    says so).

    Returns:
        ``(selection, loaded)``: the sidebar's choices and the loaded model.
    """
    sel = selection()
    st.title(t(title))
    (st.caption if caption else st.markdown)(t(intro))
    spec = models.CATALOG.get(sel.model)
    if text and spec is not None and spec.reads != "text":  # said before a load the page would not use
        st.info(t("speech_model_no_text", model=sel.model))
        stop()
    loaded = load_model_ui(sel.model)
    if loaded is None or (text and not reads_text(loaded)):
        stop()
    return sel, loaded
