"""One layer of one analysis made ready to explain its scores (:func:`explain` → :class:`LayerWhy`): one pass up to
the layer's attention call (:mod:`.record`), the stream entering it as parts (:mod:`.stream`), its query and key
chains proven (:mod:`.sides`)."""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, overload

import numpy as np
import torch

from .. import checks
from ..anatomy.residual import flow_layout
from ..anatomy.rotary import find_rotary
from ..anatomy.tensors import tolerance
from ..capture.blocks import block_of
from ..errors import InvalidArgumentError, UnsupportedOperationError
from ..flow.record import guard_memory
from .record import earlier_layer, run_pass
from .refuse import broken, refuse
from .results import NeuronView, RopeSplit, RowTerms
from .sides import FrozenSide, device_of, find_side, freeze_side, rotate
from .stream import Component, Stream, embedding_parts, stream_biases

_CACHE: OrderedDict = OrderedDict()  # (id(analysis), stack, layer) -> (weakref to the analysis, LayerWhy)
_CACHE_SIZE = 2
_LOCK = threading.Lock()


class LayerWhy:
    """One layer of one analysis, ready to explain its scores (made by :func:`explain`; every method validates its
    arguments and raises :class:`~models.errors.InvalidArgumentError` for a head or position out of range).

    Attributes:
        model, stack, layer: where. heads, kv_heads, head_dim: the layer's. n_q, n_k: queries and keys.
        components: the parts of the stream entering the layer (:class:`~models.why.stream.Component`).
        scaling: ``σ`` (the call's ``scaling``, else ``head_dim^-1/2`` as the eager functions default).
        softcap: ``c`` or None. rotary: the family rotates queries and keys (RoPE).
        position_bias: T5's relative position bias ``(1, heads, n_q, n_k)`` as the call received it, or None.
        q, k: the proven chains (:class:`~models.why.sides.FrozenSide`). stream: the :class:`~models.why.stream.Stream`.
        call: the layer's attention call (query ``(1, heads, n_q, head_dim)``, key ``(1, kv_heads, n_k, head_dim)``,
            value, mask, extra arguments; a weak reference to the module). labels: the query tokens' text.
        tol: the tolerance of the checks (:func:`models.anatomy.tensors.tolerance` of the model's dtype).
    """

    model: str
    stack: str
    layer: int
    heads: int
    kv_heads: int
    head_dim: int
    n_q: int
    n_k: int
    components: list[Component]
    scaling: float
    softcap: float | None
    rotary: bool
    position_bias: torch.Tensor | None
    q: FrozenSide
    k: FrozenSide
    stream: Stream
    call: tuple[Any, ...]  # (eager, weakref to the module, query, key, value, mask, empty rows, args, kwargs)
    labels: list[str]
    tol: float
    max_positions: int
    tables: Callable[[int], tuple[torch.Tensor, torch.Tensor]]

    def __init__(self, **kw):
        self.__dict__.update(kw)

    # ---- checks ------------------------------------------------------------------------------------------------
    def _head(self, head) -> int:
        return checks.whole("head", head, 0, self.heads - 1)

    def _pos(self, name: str, value, n: int) -> int:
        return checks.whole(name, value, -n, n - 1) % n

    def _kv(self, head: int) -> int:
        return head // (self.heads // self.kv_heads)

    # ---- the model's own numbers -------------------------------------------------------------------------------
    def _row(self, head: int, i: int):
        """``(raw (n_k,), bias, logits, weights, allowed)`` float64 / bool for query ``i`` of ``head``, from the
        captured query and key, and the weights by the family's eager function on that row; checked against each
        other (the softmax of the logits is the eager weights)."""
        eager, module_ref, query, key, value, mask, empty, args, kwargs = self.call
        g = self._kv(head)
        q = query[0, head, i].double().cpu()
        k = key[0, g].double().cpu()
        raw = self.scaling * (k @ q)
        capped = raw if self.softcap is None else self.softcap * torch.tanh(raw / self.softcap)
        bias = torch.zeros_like(raw)
        if self.position_bias is not None:
            pb = self.position_bias
            bias = pb[0, head if pb.shape[1] > 1 else 0, i if pb.shape[2] > 1 else 0].double().cpu()
        add = torch.zeros_like(raw)
        allowed = torch.ones_like(raw, dtype=torch.bool)
        if mask is not None:
            m = mask[0, 0 if mask.shape[1] == 1 else head, i if mask.shape[2] > 1 else 0].cpu()
            if m.dtype == torch.bool:
                allowed = m
            else:
                add = m.double()
                allowed = m > torch.finfo(m.dtype).min / 2
        logits = torch.where(allowed, capped + bias + add, torch.tensor(float("-inf"), dtype=torch.float64))
        n_q, n_k = query.shape[-2], key.shape[-2]
        m = mask
        if m is not None and m.dim() == 4 and m.shape[-2] == n_q:
            m = m[..., i:i + 1, :]
        sub_args = [block_of(a, n_q, n_k, i, i + 1, 0, n_k) for a in args]
        sub_kwargs = {name: block_of(v, n_q, n_k, i, i + 1, 0, n_k) for name, v in kwargs.items()}
        module = module_ref()
        if module is None:
            raise UnsupportedOperationError("The model of this explanation was unloaded (the model cache dropped "
                                            "it): explain the layer again.", code="flow_model_gone")
        with torch.no_grad():
            _, w = eager(module, query[:, :, i:i + 1], key, value, m, *sub_args, **sub_kwargs)
        weights = w[0, head, 0].double().cpu()
        if empty is not None and bool(empty[i]):
            weights = torch.zeros_like(weights)
        elif bool(allowed.any()):
            mine = torch.softmax(logits, -1)
            worst = float((mine - weights).abs().max())
            if worst > 10 * self.tol:
                broken(self.stack, self.layer, "weights", worst, 10 * self.tol)
        return raw, bias, logits, weights, allowed

    # ---- the API -----------------------------------------------------------------------------------------------
    def neuron_view(self, head: int, i: int, j: int) -> NeuronView:
        """The neuron view of query ``i`` and key ``j`` of ``head`` (:class:`~models.why.results.NeuronView`).

        Raises:
            InvalidArgumentError: a head or position out of range.
            UnsupportedOperationError: the softmax of the logits is not the model's weights (code ``why_identity``).
        """
        head = self._head(head)
        i, j = self._pos("i", i, self.n_q), self._pos("j", j, self.n_k)
        raw, bias, logits, weights, allowed = self._row(head, i)
        q = self.call[2][0, head, i].float().cpu()
        k = self.call[3][0, self._kv(head), j].float().cpu()
        cap = raw if self.softcap is None else self.softcap * torch.tanh(raw / self.softcap)
        unq = self.q.before_rope[i, head].numpy() if self.rotary else None
        unk = self.k.before_rope[j, self._kv(head)].numpy() if self.rotary else None
        f = lambda t: t.numpy().astype(np.float32)  # noqa: E731
        return NeuronView(head, self._kv(head), i, j, f(q), f(k), f(q * k), unq, unk, float(self.scaling),
                          self.softcap, float(raw[j]), float(cap[j]), float(bias[j]), bool(allowed[j]),
                          float(logits[j]), float(weights[j]), f(logits), f(weights))

    @guard_memory
    def row_terms(self, head: int, i: int) -> RowTerms:
        """Every raw score of query ``i`` of ``head`` split into terms (:class:`~models.why.results.RowTerms`).

        Cost: the parts of the stream at every key through the key chain (``Ck · n_k · d · head_dim``
        multiply-adds) and at ``i`` through the query chain, in float64; no forward pass. Memory: ``Ck · n_k ·
        head_dim`` float64 while computing, kept as float32 in the result.

        Raises:
            InvalidArgumentError: a head or position out of range.
            AttentionTooLargeError: the key side's parts would pass 256 MiB (a very long text: ask a shorter one).
            UnsupportedOperationError: a check fails on this run (code ``why_identity``): the parts of the query or
                the key do not add up to the model's, or the terms to the score.
        """
        head = self._head(head)
        i = self._pos("i", i, self.n_q)
        g = self._kv(head)
        checks.cells("the key side's parts", len(self.components) + 1, self.n_k, self.head_dim)
        pos_i, pos_k = torch.tensor([i]), torch.arange(self.n_k)
        qparts = torch.cat([self.q.linear(b, pos_i, head)[:, 0] for b in self.stream.blocks(pos_i)]
                           + [self.q.constant(pos_i, head)])  # (Cq, dh)
        kparts = torch.cat([self.k.linear(b, pos_k, g) for b in self.stream.blocks(pos_k)]
                           + [self.k.constant(pos_k, g)[None]])  # (Ck, n_k, dh)
        q_model = self.call[2][0, head, i].double().cpu()
        k_model = self.call[3][0, g].double().cpu()
        self._check("query", qparts.sum(0), q_model)
        self._check("key", kparts.sum(0), k_model)
        q_hat, k_hat = qparts.sum(0), kparts.sum(0)
        key_side = self.scaling * torch.einsum("bjc,c->jb", kparts, q_hat)
        query_side = self.scaling * (k_hat @ qparts.t())  # (n_k, Cq)
        raw, bias, logits, weights, allowed = self._row(head, i)
        self._check("score", key_side.sum(1), raw)
        own = [Component("own_bias", "query bias")]
        f = lambda t: t.numpy().astype(np.float32)  # noqa: E731
        return RowTerms(self.model, self.stack, self.layer, head, g, i, self.stream.components + own,
                        self.stream.components + [Component("own_bias", "key bias")], f(query_side), f(key_side),
                        f(raw), f(bias), f(logits), f(weights), allowed.numpy(), f(qparts), f(kparts),
                        labels=list(self.labels), scaling=float(self.scaling))

    def _check(self, what: str, got: torch.Tensor, want: torch.Tensor) -> None:
        tol = self.tol * (1 + float(want.abs().max()))
        worst = float((got - want).abs().max()) if want.numel() else 0.0
        if worst > tol:
            broken(self.stack, self.layer, what, worst, tol)

    def rope_split(self, head: int, i: int, j: int | None = None, max_distance: int | None = None) -> RopeSplit:
        """Position against content in the raw scores of query ``i`` (:class:`~models.why.results.RopeSplit`), with
        the curve for key ``j`` (default: the key ``head`` weights most) over distances ``0 .. max_distance``
        (default ``max(i, 1)``).

        Raises:
            InvalidArgumentError: a head or position out of range, ``max_distance`` not in [1, model's positions].
            UnsupportedOperationError: a family without RoPE (code ``why_refused``, reason ``no_rope``).
        """
        q_rope, k_rope = self.q.side.rope, self.k.side.rope
        if not self.rotary or q_rope is None or k_rope is None:
            refuse(self.model, self.stack, "no_rope")
        head = self._head(head)
        i = self._pos("i", i, self.n_q)
        j = None if j is None else self._pos("j", j, self.n_k)
        top = checks.whole("max_distance", max_distance, 1, self.max_positions, none=True) or max(i, 1)
        raw, bias, logits, weights, allowed = self._row(head, i)
        j = int(torch.argmax(weights)) if j is None else j
        g = self._kv(head)
        cos, sin = self.tables(top + 1)
        side = q_rope[1]
        q0 = rotate(self.q.before_rope[i, head].double()[None], cos[:1], sin[:1], side)[0]
        k0 = rotate(self.k.before_rope[:, g].double(), cos[:1].expand(self.n_k, -1), sin[:1].expand(self.n_k, -1),
                    k_rope[1])
        content = self.scaling * (k0 @ q0)
        positional = raw - content
        total = content.abs() + positional.abs()
        share = torch.where(total > 0, positional.abs() / total.clamp_min(1e-300), torch.zeros_like(total))
        turned = rotate(self.q.before_rope[i, head].double().expand(top + 1, -1), cos, sin, side)
        curve = self.scaling * (turned @ k0[j])
        f = lambda t: t.numpy().astype(np.float32)  # noqa: E731
        return RopeSplit(head, i, j, f(raw), f(content), f(positional), f(share), float((weights * share).sum()),
                         np.arange(top + 1, dtype=np.int64), f(curve))


