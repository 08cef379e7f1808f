"""Dikkat: Streamlit entry point. Page config, the shared sidebar, and navigation over pages/."""

import streamlit as st

st.set_page_config(page_title="Dikkat", page_icon="👁", layout="wide")

from pages import shared  # noqa: E402  (after set_page_config)

st.session_state["_selection"] = shared.sidebar()

PAGES = [
    st.Page("pages/explore.py", title=shared.t("page_explore"), icon="🔍", default=True),
    st.Page("pages/masks.py", title=shared.t("page_masks"), icon="🎭"),
    st.Page("pages/qkv.py", title=shared.t("page_qkv"), icon="🧮"),
    st.Page("pages/positions.py", title=shared.t("page_positions"), icon="📍"),
    st.Page("pages/cost.py", title=shared.t("page_cost"), icon="⏱"),
    st.Page("pages/kvcache.py", title=shared.t("page_kvcache"), icon="🗄"),
    st.Page("pages/pruning.py", title=shared.t("page_pruning"), icon="✂️"),
]

st.navigation(PAGES).run()
