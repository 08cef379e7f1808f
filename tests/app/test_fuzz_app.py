"""AppTest fuzz over every page, its text inputs and the query parameters a link can carry (issue 12): whatever
a student types or a shared link holds, in either mode and either language, a page shows its content or a
clear message: never an exception, never a traceback, never markdown the user wrote, and in classroom mode
never a server path."""

from __future__ import annotations

import os
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from streamlit.testing.v1 import AppTest

import models
from test_hosting_app import APP, PAGES, PAYLOAD, _texts, _unescaped
from views import hosting

EXAMPLES = int(os.environ.get("DIKKAT_FUZZ_APP_EXAMPLES", "250"))
TEXTS = st.one_of(
    st.text(st.characters(codec="utf-8"), max_size=60),
    st.text(st.sampled_from(list("Kedi fareyi kovaladı the cat [SEP]<s>|*_`#$\\:~")), max_size=60),
    st.just(PAYLOAD), st.just(""), st.just(" \n\t "), st.just("ş" * 3000),
)
JUNK = st.one_of(st.text(max_size=8), st.integers(-10**12, 10**12).map(str), st.just("1e999"), st.just("nan"))
MODEL_KEYS = st.one_of(st.sampled_from([s.key for s in models.list_models()]), JUNK,
                       st.sampled_from(["/etc/passwd", "~root", "../..", "owner/name", "mini"]))
CUSTOM = st.sampled_from(["~nosuchuser", "/etc", "/etc/passwd", "../../..", "a" * 300, "x/" + "b" * 300, "nul\x00x",
                          "owner/name", "![x](http://beacon.invalid/b.png)", "mini"])
NUMBERS = st.one_of(st.integers(-5, 10**8).map(str), JUNK)
QUERY = st.fixed_dictionaries({}, optional={
    "text": TEXTS, "model_key": MODEL_KEYS, "model_custom": CUSTOM,
    "lang": st.one_of(st.sampled_from(["en", "tr"]), JUNK),
    "view": st.one_of(st.sampled_from(["head", "model", "heatmap", "summary"]), JUNK),
    "layer": st.one_of(st.integers(-3, 40).map(str), JUNK), "head": st.one_of(st.integers(-3, 14).map(str), JUNK),
    "stack": st.one_of(st.sampled_from(["encoder", "decoder", "cross"]), JUNK),
    "hide_special": st.sampled_from(["true", "false", "1", "0", "yes", ""]), "words": st.sampled_from(["true", "x"]),
    "avg": st.sampled_from(["true", "false"]), "rollout": st.sampled_from(["true", "false", "2"]),
    "hide_first": st.sampled_from(["true", "false"]), "pair": TEXTS, "img_fmt": st.one_of(st.just("SVG"), JUNK),
    "hv_start": st.one_of(st.integers(-5, 10**6).map(str), JUNK),
    "off": st.one_of(st.sampled_from(["encoder.0.0,encoder.1.1", "decoder.0.1", "encoder.99.0,x.y.z,,"]), JUNK),
    "masks_kinds": st.one_of(st.lists(st.sampled_from(["causal", "bidirectional", "sliding_window", "strided",
                                                       "custom", "junk"]), max_size=7).map(",".join), JUNK),
    "masks_window": st.one_of(st.integers(-3, 40).map(str), JUNK),
    "masks_stride": st.one_of(st.integers(-3, 40).map(str), JUNK),
    "masks_cmp_layer": st.one_of(st.integers(-3, 40).map(str), JUNK),
    "masks_cmp_head": st.one_of(st.just("mean"), JUNK),
    "masks_gqa_layer": st.one_of(st.integers(-3, 40).map(str), JUNK), "masks_encdec_choice": CUSTOM,
    "masks_src": TEXTS, "masks_tgt": TEXTS, "masks_clip": JUNK,
    "masks_align_threshold": st.one_of(st.just("0.35"), JUNK),
    # the lessons' widgets (issue 13: every page's state in the URL)
    "qkv_layer": NUMBERS, "qkv_head": NUMBERS, "qkv_query": NUMBERS, "qkv_stack": st.one_of(st.just("decoder"), JUNK),
    "qkv_noscale": st.sampled_from(["1", "0", "x"]), "qkv_temperature": st.one_of(st.just("2.5"), JUNK),
    "pos_m": NUMBERS, "pos_n": NUMBERS, "pos_t": NUMBERS, "pos_alibi_head": NUMBERS, "pos_wo_layer": NUMBERS,
    "pos_wo_head": NUMBERS, "pos_text_a": TEXTS, "pos_text_b": TEXTS,
    "cost_lengths": st.one_of(st.just("16,64"), JUNK), "cost_repeats": NUMBERS, "cost_log": st.sampled_from(["0", "1"]),
    "kv_preset": st.one_of(st.sampled_from(["loaded:minilm-l6", "loaded:smollm2-135m"]), JUNK),
    "kv_layers": NUMBERS, "kv_heads_q": NUMBERS, "kv_heads_kv": NUMBERS, "kv_bytes": NUMBERS, "kv_tokens": NUMBERS,
    "kv_window": NUMBERS, "kv_prompt": TEXTS, "kv_new_tokens": NUMBERS,
    # the Head atlas (issue 28)
    "atlas_corpus": st.one_of(st.sampled_from(["en", "tr", "upload"]), JUNK), "atlas_column": TEXTS,
    "atlas_max_tokens": NUMBERS, "atlas_limit": NUMBERS, "atlas_repeats": NUMBERS,
    "atlas_metric": st.one_of(st.sampled_from(["previous", "induction_repeat", "distance_var"]), JUNK),
    "atlas_lowest": st.sampled_from(["1", "0", "x"]), "atlas_stack": st.one_of(st.just("encoder"), JUNK),
    "atlas_layer": NUMBERS, "atlas_head": NUMBERS,
})
# the text fields of each page (the sidebar's sentence is on every page); a field a page does not draw is ignored
FIELDS = {"views/explore.py": ["pair"],
          "views/masks.py": ["masks_src", "masks_tgt", "masks_audio_tgt", "masks_encdec_model"],
          "views/positions.py": ["pos_text_a", "pos_text_b"], "views/kvcache.py": ["kv_prompt"]}
