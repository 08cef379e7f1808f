"""The teacher's question about the state the class sees (issue 29), when the lesson step has none: a kind of
:mod:`live.questions` and its few parameters, the prompt written from them in both languages."""

from __future__ import annotations

import streamlit as st

import models
from live import questions as Q
from views import shared
from views.shared import t

from . import asking, room

MASKS = ("native", "sliding_window:2", "sliding_window:4", "sink_window:4,1", "causal")


def _both(key: str, **fmt) -> dict[str, str]:
    """UI string ``key`` in English and Turkish, filled with ``fmt`` (plain text: a prompt is shown escaped)."""
    entry = shared._strings()[key]
    return {lang: entry[lang].format(**fmt) for lang in Q.LANGS}


def _token(model: str, text: str, stack: str, query: int) -> str:
    """The query token's text, for the prompt ("#3" when the text cannot be read)."""
    try:
        tokens = shared.get_analysis(model, text).axis_tokens(stack)[0]
        return tokens[query].label.strip() or f"#{query}"
    except (models.DikkatError, IndexError):
        return f"#{query}"


def _fields(kind: str, loaded: models.LoadedModel, stack: str, state: dict) -> dict | None:
    """The kind's widgets; returns the question's table (None: not complete yet)."""
    layers, heads = loaded.stacks[stack]
    cols = st.columns(3)
    if kind == "top_key":
        layer = cols[0].number_input(t("live_q_layer"), 0, layers - 1, 0, key="live_q_layer")
        head = cols[1].number_input(t("live_q_head"), 0, heads - 1, 0, key="live_q_head")
        query = cols[2].number_input(t("live_q_query"), -512, 8191, -1, key="live_q_query",
                                     help=t("live_q_query_help"))
        token = _token(loaded.name, state.get("text", ""), stack, int(query))
        return {"kind": kind, "layer": int(layer), "head": int(head), "query": int(query), "stack": stack,
                "prompt": _both("live_prompt_top_key", layer=int(layer), head=int(head), token=token)}
    if kind == "sink":
        first = cols[0].number_input(t("live_q_from"), 0, layers - 1, layers // 2, key="live_q_from")
        return {"kind": kind, "from_layer": int(first), "stack": stack,
                "prompt": _both("live_prompt_sink", layer=int(first))}
    options = [f"{s}.{layer}.{h}" for s, (n, m) in loaded.stacks.items() if s != "cross"
               for layer in range(n) for h in range(m)]
    if kind == "top_head":
        picked = st.multiselect(t("live_q_heads"), options, key="live_q_heads", max_selections=Q.MAX_HEADS)
        if len(picked) < Q.MIN_HEADS:
            st.caption(t("live_q_heads_help", least=Q.MIN_HEADS, most=Q.MAX_HEADS))
            return None
        return {"kind": kind, "heads": picked, "prompt": _both("live_prompt_top_head")}
    mask = cols[0].selectbox(t("live_q_mask"), MASKS, key="live_q_mask")
    off = st.multiselect(t("live_q_off"), options, key="live_q_off")
    if mask == "native" and not off:
        st.caption(t("live_q_change_help"))
        return None
    return {"kind": kind, "mask": mask, "heads_off": off, "prompt": _both("live_prompt_loss_change")}


def builder() -> None:
    """Ask the class about the page the teacher broadcast last (its model and sentence)."""
    sent = st.session_state.get("_live_sent")
    if not sent:
        st.caption(t("live_q_no_state"))
        return
    state = {k: v for k, v in sent[1].items() if k != room.STEP}
    model = state.get("model_key", "")
    try:
        loaded = shared.get_model(model)
    except models.DikkatError as exc:
        shared.show_error(exc)
        return
    kinds = [k for k in Q.KINDS if loaded.reads_text or k in ("top_key", "sink")]
    if loaded.family != "decoder":
        kinds = [k for k in kinds if k != "loss_change"]
    kind = st.segmented_control(t("live_q_kind"), kinds, default=kinds[0], key="live_q_kind",
                                format_func=lambda k: t(f"live_kind_{k}")) or kinds[0]
    stack = Q.default_stack(loaded.family, "text" if loaded.reads_text else "speech")
    table = _fields(kind, loaded, stack, state)
    if table is None:
        return
    try:
        question = Q.parse_question({**table, "model": model})
        Q.check_question(question, model, loaded.stacks, loaded.family, "text" if loaded.reads_text else "speech")
    except Q.LessonError as exc:
        shared.show_error(exc)
        return
    st.caption(t("live_q_prompt", prompt=question.prompt[shared.lang()]))
    if st.button(t("live_q_ask"), key="live_q_ask", type="primary") and asking.ask(question, state):
        st.rerun()
