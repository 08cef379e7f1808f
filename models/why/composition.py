"""Q-, K- and V-composition between heads of different layers, from the weights (Elhage et al. 2021, "A Mathematical
Framework for Transformer Circuits", section "Three kinds of composition" and its figure of composition scores).

With ``W_QK^h = R_Q^hᵀ R_K^h`` (``d × d``: the score is ``x_iᵀ W_QK x_j``) and ``W_OV^h = U^h R_V^h`` (``d × d``: what
the head writes for what it reads), the composition of a reading head ``h2`` (layer ``l2``) with a writing head ``h1``
(layer ``l1 < l2``) is, with ``‖·‖`` the Frobenius norm::

    Q:  ‖W_QK^{h2 T} W_OV^{h1}‖ / (‖W_QK^{h2}‖ ‖W_OV^{h1}‖)
    K:  ‖W_QK^{h2}   W_OV^{h1}‖ / (‖W_QK^{h2}‖ ‖W_OV^{h1}‖)
    V:  ‖W_OV^{h2}   W_OV^{h1}‖ / (‖W_OV^{h2}‖ ‖W_OV^{h1}‖)

each in [0, 1] (1 when the writer's output space lies in what the reader reads most). The matrices are the chains
:mod:`models.why.sides` proves, taken as linear maps:

* ``R_Q^h = G_hn · W_Q^h · G_N`` (and ``R_K``, ``R_V`` with the key/value head ``h`` reads under grouped-query
  attention), ``G = diag(γ) · C`` for each norm (``C = I − 11ᵀ/d`` for LayerNorm, ``I`` for RMSNorm; ``γ`` the norm's
  gain, read from the norm frozen on a probe pass); ``G_hn`` the norm on the heads (Gemma 3's q/k norms), if any;
* ``U^{h1} = T_{l1→l2} · G_post · W_O^{h1}``: the head's slice of the output projection, through the norm on the
  attention output (Gemma's sandwich; post-LN's two norms of its own layer) and the fixed parts of every later post-LN
  layer's two norms up to ``l2`` (``T``, the identity in pre-LN models).

Left out, as Elhage et al. leave them out: the biases, the per-position ``1/σ`` of each norm (a positive scalar per
position, which scales a numerator and its denominator alike), the rotation (RoPE makes ``W_QK`` depend on the
distance: these are the scores at distance 0) and any fitted factor. Each score is computed from ``head_dim ×
head_dim`` Gram matrices (``‖A B‖² = tr(AᵀA · B Bᵀ)``), never a ``d × d`` product per pair.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import torch

from .. import checks
from ..sites.inputs import probe_inputs
from ..anatomy.residual import flow_layout
from ..anatomy.rotary import find_rotary
from ..anatomy.tensors import tolerance
from .record import earlier_layer, run_pass
from .refuse import refuse
from .sides import find_side, freeze_side, weight_of


@dataclass
class Composition:
    """Composition scores of one stack (see the module docstring).

    Attributes:
        model, stack: where.
        q, k, v: float32 ``(layers, heads, layers, heads)``: ``[l2, h2, l1, h1]`` is the Q-, K- or V-composition of
            reading head ``h2`` of layer ``l2`` with writing head ``h1`` of layer ``l1``; NaN where ``l1 >= l2`` and for
            reading layers not computed (``composition(layer=...)``).
    """

    model: str
    stack: str
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray

    def for_head(self, layer: int, head: int) -> np.ndarray:
        """float32 ``(3, layers, heads)``: the Q-, K- and V-composition of head ``(layer, head)`` with every earlier
        head (NaN for layers not before it).

        Raises:
            InvalidArgumentError: a layer or head out of range.
        """
        layers, heads = self.q.shape[:2]
        layer = checks.whole("layer", layer, 0, layers - 1)
        head = checks.whole("head", head, 0, heads - 1)
        return np.stack([self.q[layer, head], self.k[layer, head], self.v[layer, head]])


def _gain(norm, dim: int) -> torch.Tensor:
    """``G = diag(γ) · C`` (float64 ``(dim, dim)``) of a frozen norm (γ up to a positive factor: its first row)."""
    if norm is None:
        return torch.eye(dim, dtype=torch.float64)
    gamma = norm.scale[0].double()
    gamma = gamma / gamma.abs().max().clamp_min(1e-30)
    center = torch.eye(dim, dtype=torch.float64) - (1.0 / dim if norm.center else 0.0)
    return gamma[:, None] * center


def _read(side) -> torch.Tensor:
    """float64 ``(heads, head_dim, d)``: a side's chain as a linear map per head (see the module docstring)."""
    s = side.side
    w = side.weight @ _gain(side.norm, side.weight.shape[1])  # (heads · dh, d)
    hn = side.head_norm
    if hn is not None and s.head_norm_whole:
        w = _gain(hn, w.shape[0]) @ w
    w = w.reshape(s.heads, s.head_dim, -1)
    if hn is not None and not s.head_norm_whole:
        w = torch.einsum("ab,hbd->had", _gain(hn, s.head_dim), w)
    return w


