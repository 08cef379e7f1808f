"""AppTest of the Masks page: every mask kind on minilm-l6 and smollm2-135m, BERT vs GPT, the
encoder-decoder view on tiny Marian/T5/BART folders, the offline hub message, and the GQA section."""

from __future__ import annotations

import json

from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest
from plotly_json import decode as _decode, shown

import models
from links import open_linked

APP = str(Path(__file__).resolve().parents[2] / "app.py")
PAGE = "views/masks.py"
TEXT = "The cat chased the mouse"


def _figures(at) -> dict[str, dict]:
    """key of each st.plotly_chart -> figure JSON."""
    out = {}
    for el in at.get("plotly_chart"):
        spec = json.loads(el.proto.spec)
        out[_chart_key(el)] = spec
    return out


def _chart_key(el) -> str:
    # The element id ends with the user key for keyed widgets/elements.
    ident = el.proto.id
    marker = "masks_"
    return ident[ident.index(marker):] if marker in ident else ident


def _app(model: str, section: str = "compare", **state) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=240)
    at.session_state["model_key"] = model
    at.session_state["text"] = TEXT
    at.session_state["lang"] = state.pop("lang", "en")
    if "model_custom" in state:  # sidebar widgets take session_state values before their first run
        at.session_state["model_custom"] = state.pop("model_custom")
    at.run()
    at.switch_page(PAGE)
    at.session_state["masks_section"] = section
    for key, value in state.items():
        at.session_state[key] = value
    at.run()
    return at


def _clean(at) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def _heat(fig) -> np.ndarray:
    return _decode(fig["data"][0]["z"]).astype(float)


@pytest.mark.parametrize("model", ["minilm-l6", "smollm2-135m"])
@pytest.mark.parametrize("kinds", [["bidirectional", "causal", "sliding_window", "strided"],
                                   ["custom", "causal"]])
def test_mask_page_every_kind(minilm, smollm2, model, kinds):
    """Every mask kind runs on the encoder and the decoder; each panel's mask matrix is the right pattern
    and the custom "previous token" preset's first row is drawn as 'no key allowed'."""
    at = _app(model, masks_kinds=kinds, masks_window=2, masks_stride=3, masks_custom_start="previous")
    _clean(at)
    figs = _figures(at)
    n = _heat(figs["masks_cmp_mask_0"]).shape[0]
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    expected = {"bidirectional": np.ones((n, n)), "causal": j <= i, "sliding_window": (j <= i) & (j > i - 2),
                "strided": (i - j >= 0) & (((i - j) < 3) | ((i - j) % 3 == 0)), "custom": j == i - 1}
    native = np.ones((n, n)) if model == "minilm-l6" else (j <= i)
    assert np.array_equal(_heat(figs["masks_cmp_mask_0"]), native)
    for k, kind in enumerate(kinds, start=1):
        assert np.array_equal(_heat(figs[f"masks_cmp_mask_{k}"]), expected[kind]), kind
        att = _heat(figs[f"masks_cmp_att_{k}"])
        assert np.isfinite(att).all()
        assert np.all(att[~expected[kind].astype(bool)] == 0.0), kind  # nothing leaks through the mask
    if "custom" in kinds:
        spec = json.dumps(figs[f"masks_cmp_mask_{kinds.index('custom') + 1}"])
        assert "no key allowed" in spec
        assert any("no key" in i.value for i in at.info)
    if model == "smollm2-135m":
        kl = {tr["name"]: _decode(tr["y"]) for tr in figs["masks_kl"]["data"]}
        assert np.all(kl["causal"] == 0.0)  # causal is SmolLM2's own mask
        other = [name for name in kl if name != "causal"]
        assert all(np.isfinite(kl[nm]).all() and kl[nm].max() > 0 for nm in other)
    else:
        assert "masks_kl" not in figs  # encoders: cosine drift instead
        drift = {tr["name"]: _decode(tr["y"]) for tr in figs["masks_drift"]["data"]}
        if "bidirectional" in drift:
            assert np.all(drift["bidirectional"] < 1e-6)  # BERT's own mask
        assert drift["causal"][-1] > 1e-3


def test_mask_page_turkish_and_one_mask(minilm):
    """Turkish interface strings; a single mask still renders with a hint to pick two."""
    at = _app("minilm-l6", lang="tr", masks_kinds=["causal"])
    _clean(at)
    assert at.title[0].value == "Maskeler ve dikkat türleri"
    assert any("en az iki" in c.value for c in at.caption)


