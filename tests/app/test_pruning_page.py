"""AppTest of the head pruning page (views/pruning.py): toggling heads on the grid changes the shown
metric, presets set the expected heads, and the page runs on minilm-l6 and smollm2-135m."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import press_heavy
from streamlit.testing.v1 import AppTest

import models
from models import pruning

APP = str(Path(__file__).resolve().parents[2] / "app.py")


def _page(model: str, text: str, custom: str = "", lang: str = "en") -> AppTest:
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["model_key"] = model
    at.session_state["model_custom"] = custom
    at.session_state["text"] = text
    at.session_state["lang"] = lang
    at.run()
    at.switch_page("views/pruning.py")
    at.run()
    _ok(at)
    return at


def _ok(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def _metric(at: AppTest, start: str):
    found = [m for m in at.metric if m.label.startswith(start)]
    assert found, [m.label for m in at.metric]
    return found[0]


def _count(at: AppTest) -> str:
    found = [m.value for m in at.markdown if "heads off (" in m.value]
    assert found
    return found[0]


def _off_in_grid(at: AppTest) -> set[tuple[int, int]]:
    """(layer, head) pairs whose pill is not selected; pills are the grid rows in layer order."""
    off = set()
    for layer, pills in enumerate(at.pills):
        n = len(pills.options)
        on = set(pills.value or [])
        off |= {(layer, h) for h in range(n) if h not in on}
    return off


def test_c07_minilm_toggle_changes_cosine_and_back(minilm):
    """Switching a head off on the grid changes the shown cosine; switching it back on restores 1.0000
    exactly, also after 20 toggles (C07)."""
    at = _page("minilm-l6", "Kedi fareyi kovaladı")
    assert len(at.pills) == 6 and len(at.pills[0].options) == 12
    assert _metric(at, "Cosine similarity").value == "1.0000"
    ranking = at.table[0].value  # a static table: long sentences wrap instead of being cut
    assert len(ranking) == 11 and "Kedi fareyi kovaladı" not in set(ranking.iloc[:, 0])  # input left out
    values = []
    for _ in range(20):
        pills = at.pills[2]
        (pills.unselect(7) if 7 in (pills.value or []) else pills.select(7)).run()
        _ok(at)
        values.append(_metric(at, "Cosine similarity").value)
    assert values[0] != "1.0000" and float(values[0]) < 1.0
    assert values[::2] == [values[0]] * 10  # head (2, 7) off
    assert values[1::2] == ["1.0000"] * 10  # back on
    assert _off_in_grid(at) == set()
    assert _count(at).startswith("0 of 72")


def test_presets_on_minilm(minilm):
    at = _page("minilm-l6", "The cat chased the mouse")
    # A whole layer off.
    at.selectbox(key="prune_layer_pick").set_value(3).run()
    at.button(key="prune_btn_layer_off").click().run()
    _ok(at)
    assert _off_in_grid(at) == {(3, h) for h in range(12)}
    assert _count(at).startswith("12 of 72")
    assert float(_metric(at, "Cosine similarity").value) < 1.0
    # All on again.
    at.button(key="prune_btn_all_on").click().run()
    assert _off_in_grid(at) == set() and _metric(at, "Cosine similarity").value == "1.0000"
    # The k least important by ablation score (the default source).
    at.number_input(key="prune_k").set_value(5).run()
    at.button(key="prune_btn_k_least").click().run()
    _ok(at)
    scores = pruning.ablation_scores(minilm, "The cat chased the mouse")
    expected = {(layer, head) for (_, layer, head), _ in scores.ranked()[:5]}
    assert _off_in_grid(at) == expected
    # Keep one head per layer: the most important one by gradient importance.
    at.radio(key="prune_source").set_value("gradient").run()
    at.button(key="prune_btn_keep_one").click().run()
    _ok(at)
    grad = pruning.gradient_importance(minilm, "The cat chased the mouse").values["encoder"]
    kept = {(layer, int(np.argmax(grad[layer]))) for layer in range(6)}
    assert _off_in_grid(at) == {(layer, h) for layer in range(6) for h in range(12)} - kept
    assert _count(at).startswith("66 of 72")
    # A toggle after a preset still works.
    at.pills[0].select(0).run()
    assert _count(at).startswith("65 of 72")


def test_importance_and_curve_on_minilm(minilm):
    at = _page("minilm-l6", "Kedi fareyi kovaladı")
    at.button(key="prune_btn_importance").click().run()
    _ok(at)
    rho = [m.value for m in at.markdown if "Spearman" in m.value]
    assert rho and "ρ = " in rho[0]
    abl = pruning.ablation_scores(minilm, "Kedi fareyi kovaladı")
    grad = pruning.gradient_importance(minilm, "Kedi fareyi kovaladı")
    assert f"ρ = {pruning.rank_correlation(abl.flat(), grad.flat()):.3f} for the signed" in rho[0]
    assert f"ρ = {pruning.rank_correlation(np.abs(abl.flat()), grad.flat()):.3f} for the size" in rho[0]
    estimate = [c.value for c in at.caption if c.value.startswith("Takes about ")]
    assert len(estimate) == 1 and "measured run on the shortest sentence" in estimate[0]
    press_heavy(at, "prune_btn_curve")
    _ok(at)
    assert not [c.value for c in at.caption if c.value.startswith("Takes about ")]  # the measured time replaces it
    captions = [c.value for c in at.caption if "at 40 %" in c.value]
    assert captions, [c.value for c in at.caption]
    assert "Michel et al. (2019" in " ".join(c.value for c in at.caption)


def test_page_runs_on_smollm2_and_toggle_changes_loss(smollm2):
    at = _page("smollm2-135m", "The cat chased the mouse")
    assert len(at.pills) == 30 and len(at.pills[0].options) == 9
    loss = _metric(at, "Loss")
    assert loss.delta == ""  # nothing switched off: no change shown (not a red "+0.000")
    full = models.analyze(smollm2, "The cat chased the mouse").loss
    assert loss.value == f"{full:.3f}"
    continuation = [m.value for m in at.markdown if m.value.startswith("all heads on:")]
    assert continuation and "**" in continuation[0]
    at.pills[0].unselect(0).run()
    _ok(at)
    after = models.analyze(smollm2, "The cat chased the mouse", heads_off=[("decoder", 0, 0)]).loss
    assert after != pytest.approx(full, abs=5e-4)
    assert _metric(at, "Loss").value == f"{after:.3f}"
    assert _metric(at, "Loss").delta == f"{after - full:+.3f}"
    assert _count(at).startswith("1 of 270")
    at.pills[0].select(0).run()
    assert _metric(at, "Loss").value == f"{full:.3f}" and _metric(at, "Loss").delta == ""


def test_page_on_tiny_mlm_shows_mask_fills(tiny_folder):
    folder = str(tiny_folder("bert-mlm"))
    at = _page("minilm-l6", "the cat [MASK] the mouse", custom=folder)
    p_before = _metric(at, "P(")
    assert len(at.table) == 1
    at.button(key="prune_btn_keep_one").click().run()
    _ok(at)
    assert _metric(at, "P(").value != p_before.value


def test_page_in_turkish_on_tiny_decoder(tiny_folder):
    folder = str(tiny_folder("gpt2"))
    at = _page("minilm-l6", "kedi fareyi kovaladı", custom=folder, lang="tr")
    assert at.title[0].value == "Kafa budama laboratuvarı"
    before = _metric(at, "Kayıp").value
    at.pills[1].unselect(2).run()
    _ok(at)
    assert _metric(at, "Kayıp").value != before
    assert any(c.value.startswith("Bu sunucuda yaklaşık ") for c in at.caption)
    press_heavy(at, "prune_btn_curve")
    _ok(at)
    assert any("%40'ta" in c.value for c in at.caption)


def test_turkish_numbers_on_the_pruning_page(tiny_folder):
    """Turkish writes 8,959 and 7.780,3: the page showed "Kayıp 8.959" (read as eight thousand nine hundred and
    fifty-nine) and "Şaşkınlık 7780.3"; the caption's {value:.4f} came out as 0.0000."""
    import re

    at = _page("minilm-l6", "kedi fareyi kovaladı", custom=str(tiny_folder("gpt2")), lang="tr")
    before = models.analyze(models.load(str(tiny_folder("gpt2"))), "kedi fareyi kovaladı")
    loss, ppl = _metric(at, "Kayıp"), _metric(at, "Şaşkınlık")
    assert loss.value == f"{before.loss:.3f}".replace(".", ",")
    assert re.fullmatch(r"\d{1,3}(\.\d{3})*,\d", ppl.value), ppl.value
    assert ppl.value.replace(".", "").replace(",", ".") == f"{before.perplexity:.1f}"
    at.pills[1].unselect(2).run()
    _ok(at)
    assert re.fullmatch(r"[+-]\d+,\d{3}", _metric(at, "Kayıp").delta), _metric(at, "Kayıp").delta
    change = [c.value for c in at.caption if c.value.startswith("Bir ağırlığın en büyük değişimi")]
    assert change and re.fullmatch(r"Bir ağırlığın en büyük değişimi: \d,\d{4}", change[0]), change
    # English keeps the point
    at = _page("minilm-l6", "kedi fareyi kovaladı", custom=str(tiny_folder("gpt2")), lang="en")
    assert _metric(at, "Loss").value == f"{before.loss:.3f}"


