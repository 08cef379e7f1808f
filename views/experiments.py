"""Experiments page (issue 15): published findings about attention, run live on a bundled model, with the published
numbers next to ours and what differs.

Glue only: the numbers come from ``models.experiments``, the figures from ``viz.experiments`` and ``viz.pruning``.
A result is computed once for all sessions and kept in the shared byte-bounded cache and on disk
(:mod:`models.ahead`: ``make ahead`` and a classroom server's first start compute every one ahead); a page reads it
from there before offering to run it, and in classroom mode never runs it again.
"""

from __future__ import annotations

import functools
import time
from typing import cast

import numpy as np
import pandas as pd
import streamlit as st

import models
from models import ahead
from models import experiments as E
from models.experiments.verdicts import verdicts
from views import hosting, shared
from views.shared import jobs as heavy
from viz import experiments as vx
from viz import numbers as nb
from viz import pruning as vp
from viz import text as vtext

t, tp = shared.t, shared.t_plain
L = shared.lang()
KEYS = list(E.EXPERIMENTS)
URL = shared.UrlState("experiments")


def _pct(value: float, decimals: int = 1) -> str:
    return nb.percent(float(value), decimals, L)


def _nats(value: float, sign: bool = False) -> str:
    return nb.num(float(value), 2, L, sign=sign) + " " + tp("exp_nats")


def _compare(which: str, result, rows: list[tuple[str, str, str]]) -> None:
    """The published numbers next to ours: ``(measure, published, ours)`` rows (all escaped by ``shared.table``), and
    whether each finding held here by the rule written beside it (:func:`models.experiments.verdicts.verdicts`)."""
    marks = {True: "exp_held", False: "exp_not_held", None: "exp_not_compared"}
    held = [tp(marks[v.held]) + " — " + tp(f"exp_rule_{v.rule}") for v in verdicts(which, result)]
    shared.table(pd.DataFrame([row + (h,) for row, h in zip(rows, held)],
                              columns=[tp("exp_col_measure"), tp("exp_col_published"), tp("exp_col_ours"),
                                       tp("exp_col_held")]), hide_index=True)


@shared.cached
def _estimate(which: str, name: str) -> float:
    return E.estimate_seconds(which, shared.get_model(name))


# ---------------------------------------------------------------------------------------------------- results
def _show_sinks(r: E.SinksResult, loaded: models.LoadedModel) -> None:
    share, stream = r.share, r.streaming
    c1, c2 = st.columns(2)
    on_first = tp("exp_sinks_first_token", token=vtext.plotly_text(vtext.shown(share.first_token)))
    shared.plotly_chart(vx.per_layer_lines(
        {on_first: share.per_layer}, title=tp("exp_sinks_share_title", n=share.tokens), layer_title=tp("exp_layer"),
        value_title=on_first,
        bottom=2, bottom_label=tp("exp_sinks_bottom"), lang=L),
        container=c1, width="stretch", key="exp_fig_sinks_share")
    shared.plotly_chart(vx.streaming_figure(
        stream.windows, stream.window, stream.with_sinks, stream.full,
        title=tp("exp_sinks_stream_title", n=stream.tokens),
        window_label=tp("exp_sinks_window"), sinks_label=tp("exp_sinks_with", k=stream.sinks),
        full_label=tp("exp_sinks_full"), window_title=tp("exp_sinks_window_size"), loss_title=tp("exp_loss"), lang=L),
        container=c2, width="stretch", key="exp_fig_sinks_stream")
    low, high = share.bottom_top()
    w0 = int(np.argmin(stream.windows))
    above = share.per_layer[2:]
    _compare("sinks", r, [
        (tp("exp_sinks_m_share"), tp("exp_sinks_p_share"), f"{_pct(low)} / {_pct(high)}"),
        (tp("exp_sinks_m_layers"), tp("exp_sinks_p_layers"),
         tp("exp_sinks_o_layers", n=int((above > 0.2).sum()), m=len(above))),
        (tp("exp_sinks_m_window", w=int(stream.windows[w0])), tp("exp_sinks_p_window"),
         _nats(stream.window_gap[w0], sign=True)),
        (tp("exp_sinks_m_sinks", w=int(stream.windows[w0]), k=stream.sinks), tp("exp_sinks_p_sinks"),
         _nats(stream.sinks_gap[w0], sign=True)),
    ])
    st.caption(t("exp_sinks_differs", model=shared.model_name(loaded)))


