"""Head pruning: switch attention heads off and measure what changes.

Three measurements of how much each head matters, all returning numpy arrays and plain dataclasses:

* :func:`ablation_scores`: the change of a metric when that head alone is switched off. Computed in
  batches: the input is repeated ``B`` times and each batch row switches off a different head (a
  ``(batch, heads)`` gate per layer, see :mod:`models.capture`), so ``N`` heads cost ``ceil(N / B)``
  forward passes instead of ``N``. :func:`ablation_scores_one_at_a_time` is the slow reference.
* :func:`gradient_importance`: Michel, Levy & Neubig (2019), "Are Sixteen Heads Really Better than
  One?", eq. 2: ``I_h = E_x |∂L(x)/∂ξ_h|`` where ``ξ_h`` is a gate multiplying head ``h``'s output,
  evaluated at ``ξ = 1`` (all heads on). The gates are the capture mechanism's differentiable gates.
* :func:`pruning_curve`: switch heads off in order of importance (least important first), 0 % to 90 %
  in steps, and evaluate the metric on a sentence set, next to the same curve for random orders
  (Michel et al. 2019, fig. 3/4; Voita et al. 2019, fig. 7).

The metric depends on the model's head (:func:`metric_kind`):

* ``"loss"`` (decoders, ``head == "lm"``): mean next-token cross-entropy of the text in nats, as in
  :func:`models.analyze` (``CE(logits[:-1], ids[1:])``).
* ``"mask_loss"`` (encoders with an MLM head): cross-entropy in nats at the ``[MASK]`` positions, with
  the full (unpruned) model's top fill as the label (so it grows when pruning loses the top fill); a
  text without a mask token is scored on reconstructing its own tokens at every non-special position.
* ``"seq2seq_loss"`` (encoder-decoders): teacher-forced cross-entropy of the full model's greedy output.
* ``"embedding_distance"`` (encoders without a head, e.g. minilm-l6): ``1 - cos(e_pruned, e_full)`` of
  the mean-pooled sentence embedding (Reimers & Gurevych 2019). Its gradient at ``ξ = 1`` is exactly 0
  (the full model is its minimum), so :func:`gradient_importance` uses the first-order sensitivity of the
  unit embedding instead: ``I_h = E_x ‖∂ê(x)/∂ξ_h‖₂`` with ``ê = e/‖e‖``; to second order
  ``1 - cos ≈ ½ ‖Δê‖²``.

Heads are named by ``(stack, layer, head)`` triples, as in ``models.analyze(heads_off=...)``; arrays of
scores are ``stack -> float64 (layers, heads)``. Nothing here touches the shared model's state: gates
travel in the :func:`models.capture.capture` context of each call.
"""

from __future__ import annotations

import contextvars
import math
import threading
import weakref
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np
import torch

from . import capture
from .analysis import default_max_tokens
from .heads import validate_heads
from .outputs import generate_target
from .errors import EmptyTextError, InvalidArgumentError, ModelOutOfMemoryError, UnsupportedOperationError
from .loading import LoadedModel

# Longest text the pruning functions read by default (tokens): ablation runs a forward pass per head.
MAX_TOKENS = 1024


def _limit(loaded: LoadedModel, max_tokens: int | None) -> int:
    """``max_tokens``, else the smaller of :data:`MAX_TOKENS` and the model's own default."""
    return int(max_tokens or min(MAX_TOKENS, default_max_tokens(loaded)))


HeadId = tuple[str, int, int]

#: Shares of heads pruned along a pruning curve: 0 %, 10 %, ..., 90 %.
DEFAULT_SHARES = tuple(round(0.1 * i, 1) for i in range(10))

METRIC_KINDS = ("loss", "mask_loss", "seq2seq_loss", "embedding_distance")
_STACK_ORDER = ("encoder", "decoder", "cross")


# --------------------------------------------------------------------------------------------------
# Heads, gates and metrics
# --------------------------------------------------------------------------------------------------


def head_list(loaded: LoadedModel) -> list[HeadId]:
    """Every head of the model as ``(stack, layer, head)``, ordered by stack (encoder, decoder, cross),
    layer, head. Position ``i`` in this list is column ``i`` of the keep matrices used below."""
    out: list[HeadId] = []
    for site in _sites(loaded):
        out.extend((site.stack, site.layer, h) for h in range(site.heads))
    return out


def _sites(loaded: LoadedModel) -> list[capture.Site]:
    return sorted(loaded.sites, key=lambda s: (_STACK_ORDER.index(s.stack), s.layer))


def metric_kind(loaded: LoadedModel) -> str:
    """Which metric measures this model (see the module docstring): ``loss`` | ``mask_loss`` |
    ``seq2seq_loss`` | ``embedding_distance``."""
    return {"lm": "loss", "mlm": "mask_loss", "seq2seq": "seq2seq_loss"}.get(loaded.head, "embedding_distance")


def check_heads(loaded: LoadedModel, heads: Iterable) -> frozenset[HeadId]:
    """Validate ``(stack, layer, head)`` triples (see :func:`models.heads.validate_heads`).

    Raises:
        InvalidHeadError: a malformed triple or one the model lacks.
        UnsupportedOperationError: a fallback-path model whose output projection is unknown.
    """
    return validate_heads(loaded, heads)