def _site(loaded, stack: str, layer: int):
    return next(s for s in loaded.sites if s.stack == stack and s.layer == layer)


@checks.needs_model
def explain(loaded, analysis, stack: str | None = None, layer: int = 0, keep: bool = True) -> LayerWhy:
    """Make layer ``layer`` of ``stack`` of ``analysis`` ready to explain its scores: one forward pass of the analysis's
    own call (same heads off, same mask) up to that layer's attention call, with the stream entering it split into
    parts and its query and key chains proven (see :mod:`models.why`). With ``keep``, the last two are kept (per
    analysis, stack and layer, no longer than the analysis lives) so a caller asking for several heads and positions
    runs the pass once; a caller with a cache of its own (the app's, bounded by bytes) passes ``keep=False``.

    Args:
        loaded: the model ``analysis`` came from. analysis: from :func:`models.analyze` (interface path).
        stack: ``encoder`` or ``decoder`` (default: the stack that reads the input). layer: 0 .. layers − 1.

    Returns:
        :class:`LayerWhy`. Memory: per earlier layer the projection's input and the rest of the layer (``2 · n · d``
        floats) and the frozen norms of post-LN and sandwich layers.

    Raises:
        InvalidArgumentError: an analysis of another model, an unknown stack, a layer out of range.
        UnsupportedOperationError: code ``why_refused`` where the identity cannot hold (fallback path, cross-attention,
            hybrid blocks, a layer shared between depths, heads mixed before the projection, a learned sink, a chain
            not proven), or ``why_identity`` where a check fails on this run.
        ModelOutOfMemoryError: the pass ran out of memory.
    """
    stack, layer = where(loaded, analysis, stack, layer)
    key = (id(analysis), stack, layer)
    with _LOCK:
        found = _CACHE.get(key)
        if found is not None and found[0]() is analysis:
            _CACHE.move_to_end(key)
            return found[1]
    why = _build(loaded, analysis, stack, layer)
    if not keep:
        return why
    with _LOCK:
        # dropped when the analysis is freed: a layer explained never outlives the analysis it explains
        _CACHE[key] = (weakref.ref(analysis, lambda _: _forget(key)), why)
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return why


