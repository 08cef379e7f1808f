"""One forward pass on one text: tokens with exact character spans, words, every head's attention."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import torch

from .. import capture, checks
from ..capture import softmax as fallback_masks
from ..errors import EmptyTextError, InvalidArgumentError, ModelOutOfMemoryError, UnsupportedOperationError
from ..loading.model import LoadedModel
from ..sites.inputs import accepts as _accepts
from ..sites.site import Site
from .heads import heads_to_gates, validate_heads
from .mask_plan import resolve_masks
from .outputs import collect_hidden, fill_outputs, generate_target, lm_blocks
from .result import Analysis
from .tokens import Token, batched, check_text, group_words, tokens_from_encoding, truncate
from .collect import Collector
from . import lse_weights
from .store import MATERIALIZE_BYTES, MaskStack, Replay


# Fallback path only (its weights come back all at once from the model): float32 bytes of every weight at
# most; longer texts are cut. The interface path reads up to the model's own maximum positions.
WEIGHT_BUDGET_BYTES = 1 << 30
# An analysis keeps every weight when all stacks together take at most this many float32 bytes; above it
# the weights are computed on demand (models.store) and only statistics and overview maps are kept.
KEEP_BYTES = 32 << 20


def weight_budget_tokens(loaded: LoadedModel) -> int:
    """Longest input whose attention weights, all held at once, fit ``WEIGHT_BUDGET_BYTES`` (1 GiB).

    All weights are ``layers x heads x n x n`` float32 (4 bytes), summed over all stacks as if every stack
    had ``n`` queries and keys: ``n = floor(sqrt(WEIGHT_BUDGET_BYTES / (4 · Σ_stacks layers · heads)))``,
    and at most the model's own limit. Used where every weight is held: the fallback path (the model returns
    them all) and the cost page's "captured" measurement.

    Returns:
        int >= 1 (tokens).
    """
    checks.loaded_model(loaded)
    total_heads = sum(layers * heads for layers, heads in loaded.stacks.values()) or 1
    by_memory = int(math.sqrt(WEIGHT_BUDGET_BYTES / (4 * total_heads)))
    return max(1, min(loaded.max_positions, by_memory))


def default_max_tokens(loaded: LoadedModel) -> int:
    """Longest input analysed by default, in tokens (special tokens included).

    Interface path: the model's own limit (:attr:`LoadedModel.max_positions`): weights are computed in
    blocks and on demand, so memory does not grow with ``layers x heads x n²``. Fallback path (the model
    returns every weight at once): :func:`weight_budget_tokens`.

    Returns:
        int >= 1.
    """
    checks.loaded_model(loaded)
    if loaded.capture_path == "fallback" or loaded.fallback_stacks:
        return weight_budget_tokens(loaded)
    return max(1, loaded.max_positions)



_A_FAMILY = {"encoder": "an encoder", "decoder": "a decoder", "encoder-decoder": "an encoder-decoder"}


def _only_for(model: LoadedModel, family: str, what: str, instead: dict[str, str], code: str) -> None:
    """Raise UnsupportedOperationError (``code``) unless ``model`` is of ``family``: says what the model is, what
    the argument is for (``what``) and what to do instead on this model's family (``instead[family]``)."""
    if model.family != family:
        raise UnsupportedOperationError(
            (f"Model '{model.name}' is {_A_FAMILY.get(model.family, model.family)}: "
             f"{what} {instead.get(model.family, '')}").rstrip(),
            code=code, model=model.name, family=model.family
        )


