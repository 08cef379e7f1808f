"""One text field (issue 26): every text box of the pages is :func:`views.shared.fields.text_field`, which keeps a
classroom's ``max_chars`` (a text from a link cut before the box is drawn, the box limited); no page spells the
limit itself. No model is loaded, no page is run."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

HELPER = ROOT / "views" / "shared" / "fields.py"
# text boxes that take a name, not a text to analyse: a model's (classroom mode refuses names it does not offer),
# a corpus file's text column; a live class's room code, teacher token and the address its students open
NAME_FIELDS = {"model_custom", "masks_encdec_model", "atlas_column", "live_code_input", "live_token", "live_address",
               # a mask pattern per head; a Ray cluster's address (views/mask_sections/per_head_custom.py)
               "masks_ph_default", "atlas_ray_address"}
TEXT_BOXES = ("text_input", "text_area", "chat_input")


def _calls(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            yield name, node


def _key(call: ast.Call) -> str | None:
    for kw in call.keywords:
        if kw.arg == "key" and isinstance(kw.value, ast.Constant):
            return kw.value.value
    return None


def test_only_the_helper_draws_a_limited_text_box():
    direct, limited = [], []
    for path in sorted((ROOT / "views").rglob("*.py")):
        where = str(path.relative_to(ROOT))
        for name, call in _calls(path):
            if name not in TEXT_BOXES or path == HELPER:
                continue
            if any(kw.arg == "max_chars" for kw in call.keywords):
                limited.append((where, call.lineno))
            if _key(call) not in NAME_FIELDS:
                direct.append((where, call.lineno, _key(call)))
    assert not limited, limited  # a text box's max_chars is spelled by the helper only
    assert not direct, direct  # a text box to analyse is a text_field (a new one would miss the classroom's limit)


def test_the_text_fields_keep_their_keys():
    """The link parameters and Session State keys of the text boxes stayed as they were."""
    keys = {}
    for path in sorted((ROOT / "views").rglob("*.py")):
        for name, call in _calls(path):
            if name == "text_field":
                keys[_key(call)] = path.relative_to(ROOT / "views").as_posix()
    assert keys == {"text": "shared/sidebar.py", "pair": "explore.py", "kv_prompt": "kvcache.py",
                    "pos_text_a": "positions.py", "pos_text_b": "positions.py", "masks_src": "mask_sections/encdec.py",
                    "masks_tgt": "mask_sections/encdec.py", "masks_audio_tgt": "mask_sections/encdec.py"}, keys
