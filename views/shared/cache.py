"""The models and analyses every page and session shares: one cache bounded by bytes (:data:`CACHE`,
``DIKKAT_CACHE_GIB``, default 4 GiB), loading with a spinner and the device line."""

from __future__ import annotations

import functools
import time
from collections import OrderedDict

import streamlit as st

import models
from models import ahead, budget, memory
from models.analysis.store import LazyMap

from .. import hosting
from .output import message, model_name, show_error
from .strings import Md, md, t


def _measure(value) -> int:
    """Bytes an entry of :data:`CACHE` holds (its model not counted: the model cache counts it). For an
    analysis, what it held when created is measured once; the layers its on-demand stacks keep and the
    statistics and overview maps (filled when first read) at each use."""
    if isinstance(value, models.Analysis):
        fixed = value.__dict__.get("_fixed_nbytes")
        if fixed is None:
            fixed = value.__dict__["_fixed_nbytes"] = budget.nbytes(
                value, skip=(models.LoadedModel, OrderedDict, LazyMap))
        grown = sum(stack.cached_nbytes for stack in value.attentions.values())
        for lazy in (value.statistics, value.overview):
            if getattr(lazy, "computed", True):
                grown += budget.nbytes(dict(lazy))
        return fixed + grown
    # a flow keeps its layers' attention modules and the tokenizer: the model cache counts those
    return budget.nbytes(value, skip=(models.LoadedModel, *budget.MODEL_PARTS))


# Analyses, prepared views and page results of every session, least recently used dropped first.
# What an entry dropped leaves is given back to the system (models.memory.after_eviction), and under memory pressure
# the cache sheds its least recently used half before new heavy work starts (models.memory.admit).
CACHE = budget.ByteLRU(budget.budget_from_env("DIKKAT_CACHE_GIB", 4), measure=_measure,
                       on_evict=memory.after_eviction, sheddable=True)


def cached(fn):
    """Decorator: cache ``fn``'s results in :data:`CACHE` by its name and (hashable) arguments, computed
    once even when several sessions ask at once; results are shared, read-only."""
    name = (fn.__code__.co_filename, fn.__qualname__)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        key = (name, args, tuple(sorted(kwargs.items())))
        try:
            hash(key)
        except TypeError:
            return fn(*args, **kwargs)
        value = CACHE.get_or_create(key, lambda: fn(*args, **kwargs))
        if isinstance(value, models.Analysis):
            CACHE.remeasure(key)  # it may hold more since: layers its stacks kept, statistics, overview
        return value

    return wrapper


def kept(cache_key, job: ahead.Job, loaded: models.LoadedModel):
    """The result of ``job`` computed ahead (:mod:`models.ahead`: ``make ahead``, or a classroom server's first
    start) for ``loaded``, put into :data:`CACHE` under ``cache_key`` for every session; None when none is kept. A
    kept file that is not a sound result is ignored (:func:`models.ahead.load` logs why) with a note on the page
    that names no file."""
    value = ahead.load(job, loaded)
    if value is not None:
        CACHE.put(cache_key, value)
    elif ahead.ignored(job, loaded) is not None:
        st.caption(t("ahead_ignored"))
    return value


def kept_since(job: ahead.Job, loaded: models.LoadedModel) -> str | None:
    """When ``job``'s result for ``loaded`` was kept on disk (``YYYY-MM-DD HH:MM``, local time), or None."""
    when = ahead.saved_at(job, loaded)
    return None if when is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(when))


def run_and_keep(job: ahead.Job, loaded: models.LoadedModel, run):
    """``run()``'s result, also kept on disk for ``job`` (:func:`models.ahead.save`) so that another process (a
    replica, the next start) reads it instead of computing it again; a disk that refuses is not an error."""
    value = run()
    try:
        ahead.save(job, loaded, value)
    except OSError:
        pass
    return value


def get_model(name: str) -> models.LoadedModel:
    """``models.load`` of the model a page names (:func:`hosting.source`: in classroom mode only the catalog and
    the teacher's list, else :class:`models.ModelNotAllowedError`): cached per process (bounded by bytes) and
    shared by all sessions."""
    return models.load(hosting.source(name))


def get_analysis(name: str, text: str, text_pair: str | None = None, target: str | None = None,
                 heads_off: frozenset = frozenset(), mask="native", max_tokens: int | None = None) -> models.Analysis:
    """``models.analyze`` cached in :data:`CACHE` by its (hashable) arguments; results are read-only.

    A ``max_tokens`` that does not cut this text is dropped from the key, so pages with different limits
    share one analysis of a short text (not for encoder-decoders, where it also cuts the generated target)."""
    if max_tokens is not None and text_pair is None and target is None and get_model(name).family != "encoder-decoder":
        n = len(get_model(name).tokenizer(text)["input_ids"])
        if n <= max_tokens:
            max_tokens = None
    return _analysis(name, text, text_pair, target, heads_off, mask, max_tokens)


