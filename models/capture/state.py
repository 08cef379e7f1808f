"""Per-call capture state: what one forward pass records, which heads it switches off, which masks it replaces.

All per-request state lives in a :class:`contextvars.ContextVar` set by :func:`capture`, never on the shared
model, so Streamlit sessions (threads) that share one cached model never see each other's heads or masks.
"""

from __future__ import annotations

import contextvars
from contextlib import contextmanager
from dataclasses import dataclass, field
from collections.abc import Callable, Iterator, Mapping

import torch

from ..sites.site import Site

# Largest block of attention weights one eager call computes, in bytes (float32 count x 4); above it the
# queries are split into blocks of rows. Sized to stay in the processor's cache between the eager
# function's steps and the statistics that read the block.
CHUNK_BYTES = 8 << 20
# Called with no argument whenever a :func:`capture` context ends (also after :class:`StopForward`): the
# fallback path's softmax modes register their clean-up here, so this module imports none of them.
ON_EXIT: list[Callable[[], None]] = []


@dataclass
class CaptureState:
    """Per-call state read by :func:`dikkat_attention` and the fallback hooks.

    Attributes:
        sites: ``id(module) -> Site`` of the model being run (empty while probing), or a tuple of sites for
            a module called several times per forward pass (one per call, in call order).
        forwards: ``id(module) -> forward calls so far`` of each attention module in this context (counted
            by :func:`install_call_counters`' pre-hooks).
        seen: ``id(module) -> the forward call`` its last attention call belonged to: a second attention call
            within one forward call of the module (DiffLlama computes its two softmax maps with shared
            queries and keys, so the second equals the first) runs with the same gates but is not recorded,
            sent to a sink or counted as a layer.
        record: keep the attention weights of every call in ``weights`` (sites not sent to ``sink``).
        weights: ``(stack, layer) -> tensor (batch, heads, query_len, key_len)`` in compute dtype; for a
            module called several times in one context (generation), the last call wins.
        gates: ``(stack, layer) -> tensor (batch, heads)`` or ``(heads,)``; the per-head output is
            multiplied by it (0 switches a head off; a tensor with ``requires_grad`` gives gradients).
        masks: ``stack -> bool tensor (n, n)``, True where a query may attend a key; replaces the
            model's own mask for that self-attention stack. Rows with no allowed key give zero weights
            and a zero per-head output (never NaN). Or ``stack ->`` :class:`models.analysis.head_masks.HeadRules`:
            a mask per head (:mod:`models.capture.head_rules`), made at each call of a layer that has one.
        outputs: when not None, ``(stack, layer) -> (batch, query_len, heads, head_dim)`` output of each site's
            (first) attention call, after its gate (used at load time: :func:`models.anatomy.gates.gate_points`).
        probe: when not None, ``(module, query heads, query_len, key_len, output)`` of every attention call is
            appended, in call order (used at load time: :mod:`models.anatomy.probe`); ``output`` is the call's
            ``(batch, query_len, heads, head_dim)`` output.
        sink: when not None, ``sink(site, q0, k0, weights, q_len, k_len)`` receives the weights of every
            wanted site block by block, as they are computed: ``weights`` is ``(batch, heads, rows, cols)`` in
            compute dtype for queries ``q0 .. q0 + rows - 1`` of ``q_len`` and keys ``k0 .. k0 + cols - 1`` of
            ``k_len``; every key outside
            that range has weight exactly 0 (it is masked). The tensor is freed after the call, so a sink
            that keeps it must copy it.
        mask_sink: when not None, ``mask_sink(site, attention_mask, q_len, k_len)`` receives the mask each
            wanted site was actually called with (after any replacement), before its weights.
        want: ``(stack, layer)`` pairs sent to the sinks; None for every site.
        pending: when not None, the wanted pairs not seen yet; the forward pass stops (raises
            :class:`StopForward`) as soon as it is empty, so layers after the last wanted one never run.
        chunk_bytes: the largest block of weights one eager call may produce (``batch · heads · rows ·
            key_len · 4`` bytes); longer inputs are computed in blocks of query rows (see
            :func:`dikkat_attention`). Weights are never held for a whole layer unless ``record`` asks.
        rows: when not None, ``(r0, r1)``: the sink receives only the weights of query rows ``r0 .. r1 - 1`` of
            each wanted site, computed by the family's eager function on those rows alone (one block, ``q0 =
            r0``), and the call's output is computed as for a site nobody reads (fused when ``fused``): the last
            rows of a long text (a needle's answer) without the whole map.
        made_masks: the additive masks built from ``masks``, one per stack and call shape, shared by the
            layers.
        plans: the blocks of each mask and shape (:func:`plan_blocks`), with the mask they were made for
            (kept alive so its id is not reused), shared by the layers.
        fused: run every site whose weights nobody asks for (not sent to a sink, not recorded) through
            transformers' ``sdpa_attention_forward`` (the fused kernel: no weights are materialised) instead
            of the family's eager function. Only for models whose class supports sdpa
            (``LoadedModel.sdpa_ok``); a call with a ``softcap`` or positional extra arguments still runs
            eager. Outputs then equal eager's up to float rounding (~1e-6 relative in float32), not bit
            for bit.
        at_softmax: fallback path: ``(stack, layer) -> (batch, heads, q, k)`` weights recorded at the layer's
            softmax: for a site read there (``Site.read_at_softmax``), and for one whose heads were switched
            off there (``Site.softmax_gate``), before the gate: what its map shows, as on the interface path
            (the eager ``output_attentions`` hold the gated weights).
        stats: when not None, ``stats(site, eager, module, query, key, value, attention_mask, args, kwargs)`` is
            called for each wanted site's attention call with the mask after any replacement, before its output
            is computed (:func:`models.analysis.stats_pass.head_statistics`: statistics from the log-sum-exp); when
            it returns a tensor ``(batch, query_len, heads, head_dim)`` (and nothing records or sinks the weights),
            that is the call's output.
        calls: when not None, ``(stack, layer) -> (eager, module, query, key, value, attention_mask, empty_rows,
            args, kwargs)`` of each wanted site's attention call (its last), with the mask after any replacement:
            :mod:`models.flow` calls the family's eager function again on chosen query rows.
    """

    sites: Mapping[int, Site | tuple[Site, ...]] = field(default_factory=dict)
    forwards: dict[int, int] = field(default_factory=dict)
    seen: dict[int, int] = field(default_factory=dict)
    record: bool = True
    weights: dict[tuple[str, int], torch.Tensor] = field(default_factory=dict)
    gates: dict[tuple[str, int], torch.Tensor] = field(default_factory=dict)
    masks: dict[str, torch.Tensor] = field(default_factory=dict)
    probe: list | None = None
    outputs: dict | None = None
    sink: Callable | None = None
    mask_sink: Callable | None = None
    want: set | None = None
    pending: set | None = None
    chunk_bytes: int = 0
    rows: tuple[int, int] | None = None
    made_masks: dict = field(default_factory=dict)
    plans: dict = field(default_factory=dict)
    fused: bool = False
    at_softmax: dict = field(default_factory=dict)
    calls: dict | None = None
    stats: Callable | None = None


