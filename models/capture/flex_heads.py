"""A mask per head as a real block mask: one FlexAttention call per layer (Dong et al. 2024, "Flex Attention: A
Programming Model for Generating Optimized Attention Kernels", arXiv 2412.05496, §3-4) whose ``BlockMask`` lists,
per head and per ``BLOCK × BLOCK`` tile, whether the head reads none of it (skipped), all of it (no mask
evaluated) or part of it (the head's ``mask_mod`` evaluated). A window + sinks head (StreamingLLM, Xiao et al.
2023, §3.2; DuoAttention's streaming heads, Xiao et al. 2024, arXiv 2410.10819, §3) reads O(n·(W + K)) of the
n² products, so the fused call's time falls with the share of such heads, which the dense path
(:func:`models.capture.head_rules.fused_per_head`: one sdpa call per group of heads, each with its dense
``(q, k)`` plane) cannot do.

Each head's mask is the dense path's, cell for cell:

* a ``full`` head: the model's own mask: ``k <= q`` when it is the plain causal mask, every key when it allows
  every key, else its boolean plane;
* ``causal``, ``bidirectional``, ``sliding_window:W``, ``sink_window:W,K`` (``a_shape``) and ``strided:S`` in one
  closed form with per-head integer tensors ``(k <= q + lo) & (q - k < W | k < K | (q - k) mod S = 0)``
  (:meth:`models.analysis.masks.MaskMode.matrix`'s definitions);
* MInference's chosen heads (``vertical_slash``, ``block_sparse``; Jiang et al. 2024, arXiv 2407.02490, §3.2) and
  custom matrices: their boolean plane, read at the cells of partial tiles only.

The tiles come from each head's boolean plane (which the dense path holds too), reduced once per pattern and
shape and shared by the layers. GQA: the query heads read key/value head ``h // (heads / kv_heads)``
(``enable_gqa``, as transformers' ``repeat_kv``); the scaling is the family's (``module.scaling``).

Refused (the dense path runs, the reason kept in :attr:`models.analysis.head_masks.HeadRules.kernels`): positional
extra arguments, a position bias (T5, ALiBi in the mask: a model's own mask with values other than 0 and the
dtype's minimum), soft-capping, learned sinks, dropout while training, a call of another length than the text's
(generation with a cache), a model's own mask that leaves a query with no key (the dense path's row of uniform
weights), and, compiled, more than :data:`MAX_SHAPES` compiled shapes in the process.

Kernels (:data:`KERNELS`): ``dense`` (today's sdpa per group of heads), ``flex`` (FlexAttention uncompiled: it
computes every score, a reference), ``flex_compiled`` (FlexAttention through ``torch.compile``: the fused kernel
that skips tiles; the first call of each shape compiles, tens of seconds on a CPU, cached per process and by
inductor on disk), ``auto``: ``flex_compiled`` from :data:`AUTO_TOKENS` tokens, else ``dense``. Outputs equal the
dense path's up to float rounding (below 1e-5 relative in float32, tests/engine/test_block_masks.py).
"""

from __future__ import annotations

import time

import torch

KERNELS = ("dense", "flex", "flex_compiled", "auto")
# Measured on CPU (2 shared cores, smollm2-135m, 70 % of heads window 64 + 4 sinks; bench/head_masks.py): compiled flex
# is ~2.4x faster than dense per layer at 2,048 and 8,192 tokens (0.08 vs 0.20 s, 0.78 vs 1.89 s) and uncompiled flex
# ~10x slower (it computes every score); a compile costs 5-16 s per shape (text length). Below ~4k tokens one
# analysis saves less than one compile, so ``auto`` compiles from AUTO_TOKENS on.
KERNEL = "auto"
AUTO_TOKENS = 4096
MAX_SHAPES = 6  # compiled shapes per process (torch.compile's recompile limit is 8; past it flex would run eager)
BLOCK = 128  # FlexAttention's default tile (queries × keys)
_EXTRA = {"position_bias": "a position bias", "softcap": "soft-capping", "s_aux": "learned sinks",
          "sinks": "learned sinks"}
