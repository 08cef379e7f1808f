"""The engine's error messages as the pages show them: in Turkish, escaped (AppTest; the codes and their
messages are checked in tests/engine/test_error_messages.py)."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

import models
from links import APP


def _explore(lang: str, text: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["lang"] = lang
    at.session_state["model_key"] = "minilm-l6"
    at.session_state["text"] = text
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_turkish_page_shows_the_engine_message_in_turkish():
    """Headline and message both Turkish; no English sentence of the engine under them."""
    errors = [e.value for e in _explore("tr", "\x00").error]
    assert len(errors) == 1, errors
    assert errors[0].startswith("**Metin boş; çözümlemek için bir cümle yazın.**")
    assert "Metinde modelin okuduğu hiçbir karakter yok" in errors[0]
    assert "İngilizce" not in errors[0] and "character" not in errors[0]
    errors = [e.value for e in _explore("en", "\x00").error]
    assert len(errors) == 1 and errors[0].startswith("The text has no character the model reads")


def test_params_are_escaped_and_translated_families():
    """A typed value inside a translated message is text, not markdown; a model family is named in
    Turkish."""
    import streamlit as st

    from views import shared

    exc = models.UnsupportedOperationError("x", code="text_pair_needs_encoder", model="**bold**", family="decoder")
    st.session_state["lang"] = "tr"
    try:
        shown = shared.error_text(exc)
    finally:
        st.session_state["lang"] = "en"
    assert "\\*\\*bold\\*\\*" in shown and "kod çözücü" in shown and "decoder" not in shown


def test_a_static_table_escapes_every_header_and_cell():
    """``st.table`` renders Markdown in headers and cells (a model name like ``[x](http://…)`` in the cost
    page's header became a link); shared.table escapes them and writes numbers the language's way."""
    at = AppTest.from_string('''
import pandas as pd
import streamlit as st
from views import shared
st.session_state["lang"] = "tr"
shared.table(pd.DataFrame({"[x](http://a.invalid)": ["**b**", "<i>c</i>"], "p": [0.25, float("nan")], "n": [1200, 3]}),
             decimals=2, hide_index=True)
''', default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    frame = at.table[0].value
    assert list(frame.columns) == ["\\[x\\](http\\://a.invalid)", "p", "n"]
    assert list(frame.iloc[:, 0]) == ["\\*\\*b\\*\\*", "\\<i\\>c\\</i\\>"]
    assert list(frame["p"]) == ["0,25", "—"] and list(frame["n"]) == ["1.200", "3"]
