"""Explore page: placeholder until the head view / model view land."""

import streamlit as st

from pages import shared

sel = shared.selection()
st.title(shared.t("app_title"))
loaded = shared.load_model_ui(sel.model)
if loaded is not None and sel.text.strip():
    a = shared.analysis_ui(sel.model, sel.text)
    if a is not None:
        st.write({k: v.shape for k, v in a.attentions.items()})
