"""Teaching computations on the loaded model: Q/K/V step by step, positions, cost, the KV cache.

Everything here works on the model's own weights and own forward pass, so a classroom sees the real
vectors of whichever model it loaded (not a fixed toy):

* :func:`layer_capture` + :func:`head_steps` (or :func:`qkv_steps`): the input of one attention layer,
  recomputed by hand into queries, keys and values with the layer's own projection weights (BERT
  ``attention.self.query/key/value``; GPT-2 ``c_attn`` split in three; Llama family
  ``q_proj/k_proj/v_proj`` plus the model's rotary embedding and grouped-query sharing), then
  ``softmax(q·kᵀ·scaling + mask)`` and the weighted sum of values (Vaswani et al. 2017, eq. 1), checked
  against the attention the model itself recorded in the same forward pass.
* :func:`softmax_row`, :func:`entropy`: the softmax of one row with or without the ``1/√d_k`` scaling
  and with a temperature.
* Positions: :func:`sinusoidal_encoding` (Vaswani et al. 2017, §3.5), :func:`rope_shift_check` and
  :func:`rope_dot_grid` on the model's own rotary embedding (Su et al. 2021), :func:`alibi_slopes` /
  :func:`alibi_bias` (Press et al. 2021, §3), :func:`word_order_experiment`.
* Cost: :func:`measure_cost` (time and memory of a forward pass against sequence length, with the
  default ``sdpa`` implementation and with weights captured), :func:`attention_matrix_size`.
* KV cache: :func:`kv_cache_bytes`, :func:`kv_config_from_model`, :data:`KV_PRESETS`,
  :func:`compare_generation` (greedy generation with and without the cache).

No Streamlit, no plotly: a notebook uses these directly.
"""

from __future__ import annotations

import contextvars
import copy
import inspect
import math
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np
import torch

from . import capture
from .analysis import Analysis, Word, analyze, weight_budget_tokens
from .errors import (
    DikkatError, InvalidArgumentError, InvalidHeadError, ModelOutOfMemoryError, UnsupportedOperationError,
)
from .loading import LoadedModel

# --------------------------------------------------------------------------------------------------
# Capturing one layer's input
# --------------------------------------------------------------------------------------------------

# id(module) -> captured call arguments; set only inside :func:`layer_capture` (per thread / task).
_WANT: contextvars.ContextVar[dict | None] = contextvars.ContextVar("dikkat_teach_want", default=None)
_HOOK_LOCK = threading.Lock()
_HOOKED: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()


class WordMismatchError(DikkatError, ValueError):
    """The two sentences of the word-order experiment do not consist of the same words."""


def _input_hook(module, args, kwargs):
    """Forward pre-hook (with kwargs) on every attention module: records the call's arguments by name,
    but only for the modules the current context asks for. Never changes the inputs."""
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
    modules = {}
    for mid, sites in loaded.site_index.items():
        module = by_id.get(mid)
        for site in (sites if isinstance(sites, tuple) else (sites,)) if module is not None else ():
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


def _check_head(loaded: LoadedModel, stack: str, layer: int, head: int | None = None) -> None:
    stacks = loaded.stacks
    if stack not in stacks:
        raise InvalidHeadError(f"Model '{loaded.name}' has no '{stack}' stack (it has {', '.join(stacks)}).")
    n_layers, n_heads = stacks[stack]
    if not 0 <= layer < n_layers:
        raise InvalidHeadError(f"Layer {layer} is out of range: '{stack}' has {n_layers} layers.")
    if head is not None and not 0 <= head < n_heads:
        raise InvalidHeadError(f"Head {head} is out of range: '{stack}' has {n_heads} heads.")


