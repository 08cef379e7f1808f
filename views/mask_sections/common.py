"""What the Masks page's sections share: constants, cached runs, the page's state in the link (:data:`URL`),
layer/head pickers and figure helpers."""

from __future__ import annotations


import numpy as np
import streamlit as st

import models
import pagestate
from models.analysis import compare, masks as mmasks
from views import shared
from viz import masks as vm


t = shared.t
# The mask page draws n x n grids (and an n x n checkbox editor): keep texts short.
MAX_TOKENS = pagestate.declared.MASK_MAX
KINDS = pagestate.declared.MASK_KINDS
PRESETS = mmasks.STARTS
BERT_MODEL, GPT_MODEL, GQA_MODEL = "minilm-l6", "smollm2-135m", "smollm2-135m"
ENCDEC_PRESETS = pagestate.declared.ENCDEC_PRESETS
AUDIO_DIR = shared.ASSETS / "audio"
CLIPS = {"the_cat_chased_the_mouse_en.wav": "en", "kedi_fareyi_kovaladi_tr.wav": "tr"}
LANGUAGES = pagestate.declared.AUDIO_LANGUAGES


# ----------------------------------------------------------------------------------------- cached runs


@shared.cached
def native_run(name: str, text: str, max_tokens: int) -> models.Analysis:
    """Native run with hidden states and (when the model has a head) logits; shared, read-only."""
    loaded = shared.get_model(name)
    return models.analyze(loaded, text, hidden_states=True, keep_logits=loaded.head != "none", max_tokens=max_tokens)


@shared.cached
def mask_run(name: str, text: str, mask_key, max_tokens: int) -> compare.MaskRun:
    """One replaced mask measured against the native run. ``mask_key``: a mask string, or
    ``("custom", rows)`` with ``rows`` a tuple of tuples of bools (hashable for the cache)."""
    mask = np.array(mask_key[1], dtype=bool) if isinstance(mask_key, tuple) else mask_key
    return compare.run_mask(shared.get_model(name), text, mask, native_run(name, text, max_tokens),
                            max_tokens=max_tokens)


# ----------------------------------------------------------------------------------------------- helpers

# The page's state lives in the URL (issue 13: a link reopens the same section, masks, layer and head).
URL = shared.UrlState("masks")
bind = URL.bind


def layer_head(prefix: str, layers: int, heads: int, *, allow_mean: bool = False) -> tuple[int, int | None]:
    """Layer slider and head selector; returns (layer, head or None for the mean over heads)."""
    return shared.layer_head(f"{prefix}_layer", f"{prefix}_head", layers, heads, url=URL, slider=True,
                             labels=("masks_layer", "masks_head"), mean="masks_head_mean" if allow_mean else None)


def head_name(head: int | None) -> str:
    return t("masks_head_mean") if head is None else t("masks_head_n", h=head)


def pick_map(att: np.ndarray | models.AttentionStack, layer: int, head: int | None) -> np.ndarray:
    """(layers, heads, q, k) -> (q, k) of one head, or the mean over heads."""
    return att[layer].mean(axis=0) if head is None else att[layer, head]


def mask_title(kind: str) -> str:
    if kind == "sliding_window":
        return t("masks_mask_sliding_window_w", w=st.session_state.get("masks_window", 3))
    if kind == "strided":
        return t("masks_mask_strided_s", s=st.session_state.get("masks_stride", 3))
    if kind == "sink_window":
        return t("masks_mask_sink_window_wk", w=st.session_state.get("masks_sink_window", 3),
                 k=st.session_state.get("masks_sinks", 1))
    return t(f"masks_mask_{kind}")


def token_labels(tokens) -> list[str]:
    return [tok.label for tok in tokens]


def text_model_ok(loaded: models.LoadedModel) -> bool:
    if not loaded.reads_text:
        st.info(t("masks_text_models_only", model=shared.model_name(loaded)))
        return False
    return True


def chart(fig, key: str, columns: int = 1) -> None:
    """A figure of this page, in one of ``columns`` side-by-side columns (its title wrapped to fit one)."""
    shared.plotly_chart(fig, key=key, columns=columns, config={"displaylogo": False})


# built once for every session that shows the same thing (views/shared/figures.py)
_mask_figure, _attention_figure = shared.shared_figure(vm.mask_figure), shared.shared_figure(vm.attention_figure)
kl_figure, drift_figure = shared.shared_figure(vm.kl_figure), shared.shared_figure(vm.drift_figure)


def mask_figure(*args, **kwargs):
    """:func:`viz.masks.mask_figure` with its hover words and numbers in the interface language."""
    return _mask_figure(*args, **{"allowed_label": t("masks_allowed"), "forbidden_label": t("masks_forbidden"),
                                    "lang": shared.lang(),
                                    "query_title": t("query"), "key_title": t("key"), **kwargs})


def attention_figure(*args, **kwargs):
    """:func:`viz.masks.attention_figure` with its hover words, numbers and title note in the interface language."""
    return _attention_figure(*args, **{"query_title": t("query"), "key_title": t("key"), "lang": shared.lang(),
                                         "renormalised_label": t("masks_renormalised"), **kwargs})
