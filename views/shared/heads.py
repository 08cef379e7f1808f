"""The heads switched off, one reader and one writer for every page (issue 49): the Head pruning page sets them,
Information flow and Why a head attends analyse with them, the link carries them (``off``, declared in
:mod:`pagestate`) and a live class sets a student's from the teacher's link.

In Session State they are one form, ``model name -> sorted list of [stack, layer, head]`` (:data:`HEADS_OFF_KEY`);
in a link, text (:func:`pagestate.heads_to_link`); everywhere else, a frozenset of ``(stack, layer, head)``."""

from __future__ import annotations

import streamlit as st

import pagestate

HEADS_OFF_KEY = "prune_off"  # model name -> sorted list of [stack, layer, head]
_LINK = pagestate.param("pruning", "off").name
_LINK_READ = "_prune_off_read"  # the link's heads were taken (once per session: a link or a reload)


def heads_off(name: str) -> frozenset:
    """The heads switched off for model ``name`` (this session), as ``(stack, layer, head)`` triples."""
    return frozenset(tuple(h) for h in st.session_state.get(HEADS_OFF_KEY, {}).get(name, []))


def set_heads_off(name: str, heads) -> None:
    """Switch off exactly ``heads`` (``(stack, layer, head)`` triples) of model ``name``, for this session."""
    st.session_state.setdefault(HEADS_OFF_KEY, {})[name] = sorted([list(h) for h in {tuple(h) for h in heads}])


def heads_from_link(name: str, stacks: dict[str, tuple[int, int]]) -> None:
    """On the Head pruning page: the heads the link's ``off`` names (a shared link, a reload) become model
    ``name``'s, once per session: after a switch of model the link's heads were another model's. Heads the model
    does not have, and junk, are ignored (:func:`pagestate.heads_from_link`)."""
    raw = st.query_params.get(_LINK)
    if not st.session_state.get(_LINK_READ) and raw:
        set_heads_off(name, pagestate.heads_from_link(raw, stacks))
    st.session_state[_LINK_READ] = True


def heads_to_link(name: str) -> None:
    """Put model ``name``'s heads switched off in the link (``off``), or take ``off`` out of it when none is."""
    off = heads_off(name)
    if off:
        st.query_params[_LINK] = pagestate.heads_to_link(off)
    elif _LINK in st.query_params:
        del st.query_params[_LINK]


def heads_from_class(name: str, stacks: dict[str, tuple[int, int]], raw: str) -> None:
    """A live class's link (the teacher's ``off``) sets the heads of model ``name``, as a link opened now would."""
    set_heads_off(name, pagestate.heads_from_link(raw, stacks))
    st.session_state[_LINK_READ] = True


def link_value(name: str) -> str | None:
    """What the link's ``off`` holds for model ``name`` (a live class broadcasts it), or None."""
    off = heads_off(name)
    return pagestate.heads_to_link(off) if off else None
