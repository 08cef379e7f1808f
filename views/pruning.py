"""Head pruning lab: switch heads off on a layers × heads grid and watch what changes.

Glue only: the state (which heads are off, per model) lives in ``st.session_state``; the numbers come
from ``models.analyze`` and ``models.pruning``; the figures from ``viz.pruning``.
"""

from __future__ import annotations

import dataclasses
import functools
import json

import numpy as np
import pandas as pd
import streamlit as st

import models
from models import ahead, pruning
from views import explore_levels as lv
from views import hosting, shared
from views.shared import jobs as heavy
from viz import morphemes as vm
from viz import numbers as vnum
from viz import pruning as vp
from viz import text as vtext

# figures built once for every session that shows the same thing (views/shared/figures.py)
attention_before_after, head_grid, pruning_curve = (shared.shared_figure(f) for f in (
    vp.attention_before_after, vp.head_grid, vp.pruning_curve))

t = shared.t
URL = shared.UrlState("pruning")
VERSION_KEY = "prune_click_version"  # bumps after a click on a grid so the chart's selection resets
CURVE_KEY = "prune_curve"  # shared.CACHE[(CURVE_KEY, model, texts)] -> PruningCurve
RANDOM_ORDERS = ahead.RANDOM_ORDERS  # the curve's random orders, as `make ahead` computes it


# ---------------------------------------------------------------- state: which heads are off


def _get_off(name: str) -> frozenset:
    return shared.heads_off(name)


def _pill_key(name: str, stack: str, layer: int) -> str:
    return f"prune_pills|{name}|{stack}|{layer}"


def _set_off(name: str, stacks: dict, heads) -> None:
    """Store the heads switched off (the grid's rows follow them when drawn). Called from callbacks."""
    shared.set_heads_off(name, heads)


def _on_pills(name: str, stack: str, layer: int, n_heads: int) -> None:
    on = set(st.session_state.get(_pill_key(name, stack, layer)) or [])
    off = {h for h in _get_off(name) if h[:2] != (stack, layer)}
    off |= {(stack, layer, h) for h in range(n_heads) if h not in on}
    shared.set_heads_off(name, off)


def _toggle(name: str, stacks: dict, head: tuple) -> None:
    _set_off(name, stacks, _get_off(name) ^ {head})


def _on_grid_click(name: str, stacks: dict, stack: str, key: str) -> None:
    """A click on a cell of an importance grid: toggle that head (the cell's x is the head, y the layer)."""
    cell = shared.grid_cell(key, *stacks[stack])
    if cell is not None:
        _toggle(name, stacks, (stack, *cell))
    st.session_state[VERSION_KEY] = st.session_state.get(VERSION_KEY, 0) + 1


def _num(value: float, decimals: int, *, sign: bool = False) -> str:
    """A number in the interface language's style (Turkish: 8,959, not 8.959, which reads as thousands)."""
    return vnum.num(float(value), decimals, shared.lang(), sign=sign)


def _prob_header(side: str) -> str:
    """A probability column's header, naming its side ("probability (all heads on)"): a table header is
    plain text (no markdown escapes) and two columns may not share a name."""
    return f"{shared.t_plain('prune_prob')} ({shared.t_plain(side)})"


def _continued(prompt: str, continuation: str) -> str:
    """Markdown: the prompt as typed, an arrow, then the continuation in bold (newlines as ⏎)."""
    cont = continuation.replace("\n", " ⏎ ").strip()
    body = f"**{shared.md(cont)}**" if cont else "—"
    return f"{shared.md(prompt.replace(chr(10), ' ⏎ '))} → {body}"


# ---------------------------------------------------------------- cached computations


@shared.cached
def _importance(name: str, text: str, kind: str) -> pruning.HeadScores:
    loaded = shared.get_model(name)
    if kind == "ablation":
        return pruning.ablation_scores(loaded, text)
    return pruning.gradient_importance(loaded, text)


@shared.cached
def _continuation(name: str, text: str, off: tuple) -> str:
    return pruning.greedy_continuation(shared.get_model(name), text, off, max_new_tokens=10).text


