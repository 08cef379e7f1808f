"""Forward hooks the capture installs on a model once, at load time: head gates on an output projection's
input (:func:`install_projection_gates`) and per-module forward-call counters (:func:`install_call_counters`).
Each hook reads the calling context's :class:`~models.capture.state.CaptureState` and does nothing outside a
:func:`~models.capture.state.capture` context."""

from __future__ import annotations

from contextlib import contextmanager
from collections.abc import Iterator

from torch import nn

from ..sites.site import GATE_PROJ, Site
from .state import _STATE, per_head


def _projection_pre_hook(site: Site):
    """Forward pre-hook for ``site``'s output projection (``Site.o_proj``, gated there: ``Site.gate ==
    "o_proj"``): multiplies head ``h``'s slice ``[h*d, (h+1)*d)`` of the input ``(batch, query_len,
    heads*head_dim)`` by its gate (Michel et al. 2019, §2: the mask on ``Att_h(x)`` inside
    ``W_O [Att_1; ...; Att_H]``)."""

    def hook(module, args):
        state = _STATE.get()
        if state is None:
            return None
        gate = state.gates.get((site.stack, site.layer))
        if gate is None:
            return None
        hidden = args[0]
        b, q, width = hidden.shape
        g = gate.to(device=hidden.device, dtype=hidden.dtype)
        heads = hidden.view(b, q, site.heads, width // site.heads) * per_head(g, b)[:, None, :, None]
        return (heads.view(b, q, width),) + tuple(args[1:])

    return hook


def install_projection_gates(model: nn.Module, sites: list[Site]) -> None:
    """Register :func:`_projection_pre_hook` on the output projection of each site gated there (once, at load
    time)."""
    modules = dict(model.named_modules())
    for site in sites:
        if site.gate == GATE_PROJ and site.o_proj in modules:
            modules[site.o_proj].register_forward_pre_hook(_projection_pre_hook(site))


def _count_forward(module, args) -> None:
    state = _STATE.get()
    if state is not None:
        state.forwards[id(module)] = state.forwards.get(id(module), 0) + 1


def install_call_counters(modules) -> None:
    """Register a forward pre-hook on each attention module (once per module) that counts its forward calls
    in the current :class:`CaptureState` (``forwards``): how a module called at several depths (ALBERT's
    shared layer) gets one site per call, and a second attention call inside one forward call is told
    apart."""
    for module in modules:
        if not getattr(module, "_dikkat_counted", False):
            module.register_forward_pre_hook(_count_forward)
            module._dikkat_counted = True


def _count_in_probe(module, args) -> None:
    state = _STATE.get()
    if state is not None and state.probe is not None:  # a probing context only: never another session's pass
        state.forwards[id(module)] = state.forwards.get(id(module), 0) + 1


@contextmanager
def counting_every_module() -> Iterator[None]:
    """For the load-time probe: count the forward calls of every module (a global forward pre-hook, which
    counts only in a :func:`~models.capture.state.probing` context), so the one probe pass
    already tells a module called at several depths from two attention calls in one forward call, before the
    attention modules are known and :func:`install_call_counters` is run on them."""
    from torch.nn.modules.module import register_module_forward_pre_hook

    handle = register_module_forward_pre_hook(_count_in_probe)
    try:
        yield
    finally:
        handle.remove()