def keep_matrix(loaded: LoadedModel, rows: Sequence[Iterable[HeadId]]) -> np.ndarray:
    """One row of gates per set of heads switched off.

    Args:
        rows: for each batch row, the ``(stack, layer, head)`` triples to switch off.

    Returns:
        float64 ``(len(rows), len(head_list(loaded)))``: 1 keeps a head, 0 switches it off.

    Raises:
        InvalidHeadError: a head the model does not have.
    """
    index = {h: i for i, h in enumerate(head_list(loaded))}
    keep = np.ones((len(rows), len(index)))
    for r, heads in enumerate(rows):
        for h in check_heads(loaded, heads):
            keep[r, index[h]] = 0.0
    return keep


def gates_from_keep(loaded: LoadedModel, keep: torch.Tensor, *, all_layers: bool = False) -> dict:
    """Split a ``(batch, total_heads)`` keep tensor into capture gates ``(stack, layer) -> (batch, heads)``.

    Layers whose gates are all 1 are left out (they then run untouched, bit-identical) unless
    ``all_layers`` (needed when ``keep`` carries gradients or tangents).

    Args:
        keep: float tensor ``(batch, total_heads)`` in :func:`head_list` order (1 on, 0 off).

    Returns:
        ``(stack, layer) -> (batch, heads)`` slices of ``keep`` (views, same dtype and device).
    """
    gates = {}
    offset = 0
    for site in _sites(loaded):
        block = keep[:, offset : offset + site.heads]
        offset += site.heads
        if all_layers or bool((block != 1).any()):
            gates[(site.stack, site.layer)] = block
    return gates


@dataclass
class Prepared:
    """A text ready for batched evaluation (one row; repeated per batch).

    Attributes:
        text: the input. kind: metric kind. inputs: model inputs, batch 1 (``input_ids`` ...).
        labels: int64 ``(1, positions)`` targets with -100 where ignored (loss kinds), else None.
        reference: ``(hidden,)`` unit embedding of the full model in the model's dtype
            (``embedding_distance``), else None.
        n_tokens: length of the (possibly truncated) input in tokens.
    """

    text: str
    kind: str
    inputs: dict[str, torch.Tensor]
    labels: torch.Tensor | None = None
    reference: torch.Tensor | None = None
    n_tokens: int = 0


def prepare(loaded: LoadedModel, text: str, *, max_tokens: int | None = None) -> Prepared:
    """Tokenise ``text`` as :func:`models.analyze` does and work out the metric's labels/reference with
    the full model (one forward pass without gates).

    Args:
        max_tokens: cut the text to this many tokens (default :data:`MAX_TOKENS` or the model's own limit, the smaller).

    Returns:
        :class:`Prepared` (batch 1).

    Raises:
        EmptyTextError: empty text. UnsupportedOperationError: a speech model (no text input), or a
        decoder text of a single token (no next token to score).
    """
    if not isinstance(text, str) or not text.strip():
        raise EmptyTextError("The text is empty: type a sentence to analyse.")
    model, tok = loaded.model, loaded.tokenizer
    if getattr(model, "main_input_name", "input_ids") != "input_ids":
        raise UnsupportedOperationError(f"Head pruning needs a text model; '{loaded.name}' reads {model.main_input_name}.",
                                        code="pruning_needs_text_model", model=loaded.name, reads=model.main_input_name)
    limit = _limit(loaded, max_tokens)
    enc = tok(text, truncation=True, max_length=limit)
    ids = torch.tensor([enc["input_ids"]], device=loaded.device)
    inputs = {"input_ids": ids}
    if "token_type_ids" in enc and loaded.family == "encoder":
        inputs["token_type_ids"] = torch.tensor([enc["token_type_ids"]], device=loaded.device)
    kind = metric_kind(loaded)
    prep = Prepared(text=text, kind=kind, inputs=inputs, n_tokens=int(ids.shape[1]))
    if kind == "loss":
        if ids.shape[1] < 2:
            raise UnsupportedOperationError(
                f"'{text}' is a single token for '{loaded.name}': there is no next token to score; type a longer text.",
                code="single_token_text", text=text, model=loaded.name
            )
        prep.labels = ids.clone()
    elif kind == "seq2seq_loss":
        target = generate_target(loaded, inputs)
        tgt = tok(text_target=target, truncation=True, max_length=limit - 1)["input_ids"]
        inputs["decoder_input_ids"] = torch.tensor([[loaded.decoder_start_id] + list(tgt[:-1])], device=loaded.device)
        prep.labels = torch.tensor([list(tgt)], device=loaded.device)
    elif kind == "mask_loss":
        mask_id = tok.mask_token_id
        masked = (ids[0] == mask_id) if mask_id is not None else torch.zeros_like(ids[0], dtype=torch.bool)
        labels = torch.full_like(ids, -100)
        if bool(masked.any()):
            with torch.no_grad():
                logits = model(**inputs).logits[0]
            labels[0, masked] = logits[masked].argmax(-1)
        else:
            special = torch.tensor(tok.get_special_tokens_mask(enc["input_ids"], already_has_special_tokens=True),
                                   dtype=torch.bool, device=ids.device)
            labels[0, ~special] = ids[0, ~special]
        prep.labels = labels
    else:
        with torch.no_grad():
            prep.reference = _unit_embedding(loaded, model(**inputs))[0]
    return prep


def _last_hidden(outputs) -> torch.Tensor:
    last = getattr(outputs, "last_hidden_state", None)
    return last if last is not None else outputs.hidden_states[-1]