TRACEBACK = re.compile(r"Traceback|File \"/|site-packages|\.py\", line")
SERVER_PATHS = ("/work", "/tmp", "/root", "/etc", "/usr", "/srv", "site-packages")


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(page=st.sampled_from(PAGES), query=QUERY, classroom=st.booleans(), typed=st.lists(TEXTS, max_size=5),
       section=st.sampled_from(["compare", "bert_gpt", "encdec", "gqa"]))
def test_every_page_survives_any_link_and_any_typing(tiny_folder, page, query, classroom, typed, section):
    """One run per example: the link's query parameters, and text typed into the page's fields (as Session
    State, which is what typing does; AppTest cannot send a second run's widget states on a Turkish page,
    because it formats option labels outside the script)."""
    saved = {k: os.environ.get(k) for k in ("DIKKAT_MODE", "DIKKAT_CLASSROOM_CONFIG")}
    config = tiny_folder("bert").parent / "fuzz-classroom.toml"
    config.write_text(f'max_chars = 300\n[models]\n"mini" = "{tiny_folder("bert")}"\n', encoding="utf-8")
    os.environ["DIKKAT_MODE"] = "classroom" if classroom else "personal"
    os.environ["DIKKAT_CLASSROOM_CONFIG"] = str(config)
    hosting.current.cache_clear()
    try:
        at = AppTest.from_file(APP, default_timeout=300)
        at.query_params = query
        for key, value in zip(["text"] + FIELDS.get(page, []), typed):
            at.session_state[key] = value
        if page == "views/masks.py" and "masks_section" not in query:
            at.session_state["masks_section"] = section
        at.switch_page(page)
        at.run()
        _check(at, classroom)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        hosting.current.cache_clear()


def _check(at: AppTest, classroom: bool) -> None:
    assert not at.exception, [e.value for e in at.exception]
    shown = _texts(at)
    for message in [e.value for e in at.error] + [w.value for w in at.warning]:
        assert not TRACEBACK.search(message), message
    for text in shown:
        assert not _unescaped(text), text
        if classroom:
            assert not any(p in text for p in SERVER_PATHS), text
    if classroom:
        assert not [w for w in at.sidebar.get("text_input") if w.key == "model_custom"]
