"""How one side (query, key or value) of an attention layer is computed from the residual stream, found on a pass
and proven there, never from a table of class names (:func:`find_side`), and applied to parts of the stream
(:class:`FrozenSide`).

A side is the chain the family's own ``forward`` runs before the attention function (Vaswani et al. 2017, eq. 1;
Su et al. 2021, eq. 34 for RoPE; Henry et al. 2020 / Dehghani et al. 2023 for q/k norms)::

    q_i = ρ · R_i( Nh_i( W · N_i(x_i) + b ) )

* ``N``: the layer's input norm (LayerNorm or RMSNorm, frozen at the run's statistics, :mod:`models.anatomy.norms`),
  or none (post-LN BERT reads the stream as it is);
* ``W, b``: rows of a linear map (separate ``q_proj``, or a slice of a fused ``c_attn`` / ``qkv_proj``, contiguous or
  grouped per head), read as ``(heads, head_dim)``;
* ``Nh``: a norm on the projection's output, per head (Gemma 3's and Qwen 3's ``q_norm``/``k_norm``) or over all heads
  (OLMo 2), frozen the same way, or none;
* ``R_i``: the rotary embedding at position ``i`` with the model's own tables (:mod:`models.anatomy.rotary`),
  in the two-halves layout (Llama) or in pairs (GPT-J), on the first ``rotary_dim`` dimensions; or none;
* ``ρ``: a positive factor fitted on the run (1 unless the family scales a side before the attention call).

The chain is accepted only when it rebuilds the query (key, value) the attention function received on that pass
within :func:`models.anatomy.tensors.tolerance`. With the norms frozen every step is affine, so a sum of parts of the
stream goes through as the sum of their linear images plus one constant (:meth:`FrozenSide.linear`,
:meth:`FrozenSide.constant`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..anatomy.norms import FrozenNorm, freeze
from ..anatomy.tensors import close, linear_width


def is_norm(module) -> bool:
    """A normalisation module, by what its class says it is (LayerNorm, RMSNorm, T5LayerNorm ...)."""
    return "norm" in type(module).__name__.lower()


def weight_of(module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A linear map's weight as float32 ``(out, in)`` (GPT-2's ``Conv1D`` transposed) and its bias or None."""
    w = module.weight.detach().float()
    if type(module).__name__ == "Conv1D":
        w = w.t()
    bias = getattr(module, "bias", None)
    return w.cpu(), (bias.detach().float().cpu() if isinstance(bias, torch.Tensor) else None)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> torch.Tensor:
    """RoPE (Su et al. 2021, eq. 34) on the first ``rotary_dim`` dims of ``x (..., p, head_dim)``, with tables
    ``cos, sin (p, rotary_dim)`` in the two-halves layout (:func:`models.anatomy.rotary._cos_sin`).

    ``layout``: ``half`` (pair ``k`` is dims ``k`` and ``k + rd/2``: transformers' ``rotate_half``) or ``pairs``
    (pair ``k`` is dims ``2k, 2k + 1``: GPT-J's ``rotate_every_two``)."""
    rd = cos.shape[-1]
    x = x.to(cos.dtype)
    head, rest = x[..., :rd], x[..., rd:]
    if layout == "half":
        turned = torch.cat((-head[..., rd // 2:], head[..., : rd // 2]), -1)
    else:
        cos = cos[..., : rd // 2].repeat_interleave(2, -1)
        sin = sin[..., : rd // 2].repeat_interleave(2, -1)
        turned = torch.stack((-head[..., 1::2], head[..., 0::2]), -1).flatten(-2)
    return torch.cat((head * cos + turned * sin, rest), -1)


@dataclass(frozen=True)
class Side:
    """Where one side of a layer comes from (found by :func:`find_side`; module names as in ``named_modules()``).

    Attributes:
        linear: the linear map. rows: int64 ``(heads · head_dim,)``: its output features read as ``(heads,
            head_dim)``, head after head.
        heads, head_dim: of this side (key/value heads for keys and values).
        norm: the input norm (its input is the stream), or None. head_norm: the norm on the projection's output,
            or None; head_norm_whole: it normalises all heads together (else each head over ``head_dim``).
        rope: ``(layer_type, layout)`` of the rotation, or None. factor: ``ρ``.
    """

    linear: str
    rows: torch.Tensor = field(repr=False)
    heads: int
    head_dim: int
    norm: str | None
    head_norm: str | None
    head_norm_whole: bool
    rope: tuple | None
    factor: float


def _as_heads(t: torch.Tensor, n: int, heads: int, dh: int) -> list[torch.Tensor]:
    """``t`` (one recorded tensor, batch dropped) read as ``(n, heads, dh)`` in each layout it can have."""
    out = []
    if t.dim() == 3 and tuple(t.shape) == (heads, n, dh):
        out.append(t.transpose(0, 1))
    if t.dim() == 3 and tuple(t.shape) == (n, heads, dh):
        out.append(t)
    if t.dim() == 2 and tuple(t.shape) == (n, heads * dh):
        out.append(t.reshape(n, heads, dh))
    return out


def _row_sets(width: int, heads: int, dh: int):
    """Candidate output features of a ``width``-wide map read as ``(heads, dh)``: a contiguous block at any offset
    that is a multiple of ``dh`` (separate or fused maps, grouped-query widths), or one part of per-head groups
    (GPT-NeoX's fused map: ``(heads, parts, dh)``)."""
    size = heads * dh
    for off in range(0, width - size + 1, dh):
        yield torch.arange(off, off + size)
    if width % size == 0 and width // size > 1:
        grouped = torch.arange(width).reshape(heads, width // size, dh)
        for p in range(width // size):
            yield grouped[:, p].reshape(-1)


def _fit(rebuilt: torch.Tensor, want: torch.Tensor, tol: float) -> float | None:
    """The factor ``ρ > 0`` with ``ρ · rebuilt = want`` within ``tol`` (:func:`close`), else None."""
    denom = float((rebuilt * rebuilt).sum())
    if denom <= 0:
        return 1.0 if close(rebuilt, want, tol) else None
    rho = float((rebuilt * want).sum()) / denom
    if abs(rho - 1.0) < 1e-6:
        rho = 1.0
    return rho if rho > 0 and close(rebuilt * rho, want, tol) else None


def find_side(want: torch.Tensor, x: torch.Tensor, seen: dict, modules: dict, inside: str, rotary, tol: float,
              rope: bool = True) -> Side | None:
    """The :class:`Side` whose chain rebuilds ``want``.

    Args:
        want: float32 ``(heads, n, head_dim)``: what the attention function received (query, key or value).
        x: float32 ``(n, d)``: the residual stream entering the layer.
        seen: ``name -> (input, output)`` float32 (batch dropped) of the layer's modules on the same pass.
        modules: ``name -> module``. inside: the attention module's name (its linear maps are tried first).
        rotary: :class:`models.anatomy.rotary.Rotary` or None. tol: tolerance of the comparisons.
        rope: try rotations (False for values).

    Returns:
        The side, or None when no chain of the forms above rebuilds ``want``.
    """
    heads, n, dh = want.shape
    names = [m for m in seen if linear_width(modules[m]) and seen[m][1] is not None and seen[m][1].dim() == 2]
    names.sort(key=lambda m: not m.startswith(inside + "."))
    norms = [m for m in seen if is_norm(modules[m]) and seen[m][1] is not None]
    for name in names:
        lin_in, lin_out = seen[name]
        if lin_in.shape[0] != n:
            continue
        norm: str | None = None
        if not close(lin_in, x, tol):
            norm = next((m for m in norms if seen[m][0].shape == x.shape and close(seen[m][0], x, tol)
                         and close(seen[m][1], lin_in, tol)), None)
            if norm is None:
                continue
        for rows in _row_sets(lin_out.shape[-1], heads, dh):
            y = lin_out[:, rows].reshape(n, heads, dh)
            for head_norm, whole, y2 in _head_norms(y, norms, seen, inside, tol):
                found = _rotation(y2, want, rotary, tol, rope)
                if found is not None:
                    return Side(name, rows, heads, dh, norm, head_norm, whole, found[0], found[1])
    return None


def _head_norms(y: torch.Tensor, norms: list[str], seen: dict, inside: str, tol: float):
    """``(name, whole, output (n, heads, dh))`` of no norm and of each norm inside the attention module whose
    input is ``y`` (per head or over all heads)."""
    n, heads, dh = y.shape
    yield None, False, y
    for m in norms:
        if not m.startswith(inside + "."):
            continue
        t_in, t_out = seen[m]
        for a, b in zip(_as_heads(t_in, n, heads, dh), _as_heads(t_out, n, heads, dh)):
            if close(a, y, tol):
                yield m, t_in.dim() == 2, b
                break


def _rotation(y: torch.Tensor, want: torch.Tensor, rotary, tol: float, rope: bool):
    """``(rope, factor)`` that turns ``y (n, heads, dh)`` into ``want (heads, n, dh)``: no rotation, or the model's
    rotary tables for one of its layer types in one of the two layouts; None when none does."""
    n = y.shape[0]
    got = y.transpose(0, 1)
    rho = _fit(got, want, tol)
    if rho is not None:
        return None, rho
    if not rope or rotary is None:
        return None
    for kind in rotary.layer_types or (None,):
        cos, sin = rotary.tables(range(n), device_of(rotary), kind)
        if cos.shape[-1] > y.shape[-1]:
            continue
        for layout in ("half", "pairs"):
            turned = rotate(got, cos, sin, layout).float()
            rho = _fit(turned, want, tol)
            if rho is not None:
                return (kind, layout), rho
    return None


def device_of(rotary) -> torch.device:
    """The device of a rotary module's buffers (where its tables are computed)."""
    buffer = next(iter(rotary.module.buffers()), None)
    return buffer.device if buffer is not None else torch.device("cpu")


@dataclass
class FrozenSide:
    """A :class:`Side` at one run: its norms frozen at the run's statistics, its weights read (float64, CPU).

    Attributes:
        side: the side. weight: ``(heads · head_dim, d)``; bias: ``(heads · head_dim,)`` (zeros when none).
        norm, head_norm: :class:`~models.anatomy.norms.FrozenNorm` or None (the head norm's scale is ``(n · heads,
            head_dim)`` per head, or ``(n, heads · head_dim)`` over all heads).
        cos, sin: float64 ``(n, rotary_dim)`` tables at the run's positions (None without rotation).
        before_rope: float32 ``(n, heads, head_dim)``: the side at every position before the rotation (the
            model's own tensors: after the projection and the head norm, times ``ρ``).
    """

    side: Side
    weight: torch.Tensor
    bias: torch.Tensor
    norm: FrozenNorm | None
    head_norm: FrozenNorm | None
    cos: torch.Tensor | None
    sin: torch.Tensor | None
    before_rope: torch.Tensor

    def _project(self, v: torch.Tensor, pos: torch.Tensor, head: int) -> torch.Tensor:
        """``Nh(W v)`` (linear parts) of ``v (m, p, heads · head_dim)`` or already one head's ``(m, p, dh)``."""
        side, dh = self.side, self.side.head_dim
        hn = self.head_norm
        if hn is None:
            return v
        n = hn.scale.shape[0] // (1 if side.head_norm_whole else side.heads)
        if side.head_norm_whole:
            if hn.center:
                v = v - v.mean(-1, keepdim=True)
            return (v * hn.scale[pos].to(v.dtype)[None]).reshape(*v.shape[:2], side.heads, dh)[..., head, :]
        if hn.center:
            v = v - v.mean(-1, keepdim=True)
        scale = hn.scale.reshape(n, side.heads, dh)[pos, head]
        return v * scale.to(v.dtype)[None]

    def _rows(self, head: int) -> slice:
        dh = self.side.head_dim
        return slice(None) if self.side.head_norm_whole else slice(head * dh, (head + 1) * dh)

    def linear(self, v: torch.Tensor, pos: torch.Tensor, head: int) -> torch.Tensor:
        """The linear part of the chain for one head of this side: float64 ``(m, p, head_dim)`` for parts
        ``v (m, p, d)`` of the stream at positions ``pos (p,)`` (each part's image; their sum plus
        :meth:`constant` is the side itself)."""
        v = v.to(torch.float64)
        if self.norm is not None:
            if self.norm.center:
                v = v - v.mean(-1, keepdim=True)
            v = v * self.norm.scale[pos].to(torch.float64)[None]
        y = v @ self.weight[self._rows(head)].t()
        return self._finish(self._project(y, pos, head), pos)

    def constant(self, pos: torch.Tensor, head: int) -> torch.Tensor:
        """float64 ``(p, head_dim)``: the chain's constant at positions ``pos`` (the input norm's ``β`` through the
        projection, the projection's bias, the head norm's ``β``), for one head."""
        rows = self._rows(head)
        base = self.bias[rows].clone()
        if self.norm is not None:
            base = base + self.weight[rows] @ self.norm.shift.to(torch.float64)
        y = self._project(base.expand(1, pos.numel(), -1), pos, head)[0]
        hn = self.head_norm
        if hn is not None:
            shift = hn.shift.to(torch.float64)
            y = y + (shift.reshape(self.side.heads, -1)[head] if self.side.head_norm_whole else shift)
        return self._finish(y[None], pos)[0]

    def _finish(self, y: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        y = y * self.side.factor
        if self.cos is None:
            return y
        assert self.sin is not None and self.side.rope is not None  # set with cos (freeze_side)
        return rotate(y, self.cos[pos], self.sin[pos], self.side.rope[1])


def freeze_side(side: Side, seen: dict, modules: dict, rotary, tol: float) -> FrozenSide | None:
    """``side`` at the run ``seen`` was recorded on (see :func:`find_side`): its norms frozen, its weights read.
    None when a norm is not a per-position affine norm on this run."""
    w, b = weight_of(modules[side.linear])
    weight = w[side.rows].double()
    bias = b[side.rows].double() if b is not None else torch.zeros(weight.shape[0], dtype=torch.float64)
    norm = None
    if side.norm is not None:
        norm = freeze(modules[side.norm], seen[side.norm][0].cpu(), seen[side.norm][1].cpu(), atol=tol)
        if norm is None:
            return None
    lin_out = seen[side.linear][1]
    n, heads, dh = lin_out.shape[0], side.heads, side.head_dim
    y = lin_out[:, side.rows].reshape(n, heads, dh).cpu()
    head_norm = None
    if side.head_norm is not None:
        t_out = next(iter(_as_heads(seen[side.head_norm][1].cpu(), n, heads, dh)))
        shape = (n, heads * dh) if side.head_norm_whole else (n * heads, dh)
        head_norm = freeze(modules[side.head_norm], y.reshape(shape), t_out.reshape(shape), atol=tol)
        if head_norm is None:
            return None
        y = t_out
    cos = sin = None
    if side.rope is not None:
        cos, sin = rotary.tables(range(n), device_of(rotary), side.rope[0])
        cos, sin = cos.double(), sin.double()
    return FrozenSide(side, weight, bias, norm, head_norm, cos, sin, (y * side.factor).float())
