"""Masks section 3: encoder-decoder cross-attention with word alignment, for text (translation) and speech
(Whisper) models."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from typing import cast

import numpy as np
import streamlit as st

import models
from models.analysis import compare
from models.analysis.masks import MaskMode
from views import hosting, shared
from viz import alignment as va
from viz import audio_alignment as vaa
from viz import numbers as nb
from .common import (
    URL, AUDIO_DIR, CLIPS, ENCDEC_PRESETS, LANGUAGES, MAX_TOKENS, attention_figure, bind, chart, head_name,
    token_labels, layer_head, mask_figure, pick_map, t,
)


# ------------------------------------------------------------------------------------- encoder-decoder


def _cross_controls(loaded) -> tuple[bool, int, int | None]:
    """The cross-attention sections' toggle (hide special tokens) and layer/head pickers, in the link."""
    bind("masks_encdec_hide")
    hide = st.toggle(t("masks_hide_special"), key="masks_encdec_hide")
    layers, heads = loaded.stacks["cross"]
    layer, head = layer_head("masks_ed", layers, heads, allow_mean=True)
    return hide, layer, head


def _three_panels(a: models.Analysis, panels, layer: int, head: int | None, hide: bool) -> None:
    """Encoder self-attention, decoder self-attention and cross-attention side by side, each with its mask.
    ``panels``: (title key, stack, mask (q, k), query special flags, key special flags, query labels, key
    labels). With ``hide``, special tokens are dropped and rows renormalised (viz.alignment.hide_special)."""
    per_row = 3 if shared.factor() == 1 else 2  # two panels a row at a larger text size (projector mode)
    cols = [col for start in range(0, len(panels), per_row) for col in st.columns(per_row)][: len(panels)]
    for col, (title_key, stack, matrix, q_special, k_special, q_labels, k_labels) in zip(cols, panels):
        with col:
            st.markdown(f"**{t(title_key)}**")
            weights = pick_map(a.attentions[stack], layer, head)
            if hide:
                weights, q_keep, k_keep = va.hide_special(weights, q_special, k_special, renormalise=True)
                matrix = matrix[np.ix_(q_keep, k_keep)]
                q_labels = [q_labels[i] for i in q_keep]
                k_labels = [k_labels[i] for i in k_keep]
            chart(mask_figure(matrix, q_labels, k_labels, title=t("masks_mask_matrix"),
                                  empty_label=t("masks_no_key")), key=f"masks_ed_mask_{stack}", columns=per_row)
            chart(attention_figure(weights, q_labels, k_labels, mask=matrix, renormalised=hide,
                                       title=t("masks_attention_of", layer=layer, head=head_name(head)),
                                       empty_label=t("masks_no_key")), key=f"masks_ed_att_{stack}",
                  columns=per_row)
    if hide:
        st.caption(t("masks_renormalised_note"))


def _encdec_model() -> str:
    """The encoder-decoder chosen: a preset, or the free text box when filled."""
    presets = [m for m in ENCDEC_PRESETS if m != "whisper-base" or models.get_spec(m).installed]
    classroom = hosting.current().classroom
    if classroom:  # the catalog's and the teacher's models only, nothing typed
        presets = [m for m in presets if m in models.CATALOG] + list(hosting.current().extra)
    # whisper-base works offline: a sensible first view
    bind("masks_encdec_choice", "whisper-base" if "whisper-base" in presets else None, options=presets)
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
    if not loaded.reads_text:
        _speech_encdec(name, loaded)
        return
    c1, c2 = st.columns(2)
    with c1:
        bind("masks_src", sel.text or shared.DEFAULT_TEXT)
        source = shared.text_field(t("masks_source_text"), key="masks_src")
    with c2:
        bind("masks_tgt", shared.DEFAULT_TEXTS["en"])
        typed_target = shared.text_field(t("masks_target_text"), key="masks_tgt")
    target = typed_target.strip() or None
    a = shared.analysis_ui(name, source, target=target, max_tokens=MAX_TOKENS)
    if a is None:
        return
    if target is None:
        st.caption(f"{t('masks_target')}: {shared.md(a.target)}")
    hide, layer, head = _cross_controls(loaded)
    assert a.target_tokens is not None  # an encoder-decoder's analysis has its decoder's tokens

    src_special = np.array([tok.special for tok in a.tokens])
    tgt_special = np.array([tok.special for tok in a.target_tokens])
    src_labels, tgt_labels = token_labels(a.tokens), token_labels(a.target_tokens)
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
    cross = pick_map(a.attentions["cross"], layer, head)
    if hide:  # zero special keys and renormalise, keeping token indices so words still line up
        cross = va.renormalise_without(cross, cast("Sequence[bool]", src_special))  # a bool array
    rows = compare.produced_word_rows(a)
    words = va.word_attention(cross, [r for _, r in rows], [w.tokens for w in a.words])
    t_labels, s_labels = [w for w, _ in rows], [w.text for w in a.words]
    lang = shared.lang()  # a select slider: its labels use the interface language's decimal mark (0,10)
    steps = list(URL.options("masks_align_threshold"))
    bind("masks_align_threshold")
    threshold = st.select_slider(t("masks_alignment_threshold"), steps, key="masks_align_threshold",
                                 format_func=lambda v: nb.num(v, 2, lang))
    c1, c2 = st.columns([3, 2])
    with c1:
        chart(va.alignment_figure(words, t_labels, s_labels, threshold=threshold, source_title=t("masks_source"),
                                   target_title=t("masks_target"), lang=shared.lang()), key="masks_align_lines",
              columns=2)
    with c2:
        chart(attention_figure(words, t_labels, s_labels, colorscale="Purples", empty_label=t("masks_no_key")),
               key="masks_align_heat", columns=2)
    st.caption(t("masks_alignment_explain"))


