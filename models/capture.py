"""The one capture mechanism: record attention weights, switch heads off, replace masks.

How it works (see DESIGN.md, "Facts about transformers 5.x"):

* **Interface path.** Models are loaded with ``attn_implementation="dikkat"``. The name is registered
  with ``transformers.AttentionInterface`` (the function :func:`dikkat_attention` below) and with
  ``AttentionMaskInterface`` (transformers' own ``eager_mask``, so decoders still receive their causal
  mask). :func:`dikkat_attention` delegates to the ``eager_attention_forward`` of the calling module's own
  ``modeling_*.py`` file, which carries that family's quirks (GQA ``repeat_kv``, T5 position bias,
  softcapping, sliding windows), so the recorded weights are exactly the eager weights. Around that call
  it may replace the mask, and multiplies the per-head output ``(batch, query_len, heads, head_dim)``
  (the input of the output projection) by a per-head gate.
* **Fallback path.** Families whose attention does not route through the interface (GPT-Neo, Falcon,
  BLOOM, DeBERTa, XLNet, ...) run with ``attn_implementation="eager"`` and ``output_attentions=True``;
  heads are switched off by a forward pre-hook on the output projection that zeroes that head's slice
  of its input. Masks cannot be replaced on this path.

All per-request state (weights being recorded, gates, the mask) lives in a :class:`contextvars.ContextVar`
set by :func:`capture`, never on the shared model, so Streamlit sessions (threads) that share one cached
model never see each other's heads or masks.
"""

from __future__ import annotations

import contextvars
import re
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch
from torch import nn

from .blocks import allowed_keys, allowed_of, apply_mask, block_of, is_causal, plan_blocks  # noqa: F401

ATTN_IMPLEMENTATION = "dikkat"

# Name fragments that mark cross-attention modules in encoder-decoder models
# (BART/Marian/Whisper: encoder_attn, T5: EncDecAttention, BERT-as-decoder: crossattention).
_CROSS_MARKERS = ("encoder_attn", "encdecattention", "crossattention", "cross_attn", "cross_attention")
LAYER_INDEX = re.compile(r"\.(\d+)(?:\.|$)")
# Largest block of attention weights one eager call computes, in bytes (float32 count x 4); above it the
# queries are split into blocks of rows. Sized to stay in the processor's cache between the eager
# function's steps and the statistics that read the block.
CHUNK_BYTES = 8 << 20


@dataclass(frozen=True)
class Site:
    """One attention module of a model: which stack, which layer, how many heads.

    Attributes:
        stack: ``"encoder"``, ``"decoder"`` or ``"cross"``.
        layer: layer index within the stack (0-based).
        heads: number of query heads (maps recorded per layer).
        name: the module's dotted name in the model.
        out_proj: dotted name of the output projection whose input holds the per-head outputs, concatenated
            head after head, where heads are switched off by zeroing their slice of its input (a pre-hook):
            on the fallback path, and on the interface path where something lies between the attention
            function and the projection (BitNet's sub-norm: a gate at the function would rescale the other
            heads' slices); ``None`` if unknown (fallback) or not needed (interface: the gate is applied to
            the attention function's output, which is the projection's input).
        mixed_heads: interface path: the module mixes heads between the attention function and its output
            projection (DiffLlama's differential pairs), so no slice of the projection's input belongs to one
            head; switching a head off is refused.
        index: the layer's own number in the model (the index in its module name), when it differs from
            ``layer``: in a hybrid model only some blocks have attention (Jamba's block 4 may be its
            attention layer 0). None when the module is called several times per forward pass (ALBERT's
            shared layer: its calls are layers ``0 .. n - 1`` by depth).
        softmax_gate: fallback path only: the layer has no proven output projection, and its heads are
            switched off at its attention module's softmax instead (weights times the gate:
            :mod:`models.fallback_masks`), which removes the head's output ``A_h · V_h`` the same way.
        read_at_softmax: fallback path only: the model returns the scores before the softmax as its
            ``attentions`` (ProphetNet, SqueezeBERT); the weights are read at its attention module's softmax.
        sink: the module has a learned attention sink (a ``sinks`` parameter: GPT-OSS, MiMo-V2-Flash's
            sliding layers): one extra logit per head that joins the softmax but attends no token, so a
            query's weights over the tokens sum to ``1 - sink share`` (Xiao et al. 2024, "Efficient
            Streaming Language Models with Attention Sinks", §3.2: a learnable sink token; here without
            a value).
    """

    stack: str
    layer: int
    heads: int
    name: str
    out_proj: str | None = None
    index: int | None = None
    sink: bool = False
    softmax_gate: bool = False
    mixed_heads: bool = False
    read_at_softmax: bool = False

    @property
    def label(self) -> int:
        """The number to show for this layer: ``index`` when known, else ``layer``."""
        return self.layer if self.index is None else self.index


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
            and a zero per-head output (never NaN).
        outputs: when not None, ``(stack, layer) -> (batch, query_len, heads, head_dim)`` output of each site's
            (first) attention call, after its gate (used at load time: :func:`models.sites.gate_points`).
        probe: when not None, ``(module, query heads, query_len, key_len)`` of every attention call is
            appended, in call order (used at load time).
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
        calls: when not None, ``(stack, layer) -> (eager, module, query, key, value, attention_mask, empty_rows,
            args, kwargs)`` of each wanted site's attention call (its last), with the mask after any replacement:
            :mod:`models.flow` calls the family's eager function again on chosen query rows.
    """

    sites: dict[int, Site | tuple[Site, ...]] = field(default_factory=dict)
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
    made_masks: dict = field(default_factory=dict)
    plans: dict = field(default_factory=dict)
    fused: bool = False
    at_softmax: dict = field(default_factory=dict)
    calls: dict | None = None


class StopForward(Exception):
    """Raised inside a forward pass once every wanted layer has been seen (:attr:`CaptureState.pending`)."""


_STATE: contextvars.ContextVar[CaptureState | None] = contextvars.ContextVar("dikkat_capture", default=None)


def _eager_for(module: nn.Module):
    """The module-level ``eager_attention_forward`` of the file that defines ``module``'s class."""
    mod = sys.modules.get(type(module).__module__)
    fn = getattr(mod, "eager_attention_forward", None)
    if fn is None:  # e.g. a subclass defined elsewhere: walk the MRO
        for klass in type(module).__mro__[1:]:
            fn = getattr(sys.modules.get(klass.__module__), "eager_attention_forward", None)
            if fn is not None:
                break
    if fn is None:
        raise RuntimeError(f"No eager_attention_forward found for {type(module).__qualname__}")
    return fn


