"""Replacing the mask of a stack that does not route through transformers' ``AttentionInterface``, where a
probe proves how.

A fallback-path model (and the encoder of an interface-path model whose encoder does not route, such as
BigBird-Pegasus) builds its attention mask itself, from the ``attention_mask`` it is called with. Two ways
in, tried in this order:

1. **The ``attention_mask`` argument** (encoder-only and decoder-only models). Many accept a per-query
   mask there, in different forms: BERT-era models turn a 3-D ``(batch, query, key)`` 0/1 mask into an
   additive one (``ModuleUtilsMixin.get_extended_attention_mask``), others take a 4-D additive float mask
   or a 4-D 0/1 mask as it is.
2. **At the softmax** (form ``softmax``): the model's attention module computes its weights as
   ``softmax(scores + own mask)``; Dikkat adds ``-inf`` at the keys the replaced mask forbids to the
   softmax's input, inside that module only (a ``torch.overrides.TorchFunctionMode`` entered by a forward
   pre-hook of the module). The weights are then ``softmax`` over the keys both masks allow, which is
   the definition of masked attention (Vaswani et al. 2017, §3.2.3: illegal connections set to −∞ before
   the softmax). The module of each layer is found by a probe: the softmax whose output equals that
   layer's ``output_attentions`` tensor. Works for BLOOM, DeBERTa, XLM, XLNet, OpenAI-GPT and the
   encoder-decoders on this path (FSMT, MVP...).

A model may also combine what it gets with its own causal mask (decoders); then only masks within the
causal mask apply as given (scope ``causal``).

:func:`mask_support` finds out which way a model takes by a probe: it runs the model on a short text with
a mask that allows an irregular set of keys (some keys after the query, some before it not) each way, and
accepts the first under which every layer's eager weights of the stack are exactly 0 on the masked keys,
positive on the allowed ones and sum to 1 per row. If none passes, it tries the same pattern cut to the
causal mask. The answer is kept on the model (one probe per model).
"""

from __future__ import annotations

import contextvars
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch.overrides import TorchFunctionMode

from .. import checks
from ..sites.inputs import probe_inputs
from ..sites.maps import attention_tuples
from ..sites.site import GATE_SOFTMAX
from .context import rerun
from .state import ON_EXIT, current
from .state import per_head as _per_head

FORMS = ("3d", "4d_additive", "4d_binary")
_LOCK = threading.Lock()
_SOFTMAXES = (torch.nn.functional.softmax, torch.softmax, torch.Tensor.softmax, torch.special.softmax)


def as_argument(allowed: torch.Tensor, form: str, dtype: torch.dtype, device) -> torch.Tensor:
    """The ``attention_mask`` argument that means ``allowed`` for a model taking ``form``.

    Args:
        allowed: bool ``(n, n)``, True where query ``i`` may attend key ``j``.
        form: ``3d`` (long ``(1, n, n)`` of 0/1), ``4d_additive`` (``dtype`` ``(1, 1, n, n)``: 0 allowed, the
            dtype's minimum masked) or ``4d_binary`` (long ``(1, 1, n, n)`` of 0/1).
        dtype: the model's compute dtype (for the additive form). device: where the model runs.

    Returns:
        the tensor to pass as ``attention_mask``.
    """
    allowed = allowed.to(device)
    if form == "3d":
        return allowed[None].long()
    if form == "4d_binary":
        return allowed[None, None].long()
    if form == "4d_additive":
        out = torch.zeros(allowed.shape, dtype=dtype, device=device)
        out.masked_fill_(~allowed, torch.finfo(dtype).min)
        return out[None, None]
    raise ValueError(f"unknown mask form {form!r}")


def probe_pattern(n: int, causal: bool) -> torch.Tensor:
    """The probe's mask, bool ``(n, n)``: each query attends itself and an irregular set of other keys
    (``(3 i + 5 j) mod 4 != 0``), keys after it included unless ``causal``."""
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    allowed = ((3 * i + 5 * j) % 4 != 0) | (i == j)
    return allowed & (j <= i) if causal else allowed


