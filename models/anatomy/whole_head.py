"""Whether switching a head off at its softmax switches all of the head off (issue 47 point 5).

On the fallback path a layer whose output projection is not proven (:func:`models.anatomy.projections.find_out_projs`
finds none whose input is ``A_h · V_h`` side by side) has its heads switched off at the softmax: the head's weights
times 0 (:mod:`models.capture.softmax`). That removes ``A_h · V_h``, and all of the head only when nothing else of
the head reaches the output. Nyströmformer (Xiong et al. 2021, §3.3 and the reference code's ``conv_kernel_size``)
adds a depthwise convolution of each head's values to its output, beside the weights: switched off at the softmax,
that part stayed on (the architecture sweep of issue 47 found the logits 0.002 away from the head's output zeroed).

The proof, per layer gated at the softmax, on the load-time probe input: one pass with the layer's head 0 switched
off there, the inputs of the layer's linear maps recorded. The map whose input changes only in head 0's slice (its
width over the heads) is where the layer's heads meet. If that slice is not all zero, part of the head reaches the
output beside the weights, and the layer's heads are switched off at that map instead (its input's slice zeroed:
Michel et al. 2019, the head's whole output), which is then the layer's proven output projection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..capture.context import rerun
from ..sites.site import GATE_SOFTMAX, Site
from .projections import Recorder, layer_linears

if TYPE_CHECKING:
    from ..loading.model import LoadedModel

TOL = 1e-6  # relative to the input's largest value: float32 sums of the same numbers in the same order


def incomplete_softmax_gates(loaded: LoadedModel, inputs: dict, sites: list[Site],
                             seen: dict[str, tuple[torch.Tensor, torch.Tensor | None]]) -> dict[tuple[str, int], str]:
    """The layers gated at the softmax whose heads are not wholly switched off there (module docstring).

    Args:
        loaded: the model, its softmax hooks installed (:func:`models.capture.softmax.install_softmax_hooks`).
        inputs: the load-time probe pass's inputs (batch 1). sites: the fallback path's sites.
        seen: ``name -> (input, output)`` of the linear maps on the probe pass (:class:`Recorder`), nothing
            switched off.

    Returns:
        ``(stack, layer) -> dotted name`` of the map where the heads meet, for each such layer: switch them off there.
    """
    linears = layer_linears(loaded.model)
    out: dict[tuple[str, int], str] = {}
    for site in sites:
        if site.gate != GATE_SOFTMAX or site.heads < 2:
            continue
        gate = torch.ones(site.heads, device=loaded.device)
        gate[0] = 0.0
        with Recorder(linears) as rec, rerun(loaded, gates={(site.stack, site.layer): gate}):
            loaded.model(**inputs)
        name = _meeting(seen, rec.seen, site.heads)
        if name is not None:
            out[(site.stack, site.layer)] = name
    return out


def _meeting(before: dict, after: dict, heads: int) -> str | None:
    """The first map whose input changed in head 0's slice only (``width / heads`` columns) and whose slice still
    holds something with the head switched off; None when no map's input changed so, or the slice is all zero (the
    softmax gate removed the whole head)."""
    for name, (x_after, _) in after.items():
        if name not in before or before[name][0].shape != x_after.shape or x_after.dim() < 2:
            continue
        x_before = before[name][0].float()
        x_after = x_after.float()
        width = x_after.shape[-1]
        if width % heads:
            continue
        d = width // heads
        scale = max(1.0, float(x_before.abs().max()))
        changed = ((x_after - x_before).abs() > TOL * scale).flatten(0, -2).any(dim=0)
        if not changed[:d].any() or changed[d:].any():
            continue
        last = int(changed.nonzero().max()) + 1  # the head's own columns (ConvBERT: fewer than width / heads)
        if bool((x_after[..., :last].abs() <= TOL * scale).all()):
            return None  # the whole head is gone at the softmax
        return name if last == d else None  # a slice that is not the head's whole width: not proven
    return None