def test_bert_vs_gpt(minilm, smollm2):
    """Encoder and decoder side by side, each with its own native mask."""
    at = _app("minilm-l6", section="bert_gpt")
    _clean(at)
    figs = _figures(at)
    enc, dec = _heat(figs["masks_bg_enc_mask"]), _heat(figs["masks_bg_dec_mask"])
    assert enc.all()
    assert np.array_equal(dec, np.tril(np.ones_like(dec)))
    att = _heat(figs["masks_bg_dec_att"])
    assert np.all(np.triu(att, 1) == 0.0)


@pytest.mark.parametrize("arch", ["marian", "t5", "bart"])
def test_encoder_decoder_view(tiny, tiny_folder, arch):
    """Three masks and three attentions for a tiny encoder-decoder folder; special tokens hidden and rows
    renormalised in cross-attention; a word alignment target words x source words."""
    folder = str(tiny_folder(arch))
    at = _app("minilm-l6", section="encdec", masks_encdec_model=folder, masks_encdec_on=True,
              masks_src="kedi fareyi kovaladı", masks_tgt="the cat chased a mouse")
    _clean(at)
    figs = _figures(at)
    cross = _heat(figs["masks_ed_att_cross"])
    np.testing.assert_allclose(cross.sum(axis=1), 1.0, atol=1e-6)  # renormalised without special tokens
    src_labels = shown(figs["masks_ed_att_cross"]["layout"]["xaxis"]["ticktext"])
    assert "</s>" not in src_labels and len(src_labels) == 5  # kedi fare ##yi kova ##ladı
    dec_mask = _heat(figs["masks_ed_mask_decoder"])
    assert np.array_equal(dec_mask, np.tril(np.ones_like(dec_mask)))
    assert _heat(figs["masks_ed_mask_encoder"]).all() and _heat(figs["masks_ed_mask_cross"]).all()
    align = _heat(figs["masks_align_heat"])
    assert align.shape == (5, 3)  # the cat chased a mouse -> kedi fareyi kovaladı
    assert shown(figs["masks_align_heat"]["layout"]["xaxis"]["ticktext"]) == ["kedi", "fareyi", "kovaladı"]
    np.testing.assert_allclose(align.sum(axis=1), 1.0, atol=1e-6)

    # Without the filter the special keys come back and rows still sum to 1 over all keys.
    at.session_state["masks_encdec_hide"] = False
    at.run()
    _clean(at)
    figs = _figures(at)
    assert "</s>" in shown(figs["masks_ed_att_cross"]["layout"]["xaxis"]["ticktext"])
    np.testing.assert_allclose(_heat(figs["masks_ed_att_cross"]).sum(axis=1), 1.0, atol=1e-5)


def test_encoder_decoder_offline_hub_message():
    """A hub id while offline (HF_HUB_OFFLINE=1 in the tests): a clear message, no traceback; the page
    says up front that hub models need internet."""
    at = _app("minilm-l6", section="encdec", masks_encdec_model="Helsinki-NLP/opus-mt-tr-en", masks_encdec_on=True)
    assert not at.exception
    assert any("internet" in c.value for c in at.caption)
    assert at.error and "Helsinki-NLP/opus-mt-tr-en" in at.error[0].value


def test_encoder_decoder_rejects_non_encdec(minilm):
    at = _app("minilm-l6", section="encdec", masks_encdec_model="minilm-l6", masks_encdec_on=True)
    assert not at.exception
    assert at.error and "encoder-decoder" in at.error[0].value
    at = _app("minilm-l6", section="encdec", masks_encdec_model="minilm-l6", masks_encdec_on=True, lang="tr")
    assert at.error[0].value == "'minilm-l6' bir kodlayıcı, kodlayıcı-kod çözücü değil: çapraz dikkati yok."


def test_gqa_section(minilm, smollm2):
    """SmolLM2: 9 query heads in 3 groups and the KV-cache bytes per token (with / without sharing)."""
    at = _app("smollm2-135m", section="gqa")
    _clean(at)
    figs = _figures(at)
    kv_texts = [tr["text"][0] for tr in figs["masks_gqa_fig"]["data"]
                if tr.get("text") and tr["text"][0].startswith("KV")]
    assert kv_texts == ["KV0", "KV1", "KV2"]
    table = at.dataframe[0].value
    row = table[table.iloc[:, 0] == "bfloat16 / float16"].iloc[0]
    assert row.iloc[1] == "22.5 KiB" and row.iloc[2] == "67.5 KiB"  # 2*30*3*64*2 = 23040 B; x3 without sharing
    assert sum(k.startswith("masks_gqa_map_") for k in figs) == 9
    # An encoder without grouping falls back to SmolLM2 with a note.
    at = _app("minilm-l6", section="gqa")
    _clean(at)
    assert any("minilm-l6" in i.value for i in at.info)


