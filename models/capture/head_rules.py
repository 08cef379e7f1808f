"""A mask per head inside Dikkat's attention function: the additive ``(1, heads, q, k)`` mask one attention call
runs with when its layer's heads have their own patterns (:mod:`models.analysis.head_masks`).

The family's eager function adds the mask to its ``(batch, heads, q, k)`` scores, so a mask with one plane per
head masks each head on its own; heads that keep the model's own mask get its additive values unchanged, so
their scores, and their weights, are bit for bit those of the model's own mask.
"""

from __future__ import annotations

import torch

from . import flex_heads
from .blocks import block_of

LAST_Q = 64  # query rows a vertical-slash head is chosen from (MInference, Algorithm 2, last_q = 64)


def per_head_mask(rules, layer: int, eager, module, query, key, value, attention_mask, args, kwargs,
                  cache: dict | None = None):
    """The additive mask and empty rows of one call whose layer has per-head rules.

    Args:
        rules: the :class:`models.analysis.head_masks.HeadRules` of the call's stack. layer: the call's layer.
        eager, module, query, key, value, attention_mask, args, kwargs: the call (see
            :func:`models.capture.dikkat_attention`); ``attention_mask`` is the model's own additive mask
            ``(batch, 1, q, >= k)`` or None (every key allowed).
        cache: a dict kept for one forward pass (``CaptureState.made_masks``): each pattern's plane is made once
            per shape, and a layer whose heads have the same rules as the layer before reuses its mask.

    Returns:
        ``(additive mask (1, heads, q, k) in the query's dtype, empty rows bool (heads, q) or None)``; the
        model's own mask unchanged (and None) when every head of the layer keeps it.
    """
    row = rules.rules.get(layer)
    if row is None:
        return attention_mask, None
    cache = {} if cache is None else cache
    q_len, k_len, heads = query.shape[-2], key.shape[-2], query.shape[1]
    shape = (q_len, k_len, query.dtype, query.device)
    own_key = ("own", id(attention_mask)) + shape
    if own_key not in cache:
        low = torch.finfo(query.dtype).min
        own = (attention_mask[:1, :1, -q_len:, :k_len] if attention_mask is not None
               else torch.zeros((1, 1, q_len, k_len), dtype=query.dtype, device=query.device))
        cache[own_key] = (own, own[0, 0] > low / 2, attention_mask)  # the mask kept alive: its id stays unique
    own, own_allowed, _ = cache[own_key]
    rules.note_native(layer, own_allowed)
    chosen = [h for h, r in enumerate(row) if r is not None and not isinstance(r, torch.Tensor)]
    same_key = ("heads", tuple(id(r) for r in row), id(attention_mask)) + shape
    if not chosen and cache.get("last", (None,))[0] == same_key:
        return cache["last"][1], cache["last"][2]
    picked = _choose(rules, layer, row, chosen, eager, module, query, key, value, attention_mask, args, kwargs,
                     own_allowed) if chosen else {}
    planes, empty = [], torch.zeros((heads, q_len), dtype=torch.bool, device=query.device)
    for h, rule in enumerate(row):
        if rule is None:
            planes.append(own[0, 0])
            continue
        if h in picked:
            plane, rows = _plane(picked[h], query.dtype)
        else:
            plane_key = ("plane", id(rule)) + shape
            if plane_key not in cache:
                cache[plane_key] = _plane(rule[k_len - q_len:k_len, :k_len].to(query.device), query.dtype)
            plane, rows = cache[plane_key]
        planes.append(plane)
        empty[h] = rows
    mask = torch.stack(planes)[None]
    found = (mask, empty if bool(empty.any()) else None)
    if not chosen:
        cache["last"] = (same_key,) + found  # one layer's mask at most: a long text's masks are large
    return found