def dikkat_attention(module, query, key, value, attention_mask, *args, **kwargs):
    """Attention function registered as ``"dikkat"`` with ``transformers.AttentionInterface``.

    Args:
        module: the calling attention module.
        query: ``(batch, heads, query_len, head_dim)``.
        key, value: ``(batch, kv_heads, key_len, head_dim)``; the eager function repeats key/value
            heads for grouped-query attention.
        attention_mask: additive float mask ``(batch, 1, query_len, key_len)`` or None.

    Returns:
        ``(attn_output (batch, query_len, heads, head_dim), attn_weights (batch, heads, query_len,
        key_len) or None)`` in the module's compute dtype, exactly as the family's ``eager_attention_forward``
        computes them (softmax(Q·Kᵀ·scaling + mask)·V, Vaswani et al. 2017, eq. 1, plus whatever the
        family adds: softcapping, position bias, GQA's repeated key/value heads, Ainslie et al. 2023),
        with heads gated and the mask replaced when the current :class:`CaptureState` asks for it. A
        query row with no allowed key under a replaced mask gets zero weights and a zero output.

        Long inputs (weights above ``CaptureState.chunk_bytes``) are computed in blocks of query rows,
        each by the same eager function on its rows of the query, the mask and any ``(q, k)``-shaped
        argument (T5's position bias), and only on the key columns that some row of the block may attend
        (:func:`plan_blocks`; a causal block skips the keys after its last row). Softmax and ``·V`` work
        row by row, so every weight is the eager weight; the sums inside may be grouped differently,
        so weights and outputs can differ from a single eager call in the last bits of float32 (below
        1e-6 in the tests). The weights of a blocked call are sent to the sink block by block and not
        returned (None) unless ``record`` asks for them.

    Raises:
        InvalidMaskError: a replacement mask smaller than the call's ``key_len``.
        RuntimeError: no ``eager_attention_forward`` in the module's ``modeling_*.py`` (nor its bases).
        StopForward: every wanted layer has been seen (:attr:`CaptureState.pending`).
    """
    eager = _eager_for(module)
    state = _STATE.get()
    if state is None:
        return eager(module, query, key, value, attention_mask, *args, **kwargs)
    mid = id(module)
    forward = state.forwards.get(mid, 0)
    again = state.seen.get(mid) == forward  # a second attention call within one forward call of the module
    state.seen[mid] = forward
    if state.probe is not None and not again:
        state.probe.append((module, int(query.shape[1]), int(query.shape[-2]), int(key.shape[-2])))
    site = state.sites.get(mid)
    if isinstance(site, tuple):  # a module called several times per forward pass: one site per call
        site = site[(forward - 1) % len(site)]
    if again and site is not None:
        gate = None if site.out_proj else state.gates.get((site.stack, site.layer))
        site = None
        if gate is not None:
            out, weights = eager(module, query, key, value, attention_mask, *args, **kwargs)
            gate = gate.to(device=out.device, dtype=out.dtype)
            return out * per_head(gate, out.shape[0])[:, None, :, None], weights
    empty_rows = None
    if site is not None and site.stack in state.masks:
        # one additive mask per stack and shape, reused by every layer (a long text's mask is large)
        made_key = (site.stack, query.shape[-2], key.shape[-2], query.dtype, query.device)
        made = state.made_masks.get(made_key)
        if made is None:
            made = state.made_masks[made_key] = apply_mask(state.masks[site.stack], query, key)
        attention_mask, empty_rows = made
        if not bool(empty_rows.any()):
            empty_rows = None
    chosen = site is not None and (state.want is None or (site.stack, site.layer) in state.want)
    if chosen and state.calls is not None:
        state.calls[(site.stack, site.layer)] = (eager, module, query, key, value, attention_mask, empty_rows, args,
                                                 kwargs)
    wanted = chosen and state.sink is not None
    q_len, k_len = query.shape[-2], key.shape[-2]
    if chosen and state.mask_sink is not None:
        state.mask_sink(site, attention_mask, q_len, k_len)
    per_cell = query.shape[0] * query.shape[1] * 4
    whole = state.chunk_bytes <= 0 or q_len * k_len * per_cell <= state.chunk_bytes
    keep = site is not None and state.record and not wanted
    if state.fused and site is not None and not wanted and not keep and not args and kwargs.get("softcap") is None:
        # nobody reads these weights: the fused kernel. With no mask the eager functions attend every key,
        # so sdpa must not fall back to its own causal default.
        mask, causal = attention_mask, False
        if mask is not None and q_len == k_len and empty_rows is None:
            # the plain causal mask: sdpa's own is_causal skips the blocks above the diagonal (2x fewer
            # products on a long text than with the same mask written out)
            found = state.plans.get(("causal", id(mask), q_len))
            if found is None:
                found = state.plans[("causal", id(mask), q_len)] = (is_causal(mask, q_len), mask)
            if found[0]:
                mask, causal = None, True
        call = dict(kwargs, is_causal=causal) if mask is None else kwargs
        out, weights = _sdpa()(module, query, key, value, mask, **call)
        if empty_rows is not None:
            out = out.masked_fill(empty_rows[None, :, None, None], 0.0)
    elif whole:
        out, weights = eager(module, query, key, value, attention_mask, *args, **kwargs)
        if empty_rows is not None:
            # A query with no allowed key attends to nothing: zero weights, zero output (no NaN, no
            # uniform smear over forbidden keys).
            weights = weights.masked_fill(empty_rows[None, None, :, None], 0.0)
            out = out.masked_fill(empty_rows[None, :, None, None], 0.0)
        if wanted:
            state.sink(site, 0, 0, weights, q_len, k_len)
        elif keep:
            state.weights[(site.stack, site.layer)] = weights
    else:
        outs, full = [], None
        # the plan depends only on the mask and the shapes: one per mask, shared by the layers
        plan_key = (id(attention_mask), q_len, k_len, per_cell, state.chunk_bytes)
        plan = state.plans.get(plan_key)
        if plan is None:
            plan = state.plans[plan_key] = (plan_blocks(attention_mask, q_len, k_len, per_cell, state.chunk_bytes),
                                            attention_mask)
        for q0, q1, k0, k1 in plan[0]:
            m = attention_mask
            if m is not None:
                m = m[..., q0:q1, :] if m.shape[-2] == q_len else m
                m = m[..., k0:k1] if m.shape[-1] >= k1 else m
            sub_args = [block_of(a, q_len, k_len, q0, q1, k0, k1) for a in args]
            sub_kwargs = {name: block_of(v, q_len, k_len, q0, q1, k0, k1) for name, v in kwargs.items()}
            o, w = eager(module, query[:, :, q0:q1], key[:, :, k0:k1], value[:, :, k0:k1], m, *sub_args, **sub_kwargs)
            if empty_rows is not None and bool(empty_rows[q0:q1].any()):
                block_empty = empty_rows[q0:q1]
                w = w.masked_fill(block_empty[None, None, :, None], 0.0)
                o = o.masked_fill(block_empty[None, :, None, None], 0.0)
            if wanted:
                state.sink(site, q0, k0, w, q_len, k_len)
            elif keep:
                if full is None:
                    full = w.new_zeros((*w.shape[:2], q_len, k_len))
                full[:, :, q0:q1, k0:k1] = w
            outs.append(o)
            del w
        out = torch.cat(outs, dim=1)
        weights = full
        if keep:
            state.weights[(site.stack, site.layer)] = full
    if site is not None:
        gate = None if site.out_proj else state.gates.get((site.stack, site.layer))  # else at the projection
        if gate is not None:
            gate = gate.to(device=out.device, dtype=out.dtype)
            out = out * per_head(gate, out.shape[0])[:, None, :, None]
        if state.outputs is not None:
            state.outputs.setdefault((site.stack, site.layer), out)
        if chosen and state.pending is not None:
            state.pending.discard((site.stack, site.layer))
            if not state.pending:
                raise StopForward
    return out, weights


