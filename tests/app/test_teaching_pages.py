"""AppTest: the four teaching pages on minilm-l6 and smollm2-135m, in English and Turkish."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from models import jobs as heavy_jobs

from links import open_linked

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["views/qkv.py", "views/positions.py", "views/cost.py", "views/kvcache.py"]
STRINGS = json.loads((ROOT / "assets/i18n/teach.json").read_text(encoding="utf-8"))
TITLES = {"views/qkv.py": "qkv_title", "views/positions.py": "pos_title", "views/cost.py": "cost_title",
          "views/kvcache.py": "kv_title"}


def open_page(page: str, model: str, lang: str, text: str = "Kedi fareyi kovaladı") -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.session_state["model_key"] = model
    at.session_state["lang"] = lang
    at.session_state["text"] = text
    at.run()
    at.switch_page(page)
    at.run()
    return at


def charts(at: AppTest) -> list[dict]:
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def assert_clean(at: AppTest) -> None:
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def test_turkish_numbers():
    """Turkish writes 1,75 and 131.072: a number shown as "1.749" would read as one thousand seven hundred."""
    from viz import numbers as nb

    assert nb.num(1.749, 3, "tr") == "1,749" and nb.num(1.749, 3, "en") == "1.749"
    assert nb.integer(131072, "tr") == "131.072" and nb.integer(131072, "en") == "131,072"
    assert nb.num(1234.5, 1, "tr") == "1.234,5"
    assert nb.human_bytes(131072, "en") == "128.0 KiB" and nb.human_bytes(16 * 2**30, "tr") == "16,0 GiB"
    assert nb.human_bytes(512, "tr") == "512 B"
    assert nb.sci(8.9e-8, 1, "tr") == "8,9e-08"
    assert nb.num(0.25, 3, "en", sign=True) == "+0.250"


def test_turkish_metrics_use_decimal_commas(minilm):
    at = open_page("views/qkv.py", "minilm-l6", "tr")
    entropy = at.metric[0].value
    assert re.fullmatch(r"\d+,\d{3} nat", entropy), entropy


def test_teaching_i18n_complete():
    """Every teaching string exists in both languages, with the same placeholders."""
    for key, entry in STRINGS.items():
        assert entry.get("en") and entry.get("tr"), key
        if "\\" in entry["en"]:  # LaTeX, never formatted
            continue
        assert set(re.findall(r"\{(\w+)", entry["en"])) == set(re.findall(r"\{(\w+)", entry["tr"])), key


@pytest.mark.parametrize("lang", ["en", "tr"])
@pytest.mark.parametrize("model", ["minilm-l6", "smollm2-135m"])
@pytest.mark.parametrize("page", PAGES)
def test_page_runs(page, model, lang, minilm, smollm2):
    at = open_page(page, model, lang)
    assert_clean(at)
    assert at.title[0].value == STRINGS[TITLES[page]][lang]
    assert charts(at) or page == "views/cost.py"
    if page == "views/qkv.py":
        ok = at.success[0].value
        prefix = STRINGS["qkv_equal"][lang].split("(")[0]
        assert ok.startswith(prefix)
        diff = float(re.search(r"([0-9.,]+e[-+]\d+)", ok).group(1).replace(",", "."))
        assert diff < 1e-5
        rope_shown = any("RoPE" in s.value for s in at.subheader)
        assert rope_shown == (model == "smollm2-135m")
        gqa = [i.value for i in at.info]
        assert any("GQA" in v or "Grouped" in v for v in gqa) == (model == "smollm2-135m")


def test_qkv_page_controls(smollm2):
    """Layer/head/query selectors, the no-scaling switch and the temperature change the numbers shown."""
    at = open_page("views/qkv.py", "smollm2-135m", "en")
    at.selectbox(key="qkv_layer").set_value(5).run()
    at.selectbox(key="qkv_head").set_value(8).run()
    assert_clean(at)
    info = " ".join(i.value for i in at.info)
    assert "Query head 8 reads key/value head 2" in info
    entropy_before = at.metric[1].value
    assert at.metric[3].delta == ""  # temperature 1, scaled: the model's own row, no "+0.000" change shown
    at.select_slider(key="qkv_temperature").set_value(0.2).run()
    assert_clean(at)
    entropy_sharp = at.metric[1].value
    assert float(at.metric[3].delta) > 0  # a sharper softmax raises the top weight
    assert float(entropy_sharp.split()[0]) < float(entropy_before.split()[0])
    at.toggle(key="qkv_noscale").set_value(True).run()
    assert_clean(at)


def test_cost_page_measures_and_shows_a_stopped_run(minilm):
    at = open_page("views/cost.py", "minilm-l6", "tr")
    table = at.table[0].value
    assert list(table.iloc[:, 1]) == ["10⁶", "10¹⁰", "10¹²"]
    at.multiselect(key="cost_lengths").set_value([16, 32])
    at.number_input(key="cost_repeats").set_value(1)
    at.button(key="cost_run").click().run()
    # the measurement runs on the heavy-work pool (models/jobs.py): the page follows it and shows it once it ends
    job = heavy_jobs.pool().get("cost", at.session_state["cost_job::minilm-l6"])
    assert job.wait(600)
    at.run()
    assert_clean(at)
    frame = at.dataframe[0].value
    assert len(frame) == 4  # 2 lengths x 2 implementations
    specs = charts(at)
    assert len(specs) == 2
    names = [tr.get("name") for tr in specs[0]["data"]]
    assert STRINGS["cost_impl_sdpa"]["tr"] in names and STRINGS["cost_impl_captured"]["tr"] in names
    assert not at.warning  # finished, not stopped
    # A run stopped after two of four measurements keeps and shows those two, and says so.
    record = job.result
    record["points"] = record["points"][:2]
    record["done"] = False
    at.run()
    assert_clean(at)
    assert at.warning[0].value == STRINGS["cost_stopped"]["tr"].format(done=2, total=4)
    assert len(at.dataframe[0].value) == 2


def test_kvcache_page_calculator_llama3(minilm):
    at = open_page("views/kvcache.py", "minilm-l6", "en")
    at.selectbox(key="kv_preset").set_value("Llama 3 8B").run()
    assert_clean(at)
    values = {m.label: m.value for m in at.metric}
    assert values["Per token, with GQA"] == "128.0 KiB"
    assert values["Per token, without GQA"] == "512.0 KiB"
    assert values["131,072 tokens, with GQA"] == "16.0 GiB"
    assert values["131,072 tokens, without GQA"] == "64.0 GiB"
    assert not at.info  # Llama 3 has no sliding window: no windowed line
    at.number_input(key="kv_heads_kv").set_value(5).run()  # does not divide 32
    assert at.error and "must divide" in at.error[0].value


def test_kvcache_page_sliding_window_mistral_and_gemma(minilm):
    """Mistral 7B keeps 4096 tokens per layer: 128K tokens need 512 MiB, not 16 GiB; Gemma 3's window is
    filled from its config (5 of 6 layers slide over 512 tokens)."""
    at = open_page("views/kvcache.py", "minilm-l6", "en")
    at.selectbox(key="kv_preset").set_value("Mistral 7B").run()
    assert_clean(at)
    assert at.number_input(key="kv_window").value == 4096 and at.number_input(key="kv_window_layers").value == 32
    line = at.info[0].value
    assert "**512.0 MiB** instead of 16.0 GiB" in line and "4,096 tokens on 32 of 32 layers" in line
    at.number_input(key="kv_window").set_value(0).run()
    assert not at.info
    at = open_page("views/kvcache.py", "gemma3-270m", "tr")
    assert_clean(at)
    assert (at.number_input(key="kv_window").value, at.number_input(key="kv_window_layers").value) == (512, 15)
    assert "18 katmanın 15 tanesinde 512 token" in at.info[0].value


def test_kvcache_page_generation(smollm2):
    at = open_page("views/kvcache.py", "smollm2-135m", "tr")
    at.slider(key="kv_new_tokens").set_value(6)
    at.button(key="kv_run").click().run()
    assert_clean(at)
    assert at.success and at.success[0].value == STRINGS["kv_same_tokens"]["tr"].format(n=6)
    labels = [m.label for m in at.metric]
    assert STRINGS["kv_with_cache"]["tr"] in labels and STRINGS["kv_without_cache"]["tr"] in labels


def test_positions_page_rope_check_and_word_order(smollm2):
    at = open_page("views/positions.py", "smollm2-135m", "en")
    values = {m.label: m.value for m in at.metric}
    assert float(values["difference"]) < 1e-4
    assert abs(float(values["q·k at (2, 5)"]) - float(values["q·k at (9, 12)"])) < 1e-4
    at.text_input(key="pos_text_b").set_value("Köpek fareyi kovaladı").run()
    assert at.error and "same words" in at.error[0].value


@pytest.mark.parametrize("page", ["views/qkv.py", "views/positions.py"])
def test_pages_with_empty_text(page, minilm):
    at = open_page(page, "minilm-l6", "en", text="   ")
    assert_clean(at)
    assert any(STRINGS["teach_need_text"]["en"] == i.value for i in at.info)


def test_qkv_page_long_text_C01(minilm):
    """C01: ~512 tokens: the page stays light (at most 48 key strips, says so) and cuts with a notice."""
    text = " ".join(["The cat chased the mouse across the garden and into the old barn."] * 60)
    at = open_page("views/qkv.py", "minilm-l6", "en", text=text)
    assert_clean(at)
    assert at.warning and "cut" in at.warning[0].value  # truncation notice from analysis_ui's wording
    strips = charts(at)[0]
    assert len(strips["layout"]["yaxis"]["ticktext"]) == 1 + 48  # the query and the 48 strongest keys
    assert any("of 512 keys drawn" in c.value for c in at.caption)
    pos = open_page("views/positions.py", "minilm-l6", "en", text=text)
    assert_clean(pos)


def test_qkv_page_fallback_model_says_why(tiny_folder):
    """A model on the fallback capture path gets a clear message, not a traceback (C09 kind)."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.session_state["lang"] = "en"
    at.session_state["text"] = "kedi fareyi kovaladı"
    at.session_state["model_custom"] = str(tiny_folder("gpt_neo"))
    at.run()
    at.switch_page("views/qkv.py")
    at.run()
    assert not at.exception
    assert at.error and "fallback capture path" in at.error[0].value
    for page in ("views/positions.py", "views/cost.py", "views/kvcache.py"):
        at.switch_page(page)
        at.run()
        assert not at.exception, (page, [e.message for e in at.exception])


