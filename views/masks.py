"""Masks page: the same sentence under different attention masks; BERT vs GPT; encoder-decoder
cross-attention with word alignment; grouped-query attention and the KV cache.

Glue only: widgets -> models (analyze, models.compare) -> viz (viz.masks, viz.alignment).
"""

from __future__ import annotations

import tempfile

import numpy as np
import pandas as pd
import streamlit as st

import models
from models import compare, fallback_masks, kv_layout
from models.masks import MaskMode
from views import hosting, shared
from viz import alignment as va
from viz import audio_alignment as vaa
from viz import masks as vm
from viz import numbers as nb

t = shared.t
# The mask page draws n x n grids (and an n x n checkbox editor): keep texts short.
MAX_TOKENS = 24
KINDS = ("bidirectional", "causal", "sliding_window", "strided", "custom")
PRESETS = ("causal", "bidirectional", "diagonal", "previous", "empty")
BERT_MODEL, GPT_MODEL, GQA_MODEL = "minilm-l6", "smollm2-135m", "smollm2-135m"
ENCDEC_PRESETS = ("Helsinki-NLP/opus-mt-tr-en", "whisper-base", "google-t5/t5-small", "facebook/bart-base")
AUDIO_DIR = shared.ASSETS / "audio"
CLIPS = {"the_cat_chased_the_mouse_en.wav": "en", "kedi_fareyi_kovaladi_tr.wav": "tr"}
LANGUAGES = ("en", "tr", "de", "fr", "es")


# ----------------------------------------------------------------------------------------- cached runs


@shared.cached
def _native(name: str, text: str, max_tokens: int) -> models.Analysis:
    """Native run with hidden states and (when the model has a head) logits; shared, read-only."""
    loaded = shared.get_model(name)
    return models.analyze(loaded, text, hidden_states=True, keep_logits=loaded.head != "none", max_tokens=max_tokens)


@shared.cached
def _run(name: str, text: str, mask_key, max_tokens: int) -> compare.MaskRun:
    """One replaced mask measured against the native run. ``mask_key``: a mask string, or
    ``("custom", rows)`` with ``rows`` a tuple of tuples of bools (hashable for the cache)."""
    mask = np.array(mask_key[1], dtype=bool) if isinstance(mask_key, tuple) else mask_key
    return compare.run_mask(shared.get_model(name), text, mask, _native(name, text, max_tokens),
                            max_tokens=max_tokens)


# ----------------------------------------------------------------------------------------------- helpers

# The page's state lives in the URL (issue 13: a link reopens the same section, masks, layer and head).
URL = shared.UrlState(("masks_section", "masks_kinds", "masks_window", "masks_stride", "masks_custom_start",
                       "masks_cmp_layer", "masks_cmp_head", "masks_bg_enc_layer", "masks_bg_enc_head",
                       "masks_bg_dec_layer", "masks_bg_dec_head", "masks_encdec_choice", "masks_src", "masks_tgt",
                       "masks_encdec_hide", "masks_ed_layer", "masks_ed_head", "masks_align_threshold", "masks_clip",
                       "masks_audio_lang", "masks_audio_tgt", "masks_audio_heads", "masks_gqa_layer"))
_bind = URL.bind


def _clamp(key: str, hi: int, default: int = 0) -> None:
    """Keep a slider/select value stored in session_state inside ``0..hi`` (the model may have changed)."""
    value = st.session_state.get(key, default)
    if not isinstance(value, int) or not 0 <= value <= hi:
        st.session_state[key] = min(max(default, 0), hi)


def _layer_head(prefix: str, layers: int, heads: int, *, allow_mean: bool = False) -> tuple[int, int | None]:
    """Layer slider and head selector; returns (layer, head or None for the mean over heads)."""
    options = list(range(heads)) + (["mean"] if allow_mean else [])
    _bind(f"{prefix}_layer", 0, kind=int, bounds=(0, max(layers - 1, 0)))
    _bind(f"{prefix}_head", 0, options=options)
    _clamp(f"{prefix}_layer", layers - 1)
    if st.session_state.get(f"{prefix}_head", 0) not in options:
        st.session_state[f"{prefix}_head"] = 0
    c1, c2 = st.columns(2)
    with c1:
        layer = st.slider(t("masks_layer"), 0, max(layers - 1, 0), key=f"{prefix}_layer") if layers > 1 else 0
    with c2:
        head = st.selectbox(t("masks_head"), options, key=f"{prefix}_head",
                            format_func=lambda h: t("masks_head_mean") if h == "mean" else str(h))
    return layer, (None if head == "mean" else int(head))


