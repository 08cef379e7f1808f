"""What a sparse-attention pattern would keep of each head, and the key/value cache a mask per head needs.

* :func:`kept_share`: per head and pattern at a budget of keys per query, the share of the head's own attention
  mass the pattern keeps (mean over queries of ``Σ_j∈pattern w_ij``; 1 = nothing lost), measured on an
  analysis's own weights, and the keys per query it keeps. Patterns: sliding window, A-shape (window + sinks,
  Xiao et al. 2023; MInference's name), strided (Child et al. 2019), vertical-slash and block-sparse chosen from
  the head's own weights as :mod:`models.analysis.head_masks` chooses them when it enforces them (MInference,
  Jiang et al. 2024, §3.2).
* :func:`kv_bytes`: the bytes of the key/value cache a :class:`~models.analysis.head_masks.HeadMasks` needs at
  ``n`` tokens. A key/value head (shared by its group of query heads under GQA, Ainslie et al. 2023) keeps every
  token when one of its query heads needs them, else the longest window of the group (DuoAttention, Xiao et
  al. 2024, arXiv 2410.10819, §3: streaming heads keep sinks + recent tokens). Vertical-slash, block-sparse and
  strided heads keep every token: they make the prefill sparse, not the cache (MInference is a prefill method).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import cast

import numpy as np
import torch

from .. import checks
from ..analysis import head_masks as hm
from ..analysis.collect import feed_blocks
from ..analysis.kv_layout import kv_groups, kv_layout
from ..capture import head_rules
from ..errors import InvalidArgumentError

KEPT_PATTERNS = ("sliding_window", "a_shape", "strided", "vertical_slash", "block_sparse")
SINKS = 4  # StreamingLLM's four sink tokens (Xiao et al. 2023, §3.2)
BLOCK = 64  # MInference's block size (Jiang et al. 2024, Algorithm 3)


def pattern_at(kind: str, budget: int) -> str:
    """The pattern of ``kind`` that keeps about ``budget`` keys per query: ``sliding_window:B``,
    ``a_shape:B-4,4``, ``strided:max(2, B/2)`` (window B/2 plus every (B/2)-th earlier token, so a little more
    than B/2 on average), ``vertical_slash:B/2,B/2``, ``block_sparse:min(64, B),B/min(64, B)``.

    Raises:
        InvalidArgumentError: an unknown kind or a budget below 2."""
    checks.choice("kind", kind, KEPT_PATTERNS)
    budget = checks.whole("budget", budget, 2)
    half = budget // 2
    if kind == "sliding_window":
        return f"sliding_window:{budget}"
    if kind == "a_shape":
        sinks = min(SINKS, budget - 1)
        return f"a_shape:{budget - sinks},{sinks}"
    if kind == "strided":
        return f"strided:{max(2, half)}"  # strided:1 would keep every key
    if kind == "vertical_slash":
        return f"vertical_slash:{half},{budget - half}"
    block = min(BLOCK, budget)
    return f"block_sparse:{block},{max(1, budget // block)}"


@dataclass(frozen=True)
class KeptShare:
    """:func:`kept_share`'s result.

    Attributes:
        patterns: the pattern strings, one per kind. budget: keys per query asked for.
        share: float32 ``(patterns, layers, heads)``: mean over queries of the head's weight inside the pattern.
        keys: float32 ``(patterns, layers, heads)``: mean keys per query the pattern keeps (within the model's own
            mask).
    """

    patterns: tuple[str, ...]
    budget: int
    share: np.ndarray
    keys: np.ndarray


def kept_share(analysis, budget: int, stack: str | None = None, kinds=KEPT_PATTERNS) -> KeptShare:
    """Per head and pattern kind at ``budget`` keys per query: the share of the head's attention mass the pattern
    keeps, on this analysis's weights (one more forward pass for a long input, a layer held at a time).

    Args:
        analysis: from :func:`models.analyze` with the model's own mask (the weights a pattern is chosen from).
        budget: keys per query, at least 2 and at most the text's tokens. stack: default the first stack.
        kinds: from :data:`KEPT_PATTERNS`.

    Raises:
        InvalidArgumentError: a budget out of range, an unknown kind or stack.
    """
    stack = checks.choice("stack", next(iter(analysis.attentions)) if stack is None else stack,
                          list(analysis.attentions))
    layers, heads, n_q, n_k = analysis.attentions[stack].shape
    budget = checks.whole("budget", budget, 2, max(2, n_k))
    patterns = tuple(pattern_at(kind, budget) for kind in checks.sequence("kinds", kinds))
    share = np.zeros((len(patterns), layers, heads), dtype=np.float32)
    keys = np.zeros_like(share)
    held: dict[int, torch.Tensor] = {}

    rules = [hm.parse_pattern(pattern) for pattern in patterns]
    # the same keys for every head and layer (pattern_at never gives ``full``: each rule is a mask or chosen)
    static = {p: torch.from_numpy(cast(np.ndarray, rule.matrix(n_k))[n_k - n_q:]) for p, rule in enumerate(rules)
              if isinstance(rule, hm.MaskMode)}

    def done(layer: int) -> None:
        w = held.pop(layer)
        native = torch.from_numpy(np.array(analysis.masks[stack][layer])) if stack in analysis.masks else (
            torch.ones((n_q, n_k), dtype=torch.bool))
        for p, rule in enumerate(rules):
            if p in static:  # one matrix for all heads
                allowed = static[p] & native
                share[p, layer] = (w * allowed).sum(dim=-1).mean(dim=-1).numpy()
                keys[p, layer] = float(allowed.sum(dim=-1).float().mean())
                continue
            for h in range(heads):
                allowed = _allowed(rule, w[h], n_q, n_k) & native
                share[p, layer, h] = float((w[h] * allowed).sum(dim=-1).mean())
                keys[p, layer, h] = float(allowed.sum(dim=-1).float().mean())

    def feed(s: str, layer: int, q0: int, k0: int, w: torch.Tensor) -> None:
        for old in [x for x in held if x != layer]:
            done(old)
        if layer not in held:
            held[layer] = torch.zeros((heads, n_q, n_k), dtype=torch.float32)
        held[layer][:, q0:q0 + w.shape[1], k0:k0 + w.shape[2]] = w.float().cpu()

    feed_blocks(analysis, feed, [stack])
    for layer in list(held):
        done(layer)
    return KeptShare(patterns, budget, share, keys)


def _allowed(rule, weights: torch.Tensor, n_q: int, n_k: int) -> torch.Tensor:
    """Bool ``(q, k)`` of a chosen pattern for one head's weights ``(q, k)``, chosen from them."""
    note = SimpleNamespace(chosen={})
    if rule.kind == "vertical_slash":
        return head_rules.vertical_slash(note, 0, 0, rule, weights[-head_rules.LAST_Q:], n_q, n_k)
    return head_rules.block_sparse(note, 0, 0, rule, weights, n_q, n_k)