def _forget(key) -> None:
    with _LOCK:
        _CACHE.pop(key, None)


def where(loaded, analysis, stack, layer) -> tuple[str, int]:
    """:func:`explain`'s ``(stack, layer)`` checked, before any tensor is touched (no pass, no indexing).

    Raises:
        InvalidArgumentError: an analysis of another model (code ``flow_other_model``), an unknown stack
            (``arg_choice``), a layer out of range (``arg_whole``).
        UnsupportedOperationError: ``cross`` (code ``why_refused``).
    """
    if getattr(analysis, "model", None) != loaded.name or not hasattr(analysis, "run"):
        raise InvalidArgumentError(f"The analysis is not one of '{loaded.name}' (it is of "
                                   f"{getattr(analysis, 'model', None)!r}): pass the model it came from.",
                                   code="flow_other_model", model=loaded.name,
                                   other=checks.shown(getattr(analysis, "model", None)))
    stack = loaded.input_stack if stack is None else stack
    if isinstance(stack, str) and stack == "cross" and "cross" in loaded.stacks:
        refuse(loaded.name, stack, "cross")
    stack = checks.choice("stack", stack, [s for s in loaded.stacks if s != "cross"])
    return stack, checks.whole("layer", layer, 0, loaded.stacks[stack][0] - 1)


