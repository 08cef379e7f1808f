"""A statistics pass: every head's per-query statistics from the log-sum-exp, in one forward pass, no attention
map kept or written (issue 45, step 2).

:func:`head_statistics` runs the model once with the capture's ``stats`` hook
(:class:`models.capture.state.CaptureState`): each layer's attention call hands its queries and keys (after
RoPE), its mask and the family's eager function to :func:`_Collector.__call__`, which computes
:mod:`models.analysis.fused_stats` on them; the layer's output is then the fused sdpa kernel's (the model's own
numbers, ~1e-6 relative in float32, as ``analyze``'s fused path), or with the ``tile`` kernel the output ``P V``
computed from the same scores as the statistics (one pass over each block, ``P·[K, V]`` in one product: exact as
the eager function, no second attention). Memory grows with ``n`` (the tile path holds
``BLOCK_ROWS × n`` scores per head at a time; FlexAttention compiled holds none), where the weights grow with
``n²``.

The score's scale is the family's own: read from one tiny call of its eager function per layer (two keys, one
query: ``log(w_0 / w_1) = scaling · q · (k_0 − k_1)``), so a family that scales by the layer (GPT-2's
``scale_attn_by_inverse_layer_idx``), by a configured factor or not at all needs no table. Refused, with the
reason: the fallback capture path (no attention function to read), encoder-decoder and speech models (two
stacks and cross-attention: the tile path of ``analyze``), softcapped scores, learned sinks, and biases in the
mask or as extra arguments (ALiBi, T5's relative bias).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .. import capture, checks
from ..errors import UnsupportedOperationError
from ..loading.model import LoadedModel
from ..sites.inputs import accepts as _accepts
from .flash_stats import available as _flash_available
from .flash_stats import flash_stats
from .fused_stats import STATS, flex_stats, plain_causal, readable, score_scaling, tile_stats

KERNELS = ("auto", "flash", "tile", "flex", "flex_compiled")


@dataclass
class PassStatistics:
    """What :func:`head_statistics` returns.

    Attributes:
        stack: the stack read (``encoder`` or ``decoder``). tokens: the token strings (``n``).
        stats: name -> float32 ``(layers, heads, n)``: ``lse``, ``first``, ``previous``, ``self``, ``entropy``
            (nats) per query, ``received`` per key (:mod:`models.analysis.fused_stats`).
        truncated: tokens cut from the end (0 if none). kernel: the implementation used.
    """

    stack: str
    tokens: list[str]
    stats: dict[str, np.ndarray]
    truncated: int
    kernel: str


class _Collector:
    """The capture's ``stats`` hook: one layer's statistics per call."""

    def __init__(self, kernel: str, layers: int, heads: int):
        self.kernel, self.layers, self.heads = kernel, layers, heads
        self.out: dict[int, dict[str, torch.Tensor]] = {}
        self.causal: dict[tuple, bool] = {}

    def __call__(self, site, eager, module, query, key, value, attention_mask, args, kwargs) -> torch.Tensor | None:
        readable(args, kwargs)
        scaling = score_scaling(eager, module, query, key, value, kwargs)
        mask = attention_mask
        causal = plain_causal(self.causal, mask, query.shape[-2])
        kernel = self.kernel
        if kernel == "auto":  # measured (flash_stats' docstring): the fused CPU kernel where it runs, else tiles
            kernel = "flash" if _flash_available(query) and value.shape[-1] == query.shape[-1] else "tile"
        if kernel == "flash":
            got = flash_stats(query, key, value, None if causal else mask, scaling, causal=causal)
            out = got.pop("out")
        elif kernel == "tile":
            got = tile_stats(query, key, None if causal else mask, scaling, value=value, causal=causal)
            out = got.pop("out")
        else:
            got = flex_stats(query, key, None if causal else mask, scaling, causal=causal,
                             compiled=kernel == "flex_compiled")
            out = None
        self.out[site.layer] = {k: v[0].detach().cpu() for k, v in got.items()}
        return out  # the layer's output from the same scores (tile), or None: the fused kernel computes it


@checks.needs_model
def head_statistics(loaded: LoadedModel, text: str, *, max_tokens: int | None = None,
                    kernel: str = "auto") -> PassStatistics:
    """Every head's per-query statistics of ``text`` in one forward pass, from the log-sum-exp (module docstring).

    Args:
        loaded: a text model (encoder or decoder) on the interface capture path.
        text: the text. max_tokens: cut to this many tokens (default the model's own limit).
        kernel: ``auto`` (``flash`` where it runs, else ``tile``: chosen by measurement, see
            :mod:`models.analysis.flash_stats`), ``flash`` (three calls of PyTorch's fused CPU attention kernel:
            O(n) memory; refused off a CPU), ``tile`` (blocks of query rows), ``flex`` (FlexAttention, uncompiled:
            it computes the scores whole) or ``flex_compiled`` (FlexAttention through ``torch.compile``).

    Returns:
        :class:`PassStatistics`.

    Raises:
        InvalidArgumentError: ``kernel`` not one of :data:`KERNELS`, ``max_tokens`` out of range.
        UnsupportedOperationError: the fallback capture path (``stats_path``), an encoder-decoder or speech model
            (``stats_family``), softcapping (``stats_softcap``), learned sinks (``stats_sinks``), a position bias
            (``stats_bias``), ``flash`` where the fused CPU kernel cannot run (``stats_kernel``). Whatever
            :func:`models.analyze` raises for the text.
    """
    from .run import _encode, default_max_tokens

    kernel = checks.choice("kernel", kernel, KERNELS)
    if loaded.capture_path != "interface":
        raise UnsupportedOperationError(
            f"'{loaded.name}' is read through hooks on its softmax (the fallback capture path): no attention call "
            "hands over its queries and keys, so its statistics are read from the weights (models.analyze).",
            code="stats_path", model=loaded.name)
    if loaded.family not in ("encoder", "decoder") or not loaded.reads_text:
        raise UnsupportedOperationError(
            f"'{loaded.name}' is an {loaded.family} model: the statistics pass reads one stack of self-attention; "
            "use models.analyze.", code="stats_family", model=loaded.name, family=loaded.family)
    limit = max(2, loaded.max_positions)
    max_tokens = checks.whole("max_tokens", default_max_tokens(loaded) if max_tokens is None else max_tokens, 2, limit)
    stack = loaded.input_stack
    layers, heads = loaded.stacks[stack]
    tokens, _, inputs, truncated = _encode(loaded, checks.text(text, "text"), None, max_tokens)
    collector = _Collector(kernel, layers, heads)
    want = {(stack, layer) for layer in range(layers)}
    if _accepts(loaded.model, "logits_to_keep"):  # no logits are read: the last position's only (not n x vocab)
        inputs["logits_to_keep"] = 1
    if _accepts(loaded.model, "use_cache"):  # nor the keys and values of every layer
        inputs["use_cache"] = False
    with capture.rerun(loaded, record=False, fused=loaded.sdpa_ok, want=want, stats=collector):
        loaded.model(**inputs)
    stats = {name: np.stack([collector.out[layer][name].numpy() for layer in range(layers)]).astype(np.float32)
             for name in STATS}
    return PassStatistics(stack=stack, tokens=[t.text for t in tokens], stats=stats, truncated=truncated,
                          kernel=kernel)
