"""Every page's state survives a visit to another page (issue 33): an Explore → Head pruning → Explore demo
comes back to the layer, head, view and options the teacher left (Streamlit forgets a widget's value when a
run does not draw it, and a page opened from the menu starts with an empty query string)."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[2]


def _explore(lang: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.session_state["lang"] = lang
    at.session_state["model_key"] = "minilm-l6"
    at.session_state["text"] = "The cat chased the mouse."
    at.run()
    return at


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_explore_comes_back_as_it_was_left(lang):
    at = _explore(lang)
    at.slider(key="layer").set_value(3).run()
    at.checkbox(key="hide_special").check().run()
    assert not at.exception, [e.message for e in at.exception]
    at.switch_page("views/pruning.py").run()
    assert not at.exception, [e.message for e in at.exception]
    assert "layer" not in at.session_state  # Streamlit dropped the widget's value on the other page
    for key in list(at.query_params):  # opened from the menu: the browser's URL has no query string
        del at.query_params[key]
    at.switch_page("views/explore.py").run()
    assert not at.exception, [e.message for e in at.exception]
    assert at.slider(key="layer").value == 3
    assert at.checkbox(key="hide_special").value is True


def test_a_link_wins_over_the_kept_value():
    """A value in the URL (a shared link) is read before the kept one."""
    at = _explore("en")
    at.slider(key="layer").set_value(3).run()
    at.switch_page("views/pruning.py").run()
    for key in list(at.query_params):
        del at.query_params[key]
    at.query_params["layer"] = "1"
    at.switch_page("views/explore.py").run()
    assert at.slider(key="layer").value == 1