def test_fallback_model_says_masks_cannot_be_replaced(tiny, tiny_folder):
    """GPT-Neo takes the fallback capture path: a clear message instead of a traceback."""
    tiny("gpt_neo")
    at = _app("minilm-l6", model_custom=str(tiny_folder("gpt_neo")))
    assert not at.exception
    assert at.error and "fallback" in at.error[0].value


@pytest.fixture(scope="module")
def whisper():
    return models.load("whisper-base", device="cpu")


def test_encoder_decoder_view_whisper_shipped_clip(whisper):
    """whisper-base on the shipped English clip: transcript, three masks and attentions (frames as keys),
    cross-attention over the spectrogram whose peaks move forward in time word by word."""
    at = _app("minilm-l6", section="encdec", masks_encdec_choice="whisper-base",
              masks_clip="the_cat_chased_the_mouse_en.wav")
    _clean(at)
    transcript = " ".join(m.value for m in at.markdown if "Transcript" in m.value)
    assert "the cat chased the mouse" in transcript.lower()
    figs = _figures(at)
    cross = _heat(figs["masks_ed_att_cross"])
    frames = _heat(figs["masks_ed_att_encoder"]).shape[1]
    assert cross.shape[1] == frames and frames > 50  # speech frames; padding column hidden
    np.testing.assert_allclose(cross.sum(axis=1), 1.0, atol=1e-5)
    dec = _heat(figs["masks_ed_mask_decoder"])
    assert np.array_equal(dec, np.tril(np.ones_like(dec)))
    spec = figs["masks_audio_spec"]
    rows = shown(spec["layout"]["yaxis2"]["ticktext"])
    assert [r.strip().lower() for r in rows][:5] == ["the", "cat", "chased", "the", "mouse"]
    peaks = next(_decode(tr["x"]) for tr in spec["data"] if tr.get("mode") == "markers+lines")
    content = np.asarray(peaks[:5], dtype=float)  # the five words, in seconds
    assert np.all(np.diff(content[1:]) > 0), content  # cat < chased < the < mouse in time
    # Without the filter the prompt tokens and the <|padding|> column come back.
    at.session_state["masks_encdec_hide"] = False
    at.run()
    _clean(at)
    assert "<|padding|>" in shown(_figures(at)["masks_ed_att_cross"]["layout"]["xaxis"]["ticktext"])


def test_whisper_turkish_clip_with_target_and_record_prompt(whisper):
    """The Turkish clip forces Turkish; a typed transcript is analysed as given; 'record' without a
    recording asks for one."""
    at = _app("minilm-l6", section="encdec", masks_encdec_choice="whisper-base",
              masks_clip="kedi_fareyi_kovaladi_tr.wav", masks_audio_lang="tr", masks_audio_tgt="Kedi fareyi kovaladı.")
    _clean(at)
    assert any("Kedi fareyi kovaladı." in m.value for m in at.markdown)
    rows = shown(_figures(at)["masks_audio_spec"]["layout"]["yaxis2"]["ticktext"])
    assert "kovaladı" in "".join(rows).replace(" ", "")  # labels keep the typed Turkish characters
    at = _app("minilm-l6", section="encdec", masks_encdec_choice="whisper-base", masks_clip="record")
    _clean(at)
    assert any("microphone" in i.value for i in at.info)


