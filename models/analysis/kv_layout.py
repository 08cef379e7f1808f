"""The key/value layout of a decoder's self-attention: grouped-query attention's head groups and the size of
a key/value cache (Ainslie et al. 2023, "GQA"; Pope et al. 2022, §3.1). Used by the Masks page's GQA section
(``views/mask_sections/gqa.py``) and the KV-cache lesson page (``views/kvcache.py``)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..errors import InvalidArgumentError
from ..loading.model import LoadedModel


def kv_groups(heads: int, kv_heads: int) -> list[tuple[int, ...]]:
    """Which query heads read each key/value head under grouped-query attention.

    transformers' ``repeat_kv`` repeats each key/value head ``heads // kv_heads`` times in a row, so query
    head ``h`` reads key/value head ``h // (heads // kv_heads)`` (Ainslie et al. 2023, "GQA", §2:
    groups of consecutive query heads).

    Returns:
        ``kv_heads`` tuples of query-head indices, e.g. ``kv_groups(9, 3) == [(0, 1, 2), (3, 4, 5), (6, 7, 8)]``.

    Raises:
        InvalidArgumentError: ``kv_heads`` does not divide ``heads`` or either is < 1.
    """
    if heads < 1 or kv_heads < 1 or heads % kv_heads:
        raise InvalidArgumentError(f"{heads} query heads cannot be split evenly over {kv_heads} key/value heads.",
                                   code="kv_heads_uneven", heads=heads, kv=kv_heads)
    per = heads // kv_heads
    return [tuple(range(g * per, (g + 1) * per)) for g in range(kv_heads)]


@dataclass(frozen=True)
class KVLayout:
    """The key/value layout of a decoder's self-attention: what grouped-query attention shares and what the
    size of a KV cache depends on. One layout for the Masks page's GQA section and the KV-cache lesson.

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

    @property
    def groups(self) -> list[tuple[int, ...]]:
        """:func:`kv_groups` ``(heads, kv_heads)``: which query heads read each key/value head."""
        return kv_groups(self.heads, self.kv_heads)

    @property
    def shared(self) -> bool:
        """True when several query heads share a key/value head."""
        return self.kv_heads < self.heads

    def bytes_per_token(self, bytes_per_value: int | None = None, *, sharing: bool = True) -> int:
        """KV-cache bytes per token (:func:`kv_cache_bytes` of one token, every layer keeping it), with
        (``kv_heads``) or without (one key/value pair per query head) sharing; ``bytes_per_value`` e.g. 2 for
        bf16 (default: the layout's own)."""
        size = self.bytes_per_value if bytes_per_value is None else bytes_per_value
        return kv_cache_bytes(replace(self, bytes_per_value=size), 1, gqa=sharing)


KV_PRESETS: dict[str, KVLayout] = {
    "Llama 3 8B": KVLayout("Llama 3 8B", layers=32, heads=32, kv_heads=8, head_dim=128),
    "Llama 3 70B": KVLayout("Llama 3 70B", layers=80, heads=64, kv_heads=8, head_dim=128),
    "Llama 2 7B": KVLayout("Llama 2 7B", layers=32, heads=32, kv_heads=32, head_dim=128),
    "Mistral 7B": KVLayout("Mistral 7B", layers=32, heads=32, kv_heads=8, head_dim=128, sliding_window=4096),
    "SmolLM2-135M": KVLayout("SmolLM2-135M", layers=30, heads=9, kv_heads=3, head_dim=64),
}


def kv_cache_bytes(cfg: KVLayout, tokens: int = 1, *, gqa: bool = True, window: bool = False) -> int:
    """Bytes of a KV cache: ``2 (key and value) × layers × kv_heads × head_dim × bytes × tokens``.

    One key and one value vector (the K, V of Vaswani et al. 2017, eq. 1) per key/value head, per layer,
    per cached token (Pope et al. 2022, §3.1). With
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


def kv_layout(loaded: LoadedModel, bytes_per_value: int | None = None) -> KVLayout:
    """:class:`KVLayout` read from the loaded model's config (``decoder_layers`` when the config has it,
    else ``num_hidden_layers`` or its other names; heads and layers of the first stack when the config names
    none; ``head_dim`` from the config, else hidden size ÷ heads); ``bytes_per_value`` defaults to the element
    size of the dtype the model runs in (4 for float32, 2 for bfloat16/float16). ``name`` is the model's name.
    ``sliding_window`` and ``sliding_layers`` come from the config's ``sliding_window`` and ``layer_types`` (the
    layers marked ``sliding_attention``; every layer when the config has a window but no layer types, as Mistral).

    Raises:
        InvalidArgumentError: the key/value heads do not divide the query heads."""
    cfg = loaded.text_config

    def first(*names):
        return next((getattr(cfg, n) for n in names if getattr(cfg, n, None)), None)

    first_stack = loaded.stacks[next(iter(loaded.stacks))]
    heads = int(first("num_attention_heads", "n_head", "num_heads", "decoder_attention_heads") or first_stack[1])
    layers = int(first("decoder_layers", "num_hidden_layers", "n_layer", "num_layers") or first_stack[0])
    kv = int(first("num_key_value_heads") or heads)
    if heads % kv:
        raise InvalidArgumentError(f"Model '{loaded.name}': {heads} query heads cannot be split evenly over {kv} "
                                   "key/value heads.", code="kv_heads_uneven", heads=heads, kv=kv)
    hidden = int(first("hidden_size", "n_embd", "d_model") or 0)
    head_dim = int(first("head_dim") or (hidden // heads))
    if bytes_per_value is None:
        bytes_per_value = torch.empty(0, dtype=loaded.dtype).element_size()
    window = getattr(cfg, "sliding_window", None) or None
    layer_types = getattr(cfg, "layer_types", None)
    sliding_layers = None
    if window and layer_types:  # Gemma 3 / Qwen2: which layers slide is per layer (none when all are full)
        sliding_layers = sum(1 for kind in layer_types[:layers] if kind == "sliding_attention")
        window = window if sliding_layers else None
    return KVLayout(loaded.name, layers=layers, heads=heads, kv_heads=kv, head_dim=head_dim,
                    bytes_per_value=int(bytes_per_value), sliding_window=window,
                    sliding_layers=sliding_layers if window else None)
