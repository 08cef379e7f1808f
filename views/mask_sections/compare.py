"""Masks section 1: the same sentence under different attention masks (presets, sliding window, strided,
a custom mask), side by side with what changed."""

from __future__ import annotations


import numpy as np
import pandas as pd
import streamlit as st

import models
from models.analysis import compare, masks as mmasks
from models.capture import softmax as fallback_masks
from views import shared
from viz.text import text_width
from .common import (
    KINDS, MAX_TOKENS, PRESETS, attention_figure, bind, chart, drift_figure, head_name, kl_figure, token_labels,
    layer_head, mask_figure, mask_title, native_run, pick_map, mask_run, text_model_ok, t,
)


# --------------------------------------------------------------------------------------- compare masks


def _custom_editor(labels: list[str], name: str, text: str) -> np.ndarray:
    """Checkbox grid (rows: queries, columns: keys). Returns the bool (n, n) mask."""
    n = len(labels)
    bind("masks_custom_start")
    start = st.selectbox(t("masks_custom_start"), PRESETS, key="masks_custom_start",
                         format_func=lambda p: t(f"masks_preset_{p}"))
    names = [f"{i} {lab}" for i, lab in enumerate(labels)]
    frame = pd.DataFrame(mmasks.start_matrix(start, n), index=names, columns=names)
    editor_key = f"masks_custom_{abs(hash((name, text, n, start))) % 10**10}"
    st.caption(t("masks_custom_editor"))
    edited = st.data_editor(
        frame, key=editor_key, num_rows="fixed", width="content",
        # each column as wide as its header ("2 chased" was cut to "2 chase" at "small")
        column_config={c: st.column_config.CheckboxColumn(c, width=int(text_width(c, 14)) + 30) for c in names},
    )
    matrix = np.asarray(edited.to_numpy(), dtype=bool).reshape(n, n)
    empty = int((~matrix.any(axis=1)).sum())
    if empty:
        st.info(t("masks_custom_empty_rows", n=empty))
    return matrix