def test_turkish_masks_page_has_no_english_hover_words_and_turkish_byte_sizes(minilm, smollm2):
    """The mask and attention figures said "query %{y} → key %{x}: allowed/masked", the KL bars "nats" and
    the drift lines "layer" in the Turkish interface; the KV-cache table wrote 22.5 KiB instead of 22,5 KiB."""
    at = _app("smollm2-135m", lang="tr", masks_kinds=["causal", "sliding_window"])
    _clean(at)
    figs = _figures(at)
    hovers = [tr.get("hovertemplate") or "" for fig in figs.values() for tr in fig["data"]]
    assert hovers and not any(word in h for h in hovers for word in ("query", "key ", "nats", "layer"))
    assert any(h.startswith("sorgu %{y} → anahtar %{x}") for h in hovers)
    assert any(h.endswith("nat<extra>nedensel</extra>") for h in hovers)
    assert any(h.startswith("katman %{x}") for h in hovers)
    mask_fig = next(fig for key, fig in figs.items() if key.startswith("masks_cmp_mask_"))
    assert set(np.asarray(mask_fig["data"][0]["customdata"]).ravel()) <= {"izinli", "maskeli"}
    at = _app("smollm2-135m", section="gqa", lang="tr")
    _clean(at)
    table = at.dataframe[0].value
    row = table[table.iloc[:, 0] == "bfloat16 / float16"].iloc[0]
    assert row.iloc[1] == "22,5 KiB" and row.iloc[2] == "67,5 KiB"


def test_turkish_whisper_section_writes_its_note_and_frame_times_in_turkish(whisper):
    """The Turkish interface showed the engine's English note ("Whisper always encodes 30 s ... (1.72 s)")
    and frame labels with a decimal point ("0.20s") on the encoder's axes."""
    at = _app("minilm-l6", section="encdec", lang="tr", masks_encdec_choice="whisper-base",
              masks_clip="the_cat_chased_the_mouse_en.wav")
    _clean(at)
    captions = " ".join(c.value for c in at.caption)
    assert "Whisper always encodes" not in captions
    assert "Whisper her zaman 30 sn kodlar" in captions and "(1,72 sn)" in captions, captions
    ticks = [x for x in shown(_figures(at)["masks_ed_att_encoder"]["layout"]["yaxis"]["ticktext"]) if x]
    assert "0,20s" in ticks and not any("." in x for x in ticks), ticks
    at = _app("minilm-l6", section="encdec", masks_encdec_choice="whisper-base",
              masks_clip="the_cat_chased_the_mouse_en.wav")
    captions = " ".join(c.value for c in at.caption)
    assert "Whisper always encodes 30 s; the encoder is cropped to the first 86 of 1,500 frames (1.72 s)" in captions


def test_turkish_alignment_threshold_uses_a_decimal_comma(tiny_folder):
    """The word-alignment threshold slider showed 0.10 in the Turkish interface."""
    at = _app("minilm-l6", section="encdec", lang="tr", masks_encdec_model=str(tiny_folder("marian")),
              masks_encdec_on=True, masks_src="kedi fareyi kovaladı", masks_tgt="the cat chased a mouse")
    _clean(at)
    slider = at.select_slider(key="masks_align_threshold")
    assert slider.value == 0.1 and "0,10" in slider.options and "0,05" in slider.options


def _linked(query: dict, model: str = "minilm-l6") -> AppTest:
    """The Masks page opened from a link carrying ``query``."""
    at = open_linked(PAGE, model, query, TEXT, timeout=240)
    _clean(at)
    return at


def test_the_link_reopens_the_masks_page_state():
    """Issue 13: the section, the masks, their widths, layer and head are in the URL, a link reopens them,
    and a change on the page is written back."""
    at = _linked({"masks_kinds": "causal,sliding_window,strided", "masks_window": "2", "masks_stride": "4",
                  "masks_cmp_layer": "3", "masks_cmp_head": "mean"})
    assert at.radio(key="masks_section").value == "compare"
    assert at.multiselect(key="masks_kinds").value == ["causal", "sliding_window", "strided"]
    assert at.number_input(key="masks_window").value == 2 and at.number_input(key="masks_stride").value == 4
    assert at.slider(key="masks_cmp_layer").value == 3 and at.selectbox(key="masks_cmp_head").value == "mean"
    title = _figures(at)["masks_cmp_att_1"]["layout"]["title"]["text"].replace("<br>", " ")  # wrapped in a column
    assert "layer 3, mean of heads" in title
    assert at.query_params["masks_kinds"] == "causal,sliding_window,strided"
    assert at.query_params["masks_cmp_layer"] == "3"
    at.slider(key="masks_cmp_layer").set_value(5).run()
    assert at.query_params["masks_cmp_layer"] == "5"
    at.radio(key="masks_section").set_value("gqa").run()
    _clean(at)
    # another section: its own state in the link, the compare section's gone
    assert at.query_params["masks_section"] == "gqa"
    assert "masks_kinds" not in at.query_params and "masks_cmp_layer" not in at.query_params
    at.slider(key="masks_gqa_layer").set_value(7).run()
    reopened = _linked(dict(at.query_params), model="minilm-l6")
    assert reopened.radio(key="masks_section").value == "gqa" and reopened.slider(key="masks_gqa_layer").value == 7