_COMPILED: dict = {}
COMPILE_SECONDS: dict[tuple, float] = {}  # shape -> seconds of its first compiled call (compile included)


def kernel_for(kernel: str | None, n: int) -> str:
    """The kernel a call of ``n`` tokens runs: ``kernel`` (None: :data:`KERNEL`), ``auto`` resolved by
    :data:`AUTO_TOKENS`. Returns one of ``dense``, ``flex``, ``flex_compiled``."""
    kernel = KERNEL if kernel is None else kernel
    if kernel == "auto":
        return "flex_compiled" if n >= AUTO_TOKENS else "dense"
    return kernel


def refusal(module, query: torch.Tensor, key: torch.Tensor, own: torch.Tensor, own_allowed: torch.Tensor, n: int,
            args, kwargs: dict, cache: dict, compiled: bool) -> str | None:
    """Why FlexAttention cannot run this call as the dense path does (None: it can).

    Args:
        module: the attention module. query ``(batch, heads, q, d)``, key ``(batch, kv_heads, k, d)``.
        own: the model's own additive mask ``(1, 1, q, k)``; own_allowed: bool ``(q, k)`` (cell above half the
            dtype's minimum). n: the text's tokens (the rules' size). args, kwargs: the call's extras. cache: the
            forward pass's dict (one check per mask). compiled: the compiled kernel is asked for.
    """
    q_len, k_len = query.shape[-2], key.shape[-2]
    extra = extra_reason(args, kwargs)
    if extra is not None:
        return extra
    if getattr(module, "training", False) and float(kwargs.get("dropout") or 0.0) > 0:
        return "dropout"
    if q_len != n or k_len != n:
        return "a call of another length than the text (a cache)"
    if query.shape[1] % key.shape[1]:
        return "query heads not a multiple of key/value heads"
    check_key = ("flex own", id(own), q_len, k_len)
    if check_key not in cache:
        cells = own[0, 0]
        why = None
        if bool((cells[own_allowed] != 0).any()):
            why = "a bias in the model's own mask"
        elif not bool(own_allowed.any(dim=-1).all()):
            why = "the model's own mask leaves a query with no key"
        cache[check_key] = (why, own)
    if cache[check_key][0] is not None:
        return cache[check_key][0]
    if compiled and "failed" in _COMPILED:
        return f"torch.compile failed ({_COMPILED['failed']})"
    if compiled and _shape(query, key) not in COMPILE_SECONDS and len(COMPILE_SECONDS) >= MAX_SHAPES:
        return f"{MAX_SHAPES} shapes compiled already"
    return None


def extra_reason(args, kwargs: dict) -> str | None:
    """The call's argument that neither sdpa nor this module's FlexAttention call takes (positional extras, a position
    bias, soft-capping, learned sinks), in words, or None."""
    if args:
        return "positional extra arguments"
    return next((what for name, what in _EXTRA.items() if kwargs.get(name) is not None), None)


def _shape(query: torch.Tensor, key: torch.Tensor) -> tuple:
    return (tuple(query.shape), tuple(key.shape), query.dtype, query.device.type)


def closed_form(mode, n: int) -> tuple[int, int, int, int] | None:
    """``(lo, W, K, S)`` of a :class:`models.analysis.masks.MaskMode` (or the kind ``causal``/``bidirectional``) whose
    matrix is ``(k <= q + lo) & (q - k < W
    | k < K | (q - k) mod S = 0)`` on ``n`` tokens, or None (a custom matrix, or no mode).

    From :meth:`MaskMode.matrix`: causal ``j <= i``; sliding_window ``i - w < j <= i`` (Jiang et al. 2023, §2);
    sink_window that or ``j < k`` (Xiao et al. 2023, §3.2); strided ``j <= i`` and (``i - j < s`` or ``i ≡ j mod
    s``) (Child et al. 2019, §4.2); widths above ``n`` act as ``n``. S = n + 1 leaves only ``q = k``, which each of
    them allows."""
    kind = mode if isinstance(mode, str) else getattr(mode, "kind", None)
    big = n + 1
    if kind == "causal":
        return 0, big, 0, big
    if kind == "bidirectional":
        return n, 2 * n + 1, 0, big
    if kind in ("sliding_window", "sink_window", "strided") and mode.width is not None:
        width = min(int(mode.width), max(n, 1))
        if kind == "strided":
            return 0, width, 0, width
        return 0, width, int(mode.sinks or 0) if kind == "sink_window" else 0, big
    return None


