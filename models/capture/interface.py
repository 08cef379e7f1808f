"""The interface path of the capture: :func:`dikkat_attention`, the attention function registered with
transformers' ``AttentionInterface``.

How it works (see DESIGN.md, "Facts about transformers 5.x"): models are loaded with
``attn_implementation="dikkat"``. The name is registered with ``transformers.AttentionInterface`` (the
function :func:`dikkat_attention` below) and with ``AttentionMaskInterface`` (transformers' own ``eager_mask``,
so decoders still receive their causal mask). :func:`dikkat_attention` delegates to the
``eager_attention_forward`` of the calling module's own ``modeling_*.py`` file, which carries that family's
quirks (GQA ``repeat_kv``, T5 position bias, softcapping, sliding windows), so the recorded weights are exactly
the eager weights. Around that call it may replace the mask, and multiplies the per-head output ``(batch,
query_len, heads, head_dim)`` (the input of the output projection) by a per-head gate. Families that do not
route through the interface take the fallback path (:mod:`models.capture.hooks`, :mod:`models.capture.softmax`).

Each call is run by one of three strategies: :func:`_fused` (nobody reads the weights: transformers' sdpa
kernel), :func:`_whole` (one eager call) or :func:`_blocked` (a long input: eager on blocks of query rows).
"""

from __future__ import annotations

import sys

import torch
from torch import nn

from ..sites.site import GATE_PROJ, Site
from .blocks import apply_mask, block_of, is_causal, plan_blocks
from .head_rules import fused_per_head, per_head_mask, rows_mask, rows_weights
from .state import _STATE, CaptureState, StopForward, per_head

ATTN_IMPLEMENTATION = "dikkat"


def _eager_for(module: nn.Module):
    """The module-level ``eager_attention_forward`` of the file that defines ``module``'s class."""
    mod = sys.modules.get(type(module).__module__)
    fn = getattr(mod, "eager_attention_forward", None)
    if fn is None:  # e.g. a subclass defined elsewhere: walk the MRO
        for klass in type(module).__mro__[1:]:
            fn = getattr(sys.modules.get(klass.__module__), "eager_attention_forward", None)
            if fn is not None:
                break
    if fn is None:
        raise RuntimeError(f"No eager_attention_forward found for {type(module).__qualname__}")
    return fn