# ------------------------------------------------------------------------------ speech encoder-decoder


@shared.cached
def _audio_analysis(name: str, wav: bytes, language: str, target: str | None):
    """``models.speech.audio.analyze_audio`` on WAV bytes, cached by content; shared, read-only."""
    from models.speech import audio

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
    from models.speech import audio

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
    from models.speech import audio

    options = [c for c in CLIPS if (AUDIO_DIR / c).is_file()] + ["record"]
    c1, c2, c3 = st.columns([2, 1, 2])
    with c1:
        bind("masks_clip", options[0], options=options)
        clip = st.radio(t("masks_clip"), options, key="masks_clip", on_change=_clip_changed,
                        format_func=lambda c: t("masks_clip_" + c.removesuffix(".wav")))
    with c2:
        bind("masks_audio_lang", CLIPS.get(clip, "en"), options=LANGUAGES)
        language = st.selectbox(t("masks_audio_language"), LANGUAGES, key="masks_audio_lang")
    with c3:
        bind("masks_audio_tgt")
        target = shared.text_field(t("masks_audio_target"), key="masks_audio_tgt").strip() or None
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
    hide, layer, head = _cross_controls(loaded)

    frame_special = np.array([tok.special for tok in a.tokens])
    tgt_special = np.array([tok.special for tok in a.target_tokens])
    # frame labels are the engine's "0.20s": written with the interface language's decimal mark
    frame_labels = _thin([tok.label if tok.special else nb.localise(tok.label, shared.lang()) for tok in a.tokens], 10)
    tgt_labels = token_labels(a.target_tokens)
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
    bind("masks_audio_heads")
    source = st.radio(t("masks_audio_heads"), ["alignment", "selected"], key="masks_audio_heads", horizontal=True,
                      format_func=lambda s: t("masks_audio_heads_" + s))
    cross = a.attentions["cross"]
    if source == "alignment":
        weights = cross.heads(audio.alignment_heads(loaded)).mean(axis=0)
    else:
        weights = pick_map(cross, layer, head)
    weights = weights[:, : r.frames]  # speech frames only; the padding share is in the matrices above
    produced = compare.produced_tokens(a, end_label=loaded.tokenizer.eos_token or "<|endoftext|>")
    rows = [i for i, (_, special) in enumerate(produced) if not (hide and special)]
    weights = weights[rows]
    peaks = weights.argmax(axis=-1) if weights.size else np.zeros(0, dtype=int)
    fig = vaa.spectrogram_attention_figure(
        r.spectrogram, weights, [produced[i][0] for i in rows], frame_seconds=r.frame_seconds,
        peaks=cast("Sequence[int]", peaks),
        spectrogram_title=t("masks_spectrogram"), attention_title=t("masks_cross_att"),
        xaxis_title=t("masks_time_s"), peak_label=t("masks_peak"), lang=shared.lang())
    chart(fig, key="masks_audio_spec")
    st.caption(t("masks_audio_alignment_explain"))
