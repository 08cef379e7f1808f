"""A normalisation layer seen as a linear map at one input: its statistics frozen (Ferrando et al. 2022, "Measuring
the Mixing of Contextual Information in the Transformer", §3, eq. 6-7: LayerNorm is linear once its standard
deviation is fixed; the same holds for RMSNorm, Zhang & Sennrich 2019, with its root mean square fixed).

For an input ``y = Σ_k p_k`` (a sum of parts: the residual, each head, each source token), a norm ``N`` of either
kind satisfies, per position ``i``::

    N(y)_i = Σ_k  s_i ⊙ C(p_k)_i  +  β

with ``C`` the centring (``x - mean(x)``, LayerNorm only; identity for RMSNorm), ``s_i = γ / σ_i`` the weight over
the position's own statistic, and ``β`` the bias (0 for RMSNorm). :func:`freeze` finds ``γ``, ``β`` and centring from
the module itself (probe inputs), fits ``σ_i`` to the output the model computed, and checks the result, so
family quirks (Gemma's ``1 + weight``, T5's norm without mean, any ``eps``) need no table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass
class FrozenNorm:
    """A norm frozen at one input (see the module docstring).

    Attributes:
        scale: float32 ``(n, d)``: ``s_i = γ / σ_i`` per position.
        shift: float32 ``(d,)``: ``β`` (zeros for RMSNorm).
        center: True for LayerNorm (parts are centred before scaling).
    """

    scale: torch.Tensor
    shift: torch.Tensor
    center: bool

    def apply(self, parts: torch.Tensor, rows: slice | torch.Tensor = slice(None)) -> torch.Tensor:
        """The linear part of the frozen norm on ``parts`` float32 ``(len(rows), ..., d)``: position ``rows[b]``'s
        scale on ``parts[b]`` (no ``β``: add :attr:`shift` once per position)."""
        if self.center:
            parts = parts - parts.mean(dim=-1, keepdim=True)
        scale = self.scale[rows]
        return parts * scale.reshape(scale.shape[0], *([1] * (parts.dim() - 2)), scale.shape[-1])


def _call(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    weight = next((p for p in module.parameters()), None)
    dtype = weight.dtype if weight is not None else x.dtype
    device = weight.device if weight is not None else x.device
    with torch.no_grad():
        out = module(x.to(device=device, dtype=dtype))
    return (out[0] if isinstance(out, tuple) else out).float().cpu()


def freeze(module: torch.nn.Module, y: torch.Tensor, out: torch.Tensor, *, atol: float = 1e-4) -> FrozenNorm | None:
    """``module`` (a LayerNorm- or RMSNorm-like map over the last axis) frozen at input ``y``.

    Args:
        module: the norm as the model holds it (called on probe inputs ``(1, 1, d)``).
        y: float32 ``(n, d)``: what the model fed it. out: float32 ``(n, d)``: what it returned.
        atol: largest difference between ``out`` and the frozen map applied to ``y`` (relative to
            ``1 + max|out|``); above it the module is not such a norm.

    Returns:
        The :class:`FrozenNorm`, or None when ``module`` is not a per-position affine norm (its output is not
        ``s_i ⊙ C(y_i) + β`` within ``atol``).
    """
    n, d = y.shape
    zero = _call(module, torch.zeros(1, 1, d)).reshape(d)  # β: a zero input is centred and scales to 0
    ones = _call(module, torch.ones(1, 1, d)).reshape(d) - zero  # 0 for LayerNorm (a constant centres to 0)
    center = bool(ones.abs().max() <= 1e-4 * (1 + zero.abs().max()))
    k = torch.arange(d, dtype=torch.float64)
    # two probes with mean 0 and mean square 1 in every dimension taken together: γ_d from both, any d
    u1 = (math.sqrt(2) * torch.cos(2 * math.pi * (k + 0.5) / d)).float() if d > 2 else torch.tensor([1.0, -1.0])[:d]
    u2 = (math.sqrt(2) * torch.sin(2 * math.pi * (k + 0.5) / d)).float() if d > 2 else torch.tensor([1.0, -1.0])[:d]
    g1 = _call(module, u1.reshape(1, 1, d)).reshape(d) - zero
    g2 = _call(module, u2.reshape(1, 1, d)).reshape(d) - zero
    gamma = (g1 * u1 + g2 * u2) / (u1 * u1 + u2 * u2).clamp_min(1e-12)
    c = y - y.mean(dim=-1, keepdim=True) if center else y
    g = gamma * c
    # σ_i by least squares on the model's own output (any scale error of γ is absorbed here)
    inv = ((out - zero) * g).sum(-1) / (g * g).sum(-1).clamp_min(1e-30)
    scale = gamma[None, :] * inv[:, None]
    rebuilt = c * scale + zero
    if not torch.allclose(rebuilt, out, atol=atol * (1 + float(out.abs().max())), rtol=0):
        return None
    return FrozenNorm(scale=scale, shift=zero, center=center)