def dikkat_attention(module, query, key, value, attention_mask, *args, **kwargs):
    """Attention function registered as ``"dikkat"`` with ``transformers.AttentionInterface``.

    Args:
        module: the calling attention module.
        query: ``(batch, heads, query_len, head_dim)``.
        key, value: ``(batch, kv_heads, key_len, head_dim)``; the eager function repeats key/value
            heads for grouped-query attention.
        attention_mask: additive float mask ``(batch, 1, query_len, key_len)`` or None.

    Returns:
        ``(attn_output (batch, query_len, heads, head_dim), attn_weights (batch, heads, query_len,
        key_len) or None)`` in the module's compute dtype, exactly as the family's ``eager_attention_forward``
        computes them (softmax(Q·Kᵀ·scaling + mask)·V, Vaswani et al. 2017, eq. 1, plus whatever the
        family adds: softcapping, position bias, GQA's repeated key/value heads, Ainslie et al. 2023),
        with heads gated and the mask replaced when the current :class:`CaptureState` asks for it. A
        query row with no allowed key under a replaced mask gets zero weights and a zero output.

        Long inputs (weights above ``CaptureState.chunk_bytes``) are computed in blocks of query rows,
        each by the same eager function on its rows of the query, the mask and any ``(q, k)``-shaped
        argument (T5's position bias), and only on the key columns that some row of the block may attend
        (:func:`plan_blocks`; a causal block skips the keys after its last row). Softmax and ``·V`` work
        row by row, so every weight is the eager weight; the sums inside may be grouped differently,
        so weights and outputs can differ from a single eager call in the last bits of float32 (below
        1e-6 in the tests). The weights of a blocked call are sent to the sink block by block and not
        returned (None) unless ``record`` asks for them.

    Raises:
        InvalidMaskError: a replacement mask smaller than the call's ``key_len``.
        RuntimeError: no ``eager_attention_forward`` in the module's ``modeling_*.py`` (nor its bases).
        StopForward: every wanted layer has been seen (:attr:`CaptureState.pending`).
    """
    eager = _eager_for(module)
    state = _STATE.get()
    if state is None:
        return eager(module, query, key, value, attention_mask, *args, **kwargs)
    site, again = _site_of_call(state, module)
    if again:  # recorded, sent and counted once: the second call runs gated, or as no site's call
        if _gate_of(state, site) is not None:
            return _second_call(state, site, eager, module, query, key, value, attention_mask, args, kwargs)
        site = None
    if state.fused and site is not None and _head_rules(state, site) is not None:
        done = _fused_heads(state, site, eager, module, query, key, value, attention_mask, args, kwargs)
        if done is not None:
            return _finish(state, site, module, done, None, query, key, again)
    attention_mask, empty_rows = _replaced_mask(state, site, eager, module, query, key, value, attention_mask, args,
                                                kwargs)
    q_len, k_len = query.shape[-2], key.shape[-2]
    chosen = site is not None and (state.want is None or (site.stack, site.layer) in state.want)
    if chosen and state.calls is not None:
        state.calls[(site.stack, site.layer)] = (eager, module, query, key, value, attention_mask, empty_rows, args,
                                                 kwargs)
    if chosen and state.mask_sink is not None:
        state.mask_sink(site, attention_mask, q_len, k_len)
    if chosen and state.stats is not None:
        out = state.stats(site, eager, module, query, key, value, attention_mask, args, kwargs)
        if out is not None and state.sink is None and not state.record:  # the pass computed the output itself
            return _finish(state, site, module, _empty(out, None, empty_rows)[0], None, query, key, again)
    sent = site if chosen and state.sink is not None else None  # weights go to the sink, block by block
    if sent is not None and state.rows is not None:  # only some rows' weights: computed apart, the output as unread
        _rows_to_sink(state, sent, eager, module, query, key, value, attention_mask, empty_rows, args, kwargs)
        sent = None
    keep = site is not None and state.record and sent is None
    per_cell = query.shape[0] * query.shape[1] * 4
    if state.fused and site is not None and sent is None and not keep and not args and kwargs.get("softcap") is None:
        out, weights = _fused(state, module, query, key, value, attention_mask, empty_rows, kwargs)
    elif state.chunk_bytes <= 0 or q_len * k_len * per_cell <= state.chunk_bytes:
        out, weights = _whole(state, sent, eager, module, query, key, value, attention_mask, empty_rows, args, kwargs)
    else:
        out, weights = _blocked(state, sent, keep, eager, module, query, key, value, attention_mask, empty_rows,
                                args, kwargs)
    if keep and weights is not None:
        state.weights[(site.stack, site.layer)] = weights
    return _finish(state, site, module, out, weights, query, key, again)


def _fused_heads(state, site, eager, module, query, key, value, attention_mask, args, kwargs):
    """A call with a mask per head whose whole weights nobody reads (no recording, no call kept for
    :mod:`models.why`, a sink only for some rows): one fused sdpa call per group of heads
    (:func:`models.capture.head_rules.fused_per_head`), the mask sink told the keys any head may attend, the rows'
    weights computed under those rows' mask alone. Returns the output, or None to take the general path."""
    chosen = state.want is None or (site.stack, site.layer) in state.want
    sent = chosen and state.sink is not None
    if state.record or (chosen and state.calls is not None) or (sent and state.rows is None):
        return None
    done = fused_per_head(_head_rules(state, site), site.layer, eager, module, query, key, value, attention_mask, args,
                          kwargs, state.made_masks)
    if done is None:
        return None
    out, union, planes = done
    q_len, k_len = query.shape[-2], key.shape[-2]
    if chosen and state.mask_sink is not None:
        state.mask_sink(site, union[None, None], q_len, k_len)
    if sent:
        r0, r1 = max(0, state.rows[0]), min(q_len, state.rows[1])
        if r1 > r0:
            mask, empty = rows_mask(planes, query.shape[1], r0, r1, query.dtype)
            weights = rows_weights(eager, module, query, key, value, mask, args, kwargs, r0, r1, sliced=True)
            _, weights = _empty(query.new_zeros((1, r1 - r0, query.shape[1], 1)), weights, empty)
            state.sink(site, r0, 0, weights, q_len, k_len)
    return out


def _head_rules(state: CaptureState, site: Site):
    """The stack's :class:`models.analysis.head_masks.HeadRules` when it has a mask per head, else None."""
    rules = state.masks.get(site.stack)
    return None if rules is None or isinstance(rules, torch.Tensor) else rules


