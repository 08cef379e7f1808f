"""Dikkat: Streamlit entry point. Page config, the shared sidebar, and navigation over views/.

The page scripts live in ``views/``, not ``pages/``: Streamlit treats a folder named ``pages/`` next to
the entry script as a legacy multipage app and runs its files without ``app.py`` on a deep link or the
first run of a new server (no sidebar, lost widget state)."""

from pathlib import Path

import streamlit as st

# The icon is a shipped file: a ":material/...:" icon makes every page fetch it from an external font server.
st.set_page_config(page_title="Dikkat", page_icon=str(Path(__file__).resolve().parent / "assets" / "icon.png"),
                   layout="wide")

from views import hosting, shared  # noqa: E402  (after set_page_config)
from views.live_sections import room as live_room  # noqa: E402

if hosting.current().classroom:  # whatever launched it: no traceback (with server paths) in a student's browser
    st.set_option("client.showErrorDetails", "none")

st.html(f"<style>{(shared.ASSETS / 'css' / 'app.css').read_text(encoding='utf-8')}</style>")  # shipped, no CDN
st.session_state["_selection"] = shared.sidebar()
st.html(shared.scale_style())  # the sidebar's text size (projector mode) for app.css: --dk-scale

PAGES = [
    st.Page("views/explore.py", title=shared.t("page_explore"), icon=":material/visibility:", default=True),
    st.Page("views/pruning.py", title=shared.t("page_pruning"), icon=":material/content_cut:"),
    st.Page("views/masks.py", title=shared.t("page_masks"), icon=":material/grid_on:"),
    st.Page("views/flow.py", title=shared.t("page_flow"), icon=":material/route:"),
    st.Page("views/why.py", title=shared.t("page_why"), icon=":material/psychology_alt:"),
    st.Page("views/experiments.py", title=shared.t("page_experiments"), icon=":material/science:"),
    st.Page("views/atlas.py", title=shared.t("page_atlas"), icon=":material/travel_explore:"),
    st.Page("views/qkv.py", title=shared.t("page_qkv"), icon=":material/calculate:"),
    st.Page("views/positions.py", title=shared.t("page_positions"), icon=":material/place:"),
    st.Page("views/cost.py", title=shared.t("page_cost"), icon=":material/speed:"),
    st.Page("views/kvcache.py", title=shared.t("page_kvcache"), icon=":material/storage:"),
    st.Page("views/live.py", title=shared.t("page_live"), icon=":material/groups:"),
]

page = st.navigation(PAGES)
live_room.follow(page)  # a student following a live class (issue 29): the teacher's page, as it is now
with live_room.broadcasting(page):  # a teacher's page, once it has run, goes to the class
    page.run()