def _unit_embedding(loaded: LoadedModel, outputs) -> torch.Tensor:
    """``(batch, hidden)`` mean-pooled last hidden state (as ``Analysis.embedding``), divided by its norm."""
    emb = _last_hidden(outputs).mean(dim=1)
    return emb / emb.norm(dim=-1, keepdim=True).clamp_min(1e-12)


def _float(x: torch.Tensor) -> torch.Tensor:
    """At least float32 (keeps float64 for double-precision models)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def _row_metric(loaded: LoadedModel, prep: Prepared, outputs) -> torch.Tensor:
    """Metric of each batch row, float ``(batch,)`` (see module docstring)."""
    if prep.kind == "embedding_distance":
        unit = _float(_unit_embedding(loaded, outputs))
        return 1.0 - unit @ _float(prep.reference)
    logits = _float(outputs.logits)
    batch = logits.shape[0]
    if prep.kind == "loss":
        pred, target = logits[:, :-1], prep.labels[:, 1:].expand(batch, -1)
    else:
        pred, target = logits, prep.labels.expand(batch, -1)
    # Cross-entropy -log softmax(z)_y = logsumexp(z) - z_y, without copying the (batch, n, vocab) logits.
    counted = target != -100
    picked = pred.gather(-1, target.clamp_min(0)[..., None])[..., 0]
    ce = (torch.logsumexp(pred, dim=-1) - picked) * counted
    return ce.sum(-1) / counted.sum(-1).clamp_min(1)


# Prefix reuse: batch rows that differ only from layer l on are identical before it. The model then runs
# the text once (batch 1) up to layer l, and a forward pre-hook on layer l's block repeats the hidden
# states to the batch size (attention masks and rotary tables of batch 1 broadcast). The hooks are
# installed once per model and do nothing unless the per-call ContextVar below names their block.
_EXPAND: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar("dikkat_expand", default=None)
_BLOCKS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # model -> {layer: block} or {} if unsupported
_BLOCKS_LOCK = threading.Lock()


def _expand_hook(module, args, kwargs):
    wanted = _EXPAND.get()
    if wanted is None or wanted[0] != id(module):
        return None
    rows = wanted[1]
    if args:
        hidden = args[0]
        return (hidden.expand(rows, *hidden.shape[1:]).contiguous(),) + tuple(args[1:]), kwargs
    hidden = kwargs["hidden_states"]
    return args, {**kwargs, "hidden_states": hidden.expand(rows, *hidden.shape[1:]).contiguous()}


def _layer_blocks(loaded: LoadedModel) -> dict[int, torch.nn.Module]:
    """``layer -> block module`` for single-stack interface-path models (``{}`` when prefix reuse is not
    supported: encoder-decoders, the fallback path, names without a layer index). Installs the hooks."""
    model = loaded.model
    with _BLOCKS_LOCK:
        if model in _BLOCKS:
            return _BLOCKS[model]
        blocks: dict[int, torch.nn.Module] = {}
        shared = len({s.name for s in loaded.sites}) < len(loaded.sites)  # a module called at several depths
        if loaded.capture_path == "interface" and len(loaded.stacks) == 1 and not shared:
            modules = dict(model.named_modules())
            for site in loaded.sites:
                parts = site.name.split(".")
                if str(site.label) not in parts:
                    blocks = {}
                    break
                name = ".".join(parts[: parts.index(str(site.label)) + 1])
                if name not in modules:
                    blocks = {}
                    break
                blocks[site.layer] = modules[name]
            for block in blocks.values():
                block.register_forward_pre_hook(_expand_hook, with_kwargs=True)
        _BLOCKS[model] = blocks
        return blocks


def _first_gated_layer(loaded: LoadedModel, gates: dict) -> int:
    return min((layer for (_, layer) in gates), default=0)


def _forward(loaded: LoadedModel, prep: Prepared, batch: int, gates: dict, *, reuse_prefix: bool = False):
    """Run ``batch`` copies of the prepared input with ``gates``. With ``reuse_prefix``, layers before
    the first gated layer run once (batch 1) and their output is repeated (see ``_EXPAND``)."""
    blocks = _layer_blocks(loaded) if reuse_prefix and batch > 1 else {}
    first = _first_gated_layer(loaded, gates)
    expand = blocks.get(first) if first > 0 else None
    rows = 1 if expand is not None else batch
    inputs = {k: v.expand(rows, -1).contiguous() for k, v in prep.inputs.items()}
    extra = {"use_cache": False} if loaded.family == "decoder" else dict(loaded.call_kwargs)
    token = _EXPAND.set((id(expand), batch) if expand is not None else None)
    try:
        with capture.capture(loaded.site_index, gates=gates, record=False):
            outputs = loaded.model(**inputs, return_dict=True, **extra)
    except torch.OutOfMemoryError as exc:
        raise ModelOutOfMemoryError(
            f"Out of memory running '{loaded.name}' on a batch of {batch} x {prep.n_tokens} tokens; "
            "lower batch_size.",
            code="oom_batch", model=loaded.name, batch=batch, tokens=prep.n_tokens
        ) from exc
    finally:
        _EXPAND.reset(token)
    return outputs


def evaluate(loaded: LoadedModel, prep: Prepared, keep: np.ndarray, *, batch_size: int = 64,
             reuse_prefix: bool = True) -> np.ndarray:
    """The metric for each row of gates, computed in batches of ``batch_size`` rows.

    Args:
        prep: from :func:`prepare`.
        keep: ``(rows, total_heads)`` gates in :func:`head_list` order (1 on, 0 off; values in between
            scale a head's output).
        reuse_prefix: run the layers before a batch's first gated layer once and repeat their output to
            the batch (same result up to float rounding; single-stack interface-path models only). Rows
            sorted by their first gated layer profit most (as in :func:`ablation_scores`).

    Returns:
        float64 ``(rows,)``: the metric of each row (nats for the loss kinds; ``1 - cos`` for
        ``embedding_distance``).

    Raises:
        ModelOutOfMemoryError: a batch ran out of memory (lower ``batch_size``).
        RuntimeError: the model returned another number of rows than it was given.
    """
    keep = np.asarray(keep, dtype=np.float64)
    out = np.empty(len(keep))
    with torch.inference_mode():
        for start in range(0, len(keep), batch_size):
            chunk = torch.as_tensor(keep[start : start + batch_size], dtype=loaded.dtype, device=loaded.device)
            outputs = _forward(loaded, prep, len(chunk), gates_from_keep(loaded, chunk), reuse_prefix=reuse_prefix)
            values = _row_metric(loaded, prep, outputs)
            if values.shape[0] != len(chunk):
                raise RuntimeError(f"Expected {len(chunk)} rows from '{loaded.name}', got {values.shape[0]}.")
            out[start : start + len(chunk)] = values.double().cpu().numpy()
    return out


def _texts(texts: str | Sequence[str]) -> list[str]:
    texts = [texts] if isinstance(texts, str) else list(texts)
    if not texts:
        raise EmptyTextError("No texts given.")
    return texts


# --------------------------------------------------------------------------------------------------
# Scores
# --------------------------------------------------------------------------------------------------


@dataclass
class HeadScores:
    """A score per head.

    Attributes:
        values: ``stack -> float64 (layers, heads)``.
        kind: ``ablation`` | ``gradient``. metric: the metric kind (:func:`metric_kind`).
        base: mean metric of the full model over ``texts`` (nats for the loss kinds; 0 for
            ``embedding_distance``, up to rounding).
        texts: the texts the scores are averaged over.
        seconds: wall time of the computation, in seconds.
        forward_passes: how many batched forward passes were run (ablation), or for ``gradient`` one per
            text (each with one backward pass), or ``ceil(heads / batch_size)`` forward-mode passes per
            text for ``embedding_distance``.
    """

    values: dict[str, np.ndarray]
    kind: str
    metric: str
    base: float
    texts: list[str]
    seconds: float = 0.0
    forward_passes: int = 0

    def flat(self) -> np.ndarray:
        """float64 ``(total_heads,)`` in :func:`head_list` order."""
        return np.concatenate([self.values[s].reshape(-1) for s in sorted(self.values, key=_STACK_ORDER.index)])

    def ranked(self) -> list[tuple[HeadId, float]]:
        """Heads from the least to the most important (ties by head order)."""
        heads = [(s, layer, h) for s in sorted(self.values, key=_STACK_ORDER.index)
                 for layer in range(self.values[s].shape[0]) for h in range(self.values[s].shape[1])]
        flat = self.flat()
        order = np.argsort(flat, kind="stable")
        return [(heads[i], float(flat[i])) for i in order]


def _to_stacks(loaded: LoadedModel, flat: np.ndarray) -> dict[str, np.ndarray]:
    out = {stack: np.zeros((layers, heads)) for stack, (layers, heads) in loaded.stacks.items()}
    for value, (stack, layer, head) in zip(flat, head_list(loaded)):
        out[stack][layer, head] = value
    return out


def ablation_scores(loaded: LoadedModel, texts: str | Sequence[str], *, batch_size: int = 64,
                    max_tokens: int | None = None, reuse_prefix: bool = True,
                    progress: Callable[[float], None] | None = None) -> HeadScores:
    """Per-head ablation score: metric with that head alone switched off minus metric of the full model,
    averaged over ``texts`` (Michel et al. 2019, §3.1, "ablating one head").

    Batched: the text is repeated ``batch_size`` times and row ``b`` switches off head ``b`` of the chunk
    (gate ``(batch, heads)`` per layer), so ``N`` heads take ``ceil(N / batch_size)`` forward passes.
    Positive = the metric gets worse without the head (loss up, embedding moves away).
    Rows are in layer order, so a batch whose heads all lie in layer ``l`` or later runs the layers
    before ``l`` once (``reuse_prefix``, see :func:`evaluate`).

    Args:
        texts: one text or several (the score is their mean).
        batch_size: rows per forward pass (memory grows linearly with it).
        reuse_prefix: see :func:`evaluate`.
        progress: called with the fraction done, in [0, 1].

    Returns:
        :class:`HeadScores` of kind ``ablation``; ``values[stack]`` float64 ``(layers, heads)``.

    Raises:
        EmptyTextError, ModelOutOfMemoryError, UnsupportedOperationError.
    """
    import time

    texts = _texts(texts)
    start = time.perf_counter()
    n = len(head_list(loaded))
    keep = np.ones((n + 1, n))
    keep[np.arange(n), np.arange(n)] = 0.0  # row i: head i off; last row: the full model
    total = np.zeros(n)
    base = 0.0
    passes = 0
    for i, text in enumerate(texts):
        prep = prepare(loaded, text, max_tokens=max_tokens)
        values = evaluate(loaded, prep, keep, batch_size=batch_size, reuse_prefix=reuse_prefix)
        passes += math.ceil(len(keep) / batch_size)
        total += values[:-1] - values[-1]
        base += values[-1]
        if progress:
            progress((i + 1) / len(texts))
    flat = total / len(texts)
    return HeadScores(_to_stacks(loaded, flat), "ablation", metric_kind(loaded), base / len(texts), texts,
                      time.perf_counter() - start, passes)


def ablation_scores_one_at_a_time(loaded: LoadedModel, texts: str | Sequence[str], *,
                                  max_tokens: int | None = None) -> HeadScores:
    """Reference for :func:`ablation_scores`: one forward pass (batch 1) per head. Same result, slower.

    Returns:
        :class:`HeadScores` of kind ``ablation``; ``values[stack]`` float64 ``(layers, heads)``.

    Raises:
        EmptyTextError, ModelOutOfMemoryError, UnsupportedOperationError (as :func:`prepare`).
    """
    import time

    texts = _texts(texts)
    start = time.perf_counter()
    n = len(head_list(loaded))
    total = np.zeros(n)
    base = 0.0
    for text in texts:
        prep = prepare(loaded, text, max_tokens=max_tokens)
        full = evaluate(loaded, prep, np.ones((1, n)), batch_size=1)[0]
        base += full
        for i in range(n):
            keep = np.ones((1, n))
            keep[0, i] = 0.0
            total[i] += evaluate(loaded, prep, keep, batch_size=1)[0] - full
    return HeadScores(_to_stacks(loaded, total / len(texts)), "ablation", metric_kind(loaded), base / len(texts),
                      texts, time.perf_counter() - start, (n + 1) * len(texts))


def gradient_importance(loaded: LoadedModel, texts: str | Sequence[str], *, normalize_layers: bool = False,
                        max_tokens: int | None = None, batch_size: int = 64,
                        progress: Callable[[float], None] | None = None) -> HeadScores:
    """Gradient importance of every head (Michel, Levy & Neubig 2019, eq. 2).

    ``I_h = E_x |∂L(x)/∂ξ_h|`` at ``ξ = 1``: the gate ``ξ_h`` multiplies head ``h``'s output (the input of
    the output projection), the expectation is the mean over ``texts``. ``L`` is the model's loss metric
    (:func:`metric_kind`); one backward pass per text gives every head at once. For
    ``embedding_distance`` (no loss; ``1 - cos`` has zero gradient at ``ξ = 1``) the importance is
    ``E_x ‖∂ê(x)/∂ξ_h‖₂`` of the unit embedding ``ê``, computed exactly with forward-mode derivatives,
    ``batch_size`` heads per forward pass (one tangent per batch row).

    Args:
        normalize_layers: divide each layer's scores by their ℓ2 norm (Michel et al. 2019, §4.2,
            following Molchanov et al. 2017).
        batch_size: ``embedding_distance`` only: tangents (heads) per forward-mode pass.
        progress: called with the fraction done, in [0, 1], after each text.

    Returns:
        :class:`HeadScores` of kind ``gradient``; ``values[stack]`` float64 ``(layers, heads)``, ≥ 0
        (units of the metric per unit gate: nats for the loss kinds).

    Raises:
        EmptyTextError: no texts or an empty one. ModelOutOfMemoryError.
        UnsupportedOperationError: as :func:`prepare`, or forward-mode derivatives that do not reach the
            embedding.
    """
    import time

    texts = _texts(texts)
    start = time.perf_counter()
    n = len(head_list(loaded))
    total = np.zeros(n)
    base = 0.0
    passes = 0
    for i, text in enumerate(texts):
        prep = prepare(loaded, text, max_tokens=max_tokens)
        if prep.kind == "embedding_distance":
            total += _embedding_sensitivity(loaded, prep, batch_size)
            passes += math.ceil(n / batch_size)
        else:
            xi = torch.ones(1, n, dtype=loaded.dtype, device=loaded.device, requires_grad=True)
            with torch.enable_grad():
                outputs = _forward(loaded, prep, 1, gates_from_keep(loaded, xi, all_layers=True))
                loss = _row_metric(loaded, prep, outputs)[0]
                (grad,) = torch.autograd.grad(loss, xi)
            total += grad[0].abs().double().cpu().numpy()
            base += float(loss.detach())
            passes += 1
        if progress:
            progress((i + 1) / len(texts))
    values = _to_stacks(loaded, total / len(texts))
    if normalize_layers:
        for arr in values.values():
            norms = np.linalg.norm(arr, axis=1, keepdims=True)
            np.divide(arr, norms, out=arr, where=norms > 0)
    return HeadScores(values, "gradient", metric_kind(loaded), base / len(texts), texts,
                      time.perf_counter() - start, passes)


def _embedding_sensitivity(loaded: LoadedModel, prep: Prepared, batch_size: int) -> np.ndarray:
    """``‖∂ê/∂ξ_h‖₂`` for every head, float64 ``(total_heads,)``: row ``b`` of a batch carries the tangent
    ``e_h`` (one-hot on head ``h``) so one forward-mode pass gives ``batch`` Jacobian columns."""
    import torch.autograd.forward_ad as fwAD

    n = len(head_list(loaded))
    out = np.empty(n)
    with torch.no_grad():
        for start in range(0, n, batch_size):
            rows = min(batch_size, n - start)
            primal = torch.ones(rows, n, dtype=loaded.dtype, device=loaded.device)
            tangent = torch.zeros_like(primal)
            tangent[torch.arange(rows), torch.arange(start, start + rows)] = 1.0
            with fwAD.dual_level():
                xi = fwAD.make_dual(primal, tangent)
                outputs = _forward(loaded, prep, rows, gates_from_keep(loaded, xi, all_layers=True))
                _, jac = fwAD.unpack_dual(_unit_embedding(loaded, outputs))
            if jac is None:
                raise UnsupportedOperationError(f"Forward-mode derivatives do not reach the output of '{loaded.name}'.")
            out[start : start + rows] = _float(jac).norm(dim=-1).double().cpu().numpy()
    return out


def rank_correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation ρ of two score arrays of equal size (flattened): the Pearson
    correlation of their ranks, ties given their average rank (Spearman 1904). NaN if either is constant.

    Returns:
        float in [-1, 1], or NaN.

    Raises:
        InvalidArgumentError: arrays of different sizes.
    """
    a = np.asarray(a, dtype=np.float64).reshape(-1)
    b = np.asarray(b, dtype=np.float64).reshape(-1)
    if a.shape != b.shape:
        raise InvalidArgumentError(f"Score arrays differ in size: {a.size} vs {b.size}")
    ra, rb = _ranks(a), _ranks(b)
    ra -= ra.mean()
    rb -= rb.mean()
    denom = math.sqrt(float((ra * ra).sum() * (rb * rb).sum()))
    return float((ra * rb).sum() / denom) if denom > 0 else float("nan")


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x), dtype=np.float64)
    # average the ranks of ties
    values, inverse = np.unique(x, return_inverse=True)
    sums = np.bincount(inverse, weights=ranks)
    counts = np.bincount(inverse)
    return (sums / counts)[inverse]