def _maps(loaded, stack: str) -> list:
    """Per layer of ``stack``: ``rq (H, dh, d)``, ``rk``, ``rv (Hkv, dh, d)``, ``wo (H, d, dh)`` (through the layer's
    own post-attention norms) and ``carry (d, d)`` (a post-LN layer's two norms, else None); from one probe pass, kept
    in ``loaded.probes``."""
    kept = loaded.probes.setdefault("why_composition", {})
    if stack in kept:
        return kept[stack]
    layout = flow_layout(loaded)
    layers = loaded.stacks[stack][0]
    modules = dict(loaded.model.named_modules())
    tol = tolerance(loaded.dtype)
    inputs = {k: v for k, v in probe_inputs(loaded).items()}
    run = SimpleNamespace(call={**inputs, **loaded.call_kwargs}, gates={}, masks={}, chunk_bytes=0)
    rec = run_pass(loaded, run, layout, stack, set(range(layers)), layers - 1)
    rotary = find_rotary(loaded)
    out = []
    for layer in range(layers):
        lay = layout.layers[(stack, layer)]
        site = next(s for s in loaded.sites if s.stack == stack and s.layer == layer)
        _, _, query, key, value, *_ = rec.calls[(stack, layer)]
        seen = {n: io for n, io in rec.seen.items() if n.startswith(lay.block + ".") and io[0] is not None}
        x = rec.streams[layer]
        sides = []
        for want, rope in ((query, True), (key, True), (value, False)):
            side = find_side(want[0].float().cpu(), x, seen, modules, site.name, rotary, tol, rope=rope)
            frozen = freeze_side(side, seen, modules, rotary, tol) if side is not None else None
            if frozen is None:
                refuse(loaded.name, stack, "projections" if side is None else "norm")
            sides.append(_read(frozen))
        w_o = weight_of(modules[lay.o_proj])[0].double()  # (d, H · dh)
        heads = site.heads
        wo = w_o.reshape(w_o.shape[0], heads, -1).permute(1, 0, 2)  # (H, d, dh)
        carry = None
        if layer < layers - 1:
            e = earlier_layer(rec, lay, layer, modules, tol)
            if isinstance(e, str):
                refuse(loaded.name, stack, e)
            d = w_o.shape[0]
            if e.kind in ("sandwich", "post"):
                wo = torch.einsum("de,hec->hdc", _gain(e.post, d), wo)
            if e.kind == "post":
                carry = _gain(e.after, d) @ _gain(e.post, d)
                wo = torch.einsum("de,hec->hdc", _gain(e.after, d), wo)
        out.append(SimpleNamespace(rq=sides[0], rk=sides[1], rv=sides[2], wo=wo, carry=carry))
    kept[stack] = out
    return out


