"""Q/K/V step by step on the loaded model (the Q/K/V lesson, ``views/qkv.py``).

:func:`head_steps` (or :func:`qkv_steps`) takes the input of one attention layer
(:mod:`models.lessons.layer_input`) and recomputes it by hand into queries, keys and values with the
layer's own projection weights (BERT ``attention.self.query/key/value``; GPT-2 ``c_attn`` split in three;
Llama family ``q_proj/k_proj/v_proj`` plus the model's rotary embedding and grouped-query sharing), then
``softmax(q·kᵀ·scaling + mask)`` and the weighted sum of values (Vaswani et al. 2017, eq. 1), checked
against the attention the model itself recorded in the same forward pass. :func:`softmax_row`,
:func:`entropy`: the softmax of one row with or without the ``1/√d_k`` scaling and with a temperature.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .. import checks
from ..analysis import Analysis
from ..errors import InvalidArgumentError, UnsupportedOperationError
from ..loading.model import LoadedModel
from .layer_input import LayerCapture, check_head, layer_capture

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
    m: Any = lc.module  # its projections are named by family (found with hasattr below)
    h = lc.hidden
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


@checks.needs_model
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
    check_head(loaded, lc.stack, lc.layer, head)
    heads = loaded.stacks[lc.stack][1]
    m = lc.module
    head_dim = int(getattr(m, "head_dim", None) or getattr(m, "attention_head_size", None)
                   or lc.hidden.shape[1] // heads)
    q_all, k_all, v_all, source = _projections(lc, head_dim)
    kv_heads = k_all.shape[0]
    group = heads // kv_heads
    kv_head = head // group
    q, k, v = q_all[head], k_all[kv_head], v_all[kv_head]
    q_pre = k_pre = None
    rope = lc.cos is not None
    if lc.cos is not None:
        assert lc.sin is not None  # layer_capture records cos and sin together
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


@checks.needs_model
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
        float64 ``(k,)`` summing to 1 (all zeros when no key is allowed or every allowed score is -inf; the
        argmax, ties shared, when s/T overflows).

    Raises:
        InvalidArgumentError: temperature not a finite number > 0; scores not 1-D, NaN or +inf; allowed not
            of the scores' shape.
    """
    temperature = checks.number("temperature", temperature, 0.0, above=True)
    s = checks.array("scores", scores, ndim=1, shape="(k,)")
    if np.isnan(s).any() or np.isposinf(s).any():
        raise InvalidArgumentError(f"scores must be finite numbers or -inf (a blocked key), got {checks.shown(s)}.",
                                   code="arg_shape", name="scores", shape="(k,) of finite numbers or -inf",
                                   got=checks.shown(s))
    ok = np.ones(s.shape, dtype=bool) if allowed is None else checks.array("allowed", allowed, dtype=bool)
    if ok.shape != s.shape:
        raise InvalidArgumentError(f"allowed must have the scores' shape {s.shape}, got {ok.shape}.",
                                   code="arg_shape", name="allowed", shape=str(s.shape), got=str(ok.shape))
    with np.errstate(over="ignore"):
        s = np.where(ok, s / temperature, -np.inf)
    if not ok.any() or np.isneginf(s).all():
        return np.zeros_like(s)
    top = s.max()
    if np.isposinf(top):  # T so small that s/T overflows: the limit T -> 0 is argmax, ties shared
        return (s == top) / np.count_nonzero(s == top)
    e = np.exp(s - top)
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
