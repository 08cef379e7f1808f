"""The KV cache: how big it is (calculator from real configs, with and without GQA) and what it saves
(generation with and without the cache, measured side by side)."""

from __future__ import annotations

import streamlit as st

import models
from models.analysis import kv_layout
from models.lessons import kvcache
from views import shared
from viz import cost as vc
from viz import numbers as nb

t = shared.t
L = shared.lang()
GENERATION_MODEL = "smollm2-135m"
FIELDS = ("kv_layers", "kv_heads_q", "kv_heads_kv", "kv_head_dim", "kv_bytes", "kv_window", "kv_window_layers")
# the page's widgets live in the URL (issue 13): a link reopens the same calculator and prompt
URL = shared.UrlState("kvcache")


def _fill(cfg: kv_layout.KVLayout) -> None:
    window = cfg.sliding_window or 0
    window_layers = (cfg.layers if cfg.sliding_layers is None else cfg.sliding_layers) if window else 0
    for key, value in zip(FIELDS, (cfg.layers, cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.bytes_per_value, window,
                                   window_layers)):
        st.session_state[key] = int(value)


sel, loaded = shared.page_start("kv_title", "kv_intro")

# ---- 1. calculator ---------------------------------------------------------------------------------------
st.header(t("kv_s1"))
st.markdown(t("kv_s1_text"))
st.latex(t("kv_formula"))
own = kv_layout.kv_layout(loaded)
# The loaded model's option is named by the model, not by its translated label: a label as the value would
# not be among the options after a language switch, and the calculator would be refilled (losing edits).
own_key = f"loaded:{sel.model}"
presets = {own_key: own, **kv_layout.KV_PRESETS}
names = list(presets)


def _on_preset() -> None:
    # Streamlit keeps a selectbox's value as its label (SelectboxSerde): when the options change under it (the
    # model switched with this page open, e.g. a lesson's next step), the value comes back as the old model's label,
    # which is no preset; the page then starts from the new model's own values (``first`` below).
    chosen = presets.get(str(st.session_state.get("kv_preset")))
    if chosen is not None:
        _fill(chosen)


first = st.session_state.get("kv_preset") not in presets
if first:
    st.session_state.pop("kv_preset", None)
URL.bind("kv_preset", names[0], options=names)
URL.bound["kv_preset"] = None  # always in the link: its values below belong to this preset (and model)
# a link's values apply to the preset it names; after a model switch the old model's values are not taken
from_link = first and URL.linked("kv_preset") == st.session_state["kv_preset"]
if first:  # the preset's values, then the link's own values over them
    _fill(presets[st.session_state["kv_preset"]])
for field in FIELDS:
    filled = st.session_state.pop(field) if from_link else None
    URL.bind(field, filled)  # (kv_bytes: one of its declared options)
    if field == "kv_bytes" and st.session_state.get(field) not in URL.options("kv_bytes"):
        st.session_state[field] = filled or 2
URL.bind("kv_tokens")
own_label = shared.t_plain("kv_loaded", model=sel.model)  # an option's label is plain text; bound now
st.selectbox(t("kv_preset"), names, key="kv_preset", on_change=_on_preset,
             format_func=lambda k: own_label if k == own_key else k)
if loaded.family != "decoder" and st.session_state["kv_preset"] == names[0]:
    st.caption(t("kv_encoder_note", model=sel.model, family=t(f"teach_family_{loaded.family}")))
c = st.columns([1, 1, 1, 1, 1.1, 1.6])  # the context box holds up to 8 digits (10,000,000)
layers = c[0].number_input(t("kv_layers"), *URL.bounds("kv_layers"), key="kv_layers")
heads = c[1].number_input(t("kv_heads_q"), *URL.bounds("kv_heads_q"), key="kv_heads_q")
kv_heads = c[2].number_input(t("kv_heads_kv"), *URL.bounds("kv_heads_kv"), key="kv_heads_kv")
head_dim = c[3].number_input(t("kv_head_dim"), *URL.bounds("kv_head_dim"), key="kv_head_dim")
bytes_per = c[4].selectbox(t("kv_bytes"), URL.options("kv_bytes"), key="kv_bytes",
                           format_func=lambda b: {1: "1 (int8/fp8)", 2: "2 (bf16/fp16)", 4: "4 (fp32)"}[b])
tokens = c[5].number_input(t("kv_tokens"), *URL.bounds("kv_tokens"), step=1024, key="kv_tokens")
w = st.columns([1.6, 1, 1, 1, 1.1, 1])  # the window box holds up to 8 digits
window = w[0].number_input(t("kv_window"), *URL.bounds("kv_window"), step=512, key="kv_window",
                           help=t("kv_window_help"))
window_layers = w[1].number_input(t("kv_window_layers"), *URL.bounds("kv_window_layers"), key="kv_window_layers")
if kv_heads > heads or heads % kv_heads:
    st.error(t("kv_bad_heads", heads=heads, kv=kv_heads))