def _show_induction(r, loaded: models.LoadedModel) -> None:
    st.caption(t("exp_ind_setup", n=r.sequences, length=r.length, k=len(r.top)))
    c1, c2 = st.columns(2)
    off = np.zeros(r.scores.shape, dtype=bool)
    for _, layer, head in r.top:
        off[layer, head] = True
    shared.plotly_chart(vp.head_grid(r.scores, off, title=tp("exp_ind_grid_title"),
                                     score_title=tp("exp_ind_score"), layer_title=tp("exp_layer"),
                                     head_title=tp("exp_head"), off_title=tp("exp_ind_off"), lang=L),
                        container=c1, width="stretch", key="exp_fig_ind_grid")
    rnd = r.loss_second_random
    labels = [tp("exp_ind_first"), tp("exp_ind_second"), tp("exp_ind_second_off", k=len(r.top)),
              tp("exp_ind_second_random", k=len(r.top))]
    values = [r.loss_first, r.loss_second, r.loss_second_off] + ([float(np.median(rnd))] if rnd.size else [])
    spread = [None, None, None] + ([(float(rnd.min()), float(rnd.max()))] if rnd.size else [])
    shared.plotly_chart(vx.loss_bars(labels[:len(values)], values, title=tp("exp_ind_loss_title"),
                                     loss_title=tp("exp_loss"), spread=spread, lang=L),
                        container=c2, width="stretch", key="exp_fig_ind_loss")
    best = r.top[0]
    _compare("induction", r, [
        (tp("exp_ind_m_heads"), tp("exp_ind_p_heads"),
         tp("exp_ind_o_heads", n=int((r.scores > 0.3).sum()), score=_pct(r.scores[best[1], best[2]], 0),
            layer=best[1], head=best[2])),
        (tp("exp_ind_m_loss"), tp("exp_ind_p_loss"), f"{_nats(r.loss_first)} → {_nats(r.loss_second)}"),
        (tp("exp_ind_m_off", k=len(r.top)), tp("exp_ind_p_off"),
         tp("exp_ind_o_off", off=_nats(r.loss_second_off - r.loss_second, sign=True),
            rnd=_nats(float(np.median(rnd)) - r.loss_second, sign=True) if rnd.size else "–", n=int(rnd.size),
            lo=_nats(float(rnd.min(initial=r.loss_second)) - r.loss_second, sign=True),
            hi=_nats(float(rnd.max(initial=r.loss_second)) - r.loss_second, sign=True))),
    ])
    st.caption(t("exp_ind_differs", model=shared.model_name(loaded)))


def _show_prunable(r, loaded: models.LoadedModel) -> None:
    c = r.curve
    fig = vp.pruning_curve(c.shares, c.by_importance, c.random, metric_title=tp(f"prune_metric_{c.metric}"),
                           importance_label=tp("prune_curve_by_importance"), random_label=tp("prune_curve_random"),
                           share_title=tp("prune_curve_share"), title=tp("exp_prune_title", n=len(c.texts)), lang=L)
    from models.experiments import prunable

    pub = prunable.PUBLISHED
    vx.published_marks(fig, [(pub["michel_wmt_flat"], tp("exp_prune_mark_wmt")),
                             (pub["voita_encoder_off"], tp("exp_prune_mark_voita"))],
                       band=(pub["michel_bert_flat"], tp("exp_prune_mark_bert")))
    shared.plotly_chart(fig, width="stretch", key="exp_fig_prune")
    _compare("prunable", r, [
        (tp("exp_prune_m_flat"), tp("exp_prune_p_flat"), f"{_pct(r.flat_share, 0)} / {_pct(r.flat_share_random, 0)}"),
        (tp("exp_prune_m_voita"), tp("exp_prune_p_voita"),
         nb.num(float(np.interp(pub["voita_encoder_off"], c.shares, c.by_importance)), 3, L)),
    ])
    st.caption(t("exp_prune_differs", model=shared.model_name(loaded)))


