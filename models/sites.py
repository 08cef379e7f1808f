"""Where a loaded model's attention is, and how each head is switched off and each mask replaced.

At load time a probe forward pass finds every attention module (:func:`discover_sites`): on the interface
path the modules that call transformers' ``AttentionInterface`` (Dikkat's function records their weights);
on the fallback path the model's own eager ``output_attentions``, checked to be token-by-token probability
maps (:func:`_check_maps`), with each layer's output projection found and proven (:func:`_find_out_projs`)
or the layer's softmax found (:mod:`models.fallback_masks`). Encoder-decoders are checked for a causal
decoder (:func:`decoder_call`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import torch

from . import capture, fallback_masks, head_gates
from .head_gates import linear_width as _linear_width
from .errors import NoAttentionWeightsError

if TYPE_CHECKING:
    from .loading import LoadedModel


def accepts(model, name: str) -> bool:
    """True when ``model.forward`` takes a keyword argument ``name``."""
    import inspect

    try:
        return name in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def probe_inputs(loaded: LoadedModel) -> dict[str, torch.Tensor]:
    """A tiny input that exercises every attention module once."""
    model, tok = loaded.model, loaded.tokenizer
    ids = tok("probe text", return_tensors="pt")["input_ids"][:, :8]
    inputs: dict[str, torch.Tensor] = {}
    if loaded.input_name == "input_features":
        cfg = model.config
        inputs["input_features"] = torch.zeros(1, cfg.num_mel_bins, 2 * cfg.max_source_positions, dtype=loaded.dtype)
    else:
        inputs["input_ids"] = ids
    if loaded.family == "encoder-decoder":
        start = loaded.decoder_start_id
        inputs["decoder_input_ids"] = torch.tensor([[start, start]])
    inputs = {k: v.to(loaded.device) for k, v in inputs.items()}
    if loaded.family == "decoder" and accepts(model, "use_cache"):
        inputs["use_cache"] = False  # one pass: a hybrid model's cache may not even answer get_seq_length
    return inputs


def discover_sites(loaded: LoadedModel) -> None:
    """Run a probe forward pass and fill ``loaded.sites`` / ``capture_path``.

    Raises:
        NoAttentionWeightsError: no attention module routes through the interface and the model
            returns no attention weights with ``output_attentions=True`` either; or what it has is not a
            token-by-token map (self-attention with extra keys, layers of a stack with different head
            counts, fallback tensors that are not probability maps: :func:`_check_maps`).
    """
    model = loaded.model
    names = {id(m): n for n, m in model.named_modules()}
    inputs = probe_inputs(loaded)
    with torch.no_grad(), capture.probing() as state:
        outputs = model(**inputs)
    if state.probe:  # count each attention module's forward calls, then look again
        capture.install_call_counters(dict.fromkeys(m for m, *_ in state.probe))
        with torch.no_grad(), capture.probing() as state:
            outputs = model(**inputs)
    calls: dict[int, list] = {}  # id(module) -> [(module, query heads)] per call, in call order
    order = []
    for module, heads, q_len, k_len in state.probe or []:
        calls.setdefault(id(module), []).append((heads, q_len, k_len))
        order.append(module)
    if calls:
        # One site per call, numbered by depth within its stack: a hybrid model's attention layers are
        # 0 .. n - 1 (with their own block index kept as ``index``), a module called k times is k layers.
        loaded.capture_path = "interface"
        depth: dict[str, int] = {}
        per_module: dict[int, list[capture.Site]] = {}
        for module in order:
            mid = id(module)
            name = names.get(mid, type(module).__name__)
            stack = capture.stack_of(name, loaded.family)
            layer = depth.get(stack, 0)
            depth[stack] = layer + 1
            heads, q_len, k_len = calls[mid][len(per_module.get(mid, []))]
            if stack != "cross" and q_len != k_len:
                raise NoAttentionWeightsError(
                    f"Model '{loaded.name}' ({model.config.model_type}): {name} attends {k_len} keys from {q_len} "
                    "tokens (it adds keys of its own, e.g. compressed or memory slots), so its weights are not a "
                    "token-by-token map; Dikkat cannot show this architecture's attention.",
                    code="extra_key_slots", model=loaded.name, model_type=model.config.model_type, module=name,
                    keys=k_len, tokens=q_len
                )
            index = capture.layer_of(name) if len(calls[mid]) == 1 else None
            per_module.setdefault(mid, []).append(capture.Site(
                stack, layer, heads, name, index=None if index == layer else index,
                sink=isinstance(getattr(module, "sinks", None), torch.Tensor)))
        for stack in depth:
            counts = sorted({s.heads for sites in per_module.values() for s in sites if s.stack == stack})
            if len(counts) > 1:
                raise NoAttentionWeightsError(
                    f"Model '{loaded.name}' ({model.config.model_type}) has {stack} layers with different numbers of "
                    f"query heads ({', '.join(map(str, counts))}); Dikkat shows a stack as layers x heads maps of one "
                    "size and cannot show this architecture's attention yet.",
                    code="uneven_head_counts", model=loaded.name, model_type=model.config.model_type, stack=stack,
                    counts=", ".join(map(str, counts))
                )
        loaded.site_index = {mid: sites[0] if len(sites) == 1 else tuple(sites) for mid, sites in per_module.items()}
        sites = [s for sites in per_module.values() for s in sites]
        if loaded.family == "encoder-decoder" and "encoder" not in depth:
            sites += _encoder_from_outputs(loaded, inputs)
        loaded.sites = sorted(sites, key=lambda s: (("encoder", "decoder", "cross").index(s.stack), s.layer))
        head_gates.gate_points(loaded, inputs)
        return

    # Fallback path: eager + output_attentions.
    loaded.capture_path = "fallback"
    try:
        model.set_attn_implementation("eager")
    except Exception:  # older/odd classes: the config flag is what eager code paths read
        model.config._attn_implementation = "eager"
    with torch.no_grad():
        outputs = model(**inputs, output_attentions=True)
    stacks = attention_tuples(outputs, loaded.family, model.config)
    if not stacks:
        raise NoAttentionWeightsError(
            f"Model '{loaded.name}' ({model.config.model_type}) returns no attention weights: its architecture "
            "either has no softmax attention (e.g. state-space models) or cannot expose it.",
            code="no_attention_weights", model=loaded.name, model_type=model.config.model_type
        )
    stacks, read_at = _scores_to_weights(loaded, stacks, inputs)
    _check_maps(loaded, stacks, inputs)
    out_projs = _find_out_projs(model, stacks, inputs)
    # a stack with a layer whose output projection was not proven: its heads are switched off at the softmax
    # where one module per layer computes that layer's weights (models.fallback_masks)
    unproven = {stack for stack, tensors in stacks.items() if any((stack, i) not in out_projs for i in range(len(tensors)))}
    at_softmax = fallback_masks.softmax_modules(loaded, inputs, unproven, scores=set(read_at)) if unproven else {}
    sites = []
    for stack, tensors in stacks.items():
        for layer, w in enumerate(tensors):
            sites.append(capture.Site(stack, layer, int(w.shape[1]), name=f"{stack}.{layer}",
                                      out_proj=out_projs.get((stack, layer)),
                                      softmax_gate=(stack, layer) not in out_projs and stack in at_softmax,
                                      read_at_softmax=stack in read_at))
    loaded.sites = sites
    capture.install_fallback_hooks(model, sites)
    for site in sites:
        if site.softmax_gate or site.read_at_softmax:
            modules = read_at if site.read_at_softmax else at_softmax
            fallback_masks.install_softmax_hooks(site, modules[site.stack][site.layer])


def _rows_sum_to_one(t: torch.Tensor) -> bool:
    """Every row of ``t`` (..., keys) is finite and sums to 1 (within 1e-3), or to 0 (a query with no key)."""
    sums = t.float().sum(-1)
    return bool(torch.isfinite(sums).all() and ((sums - 1).abs().lt(1e-3) | sums.abs().lt(1e-6)).all())


def _scores_to_weights(loaded: LoadedModel, stacks: dict[str, tuple], inputs: dict) -> tuple[dict, dict]:
    """Some models return the attention scores before the softmax as their ``attentions`` (ProphetNet's
    encoder, SqueezeBERT: rows that do not sum to 1). Where one module per layer computes exactly the softmax
    of those scores (:func:`models.fallback_masks.softmax_modules`), the weights are that softmax, read there
    in every analysis.

    Returns:
        ``stacks`` with such stacks' tensors replaced by their softmax, and ``stack -> [module per layer]`` of
        the stacks read at the softmax.
    """
    def sums_to_one(t) -> bool:
        return not isinstance(t, torch.Tensor) or t.dim() != 4 or _rows_sum_to_one(t)  # else _check_maps says why

    suspects = {stack for stack, tensors in stacks.items() if not all(sums_to_one(t) for t in tensors)}
    read_at = fallback_masks.softmax_modules(loaded, inputs, suspects, scores=suspects) if suspects else {}
    out = {stack: tuple(torch.softmax(t.float(), -1).to(t.dtype) for t in tensors) if stack in read_at else tensors
           for stack, tensors in stacks.items()}
    return out, read_at


def _encoder_from_outputs(loaded: LoadedModel, inputs: dict) -> list[capture.Site]:
    """An encoder-decoder whose decoder routes through the interface but whose encoder does not (LongT5,
    BigBird-Pegasus, Pegasus-X): the encoder's sites when its eager ``output_attentions`` are token-by-token
    maps (:func:`_check_maps`), read in the same forward pass (``fallback_stacks``); else none, with the
    reason in ``missing_stacks``."""
    with torch.no_grad():
        outputs = loaded.model(**inputs, output_attentions=True)
    tensors = attention_tuples(outputs, loaded.family, loaded.model.config).get("encoder")
    why = None
    if not tensors:
        why = f"Model '{loaded.name}' ({loaded.model.config.model_type}) returns no encoder attention weights."
    else:
        try:
            _check_maps(loaded, {"encoder": tensors}, inputs)
        except NoAttentionWeightsError as exc:
            why = str(exc)
    if why:
        loaded.missing_stacks["encoder"] = (
            f"{why} Its encoder does not route through transformers' AttentionInterface either, so the encoder "
            "is not shown; the decoder and cross-attention are.")
        return []
    loaded.fallback_stacks = ("encoder",)
    out_projs = _find_out_projs(loaded.model, {"encoder": tensors}, inputs)  # proven, or none
    sites = [capture.Site("encoder", layer, int(w.shape[1]), name=f"encoder.{layer}",
                          out_proj=out_projs.get(("encoder", layer)))
             for layer, w in enumerate(tensors)]
    capture.install_fallback_hooks(loaded.model, sites)
    return sites


def _check_maps(loaded: LoadedModel, stacks: dict[str, tuple], inputs: dict) -> None:
    """Refuse what a fallback-path model returns as attention unless every tensor is a ``(batch, heads,
    queries, keys)`` probability map over the probe's own tokens: finite, each row summing to 1 (or 0 for a
    query with no allowed key). Local-window tensors (Longformer), pooled queries (Funnel), recurrent states
    (RWKV) and n-gram streams (ProphetNet) fail here instead of being shown as attention.

    Raises:
        NoAttentionWeightsError: naming the first tensor that is not such a map, and why.
    """
    n_in = next((int(v.shape[-1]) for k, v in inputs.items() if k == "input_ids"), None)
    n_dec = int(inputs["decoder_input_ids"].shape[-1]) if "decoder_input_ids" in inputs else None
    lengths = {"encoder": (n_in, n_in), "decoder": (n_dec, n_dec) if n_dec else (n_in, n_in), "cross": (n_dec, None)}
    for stack, tensors in stacks.items():
        for layer, w in enumerate(tensors):
            why = None
            q_len, k_len = lengths[stack]
            if not isinstance(w, torch.Tensor) or w.dim() != 4:
                why = f"a {getattr(w, 'shape', type(w).__name__)} value, not (batch, heads, queries, keys)"
            elif (q_len and w.shape[-2] != q_len) or (k_len and w.shape[-1] != k_len):
                why = f"shape {tuple(w.shape)} for {q_len} queries and {k_len or '?'} keys"
            elif not _rows_sum_to_one(w):
                sums = w.float().sum(-1)
                why = f"rows summing to {float(sums.min()):.3g} .. {float(sums.max()):.3g}, not 1"
            if why:
                raise NoAttentionWeightsError(
                    f"Model '{loaded.name}' ({loaded.model.config.model_type}) returns {stack} layer {layer}'s "
                    f"'attentions' as {why}: they are not attention weights over the tokens, so Dikkat cannot "
                    "show them as attention.",
                    code="not_attention_maps", model=loaded.name, model_type=loaded.model.config.model_type,
                    stack=stack, layer=layer, why=why
                )


def _find_out_projs(model, stacks: dict[str, tuple], inputs: dict) -> dict[tuple[str, int], str]:
    """Fallback path: for each layer of each stack, the output projection whose input holds the heads'
    outputs side by side, found by a probe and proven on it.

    One probe pass records the input and output of every linear map in the blocks of the model's layer lists.
    A map ``o`` is a layer's output projection when, for some linear map ``v`` of the same block (or a third
    of a fused query/key/value map), ``o``'s input equals ``A_h · V_h`` for every head ``h`` (``A_h``: the
    layer's returned weights, ``V_h``: head ``h``'s slice of ``v``'s output; Vaswani et al. 2017, eq. 1-2)
    within 1e-4. Zeroing head ``h``'s slice of that input then removes exactly that head's output. A stack is
    looked for in the layer lists as long as it (an encoder-decoder's decoder block holds both its
    self-attention and its cross-attention: each stack's own weights pick the right pair). A layer with no
    such pair (a norm between attention and projection, an interleaved fused map) gets none, and its heads
    cannot be switched off.

    Returns:
        ``(stack, layer) -> dotted name of the output projection`` for the layers where one was proven.
    """
    lists = _layer_lists(model)
    modules = dict(model.named_modules())
    seen: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def keep(name):
        def hook(_module, args, out) -> None:  # returns None: the output stays as it is
            if args and isinstance(args[0], torch.Tensor) and isinstance(out, torch.Tensor):
                seen.setdefault(name, (args[0].detach(), out.detach()))
        return hook

    prefixes = tuple(f"{name}.{i}." for name, length in lists for i in range(length))
    hooks = [module.register_forward_hook(keep(name)) for name, module in modules.items()
             if name.startswith(prefixes) and _linear_width(module)]
    try:
        with torch.no_grad():
            model(**inputs, output_attentions=True)
    except Exception:  # noqa: BLE001 - no projection found is a refusal later, never a failed load
        return {}
    finally:
        for hook in hooks:
            hook.remove()
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


def _out_proj_of(a: torch.Tensor, names: list[str], seen: dict) -> str | None:
    """The map among ``names`` whose input is ``A_h · V_h`` side by side for the weights ``a`` (heads, q, k),
    with ``V`` a slice of another map's output (see :func:`_find_out_projs`); None if there is none."""
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


def attention_tuples(outputs, family: str, config=None) -> dict[str, tuple]:
    """``stack -> per-layer (batch, heads, queries, keys) tensors`` of a model's eager ``output_attentions``.

    With the model's ``config``, local-window maps (Longformer, LED's encoder: ``config.attention_window``) are
    turned into full ``(queries, keys)`` maps (:func:`local_to_full`)."""
    stacks = {}
    if family == "encoder-decoder":
        for stack, attr in (("encoder", "encoder_attentions"), ("decoder", "decoder_attentions"), ("cross", "cross_attentions")):
            value = getattr(outputs, attr, None)
            if value:
                stacks[stack] = value
    else:
        value = getattr(outputs, "attentions", None)
        if value and all(v is not None for v in value):
            stacks["decoder" if family == "decoder" else "encoder"] = value
    window = getattr(config, "attention_window", None) if config is not None else None
    if window is not None and "encoder" in stacks:
        windows = list(window) if isinstance(window, (list, tuple)) else [window] * len(stacks["encoder"])
        stacks["encoder"] = tuple(local_to_full(t, int(w)) if t is not None and t.shape[-1] == int(w) + 1 else t
                                  for t, w in zip(stacks["encoder"], windows))
    return stacks


def local_to_full(local: torch.Tensor, window: int) -> torch.Tensor:
    """Longformer's local attention ``(batch, heads, n, window + 1)`` as full maps ``(batch, heads, n, n)``.

    Column ``c`` of query ``i`` holds the weight on key ``j = i + c - window / 2`` (Beltagy et al. 2020, §3.1;
    transformers' ``LongformerBaseModelOutput.attentions``: "the attention weight of a token to itself is
    located at index ``attention_window / 2``"); keys outside the text (the model's own padding to a multiple
    of the window) are dropped, and every other key gets 0. Only maps without global tokens (none are set by
    Dikkat) have exactly ``window + 1`` columns.

    Args:
        local: float ``(batch, heads, n, window + 1)``. window: the layer's ``attention_window`` (even).

    Returns:
        float ``(batch, heads, n, n)``, same dtype and device.
    """
    n, half = local.shape[-2], window // 2
    i = torch.arange(n, device=local.device)[:, None]
    j = torch.arange(n, device=local.device)[None, :]
    column = j - i + half
    inside = (column >= 0) & (column <= window)
    index = column.clamp(0, window).expand(*local.shape[:-2], n, n)
    return torch.where(inside, local.gather(-1, index), torch.zeros((), dtype=local.dtype, device=local.device))


def decoder_call(loaded: LoadedModel) -> dict:
    """An encoder-decoder's decoder must be causal: with the whole target as input (teacher forcing), a
    position's output may not depend on later target tokens. Probed by changing the last decoder token and
    comparing the outputs before it; a model whose decoder is causal only without a key/value cache (FSMT
    makes its causal mask only then) is run with ``use_cache=False``, the way it trains.

    Returns:
        ``{}``, or ``{"use_cache": False}``.

    Raises:
        NoAttentionWeightsError: the decoder is not causal either way (its maps would let a token see the
            tokens it is to predict).
    """
    if loaded.family != "encoder-decoder":
        return {}
    inputs = probe_inputs(loaded)
    start = inputs["decoder_input_ids"][0, 0]
    vocab = int(getattr(loaded.model.get_output_embeddings(), "out_features", 0) or 0) or 8
    a = torch.stack([start, torch.tensor((int(start) + 1) % vocab), torch.tensor((int(start) + 2) % vocab)])[None]
    b = a.clone()
    b[0, -1] = (int(start) + 3) % vocab
    for extra in ({}, {"use_cache": False}):
        if extra and not accepts(loaded.model, "use_cache"):
            break
        outs = []
        with torch.no_grad():
            for ids in (a, b):
                out = loaded.model(**dict(inputs, decoder_input_ids=ids.to(loaded.device)), return_dict=True, **extra)
                outs.append(out.logits if getattr(out, "logits", None) is not None else out.last_hidden_state)
        if torch.allclose(outs[0][:, :-1], outs[1][:, :-1], atol=1e-6, rtol=1e-5):
            return extra
    raise NoAttentionWeightsError(
        f"Model '{loaded.name}' ({loaded.model.config.model_type}): its decoder is not causal (a target token's "
        "output depends on later target tokens), so its maps would show tokens attending the tokens they are "
        "to predict.",
        code="decoder_not_causal", model=loaded.name, model_type=loaded.model.config.model_type)
