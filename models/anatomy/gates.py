"""Where a head's gate goes on the interface path, so that switching a head off means zeroing its slice of the
output projection's input in every family (:func:`place_gates`, on the load-time probe pass)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from .. import checks
from ..capture import hooks
from ..capture.context import Hook, rerun
from .projections import interface_projection
from ..sites.site import GATE_MIXED, GATE_PROJ, Site
from .tensors import has_weight_matrix, linear_width, tolerance

if TYPE_CHECKING:
    from ..loading.model import LoadedModel


def place_gates(loaded: LoadedModel, inputs: dict, seen: dict, outputs: dict) -> None:
    """Interface path: find each site's output projection (``Site.o_proj``) and make switching a head off mean
    the same for every family, zeroing the head's slice of that projection's input (Michel et al. 2019, §2: the
    head mask on ``Att_h(x)`` inside ``W_O [Att_1; ...; Att_H]``).

    Read from the discovery pass (``seen``: ``name -> (input, output)`` of every module with a weight matrix;
    ``outputs``: ``(stack, layer) -> (batch, q, heads, head_dim)`` output of each site's first call); a second,
    gated pass runs only for sites where nothing takes the function's output as it is:

    * If a module inside the attention module's parent (the projection may sit beside the attention module:
      BERT's ``attention.output.dense``; JetMoE's is expert-routed, not a Linear) takes the attention
      function's output as it is (the same values, in any layout or row order), the gate stays on that output
      (``gate == "output"``, the common case: the same thing). ``o_proj`` is the linear map among them that
      takes it in the same layout (:func:`~models.anatomy.projections.interface_projection`), when there is one.
    * Else, if a linear map's input has head ``g``'s slice exactly 0 once head ``g`` is gated at the function
      (BitNet's sub-norm between them: RMSNorm of a zero slice is zero, but the other slices are rescaled),
      that map is ``o_proj`` and the gate moves to its input (``gate == "o_proj"``, a pre-hook), so the other
      heads' slices stay as they are.
    * Else the module mixes heads before its projection (DiffLlama's differential pairs): ``gate == "mixed"``,
      and switching a head off is refused.

    Modules called several times per pass (ALBERT's shared layer) keep the gate at the function. Replaces
    ``loaded.sites`` / ``loaded.site_index`` entries and installs the pre-hooks.
    """
    model = loaded.model
    names = {id(m): n for n, m in model.named_modules()}
    modules = dict(model.named_modules())
    tol = tolerance(loaded.dtype)
    single = {mid: site for mid, site in loaded.site_index.items() if isinstance(site, Site)}

    def block(mid) -> str:  # the module holding the attention module: its projection may sit beside it (BERT)
        return names[mid].rsplit(".", 1)[0] if "." in names[mid] else names[mid]

    found: dict[int, Site] = {}
    undecided: dict[int, Site] = {}
    for mid, site in single.items():
        out = outputs.get((site.stack, site.layer))
        if out is None:
            continue
        o_proj = interface_projection(site.name, out, seen, modules, tol)
        if o_proj is not None:
            found[mid] = replace(site, o_proj=o_proj)
            continue
        # the same values, in any order (JetMoE's experts take the rows sorted by expert): nothing in between
        values = out.detach().float().flatten().sort().values
        takers = [f"{block(mid)}.{sub}" for sub, m in modules[block(mid)].named_modules()
                  if sub and has_weight_matrix(m)]
        if not any(seen.get(n) is not None and seen[n][0].numel() == values.numel()
                   and torch.allclose(seen[n][0].float().flatten().sort().values, values, atol=1e-6) for n in takers):
            undecided[mid] = site
    if undecided:
        found.update(_gated_probe(loaded, inputs, undecided, seen, block))
    loaded.site_index = {mid: found.get(mid, site) for mid, site in loaded.site_index.items()}
    by_id = {id(single[mid]): new for mid, new in found.items()}
    loaded.sites = [by_id.get(id(site), site) for site in loaded.sites]
    hooks.install_projection_gates(model, [site for site in found.values() if site.gate == GATE_PROJ])


def _gated_probe(loaded: LoadedModel, inputs: dict, undecided: dict[int, Site], native: dict, block) -> dict[int, Site]:
    """One pass with head ``g`` of each undecided site gated at the function: the linear map whose input then
    has head ``g``'s slice exactly 0 (and did not before) is the site's projection, gated there; no such map:
    the heads are mixed. A pass that does not run changes nothing."""
    model = loaded.model
    modules = dict(model.named_modules())
    candidates = {mid: [f"{block(mid)}.{sub}" for sub, m in modules[block(mid)].named_modules()
                        if sub and (width := linear_width(m)) and width[0] % site.heads == 0]
                  for mid, site in undecided.items()}
    g = {mid: min(1, site.heads - 1) for mid, site in undecided.items()}
    gates = {}
    for mid, site in undecided.items():
        gate = torch.ones(site.heads)
        gate[g[mid]] = 0.0
        gates[(site.stack, site.layer)] = gate
    gated: dict[str, torch.Tensor] = {}
    wanted = {name for names in candidates.values() for name in names}

    def keep(name):
        def hook(_module, args) -> None:  # returns None: the input stays as it is
            if args and isinstance(args[0], torch.Tensor):
                gated.setdefault(name, args[0].detach())
        return hook

    keeping = [Hook(modules[name], keep(name), pre=True) for name in wanted]
    try:
        with checks.index_guard(), rerun(loaded, gates=gates, hooks=keeping):
            model(**inputs)  # index-guarded: a failing probe fails alike on a GPU (models.checks.index_guard)
    except Exception:  # noqa: BLE001 - a probe that does not run changes nothing
        return {}
    out = {}
    for mid, site in undecided.items():
        proj = None
        for name in candidates[mid]:
            x, x0 = gated.get(name), native.get(name, (None,))[0]
            if x is None or x0 is None or x.dim() < 2:
                continue
            d = x.shape[-1] // site.heads
            part, part0 = x[..., g[mid] * d:(g[mid] + 1) * d], x0[..., g[mid] * d:(g[mid] + 1) * d]
            if not part.any() and part0.any():
                proj = name
                break
        out[mid] = replace(site, o_proj=proj, gate=GATE_PROJ) if proj else replace(site, gate=GATE_MIXED)
    return out