@shared.cached
def _curve_estimate(name: str, texts: tuple) -> pruning.CurveEstimate:
    return pruning.estimate_curve_seconds(shared.get_model(name), list(texts), random_orders=RANDOM_ORDERS)


@shared.cached
def _ranking(name: str, text: str, candidates: tuple, off: tuple) -> pruning.Ranking:
    return pruning.rank_sentences(shared.get_model(name), text, list(candidates), off)


def sentence_set() -> list[dict]:
    """The shipped sentence set, ``assets/sentences.json``: ``[{"text", "lang"}, ...]``."""
    return json.loads((shared.ASSETS / "sentences.json").read_text(encoding="utf-8"))["sentences"]


def _importance_ui(name: str, text: str, kind: str) -> pruning.HeadScores | None:
    try:
        with st.spinner(t("prune_computing_importance"), show_time=True):
            return _importance(name, text, kind)
    except models.DikkatError as exc:
        shared.show_error(exc)
        return None


# ---------------------------------------------------------------- presets


def _preset_all_on(name, stacks):
    _set_off(name, stacks, ())


def _preset_layer_off(name, stacks, stack):
    """Switch a whole layer off, added to the heads already off (a teacher builds "layers 3 and 5 off")."""
    layer = int(st.session_state.get("prune_layer_pick", 0))
    _set_off(name, stacks, _get_off(name) | pruning.whole_layer(stacks, stack, layer))


def _preset_from_importance(name, stacks, text, mode):
    """``mode``: ``keep_one`` (keep the most important head per layer) or ``k_least``."""
    kind = st.session_state.get("prune_source", "ablation")
    try:
        scores = _importance(name, text, kind)
    except models.DikkatError as exc:
        st.session_state["prune_preset_error"] = shared.error_text(exc)
        return
    if mode == "keep_one":
        off = pruning.keep_best_per_layer(scores)
    else:
        off = pruning.least_important(scores, min(int(st.session_state.get("prune_k", 1)), len(scores.ranked())))
    _set_off(name, stacks, off)


# ---------------------------------------------------------------- page

sel = shared.selection()
st.title(t("prune_title"))
st.caption(t("prune_intro"))

if not sel.text.strip():
    st.info(t("prune_need_text"))
    shared.stop()
spec = models.CATALOG.get(sel.model)
if spec is not None and spec.reads != "text":  # said before loading a model the page cannot use
    st.info(t("prune_text_model_only", model=sel.model))
    shared.stop()
loaded = shared.load_model_ui(sel.model)
if loaded is None:
    shared.stop()
name, text = sel.model, sel.text
if not loaded.reads_text:
    st.info(t("prune_text_model_only", model=name))
    shared.stop()
stacks = loaded.stacks
# the heads switched off live in the URL too (?off=decoder.3.1,...), so a link or a reload reopens them
shared.heads.heads_from_link(name, stacks)
kind = pruning.metric_kind(loaded)
metric_label = t(f"prune_metric_{kind}")
total = sum(layers * heads for layers, heads in stacks.values())
if loaded.capture_path == "fallback":
    st.caption(t("prune_fallback_note"))

stack_names = list(stacks)
main_stack = loaded.input_stack
grid_stack = main_stack
if len(stack_names) > 1:
    grid_stack = st.segmented_control(t("prune_stack"), stack_names, default=main_stack, key="prune_grid_stack") \
        or main_stack
n_layers, n_heads = stacks[grid_stack]

left, right = st.columns([1, 1], gap="large")

