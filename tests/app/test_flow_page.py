"""The Information flow page and Explore's value-weighted option (issue 14) through Streamlit's AppTest."""

from __future__ import annotations

import json

import numpy as np
import pytest
from links import open_linked
from plotly_json import decode

from views import shared


def _clean(at) -> None:
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def test_flow_page_shows_kobayashis_numbers_in_both_languages(minilm):
    """minilm-l6: the special-token shares as metrics (raw above value-weighted), no logit lens (no token head),
    the reason in the interface language."""
    at = open_linked("views/flow.py", "minilm-l6", {}, "The cat chased the mouse.")
    _clean(at)
    metrics = {m.label: m.value for m in at.metric}
    raw = float(metrics["Attention on special tokens (weights)"].rstrip(" %"))
    weighted = float(metrics["Attention on special tokens (value-weighted)"].rstrip(" %"))
    assert raw > 50 and weighted < 30, metrics
    assert any("no token head" in i.value for i in at.info)
    at = open_linked("views/flow.py", "minilm-l6", {"lang": "tr"}, "The cat chased the mouse.")
    at.radio(key="lang").set_value("tr").run()
    _clean(at)
    assert any("token başlığı yok" in i.value for i in at.info), [i.value for i in at.info]
    assert [h.value for h in at.header][0].startswith("1. Dikkat ağırlıkları")


def test_flow_page_follows_the_pruned_heads_the_position_and_a_link(smollm2):
    text = "The cat chased the mouse and the dog"
    at = open_linked("views/flow.py", "smollm2-135m", {"flow_position": "3", "flow_threshold": "0.1",
                                                       "flow_layer": "29", "flow_head": "8"}, text)
    _clean(at)
    assert at.selectbox(key="flow_position").value == 3 and at.select_slider(key="flow_threshold").value == 0.1
    assert (at.slider(key="flow_layer").value, at.selectbox(key="flow_head").value) == (29, 8)
    assert not at.toggle(key="flow_use_off").value or at.toggle(key="flow_use_off").disabled
    # heads switched off on the Head pruning page reach this page's analysis (and its cache key)
    at.session_state[shared.HEADS_OFF_KEY] = {"smollm2-135m": [["decoder", 0, h] for h in range(9)]}
    at.run()
    _clean(at)
    assert at.toggle(key="flow_use_off").value and "(9)" in at.toggle(key="flow_use_off").label
    flow = shared.get_flow("smollm2-135m", text, heads_off=frozenset(("decoder", 0, h) for h in range(9)),
                           max_tokens=256, stack="decoder")
    assert (flow.token_shares(0)[:, :-2] == 0).all()  # layer 0 reads no token with all its heads off
    captions = " ".join(c.value for c in at.caption)
    assert "first on top at" in captions


def test_explore_value_weighted_option(minilm):
    """The option value-weights every view's maps: the heatmap drawn is the flow's ‖α W_O v‖, rows renormalised."""
    text = "The cat chased the mouse."
    at = open_linked("views/explore.py", "minilm-l6", {}, text)
    at.session_state["view"], at.session_state["layer"], at.session_state["head"] = "heatmap", 2, 3
    at.checkbox(key="value").check().run()
    _clean(at)
    assert any("Value-weighted (Kobayashi" in c.value for c in at.caption)
    analysis = shared.get_analysis("minilm-l6", text)
    flow = shared.get_flow("minilm-l6", text, stack="encoder")
    want = flow.value_weighted(analysis.attentions["encoder"][2, 3], 2, 3)
    want = want / want.sum(-1, keepdims=True)
    figures = [json.loads(e.proto.spec) for e in at.main if type(e).__name__ == "UnknownElement"
               and e.type == "plotly_chart"]
    z = next(decode(d["z"]) for f in figures for d in f["data"] if d.get("type") == "heatmap")
    np.testing.assert_allclose(z, want, atol=1e-6)


SENTENCE = "Kedi fareyi kovaladı."
MORPHEMES = ["[CLS]", "Kedi", "fare", "yi", "kovala", "dı", ".", "[SEP]"]
WORDS = ["[CLS]", "Kedi", "fareyi", "kovaladı", ".", "[SEP]"]