def _scores(g: torch.Tensor, writer_g: torch.Tensor, m: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """``tr(G_r · M · G_w · Mᵀ)`` for every reading head ``x`` (``G_r = g[groups[x]]`` or ``g[x]``) and writing head
    ``h``: ``m (reading maps, dh, H1, dh)`` = reader's map × writer's ``U``; returns ``(H2, H1)``."""
    mx = m[groups]  # (H2, dh, H1, dh)
    am = torch.einsum("xab,xbhc->xahc", g, mx)
    amg = torch.einsum("xahc,hce->xahe", am, writer_g)
    return torch.einsum("xahe,xahe->xh", amg, mx)


@checks.needs_model
def composition(loaded, stack: str | None = None, layer: int | None = None) -> Composition:
    """Q-, K- and V-composition scores between the heads of ``stack`` (see the module docstring for the formulas).

    Args:
        loaded: the model (interface path). stack: ``encoder``/``decoder`` (default: the stack that reads the input).
        layer: compute only the rows of this reading layer (cheap: ``layer`` pairs of layers), or None for every pair
            (``layers² / 2`` pairs, each a few ``(heads · head_dim) × d × (heads · head_dim)`` products).

    Returns:
        :class:`Composition` (float32; NaN where ``l1 >= l2`` or not computed).

    Raises:
        InvalidArgumentError: an unknown stack or a layer out of range.
        UnsupportedOperationError: code ``why_refused`` as :func:`models.why.explain` (a fallback-path model, a stack
            the flow cannot place, a chain not proven).
    """
    stack = loaded.input_stack if stack is None else stack
    if isinstance(stack, str) and stack == "cross" and "cross" in loaded.stacks:
        refuse(loaded.name, stack, "cross")
    stack = checks.choice("stack", stack, [s for s in loaded.stacks if s != "cross"])
    layers, heads = loaded.stacks[stack]
    layer = checks.whole("layer", layer, 0, layers - 1, none=True)
    if loaded.capture_path != "interface" or stack in loaded.fallback_stacks:
        refuse(loaded.name, stack, "fallback")
    layout = flow_layout(loaded)
    if stack in layout.refused:
        refuse(loaded.name, stack, layout.refused[stack])
    maps = _maps(loaded, stack)
    out = {key: np.full((layers, heads, layers, heads), np.nan, np.float32) for key in "qkv"}
    gram = lambda r: torch.einsum("had,hbd->hab", r, r)  # noqa: E731  R Rᵀ per head
    for l2 in ([layer] if layer is not None else range(1, layers)):
        r = maps[l2]
        groups = torch.arange(heads) // (heads // r.rk.shape[0])
        gq, gk = gram(r.rq), gram(r.rk)[groups]
        gv2 = gram(r.rv)[groups]
        gu2 = torch.einsum("hdc,hde->hce", r.wo, r.wo)
        qk = torch.einsum("xab,xba->x", gq, gk)  # ‖W_QK‖²
        ov2 = torch.einsum("xab,xba->x", gu2, gv2)
        for l1 in range(l2):
            w = maps[l1]
            u = w.wo
            for mid in maps[l1 + 1:l2]:
                if mid.carry is not None:
                    u = torch.einsum("de,hec->hdc", mid.carry, u)
            w_groups = torch.arange(heads) // (heads // w.rv.shape[0])
            gv1 = gram(w.rv)[w_groups]  # (H1, dh, dh)
            ov1 = torch.einsum("hab,hba->h", torch.einsum("hdc,hde->hce", u, u), gv1)
            ident = torch.arange(heads)
            for key, reader, g in (("k", r.rk, gq), ("q", r.rq, gk), ("v", r.rv, gu2)):
                m = torch.einsum("gad,hdc->gahc", reader, u)
                num = _scores(g, gv1, m, groups if key != "q" else ident)
                den = (qk if key != "v" else ov2)[:, None] * ov1[None, :]
                out[key][l2, :, l1, :] = torch.sqrt(num.clamp_min(0) / den.clamp_min(1e-300)).numpy()
    return Composition(loaded.name, stack, out["q"], out["k"], out["v"])