def kv_bytes(loaded, spec, n: int, bytes_per_value: int | None = None) -> dict:
    """Bytes of the key/value cache a mask per head needs at ``n`` tokens (batch 1), beside the model's own.

    Args:
        loaded: a model with one self-attention stack to cache (decoders). spec: a
            :class:`~models.analysis.head_masks.HeadMasks` (or a pattern string for every head).
        n: cached tokens. bytes_per_value: 2 for bf16 (default: the dtype the model runs in).

    Returns:
        ``{"bytes": int, "full": int, "ratio": full / bytes, "per_layer": [int, ...]}``; ``full`` is every head
        with the model's own mask (a natively sliding layer keeps its window, Gemma 3's five of six).

    Raises:
        InvalidArgumentError: ``n`` below 1. InvalidMaskError: a bad spec.
    """
    n = checks.whole("n", n, 1)
    spec = spec if isinstance(spec, hm.HeadMasks) else hm.HeadMasks(default=spec)
    layout = kv_layout(loaded, bytes_per_value)
    _, rules, _ = hm.resolve(loaded, spec, n)
    types = list(getattr(loaded.text_config, "layer_types", None) or [])
    per_token = 2 * layout.head_dim * layout.bytes_per_value  # one key and one value vector
    groups = kv_groups(rules.heads, layout.kv_heads if rules.heads == layout.heads else rules.heads)

    def tokens(pattern: str, layer: int) -> int:
        own = n
        if layout.sliding_window and layer < len(types) and types[layer] == "sliding_attention":
            own = min(n, int(layout.sliding_window))
        rule = hm.parse_pattern(pattern)
        size = hm.budget(rule, n) if rule is not None and not isinstance(rule, hm.Chosen) else None
        return own if size is None else min(own, size)

    per_layer, full = [], 0
    for layer in range(rules.layers):
        kept = sum(max(tokens(rules.patterns[(layer, h)], layer) for h in group) for group in groups)
        per_layer.append(kept * per_token)
        full += sum(tokens("full", layer) for _ in groups) * per_token
    total = sum(per_layer)
    if total <= 0:
        raise InvalidArgumentError("The cache would hold nothing.", code="arg_whole", name="n", range=">= 1", value=n)
    return {"bytes": total, "full": full, "ratio": full / total, "per_layer": per_layer}