def _head_name(head: int | None) -> str:
    return t("masks_head_mean") if head is None else t("masks_head_n", h=head)


def _pick(att: np.ndarray, layer: int, head: int | None) -> np.ndarray:
    """(layers, heads, q, k) -> (q, k) of one head, or the mean over heads."""
    return att[layer].mean(axis=0) if head is None else att[layer, head]


def _mask_title(kind: str) -> str:
    if kind == "sliding_window":
        return t("masks_mask_sliding_window_w", w=st.session_state.get("masks_window", 3))
    if kind == "strided":
        return t("masks_mask_strided_s", s=st.session_state.get("masks_stride", 3))
    return t(f"masks_mask_{kind}")


def _preset(kind: str, n: int) -> np.ndarray:
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    return {"causal": j <= i, "bidirectional": np.ones((n, n), bool), "diagonal": i == j,
            "previous": j == i - 1, "empty": np.zeros((n, n), bool)}[kind]


def _labels(tokens) -> list[str]:
    return [tok.label for tok in tokens]


def _text_model_ok(loaded: models.LoadedModel) -> bool:
    if getattr(loaded.model, "main_input_name", "input_ids") != "input_ids":
        st.info(t("masks_text_models_only", model=shared.model_name(loaded)))
        return False
    return True


def _chart(fig, key: str) -> None:
    shared.plotly_chart(fig, key=key, config={"displaylogo": False})


def _mask_figure(*args, **kwargs):
    """:func:`viz.masks.mask_figure` with its hover words in the interface language."""
    return vm.mask_figure(*args, **{"allowed_label": t("masks_allowed"), "forbidden_label": t("masks_forbidden"),
                                    "query_title": t("query"), "key_title": t("key"), **kwargs})


def _attention_figure(*args, **kwargs):
    """:func:`viz.masks.attention_figure` with its hover words and title note in the interface language."""
    return vm.attention_figure(*args, **{"query_title": t("query"), "key_title": t("key"),
                                         "renormalised_label": t("masks_renormalised"), **kwargs})


# --------------------------------------------------------------------------------------- compare masks


def _custom_editor(labels: list[str], name: str, text: str) -> np.ndarray:
    """Checkbox grid (rows: queries, columns: keys). Returns the bool (n, n) mask."""
    n = len(labels)
    _bind("masks_custom_start", PRESETS[0], options=PRESETS)
    start = st.selectbox(t("masks_custom_start"), PRESETS, key="masks_custom_start",
                         format_func=lambda p: t(f"masks_preset_{p}"))
    names = [f"{i} {lab}" for i, lab in enumerate(labels)]
    frame = pd.DataFrame(_preset(start, n), index=names, columns=names)
    editor_key = f"masks_custom_{abs(hash((name, text, n, start))) % 10**10}"
    st.caption(t("masks_custom_editor"))
    edited = st.data_editor(
        frame, key=editor_key, num_rows="fixed", width="content",
        column_config={c: st.column_config.CheckboxColumn(c, width="small") for c in names},
    )
    matrix = np.asarray(edited.to_numpy(), dtype=bool).reshape(n, n)
    empty = int((~matrix.any(axis=1)).sum())
    if empty:
        st.info(t("masks_custom_empty_rows", n=empty))
    return matrix


