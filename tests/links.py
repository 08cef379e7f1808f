"""Open a page of the app from a link, as AppTest tests do (issue 13: every page's state in the URL)."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parent.parent / "app.py")


def open_linked(page: str, model: str, query: dict, text: str, timeout: int = 600) -> AppTest:
    """``page`` (e.g. ``"views/qkv.py"``) after a first run of the app on ``model`` and ``text``, opened
    with the link's ``query`` (its ``model_key`` is ``model``). The caller checks for exceptions."""
    at = AppTest.from_file(APP, default_timeout=timeout)
    at.session_state["model_key"] = model
    at.session_state["text"] = text
    at.run()
    at.switch_page(page)
    at.query_params = {"model_key": model, **query}
    at.run()
    return at
