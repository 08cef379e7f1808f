"""Masks section 5: a mask per head (issue 31). Choose which heads keep the whole context (everything a window +
sinks; DuoAttention: the top-k heads by a score keep it; a custom pattern per layer and head), see the analysis under
that mask (the layers × heads grid of patterns, the loss and predictions against the model's own mask, the
key/value cache it needs), then what a sparse kernel would keep (:mod:`views.mask_sections.sparse_keep`).

Glue only: widgets -> models (``models.analysis.head_masks``, ``models.sparse``) -> viz (``viz.head_masks``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

import models
from models import ahead
from models.analysis import head_masks as hm
from models.experiments.common import long_text
from models.sparse import kept_share, kv_bytes
from views import hosting, shared
from viz import head_masks as vh
from viz import numbers as nb
from viz import text as vtext
from .common import URL, bind, chart, text_model_ok, t
from .per_head_custom import custom_spec
from .sparse_keep import section_sparse_keep

tp = shared.t_plain
LONG_TOKENS = 512  # the long text (and the sidebar's) cut here: a window of 64 then leaves most of it out
TEXTS = URL.options("masks_ph_text")
PRESETS = URL.options("masks_ph_preset")
SCORES = ("lost", "retrieval")
KINDS = ("full", "causal", "bidirectional", "sliding_window", "sink_window", "strided", "vertical_slash",
         "block_sparse", "custom")


# ----------------------------------------------------------------------------------------------- cached runs


def spec_of(key: tuple) -> hm.HeadMasks:
    """The :class:`HeadMasks` of a hashable key: ``("window", W, K)``, ``("heads", pairs, W, K)`` (the pairs keep
    the whole context, every other head a window + sinks) or ``("custom", default, layers, heads)`` (items)."""
    if key[0] == "window":
        return hm.window_everywhere(key[1], key[2])
    if key[0] == "heads":
        return hm.full_heads(list(key[1]), key[2], key[3])
    return hm.HeadMasks(default=key[1], layers=dict(key[2]), heads=dict(key[3]))


@shared.cached
def head_run(name: str, text: str, max_tokens: int, key: tuple) -> models.Analysis:
    """The text under a mask per head (weights computed when read; shared, read-only)."""
    return models.analyze(shared.get_model(name), text, mask=spec_of(key), max_tokens=max_tokens, keep=False)


@shared.cached
def cache_bytes(name: str, key: tuple, n: int) -> dict:
    """:func:`models.sparse.kv_bytes` of the mask at ``n`` tokens."""
    return kv_bytes(shared.get_model(name), spec_of(key), n)


@shared.cached
def lost_mass(name: str, text: str, max_tokens: int, budget: int) -> np.ndarray:
    """Float32 ``(layers, heads)``: the share of each head's attention an A-shape of ``budget`` keys (window + 4
    sinks) would lose on this text, 1 - :func:`models.sparse.kept_share`: the heads that need the whole context."""
    native = shared.get_analysis(name, text, max_tokens=max_tokens)
    n = native.attentions[shared.get_model(name).mask_stack].shape[-1]
    kept = kept_share(native, int(min(max(budget, 2), max(n, 2))), kinds=("a_shape",))
    return (1.0 - kept.share[0]).astype(np.float32)


def retrieval_result(name: str, loaded: models.LoadedModel):
    """The Experiments page's retrieval-heads result for ``name`` (this process's cache, or kept on disk), or None."""
    key = ("experiments", "retrieval_heads", name)
    found = shared.CACHE.get(key)
    return found if found is not None else shared.kept(key, ahead.experiment_job("retrieval_heads", name), loaded)


def run_retrieval(name: str, loaded: models.LoadedModel):
    """Run the needle test (the Experiments page's ``retrieval_heads``) with a progress bar; kept for every page,
    session and process. None after an error (shown)."""
    from models import experiments as E

    key, job = ("experiments", "retrieval_heads", name), ahead.experiment_job("retrieval_heads", name)
    bar = st.progress(0.0, text=t("masks_ph_needle_running"))

    def progress(f: float) -> None:
        bar.progress(f, text=t("masks_ph_needle_running"))

    try:
        return shared.CACHE.get_or_create(key, lambda: shared.run_and_keep(job, loaded, lambda: E.run(
            "retrieval_heads", loaded, progress=progress)))
    except models.DikkatError as exc:
        shared.show_error(exc)
        return None
    finally:
        bar.empty()


# ------------------------------------------------------------------------------------------------- widgets


def _window_sinks(limit: int) -> tuple[int, int]:
    c1, c2 = st.columns(2)
    bind("masks_ph_window", bounds=(1, limit))
    bind("masks_ph_sinks", bounds=(0, limit))
    window = c1.number_input(t("masks_ph_window"), min_value=1, max_value=limit, step=1, key="masks_ph_window")
    sinks = c2.number_input(t("masks_ph_sinks"), min_value=0, max_value=limit, step=1, key="masks_ph_sinks")
    return int(window), int(sinks)


def _duo_scores(name: str, loaded, text: str, budget: int) -> tuple[np.ndarray, str] | None:
    """The per-head score the DuoAttention preset ranks by, and its caption; None when none is there yet."""
    causal = loaded.family == "decoder" and loaded.head == "lm" and loaded.capture_path == "interface"
    options = SCORES if causal else SCORES[:1]
    # the needle test's scores when they are there (computed ahead for a class), else the instant one
    bind("masks_ph_score", "retrieval" if causal and retrieval_result(name, loaded) is not None else "lost",
         options=options)
    score = st.radio(t("masks_ph_score"), options, key="masks_ph_score", horizontal=True,
                     format_func=lambda s: t(f"masks_ph_score_{s}"))
    if score == "retrieval":
        result = retrieval_result(name, loaded)
        if result is None and (hosting.current().classroom or not st.button(t("masks_ph_needle_run"),
                                                                             key="masks_ph_needle_run")):
            st.info(t("masks_ph_needle_missing"))
            return None
        if result is None:
            result = run_retrieval(name, loaded)
            if result is None:
                return None
        return np.asarray(result.duo.scores, dtype=np.float64), t("masks_ph_score_retrieval_note",
                                                                 length=max(result.duo.lengths))
    with st.spinner(t("analysing")):
        lost = lost_mass(name, text, LONG_TOKENS, budget)
    return lost.astype(np.float64), t("masks_ph_score_lost_note", budget=budget)


def _spec_key(name: str, loaded, text: str, layers: int, heads: int, n: int) -> tuple | None:
    """The chosen mask per head as a hashable key (:func:`spec_of`), or None (nothing to run yet)."""
    bind("masks_ph_preset")
    preset = st.radio(t("masks_ph_preset"), PRESETS, key="masks_ph_preset", horizontal=True,
                      format_func=lambda p: t(f"masks_ph_preset_{p}"))
    st.caption(t(f"masks_ph_preset_{preset}_explain"))
    if preset == "custom":
        return custom_spec(layers, heads, n)
    window, sinks = _window_sinks(max(8192, n))
    if preset == "window":
        return ("window", window, sinks)
    total = layers * heads
    bind("masks_ph_k", max(1, round(0.1 * total)), bounds=(0, total))
    shared.clamp("masks_ph_k", total + 1)
    k = st.slider(t("masks_ph_k", total=total), 0, total, key="masks_ph_k")
    found = _duo_scores(name, loaded, text, window + sinks)
    if found is None:
        return None
    scores, note = found
    st.caption(note)
    spec = hm.duo_attention(scores, k, window, sinks)
    return ("heads", tuple(sorted(spec.heads)), window, sinks)


# ------------------------------------------------------------------------------------------------- results


def _grid(run: models.Analysis, stack: str, layers: int, heads: int) -> None:
    rules = run.head_masks[stack]
    patterns = [[rules.patterns[(layer, h)] for h in range(heads)] for layer in range(layers)]
    kinds = {k: tp(f"masks_ph_kind_{k}") for k in KINDS}
    kinds["a_shape"] = kinds["sink_window"]
    chart(vh.pattern_grid(patterns, kind_labels=kinds, title=tp("masks_ph_grid_title"),
                          layer_title=tp("masks_layer_axis"), head_title=tp("masks_head_axis"), lang=shared.lang()),
          key="masks_ph_grid")
    full = sum(vh.kind_of(p) == "full" for row in patterns for p in row)
    st.caption(t("masks_ph_grid_caption", full=full, total=layers * heads))


def _effect(native: models.Analysis, run: models.Analysis) -> None:
    """The loss and predictions under the mask against the model's own mask (or the sentence embedding's cosine)."""
    L = shared.lang()
    rows = []
    if native.loss is not None and run.loss is not None:
        rows.append((tp("masks_ph_loss"), nb.num(native.loss, 3, L), nb.num(run.loss, 3, L),
                     nb.num(run.loss - native.loss, 3, L, sign=True)))
    if native.next_token is not None and run.next_token is not None:
        a, b = native.next_token.ids[:, 0], run.next_token.ids[:, 0]
        rows.append((tp("masks_ph_next"), vtext.shown(native.next_token.tokens[-1][0]),
                     vtext.shown(run.next_token.tokens[-1][0]),
                     tp("masks_ph_same") if a[-1] == b[-1] else tp("masks_ph_changed")))
        agree = float((a == b).mean())
        # every column filled (issue 50: the Change column was empty on these rows): the change is this mask's
        # value less the model's own (its top-1 agreement with itself, 100 %; its cosine with itself, 1)
        rows.append((tp("masks_ph_top1"), nb.percent(1.0, 1, L), nb.percent(agree, 1, L),
                     nb.percent(agree - 1.0, 1, L, sign=True)))
    if native.embedding is not None and run.embedding is not None:
        x, y = np.asarray(native.embedding, np.float64), np.asarray(run.embedding, np.float64)
        cos = float(x @ y / max(float(np.linalg.norm(x) * np.linalg.norm(y)), 1e-30))
        rows.append((tp("masks_ph_cosine"), nb.num(1.0, 4, L), nb.num(cos, 4, L), nb.num(cos - 1.0, 4, L, sign=True)))
    if not rows:
        st.info(t("masks_ph_no_output"))
        return
    shared.table(pd.DataFrame(rows, columns=[tp("masks_ph_col_measure"), tp("masks_ph_col_own"),
                                             tp("masks_ph_col_this"), tp("masks_ph_col_change")]), hide_index=True)


def _cache(name: str, loaded, key: tuple, n: int) -> None:
    """The key/value cache the mask needs at the text's length and at the model's limit, beside the full cache."""
    if loaded.family != "decoder":
        st.caption(t("masks_ph_kv_none"))
        return
    L = shared.lang()
    rows = []
    for length in dict.fromkeys((n, int(min(loaded.max_positions or n, 131072)))):
        kv = cache_bytes(name, key, length)
        rows.append((nb.integer(length, L), nb.human_bytes(kv["full"], L), nb.human_bytes(kv["bytes"], L),
                     nb.num(kv["ratio"], 2, L) + "×"))
    st.markdown("**" + t("masks_ph_kv_title") + "**")
    shared.table(pd.DataFrame(rows, columns=[tp("masks_ph_kv_tokens"), tp("masks_ph_kv_full"), tp("masks_ph_kv_this"),
                                             tp("masks_ph_kv_ratio")]), hide_index=True)
    st.caption(t("masks_ph_kv_explain"))


def section_per_head(sel: shared.Selection) -> None:
    st.markdown(t("masks_ph_intro"))
    loaded = shared.load_model_ui(sel.model)
    if loaded is None or not text_model_ok(loaded):
        return
    bind("masks_ph_text")
    source = st.radio(t("masks_ph_text"), TEXTS, key="masks_ph_text", horizontal=True,
                      format_func=lambda s: t(f"masks_ph_text_{s}", n=LONG_TOKENS))
    text = long_text() if source == "long" else sel.text
    if not text.strip():
        st.info(t("masks_empty_text"))
        return
    native = shared.analysis_ui(sel.model, text, max_tokens=LONG_TOKENS)
    if native is None:
        return
    stack = loaded.mask_stack
    layers, heads = loaded.stacks[stack]
    n = int(native.attentions[stack].shape[-1])
    st.caption(t("masks_ph_tokens", n=n))
    key = _spec_key(sel.model, loaded, text, layers, heads, n)
    if key is None:
        return
    try:
        with st.spinner(t("analysing")):
            run = head_run(sel.model, text, LONG_TOKENS, key)
    except models.DikkatError as exc:
        shared.show_error(exc)
        return
    st.subheader(t("masks_ph_result"))
    _grid(run, stack, layers, heads)
    c1, c2 = st.columns(2)
    with c1:
        _effect(native, run)
    with c2:
        try:
            _cache(sel.model, loaded, key, n)
        except models.DikkatError as exc:
            shared.show_error(exc)
    section_sparse_keep(sel.model, text, LONG_TOKENS, native, stack, n)