@cached
def _analysis(name, text, text_pair, target, heads_off, mask, max_tokens) -> models.Analysis:
    return models.analyze(get_model(name), text, text_pair=text_pair, target=target, heads_off=heads_off,
                          mask=mask, max_tokens=max_tokens)


@cached
def get_flow(name: str, text: str, text_pair: str | None = None, heads_off: frozenset = frozenset(), mask="native",
             max_tokens: int | None = None, stack: str | None = None) -> models.Flow:
    """``models.information_flow`` of the cached analysis with these arguments (cached too; read-only)."""
    analysis = get_analysis(name, text, text_pair=text_pair, heads_off=heads_off, mask=mask, max_tokens=max_tokens)
    return models.information_flow(get_model(name), analysis, stack=stack)


def _show_device(loaded: models.LoadedModel) -> None:
    """Write the device in use into the sidebar slot made by :func:`sidebar` (if this run has one)."""
    slot = st.session_state.get("_device_slot")
    if slot is None:
        return
    kv = f" · {t('device_kv_heads', n=loaded.num_key_value_heads)}" if loaded.num_key_value_heads else ""
    shape = ", ".join(f"{t(f'stack_{stack}')} {layers}×{heads}" for stack, (layers, heads) in loaded.stacks.items())
    line = t("device_line", device=str(loaded.device), dtype=str(loaded.dtype).replace("torch.", ""),
             path=Md(t(f"capture_{loaded.capture_path}")), shape=Md(md(shape) + kv))
    chosen = st.session_state.get("_selection")
    if chosen is not None and loaded.name != chosen.model:
        # the page uses another model than the sidebar's (an experiment's own): say which, never mix the two
        # (issue 33: one model's description beside another's device line and shape)
        spec = models.CATALOG.get(loaded.name)
        about = f" ({md(spec.title)})" if spec is not None else ""
        line = t("page_model_other", model=model_name(loaded)) + about + " · " + line
    slot.caption(line)
    for note in getattr(loaded, "notes", ()):
        if note.get("code") == "dtype_fallback":  # loaded in float32: the half dtype asked for could not run it
            slot.caption(t("device_dtype_fallback", asked=note["asked"], used=note["used"],
                           why=t(f"device_dtype_fallback_{note['kind']}")))
        elif note.get("code") == "readout_sees_target":  # XLNet: its maps, no next-token prediction
            slot.caption(t("device_readout_sees_target"))


def load_model_ui(name: str) -> models.LoadedModel | None:
    """Load with a spinner that shows the elapsed time (and what is happening); on failure show the reason
    and return None. Shows the device in use in the sidebar."""
    start = time.perf_counter()
    try:
        with st.spinner(t("loading", model=name), show_time=True):
            loaded = get_model(name)
    except models.DikkatError as exc:
        show_error(exc)
        return None
    except OSError as exc:  # a folder or hub id transformers cannot read
        reason = message(str(exc).splitlines()[0]) if str(exc) else type(exc).__name__
        st.error(t("load_failed", model=name, reason=reason))
        return None
    elapsed = time.perf_counter() - start
    if elapsed > 1.0:
        st.toast(t("loaded_in", model=name, seconds=elapsed))
    _show_device(loaded)
    return loaded


def reads_text(loaded: models.LoadedModel) -> bool:
    """True for a text model; for a speech model (input features, e.g. Whisper) show why a text page cannot use
    it and where its attention is shown instead, and return False."""
    if not loaded.reads_text:
        st.info(t("speech_model_no_text", model=model_name(loaded)))
        return False
    return True


def truncation_text(result: models.Analysis, name: str) -> str | None:
    """What was cut from a too long text and whose limit cut it (None when nothing was): the page's own limit
    (the Masks page draws at most 24 tokens) is not blamed on the model (issue 33)."""
    if not result.truncated:
        return None
    limit = result.max_tokens
    model_limit = get_model(name).max_positions
    key = "truncated_page" if limit is not None and model_limit is not None and limit < model_limit else "truncated"
    return t(key, n=result.truncated, limit=limit)


def analysis_ui(name: str, text: str, notice: bool = True, **kwargs) -> models.Analysis | None:
    """Analyse with a spinner; show errors as messages (never a traceback) and, with ``notice``, the truncation
    notice (:func:`truncation_text`; a page that has more to say about a long text says it in one notice)."""
    try:
        with st.spinner(t("analysing")):
            result = get_analysis(name, text, **kwargs)
    except models.DikkatError as exc:
        show_error(exc)
        return None
    cut = truncation_text(result, name)
    if notice and cut:
        st.warning(cut)
    return result