def fused_per_head(rules, layer: int, eager, module, query, key, value, attention_mask, args, kwargs, cache: dict):
    """A call whose weights nobody reads, with a mask per head, run fused: by the rules' kernel
    (:func:`models.capture.flex_heads.kernel_for`), either one FlexAttention call whose block mask skips the tiles
    no head reads (:mod:`models.capture.flex_heads`; Dong et al. 2024, arXiv 2412.05496), or, ``dense``, one sdpa
    call per group of heads that share a rule (:func:`torch.nn.functional.scaled_dot_product_attention`): the
    heads that keep the model's causal mask with sdpa's own ``is_causal`` (the blocks above the diagonal skipped),
    each pattern with its one plane broadcast over its heads; no ``(1, heads, q, k)`` mask is made. A call flex
    cannot run as the dense path does runs dense, the reason in ``rules.kernels[layer]``. Outputs equal the eager
    function's up to float rounding, as the whole-stack fused path (:attr:`models.capture.CaptureState.fused`).

    Returns:
        ``(output (batch, q, heads, head_dim), the keys any head may attend bool (q, k), head -> its bool (q, k))``,
        or None when the call has arguments a plain sdpa call does not take (positional extras, T5's position bias,
        soft-capping, learned sinks): then the mask is made whole (``rules.kernels[layer]``: ``eager (reason)`` when
        flex was asked for).
    """
    row = rules.rules.get(layer)
    extra = ("position_bias", "softcap", "s_aux", "sinks")
    if row is None or args or any(kwargs.get(name) is not None for name in extra):
        if row is not None and flex_heads.kernel_for(getattr(rules, "kernel", None), query.shape[-2]) != "dense":
            rules.kernels[layer] = f"eager ({flex_heads.extra_reason(args, kwargs)})"
        return None
    q_len, k_len, heads = query.shape[-2], key.shape[-2], query.shape[1]
    own_key = ("own", id(attention_mask), q_len, k_len, query.dtype, query.device)
    if own_key not in cache:
        per_head_mask(rules, layer, eager, module, query, key, value, attention_mask, args, kwargs, cache)
    own, own_allowed, _ = cache[own_key]
    rules.note_native(layer, own_allowed)
    causal_key = ("own_causal", id(attention_mask), q_len, k_len)
    if causal_key not in cache:
        tril = torch.ones((q_len, k_len), dtype=torch.bool, device=own_allowed.device).tril(k_len - q_len)
        cache[causal_key] = bool(torch.equal(own_allowed, tril)) and q_len == k_len
    chosen = [h for h, r in enumerate(row) if r is not None and not isinstance(r, torch.Tensor)]
    picked = _choose(rules, layer, row, chosen, eager, module, query, key, value, attention_mask, args, kwargs,
                     own_allowed) if chosen else {}
    scaling = kwargs.get("scaling", getattr(module, "scaling", None))
    empty, has_empty = _empty_rows(row, picked, query, q_len, k_len, cache)
    kernel = flex_heads.kernel_for(getattr(rules, "kernel", None), q_len)
    out = None
    if kernel != "dense":
        why = flex_heads.refusal(module, query, key, own, own_allowed, rules.n, args, kwargs, cache,
                                 kernel == "flex_compiled")
        if why is None:
            mask = flex_heads.block_mask(row, rules.modes.get(layer), picked, own_allowed, cache[causal_key], cache)
            out = flex_heads.attend(query, key, value, mask, scaling, kernel == "flex_compiled")
            why = "torch.compile failed" if out is None else None
        rules.kernels[layer] = kernel if why is None else f"dense ({why})"
    else:
        rules.kernels[layer] = "dense"
    if out is None:
        out = _sdpa_groups(row, picked, own, query, key, value, scaling, cache[causal_key], cache)
    out = out.transpose(1, 2).contiguous()
    if has_empty:  # a query with no allowed key attends to nothing (sdpa would give NaN)
        out = out.masked_fill(empty.transpose(0, 1)[None, :, :, None], 0.0)
    planes = {h: picked[h] if h in picked else own_allowed if rule is None
              else rule[k_len - q_len:k_len, :k_len].to(query.device) for h, rule in enumerate(row)}
    union_key = ("union", frozenset(id(planes[h]) if h in picked else id(row[h]) for h in range(heads)),
                 id(attention_mask), q_len, k_len)
    union = cache.get(union_key) if not picked else None
    if union is None:
        union = torch.zeros((q_len, k_len), dtype=torch.bool, device=query.device)
        for allowed in {id(a): a for a in planes.values()}.values():
            union |= allowed
        if not picked:
            cache[union_key] = union
    return out, union, planes


