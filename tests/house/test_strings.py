"""Every interface string exists (issue 47 point 4): each key the code passes to the translation helpers (``t``,
``t_plain`` and their local names ``tp``) as a literal has its English and Turkish text in ``assets/i18n``, and the
two texts take the same ``{placeholders}``. Before, Masks per head titled an axis with the raw key
``masks_head_axis`` (the helper returns the key when it is missing)."""

from __future__ import annotations

import ast
import json
import string
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HELPERS = {"t", "t_plain", "tp"}
LATEX = {"kv_formula"}  # drawn by st.latex, never formatted: its braces are LaTeX's


def _strings() -> dict[str, dict[str, str]]:
    merged: dict = {}
    for path in sorted((ROOT / "assets" / "i18n").glob("*.json")):
        merged.update(json.loads(path.read_text(encoding="utf-8")))
    return merged


def literal_keys(source: str) -> list[tuple[int, str]]:
    """``(line, key)`` of every call of a translation helper with a literal first argument in ``source``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        fn = node.func
        name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else None
        first = node.args[0]
        if name in HELPERS and isinstance(first, ast.Constant) and isinstance(first.value, str):
            out.append((node.lineno, first.value))
    return out


def _fields(text: str) -> set[str]:
    return {f[1].split(".")[0].split("[")[0].split("!")[0].split(":")[0]
            for f in string.Formatter().parse(text) if f[1] is not None}


def test_the_scan_finds_a_key_the_strings_lack():
    code = 'import streamlit as st\nst.title(t("masks_title"))\nst.caption(shared.t_plain("no_such_key", n=2))\n'
    keys = literal_keys(code)
    assert keys == [(2, "masks_title"), (3, "no_such_key")]
    assert [k for _, k in keys if k not in _strings()] == ["no_such_key"]


def test_every_key_the_code_uses_has_its_english_and_turkish_text():
    strings = _strings()
    files = [ROOT / "app.py", *sorted((ROOT / "views").rglob("*.py"))]
    missing = [f"{path.relative_to(ROOT)}:{line}: {key}"
               for path in files for line, key in literal_keys(path.read_text(encoding="utf-8"))
               if not (strings.get(key, {}).get("en") and strings.get(key, {}).get("tr"))]
    assert not missing, "\n".join(missing)
    assert len([1 for path in files for _ in literal_keys(path.read_text(encoding="utf-8"))]) > 500  # it scans


def test_english_and_turkish_take_the_same_placeholders():
    differ = [(key, sorted(_fields(entry["en"])), sorted(_fields(entry["tr"])))
              for key, entry in _strings().items()
              if isinstance(entry, dict) and entry.get("en") and entry.get("tr") and key not in LATEX
              and _fields(entry["en"]) != _fields(entry["tr"])]
    assert not differ, differ
