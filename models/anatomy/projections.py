"""Where a layer's output projection ``W_O`` is: proven on the load-time probe pass, from the modules' own
inputs and outputs, never from a table of class names.

* Fallback path (:func:`find_out_projs`): the linear map whose input is ``A_h · V_h`` side by side for the
  layer's returned weights.
* Interface path (:func:`interface_projection`): the linear map beside the attention module whose input is the
  attention function's output as it is.

:class:`Recorder` keeps the first input and output of chosen modules on that one pass.
"""

from __future__ import annotations

import re

import torch

from .tensors import close, first_tensor, linear_width


class Recorder:
    """Forward hooks that keep the first input and output of each named module on the passes run inside the
    ``with`` block: ``seen[name] = (input, first output tensor or None)``, detached.

    Only for a model that no other thread runs yet (the load-time probes run before the model is shared)."""

    def __init__(self, modules: dict[str, torch.nn.Module]):
        self.modules = modules
        self.seen: dict[str, tuple[torch.Tensor, torch.Tensor | None]] = {}
        self._hooks: list = []

    def _keep(self, name: str):
        def hook(_module, args, out) -> None:  # returns None: the output stays as it is
            if args and isinstance(args[0], torch.Tensor) and name not in self.seen:
                found = first_tensor(out)
                self.seen[name] = (args[0].detach(), found.detach() if found is not None else None)
        return hook

    def __enter__(self) -> Recorder:
        self._hooks = [module.register_forward_hook(self._keep(name)) for name, module in self.modules.items()]
        return self

    def __exit__(self, *exc) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []


def interface_projection(site_name: str, out: torch.Tensor, seen: dict, modules: dict, tol: float) -> str | None:
    """Interface path: the output projection of the attention module ``site_name``: a linear map inside the
    module holding it (the projection may sit beside the attention module: BERT's ``attention.output.dense``)
    whose input on the probe pass is the attention function's output ``out`` ``(batch, query_len, heads,
    head_dim)`` as it is, ``(batch, query_len, heads · head_dim)``, within ``tol`` (:func:`close`); None when
    there is none (an expert-routed projection, a norm in between, heads mixed)."""
    parent = site_name.rsplit(".", 1)[0]
    flat = out.reshape(out.shape[0], out.shape[1], -1)
    return next((n for n in seen if n.startswith(parent + ".") and linear_width(modules[n])
                 and close(seen[n][0], flat, tol)), None)


def find_out_projs(model, stacks: dict[str, tuple], seen: dict) -> dict[tuple[str, int], str]:
    """Fallback path: for each layer of each stack, the output projection whose input holds the heads'
    outputs side by side, found on the probe pass and proven on it.

    The probe pass recorded the input and output of every linear map in the blocks of the model's layer lists
    (:func:`layer_linears`, :class:`Recorder`). A map ``o`` is a layer's output projection when, for some
    linear map ``v`` of the same block (or a third of a fused query/key/value map), ``o``'s input equals
    ``A_h · V_h`` for every head ``h`` (``A_h``: the layer's returned weights, ``V_h``: head ``h``'s slice of
    ``v``'s output; Vaswani et al. 2017, eq. 1-2) within 1e-4. Zeroing head ``h``'s slice of that input then
    removes exactly that head's output. A stack is looked for in the layer lists as long as it (an
    encoder-decoder's decoder block holds both its self-attention and its cross-attention: each stack's own
    weights pick the right pair). A layer with no such pair (a norm between attention and projection, an
    interleaved fused map) gets none, and its heads cannot be switched off there.

    Args:
        model: the model. stacks: ``stack -> per-layer (batch, heads, q, k)`` weights of the probe pass.
        seen: ``name -> (input, output)`` of the linear maps on that pass.

    Returns:
        ``(stack, layer) -> dotted name of the output projection`` for the layers where one was proven.
    """
    lists = _layer_lists(model)
    seen = {name: io for name, io in seen.items() if io[1] is not None}
    found: dict[tuple[str, int], str] = {}
    for stack, weights in stacks.items():
        candidates = [item for item in lists if item[1] == len(weights)] or lists[:1]
        for list_name, length in candidates:
            mine = {}
            for layer in range(min(len(weights), length)):
                block = f"{list_name}.{layer}."
                name = _out_proj_of(weights[layer][0].float(), [n for n in seen if n.startswith(block)], seen)
                if name:
                    mine[(stack, layer)] = name
            if mine:
                found.update(mine)
                break
    return found