def _obeys(tensors, allowed: torch.Tensor) -> bool:
    """Every (batch, heads, n, n) weight tensor is 0 exactly where ``allowed`` is False, positive where it
    is True, and sums to 1 per row."""
    if not tensors:
        return False
    allowed = allowed.cpu()
    for t in tensors:
        if t is None or t.dim() != 4 or tuple(t.shape[-2:]) != tuple(allowed.shape):
            return False
        w = t[0].float().cpu()
        if not (w[:, ~allowed] == 0).all() or not (w[:, allowed] > 0).all():
            return False
        if not torch.allclose(w.sum(-1), torch.ones(()), atol=1e-4):
            return False
    return True


class _Applying:
    """What :func:`applying` set for this context: ``stack -> bool (n, n)``."""

    def __init__(self, masks: dict[str, torch.Tensor]):
        self.masks = masks


_APPLYING: contextvars.ContextVar[_Applying | None] = contextvars.ContextVar("dikkat_softmax_masks", default=None)
# the modes entered by the pre-hooks of the attention modules now running in this context, innermost last
_ENTERED: contextvars.ContextVar[tuple] = contextvars.ContextVar("dikkat_softmax_modes", default=())


class _AtSoftmax(TorchFunctionMode):
    """Active while one attention module runs (one that computes exactly one softmax per call, proven by
    :func:`softmax_modules`). At its softmax over the last axis: with ``allowed`` ``(n, n)`` and scores of
    that shape, adds ``-inf`` at the keys it forbids to the input (a row with no allowed key gives zero
    weights, not NaN, as on the interface path); hands the weights to ``record`` (when given) as ``(batch,
    heads, q, k)``; then, with a ``gate`` ``(heads,)``, multiplies head ``h``'s weights by ``gate[h]`` (0
    switches it off: its output ``A_h · V_h`` is 0; the head mask of Michel et al. 2019, §2, which
    transformers' ``head_mask`` applies at the same place)."""

    def __init__(self, allowed: torch.Tensor | None, gate: torch.Tensor | None, heads: int, record=None,
                 local: bool = False):
        super().__init__()
        self.allowed, self.gate, self.heads, self.record, self.local = allowed, gate, heads, record, local

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not (func in _SOFTMAXES and args and _over_last_axis(args, kwargs)):
            return func(*args, **kwargs)
        x = args[0]
        allowed = None if self.allowed is None else self.allowed.to(x.device)
        if allowed is not None and self.local and x.dim() == 4 and x.shape[1] >= allowed.shape[0]:
            # Longformer's local windows, (batch, tokens, heads, 2w + 1): column c of row i is key i + c - w
            window = local_window(allowed, x.shape[1], (x.shape[-1] - 1) // 2)
            out = func(x.masked_fill(~window[None, :, None, :], float("-inf")), *args[1:], **kwargs)
            empty = ~window.any(-1)
            if bool(empty.any()):
                out = out.masked_fill(empty[None, :, None, None], 0)
            return out
        if allowed is not None and tuple(x.shape[-2:]) == tuple(allowed.shape):
            out = func(x.masked_fill(~allowed, float("-inf")), *args[1:], **kwargs)
            empty = ~allowed.any(-1)
            if bool(empty.any()):
                out = out.masked_fill(empty[:, None], 0)
        else:
            out = func(*args, **kwargs)
        per_head = out.reshape(-1, self.heads, *out.shape[-2:])
        if self.record is not None:
            self.record(per_head)
        if self.gate is not None:
            gate = self.gate.to(device=out.device, dtype=out.dtype)
            gate = _per_head(gate, per_head.shape[0])
            out = (per_head * gate[:, :, None, None]).reshape(out.shape)
        return out


def local_window(allowed: torch.Tensor, tokens: int, w: int) -> torch.Tensor:
    """A mask ``allowed`` bool ``(n, n)`` in the layout of a sliding-window attention's scores (Longformer,
    Beltagy et al. 2020, §3.1): bool ``(tokens, 2w + 1)``, column ``c`` of row ``i`` standing for key
    ``i + c - w``. Keys outside the text are forbidden; rows past the text (the model's padding) keep every
    column. A key farther than ``w`` from its query has no column: the model never attends it."""
    n = allowed.shape[0]
    i = torch.arange(tokens, device=allowed.device)[:, None]
    j = i + torch.arange(2 * w + 1, device=allowed.device)[None, :] - w
    inside = (i < n) & (j >= 0) & (j < n)
    values = allowed[i.clamp(max=n - 1), j.clamp(0, n - 1)] & inside
    return torch.where(i < n, values, torch.ones_like(values))


def _enter(site):
    """Forward pre-hook of ``site``'s attention module: enters an :class:`_AtSoftmax` when this context
    replaces the stack's mask (:func:`applying`) or, for a site gated here (``Site.gate == "softmax"``), switches
    some of its heads off (``capture``'s gates)."""
    def pre_hook(module, args):
        # the module's site now: a layer whose heads moved to its output projection after the hooks were installed
        # (models.anatomy.whole_head) is no longer gated here
        site_now = getattr(module, "_dikkat_softmax_site", None) or site
        applying_now = _APPLYING.get()
        allowed = applying_now.masks.get(site_now.stack) if applying_now is not None else None
        state = current()
        gated_here = state is not None and site_now.gate == GATE_SOFTMAX
        gate = state.gates.get((site_now.stack, site_now.layer)) if gated_here else None
        read = state is not None and site_now.read_at_softmax
        if allowed is None and gate is None and not read:
            return
        record = None
        if gate is not None or read:
            def record(weights, state=state):
                state.at_softmax[(site_now.stack, site_now.layer)] = weights.detach()
        mode = _AtSoftmax(allowed, gate, site_now.heads, record,
                          local=getattr(module, "_dikkat_local_window", False))
        mode.__enter__()
        _ENTERED.set(_ENTERED.get() + ((module, mode),))

    return pre_hook


def _leave(module, args, output):
    entered = _ENTERED.get()
    if entered and entered[-1][0] is module:
        _ENTERED.set(entered[:-1])
        entered[-1][1].__exit__(None, None, None)


def exit_all() -> None:
    """Leave every mode the pre-hooks entered in this context, innermost first. torch runs ``always_call``
    forward hooks only when a forward pass raises an ``Exception``: a ``KeyboardInterrupt`` (a stopped
    notebook cell) or Streamlit's rerun/stop would skip :func:`_leave` and leave a mode masking every later
    softmax of the thread. :func:`applying` and :func:`models.capture.capture` call this when they end (``ON_EXIT``)."""
    entered = _ENTERED.get()
    _ENTERED.set(())
    for _, mode in reversed(entered):
        mode.__exit__(None, None, None)


ON_EXIT.append(exit_all)


def install_softmax_hooks(site, module) -> None:
    """Register :func:`_enter` / :func:`_leave` on ``site``'s attention module (once per module)."""
    if getattr(module, "_dikkat_softmax_site", None) is None:
        module.register_forward_pre_hook(_enter(site))
        module.register_forward_hook(_leave, always_call=True)
        module._dikkat_softmax_site = site


@contextmanager
def applying(masks: dict[str, torch.Tensor]):
    """Context in which the softmax hooks (:func:`mask_support`) apply ``masks`` (``stack -> bool (n, n)``,
    True where a query may attend a key) to the stacks' attention modules. Per context (thread), never
    global."""
    token = _APPLYING.set(_Applying(dict(masks)))
    try:
        yield
    finally:
        exit_all()
        _APPLYING.reset(token)


class _Recorder(TorchFunctionMode):
    """Probe: records ``(innermost running module, output)`` of every softmax over the last axis."""

    def __init__(self, running: list):
        super().__init__()
        self.running, self.calls = running, []  # type: list, list

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func in _SOFTMAXES and self.running and _over_last_axis(args, kwargs):
            self.calls.append((self.running[-1], out))
        return out


def _over_last_axis(args, kwargs) -> bool:
    """A softmax call's arguments take it over the last axis of a tensor of 2 or more dimensions (not, e.g.,
    ConvBERT's softmax over its convolution kernel's axis 1)."""
    x = args[0] if args else kwargs.get("input")
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    return isinstance(x, torch.Tensor) and isinstance(dim, int) and x.dim() >= 2 and dim % x.dim() == x.dim() - 1


def softmax_modules(loaded, inputs: dict, stacks: set[str], scores: set[str] | frozenset[str] = frozenset(),
                    ) -> dict[str, list]:
    """``stack -> [module per layer]``: for each stack in ``stacks``, the module whose softmax output is that
    layer's ``output_attentions`` tensor (as it is, or ``(batch · heads, q, k)`` reshaped: FSMT), found by one
    probe pass. A stack is left out when some layer has no such module, one module serves two layers, or a
    module computes more than one softmax per call (its weights would be gated or masked twice). For a stack in
    ``scores`` the model returns the scores before the softmax (ProphetNet, SqueezeBERT): the module's softmax
    output must then equal their softmax (float32, within 1e-6)."""
    running: list = []

    def push(module, args):
        running.append(module)

    def pop(module, args, output):
        running.pop()

    handles = []
    for module in loaded.model.modules():
        handles.append(module.register_forward_pre_hook(push))
        handles.append(module.register_forward_hook(pop, always_call=True))
    recorder = _Recorder(running)
    try:
        with torch.no_grad(), checks.index_guard(), recorder:  # a failing probe fails alike on a GPU: see _probe_run
            out = loaded.model(**inputs, output_attentions=True, return_dict=True)
    except Exception:  # noqa: BLE001 - the probe does not run: no softmax form
        return {}
    finally:
        for h in handles:
            h.remove()
    calls: dict[int, int] = {}
    for m, _ in recorder.calls:
        calls[id(m)] = calls.get(id(m), 0) + 1
    found: dict[str, list] = {}
    raw = attention_tuples(out, loaded.family)  # Longformer / LED: the local windows as the model returns them
    for stack, tensors in attention_tuples(out, loaded.family, loaded.model.config).items():
        if stack not in stacks:
            continue
        modules = []
        for layer, t in enumerate(tensors):
            if not isinstance(t, torch.Tensor):
                break
            local = raw.get(stack, ())[layer] if layer < len(raw.get(stack, ())) else None
            if isinstance(local, torch.Tensor) and local.shape != t.shape:
                # softmax over (batch, tokens, heads, 2w + 1) windows: the returned map is its transpose, cut to
                # the text (the model pads it to a multiple of its window inside)
                def same_window(o, local=local) -> bool:
                    if o.dim() != 4 or o.shape[-1] != local.shape[-1] or o.shape[1] < local.shape[2]:
                        return False
                    return torch.equal(o.transpose(1, 2)[:, :, :local.shape[2]].to(local.dtype), local)

                match = next((m for m, o in recorder.calls if same_window(o)), None)
                if match is None or match in modules or calls.get(id(match)) != 1:
                    break
                match._dikkat_local_window = True
                modules.append(match)
                continue
            if stack in scores:
                want = torch.softmax(t.float(), -1)
                same = lambda o, want=want: torch.allclose(o.reshape(want.shape).float(), want, atol=1e-6, rtol=0)  # noqa: E731
            else:
                same = lambda o, t=t: torch.equal(o.reshape(t.shape).to(t.dtype), t)  # noqa: E731
            match = next((m for m, o in recorder.calls  # (batch · heads, q, k) in some models (FSMT)
                          if o.numel() == t.numel() and o.shape[-2:] == t.shape[-2:] and same(o)), None)
            if match is None or match in modules or calls.get(id(match)) != 1:
                break
            modules.append(match)
        else:
            found[stack] = modules
    return found


@dataclass(frozen=True)
class MaskSupport:
    """How a model's stacks take a replaced mask (:func:`mask_support`).

    Attributes:
        form: ``3d`` / ``4d_additive`` / ``4d_binary`` (the ``attention_mask`` argument, :func:`as_argument`)
            or ``softmax`` (at the attention modules' softmax, :func:`applying`).
        scopes: ``stack -> "any"`` (every mask is applied as given) or ``"causal"`` (the model combines it with
            its own causal mask: only masks within the causal mask are applied as given). A stack not listed
            cannot take a replaced mask.
    """

    form: str
    scopes: dict[str, str] = field(default_factory=dict)


def _probe_ids(loaded, inputs: dict) -> dict:
    """The probe's inputs with a 12-token text (and a 10-token decoder input for an encoder-decoder), called
    as every analysis calls the model (``LoadedModel.call_kwargs``)."""
    ids = loaded.tokenizer("the cat chased the mouse and the dog", return_tensors="pt")["input_ids"][:, :12]
    inputs = dict(inputs, input_ids=ids.to(loaded.device), **loaded.call_kwargs)
    if "decoder_input_ids" in inputs:
        start = inputs["decoder_input_ids"][0, 0]
        inputs["decoder_input_ids"] = start.repeat(1, 10)
    return inputs


def _lengths(inputs: dict) -> dict[str, int]:
    n = inputs["input_ids"].shape[1]
    out = {"encoder": n, "decoder": n}
    if "decoder_input_ids" in inputs:
        out["decoder"] = inputs["decoder_input_ids"].shape[1]
    return out


def eager_maps(loaded, outputs, state) -> dict[str, tuple]:
    """``stack -> per-layer (batch, heads, queries, keys)`` weights of the stacks read from eager
    ``output_attentions``: the model's own tensors, except for a layer whose weights were recorded at its
    softmax in ``state`` (a :class:`models.capture.CaptureState`; ``at_softmax``: read there, or heads
    switched off there), which gives those."""
    maps = attention_tuples(outputs, loaded.family, loaded.model.config)
    return {stack: tuple(state.at_softmax.get((stack, i), t) for i, t in enumerate(tensors))
            for stack, tensors in maps.items()}


def _probe_run(loaded, inputs: dict, masks: dict | None = None, **extra) -> dict[str, tuple]:
    """One probe pass (``masks`` applied at the softmax, ``extra`` added to the inputs): the eager maps.

    Run under :func:`models.checks.index_guard`: a mask form the model does not take may make its code index out of
    range (Longformer reads a 3-D mask as its 2-D padding mask over its padded length, ``mask[batch, key]`` with
    keys up to 511 of 12). The probe catches the failure and tries the next form; on the CPU torch raises an
    IndexError, but a GPU kernel asserts on the device, after which no CUDA call of the process works. The guard
    raises the IndexError before the kernel runs, on every device."""
    with checks.index_guard(), rerun(loaded) as state, applying(masks or {}):
        out = loaded.model(**inputs, **extra, output_attentions=True, return_dict=True)
    return eager_maps(loaded, out, state)


def mask_support(loaded) -> MaskSupport | None:
    """How ``loaded``'s stacks that do not route through the interface take a replaced mask, found by a
    probe once (see the module's docstring).

    Args:
        loaded: a :class:`models.LoadedModel` on the fallback path, or on the interface path with
            ``fallback_stacks``.

    Returns:
        a :class:`MaskSupport`, or None when no way passes the probe for any stack (the mask cannot be
        replaced).
    """
    with _LOCK:
        if "fallback_mask" in loaded.probes:
            return loaded.probes["fallback_mask"]
    stacks = set(loaded.stacks if loaded.capture_path == "fallback" else loaded.fallback_stacks) - {"cross"}
    answer = None
    if stacks and "input_ids" in probe_inputs(loaded):
        inputs = _probe_ids(loaded, probe_inputs(loaded))
        n = _lengths(inputs)
        if loaded.family in ("encoder", "decoder") and loaded.capture_path == "fallback":
            stack = next(iter(stacks))
            for causal in (False, True):
                allowed = probe_pattern(n[stack], causal)
                for form in FORMS:
                    try:
                        maps = _probe_run(loaded, inputs, attention_mask=as_argument(allowed, form, loaded.dtype,
                                                                                     loaded.device))
                    except Exception:  # noqa: BLE001 - a form the model's code does not take
                        continue
                    if _obeys(maps.get(stack), allowed):
                        answer = MaskSupport(form, {stack: "causal" if causal else "any"})
                        break
                if answer:
                    break
        if answer is None:
            answer = _softmax_support(loaded, inputs, stacks, n)
    with _LOCK:
        loaded.probes["fallback_mask"] = answer
    return answer


def _softmax_support(loaded, inputs: dict, stacks: set[str], n: dict[str, int]) -> MaskSupport | None:
    """The ``softmax`` form: hooks on the modules found by :func:`softmax_modules`, proven per stack."""
    scores = {site.stack for site in loaded.sites if site.read_at_softmax}
    modules = softmax_modules(loaded, inputs, stacks, scores)
    if not modules:
        return None
    sites = {(site.stack, site.layer): site for site in loaded.sites}
    for stack, mods in modules.items():
        for layer, m in enumerate(mods):
            install_softmax_hooks(sites[(stack, layer)], m)
    scopes: dict[str, str] = {}
    for causal in (False, True):
        todo = {s: probe_pattern(n[s], causal) for s in modules if s not in scopes}
        if not todo:
            break
        try:
            maps = _probe_run(loaded, inputs, todo)
        except Exception:  # noqa: BLE001 - the model does not run with the masks
            continue
        for s, allowed in todo.items():
            if _obeys(maps.get(s), allowed):
                scopes[s] = "causal" if causal else "any"
    return MaskSupport("softmax", scopes) if scopes else None
