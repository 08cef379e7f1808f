"""Switching heads off and measuring one metric: the heads of a model, keep matrices and gates, a text
prepared once, batched evaluation of many head sets (see the package docstring)."""

from __future__ import annotations

import contextvars
import threading
import weakref
from dataclasses import dataclass
from collections.abc import Iterable, Sequence

import numpy as np
import torch

from .. import checks
from .. import capture
from ..analysis import default_max_tokens
from ..errors import InvalidArgumentError, ModelOutOfMemoryError, UnsupportedOperationError
from ..analysis.heads import validate_heads
from ..loading.model import LoadedModel
from ..analysis.outputs import generate_target


# Longest text the pruning functions read by default (tokens): ablation runs a forward pass per head.
MAX_TOKENS = 1024


def _limit(loaded: LoadedModel, max_tokens: int | None) -> int:
    """``max_tokens`` (a whole number from 2, the least a next-token loss needs, to the model's own limit), else
    the smaller of :data:`MAX_TOKENS` and the model's own default.

    Raises:
        InvalidArgumentError: ``max_tokens`` out of that range.
    """
    if max_tokens is not None:
        return checks.whole("max_tokens", max_tokens, 2, max(2, loaded.max_positions))
    return int(min(MAX_TOKENS, default_max_tokens(loaded)))


HeadId = tuple[str, int, int]

#: Shares of heads pruned along a pruning curve: 0 %, 10 %, ..., 90 %.
DEFAULT_SHARES = tuple(round(0.1 * i, 1) for i in range(10))

METRIC_KINDS = ("loss", "mask_loss", "seq2seq_loss", "embedding_distance")
_STACK_ORDER = ("encoder", "decoder", "cross")


# --------------------------------------------------------------------------------------------------
# Heads, gates and metrics
# --------------------------------------------------------------------------------------------------


@checks.needs_model
def head_list(loaded: LoadedModel) -> list[HeadId]:
    """Every head of the model as ``(stack, layer, head)``, ordered by stack (encoder, decoder, cross),
    layer, head. Position ``i`` in this list is column ``i`` of the keep matrices used below."""
    out: list[HeadId] = []
    for site in _sites(loaded):
        out.extend((site.stack, site.layer, h) for h in range(site.heads))
    return out


def _sites(loaded: LoadedModel) -> list[capture.Site]:
    return sorted(loaded.sites, key=lambda s: (_STACK_ORDER.index(s.stack), s.layer))


@checks.needs_model
def metric_kind(loaded: LoadedModel) -> str:
    """Which metric measures this model (see the module docstring): ``loss`` | ``mask_loss`` |
    ``seq2seq_loss`` | ``embedding_distance``."""
    return {"lm": "loss", "mlm": "mask_loss", "seq2seq": "seq2seq_loss"}.get(loaded.head, "embedding_distance")


@checks.needs_model
def check_heads(loaded: LoadedModel, heads: Iterable) -> frozenset[HeadId]:
    """Validate ``(stack, layer, head)`` triples (see :func:`models.analysis.heads.validate_heads`).

    Raises:
        InvalidHeadError: a malformed triple or one the model lacks.
        UnsupportedOperationError: a fallback-path model whose output projection is unknown.
    """
    return validate_heads(loaded, heads)


@checks.needs_model
def keep_matrix(loaded: LoadedModel, rows: Sequence[Iterable[HeadId]]) -> np.ndarray:
    """One row of gates per set of heads switched off.

    Args:
        rows: for each batch row, the ``(stack, layer, head)`` triples to switch off.

    Returns:
        float64 ``(len(rows), len(head_list(loaded)))``: 1 keeps a head, 0 switches it off.

    Raises:
        InvalidHeadError: a head the model does not have.
    """
    rows = checks.sequence("rows", rows, least=0)
    index = {h: i for i, h in enumerate(head_list(loaded))}
    keep = np.ones((len(rows), len(index)))
    for r, heads in enumerate(rows):
        for h in check_heads(loaded, heads):
            keep[r, index[h]] = 0.0
    return keep


