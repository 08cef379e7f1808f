"""Dikkat: Streamlit entry point. Page config, the shared sidebar, and navigation over pages/."""

import streamlit as st

st.set_page_config(page_title="Dikkat", page_icon="👁", layout="wide")

# Streamlit sees the pages/ folder and runs the very first script run of a new server through its legacy
# multipage path (pages found in the folder), and only st.navigation below switches that off. Widgets of
# that first run get other ids than in every later run, so the first thing a user does (typing a
# sentence) was lost. Switch the legacy path off and start that first run again at once.
try:
    from streamlit.runtime.pages_manager import PagesManager

    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        st.rerun()
except ImportError:  # a Streamlit without this internal: nothing to do
    pass

from pages import shared  # noqa: E402  (after set_page_config)

st.session_state["_selection"] = shared.sidebar()

PAGES = [
    st.Page("pages/explore.py", title=shared.t("page_explore"), icon="🔍", default=True),
    st.Page("pages/masks.py", title=shared.t("page_masks"), icon="🎭"),
    st.Page("pages/qkv.py", title=shared.t("page_qkv"), icon="🧮"),
    st.Page("pages/positions.py", title=shared.t("page_positions"), icon="📍"),
    st.Page("pages/cost.py", title=shared.t("page_cost"), icon="⏱"),
    st.Page("pages/kvcache.py", title=shared.t("page_kvcache"), icon="🗄"),
]

st.navigation(PAGES).run()
