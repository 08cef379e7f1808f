"""AppTest of the Head atlas page (views/atlas.py, issue 28): an atlas of a small uploaded corpus, built here into a
temporary cache folder (the folder the page looks up for that upload), shown in both languages: the layer × head
grid, the ranked heads, a head's metrics, its examples with corpus text shown as text (never HTML or markdown), the
link into Explore, the queries-and-keys plane; a partial atlas shown while a build is under way; bad uploads told in
the interface language with no traceback; a speech model refused."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from models import atlas
from models.atlas import build, jobs

APP = str(Path(__file__).resolve().parents[2] / "app.py")
HOSTILE = "<b>bold</b> *star* and [a link](http://x.y) sat on the mat."
TEXTS = [HOSTILE, "The dog chased the cat around the garden.", "A quick brown fox jumps over the lazy dog.",
         "Time flies like an arrow; fruit flies like a banana.", "She sells sea shells by the sea shore."]
DATA = ("\n".join(TEXTS) + "\n").encode()


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """DIKKAT_CACHE in a temporary folder for this module (atlases only: minilm-l6 needs no converted weights)."""
    mp = pytest.MonkeyPatch()
    root = tmp_path_factory.mktemp("dikkat-cache")
    mp.setenv("DIKKAT_CACHE", str(root))
    yield root
    mp.undo()


@pytest.fixture(scope="module")
def built(cache, minilm):
    """The atlas of the upload ``tiny.txt`` with the page's default settings."""
    return atlas.build_atlas(minilm, atlas.corpus_from_bytes(DATA, name="tiny.txt", suffix=".txt"))