else:
    cfg = kv_layout.KVLayout("custom", int(layers), int(heads), int(kv_heads), int(head_dim), int(bytes_per),
                            sliding_window=int(window) or None, sliding_layers=min(int(window_layers), int(layers)))
    per_gqa = kv_layout.kv_cache_bytes(cfg, 1)
    per_mha = kv_layout.kv_cache_bytes(cfg, 1, gqa=False)
    m = st.columns(4)
    m[0].metric(t("kv_per_token_gqa"), nb.human_bytes(per_gqa, L), f"{nb.integer(per_gqa, L)} B", delta_color="off",
                delta_arrow="off")
    m[1].metric(t("kv_per_token_mha"), nb.human_bytes(per_mha, L), f"{nb.integer(per_mha, L)} B", delta_color="off",
                delta_arrow="off")
    m[2].metric(t("kv_context_gqa", tokens=nb.integer(tokens, L)), nb.human_bytes(per_gqa * tokens, L))
    m[3].metric(t("kv_context_mha", tokens=nb.integer(tokens, L)), nb.human_bytes(per_mha * tokens, L))
    worked = t("kv_worked", layers=layers, kv=kv_heads, d=head_dim, b=bytes_per, per=nb.integer(per_gqa, L))
    if kv_heads < heads:
        worked += " " + t("kv_worked_gqa", heads=heads, ratio=heads // kv_heads)
    else:
        worked += " " + t("kv_worked_mha", heads=heads)
    st.markdown(worked)
    windowed = kv_layout.kv_cache_bytes(cfg, int(tokens), window=True)
    if windowed < per_gqa * tokens:
        st.info(t("kv_window_line", window=nb.integer(window, L), wl=cfg.sliding_layers, layers=layers,
                  tokens=nb.integer(tokens, L), windowed=nb.human_bytes(windowed, L),
                  full=nb.human_bytes(per_gqa * tokens, L)))
    contexts = [4_096, 32_768, 131_072]
    shared.plotly_chart(vc.kv_bars([f"{x // 1024}K" for x in contexts],
                               [kv_layout.kv_cache_bytes(cfg, x) / 2**30 for x in contexts],
                               [kv_layout.kv_cache_bytes(cfg, x, gqa=False) / 2**30 for x in contexts],
                               names=(t("kv_with_gqa"), t("kv_without_gqa")), y_title="GiB",
                               title=t("kv_bars_title"), lang=L), key="kv_bars")

# ---- 2. generation with and without the cache ----------------------------------------------------------------
st.header(t("kv_s2"))
st.markdown(t("kv_s2_text"))
gen_name = sel.model if loaded.family == "decoder" else GENERATION_MODEL
if gen_name != sel.model:
    st.caption(t("kv_uses_other", model=gen_name))
p1, p2 = st.columns([3, 1])
URL.bind("kv_prompt", sel.text if sel.text.strip() else shared.DEFAULT_TEXT)
URL.bind("kv_new_tokens")
prompt = shared.text_field(t("kv_prompt"), key="kv_prompt", container=p1)
new_tokens = p2.slider(t("kv_new_tokens"), 4, 64, key="kv_new_tokens")
gen_key = "kv_generation"
if st.button(t("kv_run"), key="kv_run", type="primary"):
    try:
        with st.spinner(t("kv_running", model=gen_name)):
            gen_model = shared.get_model(gen_name)
            with_cache, without = kvcache.compare_generation(gen_model, prompt, int(new_tokens))
        st.session_state[gen_key] = {"model": gen_name, "prompt": prompt, "with": with_cache, "without": without,
                                     "device": str(gen_model.device)}
    except models.DikkatError as exc:
        shared.show_error(exc)
result = st.session_state.get(gen_key)
if result:
    w, wo = result["with"], result["without"]
    g = st.columns(3)
    sec = t("cost_seconds")
    g[0].metric(t("kv_with_cache"), f"{nb.num(w.tokens_per_second, 1, L)} {t('kv_tps')}",
                f"{nb.num(w.seconds, 2, L)} {sec}",
                delta_color="off", delta_arrow="off")
    g[1].metric(t("kv_without_cache"), f"{nb.num(wo.tokens_per_second, 1, L)} {t('kv_tps')}",
                f"{nb.num(wo.seconds, 2, L)} {sec}", delta_color="off", delta_arrow="off")
    g[2].metric(t("kv_speedup"), f"× {nb.num(w.tokens_per_second / max(wo.tokens_per_second, 1e-9), 2, L)}")
    if w.tokens == wo.tokens:
        st.success(t("kv_same_tokens", n=len(w.tokens)))
    else:
        same = next((i for i, (a, b) in enumerate(zip(w.tokens, wo.tokens)) if a != b),
                    min(len(w.tokens), len(wo.tokens)))
        st.warning(t("kv_different_tokens", i=same))
    st.markdown(f"**{t('kv_prompt')}:** {shared.md(result['prompt'])}")
    st.code(w.text, language=None, wrap_lines=True)
    st.caption(t("kv_measured", model=result["model"], device=result["device"], n=len(w.tokens)))
URL.finish()
