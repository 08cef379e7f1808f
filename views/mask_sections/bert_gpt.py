"""Masks section 2: BERT (bidirectional) against GPT (causal) on the same sentence."""

from __future__ import annotations


import streamlit as st

from models.analysis import compare
from views import shared
from .common import (
    BERT_MODEL, GPT_MODEL, MAX_TOKENS, attention_figure, chart, head_name, token_labels, layer_head, mask_figure,
    pick_map, t,
)


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
            layer, head = layer_head(prefix, layers, heads, allow_mean=True)
            labels = token_labels(a.tokens)
            matrix = compare.applied_mask(loaded, a, layer, stack)
            chart(mask_figure(matrix, labels, labels, title=t("masks_mask_matrix"),
                                  empty_label=t("masks_no_key")), key=f"{prefix}_mask", columns=2)
            chart(attention_figure(pick_map(a.attentions[stack], layer, head), labels, labels, mask=matrix,
                                       title=t("masks_attention_of", layer=layer, head=head_name(head)),
                                       empty_label=t("masks_no_key"), zmax=1.0), key=f"{prefix}_att", columns=2)
            st.caption(t("masks_explain_bidirectional" if stack == "encoder" else "masks_explain_causal"))