@checks.needs_model
def gates_from_keep(loaded: LoadedModel, keep: torch.Tensor, *, all_layers: bool = False) -> dict:
    """Split a ``(batch, total_heads)`` keep tensor into capture gates ``(stack, layer) -> (batch, heads)``.

    Layers whose gates are all 1 are left out (they then run untouched, bit-identical) unless
    ``all_layers`` (needed when ``keep`` carries gradients or tangents).

    Args:
        keep: float tensor ``(batch, total_heads)`` in :func:`head_list` order (1 on, 0 off).

    Returns:
        ``(stack, layer) -> (batch, heads)`` slices of ``keep`` (views, same dtype and device).
    """
    sites = _sites(loaded)
    total = sum(site.heads for site in sites)
    checks.instance("keep", keep, torch.Tensor, "a (batch, total heads) torch tensor")
    if keep.dim() != 2 or keep.shape[1] != total or not keep.is_floating_point():
        raise InvalidArgumentError(f"keep must be a float (batch, {total}) tensor, got {keep.dtype} "
                                   f"{tuple(keep.shape)}.", code="arg_shape", name="keep", shape=f"(batch, {total})",
                                   got=f"{keep.dtype} {tuple(keep.shape)}")
    gates = {}
    offset = 0
    for site in sites:
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


@checks.needs_model
def prepare(loaded: LoadedModel, text: str, *, max_tokens: int | None = None) -> Prepared:
    """Tokenise ``text`` as :func:`models.analyze` does and work out the metric's labels/reference with
    the full model (one forward pass without gates).

    Args:
        max_tokens: cut the text to this many tokens (default :data:`MAX_TOKENS` or the model's own limit, the smaller).

    Returns:
        :class:`Prepared` (batch 1).

    Raises:
        EmptyTextError: empty text. UnsupportedOperationError: a speech model (no text input), a decoder
        text of a single token (no next token to score), or a model some of whose heads cannot be switched
        off (heads mixed before the output projection, a fallback layer with no gate point): their importance
        would read 0 (:func:`models.analysis.heads.validate_heads`).
    """
    text = checks.text(text)
    model, tok = loaded.model, loaded.tokenizer
    if not loaded.reads_text:
        raise UnsupportedOperationError(f"Head pruning needs a text model; '{loaded.name}' reads {loaded.input_name}.",
                                        code="pruning_needs_text_model", model=loaded.name, reads=loaded.input_name)
    validate_heads(loaded, head_list(loaded))  # every head must be one the gates can switch off
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
            prep.reference = _unit_embedding(loaded, model(**inputs, **hidden_kwargs(loaded)))[0]
    return prep


def hidden_kwargs(loaded: LoadedModel) -> dict:
    """What a forward call asks for to pool the last hidden state of a model measured by ``embedding_distance``:
    ``output_hidden_states`` for a class that wraps the base model in a head (a decoder whose next-token readout was
    taken away, :func:`models.anatomy.decoder.readout_sees_target`: XLNet's returns logits, no
    ``last_hidden_state``); nothing for a base model, which returns ``last_hidden_state`` itself."""
    model = loaded.model
    wraps = getattr(model, "base_model", model) is not model
    return {"output_hidden_states": True} if loaded.head == "none" and wraps else {}


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
        assert prep.reference is not None  # prepare() sets it for this kind
        return 1.0 - unit @ _float(prep.reference)
    logits = _float(outputs.logits)
    batch = logits.shape[0]
    labels = prep.labels
    assert labels is not None  # prepare() sets them for the loss kinds
    if prep.kind == "loss":
        pred, target = logits[:, :-1], labels[:, 1:].expand(batch, -1)
    else:
        pred, target = logits, labels.expand(batch, -1)
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
_BLOCKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {layer: block} or {} if unsupported
_BLOCKS_LOCK = threading.Lock()


def _expand_hook(module, args, kwargs=None):
    if kwargs is None:  # torch's registration race: another thread's call without kwargs (models.capture.Hook)
        return None
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
    if prep.kind == "embedding_distance":
        extra.update(hidden_kwargs(loaded))

    def oom(exc):
        raise ModelOutOfMemoryError(
            f"Out of memory running '{loaded.name}' on a batch of {batch} x {prep.n_tokens} tokens; "
            "lower batch_size.",
            code="oom_batch", model=loaded.name, batch=batch, tokens=prep.n_tokens
        ) from exc

    token = _EXPAND.set((id(expand), batch) if expand is not None else None)
    try:  # in the caller's gradient mode: inference_mode, or enable_grad for the gates' gradient (importance)
        with capture.rerun(loaded, gates=gates, no_grad=False, oom=oom):
            outputs = loaded.model(**inputs, return_dict=True, **extra)
    finally:
        _EXPAND.reset(token)
    return outputs


