"""What a model returns as ``output_attentions``, read as per-layer ``(batch, heads, queries, keys)`` maps and
checked to be attention weights over the tokens (the fallback path's source of weights)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..errors import NoAttentionWeightsError

if TYPE_CHECKING:
    from ..loading.model import LoadedModel


def rows_sum_to_one(t: torch.Tensor) -> bool:
    """Every row of ``t`` (..., keys) is finite and sums to 1, or to 0 (a query with no key).

    Within 1e-3, or within the machine epsilon of ``t``'s dtype when that is larger: each weight rounded to a half
    dtype is off by at most half an epsilon of itself, so a row of weights that sum to 1 sums to 1 ± eps/2 after
    rounding (bfloat16: eps = 2^-7; BLOOM's and FSMT's bf16 rows sum to 0.998 .. 1.002)."""
    tol = max(1e-3, torch.finfo(t.dtype).eps) if t.is_floating_point() else 1e-3
    sums = t.float().sum(-1)
    return bool(torch.isfinite(sums).all() and ((sums - 1).abs().lt(tol) | sums.abs().lt(1e-6)).all())


def check_maps(loaded: LoadedModel, stacks: dict[str, tuple], inputs: dict) -> None:
    """Refuse what a fallback-path model returns as attention unless every tensor is a ``(batch, heads,
    queries, keys)`` probability map over the probe's own tokens: finite, each row summing to 1 (or 0 for a
    query with no allowed key). Local-window tensors (Longformer), pooled queries (Funnel), recurrent states
    (RWKV) and n-gram streams (ProphetNet) fail here instead of being shown as attention.

    Raises:
        NoAttentionWeightsError: naming the first tensor that is not such a map, and why.
    """
    n_in = next((int(v.shape[-1]) for k, v in inputs.items() if k == "input_ids"), None)
    n_dec = int(inputs["decoder_input_ids"].shape[-1]) if "decoder_input_ids" in inputs else None
    lengths = {"encoder": (n_in, n_in), "decoder": (n_dec, n_dec) if n_dec else (n_in, n_in), "cross": (n_dec, None)}
    for stack, tensors in stacks.items():
        for layer, w in enumerate(tensors):
            why = None
            q_len, k_len = lengths[stack]
            if not isinstance(w, torch.Tensor) or w.dim() != 4:
                why = f"a {getattr(w, 'shape', type(w).__name__)} value, not (batch, heads, queries, keys)"
            elif (q_len and w.shape[-2] != q_len) or (k_len and w.shape[-1] != k_len):
                why = f"shape {tuple(w.shape)} for {q_len} queries and {k_len or '?'} keys"
            elif not rows_sum_to_one(w):
                sums = w.float().sum(-1)
                why = f"rows summing to {float(sums.min()):.3g} .. {float(sums.max()):.3g}, not 1"
            if why:
                raise NoAttentionWeightsError(
                    f"Model '{loaded.name}' ({loaded.model.config.model_type}) returns {stack} layer {layer}'s "
                    f"'attentions' as {why}: they are not attention weights over the tokens, so Dikkat cannot "
                    "show them as attention.",
                    code="not_attention_maps", model=loaded.name, model_type=loaded.model.config.model_type,
                    stack=stack, layer=layer, why=why
                )


def attention_tuples(outputs, family: str, config=None) -> dict[str, tuple]:
    """``stack -> per-layer (batch, heads, queries, keys) tensors`` of a model's eager ``output_attentions``.

    With the model's ``config``, local-window maps (Longformer, LED's encoder: ``config.attention_window``) are
    turned into full ``(queries, keys)`` maps (:func:`local_to_full`)."""
    stacks = {}
    if family == "encoder-decoder":
        for stack, attr in (("encoder", "encoder_attentions"), ("decoder", "decoder_attentions"),
                            ("cross", "cross_attentions")):
            value = getattr(outputs, attr, None)
            if value:
                stacks[stack] = value
    else:
        value = getattr(outputs, "attentions", None)
        if value and all(v is not None for v in value):
            stacks["decoder" if family == "decoder" else "encoder"] = value
    window = getattr(config, "attention_window", None) if config is not None else None
    if window is not None and "encoder" in stacks:
        windows = list(window) if isinstance(window, (list, tuple)) else [window] * len(stacks["encoder"])
        stacks["encoder"] = tuple(local_to_full(t, int(w)) if t is not None and t.shape[-1] == int(w) + 1 else t
                                  for t, w in zip(stacks["encoder"], windows))
    return stacks


def local_to_full(local: torch.Tensor, window: int) -> torch.Tensor:
    """Longformer's local attention ``(batch, heads, n, window + 1)`` as full maps ``(batch, heads, n, n)``.

    Column ``c`` of query ``i`` holds the weight on key ``j = i + c - window / 2`` (Beltagy et al. 2020, §3.1;
    transformers' ``LongformerBaseModelOutput.attentions``: "the attention weight of a token to itself is
    located at index ``attention_window / 2``"); keys outside the text (the model's own padding to a multiple
    of the window) are dropped, and every other key gets 0. Only maps without global tokens (none are set by
    Dikkat) have exactly ``window + 1`` columns.

    Args:
        local: float ``(batch, heads, n, window + 1)``. window: the layer's ``attention_window`` (even).

    Returns:
        float ``(batch, heads, n, n)``, same dtype and device.
    """
    n, half = local.shape[-2], window // 2
    i = torch.arange(n, device=local.device)[:, None]
    j = torch.arange(n, device=local.device)[None, :]
    column = j - i + half
    inside = (column >= 0) & (column <= window)
    index = column.clamp(0, window).expand(*local.shape[:-2], n, n)
    return torch.where(inside, local.gather(-1, index), torch.zeros((), dtype=local.dtype, device=local.device))
