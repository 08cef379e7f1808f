"""Masks page: the same sentence under different attention masks; BERT vs GPT; encoder-decoder
cross-attention with word alignment; grouped-query attention and the KV cache; a mask per head (which heads keep
the whole context) and what a sparse kernel would keep.

Glue only: widgets -> models (analyze, models.compare) -> viz (viz.masks, viz.alignment). Each section
lives in :mod:`views.mask_sections`.
"""

from __future__ import annotations

import streamlit as st

from views import shared
from views.mask_sections.bert_gpt import section_bert_gpt
from views.mask_sections.common import URL, bind, t
from views.mask_sections.compare import section_compare
from views.mask_sections.encdec import section_encdec
from views.mask_sections.gqa import section_gqa
from views.mask_sections.per_head import section_per_head

# -------------------------------------------------------------------------------------------------- page

sel = shared.selection()
st.title(t("masks_title"))
st.markdown(t("masks_intro"))
SECTIONS = {"compare": section_compare, "bert_gpt": section_bert_gpt, "encdec": section_encdec, "gqa": section_gqa,
            "per_head": section_per_head}
bind("masks_section")
section = st.radio(t("masks_section"), list(SECTIONS), key="masks_section", horizontal=True,
                   format_func=lambda s: t(f"masks_sec_{s}"))
try:
    SECTIONS[section](sel)
finally:  # also when a section stops early (no model, empty text): what it showed is in the link
    URL.finish()
