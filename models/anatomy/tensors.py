"""Small facts about modules and tensors that the load-time probes share: a linear map's width, the first
tensor of a module's input or output, and when two probe tensors are the same."""

from __future__ import annotations

import torch


def linear_width(module) -> tuple[int, int] | None:
    """``(in, out)`` features of a ``nn.Linear`` or transformers' ``Conv1D`` (GPT-2 style), else None."""
    if isinstance(module, torch.nn.Linear):
        return module.in_features, module.out_features
    weight = getattr(module, "weight", None)
    if type(module).__name__ == "Conv1D" and isinstance(weight, torch.Tensor) and weight.dim() == 2:
        return int(weight.shape[0]), int(weight.shape[1])
    return None


def has_weight_matrix(module) -> bool:
    """The module has a weight with two or more axes: a projection of some kind (JetMoE's expert-routed one is
    no ``nn.Linear``); a norm's weight is a vector."""
    weight = getattr(module, "weight", None)
    return isinstance(weight, torch.Tensor) and weight.dim() >= 2


def first_tensor(value):
    """The first tensor of a module's output (a tensor, a tuple or a ``ModelOutput``), else None."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)) and value and isinstance(value[0], torch.Tensor):
        return value[0]
    if hasattr(value, "to_tuple"):
        items = value.to_tuple()
        return items[0] if items and isinstance(items[0], torch.Tensor) else None
    return None


def input_tensor(args, kwargs):
    """The residual stream a module was called with: its first positional tensor, or ``hidden_states=``."""
    if args and isinstance(args[0], torch.Tensor):
        return args[0]
    found = kwargs.get("hidden_states")
    return found if isinstance(found, torch.Tensor) else None


def tolerance(dtype: torch.dtype) -> float:
    """Relative tolerance of the probes' identities for a model computing in ``dtype``: 1e-4 for float32 (and
    float64); 4 units in the last place for bfloat16 (3.1e-2) and float16 (3.9e-3), whose sums of many products
    round that much."""
    return max(1e-4, 4 * float(torch.finfo(dtype).eps)) if dtype.is_floating_point else 1e-4


def close(a: torch.Tensor | None, b: torch.Tensor | None, tol: float = 1e-4) -> bool:
    """``a`` and ``b`` hold the same numbers in the same layout (any shape of the same size), within ``tol``
    relative to ``b``'s largest magnitude; False when either is missing."""
    if a is None or b is None or a.numel() != b.numel():
        return False
    a, b = a.reshape(-1), b.reshape(-1)
    scale = 1 + float(b.abs().max())
    head = min(256, b.numel())  # most candidates differ at once: a cheap look before the whole tensors
    if not torch.allclose(a[:head].float(), b[:head].float(), atol=tol * scale, rtol=0):
        return False
    return bool(torch.allclose(a.float(), b.float(), atol=tol * scale, rtol=0))
