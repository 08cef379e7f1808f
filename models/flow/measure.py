"""The contribution measure and the graph of routes built from it.

Contribution (Ferrando et al. 2022, "ALTI", eq. 8-9; Ferrando & Voita 2024, "Information Flow Routes", §2.2,
eq. 3, as in Meta's llm-transparency-tool): when a vector is a sum of parts, ``y = Σ_k z_k``, part ``k``'s share is
its proximity to the whole,

    prox(z_k, y) = max(0, ‖y‖₁ − ‖y − z_k‖₁),      c_k = prox(z_k, y) / Σ_m prox(z_m, y),

so a part close to the whole counts, one that points elsewhere counts 0, and the shares sum to 1. Distances are
Manhattan (ℓ1) as in both papers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .. import checks
from ..errors import InvalidArgumentError


def proximity(parts: torch.Tensor, whole: torch.Tensor, *, inplace: bool = False) -> torch.Tensor:
    """``max(0, ‖whole‖₁ − ‖whole − part‖₁)`` for each part.

    Args:
        parts: float32 ``(..., d)``: the parts.
        whole: float32, broadcastable to ``parts``: the whole each part belongs to (their sum).
        inplace: compute ``part − whole`` in ``parts`` itself (no second tensor of its size; ``parts`` is lost).

    Returns:
        float32 ``parts.shape[:-1]``, not normalised (see :func:`shares`).

    Raises:
        InvalidArgumentError: ``parts`` or ``whole`` not a floating tensor (``arg_instance``), not finite
            (``arg_not_finite``), or shapes that do not broadcast (``arg_same_shape``). The flow's own passes call
            :func:`proximity_unchecked`.
    """
    for name, value in (("parts", parts), ("whole", whole)):
        checks.instance(name, value, torch.Tensor, "a floating-point torch tensor")
        if not value.is_floating_point() or value.dim() < 1:
            raise InvalidArgumentError(f"{name} must be a floating-point tensor of at least 1 dimension.",
                                       code="arg_instance", name=name, detail="a floating-point torch tensor",
                                       value=f"{value.dtype} tensor of shape {tuple(value.shape)}")
        if not bool(torch.isfinite(value).all()):
            raise InvalidArgumentError(f"{name} holds NaN or infinite values.", code="arg_not_finite", name=name)
    try:
        torch.broadcast_shapes(parts.shape, whole.shape)
    except RuntimeError:
        raise InvalidArgumentError(f"whole {tuple(whole.shape)} does not broadcast to parts {tuple(parts.shape)}.",
                                   code="arg_same_shape", name="parts and whole", shape="(..., d)",
                                   first=str(tuple(parts.shape)), second=str(tuple(whole.shape))) from None
    return proximity_unchecked(parts, whole, inplace=inplace)


def proximity_unchecked(parts: torch.Tensor, whole: torch.Tensor, *, inplace: bool = False) -> torch.Tensor:
    """:func:`proximity` without its checks: the flow's own passes, on tensors they made."""
    norm = whole.abs().sum(-1)
    diff = parts.sub_(whole) if inplace else parts - whole
    return (norm - diff.abs_().sum(-1)).clamp_min(0)


def shares(prox: torch.Tensor) -> torch.Tensor:
    """Proximities ``(..., m)`` normalised to sum to 1 over the last axis (Ferrando & Voita 2024, eq. 3); a whole
    no part is close to (all 0: only when every part is 0) gives its first part 1."""
    total = prox.sum(-1, keepdim=True)
    out = prox / total.clamp_min(1e-30)
    empty = total[..., 0] <= 0
    if bool(empty.any()):
        out[empty] = 0.0
        out[..., 0][empty] = 1.0
    return out


@dataclass
class Route:
    """The graph of routes to one prediction (Ferrando & Voita 2024, §3: edges whose contribution is at least the
    threshold, followed back from the prediction's residual stream).

    Attributes:
        nodes: ``(kind, layer, position)``: ``("in", l, i)`` the residual stream entering layer ``l`` (``l`` =
            number of layers: the last stream), ``("mid", l, i)`` after its attention, ``("mlp", l, i)`` its MLP
            (with everything after the attention: cross-attention in an encoder-decoder's decoder).
        edges: ``(source node, target node, contribution, kind)``: contribution in 0..1 of the target; kind
            ``attention`` (a token read by the heads), ``residual`` or ``mlp``.
    """

    nodes: list[tuple[str, int, int]]
    edges: list[tuple[tuple[str, int, int], tuple[str, int, int], float, str]]


def route_graph(rows, mlp: list[np.ndarray], mlp_residual: list[np.ndarray], n_layers: int, position: int,
                threshold: float) -> Route:
    """Follow the contributions back from the last residual stream at ``position``, one layer at a time from the
    top.

    Args:
        rows: ``rows(layer, positions)`` -> float32 ``(len(positions), n_k + 2)``: each source token's share of
            each position's stream after the layer's attention, then the residual's and the biases' (asked once
            per layer, for the positions on the route only). mlp, mlp_residual: per layer ``(n,)``: the MLP's and
            the residual's shares of the layer's output.
        n_layers: the number of layers. position: the prediction's position. threshold: the smallest
            contribution kept (0..1).

    Returns:
        The :class:`Route` (nodes top layer first). The MLP node reads the stream after the attention at its
        position: that edge carries the MLP's own share.
    """
    nodes: list = [("in", n_layers, position)]
    edges: list = []
    above = {position}  # positions whose stream entering layer ``layer + 1`` is on the route
    for layer in range(n_layers - 1, -1, -1):
        mids = set()
        for i in sorted(above):
            dst = ("in", layer + 1, i)
            if mlp_residual[layer][i] >= threshold:
                edges.append((("mid", layer, i), dst, float(mlp_residual[layer][i]), "residual"))
                mids.add(i)
            if mlp[layer][i] >= threshold:
                nodes.append(("mlp", layer, i))
                edges.append((("mlp", layer, i), dst, float(mlp[layer][i]), "mlp"))
                edges.append((("mid", layer, i), ("mlp", layer, i), float(mlp[layer][i]), "mlp"))
                mids.add(i)
        nodes.extend(("mid", layer, i) for i in sorted(mids))
        above = set()
        order = sorted(mids)
        for i, shares_i in zip(order, rows(layer, order) if order else []):
            dst = ("mid", layer, i)
            if shares_i[-2] >= threshold:
                edges.append((("in", layer, i), dst, float(shares_i[-2]), "residual"))
                above.add(i)
            for j in np.flatnonzero(shares_i[:-2] >= threshold):
                edges.append((("in", layer, int(j)), dst, float(shares_i[j]), "attention"))
                above.add(int(j))
        nodes.extend(("in", layer, i) for i in sorted(above))
    return Route(nodes=nodes, edges=edges)
