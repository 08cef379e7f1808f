"""The key/value cache at work (the KV-cache lesson, ``views/kvcache.py``): :func:`compare_generation` (greedy
generation with and without the cache). The layout and the cache's size are :mod:`models.analysis.kv_layout`."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from .. import checks
from ..errors import UnsupportedOperationError
from ..loading.model import LoadedModel
from .cost import default_twin, sync_device

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


@checks.needs_model
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
        InvalidArgumentError: ``max_new_tokens`` not in ``[1, max_positions - 1]``, an unknown implementation.
    """

    if loaded.family != "decoder":
        raise UnsupportedOperationError(f"Model '{loaded.name}' is an {loaded.family}: the KV cache is for text "
                                        "generation by decoders.",
                                        code="kv_needs_decoder", model=loaded.name, family=loaded.family)
    prompt = checks.text(prompt, "prompt")
    max_new_tokens = checks.whole("max_new_tokens", max_new_tokens, 1, max(1, loaded.max_positions - 1))
    checks.choice("implementation", implementation, ("sdpa", "captured"))
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
