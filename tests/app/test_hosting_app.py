"""Hosting a class (issue 12), in the app: what a user typed or a link carried is shown as text on every
page, and classroom mode takes no folder path or hub id from the browser or the URL, cuts long texts and
never names a server path."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import models
from views import hosting

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app.py")
PAGES = ["views/explore.py", "views/pruning.py", "views/masks.py", "views/qkv.py", "views/positions.py",
         "views/cost.py", "views/kvcache.py", "views/experiments.py", "views/atlas.py", "views/why.py"]
# an image the browser would fetch, a link, HTML and LaTeX: each must reach the page as the same characters
PAYLOAD = "![x](http://beacon.invalid/b.png) [login](http://evil.invalid) <b>bold</b> $x^2$ **loud**"
MARKDOWN_KINDS = ("markdown", "caption", "error", "warning", "info", "success", "exception", "toast", "title",
                  "header", "subheader")


def _texts(at: AppTest) -> list[str]:
    """Every string the page hands to Streamlit's markdown renderer: markdown elements, the labels and help
    texts of widgets and metrics, and the options of radios and select sliders (a selectbox's or
    multiselect's options are plain text: escaping them would show backslashes)."""
    out = []
    for kind in MARKDOWN_KINDS:
        for el in at.get(kind):
            out.append(str(getattr(el, "value", "") or getattr(el, "body", "")))
    for kind in ("text_input", "text_area", "selectbox", "radio", "multiselect", "checkbox", "button", "metric",
                 "select_slider", "slider", "number_input", "toggle", "expander"):
        for el in at.get(kind):
            for attr in ("label", "help", "value"):
                value = getattr(el, attr, None) if attr != "value" or kind == "metric" else None
                if isinstance(value, str):
                    out.append(value)
            if kind in ("radio", "select_slider"):
                out.extend(o for o in (getattr(el, "options", None) or []) if isinstance(o, str))
    return out


def _unescaped(text: str) -> list[str]:
    """The markdown in ``text`` that would act: an image or link ``](``, an HTML tag, a URL scheme, LaTeX,
    emphasis of the payload."""
    found = []
    for pattern in (r"(?<!\\)\]\(", r"(?<!\\)<b>", r"(?<!\\)://(beacon|evil)", r"(?<!\\)\$x", r"(?<!\\)\*\*loud"):
        found += re.findall(pattern, text)
    return found


def _run(at: AppTest) -> AppTest:
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.fixture
def personal(monkeypatch):
    monkeypatch.setenv("DIKKAT_MODE", "personal")
    hosting.current.cache_clear()
    yield
    hosting.current.cache_clear()


@pytest.fixture
def classroom(monkeypatch, tmp_path, tiny_folder):
    """Classroom mode with a teacher's config: a saved tiny BERT folder offered as "mini", a folder that does
    not exist as "broken", texts cut at 40 characters."""
    folder = tiny_folder("bert")
    config = tmp_path / "classroom.toml"
    config.write_text(f'max_chars = 40\n[models]\n"mini" = "{folder}"\n"broken" = "/srv/secret-models/nothing"\n',
                      encoding="utf-8")
    monkeypatch.setenv("DIKKAT_MODE", "classroom")
    monkeypatch.setenv("DIKKAT_CLASSROOM_CONFIG", str(config))
    hosting.current.cache_clear()
    yield folder
    hosting.current.cache_clear()


@pytest.mark.parametrize("page", PAGES)
def test_user_text_is_shown_as_text_on_every_page(personal, page):
    """The sentence and the model field carry an image, a link, HTML, LaTeX and emphasis; before the fix
    ``?model_custom=![x](http://host/beacon)`` rendered an image the browser fetched, on every page, and the
    KV-cache page rendered the sentence as markdown."""
    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params = {"text": PAYLOAD, "model_custom": PAYLOAD, "pair": PAYLOAD}
    _run(at)
    at.switch_page(page)
    _run(at)
    shown = [x for x in _texts(at) if "beacon" in x or "evil" in x or "bold" in x]
    assert shown, "the payload should be shown somewhere (at least the model's load error)"
    bad = {x: _unescaped(x) for x in shown if _unescaped(x)}
    assert not bad, bad


def test_md_escapes_every_markdown_form():
    from views import shared

    for raw in (PAYLOAD, "a_b_c", "`code`", "# heading", "| a | b |", "~~gone~~", ":red[x]", ":material/home:",
                "www.example.com", "\\*", "<https://x.invalid>"):
        escaped = shared.md(raw)
        assert not _unescaped(escaped)
        # every special character is preceded by a backslash, and removing those gives the text back
        assert re.sub(r"\\(.)", r"\1", escaped) == raw
    assert shared.md(shared.md("*x*")) == shared.md("*x*")  # escaping twice is escaping once


def test_personal_mode_keeps_every_freedom(personal, tiny_folder):
    folder = tiny_folder("bert")
    assert hosting.source(str(folder)) == str(folder) and hosting.source("owner/name") == "owner/name"
    assert hosting.clip("x" * 10_000) == "x" * 10_000
    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params = {"model_custom": str(folder), "text": "the cat"}
    _run(at)
    assert at.sidebar.text_input(key="model_custom").value == str(folder)
    assert at.session_state["_selection"].model == str(folder)
    assert not at.error, [e.value for e in at.error]


def test_classroom_source_allows_the_catalog_and_the_teachers_list_only(classroom):
    assert hosting.source("minilm-l6") == "minilm-l6"
    assert hosting.source("mini") == str(classroom)
    for name in ("/etc/passwd", str(classroom), "~root", "owner/name", "../models", ""):
        with pytest.raises(models.ModelNotAllowedError) as info:
            hosting.source(name)
        assert isinstance(info.value, models.UnknownModelError)
    assert hosting.offered()[-2:] == ["mini", "broken"]
    assert hosting.clip("x" * 100) == "x" * 40


def test_classroom_takes_no_path_or_hub_id_from_a_link(classroom):
    """A shared link with ``?model_custom=/etc`` or ``?model_key=/etc/passwd`` loads nothing from the disk and
    says nothing about it; a long ``?text=`` is cut to the teacher's maximum."""
    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params = {"model_custom": "/etc", "model_key": "/etc/passwd", "text": "the cat sat " * 20}
    _run(at)
    assert not [w for w in at.sidebar.get("text_input") if w.key == "model_custom"]
    selection = at.session_state["_selection"]
    assert selection.model == models.default_model_for_language("en")
    assert len(selection.text) == 40 and selection.text == ("the cat sat " * 20)[:40]
    assert at.sidebar.text_area(key="text").value == selection.text
    assert "model_custom" not in at.query_params
    assert not any("/etc" in x for x in _texts(at))
    assert not at.error, [e.value for e in at.error]


def test_classroom_cuts_every_text_field_of_a_page(classroom):
    """Issue 26's one text field (views/shared/fields.py): the Positions page's two sentences and the sidebar's
    text, each from a link longer than the teacher's 40 characters, arrive cut and their boxes take no more."""
    long = "the cat sat on the mat " * 5
    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params = {"text": long, "pos_text_a": long, "pos_text_b": long[::-1]}
    _run(at)
    at.switch_page("views/positions.py")
    _run(at)
    boxes = {w.key: w for w in at.get("text_input") if w.key in ("pos_text_a", "pos_text_b")}
    boxes["text"] = at.sidebar.text_area(key="text")
    assert {k: (w.value, w.proto.max_chars) for k, w in boxes.items()} == {
        "pos_text_a": (long[:40], 40), "pos_text_b": (long[::-1][:40], 40), "text": (long[:40], 40)}


def test_personal_mode_text_fields_have_no_limit(personal):
    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params = {"text": "x" * 3000}
    _run(at)
    box = at.sidebar.text_area(key="text")
    assert box.value == "x" * 3000 and box.proto.max_chars == 0  # 0: no limit


def test_classroom_masks_page_has_no_free_model_field(classroom):
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["masks_section"] = "encdec"
    _run(at)
    at.switch_page("views/masks.py")
    _run(at)
    assert not [w for w in at.get("text_input") if w.key == "masks_encdec_model"]
    options = at.selectbox(key="masks_encdec_choice").options
    assert all("/" not in o for o in options)  # hub presets are not offered to a class


def test_classroom_teacher_models_load_and_errors_name_no_server_path(classroom):
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["model_key"] = "mini"
    at.session_state["text"] = "the cat sat"
    _run(at)
    assert at.session_state["_selection"].model == "mini"
    assert not at.error, [e.value for e in at.error]
    assert at.get("plotly_chart") or at.get("iframe")  # the teacher's model was analysed
    assert not any(str(classroom) in x for x in _texts(at))

    at.session_state["model_key"] = "broken"
    _run(at)
    errors = [e.value for e in at.error]
    assert errors, "a model that cannot load says so"
    for text in errors + _texts(at):
        assert "/srv" not in text and "secret-models" not in text, text



def test_no_full_garbage_collection_after_every_rerun():
    """Streamlit collects garbage after every script run (runner.postScriptGC); with torch, transformers and
    a model loaded that walk took ~0.35 s under the GIL per rerun and queued a class of 30 behind it
    (bench/classroom.py: N=30 median 9.6 s). The app's config turns it off (Python's own generational
    collections still free cycles)."""
    import tomllib

    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text(encoding="utf-8"))
    assert config["runner"]["postScriptGC"] is False
