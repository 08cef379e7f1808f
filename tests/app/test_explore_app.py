"""Streamlit AppTest of app.py and the Explore page on the bundled models (minilm-l6, smollm2-135m)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest
from plotly_json import decode

import models

APP = str(Path(__file__).resolve().parents[2] / "app.py")
SENTENCE = "Kedi fareyi kovaladı"
VIEWS = ["head", "model", "heatmap", "summary"]
OPTIONS = ["hide_special", "hide_first", "words", "avg", "rollout"]


def run_app(state: dict | None = None, query: dict | None = None, sentence: str | None = SENTENCE) -> AppTest:
    """The app after one run; the sentence is SENTENCE unless ``state``/``query`` set one or ``sentence`` is
    None (the language's default sentence)."""
    at = AppTest.from_file(APP, default_timeout=300)
    if sentence is not None and "text" not in (state or {}) and "text" not in (query or {}):
        at.session_state["text"] = sentence
    for k, v in (state or {}).items():
        at.session_state[k] = v
    if query:
        at.query_params = dict(query)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def set_option(at: AppTest, option: str, on: bool) -> AppTest:
    """Tick or untick an option of the Options menu and run: ``words`` is the level control's word level (tokens
    when off), the others are checkboxes."""
    if option == "words":
        at.session_state["level"] = "words" if on else "tokens"
        return at.run()
    box = at.checkbox(key=option)
    return (box.check() if on else box.uncheck()).run()


def unknown(at: AppTest, kind: str) -> list:
    return [e for e in at.main if type(e).__name__ == "UnknownElement" and e.type == kind]


def head_view_data(at: AppTest) -> dict:
    frames = unknown(at, "iframe")
    assert frames, "no head view iframe on the page"
    doc = frames[0].proto.srcdoc
    m = re.search(r'id="hv-data">(.*?)</script>', doc, re.S)
    return json.loads(m.group(1).replace("<\\/", "</"))


def figures(at: AppTest) -> list[dict]:
    return [json.loads(e.proto.spec) for e in unknown(at, "plotly_chart")]


def heatmap_figure(at: AppTest) -> dict:
    """The head heatmap (one heatmap trace; the model view has a heatmap and a click-target scatter)."""
    for fig in figures(at):
        if len(fig["data"]) == 1 and fig["data"][0]["type"] == "heatmap":
            return fig
    raise AssertionError("no head heatmap on the page")


def non_special(labels: list[str]) -> list[str]:
    return [x for x in labels if not (x.startswith("[") and x.endswith("]")) and x not in ("<s>", "</s>")]


def test_first_screen_shows_a_sentence_the_default_model_reads(monkeypatch):
    """English: minilm-l6 (English only) on an English sentence, whole words; it showed the Turkish sentence
    as "Ked·i·fare·yi·ko·val·ad·ı". Turkish: multilingual-e5-small on the Turkish sentence. An untouched
    default sentence follows a language switch; a typed sentence does not, nor the model (issue 50)."""
    at = run_app(sentence=None)
    assert at.session_state["model_key"] == "minilm-l6"
    assert at.sidebar.text_area(key="text").value == "The cat chased the mouse."
    assert head_view_data(at)["q"] == ["[CLS]", "The", "cat", "chased", "the", "mouse", ".", "[SEP]"]  # as typed
    assert "text" not in at.query_params  # the default is not written into the link
    at.sidebar.radio(key="lang").set_value("tr").run()
    assert at.sidebar.text_area(key="text").value == SENTENCE
    assert at.session_state["model_key"] == "minilm-l6"
    at = run_app({"lang": "tr"}, sentence=None)
    assert at.sidebar.text_area(key="text").value == SENTENCE
    at = run_app(sentence="my own words")
    at.sidebar.radio(key="lang").set_value("tr").run()
    assert at.sidebar.text_area(key="text").value == "my own words"


def test_app_runs_on_default_model_with_the_sentence_own_characters():
    """minilm-l6, "Kedi fareyi kovaladı", head view; the labels rejoin to the input, "ı" not "Ä±"."""
    at = run_app()
    assert at.session_state["model_key"] == "minilm-l6"
    assert at.sidebar.text_area[0].value == SENTENCE
    data = head_view_data(at)
    assert data["q"] == ["[CLS]", "Ked", "i", "fare", "yi", "ko", "val", "ad", "ı", "[SEP]"]
    assert "".join(non_special(data["q"])) == SENTENCE.replace(" ", "")
    srcdoc = unknown(at, "iframe")[0].proto.srcdoc
    assert "Ä±" not in srcdoc and "ı" in srcdoc
    assert len(data["heads"]) == 12 and len(data["w"]) == 12
    # device shown in the sidebar
    assert any("cpu" in c.value for c in at.sidebar.caption)


def test_head_view_needs_no_network_C05():
    """C05: the head view's document carries its script inline; nothing is loaded from outside."""
    at = run_app()
    doc = unknown(at, "iframe")[0].proto.srcdoc
    assert "<script src" not in doc and "<link" not in doc and "@import" not in doc
    assert "https://" not in doc
    assert "function draw()" in doc  # the script from assets/headview.js is inlined


@pytest.mark.parametrize("view", VIEWS)
def test_each_view_on_default_model(view):
    at = run_app({"view": view})
    if view == "head":
        assert head_view_data(at)["q"][1] == "Ked"
    elif view in ("model", "heatmap"):
        figs = figures(at)
        assert figs, "no figure drawn"
        hm = heatmap_figure(at)
        assert hm["layout"]["xaxis"]["ticktext"][-2] == "ı"
    else:
        df = at.dataframe[0].value
        assert len(df) == 6 * 12
        assert df.iloc[:, 2].between(0, np.log(10) + 1e-4).all()  # entropy in [0, ln n]


def test_smollm2_sentence_every_option_and_view_keep_running():
    """Switch to smollm2-135m, change the sentence, toggle each option and choose each view: no exception,
    and every shown label is the sentence's own characters."""
    at = run_app({"model_key": "smollm2-135m"})
    data = head_view_data(at)
    assert "".join(data["q"]) == SENTENCE.replace(" ", "")  # byte-level BPE pieces rejoin, "ı" not "Ä±"
    assert len(data["heads"]) == 9
    text = "Fareyi kedi kovaladı."
    at.sidebar.text_area[0].input(text).run()
    assert not at.exception
    data = head_view_data(at)
    assert "".join(data["q"]) == text.replace(" ", "")
    for option in OPTIONS:
        set_option(at, option, True)
        assert not at.exception, (option, [e.value for e in at.exception])
        for view in VIEWS:
            at.session_state["view"] = view
            at.run()
            assert not at.exception, (option, view, [e.value for e in at.exception])
            if view == "head":
                labels = head_view_data(at)["q"]
            elif view in ("model", "heatmap"):
                labels = heatmap_figure(at)["layout"]["yaxis"]["ticktext"]
            else:
                assert len(at.dataframe[0].value) == 30 * 9
                continue
            if option == "words":
                assert labels == ["Fareyi", "kedi", "kovaladı", "."]
            else:
                for label in labels:
                    assert label in text, (option, view, label)
        set_option(at, option, False)
        at.session_state["view"] = "head"
    assert not at.exception


def test_hide_first_token_renormalises_and_says_so_C03(smollm2):
    """C03: on a Llama-style decoder the first token is hidden, every row is renormalised and the figure
    says "renormalised"."""
    import models

    at = run_app({"model_key": "smollm2-135m", "hide_first": True, "view": "heatmap", "layer": 5, "head": 2})
    fig = heatmap_figure(at)
    assert "renormalised" in fig["layout"]["title"]["text"]
    z = decode(fig["data"][0]["z"]).astype(np.float64)
    a = models.analyze(smollm2, SENTENCE)
    raw = a.attentions["decoder"][5, 2].astype(np.float64)
    assert raw[1:, 0].mean() > 0.3  # the first token is a sink here: most rows give it a large share
    expected = raw[1:, 1:] / raw[1:, 1:].sum(axis=1, keepdims=True)
    np.testing.assert_allclose(z, expected, atol=1e-5)
    assert np.allclose(z.sum(axis=1), 1.0, atol=1e-5)
    assert np.allclose(np.triu(z, 1), 0.0)  # still causal
    assert fig["layout"]["yaxis"]["ticktext"] == [x.label for x in a.tokens][1:]
    at.session_state["view"] = "head"
    at.run()
    data = head_view_data(at)
    assert "renormalised" in data["title"]
    assert any("renormalised" in c.value for c in at.caption)


def test_word_level_shows_the_three_words_and_the_rule_C04():
    """C04: "kovaladı" is four pieces; the word-level view shows the sentence's three words and states
    how the pieces were combined."""
    at = run_app({"words": True, "hide_special": True, "view": "heatmap"})
    fig = heatmap_figure(at)
    assert fig["layout"]["xaxis"]["ticktext"] == ["Kedi", "fareyi", "kovaladı"]
    assert fig["layout"]["yaxis"]["ticktext"] == ["Kedi", "fareyi", "kovaladı"]
    z = decode(fig["data"][0]["z"]).astype(np.float64)
    assert np.allclose(z.sum(axis=1), 1.0, atol=1e-4)
    rule = " ".join(c.value for c in at.caption)
    assert "summed over a word's key pieces" in rule and "averaged over its query pieces" in rule


def test_long_input_keeps_the_page_usable_and_says_so_C01():
    """C01: ~600 tokens on minilm-l6 (limit 512): cut with a notice, the model view is pooled to at most
    64x64 cells per map and says so, the head view draws a window and says so."""
    text = " ".join(["The cat chased the mouse across the old wooden floor of the kitchen."] * 45)
    at = run_app({"text": text, "view": "model"})
    warnings = " ".join(w.value for w in at.warning)
    assert "cut" in warnings  # truncation notice, not an error
    assert "64×64" in warnings  # model view reduced, and says how
    spec = unknown(at, "plotly_chart")[0].proto
    assert spec.ByteSize() < 1_500_000
    mosaic = decode(json.loads(spec.spec)["data"][0]["z"])
    assert mosaic.dtype == np.uint8 and mosaic.shape[0] <= 6 * (64 + 8)
    at.session_state["view"] = "head"
    at.run()
    assert not at.exception
    data = head_view_data(at)
    assert len(data["q"]) == 48
    assert "window" in " ".join(w.value for w in at.warning)


def test_state_comes_from_the_url_query_string():
    """A shared link opens the same model, sentence, view, layer, head and options."""
    at = run_app(query={"view": "heatmap", "layer": "3", "head": "5", "words": "1", "text": "Fareyi kedi kovaladı",
                        "lang": "tr", "model_key": "minilm-l6"})
    assert at.session_state["layer"] == 3 and at.session_state["head"] == 5
    assert at.title[0].value == "Dikkati keşfet"
    fig = heatmap_figure(at)
    assert "katman 3" in fig["layout"]["title"]["text"] and "kafa 5" in fig["layout"]["title"]["text"]
    assert fig["layout"]["xaxis"]["ticktext"] == ["[CLS]", "Fareyi", "kedi", "kovaladı", "[SEP]"]


def test_sentence_pair_segments():
    """A sentence pair: the head view knows which tokens are A and which B (for the A→B filters)."""
    at = run_app({"pair": "The cat chased the mouse."})
    data = head_view_data(at)
    assert data["pair"] is True
    n_a = data["q"].index("[SEP]") + 1
    assert data["qseg"][:n_a] == [0] * n_a and data["qseg"][n_a:] == [1] * (len(data["q"]) - n_a)


def test_exports_C08():
    """C08: each figure has its camera button (PNG or SVG), the matrix as CSV and all attentions as NPZ
    are one click each."""
    at = run_app({"view": "heatmap"})
    config = json.loads(unknown(at, "plotly_chart")[0].proto.config)
    assert config["toImageButtonOptions"]["format"] == "png"
    labels = [b.proto.label for b in at.get("download_button")]
    assert any("CSV" in x for x in labels) and any("NPZ" in x for x in labels)
    at.session_state["img_fmt"] = "SVG"
    at.run()
    config = json.loads(unknown(at, "plotly_chart")[0].proto.config)
    assert config["toImageButtonOptions"]["format"] == "svg"
    at.session_state["view"] = "head"
    at.run()
    labels = [b.proto.label for b in at.get("download_button")]
    assert any("SVG" in x for x in labels)
    doc = unknown(at, "iframe")[0].proto.srcdoc
    assert 'id="hv-svg-dl"' in doc or "hv-svg-dl" in doc


def test_turkish_interface_defaults_to_the_multilingual_model():
    """Issue 7: a Turkish interface starts on multilingual-e5-small (installed by make test). Issue 50: switching
    the language never switches the model (it swapped minilm-l6 for multilingual-e5-small, an 18.5 s load in the
    middle of a lesson), and the link then names the model kept."""
    at = run_app({"lang": "tr"})
    assert at.session_state["model_key"] == "multilingual-e5-small"
    at = run_app()
    assert at.session_state["model_key"] == "minilm-l6"
    at.radio(key="lang").set_value("tr").run()
    assert not at.exception and at.session_state["model_key"] == "minilm-l6"
    assert at.query_params["model_key"] in ("minilm-l6", ["minilm-l6"])  # not the Turkish default: in the link
    at.selectbox(key="model_key").set_value("smollm2-135m").run()
    at.radio(key="lang").set_value("en").run()
    assert at.session_state["model_key"] == "smollm2-135m"


def test_url_names_the_model_whenever_it_is_not_the_language_default():
    """A Turkish-interface link made on minilm-l6 must reopen minilm-l6, not the Turkish default."""
    at = run_app({"lang": "tr"})
    assert "model_key" not in at.query_params  # multilingual-e5-small is the Turkish default
    at.selectbox(key="model_key").set_value("minilm-l6").run()
    assert at.query_params["model_key"] in ("minilm-l6", ["minilm-l6"])


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_engine_errors_speak_the_interface_language(lang):
    """An unknown model in the Turkish interface gets a Turkish headline chosen by the exception's class,
    followed by the engine's message naming the input; in English the engine's message alone."""
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["lang"] = lang
    at.session_state["model_custom"] = "/no/such/folder-dikkat"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    message = at.error[0].value
    assert "/no/such/folder-dikkat" in message
    turkish = "ne katalogda, ne bir klasör"
    assert (turkish in message) == (lang == "tr"), message


def test_error_text_falls_back_to_the_nearest_translated_class():
    import models
    from views import shared

    class Odd(models.InvalidMaskError):
        pass

    with pytest.MonkeyPatch.context() as mp:
        for module in (shared.strings, shared.output):
            mp.setattr(module, "lang", lambda: "tr")
        assert shared.error_text(Odd("w < 1")).startswith("**Bu maske uygulanamıyor.**")
        assert shared.error_text(Odd("w < 1")).endswith("w \\< 1")  # the engine's text, shown as text
        assert shared.error_text(models.DikkatError("x")).startswith("**Bu işlem yapılamadı.**")


def test_model_picker_describes_models_in_the_interface_language():
    """Languages, title, family and licence of the chosen catalog entry follow the interface language (the
    Gemma terms are named as not an open-source licence in both). The picker's own labels stay the same in
    both languages (see test_browser: a label that changed would reset the model)."""
    at = run_app({"lang": "tr", "model_key": "gemma3-270m"})
    caption = " ".join(c.value for c in at.sidebar.caption)
    assert "Gemma Kullanım Koşulları (açık kaynak lisansı değil)" in caption
    assert "Gemma Terms of Use" not in caption
    assert "kod çözücü" in caption and "Türkçe dahil çok dilli" in caption
    at.radio(key="lang").set_value("en").run()
    caption = " ".join(c.value for c in at.sidebar.caption)
    assert "Gemma Terms of Use (not an open-source licence)" in caption


@pytest.mark.parametrize("lang, separators", [("en", ".,"), ("tr", ",.")])
def test_figures_write_numbers_the_interface_languages_way(lang, separators):
    """Plotly formats ticks, hover and cell text with layout.separators: Turkish 0,25 and 131.072."""
    at = run_app({"lang": lang, "view": "heatmap"})
    specs = [json.loads(e.proto.spec) for e in unknown(at, "plotly_chart")]
    assert specs and all(s["layout"]["separators"] == separators for s in specs)


def test_summary_table_writes_decimals_the_interface_languages_way():
    """Turkish: the head summary's numbers are shown as 1,350 (a Styler's display values), English with a
    %.3f number format; in both the column itself stays numeric."""
    import pyarrow as pa

    at = run_app({"lang": "tr", "view": "summary"})
    proto = at.dataframe[0].proto
    shown = pa.ipc.open_stream(proto.arrow_data.styler.display_values).read_all().to_pandas()
    data = at.dataframe[0].value
    entropy = [c for c in data.columns if c.startswith("entropi")][0]
    assert data[entropy].dtype.kind == "f"
    assert shown[entropy][0] == f"{data[entropy][0]:.3f}".replace(".", ",")
    at = run_app({"lang": "en", "view": "summary"})
    config = json.loads(at.dataframe[0].proto.columns)
    assert any(v.get("type_config", {}).get("format") == "%.3f" for v in config.values()), config


def test_long_input_on_demand_every_view_and_option_C01():
    """~1,000 tokens on smollm2-135m (its own limit is 8,192; nothing is cut): the analysis keeps no weights
    (computed on demand); every view and option runs, the model view draws the pooled overview and says so,
    the heatmap is pooled with a full-resolution window whose numbers are the engine's exact weights, the
    head view draws a window of 48 tokens, the summary has a row per head."""
    import models

    text = " ".join(["The cat chased the mouse across the old wooden floor of the kitchen."] * 70)
    at = run_app({"model_key": "smollm2-135m", "text": text, "view": "model", "layer": 3, "head": 2})
    warnings = " ".join(w.value for w in at.warning)
    assert "were cut" not in warnings and "overview, pooled to 33×33" in warnings  # 270 maps in the mosaic budget
    assert "computed exactly when you open it" in " ".join(i.value for i in at.info)
    loaded = models.load("smollm2-135m")
    a = models.analyze(loaded, text)
    assert not a.kept and len(a.tokens) > 900
    zoom = [f for f in figures(at) if f["layout"]["title"]["text"].endswith("window from query 0, key 0")]
    assert zoom, [f["layout"]["title"]["text"] for f in figures(at)]
    np.testing.assert_allclose(decode(zoom[0]["data"][0]["z"]), a.attentions["decoder"][3, 2, :96, :96], atol=1e-7)
    for option in ["hide_first", "words", "avg", "rollout"]:
        set_option(at, option, True)
        for view in VIEWS:
            at.session_state["view"] = view
            at.run()
            assert not at.exception, (option, view, [e.value for e in at.exception])
            if view == "head":
                assert len(head_view_data(at)["q"]) <= 48
            if view == "summary":
                assert len(at.dataframe[0].value) == 30 * 9
        if option == "rollout":
            assert "rollout" in " ".join(w.value for w in at.warning).lower()
        set_option(at, option, False)


def test_explore_and_pruning_share_one_analysis_in_the_byte_bounded_cache():
    """Issue 10: an analysis is stored once for all pages (the pruning page's token limit does not cut this
    text, so it asks for the same analysis); the cache measures what each entry holds."""
    from views import shared

    shared.CACHE.clear()
    at = run_app({"model_key": "smollm2-135m", "text": "Kedi fareyi kovaladı", "lang": "en"})
    at.switch_page("views/pruning.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    analyses = {k: size for k, size in shared.CACHE.sizes().items() if k[0][1] == "_analysis"}
    assert len(analyses) == 1, list(analyses)
    (size,) = analyses.values()
    n = 10  # about ten tokens: held weights 30·9·n²·4 B plus tokens and predictions, far below a MiB
    assert 30 * 9 * n * n * 4 / 2 < size < 2 ** 20


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_hybrid_model_shows_its_attention_blocks(tmp_path_factory, lang):
    """A Jamba folder (attention only in block 4 of 8): one attention layer, the page says which block it
    is, and the model view labels the layer with its block."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import archsweep

    folder = tmp_path_factory.mktemp("jamba") / "jamba"
    archsweep.build("jamba", folder)
    at = run_app({"lang": lang, "model_custom": str(folder), "view": "model"}, {"text": "the cat chased the mouse"})
    captions = " ".join(c.value for c in at.caption)
    assert ("blocks 4" in captions) if lang == "en" else ("4 numaralı" in captions), captions
    grid = next(f for f in figures(at) if f["data"][0]["type"] == "heatmap")
    assert "0 (4)" in json.dumps(grid["layout"])


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_attention_sink_is_a_column_of_the_heatmap(tmp_path_factory, lang):
    """GPT-OSS (a learned sink per head): the heatmap gets a last "sink" column equal to 1 - each row's
    weight on the tokens, so every drawn row sums to 1, and a caption says what it is."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import archsweep

    folder = tmp_path_factory.mktemp("gpt_oss") / "gpt_oss"
    archsweep.build("gpt_oss", folder)
    at = run_app({"lang": lang, "model_custom": str(folder), "view": "heatmap", "layer": "1", "head": "2"},
                 {"text": "the cat chased the mouse"})
    assert not at.exception
    captions = " ".join(c.value for c in at.caption)
    assert ("attention sink" in captions) if lang == "en" else ("dikkat yutağı" in captions), captions
    fig = next(f for f in figures(at) if f["data"][0]["type"] == "heatmap")
    z = decode(fig["data"][0]["z"]).astype(np.float64)
    a = models.analyze(models.load(str(folder)), "the cat chased the mouse")
    weights = a.attentions["decoder"][1, 2]
    share = a.sink_share("decoder", 1, 2)
    assert share.min() > 0.01  # the sink takes a visible share of every row
    np.testing.assert_allclose(z[:, -1], share, atol=1e-6)
    np.testing.assert_allclose(z[:, :-1], weights, atol=1e-6)
    np.testing.assert_allclose(z.sum(1), 1, atol=1e-5)
    assert ("⟂ sink" if lang == "en" else "⟂ yutak") in json.dumps(fig, ensure_ascii=False)


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_a_stack_that_is_not_shown_says_so(tmp_path_factory, lang):
    """Pegasus-X's encoder returns local/global dicts, not maps: the page warns which stack is missing and
    why, in the interface language, instead of leaving it out silently."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import archsweep

    folder = tmp_path_factory.mktemp("pegasus_x") / "pegasus_x"
    archsweep.build("pegasus_x", folder)
    at = run_app({"lang": lang, "model_custom": str(folder)}, {"text": "the cat chased the mouse"})
    assert not at.exception
    warnings = " ".join(w.value for w in at.warning)
    head = ("This model's encoder self-attention is not shown." if lang == "en"
            else "Bu modelin kodlayıcı öz-dikkati gösterilmiyor.")
    assert head in warnings and "dict" in warnings, warnings


def test_sidebar_does_not_describe_the_list_model_while_a_folder_model_is_used(tiny_folder):
    """Issue 13: with a folder model in use the sidebar still described minilm-l6 (title, licence, heads)."""
    folder = str(tiny_folder("bert"))
    at = run_app(state={"model_key": "minilm-l6", "model_custom": folder})
    captions = " ".join(c.value for c in at.sidebar.caption)
    assert "all-MiniLM-L6-v2" not in captions and "minilm-l6 is not in use" in captions
    at = run_app(state={"model_key": "minilm-l6"})
    assert "all-MiniLM-L6-v2" in " ".join(c.value for c in at.sidebar.caption)


def test_a_long_text_gets_one_notice_that_says_all():
    """Issue 33: a text longer than minilm-l6 reads drew three notices one above the other (what was cut, the
    head view's window, ...). Now one notice says what was cut, by whose limit, and which window is drawn."""
    text = " ".join(["The cat chased the mouse across the old wooden floor of the kitchen."] * 45)  # > 512 tokens
    at = run_app({"model_key": "minilm-l6", "text": text})
    notices = [e.value for e in list(at.warning) + list(at.info)]
    long_ones = [n for n in notices if "tokens were cut" in n or "draws tokens" in n or "not kept in memory" in n]
    assert len(long_ones) == 1, notices
    assert "longer than this model reads" in long_ones[0] and "limit 512 tokens" in long_ones[0]
    assert "the head view draws tokens 0–47 only" in long_ones[0]


def test_the_masks_page_does_not_blame_the_model_for_its_own_limit():
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["model_key"] = "minilm-l6"
    at.session_state["text"] = " ".join(["The cat chased the mouse."] * 8)  # 50 tokens: above the page's 24
    at.run()
    at.switch_page("views/masks.py").run()
    assert not at.exception, [e.value for e in at.exception]
    warnings = [w.value for w in at.warning]
    assert any(w.startswith("This page draws at most 24 tokens") for w in warnings), warnings
    assert not any("longer than this model reads" in w for w in warnings), warnings


def test_plotlys_own_words_are_turkish_in_turkish():
    """Issue 33: plotly's mode bar ("Download plot as a PNG", "Zoom", "Reset axes") was English inside the Turkish
    interface. Each chart's config carries the Turkish dictionary inline (no locale script is fetched)."""
    configs = {}
    for lang in ("en", "tr"):
        at = run_app({"lang": lang, "view": "heatmap"})
        configs[lang] = [json.loads(el.proto.config) for el in at.get("plotly_chart")]
    assert configs["tr"] and all(c["locale"] == "tr" for c in configs["tr"])
    words = configs["tr"][0]["locales"]["tr"]["dictionary"]
    assert words["Download plot as a PNG"] == "Grafiği PNG olarak indir" and words["Reset axes"] == "Eksenleri sıfırla"
    assert configs["en"] and not any("locale" in c for c in configs["en"])
    assert configs["tr"][0]["toImageButtonOptions"]["filename"].startswith("dikkat_")  # the page's own config kept