def section_compare(sel: shared.Selection) -> None:
    loaded = shared.load_model_ui(sel.model)
    if loaded is None or not text_model_ok(loaded):
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
            native = native_run(sel.model, sel.text, MAX_TOKENS)
    except models.DikkatError as exc:
        shared.show_error(exc)
        return
    if native.truncated:
        st.warning(shared.truncation_text(native, sel.model))
    stack = loaded.mask_stack
    q_tokens, k_tokens = native.axis_tokens(stack)
    labels = token_labels(q_tokens)
    layers, heads = loaded.stacks[stack]

    bind("masks_kinds")
    if len(st.session_state["masks_kinds"]) > 4:  # a link may name all six; the widget takes four
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
            bind("masks_window")
            st.number_input(t("masks_window_w"), min_value=1, max_value=MAX_TOKENS, step=1, key="masks_window")
    with c2:
        if "strided" in kinds:
            bind("masks_stride")
            st.number_input(t("masks_stride_s"), min_value=1, max_value=MAX_TOKENS, step=1, key="masks_stride")
    if "sink_window" in kinds:  # StreamingLLM: a window plus the first k tokens (Xiao et al. 2023)
        s1, s2 = st.columns(2)
        bind("masks_sink_window")
        bind("masks_sinks")
        s1.number_input(t("masks_window_w"), min_value=1, max_value=MAX_TOKENS, step=1, key="masks_sink_window")
        s2.number_input(t("masks_sinks_k"), min_value=0, max_value=MAX_TOKENS, step=1, key="masks_sinks")
    custom = None
    if "custom" in kinds:
        with st.expander(t("masks_mask_custom"), expanded=True):
            custom = _custom_editor(labels, sel.model, sel.text)
    layer, head = layer_head("masks_cmp", layers, heads, allow_mean=True)

    mask_keys: list[str | tuple[str, tuple[tuple[bool, ...], ...]]] = []
    for kind in kinds:
        if kind == "sliding_window":
            mask_keys.append(f"sliding_window:{int(st.session_state.get('masks_window', 3))}")
        elif kind == "strided":
            mask_keys.append(f"strided:{int(st.session_state.get('masks_stride', 3))}")
        elif kind == "sink_window":
            mask_keys.append(f"sink_window:{int(st.session_state.get('masks_sink_window', 3))},"
                             f"{int(st.session_state.get('masks_sinks', 1))}")
        elif kind == "custom":
            assert custom is not None  # drawn above for "custom"
            mask_keys.append(("custom", tuple(tuple(bool(x) for x in row) for row in custom)))
        else:
            mask_keys.append(kind)
    runs = []
    try:
        with st.spinner(t("analysing")):
            for key in mask_keys:
                runs.append(mask_run(sel.model, sel.text, key, MAX_TOKENS))
    except models.DikkatError as exc:
        shared.show_error(exc)
        return

    # at most three panels a row: five in a row left a grid of 8 px cells at 1280 px; two at a larger text size
    per_row = 3 if shared.factor() == 1 else 2
    columns = [col for start in range(0, len(kinds) + 1, per_row) for col in st.columns(per_row)][: len(kinds) + 1]
    native_matrix = compare.applied_mask(loaded, native, layer, stack)
    panels = [("native", native_matrix, native.attentions[stack])] + [
        (kind, run.matrix, run.analysis.attentions[stack]) for kind, run in zip(kinds, runs)
    ]
    # one colour scale for every panel: one colour means one weight side by side (issue 33)
    top = max(float(np.nan_to_num(pick_map(att, layer, head)).max()) for _, _, att in panels)
    for i, (col, (kind, matrix, att)) in enumerate(zip(columns, panels)):
        with col:
            title = mask_title(kind) + (f" ({t('masks_reference')})" if kind == "native" else "")
            st.markdown(f"**{title}**")
            chart(mask_figure(matrix, labels, labels, title=t("masks_mask_matrix"), empty_label=t("masks_no_key")),
                   key=f"masks_cmp_mask_{i}", columns=per_row)
            chart(attention_figure(pick_map(att, layer, head), labels, labels, mask=matrix,
                                       title=t("masks_attention_of", layer=layer, head=head_name(head)),
                                       empty_label=t("masks_no_key"), zmax=top), key=f"masks_cmp_att_{i}",
                  columns=per_row)
            st.caption(t(f"masks_explain_{kind}"))

    st.subheader(t("masks_effect_title"))
    names = [mask_title(k) for k in kinds]
    summary = {t("masks_summary_mask"): names,
               t("masks_summary_empty_rows"): [int(r.empty_rows.sum()) for r in runs]}
    show_kl = loaded.family != "encoder" and all(r.kl is not None for r in runs)
    e1, e2 = st.columns(2) if show_kl else (None, st.container())
    if show_kl:
        assert e1 is not None  # two columns when the KL is shown
        with e1:
            chart(kl_figure(labels, {nm: r.kl for nm, r in zip(names, runs)}, title=t("masks_kl_title"),
                                yaxis_title=t("masks_kl_axis"), unit=t("masks_nats"), lang=shared.lang()),
                   key="masks_kl", columns=2)
            st.caption(t("masks_kl_explain"))
        summary[t("masks_summary_mean_kl")] = [round(float(r.kl.mean()), 4) for r in runs]
        summary[t("masks_summary_max_kl")] = [round(float(r.kl.max()), 4) for r in runs]
        summary[t("masks_summary_top1")] = [
            r.analysis.next_token.tokens[-1][0] if r.analysis.next_token is not None else "" for r in runs
        ]
    with e2:
        chart(drift_figure({nm: r.layer_drift for nm, r in zip(names, runs)}, title=t("masks_drift_title"),
                               xaxis_title=t("masks_layer_axis"), lang=shared.lang()), key="masks_drift",
              columns=2 if show_kl else 1)
        st.caption(t("masks_drift_explain"))
    summary[t("masks_summary_last_drift")] = [round(float(r.layer_drift[-1]), 4) for r in runs]
    shared.dataframe(pd.DataFrame(summary), decimals=4, hide_index=True)