def section_compare(sel: shared.Selection) -> None:
    loaded = shared.load_model_ui(sel.model)
    if loaded is None or not _text_model_ok(loaded):
        return
    if loaded.capture_path == "fallback" and loaded.mask_stack not in getattr(
            fallback_masks.mask_support(loaded), "scopes", {}):
        st.error(t("masks_fallback_no_masks", model=shared.model_name(loaded)))
        return
    if not sel.text.strip():
        st.info(t("masks_empty_text"))
        return
    try:
        with st.spinner(t("analysing")):
            native = _native(sel.model, sel.text, MAX_TOKENS)
    except models.DikkatError as exc:
        shared.show_error(exc)
        return
    if native.truncated:
        st.warning(t("truncated", n=native.truncated, limit=native.max_tokens))
    stack = loaded.mask_stack
    q_tokens, k_tokens = native.axis_tokens(stack)
    labels = _labels(q_tokens)
    layers, heads = loaded.stacks[stack]

    _bind("masks_kinds", ["bidirectional", "causal"], options=KINDS, kind=list)
    if len(st.session_state["masks_kinds"]) > 4:  # a link may name all five; the widget takes four
        st.session_state["masks_kinds"] = st.session_state["masks_kinds"][:4]
    kinds = st.multiselect(t("masks_choose_masks"), KINDS, key="masks_kinds",
                           max_selections=4, format_func=lambda k: t(f"masks_mask_{k}"))
    if not kinds:
        st.info(t("masks_pick_one"))
        return
    if len(kinds) == 1:
        st.caption(t("masks_pick_two"))
    c1, c2 = st.columns(2)
    with c1:
        if "sliding_window" in kinds:
            _bind("masks_window", 3, kind=int, bounds=(1, MAX_TOKENS))
            st.number_input(t("masks_window_w"), min_value=1, max_value=MAX_TOKENS, step=1, key="masks_window")
    with c2:
        if "strided" in kinds:
            _bind("masks_stride", 3, kind=int, bounds=(1, MAX_TOKENS))
            st.number_input(t("masks_stride_s"), min_value=1, max_value=MAX_TOKENS, step=1, key="masks_stride")
    custom = None
    if "custom" in kinds:
        with st.expander(t("masks_mask_custom"), expanded=True):
            custom = _custom_editor(labels, sel.model, sel.text)
    layer, head = _layer_head("masks_cmp", layers, heads, allow_mean=True)

    mask_keys = []
    for kind in kinds:
        if kind == "sliding_window":
            mask_keys.append(f"sliding_window:{int(st.session_state.get('masks_window', 3))}")
        elif kind == "strided":
            mask_keys.append(f"strided:{int(st.session_state.get('masks_stride', 3))}")
        elif kind == "custom":
            mask_keys.append(("custom", tuple(tuple(bool(x) for x in row) for row in custom)))
        else:
            mask_keys.append(kind)
    runs = []
    try:
        with st.spinner(t("analysing")):
            for key in mask_keys:
                runs.append(_run(sel.model, sel.text, key, MAX_TOKENS))
    except models.DikkatError as exc:
        shared.show_error(exc)
        return

    # at most three panels a row: five in a row left a grid of 8 px cells at 1280 px
    columns = [col for start in range(0, len(kinds) + 1, 3) for col in st.columns(3)][: len(kinds) + 1]
    native_matrix = compare.applied_mask(loaded, native, layer, stack)
    panels = [("native", native_matrix, native.attentions[stack])] + [
        (kind, run.matrix, run.analysis.attentions[stack]) for kind, run in zip(kinds, runs)
    ]
    for i, (col, (kind, matrix, att)) in enumerate(zip(columns, panels)):
        with col:
            title = _mask_title(kind) + (f" ({t('masks_reference')})" if kind == "native" else "")
            st.markdown(f"**{title}**")
            _chart(_mask_figure(matrix, labels, labels, title=t("masks_mask_matrix"), empty_label=t("masks_no_key")),
                   key=f"masks_cmp_mask_{i}")
            _chart(_attention_figure(_pick(att, layer, head), labels, labels, mask=matrix,
                                       title=t("masks_attention_of", layer=layer, head=_head_name(head)),
                                       empty_label=t("masks_no_key")), key=f"masks_cmp_att_{i}")
            st.caption(t(f"masks_explain_{kind}"))

    st.subheader(t("masks_effect_title"))
    names = [_mask_title(k) for k in kinds]
    summary = {t("masks_summary_mask"): names,
               t("masks_summary_empty_rows"): [int(r.empty_rows.sum()) for r in runs]}
    show_kl = loaded.family != "encoder" and all(r.kl is not None for r in runs)
    e1, e2 = st.columns(2) if show_kl else (None, st.container())
    if show_kl:
        with e1:
            _chart(vm.kl_figure(labels, {nm: r.kl for nm, r in zip(names, runs)}, title=t("masks_kl_title"),
                                yaxis_title=t("masks_kl_axis"), unit=t("masks_nats")),
                   key="masks_kl")
            st.caption(t("masks_kl_explain"))
        summary[t("masks_summary_mean_kl")] = [round(float(r.kl.mean()), 4) for r in runs]
        summary[t("masks_summary_max_kl")] = [round(float(r.kl.max()), 4) for r in runs]
        summary[t("masks_summary_top1")] = [
            r.analysis.next_token.tokens[-1][0] if r.analysis.next_token is not None else "" for r in runs
        ]
    with e2:
        _chart(vm.drift_figure({nm: r.layer_drift for nm, r in zip(names, runs)}, title=t("masks_drift_title"),
                               xaxis_title=t("masks_layer_axis")), key="masks_drift")
        st.caption(t("masks_drift_explain"))
    summary[t("masks_summary_last_drift")] = [round(float(r.layer_drift[-1]), 4) for r in runs]
    shared.dataframe(pd.DataFrame(summary), decimals=4, hide_index=True)