def test_speech_model_gets_a_message_not_a_traceback():
    at = _page("whisper-base", "Kedi fareyi kovaladı")
    assert any("reads audio" in i.value for i in at.info)
    assert not at.pills


def test_layer_preset_adds_and_heads_off_live_in_the_url(minilm):
    """"Layer 3 off" then "layer 5 off" leaves both off (the preset replaced the selection); the heads off are
    in the URL (?off=encoder.3.0,...), so a link or a reload reopens them; junk in it is ignored, and a
    model switch does not carry them to another model."""
    at = _page("minilm-l6", "The cat chased the mouse")
    for layer in (3, 5):
        at.selectbox(key="prune_layer_pick").set_value(layer).run()
        at.button(key="prune_btn_layer_off").click().run()
    _ok(at)
    assert _off_in_grid(at) == {(layer, h) for layer in (3, 5) for h in range(12)}
    link = at.query_params["off"]
    link = link[0] if isinstance(link, list) else link
    assert link.split(",")[:2] == ["encoder.3.0", "encoder.3.1"] and len(link.split(",")) == 24
    at.sidebar.selectbox(key="model_key").set_value("multilingual-e5-small").run()
    _ok(at)
    assert _off_in_grid(at) == set() and "off" not in at.query_params  # another model: all heads on

    again = AppTest.from_file(APP, default_timeout=300)
    again.query_params = {"model_key": "minilm-l6", "text": "The cat chased the mouse",
                          "off": link + ",encoder.99.0,decoder.1.1,x,encoder.2.-1,encoder.².1,encoder.0.①,"
                                 "encoder." + "1" * 5000 + ".0"}  # digits int() refuses crashed the page
    again.run()
    again.switch_page("views/pruning.py")
    again.run()
    _ok(again)
    assert _off_in_grid(again) == {(layer, h) for layer in (3, 5) for h in range(12)}
    assert _count(again).startswith("24 of 72")


