"""Attention weights on demand from the log-sum-exp (issue 45, step 2): any layer, head or block of query rows
computed from the layer's queries, keys and row log-sum-exp, with no second forward pass.

:func:`models.analyze` runs every layer whose weights it does not keep through a fused kernel. With ``keep="lse"``
(the all-weights export, ``python -m models analyze --out``) and where the family allows it (:func:`plan`), the
capture's ``stats`` hook (:class:`models.capture.state.CaptureState`) hands each
layer's call to a :class:`LseCollector`: it runs the fused kernel that also returns the row log-sum-exp
(:func:`fused_with_lse`; on a CPU ``aten::_scaled_dot_product_flash_attention_for_cpu``, the kernel
``scaled_dot_product_attention`` itself picks there), whose output is the layer's output, and keeps, per layer,
the queries and keys after RoPE (in the model's dtype; keys once per key/value head, repeated for grouped-query
heads when used, Ainslie et al. 2023) and ``lse`` (float32 ``(heads, n_q)``). :class:`LseWeights` then gives
every weight exactly,

    ``P_ij = exp(scaling · q_i · k_j − lse_i)`` where the layer's mask lets query ``i`` attend key ``j``, else 0

(Vaswani et al. 2017, eq. 1, with the softmax's denominator kept as FlashAttention keeps it: Dao et al. 2022,
§3.1; ``scaling`` is the family's own, read from its eager function: :func:`models.analysis.fused_stats.score_scaling`).
One batched product and one ``exp`` per block: no layer before it runs again. The weights equal the family's
eager weights to float rounding, not bit for bit as Replay's (float32: within 1e-6 on the tiny models of
tests/engine/test_lse_weights.py, 5e-6 on smollm2-135m at 512 tokens, whose scores are larger: an absolute error of
about ``|s| · 2^-23`` on ``exp(s − lse)``; in bfloat16 the eager function rounds its weights to bfloat16, these are
the float32 values of the same softmax).

Memory is linear in ``n``: per layer ``heads · n_q · d + kv_heads · n_k · d`` values in the model's dtype plus
``heads · n_q`` float32 (:func:`held_bytes`; smollm2-135m at 512 tokens: 45.5 MiB, where its weights take 270 MiB),
at most :data:`LSE_BYTES` per analysis: above it :func:`check_bytes` refuses before the forward pass
(``analyze(keep="lse")`` raises :class:`~models.errors.AttentionTooLargeError`, code ``lse_too_large``).

Refused, with the reason (those stacks keep Replay): the fallback capture path, a model class without sdpa
support, stacks read from ``output_attentions``, a mask per head (head rules), learned sinks, and, found at the
layer's call, softcapped scores, extra positional arguments or a position bias (ALiBi, T5's relative bias: a
mask with finite values other than 0), a mask with one plane per head. Heads switched off on the interface path
are gated after their weights (the map shows the weights, as with eager), so they need nothing here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

from ..errors import AttentionTooLargeError
from ..loading.model import LoadedModel
from .fused_stats import score_scaling

#: most bytes of queries, keys and log-sum-exp one analysis keeps for its weights on demand
LSE_BYTES = 256 << 20
#: largest block of float32 weights computed at once by :meth:`LseWeights.run` (bytes)
BLOCK_BYTES = 8 << 20
#: a causal layer's rows are computed in at most this many chunks of at least :data:`CAUSAL_ROWS` rows, each reading
#: only the keys its rows may attend: with all 16, ``(1 + 1 / 16) / 2`` of the ``n²`` products and exps
CAUSAL_CHUNKS, CAUSAL_ROWS = 16, 32


def _mib(n: int) -> str:
    return f"{n / 2 ** 20:.1f} MiB"


def head_dim(loaded: LoadedModel) -> int | None:
    """The model's per-head query/key width from its text config (``head_dim``, ``d_kv``, else ``hidden_size /
    heads``), or None when the config does not say."""
    cfg = loaded.text_config
    for name in ("head_dim", "d_kv"):
        value = getattr(cfg, name, None)
        if isinstance(value, int) and value > 0:
            return value
    hidden, heads = getattr(cfg, "hidden_size", None), getattr(cfg, "num_attention_heads", None)
    if isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
        return hidden // heads
    return None


def held_bytes(loaded: LoadedModel, lengths: Mapping[str, tuple[int, int]]) -> int | None:
    """Bytes :class:`LseWeights` holds for ``lengths`` (``stack -> (n_q, n_k)``): per layer ``(heads · n_q + kv_heads
    · n_k) · head_dim`` values in the model's dtype plus ``heads · n_q`` float32 (``lse``); None when the config
    gives no head width."""
    d = head_dim(loaded)
    if d is None:
        return None
    item = torch.empty((), dtype=loaded.dtype).element_size()
    kv = loaded.num_key_value_heads
    total = 0
    for stack, (n_q, n_k) in lengths.items():
        layers, heads = loaded.stacks[stack]
        total += layers * ((heads * n_q + (kv or heads) * n_k) * d * item + heads * n_q * 4)
    return total


def check_bytes(loaded: LoadedModel, lengths: Mapping[str, tuple[int, int]]) -> int:
    """The bytes of :func:`held_bytes`, checked against :data:`LSE_BYTES` before any work.

    Returns:
        int bytes (0 when the config gives no head width: :class:`LseCollector` then counts as it goes).

    Raises:
        AttentionTooLargeError: above :data:`LSE_BYTES` (code ``lse_too_large``).
    """
    need = held_bytes(loaded, lengths) or 0
    if need > LSE_BYTES:
        tokens = max((n for pair in lengths.values() for n in pair), default=0)
        raise AttentionTooLargeError(
            f"Keeping every layer's queries, keys and log-sum-exp for {tokens} tokens would take {_mib(need)}, above "
            f"the {_mib(LSE_BYTES)} an analysis may hold for them: leave keep=None or pass keep=False (the weights are "
            "then computed by running the forward pass again up to the layer asked for).",
            code="lse_too_large", tokens=tokens, size=_mib(need), limit=_mib(LSE_BYTES))
    return need


def refusals(loaded: LoadedModel, stacks, masks: Mapping, eager_stacks) -> dict[str, str]:
    """Why each stack of ``stacks`` cannot take its weights from the log-sum-exp, known before the forward pass
    (``stack -> reason``; a stack not listed may still be refused at a layer's call: :class:`LseCollector`).

    Args:
        loaded: the model. stacks: the stacks to read. masks: ``stack ->`` replaced mask or head rules (as
            :func:`models.analyze` passes to the capture). eager_stacks: stacks read from ``output_attentions``.
    """
    out: dict[str, str] = {}
    for stack in stacks:
        if loaded.capture_path != "interface" or stack in eager_stacks:
            out[stack] = "read through hooks on its softmax (the fallback path): no call hands over queries and keys"
        elif not loaded.sdpa_ok:
            out[stack] = "its model class has no fused (sdpa) kernel to compute the layer's output and log-sum-exp"
        elif stack in masks and not isinstance(masks[stack], torch.Tensor):
            out[stack] = "a mask per head (head rules): each head's weights need its own mask"
        elif any(s.sink for s in loaded.sites if s.stack == stack):
            out[stack] = "learned attention sinks: part of each row's weight goes to no key"
    return out


def fused_with_lse(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
                   causal: bool, scaling: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One attention call by a fused kernel that also returns the row log-sum-exp.

    Args:
        query: ``(batch, heads, n_q, d)``; key, value: ``(batch, kv_heads, n_k, d or d_v)`` (repeated here for
            grouped-query heads, as transformers' ``repeat_kv``). mask: additive ``(batch, 1, n_q, n_k)`` in the
            query's dtype, or None (every key). causal: the mask is the plain causal one (then None: the kernel
            skips the blocks above the diagonal). scaling: the score's factor.

    Returns:
        ``(out, lse)``: ``out`` ``(batch, n_q, heads, d_v)`` in the query's dtype (softmax(scaling · Q·Kᵀ + mask)·V,
        Vaswani et al. 2017, eq. 1, as ``sdpa_attention_forward`` returns it); ``lse`` float32 ``(batch, heads,
        n_q)``, ``log Σ_j exp(scaling · q_i·k_j + m_ij)`` (natural log). On a CPU one call of
        ``aten::_scaled_dot_product_flash_attention_for_cpu``; elsewhere the output by
        ``scaled_dot_product_attention`` and ``lse`` by one more ``Q·Kᵀ`` in blocks of rows (exact, O(block · n)
        memory).
    """
    heads = query.shape[1]
    if key.shape[1] != heads:
        key = key.repeat_interleave(heads // key.shape[1], dim=1)
        value = value.repeat_interleave(heads // value.shape[1], dim=1)
    if query.device.type == "cpu":
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            query, key, value, 0.0, causal, attn_mask=mask, scale=scaling)[:2]
        return out.transpose(1, 2).contiguous(), lse.float()
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask, is_causal=causal,
                                                           scale=scaling)
    n_q, n_k = query.shape[-2], key.shape[-2]
    lse = query.new_empty(query.shape[:3], dtype=torch.float32)
    step = max(1, BLOCK_BYTES // max(1, 4 * query.shape[0] * heads * n_k))
    for r0 in range(0, n_q, step):
        s = scaling * torch.matmul(query[:, :, r0:r0 + step].float(), key.float().transpose(-1, -2))
        if causal:
            rows = torch.arange(r0, min(n_q, r0 + step), device=s.device)[:, None]
            s = s.masked_fill(rows < torch.arange(n_k, device=s.device)[None, :], float("-inf"))
        elif mask is not None:
            s = s + mask[:, :, r0:r0 + step].float()
        lse[:, :, r0:r0 + step] = torch.logsumexp(s, dim=-1)
    return out.transpose(1, 2).contiguous(), lse


def _own(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a tensor of its own (a view into a larger buffer, e.g. GPT-2's fused q/k/v projection, would keep
    the whole buffer alive)."""
    t = t.detach()
    if not t.is_contiguous():
        return t.contiguous()  # a copy of its own (RoPE's output keeps the projection's transposed strides)
    return t if t.untyped_storage().nbytes() == t.numel() * t.element_size() else t.clone()


class _Layer:
    """One layer's record: ``q`` ``(heads, n_q, d)``, ``k`` ``(kv_heads, n_k, d)`` (model dtype), ``lse`` float32
    ``(heads, n_q)``, the score's ``scaling``, and its mask's ``form``: ``none`` (every key), ``causal`` or
    ``mask`` (the analysis's :class:`models.analysis.store.MaskStack` plane of the layer)."""

    __slots__ = ("q", "k", "lse", "scaling", "form")

    def __init__(self, q, k, lse, scaling: float, form: str):
        self.q, self.k, self.lse, self.scaling, self.form = q, k, lse, scaling, form

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.q, self.k, self.lse))


class LseCollector:
    """The capture's ``stats`` hook in :func:`models.analyze`'s forward pass: each wanted layer's output from
    :func:`fused_with_lse`, its queries, keys and ``lse`` kept (module docstring). A layer it cannot read
    (:meth:`__call__`) drops its stack's records, notes the reason and lets the call take its usual path.

    Args:
        stacks: the stacks to read. budget: most bytes to keep (:data:`LSE_BYTES`): past it every record is
            dropped (the estimate of :func:`check_bytes` was wrong).
    """

    def __init__(self, stacks, budget: int = LSE_BYTES):
        self.stacks, self.budget = set(stacks), budget
        self.layers: dict[tuple[str, int], _Layer] = {}
        self.refused: dict[str, str] = {}
        self._forms: dict[int, tuple[object, str | None, str]] = {}  # id(mask) -> (mask kept alive, reason, form)
        self._scalings: dict[int, float] = {}

    def _refuse(self, stack: str, reason: str) -> None:
        self.refused.setdefault(stack, reason)
        self.stacks.discard(stack)
        for key in [k for k in self.layers if k[0] == stack]:
            del self.layers[key]

    def _form(self, mask: torch.Tensor | None, n_q: int, n_k: int) -> tuple[str | None, str]:
        """``(reason refused or None, form)`` of a call's mask, once per mask tensor."""
        if mask is None:
            return None, "none"
        found = self._forms.get(id(mask))
        if found is None:
            reason, form = None, "mask"
            if mask.dim() != 4 or mask.shape[0] != 1 or mask.shape[1] != 1:
                reason = "a mask with one plane per head or per batch row"
            elif mask.dtype != torch.bool:
                m = mask[..., -n_q:, :n_k].float()
                blocked = m <= torch.finfo(m.dtype).min / 2
                if bool(((m != 0) & ~blocked).any()):
                    reason = "a position bias in the mask (ALiBi or a relative bias): not 0 or -inf"
                elif n_q == n_k and torch.equal(~blocked[0, 0], torch.ones(n_q, n_k, dtype=torch.bool,
                                                                          device=m.device).tril()):
                    form = "causal"
            found = self._forms[id(mask)] = (mask, reason, form)
        return found[1], found[2]

    def __call__(self, site, eager, module, query, key, value, attention_mask, args, kwargs) -> torch.Tensor | None:
        """The hook (:attr:`models.capture.state.CaptureState.stats`): returns the call's output ``(batch, n_q,
        heads, d_v)`` in the query's dtype, or None where the layer cannot be read (its stack is then refused)."""
        stack = site.stack
        if stack not in self.stacks:
            return None
        reason = None
        if args or any(kwargs.get(k) is not None for k in ("position_bias", "alibi")):
            reason = "a position bias passed to its scores (T5's relative bias, ALiBi)"
        elif kwargs.get("softcap") is not None:
            reason = "softcapped scores (tanh): the weights are not exp(scaling · q·k − lse)"
        elif any(kwargs.get(k) is not None for k in ("s_aux", "sinks")):
            reason = "learned attention sinks: part of each row's weight goes to no key"
        elif query.shape[0] != 1:
            reason = "a batch of several texts"
        n_q, n_k = query.shape[-2], key.shape[-2]
        form = "none"
        if reason is None:
            reason, form = self._form(attention_mask, n_q, n_k)
        if reason is not None:
            self._refuse(stack, reason)
            return None
        scaling = self._scalings.get(id(module))
        if scaling is None:
            scaling = self._scalings[id(module)] = score_scaling(eager, module, query, key, value, kwargs)
        causal = form == "causal"
        mask = None if form != "mask" else attention_mask[..., -n_q:, :n_k]
        if mask is not None and mask.dtype != query.dtype and mask.dtype != torch.bool:
            mask = mask.to(query.dtype)
        out, lse = fused_with_lse(query, key, value, mask, causal, scaling)
        self.layers[(stack, site.layer)] = _Layer(_own(query[0]), _own(key[0]), lse[0], scaling, form)
        if sum(x.nbytes for x in self.layers.values()) > self.budget:
            for s in list(self.stacks):
                self._refuse(s, f"its queries, keys and log-sum-exp passed the {_mib(self.budget)} allowed")
        return out

    def source(self, masks: Mapping, layers: Mapping[str, int]) -> LseWeights | None:
        """The :class:`LseWeights` of the stacks read whole (every layer of ``layers``: ``stack -> layers``), or
        None; ``masks``: ``stack ->`` :class:`models.analysis.store.MaskStack` (read when a weight is asked for)."""
        self._forms.clear()
        done = {s for s in self.stacks if all((s, i) in self.layers for i in range(layers.get(s, 0)))}
        for s in self.stacks - done:
            self.refused.setdefault(s, "a layer of the stack never called the attention function")
        records = {k: v for k, v in self.layers.items() if k[0] in done}
        self.layers.clear()
        return LseWeights(records, masks) if records else None


class LseWeights:
    """Exact weights of any layer, head and block of query rows from kept queries, keys and ``lse`` (module
    docstring): the alternative to :class:`models.analysis.store.Replay` in
    :class:`models.analysis.store.AttentionStack`.

    Args:
        layers: ``(stack, layer) ->`` the layer's record (:class:`LseCollector`). masks: ``stack ->``
            :class:`models.analysis.store.MaskStack` (the bool mask each layer was called with).
    """

    def __init__(self, layers: dict, masks: Mapping):
        self.layers, self.masks = layers, masks
        self.stacks = {stack for stack, _ in layers}

    @property
    def nbytes(self) -> int:
        """Bytes held: queries and keys in the model's dtype, ``lse`` in float32."""
        return sum(x.nbytes for x in self.layers.values())

    def block(self, stack: str, layer: int, heads: tuple[int, int], rows: tuple[int, int],
              out: torch.Tensor | None = None) -> torch.Tensor:
        """Weights of heads ``h0 .. h1 - 1`` and query rows ``r0 .. r1 - 1`` of one layer:
        ``exp(scaling · q_i · k_j − lse_i)`` where the mask allows, else 0 (module docstring).

        Args:
            stack, layer: which layer (a non-negative index). heads, rows: ``(start, stop)`` ranges.
            out: float32 ``(h1 - h0, r1 - r0, n_k)`` contiguous tensor to write into (e.g. a view of a numpy
                array), or None for a new one.

        Returns:
            float32 ``(h1 - h0, r1 - r0, n_k)`` on the CPU; rows sum to 1 (0 for a row with no allowed key).

        Raises:
            KeyError: a layer that was not kept.
        """
        rec = self.layers[(stack, layer)]
        (h0, h1), (r0, r1) = heads, rows
        group = rec.q.shape[0] // rec.k.shape[0]
        q = rec.q[h0:h1, r0:r1].float()
        k = rec.k.float() if group == 1 and (h0, h1) == (0, rec.q.shape[0]) else \
            rec.k[torch.arange(h0, h1, device=rec.k.device) // group].float()
        lse = rec.lse[h0:h1, r0:r1, None]
        n_k = k.shape[1]
        w = out if out is not None and out.device == q.device else \
            torch.empty((h1 - h0, r1 - r0, n_k), dtype=torch.float32, device=q.device)
        if rec.form == "causal":
            # row r0 + i reads keys 0 .. r0 + i only: chunks of rows, each computing the keys its last row reads
            # (about half of the n² products and exps of a whole layer) and writing zeros past them
            step = max(CAUSAL_ROWS, -(-(r1 - r0) // CAUSAL_CHUNKS))
            for a in range(0, r1 - r0, step):
                b = min(r1 - r0, a + step)
                reach = min(n_k, r0 + b)
                part = w[:, a:b, :reach]
                torch.exp(torch.baddbmm(lse[:, a:b].neg(), q[:, a:b], k[:, :reach].transpose(1, 2),
                                        alpha=rec.scaling), out=part)
                part.tril_(r0 + a)
                w[:, a:b, reach:].zero_()
        else:  # exp(scaling q·k − lse) in one batched product and one exp, in place
            torch.baddbmm(lse.neg(), q, k.transpose(1, 2), alpha=rec.scaling, out=w)
            w.exp_()
            if rec.form == "mask":
                plane = self.masks[stack]
                # a copy (r1 - r0 rows of bools): the plane is read-only, torch.from_numpy would warn
                allowed = torch.tensor(plane.distinct[plane.index[layer]][r0:r1], device=w.device)
                w.masked_fill_(~allowed, 0.0)
        if out is not None and w is not out:
            out.copy_(w.cpu())
            return out
        return w.cpu()

    def run(self, want: set, visit: Callable[[str, int, int, int, torch.Tensor], None]) -> None:
        """As :meth:`models.analysis.store.Replay.run`, with no forward pass: ``visit(stack, layer, q0, 0, w)`` gets
        every wanted layer's weights, float32 ``(heads, rows, n_k)``, in blocks of rows of at most
        :data:`BLOCK_BYTES`.

        Raises:
            KeyError: a wanted layer that was not kept.
        """
        for stack, layer in sorted(want):
            rec = self.layers[(stack, layer)]
            heads, n_q, n_k = rec.q.shape[0], rec.q.shape[1], rec.k.shape[1]
            step = max(1, BLOCK_BYTES // max(1, 4 * heads * n_k))
            for r0 in range(0, n_q, step):
                visit(stack, layer, r0, 0, self.block(stack, layer, (0, heads), (r0, min(n_q, r0 + step))))


def plan(loaded: LoadedModel, lengths: Mapping[str, tuple[int, int]], masks: Mapping, eager_stacks, *,
         required: bool = False) -> tuple[LseCollector | None, dict[str, str]]:
    """Whether :func:`models.analyze` (``keep="lse"``) keeps queries, keys and ``lse`` for its weights on demand,
    decided before its forward pass.

    Args:
        loaded: the model. lengths: ``stack -> (n_q, n_k)`` of the analysis. masks, eager_stacks: as
            :func:`refusals`. required: raise when the bytes would not fit (else every stack is refused with
            :func:`check_bytes`'s message).

    Returns:
        ``(collector or None, stack -> why refused)``: a :class:`LseCollector` for the stacks allowed (the capture's
        ``stats`` hook), None when none is.

    Raises:
        AttentionTooLargeError: ``required`` and above :data:`LSE_BYTES` (:func:`check_bytes`).
    """
    refused = refusals(loaded, lengths, masks, eager_stacks)
    allowed = {stack: pair for stack, pair in lengths.items() if stack not in refused}
    if not allowed:
        return None, refused
    try:
        check_bytes(loaded, allowed)
    except AttentionTooLargeError as exc:
        if required:
            raise
        return None, dict(refused, **{stack: str(exc) for stack in allowed})
    return LseCollector(allowed), refused