# ------------------------------------------------------------------------------------------ BERT vs GPT


def section_bert_gpt(sel: shared.Selection) -> None:
    st.markdown(t("masks_bert_gpt_intro"))
    if not sel.text.strip():
        st.info(t("masks_empty_text"))
        return
    cols = st.columns(2)
    for col, name, title_key, prefix in ((cols[0], BERT_MODEL, "masks_encoder_native", "masks_bg_enc"),
                                         (cols[1], GPT_MODEL, "masks_decoder_native", "masks_bg_dec")):
        with col:
            st.markdown(f"**{t(title_key, model=name)}**")
            loaded = shared.load_model_ui(name)
            if loaded is None:
                continue
            a = shared.analysis_ui(name, sel.text, max_tokens=MAX_TOKENS)
            if a is None:
                continue
            stack = loaded.mask_stack
            layers, heads = loaded.stacks[stack]
            layer, head = _layer_head(prefix, layers, heads, allow_mean=True)
            labels = _labels(a.tokens)
            matrix = compare.applied_mask(loaded, a, layer, stack)
            _chart(_mask_figure(matrix, labels, labels, title=t("masks_mask_matrix"),
                                  empty_label=t("masks_no_key")), key=f"{prefix}_mask")
            _chart(_attention_figure(_pick(a.attentions[stack], layer, head), labels, labels, mask=matrix,
                                       title=t("masks_attention_of", layer=layer, head=_head_name(head)),
                                       empty_label=t("masks_no_key")), key=f"{prefix}_att")
            st.caption(t("masks_explain_bidirectional" if stack == "encoder" else "masks_explain_causal"))


# ------------------------------------------------------------------------------------- encoder-decoder


def _three_panels(a: models.Analysis, panels, layer: int, head: int | None, hide: bool) -> None:
    """Encoder self-attention, decoder self-attention and cross-attention side by side, each with its mask.
    ``panels``: (title key, stack, mask (q, k), query special flags, key special flags, query labels, key
    labels). With ``hide``, special tokens are dropped and rows renormalised (viz.alignment.hide_special)."""
    cols = st.columns(3)
    for col, (title_key, stack, matrix, q_special, k_special, q_labels, k_labels) in zip(cols, panels):
        with col:
            st.markdown(f"**{t(title_key)}**")
            weights = _pick(a.attentions[stack], layer, head)
            if hide:
                weights, q_keep, k_keep = va.hide_special(weights, q_special, k_special, renormalise=True)
                matrix = matrix[np.ix_(q_keep, k_keep)]
                q_labels = [q_labels[i] for i in q_keep]
                k_labels = [k_labels[i] for i in k_keep]
            _chart(_mask_figure(matrix, q_labels, k_labels, title=t("masks_mask_matrix"),
                                  empty_label=t("masks_no_key")), key=f"masks_ed_mask_{stack}")
            _chart(_attention_figure(weights, q_labels, k_labels, mask=matrix, renormalised=hide,
                                       title=t("masks_attention_of", layer=layer, head=_head_name(head)),
                                       empty_label=t("masks_no_key")), key=f"masks_ed_att_{stack}")
    if hide:
        st.caption(t("masks_renormalised_note"))


