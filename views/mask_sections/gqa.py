"""Masks section 4: grouped-query attention (which query heads share a key/value head) and the KV cache."""

from __future__ import annotations


import numpy as np
import pandas as pd
import streamlit as st

from models.analysis import kv_layout
from views import shared
from viz import masks as vm
from viz import numbers as nb
from .common import (
    GQA_MODEL, MAX_TOKENS, attention_figure, bind, chart, token_labels, t,
)


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
    chart(vm.gqa_figure(layout.groups, query_label=t("masks_query_head"), kv_label=t("masks_kv_head"),
                        lang=shared.lang()),
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
            t("masks_kv_shared", kv=layout.kv_heads) + " · " + t("masks_kv_context", n=8192):
                _fmt_bytes(8192 * shared_b),
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
    bind("masks_gqa_layer", 0, bounds=(0, att.shape[0] - 1))
    shared.clamp("masks_gqa_layer", att.shape[0])
    layer = st.slider(t("masks_layer"), 0, att.shape[0] - 1, key="masks_gqa_layer")
    st.markdown(t("masks_gqa_maps", layer=layer))
    labels = token_labels(a.tokens)
    top = float(np.nan_to_num(att[layer]).max())  # one colour scale for every map of the layer
    for g, members in enumerate(layout.groups):
        cols = st.columns(len(members))
        for col, h in zip(cols, members):
            with col:
                fig = attention_figure(att[layer, h], labels, labels, title=f"KV{g} · Q{h}",
                                          empty_label=t("masks_no_key"), zmax=top)
                chart(fig, key=f"masks_gqa_map_{h}", columns=len(members))