def analyze(
    model: LoadedModel,
    text: str,
    *,
    text_pair: str | None = None,
    target: str | None = None,
    heads_off: Iterable | None = None,
    mask="native",
    max_tokens: int | None = None,
    top_k: int = 10,
    hidden_states: bool = False,
    keep_logits: bool = False,
    keep: bool | str | None = None,
) -> Analysis:
    """Run one text through a model and capture every layer's and head's attention weights.

    Args:
        model: from :func:`models.load`.
        text: the input (encoder input, or the decoder's text for decoder-only models).
        text_pair: second segment of a BERT-style sentence pair (``[CLS] A [SEP] B [SEP]``).
        target: decoder text of an encoder-decoder; when None, a greedy continuation (≤ 32 tokens) is
            generated first and analysed. Cut to ``max_tokens - 1`` tokens; the decoder reads it shifted
            right by the decoder start token.
        heads_off: ``(stack, layer, head)`` triples to switch off: the head's output (its slice of the
            input to the output projection) is zeroed (Michel et al. 2019, §2, head mask ξ_h = 0).
        mask: ``native`` | ``bidirectional`` | ``causal`` | ``sliding_window:w`` | ``strided:s`` |
            boolean ``(n, n)`` array | dict ``stack -> mask`` (see :mod:`models.analysis.masks`).
        max_tokens: cut the input after this many tokens, special tokens included (default
            :func:`default_max_tokens`), and never after the model's position limit
            (:attr:`LoadedModel.max_positions`; ``Analysis.max_tokens`` is the limit used);
            ``Analysis.truncated`` counts the tokens dropped.
        top_k: how many predictions to keep per position.
        hidden_states: also return every layer's hidden states, float32 ``(layers + 1, seq_len, hidden)``.
        keep_logits: also return the full logits of the prediction head, float32 ``(positions, vocab)``.
        keep: hold every attention weight in memory (True), compute them when indexed (False), or decide by
            size (None: hold them while all stacks take at most ``KEEP_BYTES``, 32 MiB). Per-head
            statistics and pooled overview maps are computed the first time they are read (from the held
            weights, or in one more forward pass). ``"lse"``: compute them when indexed from each layer's
            queries, keys and row log-sum-exp kept by this pass (:mod:`models.analysis.lse_weights`: no second
            forward pass, equal to the eager weights to float rounding, not bit for bit) where the family allows
            it; a stack it cannot read is computed as with False (``AttentionStack.lse_refused`` says why).

    Memory: the weights are computed by the family's eager function in blocks of query rows
    (:data:`models.capture.CHUNK_BYTES`), so one analysis never holds a whole layer unless ``keep``; the
    longest input is the model's own (:func:`default_max_tokens`). A causal LM's logits are computed in
    blocks of positions above ``models.analysis.outputs.LOGITS_BYTES`` (256 MiB).

    Returns:
        :class:`Analysis` with attentions read like float32 ``(layers, heads, query_len, key_len)``; for
        decoders and encoder-decoders ``loss`` is the mean next-token cross-entropy in nats (decoders:
        ``CE(logits[:-1], ids[1:])``); for encoders without a head ``embedding`` is the float32
        ``(hidden,)`` mean of the last hidden states over all tokens, special tokens included, not
        normalised (Reimers & Gurevych 2019, §3, MEAN pooling).

    Raises:
        EmptyTextError: empty or whitespace-only text. BatchNotSupportedError: a list of texts.
        InvalidArgumentError: a ``text``, ``text_pair`` or ``target`` that is not a string.
        InvalidHeadError, InvalidMaskError: bad ``heads_off``/``mask``.
        UnsupportedOperationError: a speech model (use :func:`models.analyze_audio`); ``text_pair`` for
            a non-encoder; ``target`` for a model that is not an encoder-decoder; heads switched off or a
            mask replaced on the fallback path where that is not possible.
        InvalidArgumentError: ``max_tokens`` not a whole number above the number of special tokens,
            ``top_k`` not a whole number >= 1; ``keep`` not a bool, ``"lse"`` or None; ``keep=True`` for more than
            ``MATERIALIZE_BYTES`` of weights.
        AttentionTooLargeError: ``keep="lse"`` with queries, keys and log-sum-exp above
            ``models.analysis.lse_weights.LSE_BYTES`` (code ``lse_too_large``), before the forward pass.
        ModelOutOfMemoryError: the forward pass ran out of memory.
    """
    text, text_pair, target, limit = _check_arguments(model, text, text_pair, target, max_tokens, top_k)
    heads_off = validate_heads(model, heads_off)
    gates = heads_to_gates(model, heads_off)
    tokens, words, inputs, truncated = _encode(model, text, text_pair, limit)
    target, target_tokens, target_words, labels = _decoder_side(model, inputs, target, limit)
    masks, mask_desc = resolve_masks(model, mask, len(tokens), len(target_tokens) if target_tokens else None)
    eager_stacks, masks, eager_masks, softmax_masks = _split_masks(model, masks, inputs)
    result = Analysis(
        model=model.name, family=model.family, capture_path=model.capture_path, text=text, tokens=tokens,
        words=words, attentions={}, text_pair=text_pair, target=target, target_tokens=target_tokens,
        target_words=target_words, truncated=truncated, max_tokens=limit, heads_off=heads_off, mask=mask_desc,
        kv_heads=model.num_key_value_heads, layer_labels=model.layer_labels(),
        missing_stacks=dict(model.missing_stacks),
        sinks={stack: sorted(s.layer for s in model.sites if s.stack == stack and s.sink)
               for stack in model.stacks if any(s.sink and s.stack == stack for s in model.sites)},
    )
    result.head_masks = {stack: m for stack, m in masks.items() if not isinstance(m, torch.Tensor)}
    keep_all = _keep_all(model, result, keep, eager_stacks)
    collector = Collector(model, result, keep_all)
    # weights not kept: from each layer's queries, keys and log-sum-exp where the family allows (issue 45)
    lengths = {stack: (len(result.axis_tokens(stack)[0]), len(result.axis_tokens(stack)[1])) for stack in model.stacks}
    lse, lse_refused = (None, {}) if keep_all or not isinstance(keep, str) else lse_weights.plan(
        model, lengths, masks, eager_stacks, required=True)
    call = dict(inputs, output_hidden_states=hidden_states, output_attentions=bool(eager_stacks), return_dict=True,
                **model.call_kwargs)
    if model.family == "decoder" and _accepts(model.model, "use_cache"):
        # one pass over a (long) text: a key/value cache would only hold memory. Encoder-decoders keep their
        # default: some (T5Gemma) mask their decoder's pad tokens only when they run without a cache.
        call["use_cache"] = False
    head_blocks = lm_blocks(model, len(tokens), keep_logits)
    if head_blocks:
        call["logits_to_keep"] = 1
    outputs, state, last_hidden = _forward(model, call, gates, masks, softmax_masks, collector, keep_all, head_blocks,
                                           len(tokens), lse)
    if eager_stacks:
        _collect_eager(model, outputs, state, eager_stacks, collector)
    replay_call = {k: v for k, v in call.items() if k not in ("output_hidden_states", "output_attentions")}
    if "logits_to_keep" not in replay_call and model.head == "lm" and _accepts(model.model, "logits_to_keep"):
        replay_call["logits_to_keep"] = 1
    run = Replay(model, replay_call, gates, masks, capture.state.CHUNK_BYTES)
    result.run = run if not eager_stacks else None
    collector.finish(result, None if keep_all else run, lse, lse_refused)
    result.masks.update({stack: MaskStack([m.numpy()], [0] * model.stacks[stack][0])
                         for stack, m in eager_masks.items()})
    fill_outputs(model, result, outputs, inputs["input_ids"], labels, top_k, keep_logits, last_hidden)
    if hidden_states:
        result.hidden_states = collect_hidden(model, outputs)
    return result


