"""Turkish in one voice (issue 50 point 6): the glossary (assets/i18n/glossary/tr.json) names the one Turkish word
for each concept; no Turkish string of the interface, message or lesson uses a word it says to avoid, and every
word it names is in use. (The lesson a teacher ran said 'belirteç' where the pages said 'token'.) A stem may be
allowed in named texts only ('except': 'parça' where it is a part of something that is not a token), each with its
reason, and each such exception must still hold the stem, so the list stays the list of reviewed texts."""

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


def _excepted(term: dict, stem: str) -> dict[str, str]:
    """``file:key`` -> reason, the texts where ``stem`` was reviewed and means something else."""
    return term.get("except", {}).get(stem, {})


def test_no_turkish_text_uses_a_word_the_glossary_avoids():
    texts = _turkish_texts()
    assert len(texts) > 500  # the interface and the lesson were read
    found = [(where, stem) for term in GLOSSARY.values() for stem in term["avoid"]
             for where, text in texts.items()
             if stem.casefold() in text.casefold() and where not in _excepted(term, stem)]
    assert not found, found


def test_every_exception_is_a_reviewed_text_that_still_holds_its_stem():
    """An exception names an existing text that still has the stem (else it would hide a later, unreviewed one),
    excepts only a stem its term avoids, and says why in a few English words."""
    texts = _turkish_texts()
    stale, unnamed, unsaid = [], [], []
    for name, term in GLOSSARY.items():
        unnamed += [(name, stem) for stem in term.get("except", {}) if stem not in term["avoid"]]
        for stem, excepted in term.get("except", {}).items():
            stale += [(where, stem) for where in excepted if stem.casefold() not in texts.get(where, "").casefold()]
            unsaid += [(where, why) for where, why in excepted.items() if not 3 <= len(why.split()) <= 6]
    assert not stale, stale
    assert not unnamed, unnamed
    assert not unsaid, unsaid


def test_parca_is_excepted_only_where_it_is_not_a_token():
    """'parça' once meant token in about 270 places; those now say 'token', and the few left are the reviewed
    parts of other things (a score's terms, the residual stream, a GGUF chunk, a thread: 'iş parçacığı')."""
    token = GLOSSARY["token"]
    assert "parça" in token["avoid"]
    excepted = _excepted(token, "parça")
    assert 0 < len(excepted) <= 25, len(excepted)
    texts = _turkish_texts()
    assert "iş parçacığı" in texts["teach.json:cost_measured"]
    assert "tokenleri" in texts["explore.json:opt_hide_special"]  # "Özel tokenleri gizle", no longer "parçaları"


def test_every_word_the_glossary_names_is_in_use():
    every = "\n".join(_turkish_texts().values()).casefold()
    unused = [t["use"] for t in GLOSSARY.values() if not re.search(r"\b" + re.escape(t["use"].casefold()), every)]
    assert not unused, unused
