"""One head of the Head atlas: its pickers, metrics with their intervals, causal labels, related heads, strongest
examples (corpus text as escaped HTML, each with a button into Explore) and, on request, its queries and keys."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pandas as pd
import streamlit as st

import models
from models import atlas as A
from models.atlas import store as atlas_store
from models.atlas.embedding import joint_embedding
from views import hosting, shared
from viz import atlas as va
from viz import numbers as nb

from .common import (URL, VERSION_KEY, atlas_still_at, corpus_name, heads_frame, interval, on_row, stack_name, t,
                     tp, value)

EXAMPLES, RELATED, QK_TEXTS = 5, 6, 24


def _open_in_explore(text: str, stack: str, layer: int, head: int) -> None:
    """Explore with this text, on this layer and head, in the heatmap view (its own link parameters)."""
    shared.open_with({"text": text, "stack": stack, "layer": int(layer), "head": int(head), "view": "heatmap"})


def _metrics_table(row: pd.Series) -> None:
    st.markdown(f"**{t('atlas_metrics_title')}**")
    shared.table(pd.DataFrame({
        tp("atlas_col_metric"): [tp(f"atlas_m_{m}") for m in A.RANKABLE],
        tp("atlas_col_value"): [float(row[m]) for m in A.RANKABLE],
        tp("atlas_col_interval"): [interval(float(row[f"{m}_lo"]), float(row[f"{m}_hi"])) for m in A.RANKABLE],
    }), decimals=3, hide_index=True)


def _labels(atlas: A.Atlas, stack: str, layer: int, head: int) -> None:
    """The head's causal labels: a test passed is a label with its effect and interval, a failed one "pattern only"."""
    st.markdown(f"**{t('atlas_labels_title')}**")
    labels = atlas.labels()
    if labels is None:
        st.caption(t("atlas_labels_none"))
        return
    mine = labels[(labels["stack"] == stack) & (labels["layer"] == layer) & (labels["head"] == head)]
    if mine.empty:
        st.caption(t("atlas_labels_not_candidate"))
        return
    for _, r in mine.iterrows():
        name = tp(f"atlas_label_{r['label']}")
        numbers = dict(quantity=tp(f"atlas_q_{r['quantity']}"), delta=nb.signed(float(r["delta"]), 4, shared.lang()),
                       lo=nb.num(float(r["lo"]), 4, shared.lang()), hi=nb.num(float(r["hi"]), 4, shared.lang()),
                       texts=int(r["texts"]))
        if not bool(r.get("primary", True)):
            st.caption(t("atlas_label_also", **numbers))
        elif bool(r["passed"]):
            st.badge(f"{tp('atlas_label_ok')}: {name}", color="green")
            st.markdown(t("atlas_label_passed", label=name, **numbers))
        else:
            st.badge(f"{tp('atlas_label_pattern_only')}: {name}", color="gray")
            pattern = tp(f"atlas_m_{r['pattern']}") if f"atlas_m_{r['pattern']}" in shared._strings() else r["pattern"]
            st.markdown(t("atlas_label_failed", label=name, pattern=pattern, value=value(float(r["pattern_value"])),
                          **numbers))


@shared.cached
def _related_across(folder: str, stack: str, layer: int, head: int, stamp: tuple) -> pd.DataFrame:
    """:meth:`models.atlas.Atlas.related` over every atlas on disk (each atlas's table computed once per ``stamp``:
    the parts on disk)."""
    return atlas_still_at(Path(folder)).related(stack, layer, head, k=RELATED, across=True)


def _related(atlas: A.Atlas, stack: str, layer: int, head: int) -> None:
    """The heads whose metric profiles are closest, of this model (a row opens a head) or of every atlas on disk."""
    st.markdown(f"**{t('atlas_related_title')}**")
    across = st.toggle(t("atlas_related_across"), key="atlas_related_across", help=t("atlas_related_across_help"))
    if across:
        stamp = tuple(sorted(str(p) for p in atlas_store.atlas_root().glob("*/*/parts/texts-*.parquet")))
        rel = _related_across(str(atlas.folder), stack, layer, head, stamp)
    else:
        rel = atlas.related(stack, layer, head, k=RELATED)
    if rel.empty:
        return
    shown, heads = heads_frame(rel, across or len(atlas.stacks) > 1, "similarity", tp("atlas_col_similarity"))
    if across:  # another model's head opens in its own atlas, not here: the rows are not picked
        shown.insert(0, tp("atlas_col_corpus"), [corpus_name(str(c)) for c in rel["corpus"]])
        shown.insert(0, tp("atlas_col_model"), [hosting.scrub(str(m)) for m in rel["model"]])
        shared.dataframe(shown, decimals={tp("atlas_col_similarity"): 3}, hide_index=True)
        return
    key = f"atlas_related_{st.session_state.get(VERSION_KEY, 0)}"
    shared.dataframe(shown, decimals={tp("atlas_col_similarity"): 3}, hide_index=True, key=key,
                     on_select=functools.partial(on_row, key, heads), selection_mode="single-row")
    st.caption(t("atlas_related_help"))