def _check_arguments(model: LoadedModel, text, text_pair, target, max_tokens, top_k) -> tuple:
    """Step 1 of :func:`analyze`: the texts checked (``check_text``), each argument that applies only to one family
    checked against the model's, ``max_tokens`` and ``top_k`` checked; returns ``(text, text_pair, target,
    limit)``, ``limit`` the longest input in tokens (never past the model's position limit: a longer input has no
    position embeddings, an index error).

    Raises:
        as :func:`analyze`."""
    text = check_text(text, "text")
    if not model.reads_text:
        raise UnsupportedOperationError(
            f"Model '{model.name}' reads {model.input_name} (a speech model), not text: "
            "use models.analyze_audio with a recording.",
            code="speech_model_reads_audio", model=model.name
        )
    if text_pair is not None:
        text_pair = check_text(text_pair, "text pair")
        _only_for(model, "encoder", "text_pair is the second sentence of an encoder's sentence pair ([CLS] A [SEP] B "
                  "[SEP]).", {"decoder": "Put both sentences in text.",
                              "encoder-decoder": "Pass the decoder text as target."},
                  code="text_pair_needs_encoder")
    if target is not None:
        target = check_text(target, "target text")
        _only_for(model, "encoder-decoder", "target is the decoder text of an encoder-decoder (translation, speech).",
                  {"encoder": "Use text_pair for a second sentence.", "decoder": "Put the whole text in text."},
                  code="target_needs_encdec")
    specials = model.tokenizer.num_special_tokens_to_add(pair=text_pair is not None)
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, (int, np.integer))
                                   or max_tokens <= specials):
        raise InvalidArgumentError(
            f"max_tokens must be a whole number above {specials} (the model's {specials} special tokens), "
            f"got {max_tokens!r}; None uses the default ({default_max_tokens(model)}).",
            code="arg_max_tokens", specials=specials, value=checks.shown(max_tokens), default=default_max_tokens(model)
        )
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
        raise InvalidArgumentError(f"top_k must be a whole number of at least 1, got {top_k!r}.",
                                   code="arg_whole", name="top_k", range=">= 1", value=checks.shown(top_k))
    limit = int(min(max_tokens, model.max_positions) if max_tokens is not None else default_max_tokens(model))
    return text, text_pair, target, limit