# --------------------------------------------------------------------------------------------------
# Pruning curve
# --------------------------------------------------------------------------------------------------


@dataclass
class PruningCurve:
    """Metric against the share of heads pruned.

    Attributes:
        shares: float64 ``(steps,)`` share of heads switched off (0 .. 0.9).
        n_pruned: int ``(steps,)`` heads switched off at each step (``round(share * total)``, numpy
            ``rint``: halves round to even).
        by_importance: float64 ``(steps,)`` mean metric over ``texts``, least important heads off first.
        random: float64 ``(orders, steps)`` the same for random orders (one row per order).
        metric: the metric kind. order: the heads in pruning order (least important first).
        texts: the sentences evaluated. total_heads: heads in the model.
        seconds: wall time of the computation, in seconds.
    """

    shares: np.ndarray
    n_pruned: np.ndarray
    by_importance: np.ndarray
    random: np.ndarray
    metric: str
    order: list[HeadId]
    texts: list[str]
    total_heads: int
    seconds: float = 0.0

    @property
    def random_mean(self) -> np.ndarray:
        """float64 ``(steps,)`` mean over the random orders."""
        return self.random.mean(axis=0)


def pruning_curve(loaded: LoadedModel, texts: Sequence[str], importance: HeadScores | np.ndarray, *,
                  shares: Sequence[float] = DEFAULT_SHARES, random_orders: int = 3, seed: int = 0,
                  batch_size: int = 64, max_tokens: int | None = None,
                  progress: Callable[[float], None] | None = None) -> PruningCurve:
    """Switch heads off in order of importance and measure the metric on ``texts`` at each share.

    The ``k = round(share * N)`` heads with the lowest importance are switched off (ties in head order),
    as in Michel et al. (2019, §4, fig. 3: heads pruned by increasing importance, 10 % steps); the same
    shares are evaluated for ``random_orders`` random permutations (numpy ``default_rng(seed)``). All
    steps of all orders for one text run as rows of one batch.

    Args:
        texts: the sentence set (e.g. ``assets/sentences.json``).
        importance: :class:`HeadScores` or a float array in :func:`head_list` order (any shape that
            flattens to ``total_heads``); higher = more important.
        shares: shares to evaluate, each in [0, 1].
        random_orders: how many random permutations to evaluate. seed: their numpy seed.
        batch_size: rows per forward pass (see :func:`evaluate`).
        max_tokens: cut each text to this many tokens.
        progress: called with the fraction done, in [0, 1], after each text.

    Returns:
        :class:`PruningCurve` (metric in nats for the loss kinds, ``1 - cos`` for ``embedding_distance``).

    Raises:
        InvalidArgumentError: importance of the wrong size or a share outside [0, 1].
        EmptyTextError, ModelOutOfMemoryError, UnsupportedOperationError (as :func:`prepare`).
    """
    import time

    texts = _texts(texts)
    start = time.perf_counter()
    heads = head_list(loaded)
    n = len(heads)
    flat = importance.flat() if isinstance(importance, HeadScores) else np.asarray(importance, dtype=np.float64).reshape(-1)
    if flat.size != n:
        raise InvalidArgumentError(f"importance has {flat.size} values; model '{loaded.name}' has {n} heads.")
    shares_arr = np.asarray(shares, dtype=np.float64)
    if ((shares_arr < 0) | (shares_arr > 1)).any():
        raise InvalidArgumentError("shares must lie in [0, 1].")
    n_pruned = np.rint(shares_arr * n).astype(int)
    rng = np.random.default_rng(seed)
    orders = [np.argsort(flat, kind="stable")] + [rng.permutation(n) for _ in range(random_orders)]
    keep = np.ones((len(orders) * len(shares_arr), n))
    for o, order in enumerate(orders):
        for s, k in enumerate(n_pruned):
            keep[o * len(shares_arr) + s, order[:k]] = 0.0
    total = np.zeros(len(keep))
    for i, text in enumerate(texts):
        prep = prepare(loaded, text, max_tokens=max_tokens)
        total += evaluate(loaded, prep, keep, batch_size=batch_size)
        if progress:
            progress((i + 1) / len(texts))
    mean = (total / len(texts)).reshape(len(orders), len(shares_arr))
    return PruningCurve(
        shares=shares_arr, n_pruned=n_pruned, by_importance=mean[0], random=mean[1:], metric=metric_kind(loaded),
        order=[heads[i] for i in orders[0]], texts=texts, total_heads=n, seconds=time.perf_counter() - start,
    )


