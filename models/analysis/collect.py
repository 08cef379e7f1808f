"""Collecting an analysis's weights as the forward pass produces them: whole arrays for a short input, else
the masks and per-head summaries only, with :class:`models.analysis.store.AttentionStack` computing maps on demand."""

from __future__ import annotations

import threading
import weakref

import numpy as np
import torch

from .. import checks
from ..errors import InvalidArgumentError
from . import flash_summary
from . import statistics as hstats
from ..capture import blocks
from ..loading.model import LoadedModel
from .store import AttentionStack, LazyMap, MaskStack, Replay

from .result import Analysis


class Collector:
    """The sinks of :func:`analyze`'s forward pass: copies each block of weights into the kept arrays (short
    inputs) and records each distinct mask; then builds the stacks and the (lazily computed) statistics
    and overview maps."""

    def __init__(self, model: LoadedModel, result: Analysis, keep: bool):
        self.model, self.result, self.keep = model, result, keep
        self.kept: dict[str, np.ndarray] = {}
        self.masks: dict[str, dict] = {}
        self._alive: list = []  # masks seen, alive until the end so their ids stay unique

    def sink(self, site, q0: int, k0: int, w: torch.Tensor, q_len: int, k_len: int) -> None:
        arr = self.kept.get(site.stack)
        if arr is None:
            layers = self.model.stacks[site.stack][0]
            arr = self.kept[site.stack] = np.zeros((layers, w.shape[1], q_len, k_len), dtype=np.float32)
        rows, cols = w.shape[2:]
        arr[site.layer, :, q0:q0 + rows, k0:k0 + cols] = w[0].detach().float().cpu().numpy()

    def mask_sink(self, site, attention_mask, q_len: int, k_len: int) -> None:
        per = self.masks.setdefault(site.stack, {"distinct": [], "ids": {}, "layers": {}})
        key = id(attention_mask) if attention_mask is not None else None
        index = per["ids"].get(key)
        if index is None:
            allowed = blocks.allowed_of(attention_mask, q_len, k_len).numpy()
            index = next((i for i, m in enumerate(per["distinct"]) if m.shape == allowed.shape
                          and np.array_equal(m, allowed)), None)
            if index is None:
                per["distinct"].append(allowed)
                index = len(per["distinct"]) - 1
            per["ids"][key] = index
            self._alive.append(attention_mask)
        per["layers"][site.layer] = index

    def finish(self, result: Analysis, replay: Replay | None, lse=None, lse_refused: dict | None = None) -> None:
        """Build ``result``'s stacks (kept arrays, else on demand: from ``lse``, a
        :class:`models.analysis.lse_weights.LseCollector`, where it read the stack, else by ``replay``) and masks;
        ``lse_refused``: ``stack -> why`` not from the log-sum-exp."""
        if self.keep:  # in the model's order of stacks (encoder, decoder, cross), whatever ran first
            shapes = {stack: self.kept[stack].shape for stack in self.model.stacks if stack in self.kept}
        else:
            shapes = {}
            for stack, (layers, heads) in self.model.stacks.items():
                q_tokens, k_tokens = result.axis_tokens(stack)
                shapes[stack] = (layers, heads, len(q_tokens), len(k_tokens))
        source = None if (self.keep or lse is None) else lse.source(
            result.masks, {stack: layers for stack, (layers, _) in self.model.stacks.items()})
        refused = dict(lse_refused or {}, **(lse.refused if lse is not None else {}))
        attach_stacks(result, {stack: AttentionStack(stack, shape, kept=self.kept.get(stack), replay=replay, lse=source,
                                                     lse_refused=None if self.keep else refused.get(stack))
                               for stack, shape in shapes.items()})
        for stack, per in self.masks.items():
            layers = self.model.stacks[stack][0]
            index = [per["layers"].get(layer, 0) for layer in range(layers)]
            result.masks[stack] = MaskStack(per["distinct"], index)
        result.kept = self.keep
        self._alive.clear()


def attach_stacks(result: Analysis, stacks: dict[str, AttentionStack | np.ndarray]) -> None:
    """Set ``result.attentions`` (arrays are wrapped as held :class:`AttentionStack` s) and its lazily
    computed ``statistics`` and ``overview`` (:func:`_summaries`). Used by :func:`analyze` and by
    :func:`models.analyze_audio`.

    Raises:
        InvalidArgumentError: ``result`` not an analysis (an :class:`Analysis` or a speech model's
            ``AudioAnalysis``), or ``stacks`` not a dict of stack names to :class:`AttentionStack` s or arrays
            (``arg_instance``).
    """
    if not (hasattr(result, "tokens") and hasattr(result, "attentions")):
        raise InvalidArgumentError(f"result must be an analysis, got {type(result).__name__}.", code="arg_instance",
                                   name="result", detail="an Analysis", value=type(result).__name__)
    checks.instance("stacks", stacks, dict, "a dict stack -> AttentionStack or array")
    for stack, s in stacks.items():
        if not isinstance(stack, str) or not isinstance(s, (AttentionStack, np.ndarray, torch.Tensor)):
            raise InvalidArgumentError(f"stacks must map stack names to AttentionStacks or arrays, got "
                                       f"{checks.shown(stack)}: {type(s).__name__}.", code="arg_instance",
                                       name="stacks", detail="AttentionStack or an array", value=type(s).__name__)
    result.attentions = {
        stack: s if isinstance(s, AttentionStack) else
        AttentionStack(stack, s.shape, kept=np.ascontiguousarray(s, dtype=np.float32))
        for stack, s in stacks.items()
    }
    # through a weak reference: a closure over the result itself made every analysis a reference cycle, freed only by
    # a full garbage collection after the cache had dropped it (issue 44)
    ref = weakref.ref(result)
    once = _Once(lambda: _summaries(_alive(ref)))
    result.statistics = LazyMap(lambda: once()[0])
    result.overview = LazyMap(lambda: once()[1])