def _encode(model: LoadedModel, text: str, text_pair: str | None, limit: int) -> tuple:
    """Step 2: the text (and pair) tokenised with character offsets and cut to ``limit`` tokens; returns
    ``(tokens, words, inputs, truncated)``, ``inputs`` the model's ``input_ids`` (and ``token_type_ids``) as
    int64 ``(1, n)`` on its device, ``truncated`` the number of tokens cut.

    Raises:
        EmptyTextError: the tokenizer drops every character of a text (control characters such as NUL)."""
    tok = model.tokenizer
    texts = [text] if text_pair is None else [text, text_pair]
    enc_full = tok(text, text_pair, return_offsets_mapping=True, return_special_tokens_mask=True, truncation=False)
    n_full = len(enc_full["input_ids"])
    enc = truncate(tok, text, text_pair, enc_full, limit) if n_full > limit else enc_full
    truncated = max(0, n_full - len(enc["input_ids"]))
    tokens = tokens_from_encoding(batched(enc), texts, tok)
    for segment, what in enumerate(("text", "text_pair")[:len(texts)]):
        if not any(x.end > x.start for x in tokens if x.segment == segment):  # e.g. only NUL characters
            raise EmptyTextError(f"The {what} has no character the model reads: its tokenizer drops every one "
                                 "(control characters such as NUL).",
                                 code="unreadable_" + what)
    words = group_words(tokens, texts)
    inputs = {"input_ids": torch.tensor([enc["input_ids"]], device=model.device)}
    if "token_type_ids" in enc and model.family == "encoder":
        inputs["token_type_ids"] = torch.tensor([enc["token_type_ids"]], device=model.device)
    return tokens, words, inputs, truncated


def _decoder_side(model: LoadedModel, inputs: dict, target: str | None, limit: int) -> tuple:
    """Step 3, encoder-decoders only: the decoder's text (a greedy continuation when ``target`` is None) cut to
    ``limit - 1`` tokens and read shifted right by the decoder start token, added to ``inputs`` as
    ``decoder_input_ids``; returns ``(target, target_tokens, target_words, labels)`` (all None for other
    families; ``labels`` int64 ``(1, m)``)."""
    if model.family != "encoder-decoder":
        return target, None, None, None
    tok = model.tokenizer
    if target is None:
        target = generate_target(model, inputs)
    tenc = tok(text_target=target, return_offsets_mapping=True, return_special_tokens_mask=True,
               truncation=True, max_length=limit - 1)
    start_id = model.decoder_start_id
    tgt_ids = list(tenc["input_ids"])
    labels = torch.tensor([tgt_ids], device=model.device)
    inputs["decoder_input_ids"] = torch.tensor([[start_id] + tgt_ids[:-1]], device=model.device)
    t_tokens = tokens_from_encoding(batched(tenc), [target], tok)
    start_piece = tok.convert_ids_to_tokens([start_id])[0]
    target_tokens = [Token("", 0, 0, True, int(start_id), start_piece, 0)] + t_tokens[:-1]
    return target, target_tokens, group_words(target_tokens, [target]), labels


def _split_masks(model: LoadedModel, masks: dict, inputs: dict) -> tuple:
    """Step 4: the replaced masks split by where they apply. Stacks read from ``output_attentions`` (the fallback
    path, and an interface model's eager stacks) take theirs as proven by :func:`resolve_masks`' probe: through
    the model's own ``attention_mask`` argument (added to ``inputs``), or at their attention modules' softmax
    (:func:`models.capture.softmax.applying`); the others through the capture.

    Returns:
        ``(eager_stacks, masks for the capture, eager masks, masks applied at the softmax)``."""
    eager_stacks = set(model.stacks) if model.capture_path == "fallback" else set(model.fallback_stacks)
    eager_masks = {stack: m for stack, m in masks.items() if stack in eager_stacks}
    masks = {stack: m for stack, m in masks.items() if stack not in eager_stacks}
    softmax_masks: dict[str, torch.Tensor] = {}
    if eager_masks:
        form = model.probes["fallback_mask"].form
        if form == "softmax":
            softmax_masks = eager_masks
        else:
            inputs["attention_mask"] = fallback_masks.as_argument(next(iter(eager_masks.values())), form, model.dtype,
                                                                  model.device)
    return eager_stacks, masks, eager_masks, softmax_masks