@dataclass
class CurveEstimate:
    """How long :func:`gradient_importance` plus :func:`pruning_curve` will take on a sentence set.

    Attributes:
        seconds: the estimate for the whole set, in seconds of wall time on this machine.
        probe_seconds: what the measured probe itself took (both functions on ``probe_text``), in seconds.
        probe_text: the set's text with the fewest tokens, on which the probe ran.
        tokens: tokens of each text, in the set's order.
    """

    seconds: float
    probe_seconds: float
    probe_text: str
    tokens: list[int]


def estimate_curve_seconds(loaded: LoadedModel, texts: Sequence[str], *, random_orders: int = 3,
                           shares: Sequence[float] = DEFAULT_SHARES, batch_size: int = 64,
                           max_tokens: int | None = None) -> CurveEstimate:
    """Measure :func:`gradient_importance` and :func:`pruning_curve` on the set's shortest text and scale
    the time to the whole set: each text's time is taken as the probe's time × (its tokens ÷ the probe's
    tokens). The per-pass cost grows at least linearly with the tokens at sentence lengths (the linear
    layers dominate; attention adds an n² term), and a fixed per-pass overhead makes the scaled time an
    overestimate for longer texts; ``bench/pruning_page.py`` prints estimate ÷ actual for the bundled
    models.

    Args:
        texts: the sentence set (as for :func:`pruning_curve`).
        random_orders, shares, batch_size, max_tokens: as for :func:`pruning_curve`.

    Returns:
        :class:`CurveEstimate` (seconds).

    Raises:
        EmptyTextError, ModelOutOfMemoryError, UnsupportedOperationError: as :func:`prepare`.
    """
    texts = _texts(texts)
    limit = _limit(loaded, max_tokens)
    tokens = [len(loaded.tokenizer(text, truncation=True, max_length=limit)["input_ids"]) for text in texts]
    probe = int(np.argmin(tokens))
    importance = gradient_importance(loaded, [texts[probe]], batch_size=batch_size, max_tokens=max_tokens)
    curve = pruning_curve(loaded, [texts[probe]], importance, shares=shares, random_orders=random_orders,
                          batch_size=batch_size, max_tokens=max_tokens)
    probe_seconds = importance.seconds + curve.seconds
    return CurveEstimate(probe_seconds * sum(tokens) / max(tokens[probe], 1), probe_seconds, texts[probe], tokens)


