"""Where a model's rotary position embedding (RoPE, Su et al. 2021) is, found by what it does, never by a
buffer or class name.

A rotary embedding module is called ``module(x, position_ids[, layer_type])`` and returns ``(cos, sin)``
tables, each ``(batch, positions, rotary_dim)`` (or one complex table ``(batch, positions, rotary_dim / 2)``:
Llama 4, DeepSeek-V2). The probe calls every parameter-free leaf module whose ``forward``
takes two or more arguments with four positions and keeps those whose answer behaves as RoPE's tables must:
``sin = 0`` and ``cos = c > 0`` at position 0 (no rotation), ``cos² + sin² = c²`` at every position (a
rotation, scaled by the module's attention scaling ``c``; 1 for plain RoPE), and a rotation at position 1.
Gemma 3's module (buffers ``full_attention_inv_freq`` and ``sliding_attention_inv_freq``, no ``inv_freq``)
takes the layer type as a third argument: each of ``config.layer_types`` is tried, full attention first.
"""

from __future__ import annotations

import inspect
import threading
from dataclasses import dataclass

import torch

from .. import checks
from ..loading.model import LoadedModel

_LOCK = threading.Lock()
_POSITIONS = (0, 1, 2, 3)


@dataclass(frozen=True)
class Rotary:
    """A model's rotary embedding, as probed.

    Attributes:
        name: the module's name in ``model.named_modules()``.
        module: the module itself.
        layer_type: the third argument its forward takes (Gemma 3: ``"full_attention"``), or None.
        layer_types: every layer type it answered for (empty when it takes none).
    """

    name: str
    module: torch.nn.Module
    layer_type: str | None
    layer_types: tuple[str, ...] = ()

    def tables(self, positions, device, layer_type: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``cos, sin`` float32 CPU tensors ``(len(positions), rotary_dim)`` computed by the module itself
        for ``layer_type`` (default :attr:`layer_type`)."""
        pos = torch.tensor([list(positions)], dtype=torch.long, device=device)
        x = torch.zeros(1, dtype=torch.float32, device=device)
        kind = layer_type or self.layer_type
        with torch.no_grad():
            cos, sin = _cos_sin(self.module(x, pos) if kind is None else self.module(x, pos, kind))
        return cos[0].float().cpu(), sin[0].float().cpu()


def _takes_two(module: torch.nn.Module) -> bool:
    try:
        params = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params)


def _cos_sin(out):
    """``(cos, sin)`` from a rotary module's answer, in transformers' two-halves layout (pair ``i`` is dimensions
    ``i`` and ``i + d/2``, each table ``[c_0 … c_{d/2-1}, c_0 … c_{d/2-1}]``) whatever the module's layout: the pair
    itself in that layout, a complex ``e^{i·pos·θ_i}`` table (Llama 4, DeepSeek-V2: ``torch.polar``), one entry per
    pair (DeepSeek-V4) or each entry twice in a row (interleaved pairs). Anything else is returned as it is."""
    if isinstance(out, torch.Tensor) and out.is_complex():
        out = (out.real, out.imag)
    if not isinstance(out, (tuple, list)) or len(out) != 2 or not all(isinstance(t, torch.Tensor) for t in out):
        return out
    cos, sin = out
    if cos.shape != sin.shape or cos.dim() < 1:
        return out
    d = cos.shape[-1]
    if (d % 2 == 0 and torch.equal(cos[..., : d // 2], cos[..., d // 2:])
            and torch.equal(sin[..., : d // 2], sin[..., d // 2:])):
        return cos, sin
    if d % 2 == 0 and torch.equal(cos[..., 0::2], cos[..., 1::2]) and torch.equal(sin[..., 0::2], sin[..., 1::2]):
        cos, sin = cos[..., 0::2], sin[..., 0::2]
    return torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)


def _is_rope(out) -> bool:
    """True when ``out`` is ``(cos, sin)`` (or a complex table) of a rotation at positions 0..3 (see the module
    docstring)."""
    out = _cos_sin(out)
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        return False
    cos, sin = out
    if not (isinstance(cos, torch.Tensor) and isinstance(sin, torch.Tensor)) or cos.shape != sin.shape:
        return False
    if cos.dim() < 2 or cos.shape[-2] != len(_POSITIONS) or cos.shape[-1] < 2 or not cos.is_floating_point():
        return False
    cos, sin = cos.reshape(-1, *cos.shape[-2:])[0].double(), sin.reshape(-1, *sin.shape[-2:])[0].double()
    if not (torch.isfinite(cos).all() and torch.isfinite(sin).all()):
        return False
    scale = cos[0]
    if (scale <= 0).any() or sin[0].abs().max() > 1e-6 or (scale - scale[0]).abs().max() > 1e-3 * scale[0]:
        return False
    norm = cos ** 2 + sin ** 2
    return bool((norm - scale[0] ** 2).abs().max() < 1e-3 * scale[0] ** 2 and sin[1].abs().max() > 1e-6)


def _answers(module: torch.nn.Module, device, layer_types: tuple[str, ...]) -> tuple[bool, tuple[str, ...]]:
    pos = torch.tensor([list(_POSITIONS)], dtype=torch.long, device=device)
    x = torch.zeros(1, dtype=torch.float32, device=device)
    # under the index guard: a module that is no rotary embedding may index past a table with these positions, which
    # a GPU would answer with a device assert that ends the process's use of it, not an exception caught here
    with torch.no_grad(), checks.index_guard():
        try:
            return _is_rope(module(x, pos)), ()
        except Exception:  # noqa: BLE001 - a module that is not a rotary embedding fails in any way it likes
            pass
        kinds = []
        for kind in layer_types:
            try:
                if _is_rope(module(x, pos, kind)):
                    kinds.append(kind)
            except Exception:  # noqa: BLE001
                continue
    return bool(kinds), tuple(kinds)


def find_rotary(loaded: LoadedModel) -> Rotary | None:
    """The model's rotary embedding (the first module that behaves as one), probed once and kept in
    ``loaded.probes["rotary"]``; None when no module does (learned, sinusoidal, relative or ALiBi positions,
    or RoPE computed inline without a module)."""
    if "rotary" in loaded.probes:
        return loaded.probes["rotary"]
    with _LOCK:
        if "rotary" not in loaded.probes:
            loaded.probes["rotary"] = _probe(loaded)
    return loaded.probes["rotary"]


def _probe(loaded: LoadedModel) -> Rotary | None:
    cfg = loaded.text_config
    params = getattr(cfg, "rope_parameters", None)
    # the third argument: a layer type (Gemma 3) or a RoPE parameter set's name (DeepSeek-V4: "main", "compress")
    types = list(getattr(cfg, "layer_types", None) or ()) + \
        ([k for k, v in params.items() if isinstance(v, dict)] if isinstance(params, dict) else [])
    # full attention first: the lessons show the table of the layers that see every position
    layer_types = tuple(sorted({str(t) for t in types}, key=lambda t: (t != "full_attention", t)))
    for name, module in loaded.model.named_modules():
        # a leaf without parameters (a block or the whole model is never called by the probe)
        if next(module.children(), None) is not None or next(module.parameters(recurse=False), None) is not None \
                or not _takes_two(module):
            continue
        ok, kinds = _answers(module, loaded.device, layer_types)
        if ok:
            return Rotary(name, module, kinds[0] if kinds else None, kinds)
    return None