def _show_clark(r, loaded: models.LoadedModel) -> None:
    tg, pc = r.targets, r.patterns
    first = vtext.plotly_text(tg.first_token or "[CLS]")
    sep = vtext.plotly_text(" ".join(tg.separator_tokens) or "[SEP]")
    series = {tp("exp_clark_t_first", token=first): tg.per_layer["first"],
              tp("exp_clark_t_separator", token=sep): tg.per_layer["separator"],
              tp("exp_clark_t_punctuation"): tg.per_layer["punctuation"],
              tp("exp_clark_t_previous"): tg.per_layer["previous"], tp("exp_clark_t_next"): tg.per_layer["next"]}
    c1, c2 = st.columns([3, 2])
    shared.plotly_chart(vx.per_layer_lines(series, title=tp("exp_clark_lines_title", n=len(tg.sentences)),
                                           layer_title=tp("exp_layer"), value_title=tp("exp_share"), lang=L),
                        container=c1, width="stretch", key="exp_fig_clark_lines")
    shared.plotly_chart(vx.pattern_bars(pc.counts, {k: tp(f"exp_clark_type_{k.replace('+', '_')}") for k in pc.counts},
                                        title=tp("exp_clark_types_title", maps=pc.maps),
                                        count_title=tp("exp_clark_maps"), lang=L),
                        container=c2, width="stretch", key="exp_fig_clark_types")
    layers = len(tg.per_layer["separator"])
    lo, hi = E.clark.middle_layers(layers)
    prev, nxt = tg.heads_above("previous"), tg.heads_above("next")
    shares = pc.shares
    _compare("clark", r, [
        (tp("exp_clark_m_sep", lo=lo, hi=hi - 1), tp("exp_clark_p_sep"),
         _pct(float(tg.per_layer["separator"][lo:hi].mean()))),
        (tp("exp_clark_m_prev"), tp("exp_clark_p_prev"), tp("exp_clark_o_heads", n=len(prev), heads=_heads(prev))),
        (tp("exp_clark_m_next"), tp("exp_clark_p_next"), tp("exp_clark_o_heads", n=len(nxt), heads=_heads(nxt))),
        (tp("exp_clark_m_vertical"), tp("exp_clark_p_vertical"), _pct(shares["vertical"], 0)),
        (tp("exp_clark_m_hetero"), tp("exp_clark_p_hetero"), _pct(shares["heterogeneous"], 0)),
    ])
    st.caption(t("exp_clark_differs", model=shared.model_name(loaded), n=len(tg.sentences), layers=layers))


def _show_alignment(r, loaded: models.LoadedModel) -> None:
    st.caption(t("exp_align_caption"))
    cols = st.columns(len(r.clips))
    for i, (clip, col) in enumerate(zip(r.clips, cols)):
        a = clip.alignment
        labels = [vtext.shown(tok) for tok in clip.tokens]
        labels = (labels + ["<|endoftext|>"])[: a.matrix.shape[0]]
        shared.plotly_chart(vx.dtw_figure(a.matrix, labels, a.text_indices, a.time_indices, frame_seconds=0.02,
                                          title=tp("exp_align_fig_title",
                                                   text=vtext.plotly_text(_cut(clip.transcript, 44))),
                                          time_title=tp("exp_align_time"), path_label=tp("exp_align_path"), lang=L),
                            container=col, width="stretch", key=f"exp_fig_align_{i}")
        table = pd.DataFrame({tp("exp_align_word"): clip.words, tp("exp_align_start_ours"): clip.word_starts,
                              tp("exp_align_start_hf"): clip.hf_word_starts, tp("exp_align_end_ours"): clip.word_ends,
                              tp("exp_align_end_hf"): clip.hf_word_ends})
        shared.table(table, decimals=2, hide_index=True, container=col)
    _compare("alignment", r, [
        (tp("exp_align_m_ours"), tp("exp_align_p_ours"),
         f"{nb.num(r.max_difference, 2, L)} {tp('exp_s')} / {nb.num(r.mean_difference, 3, L)} {tp('exp_s')}"),
        (tp("exp_align_m_control"), tp("exp_align_p_control"),
         f"{nb.num(r.control_mean_difference, 3, L)} {tp('exp_s')}"),
    ])
    st.caption(t("exp_align_differs", model=shared.model_name(loaded)))