def _finish(state: CaptureState, site: Site | None, module, out, weights, query, key, again: bool):
    """The end of every call: the probe's record (no site), the gate, the output kept, the wanted layer counted."""
    if site is None:
        if state.probe is not None and not again:
            state.probe.append((module, int(query.shape[1]), int(query.shape[-2]), int(key.shape[-2]), out.detach()))
        return out, weights
    out = _gated(state, site, out)
    if state.outputs is not None:
        state.outputs.setdefault((site.stack, site.layer), out)
    chosen = state.want is None or (site.stack, site.layer) in state.want
    if chosen and state.pending is not None:
        state.pending.discard((site.stack, site.layer))
        if not state.pending:
            raise StopForward
    return out, weights


def _site_of_call(state: CaptureState, module) -> tuple[Site | None, bool]:
    """The :class:`Site` this call belongs to (None while probing, or for a module that is no site), and
    whether it is a second attention call within one forward call of the module (DiffLlama computes its two
    softmax maps with shared queries and keys: the second runs with the same gates but is not recorded, sent
    to a sink or counted as a layer)."""
    mid = id(module)
    forward = state.forwards.get(mid, 0)
    again = state.seen.get(mid) == forward
    state.seen[mid] = forward
    site = state.sites.get(mid)
    if isinstance(site, tuple):  # a module called several times per forward pass: one site per call
        site = site[(forward - 1) % len(site)]
    return site, again


def _gate_of(state: CaptureState, site: Site | None) -> torch.Tensor | None:
    """The gate this call's output is multiplied by: the site's, unless the site is gated at its output
    projection's input instead (``Site.gate == "o_proj"``: the pre-hook of :mod:`models.capture.hooks`)."""
    if site is None or site.gate == GATE_PROJ:
        return None
    return state.gates.get((site.stack, site.layer))


def _gated(state: CaptureState, site: Site | None, out: torch.Tensor) -> torch.Tensor:
    """``out`` ``(batch, query_len, heads, head_dim)`` times the site's gate (:func:`_gate_of`), if any."""
    gate = _gate_of(state, site)
    if gate is None:
        return out
    gate = gate.to(device=out.device, dtype=out.dtype)
    return out * per_head(gate, out.shape[0])[:, None, :, None]


def _second_call(state, site, eager, module, query, key, value, attention_mask, args, kwargs):
    """A second attention call within one forward call of a gated module (see :func:`_site_of_call`): the
    family's eager function, gated like the first call; nothing recorded."""
    out, weights = eager(module, query, key, value, attention_mask, *args, **kwargs)
    return _gated(state, site, out), weights


def _replaced_mask(state: CaptureState, site: Site | None, eager, module, query, key, value, attention_mask, args,
                   kwargs):
    """The additive mask this call runs with and its rows that allow no key (bool ``(query_len,)``, or
    ``(heads, query_len)`` for a mask per head; None when every row allows one): the replaced mask of the site's
    stack when the state has one (one additive mask per stack and shape, shared by every layer: a long text's
    mask is large), a mask per head (:func:`models.capture.head_rules.per_head_mask`) when the stack has head
    rules, else the model's own."""
    if site is None or site.stack not in state.masks:
        return attention_mask, None
    replaced = state.masks[site.stack]
    if not isinstance(replaced, torch.Tensor):  # head rules: built per call (a layer's own heads and choices)
        return per_head_mask(replaced, site.layer, eager, module, query, key, value, attention_mask, args, kwargs,
                             state.made_masks)
    made_key = (site.stack, query.shape[-2], key.shape[-2], query.dtype, query.device)
    made = state.made_masks.get(made_key)
    if made is None:
        made = state.made_masks[made_key] = apply_mask(replaced, query, key)
    attention_mask, empty_rows = made
    return attention_mask, empty_rows if bool(empty_rows.any()) else None


def _empty(out: torch.Tensor, weights: torch.Tensor | None, rows: torch.Tensor | None):
    """A query with no allowed key attends to nothing: zero weights, zero output (no NaN, no uniform smear
    over forbidden keys). ``rows``: bool ``(query_len,)`` of such queries, ``(heads, query_len)`` for a mask
    per head, or None."""
    if rows is None:
        return out, weights
    per_head = rows if rows.dim() == 2 else rows[None, :]
    if weights is not None:
        weights = weights.masked_fill(per_head[None, :, :, None], 0.0)
    return out.masked_fill(per_head.transpose(0, 1)[None, :, :, None], 0.0), weights


def _rows(rows: torch.Tensor, q0: int, q1: int) -> torch.Tensor:
    """Empty-row flags of query rows ``q0 .. q1 - 1`` (the last axis of ``(q,)`` or ``(heads, q)``)."""
    return rows[..., q0:q1]


