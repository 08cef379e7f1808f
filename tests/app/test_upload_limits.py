"""Uploads bounded per session (views/shared/uploads.py, issue 44 point 5): the Atlas page's corpus upload, 41 files
in one session (at most 20 kept, the rest refused with a message in the interface language), and the bytes of one
session bounded."""

from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest

from conftest import ROOT
from views.shared import uploads

STRINGS = json.loads((ROOT / "assets/i18n/jobs.json").read_text(encoding="utf-8"))


def _page(lang: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.session_state["model_key"] = "minilm-l6"
    at.session_state["lang"] = lang
    at.run()
    at.switch_page("views/atlas.py")
    at.session_state["atlas_corpus"] = "upload"
    at.run()
    return at


def _kept(at: AppTest) -> tuple[int, int]:
    sizes = [v for v in at.session_state[uploads.SEEN_KEY].values() if v is not None]
    return len(sizes), sum(sizes)


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_41_uploads_in_one_session_are_bounded(minilm, monkeypatch, lang):
    monkeypatch.delenv("DIKKAT_UPLOADS_PER_SESSION", raising=False)
    at = _page(lang)
    for i in range(41):
        at.file_uploader(key="atlas_upload").set_value((f"notes{i}.txt", f"Text number {i}.\n".encode() * 40,
                                                         "text/plain"))
        at.run()
        assert not at.exception
    assert _kept(at)[0] == 20
    assert [e.value for e in at.error] == [STRINGS["upload_too_many"][lang].format(count=20, limit=20)]


def test_the_bytes_of_one_session_are_bounded(minilm, monkeypatch):
    monkeypatch.setenv("DIKKAT_UPLOAD_SESSION_MIB", "1")
    at = _page("en")
    block = ("A sentence of the corpus. " * 40 + "\n").encode()
    for i in range(3):
        data = block * (600_000 // len(block))
        at.file_uploader(key="atlas_upload").set_value((f"big{i}.txt", data + str(i).encode(), "text/plain"))
        at.run()
    files, kept = _kept(at)
    assert files == 1 and kept <= 2 ** 20
    assert [e.value for e in at.error] == [STRINGS["upload_too_much"]["en"].format(limit="1.0 MiB")]