# --------------------------------------------------------------------------------------------------
# What a pruned model does: continuation, embeddings, similarity ranking
# --------------------------------------------------------------------------------------------------


def _gates_for(loaded: LoadedModel, heads_off: Iterable) -> dict:
    heads_off = check_heads(loaded, heads_off)
    gates: dict[tuple[str, int], torch.Tensor] = {}
    for stack, layer, head in heads_off:
        n_heads = loaded.stacks[stack][1]
        gate = gates.setdefault((stack, layer), torch.ones(n_heads, dtype=loaded.dtype, device=loaded.device))
        gate[head] = 0.0
    return gates


@dataclass
class Continuation:
    """A greedy continuation.

    Attributes:
        text: the generated text only (decoded, without the prompt).
        ids: int64 ``(new_tokens,)`` generated token ids. tokens: each id decoded alone.
    """

    text: str
    ids: np.ndarray
    tokens: list[str] = field(default_factory=list)


def greedy_continuation(loaded: LoadedModel, text: str, heads_off: Iterable = (), *, max_new_tokens: int = 10,
                        max_tokens: int | None = None) -> Continuation:
    """Greedy (argmax) continuation of ``text`` by a decoder with ``heads_off`` switched off at every
    step (the gates are per layer, so they apply to every generated position).

    Args:
        max_new_tokens: tokens to generate (generation may stop earlier at EOS).
        max_tokens: the prompt is cut to ``max_tokens - max_new_tokens`` tokens (at least 1).

    Returns:
        :class:`Continuation`.

    Raises:
        UnsupportedOperationError: not a decoder with an LM head, or heads that cannot be switched off
            on the fallback path. InvalidHeadError, EmptyTextError.
    """
    if loaded.head != "lm":
        raise UnsupportedOperationError(f"'{loaded.name}' is not a decoder with a language-model head: it cannot continue text.")
    if not isinstance(text, str) or not text.strip():
        raise EmptyTextError("The text is empty: type a sentence to continue.", code="empty_prompt")
    gates = _gates_for(loaded, heads_off)
    tok = loaded.tokenizer
    limit = _limit(loaded, max_tokens)
    ids = torch.tensor([tok(text, truncation=True, max_length=max(1, limit - max_new_tokens))["input_ids"]],
                       device=loaded.device)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    with torch.no_grad(), capture.capture(loaded.site_index, gates=gates, record=False):
        out = loaded.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                    do_sample=False, num_beams=1, pad_token_id=pad)
    new = out[0, ids.shape[1]:].cpu()
    return Continuation(text=_decode_continuation(tok, ids[0].cpu(), new), ids=new.numpy().astype(np.int64),
                        tokens=[tok.decode([int(i)]) for i in new])