def _encdec_model() -> str:
    """The encoder-decoder chosen: a preset, or the free text box when filled."""
    presets = [m for m in ENCDEC_PRESETS if m != "whisper-base" or models.get_spec(m).installed]
    classroom = hosting.current().classroom
    if classroom:  # the catalog's and the teacher's models only, nothing typed
        presets = [m for m in presets if m in models.CATALOG] + list(hosting.current().extra)
    # whisper-base works offline: a sensible first view
    _bind("masks_encdec_choice", "whisper-base" if "whisper-base" in presets else None, options=presets)
    c1, c2 = st.columns(2)
    with c1:
        # an option's label is plain text (t_plain); a hub id is labelled as needing internet
        choice = st.selectbox(t("masks_encdec_model"), presets, key="masks_encdec_choice",
                              format_func=lambda m: shared.t_plain(
                                  "masks_encdec_preset_" + ("hub" if _needs_hub(m) else "local"), model=m))
    if classroom:
        return choice
    with c2:
        custom = st.text_input(t("masks_encdec_custom"), key="masks_encdec_model").strip()
    return custom or choice


def _needs_hub(name: str) -> bool:
    try:
        return models.is_hub_id(hosting.source(name))
    except models.DikkatError:
        return False  # not offered here: loading it says so


def section_encdec(sel: shared.Selection) -> None:
    st.markdown(t("masks_encdec_intro"))
    name = _encdec_model()
    if not name:  # classroom mode with no encoder-decoder offered (no Whisper, no teacher's model)
        st.info(t("masks_encdec_none_offered"))
        return
    st.caption(t("masks_encdec_hub_note"))
    if _needs_hub(name):
        # not in the URL: a link must not start a download from the hub; the user switches it on
        st.toggle(t("masks_encdec_run"), key="masks_encdec_on", value=False)
        if not st.session_state.get("masks_encdec_on"):
            st.info(t("masks_encdec_off"))
            return
    loaded = shared.load_model_ui(name)
    if loaded is None:
        return
    if loaded.family != "encoder-decoder":
        st.error(t("masks_not_encdec", model=name, family=t(f"teach_family_{loaded.family}")))
        return
    if getattr(loaded.model, "main_input_name", "input_ids") == "input_features":
        _speech_encdec(name, loaded)
        return
    c1, c2 = st.columns(2)
    with c1:
        _bind("masks_src", sel.text or shared.DEFAULT_TEXT)
        source = st.text_input(t("masks_source_text"), key="masks_src", max_chars=hosting.current().max_chars)
    with c2:
        _bind("masks_tgt", shared.DEFAULT_TEXTS["en"])
        target = st.text_input(t("masks_target_text"), key="masks_tgt", max_chars=hosting.current().max_chars)
    target = target.strip() or None
    a = shared.analysis_ui(name, source, target=target, max_tokens=MAX_TOKENS)
    if a is None:
        return
    if target is None:
        st.caption(f"{t('masks_target')}: {shared.md(a.target)}")
    _bind("masks_encdec_hide", True, kind=bool)
    hide = st.toggle(t("masks_hide_special"), key="masks_encdec_hide")
    layers, heads = loaded.stacks["cross"]
    layer, head = _layer_head("masks_ed", layers, heads, allow_mean=True)

    src_special = np.array([tok.special for tok in a.tokens])
    tgt_special = np.array([tok.special for tok in a.target_tokens])
    src_labels, tgt_labels = _labels(a.tokens), _labels(a.target_tokens)
    n_src, n_tgt = len(src_labels), len(tgt_labels)
    panels = (
        ("masks_enc_self", "encoder", MaskMode("bidirectional").matrix(n_src), src_special, src_special,
         src_labels, src_labels),
        ("masks_dec_self", "decoder", MaskMode("causal").matrix(n_tgt), tgt_special, tgt_special,
         tgt_labels, tgt_labels),
        ("masks_cross_att", "cross", np.ones((n_tgt, n_src), bool), tgt_special, src_special, tgt_labels,
         src_labels),
    )
    _three_panels(a, panels, layer, head, hide)
    st.caption(t("masks_rows_are_inputs"))

    st.subheader(t("masks_alignment_title"))
    cross = _pick(a.attentions["cross"], layer, head)
    if hide:  # zero special keys and renormalise, keeping token indices so words still line up
        cross = va.renormalise_without(cross, src_special)
    rows = compare.produced_word_rows(a)
    words = va.word_attention(cross, [r for _, r in rows], [w.tokens for w in a.words])
    t_labels, s_labels = [w for w, _ in rows], [w.text for w in a.words]
    lang = shared.lang()  # a select slider: its labels use the interface language's decimal mark (0,10)
    steps = [round(0.05 * i, 2) for i in range(21)]
    _bind("masks_align_threshold", 0.1, options=steps)
    threshold = st.select_slider(t("masks_alignment_threshold"), steps, key="masks_align_threshold", format_func=lambda v: nb.num(v, 2, lang))
    c1, c2 = st.columns([3, 2])
    with c1:
        _chart(va.alignment_figure(words, t_labels, s_labels, threshold=threshold, source_title=t("masks_source"),
                                   target_title=t("masks_target")), key="masks_align_lines")
    with c2:
        _chart(_attention_figure(words, t_labels, s_labels, colorscale="Purples", empty_label=t("masks_no_key")),
               key="masks_align_heat")
    st.caption(t("masks_alignment_explain"))