with left:
    st.subheader(t("prune_heads"))
    st.caption(t("prune_heads_help"))
    off = _get_off(name)
    shared.heads.heads_to_link(name)
    st.markdown(t("prune_count", off=len(off), total=total, share=len(off) / max(total, 1)))
    st.html(f"<style>{(shared.ASSETS / 'css' / 'pruning.css').read_text(encoding='utf-8')}</style>")
    # the grid first (issue 33: in the first screen at 1280 x 720), the presets below it
    # rows 33.5 px apart (Streamlit 1.67) and the border's padding: every layer shown when it fits in 560 px
    with st.container(height=min(560, 30 + 34 * n_layers), border=True, key="prune_grid"):
        for layer in range(n_layers):
            key = _pill_key(name, grid_stack, layer)  # each row drawn from the heads switched off (one writer)
            st.session_state[key] = [h for h in range(n_heads) if (grid_stack, layer, h) not in off]
            # a narrow label column: 12 heads' pills fit one row of the half page at 1280 px (their numbers larger in
            # projector mode, the pills not)
            label_col, pills_col = st.columns([1.2, 10.8], vertical_alignment="center", gap="xsmall")
            label_col.markdown(f"**{t('prune_layer_label', layer=layer)}**")
            pills_col.pills(t("prune_layer_label", layer=layer), list(range(n_heads)), selection_mode="multi",
                            key=key, format_func=lambda h: f"{h}", label_visibility="collapsed",
                            on_change=_on_pills, args=(name, grid_stack, layer, n_heads))
    source_labels = {k: t(f"prune_source_{k}") for k in ("ablation", "gradient")}  # bound now, not at format time
    st.radio(t("prune_source"), list(source_labels), key="prune_source", horizontal=True, format_func=source_labels.get)
    c1, c2 = st.columns([2, 3])  # the second label is the longer ("Her katmanda bir kafa bırak")
    c1.button(t("prune_all_on"), on_click=_preset_all_on, args=(name, stacks), key="prune_btn_all_on", width="stretch")
    c2.button(t("prune_keep_one"), on_click=_preset_from_importance, args=(name, stacks, text, "keep_one"),
              key="prune_btn_keep_one", help=t("prune_keep_one_help"), width="stretch")
    c3, c4 = st.columns([1, 2], vertical_alignment="bottom")
    c3.selectbox(t("prune_layer_pick"), list(range(n_layers)), key="prune_layer_pick")
    c4.button(t("prune_layer_off", layer=st.session_state.get("prune_layer_pick", 0)), on_click=_preset_layer_off,
              args=(name, stacks, grid_stack), key="prune_btn_layer_off", width="stretch")
    c5, c6 = st.columns([1, 2], vertical_alignment="bottom")
    c5.number_input(t("prune_k"), min_value=1, max_value=total, value=min(max(1, round(0.4 * total)), total),
                    step=1, key="prune_k")
    c6.button(t("prune_k_least", k=int(st.session_state.get("prune_k", 1))), on_click=_preset_from_importance,
              args=(name, stacks, text, "k_least"), key="prune_btn_k_least", width="stretch")
    if st.session_state.get("prune_preset_error"):
        st.error(st.session_state.pop("prune_preset_error"))

off = _get_off(name)
off_tuple = tuple(sorted(off))
before = shared.analysis_ui(name, text, max_tokens=pruning.MAX_TOKENS)
after = shared.analysis_ui(name, text, heads_off=frozenset(off), max_tokens=pruning.MAX_TOKENS) if off else before