def _open(query: dict, text: str, lang: str):
    """The flow page on minilm-l6 opened from a link, the interface in ``lang`` from the first run."""
    from streamlit.testing.v1 import AppTest

    from links import APP

    at = AppTest.from_file(APP, default_timeout=600)
    at.session_state["model_key"], at.session_state["text"], at.session_state["lang"] = "minilm-l6", text, lang
    at.run()
    at.switch_page("views/flow.py")
    at.query_params = {"model_key": "minilm-l6", **query}
    at.run()
    _clean(at)
    return at


def _maps(at) -> list[dict]:
    """The two maps of section 1 (weights, value-weighted), as figure JSON."""
    figures = [json.loads(e.proto.spec) for e in at.main if type(e).__name__ == "UnknownElement"
               and e.type == "plotly_chart"]
    return [f for f in figures if any(d.get("type") == "heatmap" for d in f["data"])][:2]


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_flow_maps_at_the_morpheme_level_add_up_a_morphemes_pieces(minilm, lang):
    """Issue 32: both maps merged onto morphemes as Explore merges them (keys summed, queries averaged by share):
    the weights' rows still sum to 1 and the value-weighted map is the contributions ‖α W_O v‖ added up; each
    morpheme's label in the hover and the legend in the interface language."""
    from models import turkish

    at = _open({"flow_level": "morphemes", "flow_layer": "2", "flow_head": "3"}, SENTENCE, lang)
    raw, weighted = _maps(at)
    assert raw["layout"]["xaxis"]["ticktext"] == MORPHEMES and weighted["layout"]["yaxis"]["ticktext"] == MORPHEMES
    flow = shared.get_flow("minilm-l6", SENTENCE, max_tokens=256, stack="encoder")
    q, k = turkish.analysis_units(shared.get_analysis("minilm-l6", SENTENCE, max_tokens=256), "encoder")
    w = flow.weights(2)[3]
    z_raw, z_vw = decode(raw["data"][0]["z"]), decode(weighted["data"][0]["z"])
    np.testing.assert_allclose(z_raw, turkish.morpheme_attention(w, q, k), atol=1e-6)
    np.testing.assert_allclose(z_raw.sum(axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(z_vw, turkish.morpheme_attention(flow.value_weighted(w, 2, 3), q, k), rtol=1e-5)
    # the [CLS] row (a unit of its own) reads "Kedi" with the sum of what it reads from Kedi's pieces
    kedi = [i for i in range(len(q.membership)) if q.membership[i, MORPHEMES.index("Kedi")] == 1.0]
    assert len(kedi) >= 2  # ked + ##i: a morpheme of two pieces
    vw_tokens = flow.value_weighted(w, 2, 3)
    assert z_vw[0, MORPHEMES.index("Kedi")] == pytest.approx(float(vw_tokens[0, kedi].sum()), rel=1e-5)
    assert z_raw[0, MORPHEMES.index("Kedi")] == pytest.approx(float(w[0, kedi].sum()), rel=1e-5)
    hover = json.dumps(raw["data"][0]["customdata"], ensure_ascii=False)
    assert ("yi — accusative" if lang == "en" else "yi — belirtme hâli") in hover
    assert ("Morpheme level" if lang == "en" else "Biçimbirim düzeyi") in raw["layout"]["title"]["text"]
    text = " ".join(c.value for c in at.caption)
    assert "fareyi = fare + yi" in text and ("accusative" if lang == "en" else "belirtme hâli") in text
    assert ("stay with the model's own pieces" if lang == "en" else "modelin kendi tokenlerinde kalır") in text
    assert at.query_params["flow_level"] == "morphemes"


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_flow_maps_at_the_word_level_and_english_at_the_morpheme_level_falls_back_to_words(minilm, lang):
    at = _open({"flow_level": "words"}, SENTENCE, lang)
    raw, _ = _maps(at)
    assert raw["layout"]["xaxis"]["ticktext"] == WORDS
    np.testing.assert_allclose(decode(raw["data"][0]["z"]).sum(axis=1), 1.0, atol=1e-5)
    at = _open({"flow_level": "morphemes"}, "The cat chased the mouse.", lang)
    assert ("does not read as Turkish" if lang == "en" else "Türkçe görünmüyor") in " ".join(i.value for i in at.info)
    raw, _ = _maps(at)
    assert raw["layout"]["xaxis"]["ticktext"] == ["[CLS]", "The", "cat", "chased", "the", "mouse", ".", "[SEP]"]
    assert ("Word level" if lang == "en" else "Sözcük düzeyi") in raw["layout"]["title"]["text"]
