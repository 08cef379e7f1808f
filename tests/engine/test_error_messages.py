"""Engine errors in the interface language (issue 13: "engine messages stay English under a Turkish
headline"). Every error a user of the app can meet carries a ``code`` and its ``params``; the Turkish
interface shows ``errmsg_<code>`` filled with them."""

from __future__ import annotations

import ast
import json
import string
from pathlib import Path

import pytest

import models
from models.loading.library_errors import GGUF_CODES, LOAD_CODES

ROOT = Path(__file__).resolve().parents[2]
# codes built from an expression at the raise site, and every value it can take
DYNAMIC = {'EMPTY_CODES.get(name, "empty_text")': ["empty_text", "empty_text_pair", "empty_target_text",
                                                  "empty_prompt"],
           '"unreadable_" + what': ["unreadable_text", "unreadable_text_pair"],
           "code": ["text_pair_needs_encoder", "target_needs_encdec"],  # analysis._only_for's callers
           "why.code": list(LOAD_CODES),  # a library's failure while loading a folder (library_errors.load_failure)
           "kind.code": list(GGUF_CODES),  # a library's failure while reading a GGUF file (library_errors.gguf_failure)
           "_code(where)": ["flow_identity", "flow_identity_head"],  # the flow's self-checks: a layer or the head
           'f"index_{axis}"': ["index_layer", "index_head", "index_row", "index_key"]}  # analysis.indexing
# params a raise may pass for the English message and API users only: never in a translation, where they would
# quote a library's English (issue 33)
ENGLISH_ONLY = {"detail"}


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
    """Each code's Turkish placeholders are among the raise's params, and the raise passes no param that none of
    its codes' messages uses (a typo), except the English-only ones (a library's text)."""
    strings = _strings()
    sites = _raise_sites()
    assert len(sites) >= 150, len(sites)
    used = set()
    for where, codes, params in sites:
        wanted = set()
        for code in codes:
            entry = strings.get(f"errmsg_{code}")
            assert entry and entry.get("tr"), f"{where}: no Turkish message errmsg_{code}"
            assert _placeholders(entry["tr"]) <= params, (where, code, _placeholders(entry["tr"]), params)
            assert not _placeholders(entry["tr"]) & ENGLISH_ONLY, (where, code)
            wanted |= _placeholders(entry["tr"])
            used.add(code)
        assert wanted == params - ENGLISH_ONLY, (where, codes, wanted, params)
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
