"""The Masks per head section's last part: what a sparse kernel would keep. At a budget of keys per query, the share of
each head's attention that each pattern kind keeps (sliding window, A-shape, strided, vertical-slash, block-sparse;
:func:`models.sparse.kept_share`), and the keys per query each keeps."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

import models
from models.sparse import KEPT_PATTERNS, kept_share
from views import shared
from viz import head_masks as vh
from viz import numbers as nb
from .common import bind, chart, t

tp = shared.t_plain


@shared.cached
def kept(name: str, text: str, max_tokens: int, budget: int):
    """:func:`models.sparse.kept_share` of the native analysis at ``budget`` keys per query (shared, read-only)."""
    return kept_share(shared.get_analysis(name, text, max_tokens=max_tokens), budget)


def section_sparse_keep(name: str, text: str, max_tokens: int, native: models.Analysis, stack: str, n: int) -> None:
    st.subheader(t("masks_ph_keep_title"))
    st.markdown(t("masks_ph_keep_intro"))
    if n < 3:
        st.info(t("masks_ph_keep_short", n=n))
        return
    bind("masks_ph_budget", min(64, max(2, n // 4)), bounds=(2, n))
    value = st.session_state.get("masks_ph_budget")
    if not isinstance(value, int) or isinstance(value, bool) or not 2 <= value <= n:  # another text, a shorter one
        st.session_state["masks_ph_budget"] = min(64, max(2, n // 4))
    budget = st.slider(t("masks_ph_budget", n=n), 2, n, key="masks_ph_budget")
    try:
        with st.spinner(t("analysing")):
            result = kept(name, text, max_tokens, int(budget))
    except models.DikkatError as exc:
        shared.show_error(exc)
        return
    L = shared.lang()
    kinds = [tp(f"masks_ph_kept_{k}") for k in KEPT_PATTERNS]
    keys = result.keys.reshape(len(KEPT_PATTERNS), -1).mean(axis=1)
    titles = [tp("masks_ph_kept_panel", kind=kind, keys=nb.num(float(k), 1, L)) for kind, k in zip(kinds, keys)]
    chart(vh.kept_share_figure(result.share, titles, title=tp("masks_ph_keep_fig_title", budget=result.budget, n=n),
                               layer_title=tp("masks_layer_axis"), head_title=tp("masks_ph_head_axis"),
                               share_title=tp("masks_ph_kept_share"), lang=L), key="masks_ph_keep_fig")
    share = result.share.reshape(len(KEPT_PATTERNS), -1)
    frame = pd.DataFrame({
        tp("masks_ph_keep_col_kind"): kinds,
        tp("masks_ph_keep_col_pattern"): list(result.patterns),
        tp("masks_ph_keep_col_keys"): [nb.num(float(k), 1, L) for k in keys],
        tp("masks_ph_keep_col_mean"): [nb.percent(float(s.mean()), 1, L) for s in share],
        tp("masks_ph_keep_col_worst"): [nb.percent(float(s.min()), 1, L) for s in share],
        tp("masks_ph_keep_col_heads"): [int((s >= 0.9).sum()) for s in share],
    })
    shared.table(frame, hide_index=True)
    best = int(np.argmax(share.mean(axis=1)))
    st.caption(t("masks_ph_keep_caption", best=kinds[best], share=float(share[best].mean()), budget=result.budget,
                 heads=share.shape[1], keys=nb.num(float(keys[best]), 1, L)))