def _show_grammar(r, loaded: models.LoadedModel) -> None:
    ex = r.examples
    if ex:
        st.markdown(t("exp_grammar_examples", sov=ex.get("SOV", ""), osv=ex.get("OSV", ""), ovs=ex.get("OVS", ""),
                      svo=ex.get("SVO", ""), en=ex.get("en", ""), en_osv=ex.get("en_OSV", "")))
    st.caption(t("exp_grammar_setup", wo=r.items["word_order"], case=r.items["case"], agr=r.items["agreement"],
                 k=len(r.top)))
    c1, c2 = st.columns(2)
    off = np.zeros(r.tracking.shape, dtype=bool)
    for _, layer, head in r.top:
        off[layer, head] = True
    shared.plotly_chart(vp.head_grid(r.tracking, off, title=tp("exp_grammar_track_title"),
                                     score_title=tp("exp_grammar_track_score"), layer_title=tp("exp_layer"),
                                     head_title=tp("exp_head"), off_title=tp("exp_grammar_off"), lang=L),
                        container=c1, width="stretch", key="exp_fig_grammar_track")
    shared.plotly_chart(vp.head_grid(r.verb_to_acc[:2].mean(axis=0), off, title=tp("exp_grammar_acc_title"),
                                     score_title=tp("exp_share"), layer_title=tp("exp_layer"),
                                     head_title=tp("exp_head"), off_title=tp("exp_grammar_off"), lang=L),
                        container=c2, width="stretch", key="exp_fig_grammar_acc")
    causal = r.metric == "suffix_logprob"
    rnd = np.asarray(r.random)
    if causal:  # surprisal of the suffix, -log p, so that higher is worse as for the other experiments' losses
        values, spread_of = [-r.full, -r.off], (lambda v: -v)
        labels = [tp("exp_grammar_all"), tp("exp_grammar_top_off", k=len(r.top)),
                  tp("exp_grammar_random_off", k=len(r.top))]
        unit, decimals, axis = tp("exp_nats"), 2, tp("exp_grammar_surprisal")
    else:
        values, spread_of = [r.full, r.off], (lambda v: v)
        labels = [tp("exp_grammar_all"), tp("exp_grammar_top_off", k=len(r.top)),
                  tp("exp_grammar_random_off", k=len(r.top))]
        unit, decimals, axis = "1 − cos", 4, tp("exp_grammar_distance")
    spread: list[tuple[float, float] | None] = [None, None]
    if rnd.size:
        values.append(spread_of(float(np.median(rnd))))
        lo, hi = sorted((spread_of(float(rnd.min())), spread_of(float(rnd.max()))))
        spread.append((lo, hi))
    shared.plotly_chart(vx.loss_bars(labels[:len(values)], values, title=tp(f"exp_grammar_effect_title_{r.metric}"),
                                     loss_title=axis, spread=spread, lang=L, decimals=decimals, unit=unit),
                        width="stretch", key="exp_fig_grammar_effect")
    layer, head = r.best
    cases = ", ".join(f"{tp('exp_grammar_case_' + c)} {_pct(r.verb_to_case[i, layer, head])}"
                      for i, c in enumerate(r.cases) if r.case_items[i])

    def change(full, off, random) -> str:
        random = np.asarray(random)
        sign = -1.0 if causal else 1.0  # show the surprisal's rise / the distance's change
        fmt = (lambda v: _nats(v, sign=True)) if causal else (lambda v: nb.num(float(v), 4, L, sign=True))
        return tp("exp_grammar_o_off", off=fmt(sign * (off - full)),
                  rnd=fmt(sign * (float(np.median(random)) - full)) if random.size else "–", n=int(random.size))

    if np.isfinite(r.agreement_preference):
        agree = tp("exp_grammar_o_agree", gap=_nats(r.agreement_preference, sign=True),
                   share=_pct(r.agreement_preferred, 0),
                   off=change(r.agree_full, r.agree_off, r.agree_random),
                   heads=_heads([(la, h) for _, la, h in r.top_agree]))
    else:
        la, h = r.top_agree[0][1], r.top_agree[0][2]
        agree = tp("exp_grammar_o_agree_encoder", layer=la, head=h, subject=_pct(r.agree_to_subject[la, h]),
                   object=_pct(r.agree_to_object[la, h]))
    _compare("grammar", r, [
        (tp("exp_grammar_m_track"), tp("exp_grammar_p_track"),
         tp("exp_grammar_o_track", layer=layer, head=head, share=_pct(r.tracking[layer, head], 0),
            n=r.items["word_order"], chance=_pct(r.tracking_chance, 0), above=int((r.tracking > 0.5).sum()),
            cases=cases)),
        (tp(f"exp_grammar_m_off_{r.metric}", k=len(r.top)), tp("exp_grammar_p_off"),
         change(r.full, r.off, r.random) + " · " + _heads([(la, h) for _, la, h in r.top])),
        (tp("exp_grammar_m_agree"), tp("exp_grammar_p_agree"), agree),
    ])
    st.caption(t("exp_grammar_differs", model=shared.model_name(loaded)) + " "
               + t(f"exp_grammar_differs_{r.metric}"))


