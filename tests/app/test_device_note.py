"""A model loaded in float32 because it could not run in the half dtype asked for says so in the sidebar, in the
page's language (models/loading/precision.py notes; views/shared/cache.py _show_device)."""

from __future__ import annotations

from types import SimpleNamespace

import streamlit as st

from views.shared import cache


class Slot:
    def __init__(self):
        self.lines = []

    def caption(self, text):
        self.lines.append(str(text))


def _shown(lang: str, notes: list[dict]) -> list[str]:
    slot = Slot()
    st.session_state["_device_slot"] = slot
    st.session_state["lang"] = lang
    loaded = SimpleNamespace(num_key_value_heads=None, stacks={"encoder": (2, 4)}, device="cuda:0",
                             dtype="torch.float32", capture_path="fallback", name="x", notes=notes)
    try:
        cache._show_device(loaded)
    finally:
        del st.session_state["_device_slot"]
    return slot.lines


def test_a_float32_fallback_is_named_in_both_languages():
    note = {"code": "dtype_fallback", "asked": "bfloat16", "used": "float32", "kind": "dtype", "message": "…"}
    en = _shown("en", [note])
    assert len(en) == 2 and en[1].startswith("Loaded in float32, not bfloat16: the model's own code mixes")
    tr = _shown("tr", [dict(note, kind="rounding")])
    assert tr[1].startswith("bfloat16 yerine float32 ile yüklendi: bu duyarlıkta yuvarlanan")
    assert len(_shown("en", [])) == 1  # no note, the device line alone
