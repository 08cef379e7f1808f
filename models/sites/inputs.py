"""The tiny input every load-time probe runs the model on, and what a model's forward pass accepts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from ..loading.model import LoadedModel


def accepts(model, name: str) -> bool:
    """True when ``model.forward`` takes a keyword argument ``name``."""
    import inspect

    try:
        return name in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def probe_inputs(loaded: LoadedModel) -> dict[str, Any]:
    """A tiny input that exercises every attention module once."""
    model, tok = loaded.model, loaded.tokenizer
    ids = tok("probe text", return_tensors="pt")["input_ids"][:, :8]
    inputs: dict[str, Any] = {}
    if loaded.input_name == "input_features":
        cfg = model.config
        inputs["input_features"] = torch.zeros(1, cfg.num_mel_bins, 2 * cfg.max_source_positions, dtype=loaded.dtype)
    else:
        inputs["input_ids"] = ids
    if loaded.family == "encoder-decoder":
        start = loaded.decoder_start_id
        inputs["decoder_input_ids"] = torch.tensor([[start, start]])
    inputs = {k: v.to(loaded.device) for k, v in inputs.items()}
    if loaded.family == "decoder" and accepts(model, "use_cache"):
        inputs["use_cache"] = False  # one pass: a hybrid model's cache may not even answer get_seq_length
    return inputs