def _show_inner_language(r, loaded: models.LoadedModel) -> None:
    st.caption(t("exp_inner_setup", n=len(r.words), dropped=r.dropped))
    cols = st.columns(len(r.tasks))
    for k, (task, col) in enumerate(zip(r.tasks, cols)):
        turkish, english = r.mean(k)
        t_lo, t_hi, e_lo, e_hi = r.spread(k)
        shared.plotly_chart(vx.lens_tracks(
            {tp("exp_inner_turkish"): (turkish, t_lo, t_hi), tp("exp_inner_english"): (english, e_lo, e_hi)},
            title=tp(f"exp_inner_title_{task}", n=len(r.words)), stream_title=tp("exp_layer"),
            value_title=tp("exp_inner_prob"), embeddings_label=tp("exp_inner_embeddings"), lang=L),
            container=col, width="stretch", key=f"exp_fig_inner_{task}")
    turkish, english = r.mean(0)
    peak, p_en = r.english_peak(0)
    _compare("inner_language", r, [
        (tp("exp_inner_m_latent", task=tp(f"exp_inner_task_{r.tasks[0]}")), tp("exp_inner_p_latent"),
         tp("exp_inner_o_latent", stream=tp("exp_inner_embeddings") if peak == 0 else str(peak - 1), en=_pct(p_en, 2),
            tr=_pct(turkish[peak], 2))),
        (tp("exp_inner_m_final"), tp("exp_inner_p_final"),
         tp("exp_inner_o_final", tr=_pct(turkish[-1], 1), en=_pct(english[-1], 2), correct=_pct(r.correct[0], 0))),
        (tp("exp_inner_m_size"), tp("exp_inner_p_size"),
         tp("exp_inner_o_size", model=shared.model_name(loaded), layers=r.layers)),
    ])
    st.caption(t("exp_inner_differs", model=shared.model_name(loaded)))