def _examples(atlas: A.Atlas, stack: str, layer: int, head: int) -> None:
    """The texts where the head's pattern is strongest, the query and its keys marked (escaped HTML), each with a
    button that opens it in Explore on this head."""
    st.markdown(f"**{t('atlas_examples_title')}**")
    st.caption(t("atlas_examples_help"))
    ex = atlas.examples(stack, layer, head, k=EXAMPLES)
    if ex.empty:
        st.caption(t("atlas_no_examples"))
        return
    for i, (_, r) in enumerate(ex.iterrows()):
        st.html(va.snippet_html(r["content"], list(r["starts"]), list(r["ends"]), int(r["query"]), list(r["keys"]),
                                list(r["weights"]), query_title=tp("atlas_query"), key_title=tp("atlas_key_weight"),
                                hidden_title=tp("atlas_hidden"), lang=shared.lang()))
        c1, c2 = st.columns([3, 2], vertical_alignment="center")
        c1.caption(t("atlas_example_caption", text=int(r["text"]) + 1, strength=value(float(r["strength"]))))
        if c2.button(t("atlas_open_explore"), key=f"atlas_open_{i}", help=t("atlas_open_help"),
                     on_click=_open_in_explore, args=(r["content"], stack, layer, head)):
            st.switch_page("views/explore.py")


@shared.cached
def _embedding(name: str, folder: str, stack: str, layer: int, head: int, texts: int) -> pd.DataFrame:
    return joint_embedding(shared.get_model(name), atlas_still_at(Path(folder)), stack, layer, head, texts=texts)


def _queries_keys(name: str, atlas: A.Atlas, stack: str, layer: int, head: int) -> None:
    """On request, the head's queries and keys over the first texts in one plane (computed once per head)."""
    texts = max(1, min(QK_TEXTS, len(atlas.texts(limit=QK_TEXTS))))
    ident = [str(atlas.folder), stack, int(layer), int(head), texts]
    if st.button(t("atlas_qk_button"), key="atlas_qk_button", help=t("atlas_qk_help", n=texts)):
        st.session_state["atlas_qk"] = ident
    if st.session_state.get("atlas_qk") != ident:
        return
    try:
        with st.spinner(t("atlas_qk_computing"), show_time=True):
            df = _embedding(name, *ident)
    except models.DikkatError as exc:
        shared.show_error(exc)
        return
    kinds = ("word", "punctuation", "special", "first")
    share = nb.percent(float(sum(df.attrs.get("explained", [0.0]))), 0, shared.lang())
    fig = va.qk_scatter(df["x"], df["y"], df["role"], df["kind"], df["token"], df["text"] + 1, df["position"],
                        role_names={"query": tp("atlas_qk_query"), "key": tp("atlas_qk_key")},
                        kind_names={k: tp(f"atlas_kind_{k}") for k in kinds},
                        title=tp("atlas_qk_title", layer=layer, head=head),
                        text_title=tp("atlas_qk_text"), position_title=tp("atlas_qk_position"), lang=shared.lang())
    shared.plotly_chart(fig, width="stretch", key="atlas_qk_fig")
    st.caption(t("atlas_qk_caption", n=texts, share=share))


def head_section(name: str, atlas: A.Atlas, table: pd.DataFrame, selected: tuple, default: tuple) -> None:
    """The picked head (``selected``: ``(stack, layer, head)``): its pickers (``default``: the head they fall back
    to, left out of the link), metrics, labels, related heads, examples, and its queries and keys."""
    stacks = list(atlas.stacks)
    multi = len(stacks) > 1
    # the head's title, then its pickers on the same row (a grid cell, a ranked row or a related head set them too)
    heading, *cols = st.columns([4, 2, 1, 1] if multi else [5, 1, 1], vertical_alignment="bottom")
    if multi:
        names = {s: stack_name(s) for s in stacks}
        cols[0].selectbox(t("atlas_stack"), stacks, key="atlas_stack",
                          format_func=cast("Callable[[Any], str]", names.get))
        cols = cols[1:]
    chosen = st.session_state.get("atlas_stack")
    stack = cast(str, chosen) if chosen in stacks else selected[0]
    layers, heads = atlas.stacks[stack]
    layer, head = shared.layer_head("atlas_layer", "atlas_head", layers, heads, url=URL, columns=cols[:2],
                                    labels=("atlas_layer", "atlas_head"), layer_default=default[1],
                                    head_default=default[2])
    assert head is not None  # no mean over heads offered: always a head
    for key in ("atlas_stack", "atlas_layer", "atlas_head"):  # always in the link: the fallback, the top head of the
        URL.bound[key] = None                                   # metric, changes as a build adds texts
    title = t("atlas_head_title", layer=layer, head=head)
    heading.subheader(f"{title} · {shared.md(stack_name(stack))}" if multi else title)
    row = table[(table["stack"] == stack) & (table["layer"] == layer) & (table["head"] == head)].iloc[0]
    left, right = st.columns([1, 1], gap="large")
    with left:
        _metrics_table(row)
        _labels(atlas, stack, layer, head)
        _related(atlas, stack, layer, head)
    with right:
        _examples(atlas, stack, layer, head)
    _queries_keys(name, atlas, stack, layer, head)
