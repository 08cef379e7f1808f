"""Where a loaded model's attention is, and how each head is switched off: the load-time probe.

One probe forward pass finds every attention module (:func:`discover_sites`): on the interface path the
modules that call transformers' ``AttentionInterface`` (Dikkat's function records their weights), with each
layer's output projection and gate (:mod:`models.anatomy.gates`); on the fallback path the model's own eager
``output_attentions``, checked to be token-by-token probability maps (:mod:`models.sites.maps`), with each
layer's output projection proven (:mod:`models.anatomy.projections`) or the layer's softmax found
(:mod:`models.capture.softmax`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, cast

import torch

from ..capture import softmax
from ..capture.hooks import counting_every_module, install_call_counters, install_projection_gates
from ..capture.state import probing
from ..errors import NoAttentionWeightsError
from .gates import place_gates
from ..sites.inputs import probe_inputs
from ..sites.maps import attention_tuples, check_maps, rows_sum_to_one
from .projections import Recorder, find_out_projs, layer_linears
from .whole_head import incomplete_softmax_gates
from ..sites.site import GATE_NONE, GATE_PROJ, GATE_SOFTMAX, Site, layer_of, stack_of
from .tensors import has_weight_matrix

if TYPE_CHECKING:
    from ..loading.model import LoadedModel


def discover_sites(loaded: LoadedModel):
    """Probe the model once and fill ``loaded.sites`` / ``site_index`` / ``capture_path``: every attention
    layer, its output projection and where its heads are gated (:class:`~models.sites.site.Site`).

    Interface path: one pass lists every call of :func:`~models.capture.interface.dikkat_attention` (with each
    module's forward calls counted, so a module called at several depths is told from two attention calls in
    one forward call) and records every projection's input, from which :func:`~models.anatomy.gates.place_gates`
    places the gates; a second pass only where something lies between the attention function and the projection
    (BitNet, DiffLlama). Fallback path (no call routed through the interface, or a model loaded eager): one eager
    pass with ``output_attentions`` that also records every linear map of the layers, from which the output
    projections are proven (:func:`~models.anatomy.projections.find_out_projs`).

    Returns:
        the probe pass' model output (an encoder-decoder's encoder output is read from it again by
        :func:`~models.anatomy.decoder.decoder_call`).

    Raises:
        NoAttentionWeightsError: no attention module routes through the interface and the model
            returns no attention weights with ``output_attentions=True`` either; or what it has is not a
            token-by-token map (self-attention with extra keys, layers of a stack with different head
            counts, fallback tensors that are not probability maps: :func:`~models.sites.maps.check_maps`).
    """
    inputs = probe_inputs(loaded)
    if getattr(loaded.model.config, "_attn_implementation", None) != "eager":  # loaded eager: nothing routes
        modules = {n: m for n, m in loaded.model.named_modules() if n and has_weight_matrix(m)}
        with torch.no_grad(), counting_every_module(), probing() as state, Recorder(modules) as seen:
            outputs = loaded.model(**inputs)
        if state.probe:
            _interface_sites(loaded, inputs, state.probe, seen.seen)
            return outputs
    return _fallback_sites(loaded, inputs)


def _interface_sites(loaded: LoadedModel, inputs: dict, calls_made: list, seen: dict) -> None:
    """The interface path's sites from the probe pass' attention calls ``(module, heads, q_len, k_len,
    output)`` in call order: one site per call, numbered by depth within its stack (a hybrid model's attention
    layers are 0 .. n - 1 with their own block index kept as ``index``; a module called k times is k layers)."""
    model = loaded.model
    names = {id(m): n for n, m in model.named_modules()}
    install_call_counters(dict.fromkeys(m for m, *_ in calls_made))
    calls: dict[int, int] = {}  # id(module) -> calls per pass
    for module, *_ in calls_made:
        calls[id(module)] = calls.get(id(module), 0) + 1
    loaded.capture_path = "interface"
    depth: dict[str, int] = {}
    per_module: dict[int, list[Site]] = {}
    outputs: dict[tuple[str, int], torch.Tensor] = {}
    for module, heads, q_len, k_len, out in calls_made:
        mid = id(module)
        name = names.get(mid, type(module).__name__)
        stack = stack_of(name, loaded.family)
        layer = depth.get(stack, 0)
        depth[stack] = layer + 1
        if stack != "cross" and q_len != k_len:
            raise NoAttentionWeightsError(
                f"Model '{loaded.name}' ({model.config.model_type}): {name} attends {k_len} keys from {q_len} "
                "tokens (it adds keys of its own, e.g. compressed or memory slots), so its weights are not a "
                "token-by-token map; Dikkat cannot show this architecture's attention.",
                code="extra_key_slots", model=loaded.name, model_type=model.config.model_type, module=name,
                keys=k_len, tokens=q_len
            )
        index = layer_of(name) if calls[mid] == 1 else None
        per_module.setdefault(mid, []).append(Site(
            stack, layer, heads, name, index=None if index == layer else index,
            sink=isinstance(getattr(module, "sinks", None), torch.Tensor)))
        outputs.setdefault((stack, layer), out)
    for stack in depth:
        counts = sorted({s.heads for sites in per_module.values() for s in sites if s.stack == stack})
        if len(counts) > 1:
            raise NoAttentionWeightsError(
                f"Model '{loaded.name}' ({model.config.model_type}) has {stack} layers with different numbers of "
                f"query heads ({', '.join(map(str, counts))}); Dikkat shows a stack as layers x heads maps of one "
                "size and cannot show this architecture's attention yet.",
                code="uneven_head_counts", model=loaded.name, model_type=model.config.model_type, stack=stack,
                counts=", ".join(map(str, counts))
            )
    # LoadedModel.site_index is annotated ``dict[int, Site]`` though its docstring (and the capture) take a tuple
    # of sites for a module called several times per pass
    loaded.site_index = cast("dict[int, Site]", {mid: sites[0] if len(sites) == 1 else tuple(sites)
                                                 for mid, sites in per_module.items()})
    sites = [s for sites in per_module.values() for s in sites]
    if loaded.family == "encoder-decoder" and "encoder" not in depth:
        sites += _encoder_from_outputs(loaded, inputs)
    loaded.sites = sorted(sites, key=lambda s: (("encoder", "decoder", "cross").index(s.stack), s.layer))
    place_gates(loaded, inputs, seen, outputs)


def _fallback_sites(loaded: LoadedModel, inputs: dict):
    """The fallback path's sites: eager ``output_attentions`` checked to be maps, each layer's output
    projection proven on the same pass, else its softmax found (:mod:`models.capture.softmax`)."""
    model = loaded.model
    loaded.capture_path = "fallback"
    try:
        model.set_attn_implementation("eager")
    except Exception:  # older/odd classes: the config flag is what eager code paths read
        model.config._attn_implementation = "eager"
    with torch.no_grad(), Recorder(layer_linears(model)) as seen:
        outputs = model(**inputs, output_attentions=True)
    stacks = attention_tuples(outputs, loaded.family, model.config)
    if not stacks:
        raise NoAttentionWeightsError(
            f"Model '{loaded.name}' ({model.config.model_type}) returns no attention weights: its architecture "
            "either has no softmax attention (e.g. state-space models) or cannot expose it.",
            code="no_attention_weights", model=loaded.name, model_type=model.config.model_type
        )
    stacks, read_at = _scores_to_weights(loaded, stacks, inputs)
    check_maps(loaded, stacks, inputs)
    out_projs = find_out_projs(model, stacks, seen.seen)
    # a stack with a layer whose output projection was not proven: its heads are switched off at the softmax
    # where one module per layer computes that layer's weights (models.capture.softmax)
    unproven = {stack for stack, tensors in stacks.items()
                if any((stack, i) not in out_projs for i in range(len(tensors)))}
    at_softmax = softmax.softmax_modules(loaded, inputs, unproven, scores=set(read_at)) if unproven else {}
    sites = []
    for stack, tensors in stacks.items():
        for layer, w in enumerate(tensors):
            o_proj = out_projs.get((stack, layer))
            gate = GATE_PROJ if o_proj else GATE_SOFTMAX if stack in at_softmax else GATE_NONE
            sites.append(Site(stack, layer, int(w.shape[1]), name=f"{stack}.{layer}", o_proj=o_proj, gate=gate,
                              read_at_softmax=stack in read_at))
    loaded.sites = sites
    install_projection_gates(model, sites)
    for site in sites:
        if site.gate == GATE_SOFTMAX or site.read_at_softmax:
            modules = read_at if site.read_at_softmax else at_softmax
            softmax.install_softmax_hooks(site, modules[site.stack][site.layer])
    # a layer whose heads are not wholly switched off at the softmax (Nyströmformer's convolution of the values):
    # switched off where they meet instead, and no longer at the softmax
    moved = incomplete_softmax_gates(loaded, inputs, sites, seen.seen)
    if moved:
        loaded.sites = sites = [replace(s, o_proj=moved[(s.stack, s.layer)], gate=GATE_PROJ)
                                if (s.stack, s.layer) in moved else s for s in sites]
        install_projection_gates(model, [s for s in sites if (s.stack, s.layer) in moved])
        for site in sites:
            if (site.stack, site.layer) in moved:
                modules = read_at if site.read_at_softmax else at_softmax
                modules[site.stack][site.layer]._dikkat_softmax_site = site
    return outputs


def _scores_to_weights(loaded: LoadedModel, stacks: dict[str, tuple], inputs: dict) -> tuple[dict, dict]:
    """Some models return the attention scores before the softmax as their ``attentions`` (ProphetNet's
    encoder, SqueezeBERT: rows that do not sum to 1). Where one module per layer computes exactly the softmax
    of those scores (:func:`models.capture.softmax.softmax_modules`), the weights are that softmax, read there
    in every analysis.

    Returns:
        ``stacks`` with such stacks' tensors replaced by their softmax, and ``stack -> [module per layer]`` of
        the stacks read at the softmax.
    """
    def sums_to_one(t) -> bool:
        return not isinstance(t, torch.Tensor) or t.dim() != 4 or rows_sum_to_one(t)  # else check_maps says why

    suspects = {stack for stack, tensors in stacks.items() if not all(sums_to_one(t) for t in tensors)}
    read_at = softmax.softmax_modules(loaded, inputs, suspects, scores=suspects) if suspects else {}
    out = {stack: tuple(torch.softmax(t.float(), -1).to(t.dtype) for t in tensors) if stack in read_at else tensors
           for stack, tensors in stacks.items()}
    return out, read_at


def _encoder_from_outputs(loaded: LoadedModel, inputs: dict) -> list[Site]:
    """An encoder-decoder whose decoder routes through the interface but whose encoder does not (LongT5,
    BigBird-Pegasus, Pegasus-X): the encoder's sites when its eager ``output_attentions`` are token-by-token
    maps (:func:`~models.sites.maps.check_maps`), read in the same forward pass (``fallback_stacks``); else none,
    with the reason in ``missing_stacks``."""
    with torch.no_grad(), Recorder(layer_linears(loaded.model)) as seen:
        outputs = loaded.model(**inputs, output_attentions=True)
    tensors = attention_tuples(outputs, loaded.family, loaded.model.config).get("encoder")
    why = None
    if not tensors:
        why = f"Model '{loaded.name}' ({loaded.model.config.model_type}) returns no encoder attention weights."
    else:
        try:
            check_maps(loaded, {"encoder": tensors}, inputs)
        except NoAttentionWeightsError as exc:
            why = str(exc)
    if why:
        loaded.missing_stacks["encoder"] = (
            f"{why} Its encoder does not route through transformers' AttentionInterface either, so the encoder "
            "is not shown; the decoder and cross-attention are.")
        return []
    assert tensors is not None  # a missing or empty tuple set ``why`` above
    loaded.fallback_stacks = ("encoder",)
    out_projs = find_out_projs(loaded.model, {"encoder": tensors}, seen.seen)  # proven, or none
    sites = [Site("encoder", layer, int(w.shape[1]), name=f"encoder.{layer}", o_proj=out_projs.get(("encoder", layer)),
                  gate=GATE_PROJ if ("encoder", layer) in out_projs else GATE_NONE)
             for layer, w in enumerate(tensors)]
    install_projection_gates(loaded.model, sites)
    return sites