@overload
def checked(loaded, analysis, stack, layer, head, i, j: int) -> tuple[str, int, int, int, int]: ...
@overload
def checked(loaded, analysis, stack, layer, head, i, j: None = None) -> tuple[str, int, int, int, None]: ...
def checked(loaded, analysis, stack, layer, head, i, j=None) -> tuple[str, int, int, int, int | None]:
    """``(stack, layer, head, i, j)`` of a call of :mod:`models.why` checked before its pass runs (positions as
    indices ``0 .. n − 1``; ``j`` None stays None): the heads from ``loaded.stacks``, the query and key counts from
    the shape ``(layers, heads, n_q, n_k)`` of the analysis's weights of that stack. On a GPU an index out of range
    must never reach a kernel (a device-side assert ends the process's use of the GPU), so nothing here indexes a
    tensor; :class:`LayerWhy`'s methods check again against the captured call.

    Raises:
        InvalidArgumentError: as :func:`where`; a head (``arg_whole``) or position (``arg_whole``) out of range.
        UnsupportedOperationError: as :func:`where`.
    """
    stack, layer = where(loaded, analysis, stack, layer)
    head = checks.whole("head", head, 0, loaded.stacks[stack][1] - 1)
    maps = getattr(analysis, "attentions", None)
    shape = getattr(maps.get(stack), "shape", None) if isinstance(maps, dict) else None
    if shape is None or len(shape) != 4:  # a stack the analysis does not show: the layer's call checks them
        return stack, layer, head, i, j
    n_q, n_k = int(shape[2]), int(shape[3])
    i = checks.whole("i", i, -n_q, n_q - 1) % n_q
    j = None if j is None else checks.whole("j", j, -n_k, n_k - 1) % n_k
    return stack, layer, head, i, j