with right:
    st.subheader(t("prune_what_changes"))
    if before is not None and after is not None:
        if loaded.head == "lm":
            m1, m2 = st.columns(2)
            # a loss (and its perplexity) on one of the two runs of the same model and text is on both
            b_loss, a_loss, b_ppl, a_ppl = before.loss, after.loss, before.perplexity, after.perplexity
            if b_loss is not None and a_loss is not None and b_ppl is not None and a_ppl is not None:
                m1.metric(t("prune_loss"), _num(a_loss, 3), delta=_num(a_loss - b_loss, 3, sign=True) if off else None,
                          delta_color="inverse", help=t("prune_loss_help"), border=True)
                m2.metric(t("prune_ppl"), _num(a_ppl, 1), delta=_num(a_ppl - b_ppl, 1, sign=True) if off else None,
                          delta_color="inverse", border=True)
            st.markdown(f"**{t('prune_next_token')}**")
            nb, na = before.next_token, after.next_token
            assert nb is not None and na is not None  # a language-model head's runs keep their top next tokens
            shared.table(pd.DataFrame({
                shared.t_plain("prune_rank"): np.arange(1, nb.ids.shape[1] + 1),
                shared.t_plain("prune_before"): [vtext.shown(s) for s in nb.tokens[-1]],
                _prob_header("prune_before"): nb.probs[-1].astype(np.float64),
                shared.t_plain("prune_after"): [vtext.shown(s) for s in na.tokens[-1]],
                _prob_header("prune_after"): na.probs[-1].astype(np.float64),
            }), decimals=4, hide_index=True)
            st.markdown(f"**{t('prune_continuation')}**")
            try:
                cont_before = _continuation(name, text, ())
                cont_after = _continuation(name, text, off_tuple) if off else cont_before
                st.markdown(f"{t('prune_before')}: {_continued(text, cont_before)}")
                st.markdown(f"{t('prune_after')}: {_continued(text, cont_after)}")
            except models.DikkatError as exc:
                shared.show_error(exc)
        elif loaded.head == "mlm":
            mask = loaded.tokenizer.mask_token or "[MASK]"
            if not before.mask_fills:
                st.info(t("prune_mlm_need_mask", mask=mask))
            for i, (pos, fills) in enumerate(sorted(before.mask_fills.items()), start=1):
                fills_after = after.mask_fills[pos]
                top = int(fills.ids[0, 0])
                probs_after = dict(zip(fills_after.ids[0].tolist(), fills_after.probs[0].tolist()))
                p_before = float(fills.probs[0, 0])
                p_after = probs_after.get(top)
                label = t("prune_top_fill_prob", token=fills.tokens[0][0].strip(), i=i)
                if p_after is None:
                    st.metric(label, f"< {_num(fills_after.probs[0, -1], 4)}", border=True)
                else:
                    st.metric(label, _num(p_after, 4), delta=_num(p_after - p_before, 4, sign=True) if off else None,
                              border=True)
                st.markdown(f"**{t('prune_mask_fill', i=i)}**")
                shared.table(pd.DataFrame({
                    shared.t_plain("prune_rank"): np.arange(1, fills.ids.shape[1] + 1),
                    shared.t_plain("prune_before"): [vtext.shown(s) for s in fills.tokens[0]],
                    _prob_header("prune_before"): fills.probs[0].astype(np.float64),
                    shared.t_plain("prune_after"): [vtext.shown(s) for s in fills_after.tokens[0]],
                    _prob_header("prune_after"): fills_after.probs[0].astype(np.float64),
                }), decimals=4, hide_index=True)
        elif loaded.head == "none" and (before.embedding is None or after.embedding is None):
            # a decoder whose readout was taken away (XLNet: models.anatomy.decoder.readout_sees_target) keeps only
            # its maps: no sentence embedding to compare
            st.info(t("device_readout_sees_target"))
        elif loaded.head == "none":
            assert before.embedding is not None and after.embedding is not None  # the branch above took the others
            cos = float(pruning.cosine(before.embedding, after.embedding))
            st.metric(t("prune_cosine"), _num(cos, 4), delta=_num(cos - 1, 4, sign=True) if off else None,
                      help=t("prune_cosine_help"), border=True)
            candidates = tuple(s["text"] for s in sentence_set() if s["text"].strip() != text.strip())
            try:
                r_before = _ranking(name, text, candidates, ())
                r_after = _ranking(name, text, candidates, off_tuple) if off else r_before
                rank_before = np.empty(len(candidates), dtype=int)
                rank_before[r_before.order] = np.arange(1, len(candidates) + 1)
                rank_after = np.empty(len(candidates), dtype=int)
                rank_after[r_after.order] = np.arange(1, len(candidates) + 1)
                st.markdown(f"**{t('prune_ranking')}**")
                order = r_before.order
                shared.table(pd.DataFrame({
                    shared.t_plain("prune_sentence"): [candidates[i] for i in order],
                    shared.t_plain("prune_before"): [f"#{rank_before[i]} · {_num(r_before.similarity[i], 3)}"
                                                     for i in order],
                    shared.t_plain("prune_after"): [f"#{rank_after[i]} · {_num(r_after.similarity[i], 3)}"
                                                    for i in order],
                }), hide_index=True)
                st.caption(t("prune_ranking_help"))
            except models.DikkatError as exc:
                shared.show_error(exc)
        else:
            if before.loss is not None and after.loss is not None:
                st.metric(t("prune_seq2seq_loss"), _num(after.loss, 3),
                          delta=_num(after.loss - before.loss, 3, sign=True) if off else None,
                          delta_color="inverse", border=True)

