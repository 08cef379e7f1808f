"""Where a head's gate goes on the interface path, so that switching a head off means zeroing its slice of the
output projection's input in every family (:func:`gate_points`, a load-time probe)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from . import capture

if TYPE_CHECKING:
    from .loading import LoadedModel


def linear_width(module) -> tuple[int, int] | None:
    """``(in, out)`` features of a ``nn.Linear`` or transformers' ``Conv1D`` (GPT-2 style), else None."""
    if isinstance(module, torch.nn.Linear):
        return module.in_features, module.out_features
    weight = getattr(module, "weight", None)
    if type(module).__name__ == "Conv1D" and isinstance(weight, torch.Tensor) and weight.dim() == 2:
        return int(weight.shape[0]), int(weight.shape[1])
    return None


def gate_points(loaded: LoadedModel, inputs: dict) -> None:
    """Interface path: make switching a head off mean the same for every family, zeroing the head's slice of
    its output projection's input (Michel et al. 2019, §2: the head mask on ``Att_h(x)`` inside
    ``W_O [Att_1; ...; Att_H]``), found and proven by up to two probe passes.

    * If a module inside the attention module's parent (the projection may sit beside the attention module:
      BERT's ``attention.output.dense``; JetMoE's is expert-routed, not a Linear) takes the attention
      function's output as it is (the same values, in any layout or row order), the gate stays on that output
      (the common case: the same thing).
    * Else, if a linear map's input has head ``g``'s slice exactly 0 once head ``g`` is gated at the function
      (BitNet's sub-norm between them: RMSNorm of a zero slice is zero, but the other slices are rescaled),
      the site's gate moves to that map's input (``Site.out_proj``, a pre-hook), so the other heads' slices
      stay as they are.
    * Else the module mixes heads before its projection (DiffLlama's differential pairs): ``mixed_heads``,
      and switching a head off is refused.

    Modules called several times per pass (ALBERT's shared layer) keep the gate at the function. Replaces
    ``loaded.sites`` / ``loaded.site_index`` entries and installs the pre-hooks.
    """
    model = loaded.model
    names = {id(m): n for n, m in model.named_modules()}
    single = {mid: site for mid, site in loaded.site_index.items() if isinstance(site, capture.Site)}
    all_modules = dict(model.named_modules())

    def block(mid) -> str:  # the module holding the attention module: its projection may sit beside it (BERT)
        return names[mid].rsplit(".", 1)[0] if "." in names[mid] else names[mid]

    candidates = {mid: [f"{block(mid)}.{sub}" for sub, m in all_modules[block(mid)].named_modules()
                        if sub and linear_width(m) and linear_width(m)[0] % single[mid].heads == 0]
                  for mid in single}
    # any projection (a module with a weight matrix: JetMoE's expert-routed one is no Linear) that may take the
    # function's output as it is; a norm (a weight vector) taking it is something in between
    takers = {mid: [f"{block(mid)}.{sub}" for sub, m in all_modules[block(mid)].named_modules()
                    if sub and isinstance(getattr(m, "weight", None), torch.Tensor) and m.weight.dim() >= 2]
              for mid in candidates}
    wanted = {name for names_ in takers.values() for name in names_}
    if not wanted:
        return

    def run(gates: dict) -> tuple[dict, dict]:
        seen: dict[str, torch.Tensor] = {}

        def keep(name):
            def hook(_module, args) -> None:  # returns None: the input stays as it is
                if args and isinstance(args[0], torch.Tensor):
                    seen.setdefault(name, args[0].detach())
            return hook

        hooks = [all_modules[name].register_forward_pre_hook(keep(name)) for name in wanted]
        try:
            with torch.no_grad(), capture.capture(loaded.site_index, record=False, gates=gates) as state:
                state.outputs = {}
                model(**inputs)
        finally:
            for hook in hooks:
                hook.remove()
        return seen, state.outputs

    try:
        native, outputs = run({})
    except Exception:  # noqa: BLE001 - a probe that does not run changes nothing
        return
    undecided = {}
    for mid, site in single.items():
        out = outputs.get((site.stack, site.layer))
        if out is None or mid not in candidates:
            continue
        # the same values, in any order (JetMoE's experts take the rows sorted by expert): nothing in between
        values = out.detach().float().flatten().sort().values
        direct = any(native.get(n) is not None and native[n].numel() == values.numel()
                     and torch.allclose(native[n].float().flatten().sort().values, values, atol=1e-6)
                     for n in takers[mid])
        if not direct:
            undecided[mid] = site
    if not undecided:
        return
    g = {mid: min(1, site.heads - 1) for mid, site in undecided.items()}
    gates = {}
    for mid, site in undecided.items():
        gate = torch.ones(site.heads)
        gate[g[mid]] = 0.0
        gates[(site.stack, site.layer)] = gate
    try:
        gated, _ = run(gates)
    except Exception:  # noqa: BLE001
        return
    replaced = {}
    for mid, site in undecided.items():
        found = None
        for name in candidates[mid]:
            x, x0 = gated.get(name), native.get(name)
            if x is None or x0 is None or x.dim() < 2:
                continue
            d = x.shape[-1] // site.heads
            part, part0 = x[..., g[mid] * d:(g[mid] + 1) * d], x0[..., g[mid] * d:(g[mid] + 1) * d]
            if not part.any() and part0.any():
                found = name
                break
        replaced[mid] = replace(site, out_proj=found) if found else replace(site, mixed_heads=True)
    loaded.site_index = {mid: replaced.get(mid, site) for mid, site in loaded.site_index.items()}
    by_id = {id(site): new for mid, new in replaced.items() for site in [single[mid]]}
    loaded.sites = [by_id.get(id(site), site) for site in loaded.sites]
    capture.install_fallback_hooks(model, [site for site in replaced.values() if site.out_proj])
