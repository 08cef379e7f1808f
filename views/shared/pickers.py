"""The one layer and head picker of every page: a layer (slider or list) and a head (list, optionally with the
mean over heads), kept in the link and inside the model's range."""

from __future__ import annotations


import streamlit as st

import pagestate


from .strings import t
from .urlstate import UrlState, clamp

MEAN = pagestate.MEAN
"""The head option that stands for the mean over heads (its value in the link: ``head=mean``)."""


def layer_head(layer_key: str, head_key: str, n_layers: int, n_heads: int, *, url: UrlState,
               columns=None, labels: tuple[str, str] = ("teach_layer", "teach_head"), slider: bool = False,
               mean: str | None = None, layer_default: int = 0, head_default: int | str = 0,
               layer_label: str | None = None, disabled: tuple[bool, bool] = (False, False),
               head_help: str | None = None) -> tuple[int, int | None]:
    """Draw a layer picker and a head picker side by side and return what they hold.

    Both values come from the link first (a shared URL reopens the same layer and head), are kept inside
    ``range(n_layers)`` / the head options when the model or the text changed (:func:`clamp`), and go back into
    the link through ``url`` (the page's :class:`UrlState`, written at the page's end). A widget is always drawn
    when it has a choice to offer (a widget that is not drawn forgets its value); a model with one layer shows no
    layer slider.

    Args:
        layer_key, head_key: the widgets' Session State keys and query parameters.
        n_layers, n_heads: the stack's layers and (query) heads, ``>= 1``.
        url: the page's link state.
        columns: two containers to draw in (default: two new columns).
        labels: string keys of the two labels.
        slider: the layer as a slider (else a list).
        mean: string key of the label of an extra head option, the mean over heads (returned as ``None``).
        layer_default, head_default: the values when neither the session nor the link has one
            (``head_default`` may be :data:`MEAN`).
        layer_label: the layer label as shown (overrides ``labels[0]``, e.g. Explore's rollout).
        disabled: draw the layer / head widget inactive (it keeps its value).
        head_help: tooltip of the head widget.

    Returns:
        ``(layer, head)``: ints, ``head`` is ``None`` for the mean over heads.
    """
    heads: list = ([MEAN] if mean else []) + list(range(n_heads))
    layer_default = min(max(layer_default, 0), max(n_layers - 1, 0))
    url.bind(layer_key, layer_default, bounds=(0, max(n_layers - 1, 0)))
    url.bind(head_key, head_default, options=heads)
    clamp(layer_key, n_layers, layer_default)
    if head_key in st.session_state and st.session_state[head_key] not in heads:
        value = st.session_state[head_key]
        st.session_state[head_key] = int(value) if str(value).strip().isdecimal() and int(value) < n_heads \
            else head_default
    c1, c2 = columns if columns is not None else st.columns(2)
    with c1:
        if n_layers > 1:
            label = layer_label or t(labels[0])
            if slider:
                st.slider(label, 0, n_layers - 1, key=layer_key, disabled=disabled[0])
            else:
                st.selectbox(label, list(range(n_layers)), key=layer_key, disabled=disabled[0])
    with c2:
        st.selectbox(t(labels[1]), heads, key=head_key, disabled=disabled[1], help=head_help,
                     format_func=lambda h: t(mean) if h == MEAN and mean else str(h))
    layer = int(st.session_state.get(layer_key) or 0) if n_layers > 1 else 0
    head = st.session_state.get(head_key, head_default)
    return min(layer, n_layers - 1), (None if head == MEAN else min(int(head), n_heads - 1))


def grid_cell(key: str, layers: int, heads: int) -> tuple[int, int] | None:
    """The ``(layer, head)`` of the first point clicked on a layer x head grid chart (Session State ``key``: the
    chart's selection; a cell's x is the head, y the layer), or None (no click, or a point off the grid)."""
    event = st.session_state.get(key) or {}
    for point in ((event.get("selection") or {}).get("points") or [])[:1]:
        try:
            layer, head = int(round(float(point["y"]))), int(round(float(point["x"])))
        except (KeyError, TypeError, ValueError):
            continue
        if 0 <= layer < layers and 0 <= head < heads:
            return layer, head
    return None


REPLACED_MASKS = pagestate.declared.REPLACED_MASKS
"""The masks Information flow and Why a head attends offer (the same run of one text, shared by both pages)."""


def mask_and_heads_off(url: UrlState, prefix: str, heads_off: frozenset, columns) -> tuple[str, frozenset]:
    """The mask selector and the "heads switched off on Head pruning" toggle of a page that analyses one run
    (``<prefix>_mask``, ``<prefix>_use_off``, both kept in the link through ``url``), drawn in ``columns`` (two
    containers); returns ``(mask, the heads switched off when the toggle is on, else none)``."""
    c1, c2 = columns
    url.bind(f"{prefix}_mask")
    mask = c1.selectbox(t("flow_mask"), REPLACED_MASKS, key=f"{prefix}_mask", format_func=lambda m: t(f"flow_mask_{m}"))
    url.bind(f"{prefix}_use_off")
    use_off = c2.toggle(t("flow_use_off", n=len(heads_off)), key=f"{prefix}_use_off", disabled=not heads_off)
    return mask, heads_off if use_off else frozenset()


def self_stack(url: UrlState, key: str, stacks: list[str]) -> str:
    """The self-attention stack to show: the only one, or a choice kept in the link (``key``, default decoder)."""
    if len(stacks) < 2:
        return stacks[0]
    url.bind(key, options=stacks)
    return st.radio(t("teach_stack"), stacks, key=key, horizontal=True, format_func=lambda s: t(f"stack_{s}"))