def per_head(gate: torch.Tensor, batch: int) -> torch.Tensor:
    """A gate ``(heads,)`` (every batch row alike) or ``(batch, heads)`` as ``(batch, heads)``."""
    return gate if gate.dim() == 2 else gate[None].expand(batch, -1)


def _sdpa():
    """transformers' ``sdpa_attention_forward`` (imported on first use)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward


def _fallback_pre_hook(site: Site):
    """Forward pre-hook for the output projection of ``site`` (``Site.out_proj``): multiplies head
    ``h``'s slice ``[h*d, (h+1)*d)`` of the input (``(batch, query_len, heads*head_dim)``) by its gate."""

    def hook(module, args):
        state = _STATE.get()
        if state is None:
            return None
        gate = state.gates.get((site.stack, site.layer))
        if gate is None:
            return None
        hidden = args[0]
        b, q, width = hidden.shape
        g = gate.to(device=hidden.device, dtype=hidden.dtype)
        heads = hidden.view(b, q, site.heads, width // site.heads) * per_head(g, b)[:, None, :, None]
        return (heads.view(b, q, width),) + tuple(args[1:])

    return hook


def install_fallback_hooks(model: nn.Module, sites: list[Site]) -> None:
    """Register :func:`_fallback_pre_hook` on each site's output projection (once, at load time)."""
    modules = dict(model.named_modules())
    for site in sites:
        if site.out_proj and site.out_proj in modules:
            modules[site.out_proj].register_forward_pre_hook(_fallback_pre_hook(site))


def _count_forward(module, args) -> None:
    state = _STATE.get()
    if state is not None:
        state.forwards[id(module)] = state.forwards.get(id(module), 0) + 1


def install_call_counters(modules) -> None:
    """Register a forward pre-hook on each attention module (once per module) that counts its forward calls
    in the current :class:`CaptureState` (``forwards``): how a module called at several depths (ALBERT's
    shared layer) gets one site per call, and a second attention call inside one forward call is told
    apart."""
    for module in modules:
        if not getattr(module, "_dikkat_counted", False):
            module.register_forward_pre_hook(_count_forward)
            module._dikkat_counted = True


def register() -> None:
    """Register ``"dikkat"`` with transformers' attention and mask interfaces (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(ATTN_IMPLEMENTATION, dikkat_attention)
    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, eager_mask)


@contextmanager
def capture(
    sites: dict[int, Site],
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
) -> Iterator[CaptureState]:
    """Context in which forward passes of a model loaded with ``"dikkat"`` record weights, apply
    head gates and replace masks. State is per context (thread / asyncio task), never global.

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

    Yields:
        The :class:`CaptureState`; read ``state.weights`` after the forward pass.
    """
    state = CaptureState(sites=sites, record=record, gates=dict(gates or {}), masks=dict(masks or {}), sink=sink,
                         mask_sink=mask_sink, want=set(want) if want is not None else None,
                         pending=set(want) if (stop_after and want) else None,
                         chunk_bytes=CHUNK_BYTES if chunk_bytes is None else int(chunk_bytes), fused=bool(fused))
    token = _STATE.set(state)
    try:
        yield state
    finally:
        from .fallback_masks import exit_all  # modes a stopped forward pass left entered

        exit_all()
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


def stack_of(name: str, family: str) -> str:
    """Stack of an attention module from its dotted name: ``cross`` for cross-attention modules,
    else ``decoder``/``encoder`` by the family and the name."""
    lowered = name.lower()
    if family == "encoder-decoder":
        if any(marker in lowered for marker in _CROSS_MARKERS):
            return "cross"
        return "decoder" if "decoder" in lowered else "encoder"
    return "decoder" if family == "decoder" else "encoder"


def layer_of(name: str) -> int:
    """Layer index of an attention module: the first integer path component of its name
    (``model.layers.3.self_attn`` -> 3, ``encoder.block.0.layer.1.EncDecAttention`` -> 0)."""
    match = LAYER_INDEX.search("." + name)
    return int(match.group(1)) if match else 0
