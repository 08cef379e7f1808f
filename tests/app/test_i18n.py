"""The UI strings (assets/i18n/*.json): one definition per key, both languages with the same placeholders,
and every key a page names exists (issue 16: seven files merged into one namespace, where a collision
silently overwrote and only teach.json had a completeness test)."""

from __future__ import annotations

import json
import re
import string
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "assets" / "i18n").glob("*.json"))
# strings passed to st.latex, whose braces are LaTeX, not placeholders
LATEX = {"kv_formula"}


def _entries():
    for path in FILES:
        for key, entry in json.loads(path.read_text(encoding="utf-8")).items():
            yield path.name, key, entry


def _placeholders(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


def test_no_key_is_defined_twice_and_the_loader_says_so(tmp_path, monkeypatch):
    seen: dict[str, str] = {}
    for name, key, _ in _entries():
        assert key not in seen, f"'{key}' in {seen[key]} and {name}"
        seen[key] = name
    from views import shared

    (tmp_path / "i18n").mkdir()
    (tmp_path / "i18n" / "a.json").write_text('{"x": {"en": "1", "tr": "1"}}', encoding="utf-8")
    (tmp_path / "i18n" / "b.json").write_text('{"x": {"en": "2", "tr": "2"}}', encoding="utf-8")
    monkeypatch.setattr(shared.strings, "ASSETS", tmp_path)
    shared._strings.cache_clear()
    try:
        with pytest.raises(ValueError, match="'x' is defined in both a.json and b.json"):
            shared._strings()
    finally:
        monkeypatch.undo()
        shared._strings.cache_clear()


def test_every_string_has_both_languages_with_the_same_placeholders():
    """Catalog overrides (``catalog_<key>_<field>``), translated engine messages (``errmsg_<code>``) and error
    headlines (``err_<class>``) are Turkish only: their English is the catalog's or the engine's own."""
    for name, key, entry in _entries():
        if key.startswith(("catalog_", "errmsg_")) or (key.startswith("err_") and not entry.get("en")):
            assert entry.get("tr"), f"{name}: {key} has no Turkish"
            continue
        assert set(entry) == {"en", "tr"} and entry["en"] and entry["tr"], f"{name}: {key}: {entry}"
        if key not in LATEX:
            assert _placeholders(entry["en"]) == _placeholders(entry["tr"]), f"{name}: {key}"


def test_every_key_a_page_names_exists():
    from views import shared

    strings = shared._strings()
    sources = [ROOT / "app.py"] + sorted((ROOT / "views").rglob("*.py"))
    named = {(path.name, key) for path in sources
             for key in re.findall(r"\bt(?:_plain)?\(\s*\"([A-Za-z0-9_]+)\"\s*[,)]", path.read_text(encoding="utf-8"))}
    assert len(named) > 300
    missing = sorted((name, key) for name, key in named if key not in strings)
    assert not missing, missing
