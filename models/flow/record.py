"""The flow pass: an analysis's forward call run again, with each self-attention layer of one stack decomposed as
it finishes (so no layer's weights outlive it: a long text never holds ``n²`` weights per head and layer).

Per layer ``l`` and position ``i`` (float32; ``P_i`` the frozen post-attention norm of a ``sandwich``/``post``
layer, :mod:`.norms`, identity for ``pre``; ``g_h`` the head's gate, 0 for a head switched off):

* head ``h``'s output ``z_ih = W_O^h o_ih`` from its slice ``o_ih`` of the projection's input (Elhage et al.
  2021, "A Mathematical Framework for Transformer Circuits": ``W_O`` split by head);
* the value-transformed vectors ``f_j^h = W_O^h v_j^h`` and their norms ``g_h ‖f_j^h‖₂`` (Kobayashi et al.
  2020, "Attention is Not Only a Weight", eq. 5-6: ``‖α_ij f(x_j)‖ = α_ij ‖f(x_j)‖``);
* token ``j``'s part of the attention's output at ``i``: ``t_ij = P_i(Σ_h g_h α_ij^h f_j^h)`` (ALTI's
  decomposition, Ferrando et al. 2022, eq. 5), the residual part ``r_i`` (``x_i``; ``P_i(x_i)`` post-LN) and the
  bias part ``b_i`` (the projection's bias and the norm's ``β``), which add up to the stream after the
  attention: ``x_mid_i = r_i + Σ_j t_ij + b_i``;
* their shares of ``x_mid_i`` and the shares of the stream after the attention and of the rest of the layer
  (the MLP) in its output (:mod:`.measure`; post-LN: the residual part is ``A_i(x_mid_i)`` with ``A`` the
  layer's output norm frozen).

Every identity is checked on the run, within :func:`tolerance` of the model's dtype (float32: 1e-4 of the
largest value compared; bfloat16 and float16 compute in fewer bits, so their tolerance is wider); a layer that
breaks one raises instead of giving numbers.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .. import checks
from .. import capture
from ..capture.blocks import block_of
from ..errors import ModelOutOfMemoryError, UnsupportedOperationError
from ..anatomy.residual import FlowLayout, LayerLayout
from ..anatomy.tensors import first_tensor, input_tensor, tolerance
from .measure import proximity_unchecked as proximity, shares
from ..anatomy.norms import FrozenNorm, freeze

BLOCK_BYTES = 64 << 20  # the largest (keys, queries, hidden) block of token parts held at once
BLOCK_ROWS = 16  # the most query rows in one block
CHECK_ROWS = 32  # query rows (the first and last halves) on which A·V is checked against the projection's input


# the part of the decomposition that did not add up, by the key its translation is found under (errpart_<key>)
PARTS = {"the logits rebuilt from the last residual stream": "flow_logits",
         "the heads' outputs from weights and values": "flow_heads_values",
         "the heads' outputs summed through the output projection": "flow_heads_projection",
         "the stream after the attention (residual + heads + biases)": "flow_stream"}


def _place(where: tuple[str, int] | None) -> str:
    """``(stack, layer)`` (None: the output head) as the English message writes it."""
    return "the head" if where is None else f"{where[0]} layer {where[1]}"


def _code(where: tuple[str, int] | None) -> str:
    """The message code of a check that failed at ``where`` (a layer, or the output head)."""
    return "flow_identity_head" if where is None else "flow_identity"


def _check(name: str, got: torch.Tensor, want: torch.Tensor, where: tuple[str, int] | None, tol: float,
           scale: float | None = None) -> None:
    """Raise unless ``got`` equals ``want`` within ``tol`` times ``1 + scale`` (default ``max|want|``: the size of
    what was summed, where ``want`` is a small remainder). ``name`` is one of :data:`PARTS`; ``where`` is
    ``(stack, layer)``, or None for the output head."""
    scale = float(want.abs().max()) if scale is None else scale
    if not torch.allclose(got, want, atol=tol * (1 + scale), rtol=0):
        worst = float((got - want).abs().max())
        raise UnsupportedOperationError(
            f"The information flow does not add up at {_place(where)}: {name} differs by {worst:.2e} (tolerance "
            f"{tol * (1 + scale):.1e}). This architecture computes something the decomposition does not model.",
            code=_code(where), what=PARTS.get(name, name), stack=where[0] if where else "",
            layer=where[1] if where else -1)


def _weight(module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``W_O`` as float32 ``(d_model, heads · head_dim)`` and its bias (Linear, or GPT-2's transposed Conv1D)."""
    w = module.weight.detach().float()
    if type(module).__name__ == "Conv1D":
        w = w.t()
    bias = getattr(module, "bias", None)
    return w, (bias.detach().float() if isinstance(bias, torch.Tensor) else None)