# ------------------------------------------------------------------------------ speech encoder-decoder


@shared.cached
def _audio_analysis(name: str, wav: bytes, language: str, target: str | None):
    """``models.audio.analyze_audio`` on WAV bytes, cached by content; shared, read-only."""
    from models import audio

    with tempfile.NamedTemporaryFile(suffix=".wav") as f:
        f.write(wav)
        f.flush()
        samples, rate = audio.read_wav(f.name)
    return audio.analyze_audio(shared.get_model(name), samples, rate, language=language, target=target)


def _clip_changed() -> None:
    clip = st.session_state.get("masks_clip")
    if clip in CLIPS:
        st.session_state["masks_audio_lang"] = CLIPS[clip]


def _thin(labels: list[str], every: int) -> list[str]:
    """Keep every ``every``-th frame label (and special ones) so a long time axis stays readable."""
    return [lab if (i % every == 0 or lab.startswith("<|")) else "" for i, lab in enumerate(labels)]


def _audio_note(r) -> str:
    """How the encoder was cropped (the engine's ``r.note``), in the interface language."""
    from models import audio

    a, lang = r.analysis, shared.lang()
    total = r.frames + r.padding_frames
    seconds = nb.num(r.frames * r.frame_seconds, 2, lang)
    if not r.padding_frames:
        note = t("masks_audio_note_full", total=nb.integer(total, lang))
    else:
        kept = any(tok.special and tok.label == audio.PADDING_PIECE for tok in a.tokens)
        note = t("masks_audio_note_column" if kept else "masks_audio_note_renormalised", n=nb.integer(r.frames, lang),
                 total=nb.integer(total, lang), seconds=seconds, pad=nb.integer(r.padding_frames, lang),
                 column=audio.PADDING_PIECE)
    if a.truncated:
        note += " " + t("masks_audio_note_cut", seconds=nb.num(a.truncated * r.frame_seconds, 2, lang))
    return note