# ---------------------------------------------------------------- downstream head attention
if before is not None and after is not None:
    st.divider()
    st.subheader(t("prune_downstream"))
    st.caption(t("prune_downstream_help"))
    att_stack = grid_stack if grid_stack in before.attentions else next(iter(before.attentions))
    a_layers, a_heads = before.attentions[att_stack].shape[:2]
    layer_sel, head_sel = shared.layer_head("prune_show_layer", "prune_show_head", a_layers, a_heads, url=URL,
                                            labels=("prune_show_layer", "prune_show_head"), layer_default=a_layers - 1)
    URL.sync_bound()  # the heads switched off have their own writer (shared.heads)
    q_tokens, k_tokens = before.axis_tokens(att_stack)
    # words / morphemes: rows the mean of a unit's query pieces, columns the sum of its key pieces (as Explore)
    level, q_axis, k_axis = lv.page_axes(before, att_stack, lv.control("prune_level", t("prune_level_help")))
    wb = before.attentions[att_stack][layer_sel, head_sel]
    wa = after.attentions[att_stack][layer_sel, head_sel]
    if q_axis is not None:
        wb, wa = vm.merge_units(wb, q_axis, k_axis), vm.merge_units(wa, q_axis, k_axis)
    fig = attention_before_after(
        wb, wa, [tk.label for tk in q_tokens] if q_axis is None else q_axis.labels,
        [tk.label for tk in k_tokens] if k_axis is None else k_axis.labels,
        titles=(t("prune_before"), t("prune_after"), t("prune_diff")), query_title=t("prune_query"),
        key_title=t("prune_key"), weight_title=t("prune_weight"), lang=shared.lang())
    vm.panel_hover(fig, lv.axis_hover(q_axis), lv.axis_hover(k_axis))  # the morpheme level: each unit's labels
    shared.plotly_chart(fig, width="stretch", key="prune_attn_fig")
    st.caption(t("prune_max_change", value=float(np.abs(wa - wb).max(initial=0.0))))
    if level != "tokens":
        st.caption(t("prune_level_note", level=lv.level_names()[level]))
        lv.describe(q_axis, q_tokens)
    first_off = min((layer for stack, layer, _ in off if stack == att_stack), default=None)
    if first_off is not None and layer_sel <= first_off and att_stack == grid_stack:
        st.caption(t("prune_no_upstream", layer=first_off))

# ---------------------------------------------------------------- head importance
st.divider()
st.subheader(t("prune_importance"))
st.caption(t("prune_importance_intro", metric=metric_label))
if kind == "embedding_distance":
    st.caption(t("prune_importance_embedding_note"))
imp_key = f"prune_imp_shown|{name}|{text}"
if st.button(t("prune_compute_importance"), key="prune_btn_importance"):
    st.session_state[imp_key] = True
if st.session_state.get(imp_key):
    ablation = _importance_ui(name, text, "ablation")
    gradient = _importance_ui(name, text, "gradient")
    if ablation is not None and gradient is not None:
        off_grid = np.zeros((n_layers, n_heads), dtype=bool)
        for stack, layer, head in off:
            if stack == grid_stack:
                off_grid[layer, head] = True
        version = st.session_state.get(VERSION_KEY, 0)
        g1, g2 = st.columns(2)
        grad_short = t("prune_gradient_short_embedding" if kind == "embedding_distance" else "prune_gradient_short")
        for col, scores, title, short, diverging, tag in (
            (g1, ablation, t("prune_ablation_title", metric=metric_label), t("prune_ablation_short"),
             kind != "embedding_distance", "abl"),
            (g2, gradient, t("prune_gradient_title"), grad_short, False, "grad"),
        ):
            key = f"prune_grid_{tag}_{version}"
            fig = head_grid(scores.values[grid_stack], off_grid, title=title, score_title=short,
                               layer_title=t("prune_layer"), head_title=t("prune_head"), off_title=t("prune_off"),
                               diverging=diverging, lang=shared.lang())
            shared.plotly_chart(fig, container=col, key=key, selection_mode="points", width="stretch",
                             on_select=functools.partial(_on_grid_click, name, stacks, grid_stack, key))
        try:
            rho = pruning.rank_correlation(ablation.flat(), gradient.flat())
            rho_abs = pruning.rank_correlation(np.abs(ablation.flat()), gradient.flat())
        except models.UndefinedError as exc:  # a constant score: no ρ, and the reason instead of "nan"
            st.caption(shared.error_text(exc))
        else:
            st.markdown(t("prune_spearman", rho=rho, rho_abs=rho_abs, neg=int((ablation.flat() < 0).sum()),
                          total=total))
        st.caption(t("prune_importance_time", seconds=ablation.seconds, passes=ablation.forward_passes, heads=total))