def _decode_continuation(tok, prompt_ids: torch.Tensor, new_ids: torch.Tensor) -> str:
    """The continuation's text: prompt and continuation decoded together, minus the prompt's own text, so a
    character whose bytes span byte-level tokens (Turkish "ı" is two bytes) comes out whole; a character the
    last generated token leaves unfinished (its remaining bytes were never generated) is dropped rather than
    shown as U+FFFD."""
    prompt = tok.decode(prompt_ids, skip_special_tokens=True)
    both = tok.decode(torch.cat([prompt_ids, new_ids]), skip_special_tokens=True)
    text = both[len(prompt):] if both.startswith(prompt) else tok.decode(new_ids, skip_special_tokens=True)
    return text.rstrip("\ufffd")


def embed(loaded: LoadedModel, texts: str | Sequence[str], heads_off: Iterable = (), *,
          max_tokens: int | None = None) -> np.ndarray:
    """Mean-pooled sentence embeddings (as ``Analysis.embedding``) with ``heads_off`` switched off.

    Each text runs alone (no padding), so row ``i`` equals ``analyze(loaded, texts[i],
    heads_off=heads_off).embedding``.

    Returns:
        float32 ``(len(texts), hidden)``, mean of the last hidden states over all tokens (special tokens
        included), not normalised (Reimers & Gurevych 2019, §3, MEAN pooling).

    Raises:
        UnsupportedOperationError: an encoder-decoder (this includes the Whisper speech model), or heads
            that cannot be switched off on the fallback path.
        EmptyTextError: no texts, or an empty one. InvalidHeadError: bad ``heads_off``.
    """
    texts = _texts(texts)
    gates = _gates_for(loaded, heads_off)
    rows = []
    for text in texts:
        inputs = _plain_inputs(loaded, text, max_tokens)
        with torch.no_grad(), capture.capture(loaded.site_index, gates=gates, record=False):
            # Models with a head return logits: ask for the hidden states to pool the last one.
            outputs = loaded.model(**inputs, output_hidden_states=loaded.head != "none", return_dict=True)
        rows.append(_last_hidden(outputs)[0].float().mean(dim=0).cpu().numpy())
    return np.stack(rows).astype(np.float32)