def _show_retrieval(r, loaded: models.LoadedModel) -> None:
    duo = r.duo
    length = max(duo.lengths)
    st.caption(t("exp_retr_setup", needles=len(duo.depths) * len(duo.lengths), length=length,
                 depths=", ".join(_pct(d, 0) for d in duo.depths), window=duo.window, sinks=duo.sinks, draws=r.draws))
    pairs = r.pairs()
    top, rnd = pairs[-1]
    full = r.row("all full")
    scores = np.asarray(duo.scores, dtype=np.float64)
    kept = np.zeros(scores.shape, dtype=bool)
    for i in np.argsort(-scores.reshape(-1), kind="stable")[:top.k]:
        kept[divmod(int(i), scores.shape[1])] = True
    c1, c2 = st.columns(2)
    shared.plotly_chart(vp.head_grid(scores, kept, title=tp("exp_retr_grid_title", k=top.k),
                                     score_title=tp("exp_retr_score"), layer_title=tp("exp_layer"),
                                     head_title=tp("exp_head"), off_title=tp("exp_retr_kept"), lang=L),
                        container=c1, width="stretch", key="exp_fig_retr_grid")
    rows = duo.rows
    shared.plotly_chart(vx.loss_bars([_retr_name(x) for x in rows], [x.recall for x in rows],
                                     title=tp("exp_retr_recall_title", length=length), loss_title=tp("exp_retr_recall"),
                                     spread=[x.recall_range if x.name.startswith("random") else None for x in rows],
                                     lang=L, unit=""),
                        container=c2, width="stretch", key="exp_fig_retr_recall")
    shared.table(pd.DataFrame({
        tp("exp_retr_col_config"): [_retr_name(x) for x in rows],
        tp("exp_retr_col_recall"): [_pct(x.recall, 0) for x in rows],
        tp("exp_retr_col_range"): [f"{_pct(x.recall_range[0], 0)} – {_pct(x.recall_range[1], 0)}"
                                   if x.name.startswith("random") else "–" for x in rows],
        tp("exp_retr_col_loss"): [nb.num(x.loss, 2, L) for x in rows],
        tp("exp_retr_col_kv"): [nb.human_bytes(x.kv.get(length, 0), L) for x in rows]}), hide_index=True)
    best = float(scores.max(initial=0.0))
    ratio = r.kv_ratio(top)
    _compare("retrieval_heads", r, [
        (tp("exp_retr_m_share"), tp("exp_retr_p_share"),
         tp("exp_retr_o_share", share=_pct(r.retrieval_share), n=int((scores > r.threshold).sum()), heads=scores.size,
            best=nb.num(best, 2, L))),
        (tp("exp_retr_m_top", k=top.k), tp("exp_retr_p_top"),
         tp("exp_retr_o_top", top=_pct(top.recall, 0), full=_pct(full.recall, 0), loss=_nats(top.loss))),
        (tp("exp_retr_m_random", k=top.k), tp("exp_retr_p_random"),
         tp("exp_retr_o_random", recall=_pct(rnd.recall, 0), lo=_pct(rnd.recall_range[0], 0),
            hi=_pct(rnd.recall_range[1], 0), loss=_nats(rnd.loss)) if rnd is not None else "–"),
        (tp("exp_retr_m_kv", k=top.k), tp("exp_retr_p_kv"),
         tp("exp_retr_o_kv", ratio=nb.num(ratio, 2, L), n=length, bytes=nb.human_bytes(top.kv.get(length, 0), L),
            full=nb.human_bytes(full.kv.get(length, 0), L))),
    ])
    st.caption(t("exp_retr_differs", model=shared.model_name(loaded), window=duo.window, sinks=duo.sinks,
                 length=length))


def _retr_name(row) -> str:
    """A :class:`models.sparse.DuoRow`'s configuration in the interface language."""
    if row.name == "all full":
        return tp("exp_retr_all_full")
    if row.name.startswith("top-"):
        return tp("exp_retr_top", k=row.k)
    if row.name.startswith("random"):
        return tp("exp_retr_random", k=row.k)
    return tp("exp_retr_window")


