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
from typing import Iterator

import torch
from torch import nn

ATTN_IMPLEMENTATION = "dikkat"

# Name fragments that mark cross-attention modules in encoder-decoder models
# (BART/Marian/Whisper: encoder_attn, T5: EncDecAttention, BERT-as-decoder: crossattention).
_CROSS_MARKERS = ("encoder_attn", "encdecattention", "crossattention", "cross_attn", "cross_attention")
_LAYER_INDEX = re.compile(r"\.(\d+)(?:\.|$)")


@dataclass(frozen=True)
class Site:
    """One attention module of a model: which stack, which layer, how many heads.

    Attributes:
        stack: ``"encoder"``, ``"decoder"`` or ``"cross"``.
        layer: layer index within the stack (0-based).
        heads: number of query heads (maps recorded per layer).
        name: the module's dotted name in the model.
        out_proj: fallback path only: dotted name of the output projection whose input holds the
            per-head outputs, concatenated head after head; ``None`` if unknown.
    """

    stack: str
    layer: int
    heads: int
    name: str
    out_proj: str | None = None


@dataclass
class CaptureState:
    """Per-call state read by :func:`dikkat_attention` and the fallback hooks.

    Attributes:
        sites: ``id(module) -> Site`` of the model being run (empty while probing).
        record: keep the attention weights of every call.
        weights: ``(stack, layer) -> tensor (batch, heads, query_len, key_len)`` in compute dtype; for a
            module called several times in one context (generation), the last call wins.
        gates: ``(stack, layer) -> tensor (batch, heads)`` or ``(heads,)``; the per-head output is
            multiplied by it (0 switches a head off; a tensor with ``requires_grad`` gives gradients).
        masks: ``stack -> bool tensor (n, n)``, True where a query may attend a key; replaces the
            model's own mask for that self-attention stack. Rows with no allowed key give zero weights
            and a zero per-head output (never NaN).
        probe: when not None, every attention module called is appended (used at load time).
        stack_layers: with ``buffers``: ``stack -> number of layers`` (the first axis of each buffer).
        buffers: when not None (``record_into``), batch row 0 of each layer's weights is copied at once
            into ``buffers[stack]``, a float32 CPU tensor ``(layers, heads, query_len, key_len)`` created
            on the first call of that stack, instead of being kept in ``weights``: the weights tensor is
            freed right away and its memory reused by the next layer (faster, half the peak memory).
        allowed: with ``buffers``: ``stack -> bool CPU tensor (layers, query_len, key_len)``, True where
            the layer's mask let query ``i`` attend key ``j``: read from the additive mask each layer was
            actually called with (after any replacement), so per-layer masks such as Gemma 3's sliding
            layers are recorded as applied, not derived from the config.
    """

    sites: dict[int, Site] = field(default_factory=dict)
    record: bool = True
    weights: dict[tuple[str, int], torch.Tensor] = field(default_factory=dict)
    gates: dict[tuple[str, int], torch.Tensor] = field(default_factory=dict)
    masks: dict[str, torch.Tensor] = field(default_factory=dict)
    probe: list | None = None
    buffers: dict[str, torch.Tensor] | None = None
    stack_layers: dict[str, int] = field(default_factory=dict)
    allowed: dict[str, torch.Tensor] | None = None


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


def _apply_mask(allowed: torch.Tensor, query: torch.Tensor, key: torch.Tensor):
    """Additive mask ``(1, 1, q, k)`` and the empty-row flags ``(q,)`` for the last ``q`` queries.

    ``allowed`` is the full ``(n, n)`` boolean matrix; with a KV cache the call sees ``q`` new queries
    against ``k`` keys, i.e. rows ``k - q .. k - 1`` and columns ``0 .. k - 1``.
    """
    q_len, k_len = query.shape[-2], key.shape[-2]
    if allowed.shape[0] < k_len or allowed.shape[1] < k_len:
        from .errors import InvalidMaskError

        raise InvalidMaskError(
            f"Mask of shape {tuple(allowed.shape)} is smaller than the sequence ({k_len} tokens)."
        )
    block = allowed[k_len - q_len : k_len, :k_len].to(query.device)
    additive = torch.zeros(block.shape, dtype=query.dtype, device=query.device)
    additive.masked_fill_(~block, torch.finfo(query.dtype).min)
    return additive[None, None], ~block.any(dim=-1)