def _empty_rows(row, picked: dict, query, q_len: int, k_len: int, cache: dict) -> tuple[torch.Tensor, bool]:
    """Bool ``(heads, q)`` of the queries each head's own pattern leaves with no key (a chosen head's, a rule's;
    never the model's own mask's), and whether there is any."""
    empty, has_empty = torch.zeros((len(row), q_len), dtype=torch.bool, device=query.device), False
    for h, rule in enumerate(row):
        if h in picked:
            rows = ~picked[h].any(dim=-1)
        elif rule is None:
            continue
        else:
            rows_key = ("fused rows", id(rule), q_len, k_len, query.device)
            if rows_key not in cache:
                rows = ~rule[k_len - q_len:k_len, :k_len].to(query.device).any(dim=-1)
                cache[rows_key] = (rows, bool(rows.any()), rule)
            rows, some, _ = cache[rows_key]
            if not some:
                continue
        empty[h] = rows
        has_empty = has_empty or bool(rows.any())
    return empty, has_empty


def _sdpa_groups(row, picked: dict, own, query, key, value, scaling, own_causal: bool, cache: dict) -> torch.Tensor:
    """The dense kernel of :func:`fused_per_head`: one sdpa call per group of heads sharing a rule, each chosen
    head alone; returns ``(batch, heads, q, head_dim)`` (a row with no allowed key left as sdpa gives it)."""
    q_len, k_len, heads = query.shape[-2], key.shape[-2], query.shape[1]
    groups: dict = {}
    for h, rule in enumerate(row):
        groups.setdefault(("head", h) if h in picked else ("rule", id(rule)), []).append(h)
    per = heads // key.shape[1]  # GQA: query head h reads key/value head h // per (transformers' repeat_kv)
    out = query.new_empty((query.shape[0], heads, q_len, value.shape[-1]))
    for (what, which), members in groups.items():
        rule = row[members[0]]
        causal, mask = False, None
        if what == "head":
            mask, _ = _plane(picked[which], query.dtype)
        elif rule is None:
            causal = own_causal
            mask = None if causal else own[0, 0]
        else:
            plane_key = ("fused plane", id(rule), q_len, k_len, query.dtype, query.device)
            if plane_key not in cache:
                cache[plane_key] = _plane(rule[k_len - q_len:k_len, :k_len].to(query.device), query.dtype)[0], rule
            mask = cache[plane_key][0]
        index = torch.tensor(members, device=query.device)
        kv = torch.tensor([h // per for h in members], device=query.device)
        out[:, index] = torch.nn.functional.scaled_dot_product_attention(
            query[:, index], key[:, kv], value[:, kv], attn_mask=mask, is_causal=causal, scale=scaling)
    return out


def rows_mask(planes: dict, heads: int, r0: int, r1: int, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The additive per-head mask ``(1, heads, r1 - r0, k)`` of rows ``r0 .. r1 - 1`` and their empty rows
    ``(heads, r1 - r0)``, from each head's bool ``(q, k)`` (:func:`fused_per_head`'s ``planes``)."""
    allowed = torch.stack([planes[h][r0:r1] for h in range(heads)])
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None], ~allowed.any(dim=-1)


def _plane(allowed: torch.Tensor, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """An additive ``(q, k)`` plane (0 allowed, the dtype's minimum forbidden) and the rows that allow no key."""
    plane = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return plane.masked_fill_(~allowed, torch.finfo(dtype).min), ~allowed.any(dim=-1)


def _choose(rules, layer, row, chosen, eager, module, query, key, value, attention_mask, args, kwargs, own_allowed):
    """``head -> bool (q, k)`` for the chosen heads of a call (vertical-slash, block-sparse), from the head's own
    weights under the model's own mask, and the choice recorded in ``rules.chosen``."""
    q_len, k_len = query.shape[-2], key.shape[-2]
    out = {}
    slash = [h for h in chosen if row[h].kind == "vertical_slash"]
    blocks = [h for h in chosen if row[h].kind == "block_sparse"]
    if slash:
        last = min(LAST_Q, q_len)
        weights = rows_weights(eager, module, query, key, value, attention_mask, args, kwargs, q_len - last, q_len)
        for h in slash:
            out[h] = vertical_slash(rules, layer, h, row[h], weights[0, h].float(), q_len, k_len) & own_allowed
    if blocks:
        weights = rows_weights(eager, module, query, key, value, attention_mask, args, kwargs, 0, q_len)
        for h in blocks:
            out[h] = block_sparse(rules, layer, h, row[h], weights[0, h].float(), q_len, k_len) & own_allowed
    return out


def rows_weights(eager, module, query, key, value, attention_mask, args, kwargs, q0: int, q1: int,
                 sliced: bool = False) -> torch.Tensor:
    """The family's eager weights ``(batch, heads, q1 - q0, k)`` of query rows ``q0 .. q1 - 1`` under
    ``attention_mask`` (the same function, scaling, softcap and position bias as the call itself); ``sliced``: the
    mask holds those rows only."""
    q_len, k_len = query.shape[-2], key.shape[-2]
    m = attention_mask
    if m is not None and not sliced:
        m = attention_mask[..., -q_len:, :][..., q0:q1, :]
    sub_args = [block_of(a, q_len, k_len, q0, q1, 0, k_len) for a in args]
    sub_kwargs = {name: block_of(v, q_len, k_len, q0, q1, 0, k_len) for name, v in kwargs.items()}
    return eager(module, query[:, :, q0:q1], key, value, m, *sub_args, **sub_kwargs)[1]


def vertical_slash(rules, layer, head, rule, weights, q_len: int, k_len: int) -> torch.Tensor:
    """Bool ``(q, k)``: the ``rule.a`` columns and ``rule.b`` diagonals (offset 0 among them) of most weight in
    the last rows ``weights`` ``(rows, k)`` (MInference, Algorithm 2: vertical = Σ over rows, slash = Σ along
    each diagonal, argtopk)."""
    rows = weights.shape[0]
    positions = torch.arange(k_len - rows, k_len, device=weights.device)  # absolute positions of those rows
    offsets = positions[:, None] - torch.arange(k_len, device=weights.device)[None, :]  # i - j
    vertical = weights.sum(dim=0)
    slash = torch.zeros(k_len, dtype=weights.dtype, device=weights.device)
    slash.scatter_add_(0, offsets.clamp(min=0).reshape(-1), (weights * (offsets >= 0)).reshape(-1))
    slash[0] = float("inf")  # each token sees itself
    columns = torch.topk(vertical, min(rule.a, k_len)).indices.sort().values
    diagonals = torch.topk(slash, min(rule.b, k_len)).indices.sort().values
    rules.chosen[(layer, head)] = {"columns": columns.cpu().numpy(), "offsets": diagonals.cpu().numpy()}
    i = torch.arange(k_len - q_len, k_len, device=weights.device)[:, None]
    j = torch.arange(k_len, device=weights.device)[None, :]
    keep_col = torch.zeros(k_len, dtype=torch.bool, device=weights.device)
    keep_col[columns] = True
    keep_off = torch.zeros(k_len, dtype=torch.bool, device=weights.device)
    keep_off[diagonals] = True
    off = i - j
    return keep_col[None, :].expand(q_len, k_len) | (keep_off[off.clamp(min=0)] & (off >= 0))


def block_sparse(rules, layer, head, rule, weights, q_len: int, k_len: int) -> torch.Tensor:
    """Bool ``(q, k)``: per block row of ``rule.a`` queries, the ``rule.b`` blocks of ``rule.a`` keys holding the
    most weight (``weights`` ``(q, k)``), the diagonal block always among them (MInference, Algorithm 3, ranked by
    the exact block mass)."""
    size = rule.a
    rows, cols = -(-q_len // size), -(-k_len // size)
    padded = torch.zeros((rows * size, cols * size), dtype=weights.dtype, device=weights.device)
    padded[:q_len, :k_len] = weights
    mass = padded.reshape(rows, size, cols, size).sum(dim=(1, 3))
    shift = (k_len - q_len)  # a query row's absolute position is its index + shift
    diag = torch.clamp((torch.arange(rows, device=weights.device) * size + shift) // size, max=cols - 1)
    mass[torch.arange(rows, device=weights.device), diag] = float("inf")
    top = torch.topk(mass, min(rule.b, cols), dim=-1).indices  # (rows, K)
    keep = torch.zeros((rows, cols), dtype=torch.bool, device=weights.device)
    keep.scatter_(1, top, True)
    keep &= mass > 0  # a block with no weight (all masked) is no block kept
    rules.chosen[(layer, head)] = {"blocks": keep.nonzero().cpu().numpy()}
    full = keep.repeat_interleave(size, dim=0).repeat_interleave(size, dim=1)
    return full[:q_len, :k_len]
