"""The input of one attention layer, captured in the model's own forward pass (what the Q/K/V lesson
recomputes by hand): :func:`layer_capture` / :func:`layer_captures` give a :class:`LayerCapture` per layer."""

from __future__ import annotations

import contextvars
import inspect
import threading
import weakref
from dataclasses import dataclass
from collections.abc import Iterable

import numpy as np
import torch

from .. import checks
from ..analysis import Analysis, analyze
from ..errors import InvalidHeadError, UnsupportedOperationError
from ..loading.model import LoadedModel

# id(module) -> captured call arguments; set only inside :func:`layer_capture` (per thread / task).
_WANT: contextvars.ContextVar[dict | None] = contextvars.ContextVar("dikkat_teach_want", default=None)
_HOOK_LOCK = threading.Lock()
_HOOKED: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()


def _input_hook(module, args, kwargs=None):
    """Forward pre-hook (with kwargs) on every attention module: records the call's arguments by name,
    but only for the modules the current context asks for. Never changes the inputs."""
    if kwargs is None:  # torch's registration race: another thread's call without kwargs (models.capture.Hook)
        return None
    want = _WANT.get()
    if want is None or id(module) not in want:
        return None
    try:
        bound = inspect.signature(module.forward).bind_partial(*args, **kwargs)
        named = dict(bound.arguments)
    except TypeError:
        named = dict(kwargs)
        if args:
            named.setdefault("hidden_states", args[0])
    for key, value in list(named.items()):
        if isinstance(value, dict) and key in ("kwargs", "kw"):
            named.pop(key)
            named.update(value)
    want[id(module)] = named
    return None


def _ensure_hooks(loaded: LoadedModel) -> dict[tuple[str, int], torch.nn.Module]:
    """Install :func:`_input_hook` once on each attention module; return ``(stack, layer) -> module``."""
    by_id = {id(m): m for m in loaded.model.modules()}
    modules: dict[tuple[str, int], torch.nn.Module] = {}
    for mid, sites in loaded.site_index.items():
        module = by_id.get(mid)
        if module is None:
            continue
        for site in sites if isinstance(sites, tuple) else (sites,):
            modules[(site.stack, site.layer)] = module
    with _HOOK_LOCK:
        for module in modules.values():
            if module not in _HOOKED:
                module.register_forward_pre_hook(_input_hook, with_kwargs=True)
                _HOOKED.add(module)
    return modules


@dataclass
class LayerCapture:
    """One attention layer's input, captured during an ordinary :func:`models.analyze` call.

    Attributes:
        analysis: the :class:`Analysis` of the same forward pass (tokens, recorded attention).
        stack, layer: which attention layer.
        module: the attention module (holds the projection weights).
        hidden: float32 ``(n, d_model)``: the input of the attention module, i.e. the hidden states after
            the layer norm the family applies before attention (pre-LN: Llama, GPT-2) or the previous
            layer's output (post-LN: BERT).
        attention_mask: the additive float mask ``(q, k)`` the module received (0 = allowed, a very
            negative number = blocked), or None when the model passed none (nothing blocked).
        cos, sin: float32 ``(n, rotary_dim)`` rotary tables the module received (RoPE models), else None.
    """

    analysis: Analysis
    stack: str
    layer: int
    module: torch.nn.Module
    hidden: torch.Tensor
    attention_mask: torch.Tensor | None
    cos: torch.Tensor | None
    sin: torch.Tensor | None


@checks.needs_model
def check_head(loaded: LoadedModel, stack: str, layer: int, head: int | None = None) -> None:
    stacks = loaded.stacks
    if not isinstance(stack, str) or stack not in stacks:
        raise InvalidHeadError(f"Model '{loaded.name}' has no {checks.shown(stack)} stack "
                               f"(it has {', '.join(stacks)}).",
                               code="no_such_stack", model=loaded.name, stack=checks.shown(stack),
                               stacks=", ".join(stacks))
    n_layers, n_heads = stacks[stack]
    if not _index(layer, n_layers):
        raise InvalidHeadError(f"Layer {checks.shown(layer)} is out of range: '{stack}' has {n_layers} layers.",
                               code="bad_layer", stack=stack, layer=checks.shown(layer))
    if head is not None and not _index(head, n_heads):
        raise InvalidHeadError(f"Head {checks.shown(head)} is out of range: '{stack}' has {n_heads} heads.",
                               code="bad_head", stack=stack, head=checks.shown(head), heads=n_heads)