def _keep_all(model: LoadedModel, result: Analysis, keep, eager_stacks: set) -> bool:
    """Step 5: whether every weight is held (eager stacks always; else ``keep``, or by size: ``KEEP_BYTES``).

    Raises:
        InvalidArgumentError: ``keep`` not a bool, ``"lse"`` or None; ``keep=True`` above ``MATERIALIZE_BYTES``."""
    total = sum(layers * heads * len(result.axis_tokens(stack)[0]) * len(result.axis_tokens(stack)[1]) * 4
                for stack, (layers, heads) in model.stacks.items())
    if keep is not None and not isinstance(keep, (bool, np.bool_)) and not (isinstance(keep, str) and keep == "lse"):
        raise InvalidArgumentError(f"keep must be True, False, 'lse' or None, got {keep!r}.",
                                   code="arg_choice", name="keep", options="True, False, 'lse', None",
                                   value=checks.shown(keep))
    wanted = False if isinstance(keep, str) else keep  # "lse": computed when indexed, as False
    keep_all = bool(eager_stacks) or (total <= KEEP_BYTES if wanted is None else bool(wanted))
    if keep_all and not eager_stacks and total > MATERIALIZE_BYTES:
        raise InvalidArgumentError(
            f"keep=True would hold {total / 2 ** 30:.1f} GiB of weights ({len(result.tokens)} tokens); the limit is "
            f"{MATERIALIZE_BYTES / 2 ** 30:.1f} GiB. Leave keep=None: weights are then computed when indexed.",
            code="keep_too_large", size=round(total / 2 ** 30, 1), tokens=len(result.tokens),
            limit=round(MATERIALIZE_BYTES / 2 ** 30, 1)
        )
    return keep_all


def _forward(model: LoadedModel, call: dict, gates: dict, masks: dict, softmax_masks: dict, collector: Collector,
             keep_all: bool, head_blocks: bool, n: int, lse=None) -> tuple:
    """Step 6: the one forward pass, in a :func:`models.capture.rerun` context (weights to the collector when
    every weight is held; the fused kernel for layers nobody reads otherwise, through ``lse``, a
    :class:`models.analysis.lse_weights.LseCollector`, where it keeps their queries, keys and log-sum-exp). Returns
    ``(outputs, capture state,
    final hidden states or None)``; the final hidden states are kept when the head runs on blocks of positions.

    Raises:
        ModelOutOfMemoryError: the pass ran out of memory."""
    fallback = model.capture_path == "fallback"
    last_hidden: list[torch.Tensor] = []

    def grab(_module, _args, out):  # own: the model is shared between threads, keep only this call's hidden states
        last_hidden.append(out[0] if isinstance(out, tuple) else out.last_hidden_state)

    def oom(exc):
        raise ModelOutOfMemoryError(
            f"Out of memory running '{model.name}' on {n} tokens ({model.device}); try a shorter text.",
            code="oom_tokens", model=model.name, tokens=n, device=str(model.device)
        ) from exc

    hooks = [capture.Hook(model.model.base_model, grab, own=True)] if head_blocks else []
    with capture.rerun(
        model, gates=gates, masks=masks, hooks=hooks, oom=oom,
        sink=collector.sink if (keep_all and not fallback) else None,
        mask_sink=None if fallback else collector.mask_sink, chunk_bytes=capture.state.CHUNK_BYTES,
        fused=not keep_all and model.sdpa_ok, stats=lse,
    ) as state, fallback_masks.applying(softmax_masks):
        outputs = model.model(**call)
    return outputs, state, last_hidden[0] if last_hidden else None


def _collect_eager(model: LoadedModel, outputs, state, eager_stacks: set, collector: Collector) -> None:
    """Step 7, stacks read from ``output_attentions``: their maps (or those read at the softmax) to the collector,
    which then keeps every weight."""
    for stack, tensors in fallback_masks.eager_maps(model, outputs, state).items():
        if stack not in eager_stacks:
            continue
        for layer, t in enumerate(tensors):
            collector.sink(Site(stack, layer, t.shape[1], ""), 0, 0, t, t.shape[-2], t.shape[-1])
    collector.keep = True