class StopForward(Exception):
    """Raised inside a forward pass once every wanted layer has been seen (:attr:`CaptureState.pending`)."""


_STATE: contextvars.ContextVar[CaptureState | None] = contextvars.ContextVar("dikkat_capture", default=None)


def per_head(gate: torch.Tensor, batch: int) -> torch.Tensor:
    """A gate ``(heads,)`` (every batch row alike) or ``(batch, heads)`` as ``(batch, heads)``."""
    return gate if gate.dim() == 2 else gate[None].expand(batch, -1)


@contextmanager
def capture(
    sites: Mapping[int, Site | tuple[Site, ...]],
    *,
    record: bool = True,
    gates: dict[tuple[str, int], torch.Tensor] | None = None,
    masks: dict[str, torch.Tensor] | None = None,
    sink: Callable | None = None,
    mask_sink: Callable | None = None,
    want: set | None = None,
    stop_after: bool = False,
    chunk_bytes: int | None = None,
    fused: bool = False,
    rows: tuple[int, int] | None = None,
    stats: Callable | None = None,
) -> Iterator[CaptureState]:
    """Context in which forward passes of a model loaded with ``"dikkat"`` record weights, apply
    head gates and replace masks. State is per context (thread / asyncio task), never global. The engine opens it
    only through :func:`models.capture.rerun` (no gradients, hooks removed, out of memory as the coded error).

    Args:
        sites: ``id(module) -> Site`` (``LoadedModel.site_index``).
        record: keep whole weights in ``state.weights`` (sites not sent to ``sink``).
        gates: ``(stack, layer) -> (batch, heads)`` or ``(heads,)`` float tensor; 1 keeps a head, 0
            switches it off. Layers without an entry run untouched (bit-identical outputs).
        masks: ``stack -> bool (n, n)`` mask replacing the model's own mask for that stack.
        sink, mask_sink: receive each wanted site's weights block by block and the mask it was called
            with (see :class:`CaptureState`).
        want: ``(stack, layer)`` pairs sent to the sinks (None: every site).
        stop_after: stop the forward pass (:class:`StopForward`) once every pair in ``want`` was seen.
        chunk_bytes: largest block of weights per eager call, in bytes (default :data:`CHUNK_BYTES`;
            0 for one call per layer, whatever its size).
        fused: sites whose weights nobody reads run the fused sdpa kernel (see :class:`CaptureState`);
            only for models with ``LoadedModel.sdpa_ok``.
        rows: ``(r0, r1)``: the sink gets the weights of query rows ``r0 .. r1 - 1`` only (see
            :class:`CaptureState`).
        stats: called with each wanted site's call (see :class:`CaptureState`).

    Yields:
        The :class:`CaptureState`; read ``state.weights`` after the forward pass.
    """
    state = CaptureState(sites=sites, record=record, gates=dict(gates or {}), masks=dict(masks or {}), sink=sink,
                         mask_sink=mask_sink, want=set(want) if want is not None else None,
                         pending=set(want) if (stop_after and want) else None,
                         chunk_bytes=CHUNK_BYTES if chunk_bytes is None else int(chunk_bytes), fused=bool(fused),
                         rows=rows, stats=stats)
    token = _STATE.set(state)
    try:
        yield state
    finally:
        for leave in ON_EXIT:  # e.g. softmax modes a stopped forward pass left entered (models.capture.softmax)
            leave()
        _STATE.reset(token)


def current() -> CaptureState | None:
    """The :class:`CaptureState` of the calling context (thread / task), or None outside :func:`capture`."""
    return _STATE.get()


@contextmanager
def probing() -> Iterator[CaptureState]:
    """Context that lists every module calling :func:`dikkat_attention`, in call order."""
    state = CaptureState(record=True, probe=[])
    token = _STATE.set(state)
    try:
        yield state
    finally:
        _STATE.reset(token)