def test_the_curve_is_computed_once_for_every_session_and_kept_on_disk(tiny_folder, monkeypatch, tmp_path):
    """Issue 29 point 5: the curve lived in each session's state, so every student computed it again; now one run
    serves every session of the process, and another process (a replica, the next start) reads it from disk."""
    from views import shared

    def forget_curves():
        for key in [k for k in shared.CACHE.sizes() if isinstance(k, tuple) and k and k[0] == "prune_curve"]:
            shared.CACHE.discard(key)

    monkeypatch.setenv("DIKKAT_AHEAD_ROOT", str(tmp_path / "ahead"))
    forget_curves()  # an earlier test's curve of the same tiny model
    folder = str(tiny_folder("gpt2"))
    at = _page("minilm-l6", "kedi fareyi kovaladı", custom=folder)
    assert not any("at 40 %" in c.value for c in at.caption)
    press_heavy(at, "prune_btn_curve")
    _ok(at)
    first = [c.value for c in at.caption if "at 40 %" in c.value]
    assert first
    other = _page("minilm-l6", "the cat chased the mouse", custom=folder)  # another student: no click
    assert [c.value for c in other.caption if "at 40 %" in c.value] == first
    assert any("Kept on disk since" in c.value for c in other.caption)
    forget_curves()
    third = _page("minilm-l6", "the cat chased the mouse", custom=folder)  # a new process: read from disk
    assert [c.value for c in third.caption if "at 40 %" in c.value] == first