def _index(value, n: int) -> bool:
    """Whether ``value`` is a whole number (not a bool) in [0, n)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and bool(0 <= value < n)


@checks.needs_model
def layer_capture(loaded: LoadedModel, text: str, *, stack: str | None = None, layer: int = 0,
                  max_tokens: int | None = None) -> LayerCapture:
    """Run :func:`models.analyze` on ``text`` and keep the input of one self-attention layer.

    Args:
        loaded: from :func:`models.load` (interface capture path).
        text: the sentence.
        stack: ``encoder`` or ``decoder`` self-attention (default: the model's main stack).
        layer: 0-based layer index.
        max_tokens: passed to :func:`models.analyze`.

    Returns:
        :class:`LayerCapture` (one forward pass; the recorded attention is in ``.analysis``).

    Raises:
        UnsupportedOperationError: fallback capture path, or cross-attention (keys come from the other
            stack; not covered by this walk-through).
        InvalidHeadError: no such stack or layer. EmptyTextError etc. as :func:`models.analyze`.
    """
    return layer_captures(loaded, text, stack=stack, layers=[layer], max_tokens=max_tokens)[layer]


@checks.needs_model
def layer_captures(loaded: LoadedModel, text: str, *, stack: str | None = None, layers: Iterable[int] | None = None,
                   max_tokens: int | None = None) -> dict[int, LayerCapture]:
    """Like :func:`layer_capture` for several layers (default: all) in the same single forward pass.

    Returns:
        ``layer -> LayerCapture``, all sharing one :class:`Analysis`.

    Raises:
        UnsupportedOperationError: cross-attention, the fallback capture path, or a layer that was not
            called / has no ``hidden_states`` argument.
        InvalidHeadError: no such stack or layer. EmptyTextError etc. as :func:`models.analyze`.
    """
    stack = loaded.input_stack if stack is None else stack
    if isinstance(stack, str) and stack == "cross":
        raise UnsupportedOperationError("The Q/K/V walk-through covers self-attention (encoder or decoder), "
                                        "not cross-attention.",
                                        code="qkv_no_cross")
    check_head(loaded, stack, 0)
    layers = list(range(loaded.stacks[stack][0])) if layers is None else list(checks.sequence("layers", layers))
    for layer in layers:
        check_head(loaded, stack, layer)
    layers = [int(layer) for layer in layers]
    if loaded.capture_path != "interface":
        raise UnsupportedOperationError(
            f"Model '{loaded.name}' ({loaded.config.model_type}) uses the fallback capture path: its attention "
            "does not route through transformers' attention interface, so its inputs cannot be taken apart here.",
            code="qkv_fallback", model=loaded.name
        )
    modules = _ensure_hooks(loaded)
    want = {id(modules[(stack, layer)]): None for layer in layers}
    token = _WANT.set(want)
    try:
        result = analyze(loaded, text, max_tokens=max_tokens)
    finally:
        _WANT.reset(token)
    return {layer: _unpack(loaded, result, stack, layer, modules[(stack, layer)], want[id(modules[(stack, layer)])])
            for layer in layers}


def _unpack(loaded: LoadedModel, result: Analysis, stack: str, layer: int, module, named: dict | None) -> LayerCapture:
    """Turn the recorded call arguments of one attention module into a :class:`LayerCapture`."""
    if named is None:
        raise UnsupportedOperationError(f"Layer {layer} of '{loaded.name}' was not called in the forward pass.",
                                        code="layer_not_called", model=loaded.name, layer=layer)
    hidden = named.get("hidden_states")
    if hidden is None:
        raise UnsupportedOperationError(f"Cannot find the input of {type(module).__name__} "
                                        "(no hidden_states argument).",
                                        code="layer_no_input", module=type(module).__name__)
    mask = named.get("attention_mask")
    if mask is not None:
        mask = mask[0, 0] if mask.dim() == 4 else mask
        n = hidden.shape[1]
        mask = mask[-n:, -n:]
        if mask.dtype == torch.bool:
            mask = torch.zeros(mask.shape).masked_fill(~mask.cpu(), torch.finfo(torch.float32).min)
        mask = mask.detach().float().cpu()
    cos = sin = None
    pos = named.get("position_embeddings")
    if isinstance(pos, (tuple, list)) and len(pos) == 2 and pos[0] is not None:
        cos, sin = (p[0].detach().float().cpu() for p in pos)
    return LayerCapture(
        analysis=result, stack=stack, layer=layer, module=module, hidden=hidden[0].detach().float().cpu(),
        attention_mask=mask, cos=cos, sin=sin,
    )