def test_switching_model_keeps_selectors_valid(minilm, smollm2):
    """Layer 25 / head 8 chosen on smollm2 (30 x 9) must not break minilm-l6 (6 x 12) afterwards."""
    at = open_page("views/qkv.py", "smollm2-135m", "en")
    at.selectbox(key="qkv_layer").set_value(25).run()
    at.selectbox(key="qkv_query").set_value(1).run()
    at.selectbox(key="model_key").set_value("minilm-l6").run()
    assert_clean(at)
    assert len(at.selectbox(key="qkv_layer").options) == 6
    assert at.selectbox(key="qkv_layer").value == 0
    assert at.success


def test_kvcache_calculator_keeps_edited_values_when_the_language_changes(smollm2):
    """A teacher edits the calculator (48 layers, 2 bytes) on the loaded model's configuration and switches
    the interface language: the edits stay. (The loaded model's option used its translated label as its
    value; after the switch it was no longer an option, and the calculator was refilled from the model.)"""
    at = open_page("views/kvcache.py", "smollm2-135m", "en")
    at.number_input(key="kv_layers").set_value(48).run()
    at.selectbox(key="kv_bytes").set_value(2).run()
    at.radio(key="lang").set_value("tr").run()
    assert_clean(at)
    assert at.number_input(key="kv_layers").value == 48
    assert at.selectbox(key="kv_bytes").value == 2
    assert at.selectbox(key="kv_preset").value == "loaded:smollm2-135m"
    # another model still starts from its own configuration
    at.selectbox(key="model_key").set_value("minilm-l6").run()
    assert at.number_input(key="kv_layers").value == 6


