"""Where each layer's attention output joins the residual stream, and how the last residual stream becomes logits:
found once per model by a probe pass (:func:`flow_layout`), from the modules' own inputs and outputs, never from a
table of class names.

Three ways a self-attention layer adds its output ``o`` (the output projection's output) to the residual stream
``x`` are recognised, each proven on the probe:

* ``pre`` (GPT-2, Llama, T5, parallel attention as in GPT-J): ``x_mid = x + o``. Proven by a module of the
  layer whose input is ``x + o`` (the next norm), or whose output is ``x_out - x - o`` (a parallel MLP).
* ``sandwich`` (Gemma 2/3: a norm on the attention output, Team Gemma 2024): ``x_mid = x + N(o)``: a norm
  whose input is ``o``.
* ``post`` (BERT, BART: post-LN, Vaswani et al. 2017): ``x_mid = N(x + o)``: a norm whose input is ``x + o``
  and whose output is what the layer goes on with. With a post-LN layer the layer's output norm (``after``)
  is found too: ``x_out = N'(x_mid + ffn)``.

Anything else (a hybrid block without attention, a layer shared between depths, heads mixed before the
projection, a fallback-path model) is refused with the reason.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from ..capture.context import Hook, rerun
from ..errors import UnsupportedOperationError
from ..sites.inputs import probe_inputs
from .norms import freeze
from ..sites.site import layer_block
from .tensors import close as _close, first_tensor, input_tensor, tolerance

if TYPE_CHECKING:
    from ..loading.model import LoadedModel

_PROBE_LOCK = threading.Lock()  # one probe at a time: its result is kept on the shared model
WHY = {  # reason key -> why there is no flow / no logit lens (the interface shows ``flow_why_<key>``)
    "hybrid": "some of its blocks have no attention (a hybrid model): their mixing of positions is not seen",
    "shared": "one layer is used at several depths (ALBERT)",
    "mixed": "its heads are mixed before the output projection (DiffLlama)",
    "placement": "an attention output does not join the residual stream in a way the flow recognises",
    "no_head": "the model has no token head (no logits)",
    "no_unembedding": "no unembedding was found",
    "not_rebuilt": "the logits could not be rebuilt from the last residual stream",
    "other_stack": "the model's head reads the other stack",
    "post_cross": "its post-LN layers pass the residual stream through norms around the cross-attention, which the "
                  "flow does not freeze",
}


@dataclass(frozen=True)
class LayerLayout:
    """One self-attention layer's place in the residual stream (module names as in ``model.named_modules()``).

    Attributes:
        block: the layer (the module whose input is the residual stream ``x`` and whose output is ``x_out``).
        o_proj: the output projection (input: the heads' outputs side by side, ``(n, heads · head_dim)``).
        kind: ``pre``, ``sandwich`` or ``post`` (see the module docstring).
        post: ``sandwich``/``post``: the norm between the projection and the residual stream.
        after: ``post``: the norm that makes the layer's output (``x_out = N'(x_mid + ffn)``), else None.
        after_reads_mid: ``post``: ``after``'s input is the stream after the attention plus one module's output
            (the MLP's), so ``after`` frozen carries that stream; False in a decoder layer with cross-attention (and
            its own norm) between.
    """

    block: str
    o_proj: str
    kind: str
    post: str | None = None
    after: str | None = None
    after_reads_mid: bool = False


@dataclass
class FlowLayout:
    """What :func:`flow_layout` found.

    Attributes:
        layers: ``(stack, layer) -> LayerLayout`` of every self-attention layer it could place.
        refused: ``stack -> reason key`` (:data:`WHY`) for stacks it could not place (no flow for them);
            ``placed`` says which layer and why, in English.
        head_stack: the stack whose last residual stream the model's head reads (``decoder`` for causal LMs and
            encoder-decoders, ``encoder`` for masked LMs), None for a model without a token head.
        head: how that stream becomes logits: ``("module", name)`` (one module does it all: BERT's MLM head),
            ``("chain", norm, lm_head, factor)`` (a final norm, a scalar, the unembedding: most decoders; T5's
            ``d_model ** -0.5``), None when neither reproduces the model's logits (``head_refused``: a reason key
            of :data:`WHY`).
        softcap: the final logit soft-capping value (Gemma 2: ``c · tanh(logits / c)``), else None.
    """

    layers: dict[tuple[str, int], LayerLayout] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    placed: dict[str, str] = field(default_factory=dict)
    head_stack: str | None = None
    head: tuple | None = None
    head_refused: str | None = None
    softcap: float | None = None


def _is_norm(module) -> bool:
    return "norm" in type(module).__name__.lower()


def _head_stack(loaded: LoadedModel) -> str | None:
    if loaded.head == "mlm":
        return "encoder"
    if loaded.head in ("lm", "seq2seq"):
        return "decoder"
    return None


def flow_layout(loaded: LoadedModel) -> FlowLayout:
    """The :class:`FlowLayout` of ``loaded``, probed once and kept in ``loaded.probes["flow"]``.

    Raises:
        UnsupportedOperationError: a fallback-path model (its attention does not route through the
            interface, so the values each head read are not seen).
    """
    if loaded.capture_path != "interface":
        raise UnsupportedOperationError(
            f"Model '{loaded.name}' runs on the fallback path: the information flow needs the values each head "
            "read, which only the attention interface hands over.", code="flow_needs_interface", model=loaded.name)
    found = loaded.probes.get("flow")
    if found is None:
        with _PROBE_LOCK:
            found = loaded.probes.get("flow")
            if found is None:
                found = loaded.probes["flow"] = _probe(loaded)
    return found


def _probe(loaded: LoadedModel) -> FlowLayout:
    model = loaded.model
    layout = FlowLayout(head_stack=_head_stack(loaded))
    sites = [s for s in loaded.sites if s.stack != "cross"]
    modules = dict(model.named_modules())
    seen: dict[str, tuple] = {}
    tol = tolerance(loaded.dtype)

    def keep(name):
        def hook(_module, args, kwargs, out):
            if name not in seen:
                seen[name] = (input_tensor(args, kwargs), first_tensor(out))
        return hook

    # own: this probe's own call only, the model is shared between sessions
    hooks = [Hook(m, keep(n), with_kwargs=True, own=True) for n, m in modules.items() if n]
    with rerun(loaded, hooks=hooks) as state:
        state.outputs = {}
        outputs = model(**probe_inputs(loaded), **loaded.call_kwargs)
    labels = loaded.layer_labels()
    for stack in {s.stack for s in sites}:
        why = None
        if stack in labels:
            why = "hybrid"
        elif any(s.index is None and s.stack == stack for s in sites) and len({layer_block(s.name) for s in sites
                                                                                 if s.stack == stack}) < len(
                [s for s in sites if s.stack == stack]):
            why = "shared"
        elif any(s.mixed_heads for s in sites if s.stack == stack):
            why = "mixed"
        if why:
            layout.refused[stack] = why
    for site in sites:
        if site.stack in layout.refused:
            continue
        placed = _place(site, seen, modules, state.outputs.get((site.stack, site.layer)), tol)
        if isinstance(placed, str):
            layout.refused.setdefault(site.stack, "placement")
            layout.placed.setdefault(site.stack, f"layer {site.layer}: {placed}")
        else:
            layout.layers[(site.stack, site.layer)] = placed
    for stack in layout.refused:
        layout.layers = {k: v for k, v in layout.layers.items() if k[0] != stack}
    _find_head(loaded, layout, seen, modules, outputs, tol)
    return layout


def _place(site, seen: dict, modules: dict, out: torch.Tensor | None, tol: float) -> LayerLayout | str:
    """The :class:`LayerLayout` of one site, or why there is none."""

    def close(a, b):
        return _close(a, b, tol)

    block = layer_block(site.name)
    x, x_out = seen.get(block, (None, None))
    if x is None or x_out is None or out is None:
        return "its layer's input or output was not seen"
    inside = [n for n in seen if n.startswith(block + ".")]
    o_proj = site.o_proj  # proven at load time (models.anatomy.gates)
    if o_proj is None or o_proj not in seen:
        return "no output projection takes the attention output as it is"
    o = seen[o_proj][1]
    norms = [n for n in inside if _is_norm(modules[n])]
    for n in norms:
        if close(seen[n][0], o):
            return LayerLayout(block, o_proj, "sandwich", post=n)
    # post-LN: a norm takes x + o and the layer's output is a norm's output (in a pre-LN layer the norm that takes
    # x + o feeds the MLP, and the output is a sum)
    after = next((m for m in norms if close(seen[m][1], x_out)), None)
    for n in norms:
        if after is not None and n != after and close(seen[n][0], x + o):
            x_mid = seen[n][1]
            ffn = seen[after][0] - x_mid  # the MLP's output, when nothing else joins between
            reads_mid = any(close(seen[m][1], ffn) for m in inside if m not in (n, after))
            return LayerLayout(block, o_proj, "post", post=n, after=after, after_reads_mid=reads_mid)
    rest = x_out - x - o
    if any(close(seen[n][0], x + o) or close(seen[n][1], rest) for n in inside):
        return LayerLayout(block, o_proj, "pre")
    return "the attention output does not join the residual stream in a way it recognises"


def _find_head(loaded: LoadedModel, layout: FlowLayout, seen: dict, modules: dict, outputs, tol: float) -> None:
    """Fill ``layout.head``: how the head stack's last residual stream becomes the model's logits."""
    stack = layout.head_stack
    if stack is None:
        layout.head_refused = "no_head"
        return
    last = max((k for k in layout.layers if k[0] == stack), default=None, key=lambda k: k[1])
    logits = getattr(outputs, "logits", None)
    if last is None or logits is None:
        layout.head_refused = layout.refused.get(stack, "no_head")
        return
    x_last = seen[layout.layers[last].block][1]
    cfg = loaded.text_config
    cap = getattr(cfg, "final_logit_softcapping", None)
    layout.softcap = float(cap) if cap else None

    def capped(t):
        return t if layout.softcap is None else torch.tanh(t / layout.softcap) * layout.softcap

    layers_root = layout.layers[last].block.rsplit(".", 1)[0]
    for name, (inp, out) in seen.items():  # one module from the last stream to the logits (BERT's MLM head)
        if name and not name.startswith(layers_root) and _close(inp, x_last, tol) and out is not None \
                and out.shape == logits.shape and _close(capped(out.float()), logits, tol):
            layout.head = ("module", name)
            return
    lm = next((n for n, m in modules.items() if m is loaded.model.get_output_embeddings()), None)
    if lm is None or lm not in seen:
        layout.head_refused = "no_unembedding"
        return
    lm_in = seen[lm][0].float()
    for name, (inp, out) in seen.items():
        if not (name and _is_norm(modules[name]) and _close(inp, x_last, tol) and out is not None
                and out.shape == lm_in.shape):
            continue
        out = out.float()
        factor = float((lm_in * out).sum() / (out * out).sum().clamp_min(1e-30))
        if (_close(out * factor, lm_in, tol)
                and freeze(modules[name], inp[0].float().cpu(), out[0].cpu(), atol=tol) is not None):
            layout.head = ("chain", name, lm, factor)
            return
    layout.head_refused = "not_rebuilt"