def _plain_inputs(loaded: LoadedModel, text: str, max_tokens: int | None) -> dict:
    if not isinstance(text, str) or not text.strip():
        raise EmptyTextError("The text is empty.")
    if loaded.family == "encoder-decoder":
        raise UnsupportedOperationError(f"Sentence embeddings are not defined for '{loaded.name}' (encoder-decoder).")
    enc = loaded.tokenizer(text, truncation=True, max_length=_limit(loaded, max_tokens))
    inputs = {"input_ids": torch.tensor([enc["input_ids"]], device=loaded.device)}
    if "token_type_ids" in enc and loaded.family == "encoder":
        inputs["token_type_ids"] = torch.tensor([enc["token_type_ids"]], device=loaded.device)
    return inputs


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity ``a·b / (‖a‖ ‖b‖)`` along the last axis (float64; 0 where a norm is 0).

    The similarity Sentence-BERT compares mean-pooled embeddings with (Reimers & Gurevych 2019).

    Args:
        a, b: float ``(..., d)``, broadcastable against each other.

    Returns:
        float64 ``(...)`` in [-1, 1].
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    denom = np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)
    dots = (a * b).sum(-1)
    return np.divide(dots, denom, out=np.zeros_like(dots, dtype=np.float64), where=denom > 0)


@dataclass
class Ranking:
    """Sentences ranked by cosine similarity to a query.

    Attributes:
        order: int ``(n,)`` indices into ``texts``, most similar first.
        similarity: float64 ``(n,)`` cosine similarity of each text (in ``texts`` order) to the query.
        texts: the candidate sentences.
    """

    order: np.ndarray
    similarity: np.ndarray
    texts: list[str]

    def rank_of(self, text: str) -> int | None:
        """1-based rank of ``text`` (None if absent)."""
        for pos, i in enumerate(self.order):
            if self.texts[i] == text:
                return pos + 1
        return None


def rank_sentences(loaded: LoadedModel, query: str, texts: Sequence[str], heads_off: Iterable = (), *,
                   max_tokens: int | None = None) -> Ranking:
    """Rank ``texts`` by cosine similarity of their embeddings to ``query``'s, all embedded by the model
    with ``heads_off`` switched off (semantic search as in Reimers & Gurevych 2019).

    Returns:
        :class:`Ranking` (ties keep the order of ``texts``).

    Raises:
        EmptyTextError, InvalidHeadError, UnsupportedOperationError: as :func:`embed`.
    """
    texts = list(texts)
    embs = embed(loaded, [query] + texts, heads_off, max_tokens=max_tokens)
    sims = cosine(embs[1:], embs[0][None, :])
    return Ranking(order=np.argsort(-sims, kind="stable"), similarity=sims, texts=texts)