def _ok(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def _page(lang: str = "en", model: str = "minilm-l6") -> AppTest:
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["model_key"] = model
    at.session_state["lang"] = lang
    at.run()
    at.switch_page("views/atlas.py")
    at.session_state["atlas_corpus"] = "upload"
    at.run()
    return at


def _upload(at: AppTest, name: str, data: bytes) -> AppTest:
    at.file_uploader(key="atlas_upload").set_value((name, data, "text/plain"))
    return at.run()


def _figures(at: AppTest) -> list[dict]:
    return [json.loads(e.proto.spec) for e in at.get("plotly_chart")]


def _htmls(at: AppTest) -> list[str]:
    return [h.value for h in at.get("html") if h.value.lstrip().startswith("<div class=\"atlas-snippet\"")]


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_the_atlas_shows_grid_ranking_head_and_examples_as_text(built, lang):
    at = _upload(_page(lang), "tiny.txt", DATA)
    _ok(at)
    status = " ".join(c.value for c in at.caption)
    assert ("all 5 texts read" if lang == "en" else "5 metnin hepsi okundu") in status
    grids = [f for f in _figures(at) if any(tr.get("type") == "heatmap" for tr in f["data"])]
    assert len(grids) == 1 and grids[0]["layout"]["separators"] == (".," if lang == "en" else ",.")
    heat = next(tr for tr in grids[0]["data"] if tr["type"] == "heatmap")
    assert ("Previous token" if lang == "en" else "Önceki token") in grids[0]["layout"]["title"]["text"]
    assert heat["z"]  # 6 layers x 12 heads
    ranked = at.dataframe[0].value
    best = built.rank("previous", top=12)
    assert len(ranked) == 12 and list(ranked.iloc[:, 2]) == sorted(ranked.iloc[:, 2], reverse=True)
    assert (list(ranked.iloc[:, 0]), list(ranked.iloc[:, 1])) == (list(best["layer"]), list(best["head"]))
    assert ranked.iloc[0, 3] == (f"{best['previous_lo'].iloc[0]:.3f}–{best['previous_hi'].iloc[0]:.3f}"
                                 .replace(".", "," if lang == "tr" else "."))
    # the picked head's metrics: every rankable metric, its value and interval, in the language's numbers
    metrics = at.table[0].value
    assert len(metrics) == len(atlas.RANKABLE)
    if lang == "tr":
        assert any("," in str(v) for v in metrics.iloc[:, 1]) and "Ölçü" in metrics.columns[0]
    # the corpus's text reaches the page as characters: escaped HTML, no markdown element holds it
    snippets = _htmls(at)
    assert len(snippets) == 5
    hostile = [h for h in snippets if "bold" in h]
    assert hostile and "&lt;/b&gt;" in hostile[0] and "<b>bold" not in hostile[0] and "*star*" in hostile[0]
    assert "[a link](http://x.y)" in hostile[0] and "<a " not in hostile[0]
    assert not [m.value for m in at.markdown if "bold" in m.value or "star" in m.value]
    labels = [b.label for b in at.button]
    assert labels.count("Open in Explore" if lang == "en" else "Keşfet'te aç") == 5
    # no causal tests stored: how to compute them
    assert any("make atlases" in c.value and "causal_labels" in c.value for c in at.caption)
    # every atlas on disk, ranked by the metric
    found = at.dataframe[-1].value
    assert set(found.iloc[:, 0]) == {"minilm-l6"}


def test_picking_a_head_changes_its_examples_and_opens_explore_on_it(built):
    at = _upload(_page(), "tiny.txt", DATA)
    at.selectbox(key="atlas_metric").set_value("first").run()
    _ok(at)
    at.selectbox(key="atlas_layer").set_value(4).run()
    at.selectbox(key="atlas_head").set_value(7).run()
    _ok(at)
    expected = built.examples("encoder", 4, 7, k=5)
    assert at.subheader[0].value == "Layer 4, head 7"
    assert (at.query_params["atlas_layer"], at.query_params["atlas_head"]) in (("4", "7"), (["4"], ["7"]))  # a link
    captions = [c.value for c in at.caption if c.value.startswith("Text ")]
    assert captions[0].startswith(f"Text {int(expected['text'].iloc[0]) + 1} ·")
    at.toggle(key="atlas_related_across").set_value(True).run()
    _ok(at)
    across = [d.value for d in at.dataframe if list(d.value.columns[:2]) == ["Model", "Corpus"]]
    assert across and len(across[0]) == 6 and set(across[0]["Model"]) == {"minilm-l6"}
    at.button(key="atlas_qk_button").click().run()
    _ok(at)
    plane = [f for f in _figures(at) if "Queries and keys" in f["layout"]["title"]["text"]]
    assert plane and {tr["marker"]["symbol"] for tr in plane[0]["data"]} == {"circle", "diamond-open"}
    first = expected["content"].iloc[0]
    at.button(key="atlas_open_0").click().run()
    _ok(at)
    assert at.session_state["text"] == first
    assert (at.session_state["layer"], at.session_state["head"], at.session_state["view"]) == (4, 7, "heatmap")
    assert at.title[0].value == "Explore attention"


def test_a_partial_atlas_is_shown_and_the_build_resumes_in_the_background(cache, minilm):
    texts = [f"Sentence number {i} says that the {w} sat on the mat." for i, w in enumerate(
        ["cat", "dog", "bird", "fox", "cow", "hen", "pig", "owl", "bee", "ant", "elk", "yak", "emu", "gnu", "ram",
         "eel", "cod", "jay", "bat", "rat"])]
    data = ("\n".join(texts) + "\n").encode()
    corpus = atlas.corpus_from_bytes(data, name="partial.txt", suffix=".txt")
    atlas.build_atlas(minilm, corpus, stop=lambda: True)  # one text read and written, then stopped
    at = _upload(_page("tr"), "partial.txt", data)
    _ok(at)
    assert any("20 metnin 1 tanesi okundu" in c.value for c in at.caption)
    assert at.get("plotly_chart") and at.dataframe
    resume = at.button(key="atlas_build")
    assert resume.label == "Çıkarmayı sürdür"
    resume.click().run()
    _ok(at)
    job = jobs.running(atlas.folder_for(minilm, corpus, build.check_settings(minilm, None, None, 16, None)))
    assert job is not None
    deadline = time.monotonic() + 300
    while not job.finished and time.monotonic() < deadline:
        time.sleep(0.2)
    assert job.finished and job.error is None
    at.run()
    _ok(at)
    assert any("20 metnin hepsi okundu" in c.value for c in at.caption)
    assert not [b for b in at.button if b.key == "atlas_build"]  # complete: nothing to build


@pytest.mark.parametrize("lang", ["en", "tr"])
@pytest.mark.parametrize("name, data, column, expected", [
    ("notes.txt", b"abc\x00\x01\x02binary", "", {"en": "is a binary file", "tr": "bir metin dosyası değil"}),
    ("rows.csv", b"id,body\n1,hello\n", "", {"en": "has no column 'text'", "tr": "dosyasında 'text' sütunu yok"}),
    ("rows.jsonl", b'{"body": "x"}\n', "words", {"en": "has no column 'words'", "tr": "'words' sütunu yok"}),
])
def test_a_bad_upload_is_told_in_the_interface_language(cache, minilm, lang, name, data, column, expected):
    at = _page(lang)
    if column:
        at.text_input(key="atlas_column").set_value(column)
    _upload(at, name, data)
    assert not at.exception, [e.value for e in at.exception]
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and expected[lang] in errors[0].replace("\\", ""), errors
    if lang == "tr":
        assert "Bu derlem okunamıyor." in errors[0]
    assert not at.get("plotly_chart") or all("heatmap" not in json.dumps(f) for f in _figures(at))


@pytest.mark.parametrize("lang, words", [("en", "listens to speech"), ("tr", "konuşma dinler")])
def test_a_speech_model_is_told_why_not(cache, lang, words):
    at = _page(lang, model="whisper-base")
    _ok(at)
    assert any(words in i.value for i in at.info)
    assert not at.get("plotly_chart")


def test_causal_labels_say_label_or_pattern_only(cache, minilm):
    """A passed test is a label with its effect and interval; a failed one "pattern only"; a head without a row was no
    candidate."""
    import pandas as pd

    data = DATA + b"One more line so that this corpus has its own atlas.\n"
    built = atlas.build_atlas(minilm, atlas.corpus_from_bytes(data, name="labels.txt", suffix=".txt"))
    rows = [("encoder", 4, 7, "previous", "previous", 0.61, "loss", 0.052, 0.031, 0.07, True, 16, True),
            ("encoder", 4, 7, "self", "self", 0.512, "loss", 0.0004, -0.002, 0.003, False, 16, True)]
    pd.DataFrame(rows, columns=["stack", "layer", "head", "label", "pattern", "pattern_value", "quantity", "delta",
                                "lo", "hi", "passed", "texts", "primary"]).to_parquet(built.folder / "labels.parquet")
    for lang, passed, failed in (
            ("en", "previous-token head: switching it off changes the model's next-token loss (nats) by +0.0520 "
                   "(95 % interval 0.0310 to 0.0700, 16 texts).", "Pattern only (self head, Self = 0.512)"),
            ("tr", "önceki token kafası: kapatılınca modelin sonraki token kaybı (nat) +0,0520 değişiyor "
                   "(%95 aralığı 0,0310 ile 0,0700 arası, 16 metin).",
             "Yalnızca örüntü (kendine bakan kafa, Kendine dikkat = 0,512)")):
        at = _upload(_page(lang), "labels.txt", data)
        at.selectbox(key="atlas_layer").set_value(4).run()
        at.selectbox(key="atlas_head").set_value(7).run()
        _ok(at)
        shown = [m.value.replace("\\", "") for m in at.markdown]
        assert passed in shown, shown
        assert any(m.startswith(failed) for m in shown), shown
        assert any("green-badge" in m for m in shown) and any("gray-badge" in m for m in shown)
        at.selectbox(key="atlas_head").set_value(6).run()
        assert any(c.value.startswith("This head was not a candidate" if lang == "en" else "Bu kafa hiçbir etiket")
                   for c in at.caption)


def test_a_link_reopens_the_metric_and_the_head(built):
    at = AppTest.from_file(APP, default_timeout=300)
    at.query_params.update({"model_key": "minilm-l6", "atlas_corpus": "upload", "atlas_metric": "entropy",
                            "atlas_layer": "3", "atlas_head": "5", "lang": "tr"})
    at.run()
    at.switch_page("views/atlas.py")
    at.run()
    _upload(at, "tiny.txt", DATA)
    _ok(at)
    assert at.selectbox(key="atlas_metric").value == "entropy"
    assert at.subheader[0].value == "Katman 3, kafa 5"


@pytest.fixture
def classroom_mode(monkeypatch):
    """Classroom mode for one test (the hosting is read once per process: its cache is cleared before and after)."""
    import streamlit as st

    from views import hosting

    details = st.get_option("client.showErrorDetails")  # app.py hides tracebacks in a class, for the process
    monkeypatch.setenv("DIKKAT_MODE", "classroom")
    hosting.current.cache_clear()
    yield
    monkeypatch.delenv("DIKKAT_MODE")
    hosting.current.cache_clear()
    st.set_option("client.showErrorDetails", details)


def test_in_a_class_only_the_shipped_corpora_with_default_settings_are_built(cache, minilm, classroom_mode):
    """A class shares one machine: an upload (or other settings) gets the explanation, not a Build button."""
    at = _upload(_page("tr"), "other.txt", b"Bir metin.\nBir metin daha.\n")
    _ok(at)
    assert not [b for b in at.button if b.key == "atlas_build"]
    assert any("make atlases" in i.value for i in at.info)
    at.session_state["atlas_corpus"] = "en"
    at.run()
    assert [b for b in at.button if b.key == "atlas_build"]  # the shipped corpus, default settings: not built yet


GONE = {"en": "Some files of this atlas on the server have gone", "tr": "Bu atlasın sunucudaki bazı dosyaları silinmiş"}


@pytest.mark.parametrize("lang, table", [("en", "examples"), ("tr", "sums")])
def test_files_of_the_atlas_that_go_are_told_and_nothing_is_lost(cache, minilm, lang, table):
    """Issue 44 point 6: a part of the atlas an upload was built into went while the page was open (a cleaned cache,
    the upload's atlas removed): the page crashed on DuckDB's 'No files found' (the examples) or, once another
    process read the atlas, on the missing sums. Now it says so in the interface language, shows what is left,
    keeps the corpus, the upload and the head picked, and Resume reads the missing texts again."""
    from views.atlas_sections import common

    data = b"The dog chased the cat.\nA bird sang.\nThe fox ran.\nA cow slept.\n"
    built = atlas.build_atlas(minilm, atlas.corpus_from_bytes(data, name=f"gone-{table}.txt", suffix=".txt"))
    at = _upload(_page(lang), f"gone-{table}.txt", data)
    _ok(at)
    at.session_state["atlas_layer"], at.session_state["atlas_head"] = 2, 3
    at.run()
    _ok(at)
    for part in (built.folder / "parts").glob(f"{table}-*.parquet"):
        part.unlink()
    common.atlas_object_clear()  # as another process (a replica, the next start) would read it
    at.run()
    _ok(at)
    assert [w.value for w in at.warning if GONE[lang] in w.value], [w.value for w in at.warning]
    assert at.session_state["atlas_corpus"] == "upload" and at.session_state["atlas_upload"] is not None
    # the atlas that is left has no complete part: the head picked waits in the link, as a link's head does
    assert (at.query_params["atlas_layer"], at.query_params["atlas_head"]) == ("2", "3")
    resume = at.button(key="atlas_build")
    assert resume.label == {"en": "Resume the build", "tr": "Çıkarmayı sürdür"}[lang]
    resume.click().run()
    _ok(at)
    job = jobs.running(built.folder)
    deadline = time.monotonic() + 300
    while job is not None and not job.finished and time.monotonic() < deadline:
        time.sleep(0.2)
    assert job is not None and job.finished and job.error is None
    at.run()
    _ok(at)
    assert not [w for w in at.warning if GONE[lang] in w.value]
    assert any(("all 4 texts read" if lang == "en" else "4 metnin hepsi okundu") in c.value for c in at.caption)
    assert len(_htmls(at)) == 4  # the examples are back
    assert (at.session_state["atlas_layer"], at.session_state["atlas_head"]) == (2, 3)


@pytest.mark.parametrize("lang, untested", [("en", "not tested"), ("tr", "sınanmadı")])
def test_the_ranking_carries_each_heads_verdict_and_effect(cache, minilm, lang, untested):
    """Issue 46, point 7: the ranked heads say which are proven (✓ with the effect of switching them off and its
    interval) and which are not tested, in the ranking and in the finder across atlases."""
    import pandas as pd

    data = DATA + b"A line for the verdicts' own atlas.\n"
    built = atlas.build_atlas(minilm, atlas.corpus_from_bytes(data, name="verdicts.txt", suffix=".txt"))
    top = built.rank("previous", top=1).iloc[0]
    pd.DataFrame([("encoder", int(top["layer"]), int(top["head"]), "previous", "previous", 0.9, "loss", 0.052, 0.031,
                   0.07, True, 16, True)],
                 columns=["stack", "layer", "head", "label", "pattern", "pattern_value", "quantity", "delta", "lo",
                          "hi", "passed", "texts", "primary"]).to_parquet(built.folder / "labels.parquet")
    at = _upload(_page(lang), "verdicts.txt", data)
    _ok(at)
    column = "Switched off" if lang == "en" else "Kapatınca"
    ranking = at.dataframe[0].value[column]
    assert ranking.iloc[0] == ("✓ +0.052 [0.031–0.070]" if lang == "en" else "✓ +0,052 [0,031–0,070]")
    assert set(ranking.iloc[1:]) == {untested}
    found = [d.value for d in at.dataframe if column in d.value.columns and "Model" in d.value.columns]
    assert found and ranking.iloc[0] in set(found[0][column])


def test_the_page_builds_on_ray_and_lists_the_cut_texts(cache, minilm):
    """Outside a class the build can run on Ray on this machine (2 workers): the same atlas as in process, and
    the texts cut to the token limit listed with how much was cut."""
    texts = [f"Sentence {i} is about the {w}." for i, w in enumerate(["cat", "dog", "fox", "owl", "emu", "yak"])]
    texts.append(" ".join(["a very long sentence"] * 40))
    data = ("\n".join(texts) + "\n").encode()
    at = _upload(_page("en"), "onray.txt", data)
    at.session_state["atlas_max_tokens"] = 32
    at.run()
    at.selectbox(key="atlas_engine").set_value("ray_local").run()
    at.number_input(key="atlas_workers").set_value(2).run()
    _ok(at)
    at.button(key="atlas_build").click().run()
    _ok(at)
    corpus = atlas.corpus_from_bytes(data, name="onray.txt", suffix=".txt")
    job = jobs.running(atlas.folder_for(minilm, corpus, build.check_settings(minilm, 32, None, 16, None)))
    deadline = time.monotonic() + 300
    while job is not None and not job.finished and time.monotonic() < deadline:
        time.sleep(0.2)
    assert job is not None and job.finished and job.error is None, job and job.error
    at.run()
    _ok(at)
    assert any("all 7 texts read" in c.value for c in at.caption)
    assert any(e.label.startswith("1 texts were cut to 32 tokens") for e in at.expander)
    cut = [d.value for d in at.dataframe if "Tokens cut" in d.value.columns][0]
    assert list(cut["Text"]) == [7] and cut["Tokens cut"].iloc[0] > 0 \
        and cut["Starts with"].iloc[0].startswith("a very")
    assert atlas.Atlas(job.folder).complete


def test_in_a_class_the_build_never_runs_on_ray(cache, minilm, classroom_mode):
    at = _page("en")
    _ok(at)
    assert not [s for s in at.selectbox if s.key == "atlas_engine"]