def _alive(ref, what: str):
    """The module behind a weak reference, or the error that says to measure again."""
    module = ref()
    if module is None:
        raise UnsupportedOperationError(f"The model of this flow was unloaded (the model cache dropped it): measure "
                                        f"the flow again to compute its {what}.", code="flow_model_gone")
    return module


def guard_memory(fn):
    """Turn ``torch.OutOfMemoryError`` inside ``fn`` into :class:`ModelOutOfMemoryError` (a message, not a trace)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except torch.OutOfMemoryError as exc:
            raise ModelOutOfMemoryError("Out of memory measuring the information flow; use a shorter text.",
                                        code="oom_recompute", device="?") from exc

    return wrapper


@dataclass
class LayerFlow:
    """One layer's measures (numpy float32 on the CPU; ``n`` queries, ``n_k`` keys, ``H`` heads, ``d`` hidden), and
    what it keeps to compute token contributions and head outputs on demand.

    Attributes:
        heads: ``(n, H)``: each head's share of position ``i``'s stream after the attention (heads as the parts);
            heads_residual, heads_bias: ``(n,)``: the residual's and the biases' shares beside them.
        mlp, mlp_residual: ``(n,)``: the shares of the rest of the layer (MLP) and of the stream after the
            attention in the layer's output.
        value_norms: ``(H, n_k)``: ``g_h ‖f_j^h‖₂``, the norm of what head ``h`` adds from key ``j`` at full weight
            (0 for a head switched off).
        x_out: ``(n, d)``: the layer's output (the residual stream entering the next layer).
        carry: post-LN only: the frozen norms ``(P, A)`` a vector added before this layer's attention passes through
            on the residual path; None where there is none or it is not known (``carry_known``).
        carry_known: False where a post-LN layer's residual path is not ``A(P(x) + ...)`` alone (a decoder layer
            with cross-attention between: BART, Marian), so a head's output cannot be carried through it.
    Kept on the model's device for :meth:`token_shares` and :meth:`head_out`: the attention call (query, key, value,
    mask and extra arguments, with weak references to the modules), the projection's input ``o_in (n, H·d_head)``,
    ``x_mid``, the residual and bias parts ``(n, d)`` and the frozen norm ``post``.
    """

    heads: np.ndarray
    heads_residual: np.ndarray
    heads_bias: np.ndarray
    mlp: np.ndarray
    mlp_residual: np.ndarray
    value_norms: np.ndarray
    x_out: np.ndarray
    carry: tuple[FrozenNorm, FrozenNorm] | None = None
    carry_known: bool = True
    call: tuple | None = field(default=None, repr=False)
    o_in: torch.Tensor | None = field(default=None, repr=False)
    x_mid: torch.Tensor | None = field(default=None, repr=False)
    residual: torch.Tensor | None = field(default=None, repr=False)
    bias_part: torch.Tensor | None = field(default=None, repr=False)
    post: FrozenNorm | None = field(default=None, repr=False)
    gate: torch.Tensor | None = field(default=None, repr=False)
    o_proj: object = field(default=None, repr=False)  # weakref.ref to the output projection

    def weights(self, rows: Sequence[int] | np.ndarray) -> torch.Tensor:
        """float32 ``(H, len(rows), n_k)``: the attention weights of query ``rows`` (sorted, distinct), computed
        again by the family's own eager function on those rows (the call's query, key, value, mask and extra
        arguments: bit for bit the weights of an eager call on those row blocks)."""
        assert self.call is not None  # set by FlowRecorder._measure, like every kept tensor below
        eager, module_ref, query, key, value, mask, empty, args, kwargs = self.call
        module = _alive(module_ref, "attention weights")
        q_len, k_len = query.shape[-2], key.shape[-2]
        rows = [int(r) for r in rows]
        out = []
        start = 0
        while start < len(rows):  # contiguous runs of rows, one eager call each
            stop = start + 1
            while stop < len(rows) and rows[stop] == rows[stop - 1] + 1:
                stop += 1
            q0, q1 = rows[start], rows[stop - 1] + 1
            m = mask
            if m is not None and m.dim() == 4 and m.shape[-2] == q_len:
                m = m[..., q0:q1, :]
            sub_args = [block_of(a, q_len, k_len, q0, q1, 0, k_len) for a in args]
            sub_kwargs = {name: block_of(v, q_len, k_len, q0, q1, 0, k_len) for name, v in kwargs.items()}
            with torch.no_grad():
                _, w = eager(module, query[:, :, q0:q1], key, value, m, *sub_args, **sub_kwargs)
            w = w[0].float()
            if empty is not None:
                w = w.masked_fill(empty[q0:q1][None, :, None].to(w.device), 0.0)
            out.append(w)
            start = stop
        return torch.cat(out, dim=1)

    def value_per_head(self) -> torch.Tensor:
        """float32 ``(H, n_k, d_head)``: the value each query head reads (grouped-query attention: query head
        ``h`` reads key/value head ``h // (H / kv_heads)``, as transformers' ``repeat_kv``)."""
        assert self.call is not None and self.gate is not None
        value = self.call[4][0].float()
        return value.repeat_interleave(self.gate.shape[0] // value.shape[0], dim=0)

    def values(self) -> torch.Tensor:
        """float32 ``(H, n_k, d)``: ``f_j^h = W_O^h v_j^h`` (Kobayashi et al. 2020, eq. 5)."""
        w, _ = _weight(_alive(self.o_proj, "value vectors"))
        assert self.gate is not None
        return torch.einsum("hkc,dhc->hkd", self.value_per_head(), w.view(w.shape[0], self.gate.shape[0], -1))

    def head_out(self, position: int) -> torch.Tensor:
        """float32 ``(H, d)``: each head's output at ``position`` as it enters the residual stream, ``P(W_O^h o_h)``
        (zero for a head switched off: its slice of ``o_in`` is 0)."""
        w, _ = _weight(_alive(self.o_proj, "head outputs"))
        assert self.gate is not None and self.o_in is not None
        heads = self.gate.shape[0]
        z = torch.einsum("hc,dhc->hd", self.o_in[position].view(heads, -1), w.view(w.shape[0], heads, -1))
        return z if self.post is None else self.post.apply(z[None], slice(position, position + 1))[0]

    def _parts(self, alpha_k: torch.Tensor, f_k: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """``t_ij = P_i(Σ_h α_ij^h f_j^h)`` as float32 ``(keys, rows, d)`` for gated weights ``alpha_k (keys, rows,
        H)`` of the positions ``idx`` and ``f_k (keys, H, d)`` (keys first: one small product per key)."""
        parts = torch.bmm(alpha_k, f_k)  # (keys, rows, d)
        if self.post is not None:
            parts = self.post.apply(parts.transpose(0, 1), idx).transpose(0, 1)
        return parts

    def token_parts(self, rows: list[int]) -> torch.Tensor:
        """float32 ``(len(rows), n_k, d)``: each source token's part ``t_ij`` of the stream after the attention
        (``x_mid_i = residual_i + Σ_j t_ij + bias_i``); ``n_k · d`` floats per row, for short inputs and tests."""
        idx = torch.as_tensor(np.asarray(rows, dtype=np.int64))
        assert self.gate is not None
        alpha = self.weights(rows) * self.gate[:, None, None]
        return self._parts(alpha.permute(2, 1, 0), self.values().transpose(0, 1), idx.to(alpha.device)).transpose(0, 1)

    @guard_memory
    def token_shares(self, rows: list[int] | np.ndarray) -> np.ndarray:
        """float32 ``(len(rows), n_k + 2)``: each source token's share of the stream after the attention at each of
        ``rows`` (sorted, distinct), then the residual's and the biases' (each row sums to 1).

        The parts ``t_ij = P_i(Σ_h g_h α_ij^h f_j^h)`` (see the module docstring) and their proximities to
        ``x_mid_i`` are computed in blocks of at most :data:`BLOCK_BYTES`; every pair is computed (exact).
        """
        f = self.values()
        assert self.gate is not None and self.x_mid is not None
        assert self.residual is not None and self.bias_part is not None
        heads, n_k, d = f.shape
        rows_t = torch.as_tensor(np.asarray(rows, dtype=np.int64))
        alpha = self.weights(rows) * self.gate[:, None, None].to(f.device)
        alpha_k, f_k = alpha.permute(2, 1, 0).contiguous(), f.transpose(0, 1).contiguous()  # keys first, once
        out = np.empty((len(rows), n_k + 2), dtype=np.float32)
        # blocks of rows small enough that a causal block's keys stop at its own last row (half the work)
        step = max(1, min(BLOCK_ROWS, BLOCK_BYTES // max(1, n_k * d * 4)))
        for b0 in range(0, len(rows), step):
            idx = rows_t[b0:b0 + step].to(f.device)
            a = alpha[:, b0:b0 + step]
            live = torch.nonzero(a.abs().sum((0, 1)) > 0).flatten()
            k1 = int(live[-1]) + 1 if live.numel() else 1  # a causal block reads no key after its last row
            whole = self.x_mid[idx]
            prox = torch.zeros(idx.numel(), n_k + 2, device=f.device)
            # (keys, rows, d) parts, their distances taken in place: the block is the largest tensor held
            parts = self._parts(alpha_k[:k1, b0:b0 + step], f_k[:k1], idx)
            prox[:, :k1] = proximity(parts, whole[None], inplace=True).t()
            prox[:, n_k:] = proximity(torch.stack([self.residual[idx], self.bias_part[idx]], 1), whole[:, None])
            out[b0:b0 + step] = shares(prox).cpu().numpy()
        return out


class FlowRecorder:
    """Hooks that decompose each layer of ``stack`` as it finishes (see the module docstring)."""

    def __init__(self, loaded, layout: FlowLayout, stack: str, gates: dict):
        self.loaded, self.layout, self.stack = loaded, layout, stack
        self.gates = gates
        self.tol = tolerance(loaded.dtype)
        self.layers: dict[int, LayerFlow] = {}
        self.x_in0: np.ndarray | None = None
        self.seen: dict[str, tuple] = {}
        self.state: capture.CaptureState | None = None
        self.outputs: Any = None
        self.probing = False
        self.modules = dict(loaded.model.named_modules())
        self.mine = {k[1]: v for k, v in layout.layers.items() if k[0] == stack}

    def hooks(self) -> list[capture.Hook]:
        """The pass's forward hooks (installed and removed by :func:`models.capture.rerun`)."""
        out = []
        for layer, lay in self.mine.items():
            for name in [lay.o_proj] + [n for n in (lay.post, lay.after) if n]:
                out.append(capture.Hook(self.modules[name], self._keep(name), with_kwargs=True))
            out.append(capture.Hook(self.modules[lay.block], self._layer(layer, lay), with_kwargs=True))
        return out

    def _keep(self, name):
        def hook(_module, args, kwargs, result):
            if capture.current() is self.state and not self.probing:
                self.seen[name] = (input_tensor(args, kwargs), first_tensor(result))
        return hook

    def _layer(self, layer: int, lay: LayerLayout):
        def hook(_module, args, kwargs, result):
            if capture.current() is not self.state:
                return
            x = input_tensor(args, kwargs)[0].float()
            x_out = first_tensor(result)[0].float()
            if layer == 0:
                self.x_in0 = x.cpu().numpy()
            self.layers[layer] = self._measure(layer, lay, x, x_out)
        return hook

    def _frozen(self, name: str, where: tuple[str, int]) -> tuple[FrozenNorm, torch.Tensor, torch.Tensor]:
        """The norm ``name`` frozen at this run's input, and its input and output ``(n, d)`` in this run."""
        inp, out = (t[0].float() for t in self.seen[name])
        self.probing = True  # freeze() calls the module on probe inputs: not this run's call
        try:
            frozen = freeze(self.modules[name], inp.cpu(), out.cpu(), atol=self.tol)
        finally:
            self.probing = False
        if frozen is None:
            raise UnsupportedOperationError(f"The norm {name} at {_place(where)} is not a per-position affine norm.",
                                            code="flow_identity", what="flow_norm", stack=where[0], layer=where[1])
        return FrozenNorm(frozen.scale.to(inp.device), frozen.shift.to(inp.device), frozen.center), inp, out

    def _measure(self, layer: int, lay: LayerLayout, x: torch.Tensor, x_out: torch.Tensor) -> LayerFlow:
        where = (self.stack, layer)
        assert self.state is not None and self.state.calls is not None  # run_flow sets both before the pass
        eager, module, *rest = self.state.calls[(self.stack, layer)]
        call = (eager, weakref.ref(module), *rest)
        o_in, o = (t[0].float() for t in self.seen[lay.o_proj])
        heads = rest[0].shape[1]
        n = o_in.shape[0]
        o_proj = self.modules[lay.o_proj]
        w, b = _weight(o_proj)
        d = w.shape[0]
        head_dim = w.shape[1] // heads
        gate = self.gates.get((self.stack, layer))
        gate = torch.ones(heads, device=x.device) if gate is None else gate.reshape(-1, heads)[0].float().to(x.device)
        unset = np.empty(0, np.float32)  # the measures, filled in below
        lf = LayerFlow(heads=unset, heads_residual=unset, heads_bias=unset, mlp=unset, mlp_residual=unset,
                       value_norms=unset, x_out=unset, call=call, gate=gate, o_proj=weakref.ref(o_proj), o_in=o_in)
        value = lf.value_per_head()  # (H, n_k, d_head)
        # the weights again on some rows (all of a short text): A·V must be the projection's input
        some = sorted(set(range(min(n, CHECK_ROWS // 2))) | set(range(max(0, n - CHECK_ROWS // 2), n)))
        _check("the heads' outputs from weights and values", torch.einsum("hqk,hkc->qhc", lf.weights(some), value)
               * gate[None, :, None], o_in.view(n, heads, head_dim)[some], where, self.tol)
        w_h = w.view(d, heads, head_dim)
        z = torch.einsum("qhc,dhc->qhd", o_in.view(n, heads, head_dim), w_h)  # gated
        bias = torch.zeros(d, device=x.device) if b is None else b.to(x.device)
        _check("the heads' outputs summed through the output projection", z.sum(1) + bias, o, where, self.tol)
        post = None
        if lay.kind == "pre":
            x_mid, residual = x + o, x
        else:
            assert lay.post is not None  # sandwich and post-LN layers have one (LayerLayout)
            post, _, out = self._frozen(lay.post, where)
            x_mid, residual = (x + out, x) if lay.kind == "sandwich" else (out, post.apply(x))
        carried = z if post is None else post.apply(z)  # (n, H, d)
        bias_part = x_mid - residual - carried.sum(1)
        want_bias = bias if post is None else post.apply(bias.expand(n, d)) + post.shift
        _check("the stream after the attention (residual + heads + biases)", bias_part, want_bias.expand(n, d), where,
               self.tol, scale=float(x_mid.abs().max()))
        head_shares = shares(proximity(torch.cat([carried, residual[:, None], bias_part[:, None]], 1), x_mid[:, None]))
        del carried, z
        kept_mid = x_mid  # post-LN: the stream after the attention as the layer's output norm passes it on
        lf.carry_known = lay.kind != "post"
        if lay.kind == "post" and lay.after is not None:
            after, after_in, _ = self._frozen(lay.after, where)
            # A(x_mid + ffn) = A(x_mid) + A(ffn) + β: the residual part is A(x_mid) when A's input is x_mid + ffn
            if lay.after_reads_mid:
                assert post is not None  # a post-LN layer's, frozen above
                kept_mid = after.apply(x_mid)
                lf.carry, lf.carry_known = (post, after), True
        mlp_shares = shares(proximity(torch.stack([x_out - kept_mid, kept_mid], 1), x_out[:, None]))
        # ‖W_O^h v_j^h‖ through each head's Gram matrix W_O^hᵀ W_O^h: (head_dim)² per key, not head_dim · d
        gram = torch.einsum("dhc,dhe->hce", w_h, w_h)
        norms = torch.einsum("hkc,hce,hke->hk", value, gram, value).clamp_min(0).sqrt() * gate[:, None]
        cpu = lambda t: t.detach().cpu().numpy().astype(np.float32)  # noqa: E731
        lf.heads, lf.heads_residual, lf.heads_bias = (cpu(head_shares[:, :heads]), cpu(head_shares[:, heads]),
                                                      cpu(head_shares[:, heads + 1]))
        lf.mlp, lf.mlp_residual = cpu(mlp_shares[:, 0]), cpu(mlp_shares[:, 1])
        lf.value_norms, lf.x_out = cpu(norms), cpu(x_out)
        lf.x_mid, lf.residual, lf.bias_part, lf.post = x_mid, residual, bias_part, post
        return lf


@checks.needs_model
def run_flow(loaded, layout: FlowLayout, stack: str, replay) -> FlowRecorder:
    """Run ``replay`` (an analysis's forward call, :class:`models.analysis.store.Replay`) once with a
    :class:`FlowRecorder` on ``stack``; returns the recorder with every layer measured. Attention runs the fused kernel
    where the model has one (no weights are materialised in the pass); each layer's call is kept to compute weights of
    chosen rows.

    Raises:
        ModelOutOfMemoryError: the pass ran out of memory.
        UnsupportedOperationError: an identity does not hold (see :func:`_check`).
    """
    rec = FlowRecorder(loaded, layout, stack, replay.gates)
    call = {k: v.to(loaded.device) if isinstance(v, torch.Tensor) else v for k, v in replay.call.items()}
    want = {(stack, layer) for layer in rec.mine}

    def oom(exc):
        raise ModelOutOfMemoryError(f"Out of memory measuring the information flow on {loaded.device}; use a "
                                    "shorter text.", code="oom_recompute", device=str(loaded.device)) from exc

    with capture.rerun(loaded, gates=replay.gates, masks=replay.masks, hooks=rec.hooks(), oom=oom, want=want,
                       chunk_bytes=replay.chunk_bytes, fused=loaded.sdpa_ok) as state:
        state.calls = {}
        rec.state = state
        rec.outputs = loaded.model(**call)
    return rec