def _cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis (a figure title must fit half the page)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _heads(heads: list[tuple[int, int]]) -> str:
    """``(layer, head)`` pairs as ``2-0, 4-3`` (layer and head counted from 0), ``–`` for none."""
    return ", ".join(f"{layer}-{head}" for layer, head in heads) or "–"


SHOW = {"sinks": _show_sinks, "induction": _show_induction, "clark": _show_clark, "alignment": _show_alignment,
        "prunable": _show_prunable, "grammar": _show_grammar, "inner_language": _show_inner_language,
        "retrieval_heads": _show_retrieval}

# ---------------------------------------------------------------------------------------------------- page
st.title(t("exp_title"))
st.markdown(t("exp_intro"))
URL.bind("exp_which", KEYS[0], options=KEYS)
# required=True: always one of KEYS (streamlit's stub returns an Optional for every segmented control)
which = cast(str, st.segmented_control(t("exp_which"), KEYS, key="exp_which", required=True,
                                       format_func=lambda k: tp(f"exp_{k}_name")))
URL.finish()
exp = E.get(which)
st.subheader(t(f"exp_{which}_name"))
st.markdown(t(f"exp_{which}_claim"))
strings = shared._strings()
for i, src in enumerate(exp.sources):
    # the figure and the model the claim was read from, in the interface language where translated
    where, on = (tp(k) if k in strings else default for k, default in
                 ((f"exp_src_{which}_{i}_where", src.where), (f"exp_src_{which}_{i}_model", src.model)))
    st.caption(t("exp_source", cite=src.cite, title=src.title, where=where, model=on, url=src.url))

installed = [k for k in exp.models if models.get_spec(k).installed]
if not installed:
    st.warning(t("exp_no_model", models=", ".join(exp.models)))
    shared.stop()
sidebar_model = shared.selection().model
default = sidebar_model if sidebar_model in installed else installed[0]
name = st.selectbox(t("exp_model"), installed, index=installed.index(default), key=f"exp_model_{which}")
loaded = shared.load_model_ui(name)
if loaded is None:
    shared.stop()

cache_key = ("experiments", which, name)
job = ahead.experiment_job(which, name)
result = shared.CACHE.get(cache_key)
if result is None:
    result = shared.kept(cache_key, job, loaded)  # computed ahead (`make ahead`, or a classroom server's first start)
if result is None:
    try:
        seconds = _estimate(which, name)
        st.caption(t("exp_estimate", seconds=seconds) if seconds >= 1 else t("exp_estimate_short"))
    except models.DikkatError:
        pass  # the run says what is wrong
# a class shares one run of each experiment: in classroom mode a finished run is not started again
again = result is None or not hosting.current().classroom
pressed = again and st.button(t("exp_run") if result is None else t("exp_run_again"), key=f"exp_run_{which}",
                             type="primary")


def _progress_text(job) -> str:
    """The progress bar's text: the share done and, past 2 %, the time left at the pace so far."""
    fraction = job.fraction
    spent = time.monotonic() - (job.started_at or time.monotonic())
    left = spent / fraction * (1 - fraction) if fraction > 0.02 else None
    return t("exp_progress", pct=_pct(fraction, 0), left=left) if left is not None else t("exp_progress_start")


def _run(which: str, loaded: models.LoadedModel, progress) -> object:
    return E.run(which, loaded, progress=progress)


# on the heavy-work pool: one run of each experiment per model for every session, Stop for its starter or the teacher
done = heavy.kept_run("experiment", (which, name), cache_key=cache_key, ahead_job=job, loaded=loaded,
                      compute=functools.partial(_run, which, loaded),
                      pressed=pressed, again=result is not None, stop_key=f"exp_stop_{which}", text=_progress_text)
result = done if done is not None else result

if result is not None:
    SHOW[which](result, loaded)
    since = shared.kept_since(job, loaded)
    st.caption(t("exp_took", seconds=float(result.seconds)) + (" " + t("exp_shared") if not again else "")
               + (" " + t("exp_kept", when=since) if since else ""))
