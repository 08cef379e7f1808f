"""Classroom mode names no server path and no file of the teacher's folders, on any page (issue 44 point 6).

The teacher lists two folders: ``backup``, a model folder with only pickle weights (``private_backup.pt``: the
loader's message listed its files, on every page), and ``mini``, a working tiny BERT with the same file beside it.
An atlas built from the teacher's ``private_notes.txt`` is on disk. Every page is opened on each: no rendered
string (markdown, alerts, widget labels and options, figure JSON, table cells) holds a file name of those folders,
their absolute path, or the atlas, computed-ahead and cache folders."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from google.protobuf.json_format import MessageToDict
from streamlit.testing.v1 import AppTest

import models
from pagestate import PAGES
from views import hosting

APP = str(Path(__file__).resolve().parents[2] / "app.py")
OWN_MODELS = ("views/experiments.py", "views/live.py")  # pages that do not load the sidebar's model


@pytest.fixture(scope="module")
def teacher(tmp_path_factory, tiny_folder):
    """The teacher's folder (two models, one with only pickle weights), the classroom config, an atlas of a
    corpus file of the teacher's on disk."""
    from models import atlas

    root = tmp_path_factory.mktemp("teacher-private-root")
    backup = root / "backup-model"
    backup.mkdir()
    (backup / "config.json").write_text('{"model_type": "bert"}', encoding="utf-8")
    (backup / "private_backup.pt").write_bytes(b"\x80\x02pickle")
    mini = root / "mini-model"
    shutil.copytree(tiny_folder("bert"), mini)
    (mini / "private_backup.pt").write_bytes(b"\x80\x02pickle")
    (root / "private_notes.txt").write_text("the cat sat on the mat\nkedi fareyi kovaladı\n", encoding="utf-8")
    config = root / "classroom.toml"
    config.write_text(f'[models]\n"backup" = "{backup}"\n"mini" = "{mini}"\n', encoding="utf-8")
    mp = pytest.MonkeyPatch()
    mp.setenv("DIKKAT_ATLAS_ROOT", str(root / "atlas-store"))
    atlas.build_atlas(models.load(str(mini)), atlas.load_corpus(root / "private_notes.txt"))
    mp.setenv("DIKKAT_MODE", "classroom")
    mp.setenv("DIKKAT_CLASSROOM_CONFIG", str(config))
    hosting.current.cache_clear()
    yield root
    mp.undo()
    hosting.current.cache_clear()


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def rendered(at: AppTest) -> str:
    """Every string of every element on the page (main and sidebar), markdown escapes removed: each element's
    protobuf fields (texts, labels, options, help, figure JSON), and the cells and column names of tables."""
    out: list[str] = []

    def walk(node) -> None:
        proto = getattr(node, "proto", None)
        if proto is not None:
            out.extend(_strings(MessageToDict(proto)))
        if type(node).__name__ in ("Dataframe", "Table"):
            frame = node.value
            frame = getattr(frame, "data", frame)  # a Styler: its data
            out.append(frame.to_csv())
        for child in (getattr(node, "children", None) or {}).values():
            walk(child)

    walk(at._tree)
    return "\n".join(re.sub(r"\\(.)", r"\1", s) for s in out)


@pytest.mark.parametrize("page", [p.file for p in PAGES])
def test_no_page_names_a_file_or_folder_of_the_teacher(teacher, page):
    from models.ahead import root as ahead_root
    from models.atlas.store import atlas_root
    from models.loading.cache import cache_root

    secret = ["private_backup", "private_notes", str(teacher), os.path.realpath(teacher), str(atlas_root()),
              str(ahead_root()), str(cache_root())]
    for model in ("backup", "mini"):
        at = AppTest.from_file(APP, default_timeout=300)
        at.session_state["model_key"] = model
        at.session_state["text"] = "the cat sat on the mat"
        at.run()
        at.switch_page(page)
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        assert at.session_state["_selection"].model == model
        shown = rendered(at)
        found = [s for s in secret if s in shown]
        assert not found, (model, found, [line for line in shown.splitlines() if any(s in line for s in found)][:5])
        if model == "backup" and page not in OWN_MODELS:  # the load error is shown, with the folder's name only
            assert any("pickle" in e.value and "backup" in e.value for e in at.error), [e.value for e in at.error]


def test_scrub_hides_the_teachers_file_names_and_data_files_but_keeps_the_message(teacher):
    mini = str(teacher / "mini-model")
    text = (f"Folder {mini} has only pickle weights (private_backup.pt, weights.bin); see "
            f"{teacher}/private_notes.txt and config.json, or owner/name.")
    assert hosting.scrub(text) == ("Folder mini has only pickle weights (…, …); see … and config.json, "
                                   "or owner/name.")
