"""Streamlit's file uploader in Turkish (issue 50 point 6): Streamlit writes "Upload", "200MB per file" and "Drag and
drop a file here" in English whatever the page's language and has no locale for them; on the Turkish interface the
page's own ``<style>`` (views/shared/scale.py, the one app.py puts on every page) hides them and writes the
``uploader_*`` strings instead, with the server's real size limit. On the English interface it adds nothing.
(Checked in Chromium on the Atlas page's corpus upload; here the CSS the page sends, without a model.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from conftest import ROOT
from views.shared.scale import css_string

STRINGS = json.loads((ROOT / "assets/i18n/common.json").read_text(encoding="utf-8"))
SCRIPT = '''
import streamlit as st
from streamlit import config
from views import shared
st.session_state["lang"] = "{lang}"
before = st.get_option("server.maxUploadSize")
config.set_option("server.maxUploadSize", {mb})
try:
    st.html(shared.scale_style())
finally:
    config.set_option("server.maxUploadSize", before)
'''


def _style(lang: str, mb: int = 200) -> str:
    """The ``<style>`` body the page sends in ``lang`` with ``server.maxUploadSize`` = ``mb``."""
    at = AppTest.from_string(SCRIPT.format(lang=lang, mb=mb), default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    (element,) = at.get("html")
    return element.proto.body


@pytest.mark.parametrize("mb", [200, 10])  # Streamlit's default, and classroom mode's (deploy/launch.py)
def test_the_turkish_page_writes_the_uploader_in_turkish(mb):
    body = _style("tr", mb)
    assert body.startswith("<style>:root { --dk-scale: 1; }</style>")  # the text size is still set first
    texts = {key: STRINGS[key]["tr"] for key in ("uploader_browse", "uploader_limit", "uploader_drop")}
    texts["uploader_limit"] = texts["uploader_limit"].format(mb=mb)
    assert texts["uploader_limit"] == f"Dosya başına en çok {mb} MB"
    for text in texts.values():
        assert f"content: {css_string(text)};" in body, text
    # Streamlit's English words are hidden where the Turkish ones are written
    assert '[data-testid="stFileUploaderDropzoneInstructions"] span { font-size: 0; }' in body
    assert '[data-testid="stMarkdownContainer"] > p { display: none; }' in body


def test_the_english_page_leaves_streamlit_s_words_alone():
    body = _style("en")
    assert body == "<style>:root { --dk-scale: 1; }</style>"
    assert "stFileUploader" not in body and "content:" not in body


def test_a_css_string_cannot_end_its_quote_or_its_style():
    quoted = css_string('a "b" \\ </style>\n')
    assert quoted == '"a \\22 b\\22  \\5c  \\3c /style\\3e \\a "'
    assert quoted.count('"') == 2 and "<" not in quoted


def test_the_errors_rewritten_are_the_ones_streamlit_writes():
    """views/shared/uploader_words.py rewrites the exact English sentences Streamlit's frontend writes under an
    uploaded file: each ``uploader_*`` error string's English, its ``{size}``/``{type}`` parts aside, is in the
    installed Streamlit's bundle (a Streamlit that words them otherwise fails here, not silently in a classroom),
    and its Turkish keeps the same parts."""
    import re

    import streamlit

    from views.shared import uploader_words

    bundle = "".join(p.read_text(encoding="utf-8", errors="replace")
                     for p in (Path(streamlit.__file__).parent / "static" / "static" / "js").glob("*.js"))
    assert len(uploader_words.pairs()) == 6
    for en, tr in uploader_words.pairs():
        parts = [part.strip() for part in re.split(r"\{\w+\}", en) if part.strip()]
        assert parts and all(part in bundle for part in parts), (en, parts)
        assert re.findall(r"\{\w+\}", en) == re.findall(r"\{\w+\}", tr), (en, tr)
        assert en != tr
