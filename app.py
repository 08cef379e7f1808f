"""Dikkat: Streamlit entry point. Page config, the shared sidebar, and navigation over views/.

The page scripts live in ``views/``, not ``pages/``: Streamlit treats a folder named ``pages/`` next to
the entry script as a legacy multipage app and runs its files without ``app.py`` on a deep link or the
first run of a new server (no sidebar, lost widget state)."""

from pathlib import Path

import streamlit as st
from streamlit import config, runtime

# The icon is a shipped file: a ":material/...:" icon makes every page fetch it from an external font server.
st.set_page_config(page_title="Dikkat", page_icon=str(Path(__file__).resolve().parent / "assets" / "icon.png"),
                   layout="wide")

import pagestate  # noqa: E402  (after set_page_config; every page and its link's parameters, declared once)
from models import memory  # noqa: E402
from views import hosting, shared  # noqa: E402
from views.live_sections import redraw as live_redraw  # noqa: E402
from views.live_sections import room as live_room  # noqa: E402
from views.live_sections.panel import live_panel  # noqa: E402
from views.live_sections.stage import arrived as live_arrived  # noqa: E402
from views.live_sections.stage import stage as live_stage  # noqa: E402
from views.shared import newsession, reruns  # noqa: E402
from views.shared.uploader_words import words as uploader_words  # noqa: E402

reruns.install()  # once per process: no run's last messages dropped for a fragment's timer (views/shared/reruns.py)
newsession.install()  # once per process: the theme in each run's first message read once (views/shared/newsession.py)
if runtime.exists() and not config.get_option("global.appTest"):  # a server, not AppTest (which mocks a runtime)
    memory.keep_heap_settled()  # Python's collector stops walking the models' objects (models/memory.py)

if hosting.current().classroom:  # whatever launched it: no traceback (with server paths) in a student's browser
    st.set_option("client.showErrorDetails", "none")

live_redraw.begin()  # a live class: this full run is open until its end (views/live_sections/redraw.py)
st.html(shared.app_css())  # assets/css/app.css, shipped (no CDN), read once per process
st.session_state["_selection"] = shared.sidebar(live_panel)  # the sidebar, with the live class's panel in it
st.html(shared.scale_style())  # the sidebar's text size (projector mode) for app.css: --dk-scale
uploader_words()  # Streamlit's uploader errors in Turkish on the Turkish interface (views/shared/uploader_words.py)

PAGES = [st.Page(p.file, title=shared.t(p.title), icon=p.icon, default=p.default) for p in pagestate.PAGES]

page = st.navigation(PAGES)
live_room.follow()  # a student following a live class (issue 29): the teacher's page, as it is now
live_stage()  # the lesson's step, its question and the teacher's controls at the top of the main area (issue 50)
with live_room.broadcasting(page):  # a teacher's page, once it has run, goes to the class
    shared.run_page(page)  # page.run(), its namespace emptied of what the run computed (views/shared/pagerun.py)
live_arrived()  # a teacher's question asked as the page moved: drawn once the page has reached the room