def layer_linears(model) -> dict[str, torch.nn.Module]:
    """``name -> module`` of every linear map inside a block of the model's layer lists (what
    :func:`find_out_projs` looks among)."""
    prefixes = tuple(f"{name}.{i}." for name, length in _layer_lists(model) for i in range(length))
    return {name: module for name, module in model.named_modules()
            if name.startswith(prefixes) and linear_width(module)}


def _out_proj_of(a: torch.Tensor, names: list[str], seen: dict) -> str | None:
    """The map among ``names`` whose input is ``A_h · V_h`` side by side for the weights ``a`` (heads, q, k),
    with ``V`` a slice of another map's output (see :func:`find_out_projs`); None if there is none."""
    heads, q_len, k_len = a.shape
    for o_name in names:
        # the first q_len rows: Longformer pads the text to a multiple of its window inside the model
        x = _batch_first(seen[o_name][0])
        width = x.shape[-1]
        if x.dim() != 3 or x.shape[1] < q_len or width % heads:
            continue
        x = x[:, :q_len]
        d = width // heads
        for v_name in names:
            v_out = _batch_first(seen[v_name][1])
            if v_out.dim() != 3 or v_out.shape[1] < k_len or v_out.shape[-1] % d:
                continue
            v_out = v_out[:, :k_len]
            for v in _value_layouts(v_out[0].float(), heads, d):
                want = torch.einsum("hqk,khd->qhd", a, v).reshape(q_len, width)
                if torch.allclose(want, x[0].float(), atol=1e-4, rtol=1e-3):
                    return o_name
    return None


def _batch_first(t: torch.Tensor) -> torch.Tensor:
    """A probe tensor (batch 1) as ``(1, tokens, width)``: Longformer runs its projections on ``(tokens, 1,
    width)``."""
    return t.transpose(0, 1) if t.dim() == 3 and t.shape[0] != 1 and t.shape[1] == 1 else t


def _value_layouts(out: torch.Tensor, heads: int, d: int):
    """Candidate per-head values ``(keys, heads, d)`` inside a linear map's output ``(keys, width)``: a
    contiguous block of ``heads · d`` columns (separate value map, or a third of a fused query/key/value map),
    head-interleaved ``(heads, parts, d)`` groups (BLOOM, DeBERTa), or one ``d``-wide block shared by every
    head (multi-query attention: Falcon)."""
    keys, width = out.shape
    full = heads * d
    if width % full == 0:
        for j in range(width // full):
            yield out[:, j * full:(j + 1) * full].reshape(keys, heads, d)
        parts = width // full
        if parts > 1:
            grouped = out.reshape(keys, heads, parts, d)
            for j in range(parts):
                yield grouped[:, :, j]
    for j in range(width // d):
        yield out[:, j * d:(j + 1) * d][:, None, :].expand(keys, heads, d)


def _layer_lists(model) -> list[tuple[str, int]]:
    """``(dotted name, length)`` of each ModuleList of transformer layers, in the model's order (XLM and
    Flaubert keep each layer's attention in a list of its own, ``attentions``, beside ``ffns``)."""
    return [(name, len(module)) for name, module in model.named_modules()
            if isinstance(module, torch.nn.ModuleList) and len(module)
            and re.search(r"(^|\.)(h|layers?|blocks?|attentions)$", name)]