def _build(loaded, analysis, stack: str, layer: int) -> LayerWhy:
    """:func:`explain`'s work once the arguments are checked."""
    if loaded.capture_path != "interface" or analysis.run is None or stack in loaded.fallback_stacks:
        refuse(loaded.name, stack, "fallback")
    layout = flow_layout(loaded)
    if stack in layout.refused:
        refuse(loaded.name, stack, layout.refused[stack])
    if (stack, layer) not in layout.layers:
        refuse(loaded.name, stack, "placement")
    site = _site(loaded, stack, layer)
    if site.sink:
        refuse(loaded.name, stack, "sink")
    tol = tolerance(loaded.dtype)
    modules = dict(loaded.model.named_modules())
    rec = run_pass(loaded, analysis.run, layout, stack, {layer}, layer)
    earlier = []
    for lay in range(layer):
        e = earlier_layer(rec, layout.layers[(stack, lay)], lay, modules, tol)
        if isinstance(e, str):
            refuse(loaded.name, stack, e)
        earlier.append(e)
    first = layout.layers[(stack, 0)].block
    emb_module = loaded.model.get_input_embeddings() if hasattr(loaded.model, "get_input_embeddings") else None
    weight = getattr(emb_module, "weight", None)
    token_names = {n for n, m in modules.items() if m is emb_module or (
        weight is not None and isinstance(m, torch.nn.Embedding) and m.weight is weight)}
    parts = embedding_parts(rec, first, token_names, modules, tol)
    if isinstance(parts, str):
        refuse(loaded.name, stack, parts)
    embeddings, start = parts
    x = rec.streams[layer]
    n, d = x.shape
    gates = {lay: g for (s, lay), g in analysis.run.gates.items() if s == stack}
    seq2seq_decoder = stack == "decoder" and "cross" in loaded.stacks
    stream = Stream(embeddings, earlier, stream_biases(n, d, start, earlier), site.heads, gates,
                    "cross-attention + MLP" if seq2seq_decoder else "MLP")
    ends = torch.tensor(sorted({0, n // 2, n - 1}))
    total = stream.total(ends)
    worst = float((total - x[ends]).abs().max())
    if worst > tol * (1 + float(x[ends].abs().max())):
        broken(stack, layer, "stream", worst, tol * (1 + float(x[ends].abs().max())))
    call = rec.calls[(stack, layer)]
    eager, module, query, key, value, mask, empty, args, kwargs = call
    rotary = find_rotary(loaded)
    block = layout.layers[(stack, layer)].block
    seen = {name: io for name, io in rec.seen.items() if name.startswith(block + ".") and io[0] is not None}
    sides = {}
    for which, want in (("query", query), ("key", key)):
        side = find_side(want[0].float().cpu(), x, seen, modules, site.name, rotary, tol)
        frozen = freeze_side(side, seen, modules, rotary, tol) if side is not None else None
        if frozen is None:
            refuse(loaded.name, stack, "projections" if side is None else "norm")
        sides[which] = frozen
    scaling = kwargs.get("scaling")
    scaling = float(query.shape[-1] ** -0.5 if scaling is None else scaling)
    softcap = kwargs.get("softcap")
    bias = kwargs.get("position_bias")
    labels = [t.label for t in analysis.axis_tokens(stack)[0]]
    return LayerWhy(model=loaded.name, stack=stack, layer=layer, heads=int(query.shape[1]),
                    kv_heads=int(key.shape[1]), head_dim=int(query.shape[-1]), n_q=int(query.shape[-2]),
                    n_k=int(key.shape[-2]), components=stream.components, scaling=scaling,
                    softcap=float(softcap) if softcap else None, rotary=sides["query"].side.rope is not None,
                    position_bias=bias if isinstance(bias, torch.Tensor) else None, tol=tol, stream=stream,
                    q=sides["query"], k=sides["key"], labels=labels, max_positions=loaded.max_positions,
                    call=(eager, weakref.ref(module), query, key, value, mask, empty, args, kwargs),
                    tables=lambda count, _r=rotary, _t=sides["query"].side.rope: _tables(_r, _t, count))


def _tables(rotary, rope, count: int):
    """float64 ``cos, sin (count, rotary_dim)`` at positions ``0 .. count − 1`` for the layer's rotation."""
    cos, sin = rotary.tables(range(count), device_of(rotary), rope[0] if rope else None)
    return cos.double(), sin.double()
