"""Turkish in one voice (issue 50 point 6): the glossary (assets/i18n/glossary/tr.json) names the one Turkish word
for each concept; no Turkish string of the interface, message or lesson uses a word it says to avoid, and every
word it names is in use. (The lesson a teacher ran said 'belirteç' where the pages said 'token'.)"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GLOSSARY = json.loads((ROOT / "assets/i18n/glossary/tr.json").read_text(encoding="utf-8"))["terms"]


def _turkish_texts() -> dict[str, str]:
    """Every Turkish text: ``file:key`` -> text, from the interface strings and the shipped lessons."""
    out = {}
    for path in sorted((ROOT / "assets/i18n").glob("*.json")):
        for key, value in json.loads(path.read_text(encoding="utf-8")).items():
            if isinstance(value, dict) and isinstance(value.get("tr"), str):
                out[f"{path.name}:{key}"] = value["tr"]

    def walk(where: str, node) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "tr" and isinstance(value, str):
                    out[where] = value
                else:
                    walk(f"{where}.{key}", value)
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(f"{where}[{i}]", value)

    for path in sorted((ROOT / "lessons").glob("*.toml")):
        walk(path.name, tomllib.loads(path.read_text(encoding="utf-8")))
    return out


def test_no_turkish_text_uses_a_word_the_glossary_avoids():
    texts = _turkish_texts()
    assert len(texts) > 500  # the interface and the lesson were read
    found = [(where, stem) for term in GLOSSARY.values() for stem in term["avoid"]
             for where, text in texts.items() if stem.casefold() in text.casefold()]
    assert not found, found


def test_every_word_the_glossary_names_is_in_use():
    every = "\n".join(_turkish_texts().values()).casefold()
    unused = [t["use"] for t in GLOSSARY.values() if not re.search(r"\b" + re.escape(t["use"].casefold()), every)]
    assert not unused, unused
