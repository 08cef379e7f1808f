"""Explore's morpheme level (issue 32): the level control (tokens / words / morphemes, kept in the link under the old
``words`` key), Turkish words split into morphemes in every view, what each morpheme is in the interface language,
the pieces that straddle two morphemes, and the word level for a text that does not read as Turkish."""

from __future__ import annotations

import json

import numpy as np
import pytest
from plotly_json import decode
from test_explore_app import figures, head_view_data, heatmap_figure, run_app

from models import turkish

SENTENCE = "Kedi fareyi kovaladı."
MORPHEMES = ["[CLS]", "Kedi", "fare", "yi", "kovala", "dı", ".", "[SEP]"]
ACC = {"en": "yi — accusative", "tr": "yi — belirtme hâli"}
NOT_TURKISH = {"en": "does not read as Turkish", "tr": "Türkçe görünmüyor"}


def morpheme_page(lang: str, view: str = "heatmap", text: str = SENTENCE, **query):
    return run_app({"view": view, "lang": lang}, query={"model_key": "minilm-l6", "text": text, "words": "morphemes",
                                                        "layer": "2", "head": "3", **query})


def captions(at) -> str:
    return " ".join(c.value for c in at.caption)


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_the_heatmap_shows_morphemes_their_labels_and_rows_that_sum_to_one(minilm, lang):
    at = morpheme_page(lang)
    fig = heatmap_figure(at)
    assert fig["layout"]["xaxis"]["ticktext"] == MORPHEMES and fig["layout"]["yaxis"]["ticktext"] == MORPHEMES
    z = decode(fig["data"][0]["z"]).astype(np.float64)
    np.testing.assert_allclose(z.sum(axis=1), 1.0, atol=1e-5)
    # the engine's own rule gives the same matrix (keys summed, queries averaged by share)
    from views import shared

    a = shared.get_analysis("minilm-l6", SENTENCE)
    q, k = turkish.analysis_units(a, "encoder")
    np.testing.assert_allclose(z, turkish.morpheme_attention(a.attentions["encoder"][2, 3], q, k), atol=1e-6)
    hover = json.dumps(fig["data"][0]["customdata"], ensure_ascii=False)
    assert ACC[lang] in hover  # "yi — accusative: definite object (-(y)I)" / "yi — belirtme hâli (-(y)I)"
    title = fig["layout"]["title"]["text"]
    assert ("morpheme level" if lang == "en" else "biçimbirim düzeyi") in title
    text = captions(at)
    assert "fareyi = fare + yi" in text  # the legend row: stems plainly, suffixes with their label
    assert ("belirtme hâli" if lang == "tr" else "accusative") in text
    # "ad" of ko·val·ad·ı has an "a" in the stem kovala and a "d" in the suffix dı: split and said so
    assert "(ad)" in text and ("1 of 9" if lang == "en" else "9 tokenden 1") in text
    assert not at.error and not at.exception
    assert at.query_params["words"] == "morphemes"


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_every_view_draws_at_the_morpheme_level(minilm, lang):
    """Each view opened afresh (AppTest cannot press a segmented control whose labels are Turkish)."""
    at = morpheme_page(lang, view="head")
    data = head_view_data(at)
    assert data["q"] == MORPHEMES and data["k"] == MORPHEMES
    # each label's tooltip says what the morpheme is, in the interface language (the labels stay the morphemes)
    assert data["qhover"][3].startswith(ACC[lang]) and data["khover"][3].startswith(ACC[lang])
    assert data["qhover"][0] == "[CLS]" and data["khover"][2].startswith("fare — ")
    assert ("stem: noun" if lang == "en" else "gövde: ad (isim)") in data["khover"][2]
    w = np.asarray(data["w"], dtype=np.float64) / 1000  # thousandths
    np.testing.assert_allclose(w.sum(axis=-1), 1.0, atol=0.01)
    at = morpheme_page(lang, view="model")
    assert not at.exception and not at.error
    assert any(f["layout"]["yaxis"].get("ticktext") == MORPHEMES for f in figures(at))  # the map opened large
    at = morpheme_page(lang, view="summary")
    assert not at.exception and not at.error
    assert ("token level" if lang == "en" else "token düzeyinde") in captions(at)
    # hiding the special tokens drops their units, the rest renormalised
    at = morpheme_page(lang, hide_special="1")
    fig = heatmap_figure(at)
    assert fig["layout"]["yaxis"]["ticktext"] == MORPHEMES[1:-1]
    np.testing.assert_allclose(decode(fig["data"][0]["z"]).sum(axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_an_english_text_falls_back_to_words_with_a_note_never_an_error(minilm, lang):
    at = morpheme_page(lang, view="head", text="The cat chased the mouse.")
    assert NOT_TURKISH[lang] in " ".join(i.value for i in at.info)
    assert not at.error and not at.exception
    data = head_view_data(at)
    assert data["q"] == ["[CLS]", "The", "cat", "chased", "the", "mouse", ".", "[SEP]"]
    assert "qhover" not in data and "khover" not in data  # the word level: the tooltips are the labels
    assert ("word level" if lang == "en" else "sözcük düzeyi") in data["title"]


def test_the_old_words_link_still_opens_the_word_level_and_the_control_writes_the_link(minilm):
    at = run_app(query={"model_key": "minilm-l6", "text": SENTENCE, "words": "1", "view": "heatmap"})
    assert at.session_state["level"] == "words"
    assert heatmap_figure(at)["layout"]["xaxis"]["ticktext"] == ["[CLS]", "Kedi", "fareyi", "kovaladı", ".", "[SEP]"]
    assert at.query_params["words"] == "1"
    at.button_group(key="level").set_value("morphemes").run()
    assert heatmap_figure(at)["layout"]["xaxis"]["ticktext"] == MORPHEMES
    assert at.query_params["words"] == "morphemes"
    at.button_group(key="level").set_value("tokens").run()
    assert "words" not in at.query_params
    assert heatmap_figure(at)["layout"]["xaxis"]["ticktext"][2] == "i"  # Ked·i


def test_an_unknown_word_keeps_its_form_and_typed_markup_stays_text(minilm):
    """A word the analyzer does not know is one unit as typed (and the legend says so); what was typed is never
    markdown or HTML (the legend goes through the page's escaping, the figure's labels through plotly's)."""
    at = morpheme_page("en", text="Kedi **fareyi** Zqxw kovaladı <>.")
    assert not at.exception and not at.error and not at.info
    labels = heatmap_figure(at)["layout"]["xaxis"]["ticktext"]
    assert {"fare", "yi", "Zqxw", "kovala", "dı"} <= set(labels)
    assert "<" not in "".join(labels)  # "&lt;" as plotly shows it
    legend = next(c.value for c in at.caption if c.value.startswith("Morphemes:"))
    assert "Zqxw (unknown word)" in legend and "fareyi = fare + yi" in legend
    assert "accusative\\: definite" in legend  # markdown's special characters escaped