def _rows_to_sink(state, site, eager, module, query, key, value, attention_mask, empty_rows, args, kwargs) -> None:
    """Send the weights of rows ``state.rows`` of one call to the sink (:attr:`CaptureState.rows`)."""
    q_len, k_len = query.shape[-2], key.shape[-2]
    r0, r1 = max(0, state.rows[0]), min(q_len, state.rows[1])
    if r1 <= r0:
        return
    weights = rows_weights(eager, module, query, key, value, attention_mask, args, kwargs, r0, r1)
    if empty_rows is not None:
        _, weights = _empty(query.new_zeros((1, r1 - r0, query.shape[1], 1)), weights, _rows(empty_rows, r0, r1))
    state.sink(site, r0, 0, weights, q_len, k_len)


def _fused(state, module, query, key, value, attention_mask, empty_rows, kwargs):
    """Nobody reads these weights: transformers' ``sdpa_attention_forward`` (no weights materialised). With no
    mask the eager functions attend every key, so sdpa must not fall back to its own causal default; the plain
    causal mask becomes sdpa's own ``is_causal``, which skips the blocks above the diagonal (2x fewer products
    on a long text than with the same mask written out)."""
    q_len, k_len = query.shape[-2], key.shape[-2]
    mask, causal = attention_mask, False
    if mask is not None and q_len == k_len and empty_rows is None and mask.shape[1] == 1:
        found = state.plans.get(("causal", id(mask), q_len))
        if found is None:
            found = state.plans[("causal", id(mask), q_len)] = (is_causal(mask, q_len), mask)
        if found[0]:
            mask, causal = None, True
    call = dict(kwargs, is_causal=causal) if mask is None else kwargs
    out, weights = _sdpa()(module, query, key, value, mask, **call)
    if empty_rows is not None:
        out, _ = _empty(out, None, empty_rows)
    return out, weights


def _whole(state, sent, eager, module, query, key, value, attention_mask, empty_rows, args, kwargs):
    """One eager call on the whole input; the weights go to the sink when ``sent`` (the site) is given."""
    out, weights = _empty(*eager(module, query, key, value, attention_mask, *args, **kwargs), empty_rows)
    if sent is not None:
        state.sink(sent, 0, 0, weights, query.shape[-2], key.shape[-2])
    return out, weights


def _blocked(state, sent, keep, eager, module, query, key, value, attention_mask, empty_rows, args, kwargs):
    """Eager calls on blocks of query rows (see :func:`dikkat_attention`): each block's weights go to the sink
    when ``sent`` (the site) is given, or into one whole tensor when ``keep``; returns ``(out, weights or
    None)``."""
    q_len, k_len = query.shape[-2], key.shape[-2]
    per_cell = query.shape[0] * query.shape[1] * 4
    outs, full = [], None
    # the plan depends only on the mask and the shapes: one per mask, shared by the layers
    plan_key = (id(attention_mask), q_len, k_len, per_cell, state.chunk_bytes)
    plan = state.plans.get(plan_key)
    if plan is None:
        plan = (plan_blocks(attention_mask, q_len, k_len, per_cell, state.chunk_bytes), attention_mask)
        if attention_mask is None or attention_mask.shape[1] == 1:  # a mask per head is made per call: not kept
            state.plans[plan_key] = plan
    for q0, q1, k0, k1 in plan[0]:
        m = attention_mask
        if m is not None:
            m = m[..., q0:q1, :] if m.shape[-2] == q_len else m
            m = m[..., k0:k1] if m.shape[-1] >= k1 else m
        sub_args = [block_of(a, q_len, k_len, q0, q1, k0, k1) for a in args]
        sub_kwargs = {name: block_of(v, q_len, k_len, q0, q1, k0, k1) for name, v in kwargs.items()}
        o, w = eager(module, query[:, :, q0:q1], key[:, :, k0:k1], value[:, :, k0:k1], m, *sub_args, **sub_kwargs)
        if empty_rows is not None and bool(_rows(empty_rows, q0, q1).any()):
            o, w = _empty(o, w, _rows(empty_rows, q0, q1))
        if sent is not None:
            state.sink(sent, q0, k0, w, q_len, k_len)
        elif keep:
            if full is None:
                full = w.new_zeros((*w.shape[:2], q_len, k_len))
            full[:, :, q0:q1, k0:k1] = w
        outs.append(o)
        del w
    return torch.cat(outs, dim=1), full


def _sdpa():
    """transformers' ``sdpa_attention_forward`` (imported on first use)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward


def register() -> None:
    """Register ``"dikkat"`` with transformers' attention and mask interfaces (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(ATTN_IMPLEMENTATION, dikkat_attention)
    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, eager_mask)
