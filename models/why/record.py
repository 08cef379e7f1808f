"""The pass behind a score's explanation: an analysis's forward call run again (same inputs, heads off and masks)
up to the chosen layer's attention call, with what the decomposition needs recorded on the way (:func:`run_pass`).

Recorded, all float32 on the CPU, ``n`` positions, ``d`` hidden:

* the stream entering layer 0 and the modules that make it (every ``nn.Embedding`` called with ``(1, n, d)`` output
  between the end of the previous stack and this stack's first layer; a norm outside the layers whose output is that
  stream: BERT's embedding LayerNorm);
* per earlier layer (:class:`Earlier`): the output projection's input (the heads' outputs side by side, gated as the
  analysis gated them), the frozen norms that sit on the residual path, and the rest of the layer (its MLP, with a
  decoder's cross-attention) as one vector per position;
* for each target layer: every module's input and output inside its block, the stream entering it, and its
  attention call (query, key, value, mask and extra arguments: :attr:`models.capture.CaptureState.calls`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .. import capture
from ..anatomy.norms import FrozenNorm, freeze
from ..anatomy.residual import LayerLayout
from ..anatomy.tensors import first_tensor, input_tensor
from ..errors import ModelOutOfMemoryError
from .sides import is_norm, weight_of


@dataclass
class Earlier:
    """One layer before the explained one, as the decomposition reads it.

    Attributes:
        kind: ``pre``, ``sandwich`` or ``post`` (:class:`models.anatomy.residual.LayerLayout`).
        o_in: ``(n, heads · head_dim)``: the output projection's input (0 in a head switched off).
        w_o: ``(d, heads · head_dim)``; b_o: ``(d,)`` or None: the output projection.
        post: the frozen norm between the projection and the stream (sandwich, post), else None.
        after: post-LN: the frozen norm that makes the layer's output, else None.
        rest: ``(n, d)``: what the rest of the layer adds (pre/sandwich: ``x_out − x_mid``; post: the MLP's output
            ``ffn`` before ``after``).
    """

    kind: str
    o_in: torch.Tensor
    w_o: torch.Tensor
    b_o: torch.Tensor | None
    post: FrozenNorm | None
    after: FrozenNorm | None
    rest: torch.Tensor


@dataclass
class Pass:
    """What :func:`run_pass` recorded (see the module docstring)."""

    x0: torch.Tensor | None = None
    streams: dict = field(default_factory=dict)  # layer -> stream entering it (n, d)
    outs: dict = field(default_factory=dict)  # layer -> layer output (n, d)
    seen: dict = field(default_factory=dict)  # name -> (input, output) of recorded modules
    embeds: list = field(default_factory=list)  # (order, name, output (n, d))
    outside: list = field(default_factory=list)  # (order, name, input, output) of norms outside the layers
    firsts: dict = field(default_factory=dict)  # block name -> order of its first call
    calls: dict = field(default_factory=dict)  # (stack, layer) -> the attention call


def _cpu(t):
    return None if t is None else t.detach()[0].float().cpu()


def run_pass(loaded, run, layout, stack: str, targets: set[int], upto: int) -> Pass:
    """Run ``run`` (an analysis's :class:`models.analysis.store.Replay`, or a stand-in with ``call``, ``gates``,
    ``masks`` and ``chunk_bytes``) with the hooks that fill a :class:`Pass`, stopping after layer ``upto``'s
    attention call (unless the model is placed with ``device_map``).

    Args:
        loaded: the model. layout: its :func:`models.anatomy.residual.flow_layout`. stack: the stack explained.
        targets: layers whose blocks are recorded whole (and whose attention calls are kept).
        upto: the last layer the pass must reach.

    Raises:
        ModelOutOfMemoryError: the pass ran out of memory.
    """
    model = loaded.model
    modules = dict(model.named_modules())
    mine = {k[1]: v for k, v in layout.layers.items() if k[0] == stack}
    blocks = {v.block for v in layout.layers.values()}
    rec = Pass()
    order = [0]

    def tick() -> int:
        order[0] += 1
        return order[0]

    def keep(name):
        def hook(_m, args, kwargs, out):
            if name not in rec.seen:
                rec.seen[name] = (_cpu(input_tensor(args, kwargs)), _cpu(first_tensor(out)))
        return hook

    def enter(name, layer):
        def hook(_m, args, kwargs):
            rec.firsts.setdefault(name, tick())
            if layer is not None and layer not in rec.streams:
                rec.streams[layer] = _cpu(input_tensor(args, kwargs))
        return hook

    def leave(layer):
        def hook(_m, args, kwargs, out):
            if layer not in rec.outs:
                rec.outs[layer] = _cpu(first_tensor(out))
        return hook

    def embed(name):
        def hook(_m, args, kwargs, out):
            t = first_tensor(out)
            if t is not None and t.dim() == 3 and t.shape[0] == 1:
                rec.embeds.append((tick(), name, _cpu(t)))
        return hook

    def outside(name):
        def hook(_m, args, kwargs, out):
            rec.outside.append((tick(), name, _cpu(input_tensor(args, kwargs)), _cpu(first_tensor(out))))
        return hook

    def oom(exc):
        raise ModelOutOfMemoryError(f"Out of memory explaining an attention score on {loaded.device}; use a "
                                    "shorter text.", code="oom_recompute", device=str(loaded.device)) from exc

    def ours(module, fn, pre: bool = False) -> capture.Hook:  # this pass's calls only: the model is shared
        return capture.Hook(module, fn, pre=pre, with_kwargs=True, own=True)

    hooks = []
    for name in blocks:
        layer = next((lay for lay, v in mine.items() if v.block == name), None)
        hooks.append(ours(modules[name], enter(name, layer), pre=True))
        if layer is not None and layer < upto:
            hooks.append(ours(modules[name], leave(layer)))
    for layer, lay in mine.items():
        if layer < upto:
            for name in [lay.o_proj] + [m for m in (lay.post, lay.after) if m]:
                hooks.append(ours(modules[name], keep(name)))
        if layer in targets:
            for name, module in modules.items():
                if name.startswith(lay.block + "."):
                    hooks.append(ours(module, keep(name)))
    inner = tuple(b + "." for b in blocks)
    for name, module in modules.items():
        if isinstance(module, torch.nn.Embedding):
            hooks.append(ours(module, embed(name)))
        elif name and is_norm(module) and not name.startswith(inner):
            hooks.append(ours(module, outside(name)))
    call = {k: v.to(loaded.device) if isinstance(v, torch.Tensor) else v for k, v in run.call.items()}
    stop = not getattr(model, "hf_device_map", None)
    want = {(stack, layer) for layer in targets}
    with capture.rerun(loaded, gates=run.gates, masks=run.masks, hooks=hooks, oom=oom, want=want,
                       stop_after=stop and upto in targets, chunk_bytes=run.chunk_bytes, fused=loaded.sdpa_ok) as state:
        state.calls = {}
        try:
            model(**call)
        except capture.StopForward:
            pass
        rec.calls = dict(state.calls)
    return rec


def earlier_layer(rec: Pass, lay: LayerLayout, layer: int, modules: dict, tol: float) -> Earlier | str:
    """Layer ``layer``'s :class:`Earlier` from the pass, or the reason key (:data:`models.why.REASONS`) why it
    cannot be read (a norm that is not per-position affine, a post-LN residual path through more than two norms)."""
    o_in, o = rec.seen[lay.o_proj]
    w_o, b_o = weight_of(modules[lay.o_proj])
    x, x_out = rec.streams[layer], rec.outs[layer]
    post = after = None
    if lay.kind in ("sandwich", "post"):
        post = freeze(modules[lay.post], *rec.seen[lay.post], atol=tol)
        if post is None:
            return "norm"
    if lay.kind == "pre":
        rest = x_out - (x + o)
    elif lay.kind == "sandwich":
        rest = x_out - (x + rec.seen[lay.post][1])
    else:
        if lay.after is None or not lay.after_reads_mid:
            return "post_cross"
        after = freeze(modules[lay.after], *rec.seen[lay.after], atol=tol)
        if after is None:
            return "norm"
        rest = rec.seen[lay.after][0] - rec.seen[lay.post][1]
    return Earlier(lay.kind, o_in, w_o, b_o, post, after, rest)
