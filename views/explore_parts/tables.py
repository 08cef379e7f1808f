"""Explore's numbers: the head summary table (one row per layer x head; a row chosen opens that head's heatmap) and
the exports under the figure (the chosen map as CSV, every map as NPZ; C08). Each takes the page's
:class:`~views.explore_parts.state.ExploreState`."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import cast

import numpy as np
import streamlit as st

from views import shared
from views.shared import t
from viz import transforms as tf
from viz.export import attentions_npz, matrix_csv
from viz.summary import head_summary_table

from .state import ExploreState, Shown, computed_or_stop


def _on_table_select(heads: int) -> None:
    """Summary table row chosen: open that head in the heatmap view."""
    event = st.session_state.get("summary_table")
    rows = getattr(getattr(event, "selection", None), "rows", None)
    if rows is None and isinstance(event, dict):
        rows = event.get("selection", {}).get("rows", [])
    if rows:
        row = int(rows[0])
        st.session_state["layer"] = row // heads
        st.session_state["head"] = row % heads
        st.session_state["view"] = "heatmap"


def summary(state: ExploreState) -> None:
    """The head summary table of the chosen stack (its statistics, one more pass the first time), their
    definitions and its CSV."""
    stats = computed_or_stop(state.analysis.statistics, state.stack)
    names = {k: t(f"stat_{k}") for k in tf.STATISTICS}
    table = head_summary_table(stats, column_names=names, layer_column=t("layer"), head_column=t("head"))
    st.caption(t("summary_intro"))
    if state.level != "tokens":  # the statistics are the model's pieces' (their shares per piece), at every level
        st.caption(t("explore_morph_summary"))
    shared.dataframe(table, decimals=3, key="summary_table",
                     on_select=functools.partial(_on_table_select, state.n_heads_raw), selection_mode="single-row",
                     hide_index=True)
    with st.expander(t("summary_definitions")):
        for k in tf.STATISTICS:
            st.markdown(f"- **{names[k]}**: {t(f'def_{k}')}")
    st.download_button(t("dl_summary_csv"), data=table.to_csv(index=False).encode("utf-8"),
                       file_name=f"dikkat_{state.model.replace('/', '_')}_{state.stack}_heads.csv", mime="text/csv",
                       on_click="ignore", key="dl_summary")


def _matrix_csv(matrix: np.ndarray, q_labels: list[str], k_labels: list[str]):
    return lambda: matrix_csv(matrix, q_labels, k_labels)


def _npz(model: str, text: str, pair: str | None):
    def make() -> bytes:
        a = shared.get_analysis(model, text, text_pair=pair)
        # a long input's weights are not held: its pooled overview maps instead
        # an AttentionStack is array-like (np.asarray builds it): what the exporter reads of each map
        maps = cast("Mapping[str, np.ndarray]", a.attentions if a.kept else a.overview)
        return attentions_npz(maps, tokens=[x.label for x in a.tokens], spans=[(x.start, x.end) for x in a.tokens],
                              special=[x.special for x in a.tokens],
                              target_tokens=[x.label for x in a.target_tokens] if a.target_tokens else None,
                              model=model, text=text)
    return make


def exports(state: ExploreState, shown: Shown) -> None:
    """The numbers (C08): the map a view drew (``shown``) as CSV, every map of the analysis as NPZ (built when
    clicked)."""
    exp = st.columns(2)
    with exp[0]:
        if shown.matrix is not None:
            head = state.head_names[min(state.head, len(state.head_names) - 1)]
            st.download_button(t("dl_csv", layer=state.layer, head=head),
                               data=_matrix_csv(shown.matrix, list(shown.q_labels), list(shown.k_labels)),
                               file_name=state.stem + ".csv", mime="text/csv", on_click="ignore", key="dl_csv")
    with exp[1]:
        st.download_button(t("dl_npz") if not state.long_mode else t("dl_npz_overview"),
                           data=_npz(state.model, state.text, state.pair),
                           file_name=f"dikkat_{state.model.replace('/', '_')}_attentions.npz",
                           mime="application/octet-stream", on_click="ignore", key="dl_npz")
    st.caption(t("export_hint"))
