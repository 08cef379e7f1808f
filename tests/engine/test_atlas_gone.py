"""Files of an atlas that go (issue 44 point 6): a part removed since the build is left out and read again by the next
build; a file that goes while it is read raises AtlasFilesGoneError (naming no path), not DuckDB's or the operating
system's error; finding heads across atlases lists them again once."""

from __future__ import annotations

import pytest

import models
from models import atlas
from models.atlas import store

TEXTS = ["kedi fareyi kovaladı.", "the cat chased the mouse.", "a b c a b c", "dün kedi uyudu.", "fare kaçtı!"]


@pytest.fixture()
def built(tiny, tmp_path, monkeypatch):
    """An atlas of five texts on the tiny BERT in two parts (three texts, then two)."""
    monkeypatch.setattr("models.atlas.build.PART_TEXTS", 3)
    a = atlas.build_atlas(tiny("bert"), atlas.corpus_from_texts(TEXTS, name="five"), repeats=0, root=tmp_path)
    assert store.complete_parts(a.folder) == ["00000", "00001"] and a.complete
    return a


@pytest.mark.parametrize("table", ["sums", "examples", "texts"])
def test_a_part_that_went_is_left_out_and_read_again_by_the_next_build(tiny, tmp_path, built, table):
    (built.folder / "parts" / f"{table}-00001.parquet").unlink()
    fresh = atlas.Atlas(built.folder)
    assert store.complete_parts(built.folder) == ["00000"]
    assert fresh.done() == (3, 5) and fresh.finished and not fresh.complete
    assert fresh.table()["texts"].iloc[0] == 3 and [i for i, _ in fresh.texts()] == [0, 1, 2]
    assert set(fresh.examples("encoder", 0, 0, k=10)["text"]) <= {0, 1, 2}
    again = atlas.build_atlas(tiny("bert"), atlas.corpus_from_texts(TEXTS, name="five"), repeats=0, root=tmp_path)
    assert again.folder == built.folder and again.complete and again.done() == (5, 5)
    assert [i for i, _ in again.texts()] == [0, 1, 2, 3, 4]


def test_a_file_that_goes_while_it_is_read_is_an_atlas_files_gone_error(built, monkeypatch):
    """The parts are listed, then one goes before DuckDB opens it (another process removed the atlas): before, the
    page got duckdb.IOException ('No files found ...', with the server's path)."""
    listed = store.complete_parts(built.folder)
    for table in ("sums", "examples", "texts"):
        (built.folder / "parts" / f"{table}-00001.parquet").unlink()
    monkeypatch.setattr(store, "complete_parts", lambda folder: listed)
    for read in (lambda: built.examples("encoder", 0, 0), lambda: atlas.Atlas(built.folder).table(),
                 lambda: built.done()):
        with pytest.raises(models.AtlasFilesGoneError) as info:
            read()
        assert info.value.code == "atlas_files_gone" and info.value.params == {}
        assert str(built.folder) not in str(info.value) and "five" not in str(info.value)
    (built.folder / "manifest.json").unlink()
    with pytest.raises(models.AtlasFilesGoneError):
        _ = built.complete


def test_finding_heads_lists_the_atlases_again_when_one_went_meanwhile(built, tmp_path, monkeypatch):
    before = atlas.find_heads("previous", root=tmp_path)
    calls = []
    real = store.part_files

    def stale_once(folder, table):  # the first listing names a part that is gone by the time DuckDB reads it
        calls.append(table)
        return real(folder, table)[:-1] + f", '{built.folder}/parts/sums-09999.parquet']" if len(calls) == 1 else \
            real(folder, table)

    monkeypatch.setattr(store, "part_files", stale_once)
    again = atlas.find_heads("previous", root=tmp_path)
    assert len(calls) == 2 and again.equals(before)
