"""The key/value cache (the KV-cache lesson, ``views/kvcache.py``): :func:`kv_cache_bytes`,
:func:`kv_config_from_model`, :data:`KV_PRESETS`, :func:`compare_generation` (greedy generation with and
without the cache)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from ..errors import EmptyTextError, UnsupportedOperationError
from ..loading import LoadedModel
from .cost import default_twin, sync_device

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
            sync_device(loaded.device)
            start = time.perf_counter()
            out = model.generate(input_ids=ids, attention_mask=attn, max_new_tokens=max_new_tokens,
                                 min_new_tokens=max_new_tokens, do_sample=False, num_beams=1, use_cache=use_cache,
                                 pad_token_id=pad)
            sync_device(loaded.device)
            seconds = time.perf_counter() - start
        new = out[0, ids.shape[1]:].tolist()
        runs.append(GenerationRun(use_cache=use_cache, tokens=new, text=tok.decode(new, skip_special_tokens=True),
                                  seconds=seconds))
    return runs[0], runs[1]