def _alive(ref: weakref.ref[Analysis]) -> Analysis:
    """The analysis behind ``ref``; an analysis dropped while its ``statistics`` or ``overview`` was still held
    (never computed) cannot compute them any more."""
    from ..errors import UnsupportedOperationError

    result = ref()
    if result is None:
        raise UnsupportedOperationError("The analysis was freed before its statistics or overview were first read: "
                                        "keep the analysis itself while reading them.", code="analysis_freed")
    return result


class _Once:
    """Calls ``compute`` the first time it is called (thread-safe) and returns that result ever after."""

    def __init__(self, compute):
        self.compute, self.value, self.lock = compute, None, threading.Lock()

    def __call__(self):
        with self.lock:
            if self.value is None:
                self.value = self.compute()
                self.compute = None
            return self.value


def key_flags(result: Analysis, stack: str) -> tuple[list[bool], list[bool], np.ndarray]:
    """The keys of a stack as the per-head statistics read them: ``(special, punctuation, word_of)``, two bool
    lists of length ``n_k`` (a control token; a token that is only punctuation or symbols,
    :func:`models.analysis.statistics.is_punctuation`) and int64 ``(n_k,)`` the word index of each key (-1 for
    none)."""
    n_k = result.attentions[stack].shape[3]
    k_tokens = result.axis_tokens(stack)[1]
    word_of = -np.ones(n_k, dtype=np.int64)
    for i, w in enumerate(result.axis_words(stack)[1]):
        word_of[[t for t in w.tokens if t < n_k]] = i
    special = ([x.special for x in k_tokens] + [False] * n_k)[:n_k]
    punct = ([hstats.is_punctuation(x.text) and not x.special for x in k_tokens] + [False] * n_k)[:n_k]
    return special, punct, word_of


def feed_blocks(result: Analysis, feed, stacks=None) -> None:
    """Hand every layer's weights of ``stacks`` (default: all) to ``feed(stack, layer, q0, k0, w)`` block by
    block, ``w`` float32 ``(heads, rows, cols)``: the kept arrays a layer at a time, else one more forward pass
    (:class:`models.analysis.store.Replay`) that never holds a whole layer of a long input."""
    stacks = list(result.attentions) if stacks is None else list(stacks)

    def visit(stack: str, layer: int, q0: int, k0: int, w: torch.Tensor) -> None:
        feed(stack, layer, q0, k0, w.detach().float())

    replay = None
    for stack in stacks:
        lazy = result.attentions[stack]
        if lazy.kept is not None:
            for layer in range(lazy.shape[0]):
                feed(stack, layer, 0, 0, torch.tensor(lazy.kept[layer]))
        elif lazy.lse is not None:  # from the kept queries, keys and log-sum-exp: no forward pass
            lazy.lse.run({(stack, layer) for layer in range(lazy.shape[0])}, visit)
        else:
            replay = lazy.replay
    if replay is not None:
        replay.run({(stack, layer) for stack in stacks if result.attentions[stack].source == "replay"
                    for layer in range(result.attentions[stack].shape[0])}, visit)


def _summaries(result: Analysis) -> tuple[dict, dict]:
    """Per-head statistics and pooled overview maps of every stack (:mod:`models.analysis.statistics`), from the kept
    weights, or else from one more forward pass: through the fused CPU kernel where it can read every layer
    (:func:`models.analysis.flash_summary.summaries`: a few kernel calls per layer, no weight held), else handing
    every layer's weights over block by block (never a whole layer at once)."""
    accs = {}
    for stack, lazy in result.attentions.items():
        layers, heads, n_q, n_k = lazy.shape
        special, punct, word_of = key_flags(result, stack)
        accs[stack] = (hstats.HeadStatistics(layers, heads, n_q, n_k, special=special, punctuation=punct,
                                             word_of=word_of, self_attention=stack != "cross"),
                       hstats.Overview(layers, heads, n_q, n_k))

    def feed(stack: str, layer: int, q0: int, k0: int, w: torch.Tensor) -> None:
        for acc in accs[stack]:
            acc.add(layer, q0, k0, w)

    lazies = list(result.attentions.values())
    replay = lazies[0].replay if lazies and all(x.source == "replay" for x in lazies) else None
    if replay is None or not flash_summary.summaries(result, replay, accs):  # the fused CPU kernel's pass, or blocks
        feed_blocks(result, feed)
    return ({stack: acc[0].result() for stack, acc in accs.items()},
            {stack: acc[1].result() for stack, acc in accs.items()})