def test_turkish_temperature_slider_uses_a_decimal_comma(smollm2):
    """The temperature slider showed 1.00, 0.10 and 5.00 in the Turkish interface (st.slider formats with
    sprintf, always with a point); its labels are now written the interface language's way."""
    at = open_page("views/qkv.py", "smollm2-135m", "tr")
    assert_clean(at)
    slider = at.select_slider(key="qkv_temperature")
    assert slider.value == 1.0
    assert list(slider.options)[:2] == ["0,1", "0,2"] and "1,5" in slider.options
    at = open_page("views/qkv.py", "smollm2-135m", "en")
    assert "1.5" in at.select_slider(key="qkv_temperature").options


def _linked(page: str, model: str, query: dict) -> AppTest:
    """``page`` opened from a link carrying ``query`` (the sidebar's model and sentence as usual)."""
    at = open_linked(page, model, query, "Kedi fareyi kovaladı")
    assert_clean(at)
    return at


def test_a_link_reopens_each_teaching_page(smollm2):
    """Issue 13: every page's state in the URL. Each page's widgets come back from a link, a change is written
    back, and values out of range fall back to the page's defaults."""
    at = _linked("views/qkv.py", "smollm2-135m", {"qkv_layer": "7", "qkv_head": "4", "qkv_query": "2",
                                                  "qkv_noscale": "1", "qkv_temperature": "2.5"})
    assert (at.selectbox(key="qkv_layer").value, at.selectbox(key="qkv_head").value) == (7, 4)
    assert at.selectbox(key="qkv_query").value == 2 and at.toggle(key="qkv_noscale").value
    assert at.select_slider(key="qkv_temperature").value == 2.5
    at.selectbox(key="qkv_head").set_value(8).run()
    assert at.query_params["qkv_head"] == "8" and at.query_params["qkv_layer"] == "7"
    at = _linked("views/qkv.py", "smollm2-135m", {"qkv_layer": "99", "qkv_head": "-1", "qkv_temperature": "7"})
    assert (at.selectbox(key="qkv_layer").value, at.selectbox(key="qkv_head").value) == (0, 0)
    assert at.select_slider(key="qkv_temperature").value == 1.0

    at = _linked("views/positions.py", "smollm2-135m", {"pos_m": "3", "pos_n": "11", "pos_t": "100",
                                                        "pos_text_a": "kovaladı Fareyi kedi", "pos_wo_head": "2"})
    assert [at.number_input(key=k).value for k in ("pos_m", "pos_n", "pos_t")] == [3, 11, 100]
    assert at.text_input(key="pos_text_a").value == "kovaladı Fareyi kedi" \
        and at.selectbox(key="pos_wo_head").value == 2
    at.selectbox(key="pos_wo_head").set_value("mean").run()  # the one picker's mean-over-heads option
    assert at.query_params.get("pos_wo_head") is None  # the default is the mean: not written
    at = _linked("views/positions.py", "smollm2-135m", {"pos_wo_layer": "29", "pos_wo_head": "9"})
    assert (at.selectbox(key="pos_wo_layer").value, at.selectbox(key="pos_wo_head").value) == (29, "mean")

    at = _linked("views/cost.py", "smollm2-135m", {"cost_lengths": "16,64,junk", "cost_repeats": "9"})
    assert at.multiselect(key="cost_lengths").value == [16, 64] and at.number_input(key="cost_repeats").value == 3

    at = _linked("views/kvcache.py", "smollm2-135m", {"kv_preset": "loaded:smollm2-135m", "kv_layers": "48",
                                                      "kv_bytes": "4", "kv_tokens": "2048", "kv_new_tokens": "8"})
    assert at.number_input(key="kv_layers").value == 48 and at.selectbox(key="kv_bytes").value == 4
    assert at.number_input(key="kv_tokens").value == 2048 and at.slider(key="kv_new_tokens").value == 8
    assert at.number_input(key="kv_heads_q").value == 9  # not in the link: the preset's own
    at.number_input(key="kv_head_dim").set_value(128).run()
    assert at.query_params["kv_head_dim"] == "128" and at.query_params["kv_preset"] == "loaded:smollm2-135m"


def test_a_link_keeps_an_emptied_choice_and_numbers_written_another_way(smollm2):
    """An emptied multiselect stays empty when its link is reopened (it came back as the defaults), and a
    hand-written "5" picks the option 5.0."""
    at = _linked("views/cost.py", "smollm2-135m", {"cost_lengths": ""})
    assert at.multiselect(key="cost_lengths").value == []
    at = _linked("views/qkv.py", "smollm2-135m", {"qkv_temperature": "5"})
    assert at.select_slider(key="qkv_temperature").value == 5.0