@checks.needs_model
def evaluate(loaded: LoadedModel, prep: Prepared, keep: np.ndarray, *, batch_size: int = 64,
             reuse_prefix: bool = True) -> np.ndarray:
    """The metric for each row of gates, computed in batches of ``batch_size`` rows.

    Args:
        prep: from :func:`prepare`.
        keep: ``(rows, total_heads)`` gates in :func:`head_list` order (1 on, 0 off; other values scale a head's
            output, e.g. 1 ± ε for a finite difference), each with |gate| <= :data:`MAX_GATE`.
        reuse_prefix: run the layers before a batch's first gated layer once and repeat their output to
            the batch (same result up to float rounding; single-stack interface-path models only). Rows
            sorted by their first gated layer profit most (as in :func:`ablation_scores`).

    Returns:
        float64 ``(rows,)``: the metric of each row (nats for the loss kinds; ``1 - cos`` for
        ``embedding_distance``).

    Raises:
        InvalidArgumentError: ``prep`` not from :func:`prepare`, ``keep`` not a finite ``(rows >= 1, total_heads)``
            array, or ``batch_size`` not a whole number in ``[1, MAX_BATCH]``.
        ModelOutOfMemoryError: a batch ran out of memory (lower ``batch_size``).
        RuntimeError: the model returned another number of rows than it was given.
    """
    if not isinstance(prep, Prepared):
        raise InvalidArgumentError(f"prep must come from pruning.prepare(), got {checks.shown(prep)}.",
                                   code="arg_prepared", value=type(prep).__name__)
    keep = check_keep(loaded, keep)
    batch_size = check_batch(batch_size)
    out = np.full(len(keep), np.nan)
    with torch.inference_mode():
        for start in range(0, len(keep), batch_size):
            chunk = torch.as_tensor(keep[start : start + batch_size], dtype=loaded.dtype, device=loaded.device)
            outputs = _forward(loaded, prep, len(chunk), gates_from_keep(loaded, chunk), reuse_prefix=reuse_prefix)
            values = _row_metric(loaded, prep, outputs)
            if values.shape[0] != len(chunk):
                raise RuntimeError(f"Expected {len(chunk)} rows from '{loaded.name}', got {values.shape[0]}.")
            out[start : start + len(chunk)] = values.double().cpu().numpy()
    return out


#: the most rows one batched forward pass takes (``batch_size``): a batch of the text repeated per row
MAX_BATCH = 4096


def check_batch(batch_size) -> int:
    """``batch_size`` as a whole number in ``[1, MAX_BATCH]``.

    Raises:
        InvalidArgumentError: otherwise.
    """
    return checks.whole("batch_size", batch_size, 1, MAX_BATCH)


# the largest |gate| evaluate takes: a gate scales a head's output, and 1e150 of it is infinity in float32
MAX_GATE = 10.0


def check_keep(loaded: LoadedModel, keep) -> np.ndarray:
    """``keep`` as float64 ``(rows >= 1, total_heads)`` gates, each finite with |gate| <= :data:`MAX_GATE`.

    Raises:
        InvalidArgumentError: another shape, or a gate that is NaN, infinite or beyond ±MAX_GATE.
    """
    n = len(head_list(loaded))
    try:
        arr = np.asarray(keep, dtype=np.float64)
    except (TypeError, ValueError):
        arr = None
    if arr is None or arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] != n or not (
            np.abs(arr) <= MAX_GATE).all():
        got = "not numbers" if arr is None else str(arr.shape) if arr.ndim != 2 or arr.shape[1] != n or len(
            arr) < 1 else f"a gate that is not finite or beyond ±{MAX_GATE:g}"
        raise InvalidArgumentError(f"keep must be finite gates (|gate| <= {MAX_GATE:g}) of shape (rows >= 1, {n}), "
                                   f"got {got}.", code="arg_shape", name="keep", shape=f"(rows, {n})", got=got)
    return arr


def _texts(texts: str | Sequence[str]) -> list[str]:
    """One text or a list of texts, checked (:func:`models.checks.texts`)."""
    return checks.texts(texts, "texts")