def _speech_encdec(name: str, loaded: models.LoadedModel) -> None:
    """Whisper: a shipped clip or one recorded in the browser; encoder self-attention over audio frames,
    causal decoder self-attention, cross-attention from the transcript's tokens to the frames."""
    from models import audio

    options = [c for c in CLIPS if (AUDIO_DIR / c).is_file()] + ["record"]
    c1, c2, c3 = st.columns([2, 1, 2])
    with c1:
        _bind("masks_clip", options[0], options=options)
        clip = st.radio(t("masks_clip"), options, key="masks_clip", on_change=_clip_changed,
                        format_func=lambda c: t("masks_clip_" + c.removesuffix(".wav")))
    with c2:
        _bind("masks_audio_lang", CLIPS.get(clip, "en"), options=LANGUAGES)
        language = st.selectbox(t("masks_audio_language"), LANGUAGES, key="masks_audio_lang")
    with c3:
        _bind("masks_audio_tgt", "")
        target = st.text_input(t("masks_audio_target"), key="masks_audio_tgt",
                               max_chars=hosting.current().max_chars).strip() or None
        if clip.endswith("_tr.wav"):
            st.caption(t("masks_audio_tr_hint"))
    if clip == "record":
        recorded = st.audio_input(t("masks_record"), key="masks_rec")
        if recorded is None:
            st.info(t("masks_record_first"))
            return
        wav = recorded.getvalue()
    else:
        wav = (AUDIO_DIR / clip).read_bytes()
    st.audio(wav, format="audio/wav")
    try:
        with st.spinner(t("analysing")):
            r = _audio_analysis(name, wav, language, target)
    except models.DikkatError as exc:
        shared.show_error(exc)
        return
    a = r.analysis
    st.markdown(f"**{t('masks_transcript')}:** {shared.md(r.transcript)}")
    st.caption(_audio_note(r))
    _bind("masks_encdec_hide", True, kind=bool)
    hide = st.toggle(t("masks_hide_special"), key="masks_encdec_hide")
    layers, heads = loaded.stacks["cross"]
    layer, head = _layer_head("masks_ed", layers, heads, allow_mean=True)

    frame_special = np.array([tok.special for tok in a.tokens])
    tgt_special = np.array([tok.special for tok in a.target_tokens])
    # frame labels are the engine's "0.20s": written with the interface language's decimal mark
    frame_labels = _thin([tok.label if tok.special else nb.localise(tok.label, shared.lang()) for tok in a.tokens], 10)
    tgt_labels = _labels(a.target_tokens)
    n_f, n_t = len(frame_labels), len(tgt_labels)
    panels = (
        ("masks_enc_self", "encoder", np.ones((n_f, n_f), bool), frame_special, frame_special, frame_labels,
         frame_labels),
        ("masks_dec_self", "decoder", MaskMode("causal").matrix(n_t), tgt_special, tgt_special, tgt_labels,
         tgt_labels),
        ("masks_cross_att", "cross", np.ones((n_t, n_f), bool), tgt_special, frame_special, tgt_labels,
         frame_labels),
    )
    _three_panels(a, panels, layer, head, hide)
    st.caption(t("masks_rows_are_inputs"))

    st.subheader(t("masks_audio_alignment_title"))
    _bind("masks_audio_heads", "alignment", options=("alignment", "selected"))
    source = st.radio(t("masks_audio_heads"), ["alignment", "selected"], key="masks_audio_heads", horizontal=True,
                      format_func=lambda s: t("masks_audio_heads_" + s))
    cross = a.attentions["cross"]
    if source == "alignment":
        weights = cross.heads(audio.alignment_heads(loaded)).mean(axis=0)
    else:
        weights = _pick(cross, layer, head)
    weights = weights[:, : r.frames]  # speech frames only; the padding share is in the matrices above
    produced = compare.produced_tokens(a, end_label=loaded.tokenizer.eos_token or "<|endoftext|>")
    rows = [i for i, (_, special) in enumerate(produced) if not (hide and special)]
    weights = weights[rows]
    peaks = weights.argmax(axis=-1) if weights.size else np.zeros(0, dtype=int)
    fig = vaa.spectrogram_attention_figure(
        r.spectrogram, weights, [produced[i][0] for i in rows], frame_seconds=r.frame_seconds, peaks=peaks,
        spectrogram_title=t("masks_spectrogram"), attention_title=t("masks_cross_att"),
        xaxis_title=t("masks_time_s"), peak_label=t("masks_peak"))
    _chart(fig, key="masks_audio_spec")
    st.caption(t("masks_audio_alignment_explain"))


# --------------------------------------------------------------------------------- grouped-query attention