# ---------------------------------------------------------------- pruning curve
st.divider()
st.subheader(t("prune_curve"))
set_texts = [s["text"] for s in sentence_set()]
st.caption(t("prune_curve_intro", n=len(set_texts), orders=RANDOM_ORDERS))
st.caption(t("prune_curve_reference"))
# one curve per (model, texts) for every session, kept on disk (models.ahead: `make ahead`, a classroom server's first
# start, or the first run here) so that no student and no replica computes it again
curve_key = (CURVE_KEY, name, tuple(set_texts))
curve_job = ahead.curve_job(name, set_texts, random_orders=RANDOM_ORDERS)
curve = shared.CACHE.get(curve_key) or shared.kept(curve_key, curve_job, loaded)
# a class shares one curve: in classroom mode a curve that is there is not computed again
pressed = (curve is None or not hosting.current().classroom) and st.button(
    t("prune_compute_curve") if curve is None else t("prune_compute_curve_again"), key="prune_btn_curve")


def run_curve(progress, loaded=loaded, texts=tuple(set_texts)) -> pruning.PruningCurve:
    """Importance, then the curve (on the heavy-work pool: one run per model and texts for every session; what it
    reads is bound here, as the page's namespace is emptied when the run ends: views/shared/pagerun.py)."""
    importance = pruning.gradient_importance(loaded, list(texts), progress=lambda f: progress(0.2 * f))
    result = pruning.pruning_curve(loaded, list(texts), importance, random_orders=RANDOM_ORDERS,
                                   progress=lambda f: progress(0.2 + 0.8 * f))
    # the whole run's time (importance + curve), as the estimate counts it (models.ahead.compute does the same)
    return dataclasses.replace(result, seconds=importance.seconds + result.seconds)


curve = heavy.kept_run("pruning_curve", (name, tuple(set_texts)), cache_key=curve_key, ahead_job=curve_job,
                       loaded=loaded, compute=run_curve, pressed=pressed, again=curve is not None,
                       stop_key="prune_curve_stop", text=lambda job: t("prune_curve_progress")) or curve
if curve is None:
    try:
        estimate = _curve_estimate(name, tuple(set_texts))
        st.caption(t("prune_curve_estimate", seconds=estimate.seconds, probe=estimate.probe_seconds))
    except models.DikkatError:
        pass  # the run itself says what is wrong
else:
    shared.plotly_chart(pruning_curve(
        curve.shares, curve.by_importance, curve.random, metric_title=metric_label,
        importance_label=t("prune_curve_by_importance"), random_label=t("prune_curve_random"),
        share_title=t("prune_curve_share"), lang=shared.lang()), width="stretch", key="prune_curve_fig")
    i40 = int(np.argmin(np.abs(curve.shares - 0.4)))
    st.caption(t("prune_curve_time", seconds=curve.seconds, n40=int(curve.n_pruned[i40]),
                 v40=float(curve.by_importance[i40]), r40=float(curve.random_mean[i40]),
                 v0=float(curve.by_importance[0])))
    since = shared.kept_since(curve_job, loaded)
    if since:
        st.caption(t("prune_curve_kept", when=since))
st.caption(t("prune_background"))  # the literature, below the lab (the grid comes first on the screen)