@pytest.mark.parametrize("lang, note", [("en", "could not be read and is ignored"), ("tr", "okunamadı ve yok sayıldı")])
def test_a_malformed_curve_on_disk_is_ignored_with_a_note(tiny_folder, monkeypatch, tmp_path, lang, note):
    """Issue 44 point 6: a curve file computed ahead that holds another result (here induction scores under the
    curve's name) crashed the page for every student (AttributeError on ``curve.shares``); now it is treated as not
    computed: a note naming no file, the button to compute it, no error."""
    from models import ahead
    from models.experiments.induction import InductionResult
    from views import shared

    monkeypatch.setenv("DIKKAT_AHEAD_ROOT", str(tmp_path / "ahead"))
    for key in [k for k in shared.CACHE.sizes() if isinstance(k, tuple) and k and k[0] == "prune_curve"]:
        shared.CACHE.discard(key)
    folder = str(tiny_folder("gpt2"))
    loaded = models.load(folder)
    other = InductionResult(scores=np.zeros((2, 4)), loss_first=1.0, loss_second=1.0, top=[], loss_second_off=1.0,
                            loss_second_random=np.zeros(2), length=4, sequences=1, seconds=1.0)
    path = ahead.save(ahead.curve_job(folder), loaded, other)
    at = _page("minilm-l6", "kedi fareyi kovaladı", custom=folder, lang=lang)
    assert [c.value for c in at.caption if note in c.value]
    assert not any(path.stem in c.value or str(tmp_path) in c.value for c in at.caption)
    assert at.button(key="prune_btn_curve")
    press_heavy(at, "prune_btn_curve")  # computed again: replaces the file
    _ok(at)
    assert isinstance(ahead.load(ahead.curve_job(folder), loaded), pruning.PruningCurve)


def _before_after(at: AppTest) -> dict:
    """The before / after / difference figure of one head, as figure JSON."""
    figures = [json.loads(e.proto.spec) for e in at.main if type(e).__name__ == "UnknownElement"
               and e.type == "plotly_chart"]
    return next(f for f in figures if sum(d.get("type") == "heatmap" for d in f["data"]) == 3)


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_one_heads_attention_before_and_after_at_the_morpheme_level(minilm, lang):
    """Issue 32: the before / after maps merged onto morphemes by the word level's rule (keys summed, queries
    averaged by share), their difference on the same units, each morpheme's label in every panel's hover and the
    legend in the interface language; English text at the morpheme level says so and shows words."""
    from plotly_json import decode

    from models import turkish
    from views import shared

    text = "Kedi fareyi kovaladı."
    at = _page("minilm-l6", text, lang=lang)
    at.button_group(key="prune_level").set_value("morphemes").run()
    at.pills[1].unselect(2).run()  # head (1, 2) off: the last layer's maps move
    _ok(at)
    fig = _before_after(at)
    morphemes = ["[CLS]", "Kedi", "fare", "yi", "kovala", "dı", ".", "[SEP]"]
    assert fig["layout"]["xaxis"]["ticktext"] == morphemes and fig["layout"]["yaxis"]["ticktext"] == morphemes
    before = shared.get_analysis("minilm-l6", text, max_tokens=pruning.MAX_TOKENS)
    after = shared.get_analysis("minilm-l6", text, heads_off=frozenset({("encoder", 1, 2)}),
                                max_tokens=pruning.MAX_TOKENS)
    q, k = turkish.analysis_units(before, "encoder")
    layer, head = at.selectbox(key="prune_show_layer").value, at.selectbox(key="prune_show_head").value
    zb, za, zd = (decode(d["z"]) for d in fig["data"])
    np.testing.assert_allclose(zb, turkish.morpheme_attention(before.attentions["encoder"][layer, head], q, k),
                               atol=1e-6)
    np.testing.assert_allclose(za, turkish.morpheme_attention(after.attentions["encoder"][layer, head], q, k),
                               atol=1e-6)
    np.testing.assert_allclose(zd, za - zb, atol=1e-6)
    assert np.abs(zd).max() > 1e-4 and np.allclose(za.sum(axis=1), 1.0, atol=1e-5)
    acc = "yi — accusative" if lang == "en" else "yi — belirtme hâli"
    assert all(acc in json.dumps(d["customdata"], ensure_ascii=False) for d in fig["data"])
    assert all("customdata[0]" in d["hovertemplate"] for d in fig["data"])
    captions = " ".join(c.value for c in at.caption)
    assert "fareyi = fare + yi" in captions and ("accusative" if lang == "en" else "belirtme hâli") in captions
    assert ("largest change is measured on these maps" if lang == "en" else "bu haritalarda ölçülür") in captions
    at = _page("minilm-l6", "The cat chased the mouse.", lang=lang)
    at.button_group(key="prune_level").set_value("morphemes").run()
    _ok(at)
    assert ("does not read as Turkish" if lang == "en" else "Türkçe görünmüyor") in " ".join(i.value for i in at.info)
    words = ["[CLS]", "The", "cat", "chased", "the", "mouse", ".", "[SEP]"]
    assert _before_after(at)["layout"]["xaxis"]["ticktext"] == words
