"""Engine errors in the interface language (issue 13: "engine messages stay English under a Turkish
headline"). Every error a user of the app can meet carries a ``code`` and its ``params``; the Turkish
interface shows ``errmsg_<code>`` filled with them."""

from __future__ import annotations

import ast
import json
import string
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import models

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
# codes built from an expression at the raise site, and every value it can take
DYNAMIC = {'"empty_" + what.replace(" ", "_")': ["empty_text", "empty_text_pair", "empty_target_text"],
           '"unreadable_" + what': ["unreadable_text", "unreadable_text_pair"],
           "code": ["text_pair_needs_encoder", "target_needs_encdec"]}  # analysis._only_for's callers


def _strings() -> dict:
    return json.loads((ROOT / "assets" / "i18n" / "errors.json").read_text(encoding="utf-8"))


def _raise_sites() -> list[tuple[str, list[str], set[str]]]:
    """(file:line, codes, keyword names other than code) of every ``raise XError(..., code=...)``."""
    out = []
    for path in sorted((ROOT / "models").rglob("*.py")) + sorted((ROOT / "views").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
                continue
            kw = {k.arg: k.value for k in node.exc.keywords}
            if "code" not in kw:
                continue
            code = kw.pop("code")
            codes = [code.value] if isinstance(code, ast.Constant) else DYNAMIC[ast.unparse(code).replace("'", '"')]
            out.append((f"{path.name}:{node.lineno}", codes, set(kw)))
    return out


def _placeholders(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def test_every_error_code_has_a_turkish_message_with_exactly_its_params():
    strings = _strings()
    sites = _raise_sites()
    assert len(sites) >= 55, len(sites)
    used = set()
    for where, codes, params in sites:
        for code in codes:
            entry = strings.get(f"errmsg_{code}")
            assert entry and entry.get("tr"), f"{where}: no Turkish message errmsg_{code}"
            assert _placeholders(entry["tr"]) == params, (where, code, _placeholders(entry["tr"]), params)
            used.add(code)
    orphans = {k.removeprefix("errmsg_") for k in strings if k.startswith("errmsg_")} - used
    assert not orphans, f"messages no error raises: {orphans}"


def test_an_error_keeps_its_english_message_and_carries_code_and_params(minilm):
    with pytest.raises(models.EmptyTextError) as info:
        models.analyze(minilm, "\x00")
    assert str(info.value).startswith("The text has no character the model reads")
    assert info.value.code == "unreadable_text" and info.value.params == {}
    with pytest.raises(models.UnknownModelError) as info:
        models.load("no-such-model")
    assert info.value.code == "unknown_model" and info.value.params["name"] == "'no-such-model'"
    assert "minilm-l6" in info.value.params["catalog"]


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