def test_junk_in_the_masks_link_is_ignored():
    """Unknown masks, repeats, widths and layers out of range, heads the model lacks: each falls back to
    the page's default instead of failing (five masks are cut to the four the widget takes)."""
    at = _linked({"masks_kinds": "junk,causal,causal,bidirectional,strided,sliding_window,custom",
                  "masks_window": "999", "masks_stride": "x", "masks_cmp_layer": "-1", "masks_cmp_head": "77",
                  "masks_section": "nowhere"})
    assert at.radio(key="masks_section").value == "compare"
    assert at.multiselect(key="masks_kinds").value == ["causal", "bidirectional", "strided", "sliding_window"]
    assert at.number_input(key="masks_window").value == 3 and at.number_input(key="masks_stride").value == 3
    assert at.slider(key="masks_cmp_layer").value == 0 and at.selectbox(key="masks_cmp_head").value == 0


def test_window_plus_sinks_on_the_masks_page(smollm2):
    """Issue 15: StreamingLLM's "window + k sinks" is one of the page's masks, with its width and sink count in
    the link; the panel draws exactly that mask (the first k keys stay allowed beyond the window)."""
    at = _linked({"masks_kinds": "sliding_window,sink_window", "masks_window": "2", "masks_sink_window": "2",
                  "masks_sinks": "1"}, model="smollm2-135m")
    assert at.multiselect(key="masks_kinds").value == ["sliding_window", "sink_window"]
    assert at.number_input(key="masks_sink_window").value == 2 and at.number_input(key="masks_sinks").value == 1
    z = np.asarray(_decode(_figures(at)["masks_cmp_mask_2"]["data"][0]["z"]))
    n = z.shape[0]
    assert np.array_equal(z.astype(bool), models.parse_mask("sink_window:2,1").matrix(n))
    assert any("attention sinks" in c.value for c in at.caption)
    at.number_input(key="masks_sinks").set_value(3).run()
    _clean(at)
    assert at.query_params["masks_sinks"] == "3"


# ------------------------------------------------------------------------------------- masks per head (issue 31)

MASKS = json.loads((Path(APP).parent / "assets" / "i18n" / "masks.json").read_text(encoding="utf-8"))


def _per_head(lang: str = "en", **state) -> AppTest:
    """The Masks per head section on smollm2-135m, reading the sidebar's sentence (5 tokens) unless told."""
    state.setdefault("masks_ph_text", "sidebar")
    return _app("smollm2-135m", section="per_head", lang=lang, **state)


def _grid(at) -> tuple[np.ndarray, list[str]]:
    """The pattern grid's kind index per head and the legend's kind names (index order)."""
    fig = _figures(at)["masks_ph_grid"]
    return _heat(fig), [tr["name"] for tr in fig["data"][1:]]


def _table(at, column: str):
    return next(tb.value for tb in at.table if column in list(tb.value.columns))


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_masks_per_head_section_renders_in_both_languages(smollm2, lang):
    """DuoAttention's preset by default: 10 % of the 270 heads (27) keep the whole context, ranked by the attention a
    window would lose; the grid, the effect, the cache and what a sparse kernel keeps, in the interface language."""
    at = _per_head(lang)
    _clean(at)
    subheaders = [s.value for s in at.subheader]
    assert MASKS["masks_ph_result"][lang] in subheaders and MASKS["masks_ph_keep_title"][lang] in subheaders
    z, legend = _grid(at)
    assert z.shape == (30, 9) and legend == [MASKS["masks_ph_kind_full"][lang],
                                             MASKS["masks_ph_kind_sink_window"][lang]]
    assert int((z == 0).sum()) == 27
    keep = _figures(at)["masks_ph_keep_fig"]
    assert sum(tr["type"] == "heatmap" for tr in keep["data"]) == 5
    assert MASKS["masks_ph_kv_full"][lang] in list(_table(at, MASKS["masks_ph_kv_full"][lang]).columns)
    assert any(MASKS["masks_ph_preset_duo_explain"][lang][:30] in c.value for c in at.caption)


