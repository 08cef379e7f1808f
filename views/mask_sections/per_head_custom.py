"""The Masks per head section's custom mask: a pattern for every head not named, one per layer, one per head (typed
patterns; the engine says what is wrong with one, in the interface language)."""

from __future__ import annotations

import math

import pandas as pd
import streamlit as st

from views import shared
from .common import bind, t

tp = shared.t_plain
SAVED = "masks_ph_custom_saved"  # what the custom tables and pattern last held (no widget has this key)


def _text(value) -> str:
    """A table cell as a pattern: '' for an empty cell (None, NaN, spaces)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return str(value).strip()


def _whole(value) -> int | None:
    """A table cell as a whole number (the engine says which layer or head does not exist), None when empty."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def custom_spec(layers: int, heads: int, n: int) -> tuple:
    """The custom mask per head as a hashable key ``("custom", default, layer items, head items)``: the widgets'
    values, kept in Session State whatever the engine then says of them (a bad pattern is reported, never dropped),
    and kept when another preset or section is shown in between (Streamlit forgets an undrawn widget's value: the
    tables start again from what they last held, :data:`SAVED`)."""
    saved = st.session_state.setdefault(SAVED, {})
    st.caption(t("masks_ph_custom_help", n=n))
    if "masks_ph_default" not in st.session_state and saved.get("default"):
        st.session_state["masks_ph_default"] = saved["default"]
    bind("masks_ph_default")
    typed = st.text_input(t("masks_ph_default"), key="masks_ph_default")  # a pattern name, not a text
    saved["default"] = typed
    default = typed.strip() or "full"
    # fixed column names (the edits are kept by them), translated labels
    labels = {"layer": tp("masks_ph_col_layer"), "head": tp("masks_ph_col_head"), "pattern": tp("masks_ph_col_pattern")}
    pattern_column = st.column_config.TextColumn(labels["pattern"], max_chars=60)
    layers_key, heads_key = f"masks_ph_layers_{layers}", f"masks_ph_heads_{layers}_{heads}"
    if layers_key not in st.session_state:  # drawn afresh: from what the table last held (its base is then fixed)
        patterns = dict(saved.get(("layers", layers), ()))
        saved[("base_layers", layers)] = pd.DataFrame(
            {"layer": list(range(layers)), "pattern": [patterns.get(i, "") for i in range(layers)]})
    if heads_key not in st.session_state:
        rows = saved.get(("heads", layers, heads), ())
        saved[("base_heads", layers, heads)] = pd.DataFrame(
            {"layer": pd.Series([r[0] for r in rows], dtype="Int64"),
             "head": pd.Series([r[1] for r in rows], dtype="Int64"),
             "pattern": pd.Series([r[2] for r in rows], dtype="string")})
    st.caption(t("masks_ph_layers_help"))
    per_layer = st.data_editor(
        saved[("base_layers", layers)], key=layers_key, num_rows="fixed", hide_index=True,
        column_config={"layer": st.column_config.NumberColumn(labels["layer"], disabled=True),
                       "pattern": pattern_column})
    st.caption(t("masks_ph_heads_help"))
    per_head = st.data_editor(
        saved[("base_heads", layers, heads)], key=heads_key, num_rows="dynamic", hide_index=True,
        column_config={"layer": st.column_config.NumberColumn(labels["layer"], step=1, format="%d"),
                       "head": st.column_config.NumberColumn(labels["head"], step=1, format="%d"),
                       "pattern": pattern_column})
    layer_items = []
    for row in per_layer.itertuples(index=False):
        layer, pattern = _whole(row[0]), _text(row[1])
        if layer is not None and pattern:
            layer_items.append((layer, pattern))
    head_rows, head_items = [], {}
    for row in per_head.itertuples(index=False):
        layer, head, pattern = _whole(row[0]), _whole(row[1]), _text(row[2])
        if layer is not None or head is not None or pattern:
            head_rows.append((layer, head, pattern))
        if layer is not None and head is not None and pattern:
            head_items[(layer, head)] = pattern  # a pair named twice: the last row wins
    saved[("layers", layers)], saved[("heads", layers, heads)] = tuple(layer_items), tuple(head_rows)
    return ("custom", default, tuple(layer_items), tuple(sorted(head_items.items())))