def allowed_of(attention_mask: torch.Tensor | None, q_len: int, k_len: int) -> torch.Tensor:
    """Which keys each query may attend under the mask an eager attention function receives.

    Args:
        attention_mask: additive float ``(batch, 1 or heads, q_len, >= k_len)`` (0 allowed, the dtype's
            minimum forbidden), boolean of the same shape (True allowed), or None (every key allowed: the
            eager functions add no mask of their own).
        q_len, k_len: lengths of the call's queries and keys, in tokens (the last ``q_len`` mask rows
            and first ``k_len`` columns are read, as with a KV cache).

    Returns:
        bool CPU tensor ``(q_len, k_len)`` for batch row 0 and the first mask head.
    """
    if attention_mask is None:
        return torch.ones((q_len, k_len), dtype=torch.bool)
    m = attention_mask[0, 0, -q_len:, :k_len]
    if m.dtype != torch.bool:
        m = m > torch.finfo(m.dtype).min / 2
    return m.expand(q_len, k_len).cpu()


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
        key_len))`` in the module's compute dtype, exactly as the family's ``eager_attention_forward``
        computes them (softmax(Q·Kᵀ·scaling + mask)·V, Vaswani et al. 2017, eq. 1, plus whatever the
        family adds: softcapping, position bias, GQA's repeated key/value heads, Ainslie et al. 2023),
        with heads gated and the mask replaced when the current :class:`CaptureState` asks for it. A
        query row with no allowed key under a replaced mask gets zero weights and a zero output.

    Raises:
        InvalidMaskError: a replacement mask smaller than the call's ``key_len``.
        RuntimeError: no ``eager_attention_forward`` in the module's ``modeling_*.py`` (nor its bases).
    """
    eager = _eager_for(module)
    state = _STATE.get()
    if state is None:
        return eager(module, query, key, value, attention_mask, *args, **kwargs)
    if state.probe is not None:
        state.probe.append(module)
    site = state.sites.get(id(module))
    empty_rows = None
    if site is not None and site.stack in state.masks:
        attention_mask, empty_rows = _apply_mask(state.masks[site.stack], query, key)
        if not bool(empty_rows.any()):
            empty_rows = None
    out, weights = eager(module, query, key, value, attention_mask, *args, **kwargs)
    if empty_rows is not None:
        # A query with no allowed key attends to nothing: zero weights, zero output (no NaN, no
        # uniform smear over forbidden keys).
        weights = weights.masked_fill(empty_rows[None, None, :, None], 0.0)
        out = out.masked_fill(empty_rows[None, :, None, None], 0.0)
    if site is not None:
        if state.buffers is not None:
            buf = state.buffers.get(site.stack)
            if buf is None or buf.shape[2:] != weights.shape[2:]:
                layers = state.stack_layers.get(site.stack, site.layer + 1)
                buf = state.buffers[site.stack] = torch.empty((layers, *weights.shape[1:]), dtype=torch.float32)
            buf[site.layer].copy_(weights[0])
            if state.allowed is not None:
                a = state.allowed.get(site.stack)
                if a is None or a.shape[1:] != weights.shape[2:]:
                    a = state.allowed[site.stack] = torch.ones((buf.shape[0], *weights.shape[2:]), dtype=torch.bool)
                a[site.layer].copy_(allowed_of(attention_mask, *weights.shape[2:]))
        elif state.record:
            state.weights[(site.stack, site.layer)] = weights
        gate = state.gates.get((site.stack, site.layer))
        if gate is not None:
            gate = gate.to(device=out.device, dtype=out.dtype)
            out = out * (gate[:, None, :, None] if gate.dim() == 2 else gate[None, None, :, None])
    return out, weights


def _fallback_pre_hook(site: Site):
    """Forward pre-hook for the output projection of ``site`` on the fallback path: multiplies head
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
        g = g if g.dim() == 2 else g[None].expand(b, -1)
        per_head = hidden.view(b, q, site.heads, width // site.heads) * g[:, None, :, None]
        return (per_head.view(b, q, width),) + tuple(args[1:])

    return hook


def install_fallback_hooks(model: nn.Module, sites: list[Site]) -> None:
    """Register :func:`_fallback_pre_hook` on each site's output projection (once, at load time)."""
    modules = dict(model.named_modules())
    for site in sites:
        if site.out_proj and site.out_proj in modules:
            modules[site.out_proj].register_forward_pre_hook(_fallback_pre_hook(site))


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
    record_into: dict[str, int] | None = None,
) -> Iterator[CaptureState]:
    """Context in which forward passes of a model loaded with ``"dikkat"`` record weights, apply
    head gates and replace masks. State is per context (thread / asyncio task), never global.

    Args:
        sites: ``id(module) -> Site`` (``LoadedModel.site_index``).
        record: keep weights in ``state.weights``.
        gates: ``(stack, layer) -> (batch, heads)`` or ``(heads,)`` float tensor; 1 keeps a head, 0
            switches it off. Layers without an entry run untouched (bit-identical outputs).
        masks: ``stack -> bool (n, n)`` mask replacing the model's own mask for that stack.
        record_into: ``stack -> number of layers``: copy batch row 0 of the weights into float32
            ``state.buffers[stack]`` of shape ``(layers, heads, q, k)`` as they are computed, and each
            layer's allowed keys into ``state.allowed[stack]``, bool ``(layers, q, k)``.

    Yields:
        The :class:`CaptureState`; read ``state.weights`` after the forward pass.
    """
    state = CaptureState(sites=sites, record=record, gates=dict(gates or {}), masks=dict(masks or {}))
    if record_into is not None:
        state.buffers, state.stack_layers, state.allowed = {}, dict(record_into), {}
    token = _STATE.set(state)
    try:
        yield state
    finally:
        _STATE.reset(token)


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
    match = _LAYER_INDEX.search("." + name)
    return int(match.group(1)) if match else 0