def test_every_row_of_the_per_head_effect_says_its_change(smollm2):
    """Issue 50 point 7: the effect table's Change column was empty on the top-1 agreement row (and on the cosine of an
    encoder): each row now gives this mask's value less the model's own, which the other columns hold."""
    from viz import numbers as nb

    at = _per_head(masks_ph_preset="window", masks_ph_window=2, masks_ph_sinks=1)
    _clean(at)
    table = _table(at, MASKS["masks_ph_col_change"]["en"])
    assert len(table) >= 3 and all(str(v).strip() for v in table.iloc[:, 3]), table
    top1 = table[table.iloc[:, 0] == MASKS["masks_ph_top1"]["en"]].iloc[0]
    agree = float(str(top1.iloc[2]).rstrip(" %")) / 100
    assert top1.iloc[3] == nb.percent(agree - 1.0, 1, "en", sign=True)


def test_a_preset_changes_the_grid_and_the_cache_it_needs(smollm2):
    """Everything a window of 2 + 1 sink: no head keeps the model's own mask, and at 8,192 tokens the cache holds 3
    tokens per key/value head instead of 8,192; DuoAttention with k = 9 then keeps 9 heads full."""
    from models.analysis.head_masks import window_everywhere
    from models.sparse import kv_bytes
    from viz import numbers as nb

    at = _per_head(masks_ph_preset="window", masks_ph_window=2, masks_ph_sinks=1)
    _clean(at)
    z, legend = _grid(at)
    assert legend == [MASKS["masks_ph_kind_sink_window"]["en"]] and np.all(z == 0)
    assert any(c.value.startswith("0 of 270 heads") for c in at.caption)
    kv = _table(at, "Every head full")
    want = kv_bytes(smollm2, window_everywhere(2, 1), 8192)
    row = kv[kv.iloc[:, 0] == "8,192"].iloc[0]
    assert (row.iloc[1], row.iloc[2]) == (nb.human_bytes(want["full"]), nb.human_bytes(want["bytes"]))
    assert row.iloc[2] == "135.0 KiB" and want["ratio"] > 2000  # 30 layers x 3 KV heads x 3 tokens x 512 B
    effect = _table(at, "This mask")
    assert effect.iloc[0, 0].startswith("Next-token loss")
    at.radio(key="masks_ph_preset").set_value("duo").run()
    at.slider(key="masks_ph_k").set_value(9).run()
    _clean(at)
    z, _ = _grid(at)
    assert int((z == 0).sum()) == 9


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_a_bad_pattern_is_said_in_the_interface_language_and_what_was_typed_stays(smollm2, lang):
    """A width of 0, then a budget larger than the text: the engine's message in the interface language, the typed
    pattern kept in its box; a good one then draws. (Each value opens the page afresh: outside a script run AppTest
    formats a translated radio's options in English, so the Turkish page cannot be driven by set_value.)"""
    expected = {"sliding_window:0": {"en": "needs a width of at least 1",
                                     "tr": "en az 1 olan bir tam sayı genişlik ister"},
                "sliding_window:99": {"en": "more than the text's 5 tokens", "tr": "metnin 5 tokeninden fazla"}}
    for typed, message in expected.items():
        at = _per_head(lang, masks_ph_preset="custom", masks_ph_default=typed)
        assert not at.exception
        assert at.error and message[lang] in at.error[0].value, [e.value for e in at.error]
        assert at.text_input(key="masks_ph_default").value == typed
        assert "masks_ph_grid" not in _figures(at)
    at = _per_head(lang, masks_ph_preset="custom", masks_ph_default="sliding_window:2")
    _clean(at)
    z, legend = _grid(at)
    assert legend == [MASKS["masks_ph_kind_sliding_window"][lang]] and np.all(z == 0)


def test_the_custom_pattern_comes_back_after_another_preset(smollm2):
    """Streamlit forgets an undrawn widget's value: the typed pattern is kept aside and drawn again."""
    at = _per_head(masks_ph_preset="custom")
    at.text_input(key="masks_ph_default").set_value("sliding_window:2").run()
    _clean(at)
    at.radio(key="masks_ph_preset").set_value("window").run()
    _clean(at)
    assert "masks_ph_default" not in at.session_state  # the widget's own value is gone
    at.radio(key="masks_ph_preset").set_value("custom").run()
    _clean(at)
    assert at.text_input(key="masks_ph_default").value == "sliding_window:2"
    z, legend = _grid(at)
    assert legend == [MASKS["masks_ph_kind_sliding_window"]["en"]]