def block_mask(row, modes, picked: dict, own_allowed: torch.Tensor, own_causal: bool, cache: dict):
    """The layer's ``BlockMask`` (Dong et al. 2024, §4.1: tile lists per query tile, partial and full apart).

    Args:
        row: the layer's rules per head (None: the model's own mask; a bool ``(n, n)`` tensor). modes: the parsed
            pattern per head (:class:`models.analysis.masks.MaskMode`, or None). picked: ``head -> bool (q, k)``
            of the chosen heads of this call. own_allowed: bool ``(q, k)``, the model's own mask; own_causal: it is
            the plain causal one. cache: the forward pass's dict.

    Returns:
        A :class:`torch.nn.attention.flex_attention.BlockMask` of shape ``(1, heads, q, k)`` with tiles of
        :data:`BLOCK`, its ``mask_mod`` equal to each head's plane at every cell.
    """
    from torch.nn.attention.flex_attention import BlockMask

    q_len, k_len = own_allowed.shape
    device = own_allowed.device
    every_key = ("flex every", id(own_allowed))
    if every_key not in cache:
        cache[every_key] = (not own_causal and bool(own_allowed.all()), own_allowed)
    every = cache[every_key][0]
    lo: list[int] = []
    width: list[int] = []
    sinks: list[int] = []
    stride: list[int] = []
    which: list[int] = []
    planes: list[torch.Tensor] = []
    tiles: list[tuple[torch.Tensor, torch.Tensor]] = []
    plane_ids: dict[int, int] = {}
    for h, rule in enumerate(row):
        if h in picked:
            plane, form, persistent = picked[h], None, False
        elif rule is None:
            plane, persistent = own_allowed, True
            form = closed_form("causal" if own_causal else "bidirectional", q_len) if own_causal or every else None
        else:
            plane, form, persistent = rule, closed_form(modes[h] if modes else None, q_len), True
        tiles.append(_tiles(plane, cache if persistent else None))
        if form is None:
            if id(plane) not in plane_ids:
                plane_ids[id(plane)] = len(planes)
                planes.append(plane)
            which.append(plane_ids[id(plane)])
            form = (0, 1, 0, 1)  # unused: the plane decides
        else:
            which.append(-1)
        for values, v in zip((lo, width, sinks, stride), form, strict=True):
            values.append(v)
    partial = torch.stack([t[0] for t in tiles])[None]
    full = torch.stack([t[1] for t in tiles])[None]

    def ordered(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        counts = blocks.sum(dim=-1, dtype=torch.int32)
        return counts, torch.argsort(blocks.to(torch.int8), dim=-1, descending=True, stable=True).to(torch.int32)

    ints = [torch.tensor(v, dtype=torch.int64, device=device) for v in (lo, width, sinks, stride)]
    if planes:
        stacked_key = ("flex planes", tuple(id(p) for p in planes))
        stacked = cache.get(stacked_key) if not picked else None
        if stacked is None:
            stacked = (torch.stack(planes), planes)
            if not picked:
                cache[stacked_key] = stacked
        mask_mod = _plane_mod(ints, torch.tensor(which, device=device), stacked[0])
    else:
        mask_mod = _form_mod(ints)
    num, index = ordered(partial)
    full_num, full_index = ordered(full)
    return BlockMask.from_kv_blocks(num, index, full_num, full_index, BLOCK_SIZE=BLOCK, mask_mod=mask_mod,
                                    seq_lengths=(q_len, k_len), compute_q_blocks=False)


def _tiles(plane: torch.Tensor, cache: dict | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(partial, full)`` bool ``(q tiles, k tiles)`` of a bool ``(q, k)`` plane: tiles with some allowed cells but
    not all, tiles with every cell allowed (cells past the text count as not allowed)."""
    key = ("flex tiles", id(plane), plane.shape)
    if cache is not None and key in cache:
        return cache[key][0]
    q_len, k_len = plane.shape
    rows, cols = -(-q_len // BLOCK), -(-k_len // BLOCK)
    padded = plane
    if (rows * BLOCK, cols * BLOCK) != (q_len, k_len):
        padded = plane.new_zeros((rows * BLOCK, cols * BLOCK))
        padded[:q_len, :k_len] = plane
    count = padded.view(rows, BLOCK, cols, BLOCK).sum(dim=(1, 3))
    found = ((count > 0) & (count < BLOCK * BLOCK), count == BLOCK * BLOCK)
    if cache is not None:
        cache[key] = (found, plane)  # the plane kept alive: its id stays unique
    return found


def _form_mod(ints: list[torch.Tensor]):
    """The closed-form ``mask_mod`` (:func:`closed_form`) with per-head ``(lo, W, K, S)`` tensors ``(heads,)``."""
    lo, width, sinks, stride = ints

    def mask_mod(b, h, q, k):
        d = q - k
        return (k <= q + lo[h]) & ((d < width[h]) | (k < sinks[h]) | (d % stride[h] == 0))

    return mask_mod


def _plane_mod(ints: list[torch.Tensor], which: torch.Tensor, planes: torch.Tensor):
    """The closed form for heads with ``which[h] < 0``, else the cell of plane ``planes[which[h]]`` (bool ``(P, q,
    k)``; indices clamped: a partial tile past the text's end is evaluated, then dropped by the kernel)."""
    form = _form_mod(ints)
    last_q, last_k = planes.shape[1] - 1, planes.shape[2] - 1

    def mask_mod(b, h, q, k):
        cell = planes[which[h].clamp(min=0), q.clamp(0, last_q), k.clamp(0, last_k)]
        return torch.where(which[h] >= 0, cell, form(b, h, q, k))

    return mask_mod


def attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask, scaling: float | None,
           compiled: bool) -> torch.Tensor | None:
    """``softmax(scaling · Q Kᵀ + mask) V`` per head by FlexAttention (Dong et al. 2024) under ``mask`` (the
    layer's :func:`block_mask`); GQA by ``enable_gqa`` (Ainslie et al. 2023).

    Args:
        query ``(batch, heads, q, d)``, key and value ``(batch, kv_heads, k, d)`` in one float dtype; scaling: the
            family's (None: ``1/√d``); compiled: through ``torch.compile`` (once per process; shapes kept in
            :data:`COMPILE_SECONDS` with the seconds of their first call).

    Returns:
        ``(batch, heads, q, d_v)`` in the query's dtype, a query with no allowed key given 0; None when
        ``torch.compile`` failed (no C++ compiler, an inductor error: remembered, later calls are refused by
        :func:`refusal`).
    """
    from torch.nn.attention.flex_attention import flex_attention

    gqa = query.shape[1] != key.shape[1]
    if not compiled:
        return flex_attention(query, key, value, block_mask=mask, scale=scaling, enable_gqa=gqa)
    if "fn" not in _COMPILED:
        _COMPILED["fn"] = torch.compile(flex_attention, dynamic=False)
    shape = _shape(query, key)
    start = time.perf_counter()
    try:
        out = _COMPILED["fn"](query, key, value, block_mask=mask, scale=scaling, enable_gqa=gqa)
    except RuntimeError as exc:  # no compiler, or inductor failed (dynamo's errors are RuntimeErrors)
        _COMPILED["failed"] = type(exc).__name__
        return None
    if shape not in COMPILE_SECONDS:
        COMPILE_SECONDS[shape] = time.perf_counter() - start
    return out