def _fmt_bytes(n: float) -> str:
    return nb.human_bytes(n, shared.lang())


def section_gqa(sel: shared.Selection) -> None:
    st.markdown(t("masks_gqa_intro"))
    loaded = shared.load_model_ui(sel.model)
    name = sel.model
    layout = None
    if loaded is not None:
        try:
            layout = kv_layout.kv_layout(loaded)
        except ValueError:
            layout = None
    if layout is None or not layout.shared:
        if loaded is not None:
            st.info(t("masks_gqa_none", model=sel.model, other=GQA_MODEL))
        loaded = shared.load_model_ui(GQA_MODEL)
        if loaded is None:
            return
        name, layout = GQA_MODEL, kv_layout.kv_layout(loaded)
    st.markdown("**" + t("masks_gqa_layout", model=name, layers=layout.layers, heads=layout.heads,
                         kv=layout.kv_heads, d=layout.head_dim) + "**")
    _chart(vm.gqa_figure(layout.groups, query_label=t("masks_query_head"), kv_label=t("masks_kv_head")),
           key="masks_gqa_fig")
    st.markdown("\n".join(f"- {t('masks_gqa_group', g=g, members=', '.join(map(str, m)))}"
                          for g, m in enumerate(layout.groups)))

    st.caption(t("masks_kv_formula"))
    formats = (("float32", 4), ("bfloat16 / float16", 2), ("int8", 1))
    rows = []
    for label, size in formats:
        shared_b, unshared_b = layout.bytes_per_token(size), layout.bytes_per_token(size, sharing=False)
        rows.append({
            t("masks_kv_dtype"): label,
            t("masks_kv_shared", kv=layout.kv_heads): _fmt_bytes(shared_b),
            t("masks_kv_unshared", heads=layout.heads): _fmt_bytes(unshared_b),
            t("masks_kv_shared", kv=layout.kv_heads) + " · " + t("masks_kv_context", n=8192): _fmt_bytes(8192 * shared_b),
            t("masks_kv_unshared", heads=layout.heads) + " · " + t("masks_kv_context", n=8192):
                _fmt_bytes(8192 * unshared_b),
        })
    st.dataframe(pd.DataFrame(rows), hide_index=True)
    st.markdown(t("masks_kv_saving", ratio=layout.heads / layout.kv_heads, shared=_fmt_bytes(layout.bytes_per_token(2)),
                  unshared=_fmt_bytes(layout.bytes_per_token(2, sharing=False)), dtype="bfloat16"))

    # Each query head's map for the sentence, grouped by the key/value head it reads.
    if not sel.text.strip():
        return
    a = shared.analysis_ui(name, sel.text, max_tokens=MAX_TOKENS)
    if a is None:
        return
    att = a.attentions["decoder"]
    _bind("masks_gqa_layer", 0, kind=int, bounds=(0, att.shape[0] - 1))
    _clamp("masks_gqa_layer", att.shape[0] - 1)
    layer = st.slider(t("masks_layer"), 0, att.shape[0] - 1, key="masks_gqa_layer")
    st.markdown(t("masks_gqa_maps", layer=layer))
    labels = _labels(a.tokens)
    for g, members in enumerate(layout.groups):
        cols = st.columns(len(members))
        for col, h in zip(cols, members):
            with col:
                fig = _attention_figure(att[layer, h], labels, labels, title=f"KV{g} · Q{h}",
                                          empty_label=t("masks_no_key"))
                _chart(fig, key=f"masks_gqa_map_{h}")


# -------------------------------------------------------------------------------------------------- page

sel = shared.selection()
st.title(t("masks_title"))
st.markdown(t("masks_intro"))
SECTIONS = {"compare": section_compare, "bert_gpt": section_bert_gpt, "encdec": section_encdec, "gqa": section_gqa}
_bind("masks_section", "compare", options=list(SECTIONS))
section = st.radio(t("masks_section"), list(SECTIONS), key="masks_section", horizontal=True,
                   format_func=lambda s: t(f"masks_sec_{s}"))
try:
    SECTIONS[section](sel)
finally:  # also when a section stops early (no model, empty text): what it showed is in the link
    URL.finish()