def main_stack(loaded: LoadedModel) -> str:
    """The stack the teaching pages walk through: ``decoder`` for decoders, ``encoder`` for encoders and
    for encoder-decoders (their encoder self-attention).

    Note: :func:`models.compare.main_stack` (the stack a single mask replaces) answers ``decoder`` for
    encoder-decoders.
    """
    return "encoder" if loaded.family == "encoder" else ("decoder" if loaded.family == "decoder" else "encoder")


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
    stack = stack or main_stack(loaded)
    if stack == "cross":
        raise UnsupportedOperationError("The Q/K/V walk-through covers self-attention (encoder or decoder), not cross-attention.",
                                        code="qkv_no_cross")
    _check_head(loaded, stack, 0)
    layers = list(range(loaded.stacks[stack][0])) if layers is None else [int(x) for x in layers]
    for layer in layers:
        _check_head(loaded, stack, layer)
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
        raise UnsupportedOperationError(f"Layer {layer} of '{loaded.name}' was not called in the forward pass.")
    hidden = named.get("hidden_states")
    if hidden is None:
        raise UnsupportedOperationError(f"Cannot find the input of {type(module).__name__} (no hidden_states argument).")
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


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``[x1, x2] -> [-x2, x1]`` on the last dimension (the half-split pairing of transformers' RoPE)."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` ``(..., n, head_dim)`` by the rotary tables ``cos``/``sin`` ``(n, rotary_dim)``.

    ``x·cos + rotate_half(x)·sin`` (Su et al. 2021, eq. 34, in the half-split pairing used by
    transformers: dimension ``i`` is paired with ``i + rotary_dim/2``). When ``rotary_dim < head_dim``
    (partial rotary) the remaining dimensions pass unchanged.

    Returns:
        tensor of ``x``'s shape (dtype by torch promotion of ``x`` and the tables).
    """
    r = cos.shape[-1]
    if r == x.shape[-1]:
        return x * cos + _rotate_half(x) * sin
    rot, rest = x[..., :r], x[..., r:]
    return torch.cat((rot * cos + _rotate_half(rot) * sin, rest), dim=-1)


def _linear(x: torch.Tensor, layer) -> torch.Tensor:
    """``x Wᵀ + b`` in float32 with an ``nn.Linear``'s weights."""
    w = layer.weight.detach().float().cpu()
    b = layer.bias.detach().float().cpu() if getattr(layer, "bias", None) is not None else None
    out = x @ w.T
    return out + b if b is not None else out


def _projections(lc: LayerCapture, head_dim: int):
    """Full Q ``(heads, n, head_dim)``, K, V ``(kv_heads, n, head_dim)`` and a description of the weights."""
    m, h = lc.module, lc.hidden
    n = h.shape[0]
    if all(hasattr(m, a) for a in ("query", "key", "value")):  # BERT, RoBERTa, XLM-R, E5 ...
        q, k, v = _linear(h, m.query), _linear(h, m.key), _linear(h, m.value)
        source = "attention.self.query / key / value (nn.Linear: h·Wᵀ + b)"
    elif hasattr(m, "c_attn") and not getattr(m, "is_cross_attention", False):  # GPT-2 Conv1D
        w = m.c_attn.weight.detach().float().cpu()  # (d_model, 3·d_model): Conv1D computes x·W + b
        b = m.c_attn.bias.detach().float().cpu()
        width = w.shape[1] // 3
        qkv = h @ w + b
        q, k, v = qkv[:, :width], qkv[:, width : 2 * width], qkv[:, 2 * width :]
        source = "attn.c_attn (Conv1D: h·W + b, split into query | key | value)"
    elif all(hasattr(m, a) for a in ("q_proj", "k_proj", "v_proj")):  # Llama, Mistral, Qwen2, Gemma, BART ...
        q, k, v = _linear(h, m.q_proj), _linear(h, m.k_proj), _linear(h, m.v_proj)
        source = "self_attn.q_proj / k_proj / v_proj (nn.Linear)"
    elif all(hasattr(m, a) for a in ("q", "k", "v")) and hasattr(m, "o"):  # T5 (position bias not covered)
        raise UnsupportedOperationError("T5-style relative position bias is not covered by the Q/K/V walk-through.",
                                        code="qkv_t5")
    else:
        raise UnsupportedOperationError(
            f"Unknown attention layout {type(m).__name__}: Dikkat knows query/key/value (BERT), c_attn (GPT-2) "
            "and q_proj/k_proj/v_proj (Llama family).",
            code="qkv_layout", layout=type(m).__name__
        )
    q = q.view(n, -1, head_dim).transpose(0, 1)
    k = k.view(n, -1, head_dim).transpose(0, 1)
    v = v.view(n, -1, head_dim).transpose(0, 1)
    for name, x in (("q_norm", "q"), ("k_norm", "k")):  # Gemma 3 / Qwen 3: RMSNorm on each head's vector
        norm = getattr(m, name, None)
        if norm is not None:
            with torch.no_grad():
                if x == "q":
                    q = norm(q.to(next(norm.parameters()).dtype)).float() if q.shape[-1] == _norm_size(norm) else q
                else:
                    k = norm(k.to(next(norm.parameters()).dtype)).float() if k.shape[-1] == _norm_size(norm) else k
            source += f" + {name}"
    return q, k, v, source


def _norm_size(norm) -> int:
    w = getattr(norm, "weight", None)
    return int(w.shape[-1]) if w is not None else -1


@dataclass
class QKVSteps:
    """Scaled dot-product attention of one head, recomputed from the model's own weights.

    All arrays float32 numpy. ``n_q``/``n_k``: query/key counts (equal for self-attention).

    Attributes:
        analysis: the forward pass the inputs were taken from (tokens, recorded attention).
        stack, layer, head: which head. heads: query heads in the layer.
        kv_heads: key/value heads (== heads without grouped-query attention).
        kv_head: the key/value head this query head reads: ``head // (heads / kv_heads)``
            (grouped-query attention, Ainslie et al. 2023).
        head_dim: d_k. scaling: the module's own score scale (``1/√d_k`` in most models).
        source: which weights produced q, k, v (module attribute names).
        rope: True when queries and keys are rotated by RoPE.
        queries: ``(n_q, head_dim)`` q = W_q h + b (rotated for RoPE models).
        keys, values: ``(n_k, head_dim)``.
        queries_unrotated, keys_unrotated: before the RoPE rotation (None without RoPE).
        softcap: the attention-logit softcap ``c`` when the model has one (Gemma 2: scores become
            ``c·tanh(scores / c)`` before the mask), else None.
        dots: ``(n_q, n_k)`` q·k. scores: dots × scaling (plus softcapping where the model has it).
        allowed: bool ``(n_q, n_k)``, True where the mask lets query i see key j.
        mask: ``(n_q, n_k)`` additive mask (0 or a very negative number).
        weights: ``(n_q, n_k)`` softmax(scores + mask) computed here.
        recorded: ``(n_q, n_k)`` the model's own recorded attention for this head.
        max_abs_diff: ``max |weights - recorded|`` over the whole head.
        output: ``(n_q, head_dim)`` weights · values (this head's output, before the output projection).
    """

    analysis: Analysis
    stack: str
    layer: int
    head: int
    heads: int
    kv_heads: int
    kv_head: int
    head_dim: int
    scaling: float
    source: str
    rope: bool
    queries: np.ndarray
    keys: np.ndarray
    values: np.ndarray
    queries_unrotated: np.ndarray | None
    keys_unrotated: np.ndarray | None
    dots: np.ndarray
    scores: np.ndarray
    allowed: np.ndarray
    mask: np.ndarray
    weights: np.ndarray
    recorded: np.ndarray
    max_abs_diff: float
    output: np.ndarray
    softcap: float | None = None


def head_steps(loaded: LoadedModel, lc: LayerCapture, head: int) -> QKVSteps:
    """Recompute one head of a captured layer step by step (Vaswani et al. 2017, eq. 1).

    ``q_i = W_q h_i + b_q`` (then RoPE for rotary models), ``k_j``, ``v_j`` likewise with the key/value
    head this query head shares; ``s_ij = (q_i·k_j)·scaling + mask_ij``; ``a_i = softmax(s_i)``;
    ``o_i = Σ_j a_ij v_j``. The weights are compared with the model's recorded attention.
    Grouped-query attention: query head ``h`` reads key/value head ``h // (heads / kv_heads)``
    (Ainslie et al. 2023, §2.2). A query with no allowed key gets all-zero weights.

    Returns:
        :class:`QKVSteps` (float32 numpy arrays).

    Raises:
        InvalidHeadError: no such head. UnsupportedOperationError: an attention layout not covered.
    """
    _check_head(loaded, lc.stack, lc.layer, head)
    heads = loaded.stacks[lc.stack][1]
    m = lc.module
    head_dim = int(getattr(m, "head_dim", None) or getattr(m, "attention_head_size", None) or lc.hidden.shape[1] // heads)
    q_all, k_all, v_all, source = _projections(lc, head_dim)
    kv_heads = k_all.shape[0]
    group = heads // kv_heads
    kv_head = head // group
    q, k, v = q_all[head], k_all[kv_head], v_all[kv_head]
    q_pre = k_pre = None
    rope = lc.cos is not None
    if rope:
        q_pre, k_pre = q, k
        q, k = apply_rope(q, lc.cos, lc.sin), apply_rope(k, lc.cos, lc.sin)
    scaling = float(getattr(m, "scaling", head_dim ** -0.5))
    dots = q @ k.T
    scores = dots * scaling
    softcap = getattr(m, "attn_logit_softcapping", None) or getattr(loaded.config, "attn_logit_softcapping", None)
    if softcap:
        scores = torch.tanh(scores / softcap) * softcap
    n_q, n_k = scores.shape
    mask = lc.attention_mask if lc.attention_mask is not None else torch.zeros(n_q, n_k)
    mask = mask[-n_q:, -n_k:]
    allowed = mask > torch.finfo(torch.float32).min / 2
    weights = torch.softmax(scores + mask, dim=-1)
    weights = weights.masked_fill(~allowed.any(dim=-1, keepdim=True), 0.0)
    recorded = lc.analysis.attentions[lc.stack][lc.layer, head]
    out = weights @ v
    w = weights.numpy()
    return QKVSteps(
        analysis=lc.analysis, stack=lc.stack, layer=lc.layer, head=head, heads=heads, kv_heads=kv_heads,
        kv_head=kv_head, head_dim=head_dim, scaling=scaling, source=source, rope=rope,
        queries=q.numpy(), keys=k.numpy(), values=v.numpy(),
        queries_unrotated=None if q_pre is None else q_pre.numpy(),
        keys_unrotated=None if k_pre is None else k_pre.numpy(),
        dots=dots.numpy(), scores=scores.numpy(), allowed=allowed.numpy(), mask=mask.numpy(), weights=w,
        recorded=recorded, max_abs_diff=float(np.abs(w - recorded).max()), output=out.numpy(),
        softcap=float(softcap) if softcap else None,
    )


def qkv_steps(loaded: LoadedModel, text: str, *, stack: str | None = None, layer: int = 0, head: int = 0,
              max_tokens: int | None = None) -> QKVSteps:
    """:func:`layer_capture` then :func:`head_steps` in one call (see both for shapes and errors)."""
    return head_steps(loaded, layer_capture(loaded, text, stack=stack, layer=layer, max_tokens=max_tokens), head)


def softmax_row(scores: np.ndarray, allowed: np.ndarray | None = None, *, temperature: float = 1.0) -> np.ndarray:
    """Softmax of one row of scores at a temperature: ``exp(s_j/T) / Σ_j' exp(s_j'/T)`` over allowed keys.

    Args:
        scores: float ``(k,)`` (already scaled or not, as the caller wants).
        allowed: bool ``(k,)``; blocked keys get weight 0. None = all allowed.
        temperature: T > 0; T < 1 sharpens, T > 1 flattens (Hinton et al. 2015, eq. 1).

    Returns:
        float64 ``(k,)`` summing to 1 (all zeros when no key is allowed).

    Raises:
        InvalidArgumentError: temperature ≤ 0.
    """
    if temperature <= 0:
        raise InvalidArgumentError("temperature must be > 0")
    s = np.asarray(scores, dtype=np.float64) / temperature
    ok = np.ones(s.shape, dtype=bool) if allowed is None else np.asarray(allowed, dtype=bool)
    if not ok.any():
        return np.zeros_like(s)
    s = np.where(ok, s, -np.inf)
    e = np.exp(s - s[ok].max())
    return e / e.sum()


def entropy(weights: np.ndarray, base: float = math.e) -> float:
    """Shannon entropy ``H = -Σ p log p`` of a probability row (0·log 0 = 0; Shannon 1948, §6).

    Args:
        weights: float ``(k,)`` probabilities (any shape is flattened; not renormalised).
        base: logarithm base: e gives nats, 2 gives bits.

    Returns:
        float, in nats for ``base=e`` (bits for 2); 0 for a one-hot row, ``log k`` for a uniform one.
    """
    p = np.asarray(weights, dtype=np.float64)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum() / math.log(base))


# --------------------------------------------------------------------------------------------------
# Positions
# --------------------------------------------------------------------------------------------------


def sinusoidal_encoding(n: int, d: int, base: float = 10000.0) -> np.ndarray:
    """The fixed positional encoding of Vaswani et al. 2017, §3.5.

    ``PE[pos, 2i] = sin(pos / base^(2i/d))``, ``PE[pos, 2i+1] = cos(pos / base^(2i/d))``.

    Args:
        n: positions. d: dimensions (an odd ``d`` ends with a sine column). base: 10000 in the paper.

    Returns:
        float32 ``(n, d)`` in [-1, 1].

    Raises:
        InvalidArgumentError: n < 1 or d < 2.
    """
    if n < 1 or d < 2:
        raise InvalidArgumentError("need n >= 1 positions and d >= 2 dimensions")
    pos = np.arange(n, dtype=np.float64)[:, None]
    i = np.arange(0, d, 2, dtype=np.float64)[None, :]
    angle = pos / base ** (i / d)
    pe = np.zeros((n, d))
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle[:, : d // 2])
    return pe.astype(np.float32)


def position_kind(loaded: LoadedModel) -> str:
    """How the model encodes positions: ``rope`` (Su et al. 2021), ``alibi`` (Press et al. 2021),
    ``relative`` (T5 bias, Raffel et al. 2020), ``sinusoidal`` (Vaswani et al. 2017, §3.5) or ``learned``
    (absolute position embeddings, as BERT and GPT-2; also the default for any other model type)."""
    cfg = loaded.config
    if rotary_module(loaded) is not None:
        return "rope"
    if cfg.model_type in ("bloom", "mpt") or getattr(cfg, "alibi", False):
        return "alibi"
    if cfg.model_type in ("t5", "mt5", "umt5", "longt5"):
        return "relative"
    if cfg.model_type in ("marian", "whisper") or getattr(cfg, "sinusoidal_pos_embds", False):
        return "sinusoidal"
    return "learned"


def rotary_module(loaded: LoadedModel):
    """The model's rotary embedding module (the one holding ``inv_freq``), or None."""
    for _, module in loaded.model.named_modules():
        if isinstance(getattr(module, "inv_freq", None), torch.Tensor):
            return module
    return None


def rope_tables(loaded: LoadedModel, positions: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin float32 CPU tensors ``(len(positions), rotary_dim)`` at the given positions, from the
    loaded model's own rotary embedding (its ``inv_freq`` = ``1/θ^(2i/d)``, θ = ``rope_theta``; Su et al.
    2021, eq. 15; scaled RoPE variants use whatever the module computes).

    Raises:
        UnsupportedOperationError: the model has no rotary embedding.
    """
    rot = rotary_module(loaded)
    if rot is None:
        raise UnsupportedOperationError(f"Model '{loaded.name}' does not use RoPE (no rotary embedding).",
                                        code="no_rope", model=loaded.name)
    pos = torch.tensor([list(positions)], dtype=torch.long, device=loaded.device)
    x = torch.zeros(1, dtype=torch.float32, device=loaded.device)
    with torch.no_grad():
        try:
            cos, sin = rot(x, pos)
        except TypeError:  # rotary modules that also take a layer type (Gemma 3)
            cos, sin = rot(x, pos, "full_attention")
    return cos[0].float().cpu(), sin[0].float().cpu()


@dataclass(frozen=True)
class RopeShiftCheck:
    """q·k of two fixed vectors rotated to positions (m, n) and to (m + t, n + t).

    Su et al. 2021, eq. 16: ``(R_m q)·(R_n k) = q·R_{n-m} k`` depends on n − m only.
    ``dot_unrotated`` is q·k with no rotation, for comparison.

    Attributes:
        m, n: query and key positions (tokens). t: the shift added to both.
        dot: ``(R_m q)·(R_n k)``. dot_shifted: ``(R_{m+t} q)·(R_{n+t} k)``. abs_diff: ``|dot - dot_shifted|``.
        theta: RoPE base θ used (the model's, or the textbook one; None if the model's config names none).
        head_dim: rotary dimensions used.
    """

    m: int
    n: int
    t: int
    dot: float
    dot_shifted: float
    dot_unrotated: float
    abs_diff: float
    theta: float | None
    head_dim: int


def _fixed_vectors(head_dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(head_dim, generator=g), torch.randn(head_dim, generator=g)


def _head_dim(loaded: LoadedModel) -> int:
    cfg = loaded.config.get_text_config() if hasattr(loaded.config, "get_text_config") else loaded.config
    return int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)


def rope_theta(loaded: LoadedModel) -> float | None:
    """The model's RoPE base θ (``rope_parameters["rope_theta"]`` or ``rope_theta``), or None."""
    cfg = loaded.config.get_text_config() if hasattr(loaded.config, "get_text_config") else loaded.config
    params = getattr(cfg, "rope_parameters", None) or {}
    if isinstance(params, dict) and "rope_theta" in params:
        return float(params["rope_theta"])
    if isinstance(params, dict):  # per layer type (Gemma 3): take full attention's
        for value in params.values():
            if isinstance(value, dict) and "rope_theta" in value:
                return float(value["rope_theta"])
    value = getattr(cfg, "rope_theta", None)
    return float(value) if value else None


def _rope_tables_for(loaded: LoadedModel | None, positions: Sequence[int], head_dim: int, theta: float):
    """The model's rotary tables when it has a rotary embedding, else textbook RoPE tables."""
    if loaded is not None and rotary_module(loaded) is not None:
        return rope_tables(loaded, positions)
    cos, sin = textbook_rope_tables(max(positions) + 1, head_dim, theta)
    idx = torch.tensor(list(positions))
    return cos[idx], sin[idx]


def rope_shift_check(loaded: LoadedModel | None, m: int = 2, n: int = 5, t: int = 7, seed: int = 0, *,
                     head_dim: int = 64, theta: float = 10000.0) -> RopeShiftCheck:
    """Check that q·k after RoPE depends only on the distance n − m.

    Two fixed random vectors q, k (torch seed ``seed``) are rotated to positions (m, n) and to
    (m + t, n + t) with the loaded model's own rotary embedding (``loaded`` a RoPE model), or with
    textbook RoPE (``head_dim``, ``theta``) when ``loaded`` is None or has no rotary embedding; both dot
    products are returned with their absolute difference (float32 rounding only: the angles pos·θ_i
    are computed in float32, so the difference grows slowly with the positions).

    Returns:
        :class:`RopeShiftCheck`.

    Raises:
        InvalidArgumentError: negative positions.
    """
    if min(m, n, m + t, n + t) < 0:
        raise InvalidArgumentError("positions must be >= 0")
    cos, sin = _rope_tables_for(loaded, [m, n, m + t, n + t], head_dim, theta)
    q, k = _fixed_vectors(cos.shape[-1], seed)
    rq = apply_rope(q[None], cos, sin)
    rk = apply_rope(k[None], cos, sin)
    dot = float(rq[0] @ rk[1])
    shifted = float(rq[2] @ rk[3])
    model_rope = loaded is not None and rotary_module(loaded) is not None
    return RopeShiftCheck(m=m, n=n, t=t, dot=dot, dot_shifted=shifted, dot_unrotated=float(q @ k),
                          abs_diff=abs(dot - shifted), theta=rope_theta(loaded) if model_rope else theta,
                          head_dim=int(cos.shape[-1]))


def rope_dot_grid(loaded: LoadedModel | None, positions: int, seed: int = 0, *, head_dim: int = 64,
                  theta: float = 10000.0) -> np.ndarray:
    """``G[m, n] = (R_m q)·(R_n k)`` for two fixed vectors at every pair of positions 0..positions−1.

    With the loaded model's rotary embedding when ``loaded`` has one, else textbook RoPE (``theta``,
    ``head_dim``). Because the dot depends only on n − m (Su et al. 2021, eq. 16), G is constant along
    each diagonal (a Toeplitz matrix).

    Returns:
        float32 ``(positions, positions)``; rows are query positions m, columns key positions n.
    """
    cos, sin = _rope_tables_for(loaded, range(positions), head_dim, theta)
    q, k = _fixed_vectors(cos.shape[-1], seed)
    rq = apply_rope(q[None].expand(positions, -1), cos, sin)
    rk = apply_rope(k[None].expand(positions, -1), cos, sin)
    return (rq @ rk.T).numpy().astype(np.float32)


def textbook_rope_tables(positions: int, head_dim: int = 64, theta: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin float32 tensors ``(positions, head_dim)`` of RoPE with ``inv_freq_i = θ^(-2i/d)`` (Su et
    al. 2021, eq. 15), duplicated over the two halves as transformers does (``head_dim`` even)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    freqs = torch.arange(positions, dtype=torch.float32)[:, None] * inv_freq[None]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rope_angles(loaded: LoadedModel | None, positions: int, *, head_dim: int = 64, theta: float = 10000.0) -> np.ndarray:
    """Rotation angle in radians of each 2-D pair at each position: ``pos · inv_freq_i``.

    ``inv_freq_i = θ^(-2i/d)`` (Su et al. 2021, eq. 15): the loaded model's own ``inv_freq`` when it has a
    rotary embedding, else the textbook one from ``head_dim`` and ``theta``.

    Returns:
        float64 ``(positions, rotary_dim/2)`` radians (not wrapped to 2π); pair ``i`` turns fastest for i = 0.
    """
    rot = rotary_module(loaded) if loaded is not None else None
    if rot is not None:
        inv = rot.inv_freq.detach().double().cpu().numpy()
    else:
        inv = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    return np.arange(positions, dtype=np.float64)[:, None] * inv[None]


def alibi_slopes(heads: int) -> np.ndarray:
    """ALiBi head slopes (Press et al. 2021, §3): for n heads a power of two, the geometric sequence
    ``m_i = 2^(-8i/n)``, i = 1..n; otherwise the slopes of the nearest lower power of two followed by
    every other slope of the next power of two (the authors' reference implementation).

    Returns:
        float64 ``(heads,)``, each in (0, 1).

    Raises:
        InvalidArgumentError: heads < 1.
    """
    if heads < 1:
        raise InvalidArgumentError("heads must be >= 1")

    def power_of_2(n: int) -> list[float]:
        return [2.0 ** (-8.0 * i / n) for i in range(1, n + 1)]

    if math.log2(heads).is_integer():
        return np.array(power_of_2(heads))
    closest = 2 ** int(math.floor(math.log2(heads)))
    return np.array(power_of_2(closest) + list(alibi_slopes(2 * closest)[0::2][: heads - closest]))


def alibi_bias(n: int, slope: float, *, causal: bool = True) -> np.ndarray:
    """ALiBi bias matrix added to the scores q_i·k_j (Press et al. 2021, §3, Fig. 3): ``-slope·(i - j)``.

    Args:
        n: positions. slope: the head's m. causal: blocked cells (j > i) are NaN; with
            ``causal=False`` the symmetric ``-slope·|i - j|`` (not in Press et al. 2021, which define
            the causal case only; a common bidirectional adaptation).

    Returns:
        float64 ``(n, n)``, rows = queries i, columns = keys j; values ≤ 0 (or NaN).
    """
    i = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    bias = -slope * np.abs(i - j).astype(np.float64)
    if causal:
        bias = np.where(j <= i, bias, np.nan)
    return bias


def _fold(word: str) -> str:
    """Case-fold with Turkish dotted/dotless i: "I" -> "ı", "İ" -> "i"."""
    return word.replace("I", "ı").replace("İ", "i").lower()


def word_attention(attn: np.ndarray, query_words: Sequence[Word], key_words: Sequence[Word]) -> np.ndarray:
    """Aggregate token attention to words: sum over a key word's pieces, mean over a query word's pieces.

    Summing over key pieces keeps "how much of the row goes to this word"; averaging over query pieces
    keeps each row a distribution (Clark et al. 2019, §4.1 use the same convention). Special tokens and
    tokens outside any word are left out, so rows sum to at most 1.

    Args:
        attn: float ``(..., n_q, n_k)``.

    Returns:
        float32 ``(..., len(query_words), len(key_words))``.
    """
    a = np.asarray(attn, dtype=np.float64)
    by_key = np.stack([a[..., list(w.tokens)].sum(axis=-1) for w in key_words], axis=-1)
    by_query = np.stack([by_key[..., list(w.tokens), :].mean(axis=-2) for w in query_words], axis=-2)
    return by_query.astype(np.float32)


@dataclass
class WordOrder:
    """The word-order experiment: the same words in two orders, attention compared word to word.

    Attributes:
        words: the words in sentence A's order (as typed in A).
        order_b: for each word of A, its index among B's words.
        attn_a: float32 ``(layers, heads, W, W)`` word-level attention of A (rows: query words).
        attn_b: B's word-level attention with rows and columns put into A's word order.
        diff: ``attn_a - attn_b``.
        analysis_a, analysis_b: the two forward passes.
        stack: which self-attention stack.
    """

    words: list[str]
    order_b: list[int]
    attn_a: np.ndarray
    attn_b: np.ndarray
    diff: np.ndarray
    analysis_a: Analysis
    analysis_b: Analysis
    stack: str


def word_order_experiment(loaded: LoadedModel, text_a: str = "Kedi fareyi kovaladı",
                          text_b: str = "Fareyi kedi kovaladı", *, stack: str | None = None) -> WordOrder:
    """Run both sentences and compare the attention between the same words (word level, see
    :func:`word_attention`). A model without position information would give ``diff == 0`` apart from
    the causal mask; the size of ``diff`` shows how much position matters.

    Raises:
        WordMismatchError: the sentences are not the same words in another order (compared
            case-insensitively with Turkish I/ı, İ/i). EmptyTextError etc. as :func:`models.analyze`.
    """
    stack = stack or main_stack(loaded)
    a = analyze(loaded, text_a)
    b = analyze(loaded, text_b)
    wa, wb = a.axis_words(stack)[0], b.axis_words(stack)[0]
    fa, fb = [_fold(w.text) for w in wa], [_fold(w.text) for w in wb]
    if sorted(fa) != sorted(fb):
        raise WordMismatchError(
            f"The two sentences must use the same words in another order: {[w.text for w in wa]} vs {[w.text for w in wb]}.",
            code="word_order_mismatch", words_a=", ".join(w.text for w in wa), words_b=", ".join(w.text for w in wb)
        )
    used = [False] * len(fb)
    order = []
    for word in fa:
        idx = next(i for i, x in enumerate(fb) if x == word and not used[i])
        used[idx] = True
        order.append(idx)
    attn_a = word_attention(a.attentions[stack], wa, wa)
    raw_b = word_attention(b.attentions[stack], wb, wb)
    attn_b = raw_b[..., order, :][..., :, order]
    return WordOrder(words=[w.text for w in wa], order_b=order, attn_a=attn_a, attn_b=attn_b, diff=attn_a - attn_b,
                     analysis_a=a, analysis_b=b, stack=stack)


# --------------------------------------------------------------------------------------------------
# Cost of attention
# --------------------------------------------------------------------------------------------------

IMPLEMENTATIONS = ("sdpa", "captured")


def attention_matrix_size(n: int, *, bytes_per_value: int = 4, layers: int = 1, heads: int = 1) -> tuple[int, int]:
    """Entries and bytes of the attention weights for ``n`` tokens: ``n² · layers · heads`` entries,
    times ``bytes_per_value`` (4 for float32, 2 for bf16).

    Returns:
        ``(entries, bytes)`` as Python ints (no overflow).
    """
    entries = int(n) * int(n) * int(layers) * int(heads)
    return entries, entries * int(bytes_per_value)


_TWINS: dict[tuple, torch.nn.Module] = {}
_TWIN_LOCK = threading.Lock()


def default_twin(loaded: LoadedModel, implementation: str = "sdpa") -> torch.nn.Module:
    """The same model (same parameter tensors, no copy) built with another attention implementation.

    ``models.load`` builds models with Dikkat's capturing implementation; to time the implementation
    transformers uses by default (``sdpa``: ``torch.nn.functional.scaled_dot_product_attention``, a
    fused kernel that never returns the weights), the model class is instantiated on the meta device
    with ``attn_implementation=implementation`` and every parameter and buffer of ``loaded.model`` is
    assigned into it. Cached per process.

    Raises:
        UnsupportedOperationError: the architecture has no such implementation.
    """
    key = (id(loaded.model), implementation)
    with _TWIN_LOCK:
        if key in _TWINS:
            return _TWINS[key]
        config = copy.deepcopy(loaded.model.config)
        try:
            with torch.device("meta"):
                twin = type(loaded.model)._from_config(config, attn_implementation=implementation,
                                                      dtype=loaded.dtype)
        except (ValueError, ImportError) as exc:
            raise UnsupportedOperationError(
                f"Model '{loaded.name}' ({config.model_type}) has no '{implementation}' attention implementation: {exc}"
            ) from exc
        twin.load_state_dict(loaded.model.state_dict(), assign=True, strict=False)
        source = dict(loaded.model.named_buffers())
        for name, _ in list(twin.named_buffers()):
            if name in source:
                owner, _, leaf = name.rpartition(".")
                mod = twin.get_submodule(owner) if owner else twin
                mod._buffers[leaf] = source[name]
        leftovers = [n for n, p in list(twin.named_parameters()) + list(twin.named_buffers()) if p.is_meta]
        if leftovers:
            raise UnsupportedOperationError(
                f"Could not share every weight of '{loaded.name}' with an '{implementation}' copy (missing: {leftovers[:3]})."
            )
        twin.eval()
        _TWINS[key] = twin
        return twin


class _PeakTensorMemory(torch.utils._python_dispatch.TorchDispatchMode):
    """Peak bytes of tensor storage created by the ops run inside the mode (weights and inputs, which
    exist before, are not counted). Every op's outputs are seen; a storage counts until its last
    tensor is freed. Thread-local (dispatch modes are per thread)."""

    def __init__(self):
        super().__init__()
        self.live: dict[int, list[int]] = {}
        self.current = 0
        self.peak = 0

    def _release(self, key: int) -> None:
        entry = self.live.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            self.current -= entry[0]
            del self.live[key]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        flat_in = torch.utils._pytree.tree_leaves((args, kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in flat_in if isinstance(t, torch.Tensor) and not t.is_meta}
        for t in torch.utils._pytree.tree_leaves(out):
            if not isinstance(t, torch.Tensor) or t.is_meta:
                continue
            key = t.untyped_storage().data_ptr()
            if key in self.live:
                self.live[key][1] += 1
            elif key in inputs or key == 0:
                continue  # a view of memory that existed before (weights, inputs)
            else:
                size = t.untyped_storage().nbytes()
                self.live[key] = [size, 1]
                self.current += size
                self.peak = max(self.peak, self.current)
            weakref.finalize(t, self._release, key)
        return out


@dataclass(frozen=True)
class CostPoint:
    """One measurement of a forward pass.

    Attributes:
        n: tokens. implementation: ``sdpa`` (transformers' default, fused, no weights returned) or
            ``captured`` (eager attention with every layer's weights recorded, as :func:`models.analyze`).
        seconds: fastest wall time of ``repeats`` forward passes of the transformer body (no
            prediction head; after one warm-up pass per implementation), torch.no_grad, batch 1.
        peak_bytes: peak memory during one more pass: on CUDA ``torch.cuda.max_memory_allocated`` above
            the level before; on CPU the peak bytes of tensors created by the pass, counted op by op
            (:class:`_PeakTensorMemory`; weights excluded).
        memory_method: ``cuda-allocator``, ``tensor-tracking``, or ``none`` (``measure_memory=False``;
            ``peak_bytes`` is then 0).
        recorded_bytes: bytes of the attention weights kept (captured only, else 0).
    """

    n: int
    implementation: str
    seconds: float
    peak_bytes: int
    memory_method: str
    recorded_bytes: int = 0


def default_lengths(loaded: LoadedModel, top: int = 1024) -> list[int]:
    """Powers of two from 16 to ``min(top, the model's limit)`` tokens; ``[max(1, limit)]`` when that
    limit is below 16."""
    limit = min(top, loaded.max_positions)
    out, n = [], 16
    while n <= limit:
        out.append(n)
        n *= 2
    return out or [max(1, limit)]


def _cost_inputs(loaded: LoadedModel, n: int) -> dict[str, torch.Tensor]:
    """``n`` token ids (a sentence repeated), batch 1; encoder-decoders get a one-token decoder input."""
    if getattr(loaded.model, "main_input_name", "input_ids") != "input_ids":
        raise UnsupportedOperationError(f"Model '{loaded.name}' does not read text tokens: its cost is not measured here.",
                                        code="cost_needs_text", model=loaded.name)
    tok = loaded.tokenizer
    ids = tok("Kedi fareyi kovaladı. The cat chased the mouse across the garden.", add_special_tokens=False)["input_ids"]
    ids = (ids * (n // max(1, len(ids)) + 1))[:n]
    inputs = {"input_ids": torch.tensor([ids], device=loaded.device)}
    if loaded.family == "encoder-decoder":
        inputs["decoder_input_ids"] = inputs["input_ids"][:, :1]
    return inputs


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _body(model: torch.nn.Module) -> torch.nn.Module:
    """The transformer without its prediction head (``base_model``), so the cost measured is the
    attention layers' and not the vocabulary projection's."""
    return getattr(model, "base_model", None) or model


def _one_pass(loaded: LoadedModel, implementation: str, inputs: dict) -> int:
    """One forward pass of the transformer body; returns the bytes of attention weights kept."""
    if implementation == "sdpa":
        _body(default_twin(loaded))(**inputs)
        return 0
    if loaded.capture_path == "fallback":
        out = _body(loaded.model)(**inputs, output_attentions=True)
        weights = [w for w in (getattr(out, "attentions", None) or ()) if w is not None]
        return sum(w.numel() * w.element_size() for w in weights)
    with capture.capture(loaded.site_index, record=True) as state:
        _body(loaded.model)(**inputs)
        return sum(w.numel() * w.element_size() for w in state.weights.values())


def measure_cost(
    loaded: LoadedModel,
    lengths: Iterable[int] | None = None,
    *,
    implementations: Sequence[str] = IMPLEMENTATIONS,
    repeats: int = 2,
    measure_memory: bool = True,
    should_stop: Callable[[], bool] | None = None,
    on_point: Callable[[CostPoint, int, int], None] | None = None,
) -> list[CostPoint]:
    """Time (and memory) of one forward pass of the transformer body against sequence length.

    For each length the implementations are measured one right after the other (side by side, so a
    change in machine load hits both). Lengths above the model's limit are skipped (not shortened), and
    ``captured`` lengths above :func:`models.analysis.weight_budget_tokens` too (the weights of every layer
    must fit the memory budget); lengths < 1 are ignored and duplicates measured once, in increasing order.
    ``should_stop`` is called before each measurement: when it returns True the points measured so far
    are returned.

    Args:
        lengths: token counts (default :func:`default_lengths`).
        implementations: any of ``sdpa`` (:func:`default_twin`) and ``captured`` (the loaded model in a
            :func:`models.capture.capture` context that records every layer's weights).
        repeats: timed passes per point; the fastest is kept (least disturbed by other work).
        measure_memory: one more pass per point to measure peak memory (see :class:`CostPoint`).
        on_point: called as ``on_point(point, done, total)`` after each point.

    Returns:
        list of :class:`CostPoint` in measuring order (``seconds`` in seconds, ``peak_bytes`` in bytes).

    Raises:
        UnsupportedOperationError: no sdpa twin for this architecture, or a speech model.
        ModelOutOfMemoryError: out of memory at some length.
    """
    lengths = sorted({int(n) for n in (lengths or default_lengths(loaded)) if int(n) >= 1})
    limit = loaded.max_positions
    cap_limit = weight_budget_tokens(loaded)
    plan = [(impl, n) for n in lengths for impl in implementations
            if n <= limit and (impl != "captured" or n <= cap_limit)]
    if "sdpa" in implementations:
        default_twin(loaded)  # build it before the clock starts
    points: list[CostPoint] = []
    warmed: set[str] = set()
    cuda = loaded.device.type == "cuda"
    for done, (impl, n) in enumerate(plan, 1):
        if should_stop is not None and should_stop():
            break
        inputs = _cost_inputs(loaded, n)
        try:
            with torch.no_grad():
                if impl not in warmed:
                    _one_pass(loaded, impl, _cost_inputs(loaded, min(n, 16)))
                    warmed.add(impl)
                times = []
                for _ in range(max(1, repeats)):
                    _sync(loaded.device)
                    start = time.perf_counter()
                    recorded = _one_pass(loaded, impl, inputs)
                    _sync(loaded.device)
                    times.append(time.perf_counter() - start)
                peak, method = 0, "none"
                if measure_memory:
                    if cuda:
                        torch.cuda.synchronize(loaded.device)
                        base = torch.cuda.memory_allocated(loaded.device)
                        torch.cuda.reset_peak_memory_stats(loaded.device)
                        _one_pass(loaded, impl, inputs)
                        peak, method = torch.cuda.max_memory_allocated(loaded.device) - base, "cuda-allocator"
                    else:
                        tracker = _PeakTensorMemory()
                        with tracker:
                            _one_pass(loaded, impl, inputs)
                        peak, method = tracker.peak, "tensor-tracking"
        except torch.OutOfMemoryError as exc:
            raise ModelOutOfMemoryError(f"Out of memory timing '{loaded.name}' at {n} tokens: {exc}",
                                        code="oom_timing", model=loaded.name, tokens=n) from exc
        point = CostPoint(n=n, implementation=impl, seconds=float(min(times)), peak_bytes=int(peak),
                          memory_method=method, recorded_bytes=int(recorded))
        points.append(point)
        if on_point is not None:
            on_point(point, done, len(plan))
    return points


def quadratic_reference(ns: Sequence[int], anchor_n: int, anchor_value: float) -> np.ndarray:
    """``c·n²`` through one measured point (``c = anchor_value / anchor_n²``): the curve a cost that
    grows with the attention matrix would follow, in ``anchor_value``'s unit. float64 ``(len(ns),)``."""
    ns = np.asarray(ns, dtype=np.float64)
    return anchor_value * (ns / float(anchor_n)) ** 2


# --------------------------------------------------------------------------------------------------
# KV cache
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KVConfig:
    """What the size of a KV cache depends on.

    Attributes:
        name: label. layers: decoder layers. heads: query heads. kv_heads: key/value heads (== heads
            without grouped-query attention). head_dim: d_k. bytes_per_value: 2 (bf16/fp16), 4 (fp32), 1 (8-bit).
        sliding_window: keys kept by a sliding-window layer (Mistral 7B v0.1: 4096; Gemma 3: 512, on
            five of every six layers); None when no layer has a window.
        sliding_layers: how many of ``layers`` use the window (None: all of them when ``sliding_window``
            is set).
    """

    name: str
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    bytes_per_value: int = 2
    sliding_window: int | None = None
    sliding_layers: int | None = None


KV_PRESETS: dict[str, KVConfig] = {
    "Llama 3 8B": KVConfig("Llama 3 8B", layers=32, heads=32, kv_heads=8, head_dim=128),
    "Llama 3 70B": KVConfig("Llama 3 70B", layers=80, heads=64, kv_heads=8, head_dim=128),
    "Llama 2 7B": KVConfig("Llama 2 7B", layers=32, heads=32, kv_heads=32, head_dim=128),
    "Mistral 7B": KVConfig("Mistral 7B", layers=32, heads=32, kv_heads=8, head_dim=128, sliding_window=4096),
    "SmolLM2-135M": KVConfig("SmolLM2-135M", layers=30, heads=9, kv_heads=3, head_dim=64),
}


def kv_cache_bytes(cfg: KVConfig, tokens: int = 1, *, gqa: bool = True, window: bool = False) -> int:
    """Bytes of a KV cache: ``2 (key and value) × layers × kv_heads × head_dim × bytes × tokens``.

    One key and one value vector (the K, V of Vaswani et al. 2017, eq. 1) per key/value head, per layer,
    per cached token; the same formula as :func:`models.compare.kv_cache_bytes_per_token`. With
    ``gqa=False`` every query head keeps its own key and value (``heads`` instead of ``kv_heads``), as in
    multi-head attention before grouped-query attention (Ainslie et al. 2023, §2.2). With ``window=True``
    a sliding-window layer caches at most ``cfg.sliding_window`` tokens (a rolling buffer, Jiang et al.
    2023, §2), so its share stops growing with the context; the other layers keep every token. Batch 1.

    Args:
        cfg: the layout. tokens: cached tokens (context length).
        gqa: count key/value heads (True) or one key/value pair per query head (False).
        window: apply ``cfg.sliding_window`` to ``cfg.sliding_layers`` layers (all when None).

    Returns:
        bytes, as a Python int.
    """
    per_head = cfg.kv_heads if gqa else cfg.heads
    per_token_layer = 2 * int(per_head) * int(cfg.head_dim) * int(cfg.bytes_per_value)
    layers, tokens = int(cfg.layers), int(tokens)
    if not window or not cfg.sliding_window or cfg.sliding_window < 1:
        return per_token_layer * layers * tokens
    sliding = layers if cfg.sliding_layers is None else min(max(int(cfg.sliding_layers), 0), layers)
    return per_token_layer * ((layers - sliding) * tokens + sliding * min(tokens, int(cfg.sliding_window)))


def kv_config_from_model(loaded: LoadedModel, bytes_per_value: int | None = None) -> KVConfig:
    """:class:`KVConfig` read from the loaded model's config (``decoder_layers`` when the config has it,
    else ``num_hidden_layers``); ``bytes_per_value`` defaults to the element size of the dtype the model
    runs in (4 for float32, 2 for bfloat16/float16). ``name`` is the model's name. ``sliding_window`` and
    ``sliding_layers`` come from the config's ``sliding_window`` and ``layer_types`` (the layers marked
    ``sliding_attention``; every layer when the config has a window but no layer types, as Mistral)."""
    cfg = loaded.config.get_text_config() if hasattr(loaded.config, "get_text_config") else loaded.config
    heads = int(getattr(cfg, "num_attention_heads", None) or getattr(cfg, "decoder_attention_heads", None)
                or loaded.stacks[next(iter(loaded.stacks))][1])
    layers = int(getattr(cfg, "decoder_layers", None) or getattr(cfg, "num_hidden_layers", None)
                 or loaded.stacks[next(iter(loaded.stacks))][0])
    kv = int(getattr(cfg, "num_key_value_heads", None) or heads)
    hidden = int(getattr(cfg, "hidden_size", None) or getattr(cfg, "d_model", 0))
    head_dim = int(getattr(cfg, "head_dim", None) or (hidden // heads))
    if bytes_per_value is None:
        bytes_per_value = torch.empty(0, dtype=loaded.dtype).element_size()
    window = getattr(cfg, "sliding_window", None) or None
    layer_types = getattr(cfg, "layer_types", None)
    sliding_layers = None
    if window and layer_types:  # Gemma 3 / Qwen2: which layers slide is per layer (none when all are full)
        sliding_layers = sum(1 for kind in layer_types[:layers] if kind == "sliding_attention")
        window = window if sliding_layers else None
    return KVConfig(loaded.name, layers=layers, heads=heads, kv_heads=kv, head_dim=head_dim,
                    bytes_per_value=int(bytes_per_value), sliding_window=window,
                    sliding_layers=sliding_layers if window else None)


@dataclass
class GenerationRun:
    """One greedy generation.

    Attributes:
        use_cache: whether the KV cache was on. tokens: the new token ids (prompt excluded).
        text: their decoded text (special tokens skipped). seconds: wall time of ``generate``, in seconds.
    """

    use_cache: bool
    tokens: list[int]
    text: str
    seconds: float

    @property
    def tokens_per_second(self) -> float:
        """``len(tokens) / seconds`` in tokens per second (``inf`` when ``seconds`` is 0)."""
        return len(self.tokens) / self.seconds if self.seconds > 0 else float("inf")


def compare_generation(loaded: LoadedModel, prompt: str, max_new_tokens: int = 32,
                       implementation: str = "sdpa") -> tuple[GenerationRun, GenerationRun]:
    """Greedy generation of ``max_new_tokens`` tokens with the KV cache and without it
    (``use_cache=True`` / ``False``), timed one after the other in the same process.

    Without the cache every step runs the whole sequence again (cost grows with the square of the
    length over a generation); with it each step runs one new token against stored keys and values.
    ``implementation="sdpa"`` uses :func:`default_twin`; ``"captured"`` the loaded model itself (no
    weights kept). No EOS stop (``min_new_tokens = max_new_tokens``) so both runs make the same number
    of tokens.

    Returns:
        ``(with_cache, without_cache)``.

    Raises:
        UnsupportedOperationError: not a decoder, or (``sdpa``) no such implementation for the
            architecture (see :func:`default_twin`). EmptyTextError: empty prompt.
    """
    from .errors import EmptyTextError

    if loaded.family != "decoder":
        raise UnsupportedOperationError(f"Model '{loaded.name}' is an {loaded.family}: the KV cache is for text generation by decoders.",
                                        code="kv_needs_decoder", model=loaded.name, family=loaded.family)
    if not prompt or not prompt.strip():
        raise EmptyTextError("The prompt is empty: type a sentence to continue.", code="empty_prompt")
    model = default_twin(loaded) if implementation == "sdpa" else loaded.model
    tok = loaded.tokenizer
    enc = tok(prompt, return_tensors="pt")
    ids = enc["input_ids"].to(loaded.device)
    attn = enc.get("attention_mask")
    attn = attn.to(loaded.device) if attn is not None else torch.ones_like(ids)
    pad = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    runs = []
    for use_cache in (True, False):
        with torch.no_grad():
            _sync(loaded.device)
            start = time.perf_counter()
            out = model.generate(input_ids=ids, attention_mask=attn, max_new_tokens=max_new_tokens,
                                 min_new_tokens=max_new_tokens, do_sample=False, num_beams=1, use_cache=use_cache,
                                 pad_token_id=pad)
            _sync(loaded.device)
            seconds = time.perf_counter() - start
        new = out[0, ids.shape[1]:].tolist()
        runs.append(GenerationRun(use_cache=use_cache, tokens=new, text=tok.decode(new, skip_special_tokens=True),
                                  seconds=seconds))
    return runs[0], runs[1]
