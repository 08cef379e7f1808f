"""One forward pass on one text: tokens with exact character spans, words, every head's attention."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import torch

from . import capture
from .capture import softmax as fallback_masks
from .errors import EmptyTextError, InvalidArgumentError, ModelOutOfMemoryError, UnsupportedOperationError
from .loading import LoadedModel
from .anatomy.inputs import accepts as _accepts
from .heads import heads_to_gates, validate_heads
from .masks import resolve_masks
from .outputs import TopK, collect_hidden, fill_outputs, generate_target, lm_blocks
from .tokens import Token, Word, batched, check_text, group_words, tokens_from_encoding, truncate
from .collect import Collector, attach_stacks  # noqa: F401  (models.analysis.attach_stacks as before)
from .store import MATERIALIZE_BYTES, AttentionStack, MaskStack, Replay


# Fallback path only (its weights come back all at once from the model): float32 bytes of every weight at
# most; longer texts are cut. The interface path reads up to the model's own maximum positions.
WEIGHT_BUDGET_BYTES = 1 << 30
# An analysis keeps every weight when all stacks together take at most this many float32 bytes; above it
# the weights are computed on demand (models.store) and only statistics and overview maps are kept.
KEEP_BYTES = 32 << 20


@dataclass
class Analysis:
    """The result of :func:`analyze`: one text through one model.

    Attributes:
        model: the name the model was loaded by. family: ``encoder``/``decoder``/``encoder-decoder``.
        capture_path: ``interface`` or ``fallback`` (see :mod:`models.capture`).
        text, text_pair, target: the inputs (``target`` is the decoder text of an encoder-decoder).
        tokens: tokens of the encoder input (encoders, encoder-decoders) or the decoder input (decoders).
        target_tokens: decoder-side tokens of an encoder-decoder (None otherwise).
        words, target_words: :class:`Word` groups of ``tokens`` / ``target_tokens``.
        attentions: ``stack -> AttentionStack``, read like float32 ``(layers, heads, query_len, key_len)``
            (:class:`models.store.AttentionStack`): held whole for short inputs (``kept``), else each
            layer or head is computed exactly when indexed (``a.attentions[stack][layer, head]``).
            Stacks: ``encoder`` (queries and keys: ``tokens``), ``decoder`` (decoders: ``tokens``;
            encoder-decoders: ``target_tokens``), ``cross`` (queries ``target_tokens``, keys ``tokens``).
            Each row sums to 1 (0 for a query with no allowed key under a replaced mask), except in layers
            with an attention sink (``sinks``), whose rows sum to ``1 - sink_share``.
        missing_stacks: ``stack -> why it is not in attentions``: a stack of the model that is not shown
            (:attr:`models.loading.LoadedModel.missing_stacks`; Pegasus-X's local/global encoder).
        sinks: ``stack -> [layers with a learned attention sink]`` (:attr:`models.anatomy.site.Site.sink`;
            GPT-OSS); empty for models without one. See :meth:`sink_share`.
        statistics: ``stack -> name -> float32 (layers, heads)``: the per-head statistics of the raw
            weights (:class:`models.statistics.HeadStatistics`; names as ``viz.transforms.STATISTICS``).
        overview: ``stack -> float32 (layers, heads, min(q, 64), min(k, 64))``: every head's map pooled
            (:class:`models.statistics.Overview`; equal to ``viz.transforms.pool(weights, 64)``).
            Both are computed together the first time either is read: from the kept weights, or by one
            more forward pass that sees every layer's weights block by block.
        kept: True when every weight is held in memory (inputs up to ``KEEP_BYTES`` of weights).
        layer_labels: ``stack -> [the model's own block number of each attention layer]`` where it differs
            from the layer index (hybrid models: Jamba's attention layer 0 is its block 4; the other blocks
            have no attention and no map); empty when every layer is its own block.
        truncated: how many tokens were dropped from the end (0 if none); ``max_tokens`` the limit used.
        next_token: decoders/encoder-decoders: top-k next-token predictions at each position.
        loss: mean next-token cross-entropy of the text in nats (decoders, encoder-decoders); else None.
        mask_fills: MLM encoders: ``token index -> TopK`` row for each mask token.
        embedding: encoders without a head: float32 ``(hidden,)`` mean of the last hidden states over
            all tokens (the sentence-transformers mean pooling, Reimers & Gurevych 2019).
        hidden_states: when asked for: ``stack -> float32 (layers + 1, seq_len, hidden)``.
        logits: when asked for: float32 ``(positions, vocab)`` of the decoder / MLM head.
        heads_off: the heads that were switched off. mask: the mask mode used (str).
        kv_heads: key/value heads of a GQA model (None when each query head has its own).
        masks: ``stack -> MaskStack``, read like bool ``(layers, query_len, key_len)`` (each distinct mask
            stored once), True where the layer's mask let the query
            attend the key, read from the mask each layer was actually called with (the native one, or the
            replacement; per layer, so Gemma 3's sliding layers differ from its full ones). On the fallback
            path, whose attention modules build their masks internally, only a replaced mask is listed.
        run: the forward call this analysis ran (inputs, heads off, masks; :class:`models.store.Replay`), run
            again by :func:`models.flow.information_flow`; None where weights were read from the model's
            ``output_attentions`` (fallback path).
    """

    model: str
    family: str
    capture_path: str
    text: str
    tokens: list[Token]
    words: list[Word]
    attentions: dict[str, AttentionStack]
    text_pair: str | None = None
    target: str | None = None
    target_tokens: list[Token] | None = None
    target_words: list[Word] | None = None
    truncated: int = 0
    max_tokens: int = 0
    next_token: TopK | None = None
    loss: float | None = None
    mask_fills: dict[int, TopK] = field(default_factory=dict)
    embedding: np.ndarray | None = None
    hidden_states: dict[str, np.ndarray] = field(default_factory=dict)
    logits: np.ndarray | None = None
    heads_off: frozenset = frozenset()
    mask: str = "native"
    kv_heads: int | None = None
    masks: dict[str, MaskStack] = field(default_factory=dict)
    statistics: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    overview: dict[str, np.ndarray] = field(default_factory=dict)
    kept: bool = True
    layer_labels: dict[str, list[int]] = field(default_factory=dict)
    sinks: dict[str, list[int]] = field(default_factory=dict)
    missing_stacks: dict[str, str] = field(default_factory=dict)
    run: object = field(default=None, repr=False, compare=False)

    def sink_share(self, stack: str, layer: int, head: int | None = None) -> np.ndarray:
        """The attention each query gives its layer's learned sink instead of a token.

        A sink is one more logit per head in the softmax with no value (Xiao et al. 2024, §3.2; GPT-OSS),
        so ``weights[q].sum() + share[q] = 1`` exactly as the model computed it. Layers without a sink
        give zeros.

        Args:
            stack: a stack of ``attentions``. layer: its layer index. head: one head, or None for all.

        Returns:
            float32 ``(heads, query_len)`` (``(query_len,)`` for one head), in [0, 1]: ``1 - row sum`` of
            the layer's weights (computed when indexed, like ``attentions``).

        Raises:
            KeyError: an unknown stack. IndexError: a layer or head out of range.
        """
        layer = range(len(self.attentions[stack]))[layer]
        weights = self.attentions[stack][layer] if head is None else self.attentions[stack][layer, head]
        if layer not in self.sinks.get(stack, ()):
            return np.zeros(weights.shape[:-1], dtype=np.float32)
        return np.clip(1.0 - weights.sum(-1, dtype=np.float64), 0.0, 1.0).astype(np.float32)

    @property
    def perplexity(self) -> float | None:
        """``exp(loss)`` (loss in nats, so the per-token perplexity), or None when there is no loss.

        The exponent is capped at 700 so a huge loss gives a large finite float, never an OverflowError.
        """
        return None if self.loss is None else float(math.exp(min(self.loss, 700)))

    def axis_tokens(self, stack: str) -> tuple[list[Token], list[Token]]:
        """(query tokens, key tokens) of a stack's attention matrices ``(layers, heads, query, key)``.

        ``cross``: (``target_tokens``, ``tokens``); ``decoder`` of an encoder-decoder: ``target_tokens``
        on both axes; any other name (``encoder``, a decoder-only ``decoder``): ``tokens`` on both.
        """
        if stack == "cross":
            return self.target_tokens or [], self.tokens
        if stack == "decoder" and self.family == "encoder-decoder":
            return self.target_tokens or [], self.target_tokens or []
        return self.tokens, self.tokens

    def axis_words(self, stack: str) -> tuple[list[Word], list[Word]]:
        """(query words, key words) of a stack, matching :meth:`axis_tokens`."""
        if stack == "cross":
            return self.target_words or [], self.words
        if stack == "decoder" and self.family == "encoder-decoder":
            return self.target_words or [], self.target_words or []
        return self.words, self.words

    def summary(self) -> dict:
        """JSON-ready summary (used by ``python -m models analyze``): token labels, attention shapes as
        lists, ``loss`` in nats (4 decimals) and ``perplexity`` when there is a loss, the top 5 next-token
        predictions at the last position, ``embedding_dim``, and the top fills of each mask token."""
        out = {
            "model": self.model,
            "family": self.family,
            "capture_path": self.capture_path,
            "text": self.text,
            "tokens": [t.label for t in self.tokens],
            "words": [w.text for w in self.words],
            "attentions": {k: list(v.shape) for k, v in self.attentions.items()},
            "truncated_tokens": self.truncated,
            "max_tokens": self.max_tokens,
            "mask": self.mask,
            "heads_off": sorted(list(h) for h in self.heads_off),
        }
        if self.target is not None:
            out["target"] = self.target
            out["target_tokens"] = [t.label for t in self.target_tokens or []]
        if self.loss is not None:
            out["loss"] = round(self.loss, 4)
            out["perplexity"] = round(self.perplexity, 3)
        if self.next_token is not None:
            out["next_token_top5"] = [
                [tok, round(float(p), 4)] for tok, p in zip(self.next_token.tokens[-1][:5], self.next_token.probs[-1][:5])
            ]
        if self.embedding is not None:
            out["embedding_dim"] = int(self.embedding.shape[0])
        if self.mask_fills:
            out["mask_fills"] = {str(i): t.tokens[0][:5] for i, t in self.mask_fills.items()}
        return out


def weight_budget_tokens(loaded: LoadedModel) -> int:
    """Longest input whose attention weights, all held at once, fit ``WEIGHT_BUDGET_BYTES`` (1 GiB).

    All weights are ``layers x heads x n x n`` float32 (4 bytes), summed over all stacks as if every stack
    had ``n`` queries and keys: ``n = floor(sqrt(WEIGHT_BUDGET_BYTES / (4 · Σ_stacks layers · heads)))``,
    and at most the model's own limit. Used where every weight is held: the fallback path (the model returns
    them all) and the cost page's "captured" measurement.

    Returns:
        int >= 1 (tokens).
    """
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
    if loaded.capture_path == "fallback" or loaded.fallback_stacks:
        return weight_budget_tokens(loaded)
    return max(1, loaded.max_positions)



_A_FAMILY = {"encoder": "an encoder", "decoder": "a decoder", "encoder-decoder": "an encoder-decoder"}


def _only_for(model: LoadedModel, family: str, what: str, instead: dict[str, str], code: str) -> None:
    """Raise UnsupportedOperationError (``code``) unless ``model`` is of ``family``: says what the model is, what
    the argument is for (``what``) and what to do instead on this model's family (``instead[family]``)."""
    if model.family != family:
        raise UnsupportedOperationError(
            f"Model '{model.name}' is {_A_FAMILY.get(model.family, model.family)}: {what} {instead.get(model.family, '')}".rstrip(),
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
    keep: bool | None = None,
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
            boolean ``(n, n)`` array | dict ``stack -> mask`` (see :mod:`models.masks`).
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
            weights, or in one more forward pass).

    Memory: the weights are computed by the family's eager function in blocks of query rows
    (:data:`models.capture.CHUNK_BYTES`), so one analysis never holds a whole layer unless ``keep``; the
    longest input is the model's own (:func:`default_max_tokens`). A causal LM's logits are computed in
    blocks of positions above ``models.outputs.LOGITS_BYTES`` (256 MiB).

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
            ``top_k`` not a whole number >= 1; ``keep`` not a bool or None; ``keep=True`` for more than
            ``MATERIALIZE_BYTES`` of weights.
        ModelOutOfMemoryError: the forward pass ran out of memory.
    """
    text = check_text(text, "text")
    if model.input_name != "input_ids":
        raise UnsupportedOperationError(
            f"Model '{model.name}' reads {model.input_name} (a speech model), not text: "
            "use models.analyze_audio with a recording.",
            code="speech_model_reads_audio", model=model.name
        )
    if text_pair is not None:
        text_pair = check_text(text_pair, "text pair")
        _only_for(model, "encoder", "text_pair is the second sentence of an encoder's sentence pair ([CLS] A [SEP] B "
                  "[SEP]).", {"decoder": "Put both sentences in text.", "encoder-decoder": "Pass the decoder text as target."},
                  code="text_pair_needs_encoder")
    if target is not None:
        target = check_text(target, "target text")
        _only_for(model, "encoder-decoder", "target is the decoder text of an encoder-decoder (translation, speech).",
                  {"encoder": "Use text_pair for a second sentence.", "decoder": "Put the whole text in text."},
                  code="target_needs_encdec")
    tok = model.tokenizer
    specials = tok.num_special_tokens_to_add(pair=text_pair is not None)
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, (int, np.integer))
                                   or max_tokens <= specials):
        raise InvalidArgumentError(
            f"max_tokens must be a whole number above {specials} (the model's {specials} special tokens), "
            f"got {max_tokens!r}; None uses the default ({default_max_tokens(model)})."
        )
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
        raise InvalidArgumentError(f"top_k must be a whole number of at least 1, got {top_k!r}.")
    # never past the model's position limit (a longer input has no position embeddings: an index error)
    limit = int(min(max_tokens, model.max_positions) if max_tokens is not None else default_max_tokens(model))
    heads_off = validate_heads(model, heads_off)
    gates = heads_to_gates(model, heads_off)

    texts = [text] if text_pair is None else [text, text_pair]
    enc_full = tok(text, text_pair, return_offsets_mapping=True, return_special_tokens_mask=True, truncation=False)
    n_full = len(enc_full["input_ids"])
    if n_full > limit:
        enc = truncate(tok, text, text_pair, enc_full, limit)
    else:
        enc = enc_full
    truncated = max(0, n_full - len(enc["input_ids"]))
    tokens = tokens_from_encoding(batched(enc), texts, tok)
    for segment, what in enumerate(("text", "text_pair")[:len(texts)]):
        if not any(x.end > x.start for x in tokens if x.segment == segment):  # e.g. only NUL characters
            raise EmptyTextError(f"The {what} has no character the model reads: its tokenizer drops every one "
                                 "(control characters such as NUL).",
                                 code="unreadable_" + what)
    words = group_words(tokens, texts)
    input_ids = torch.tensor([enc["input_ids"]], device=model.device)
    inputs = {"input_ids": input_ids}
    if "token_type_ids" in enc and model.family == "encoder":
        inputs["token_type_ids"] = torch.tensor([enc["token_type_ids"]], device=model.device)

    target_tokens = target_words = None
    labels = None
    if model.family == "encoder-decoder":
        if target is None:
            target = generate_target(model, inputs)
        tenc = tok(text_target=target, return_offsets_mapping=True, return_special_tokens_mask=True,
                   truncation=True, max_length=limit - 1)
        start_id = model.decoder_start_id
        tgt_ids = list(tenc["input_ids"])
        dec_ids = [start_id] + tgt_ids[:-1]
        labels = torch.tensor([tgt_ids], device=model.device)
        inputs["decoder_input_ids"] = torch.tensor([dec_ids], device=model.device)
        t_tokens = tokens_from_encoding(batched(tenc), [target], tok)
        start_piece = tok.convert_ids_to_tokens([start_id])[0]
        target_tokens = [Token("", 0, 0, True, int(start_id), start_piece, 0)] + t_tokens[:-1]
        target_words = group_words(target_tokens, [target])

    masks, mask_desc = resolve_masks(model, mask, len(tokens), len(target_tokens) if target_tokens else None)
    fallback = model.capture_path == "fallback"
    eager_stacks = set(model.stacks) if fallback else set(model.fallback_stacks)  # read from output_attentions
    # masks of stacks read from output_attentions, proven by resolve_masks' probe: through the model's own
    # attention_mask argument, or at its attention modules' softmax (fallback_masks.applying)
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
    result = Analysis(
        model=model.name, family=model.family, capture_path=model.capture_path, text=text, tokens=tokens,
        words=words, attentions={}, text_pair=text_pair, target=target, target_tokens=target_tokens,
        target_words=target_words, truncated=truncated, max_tokens=limit, heads_off=heads_off, mask=mask_desc,
        kv_heads=model.num_key_value_heads, layer_labels=model.layer_labels(), missing_stacks=dict(model.missing_stacks),
        sinks={stack: sorted(s.layer for s in model.sites if s.stack == stack and s.sink)
               for stack in model.stacks if any(s.sink and s.stack == stack for s in model.sites)},
    )
    total = sum(layers * heads * len(result.axis_tokens(stack)[0]) * len(result.axis_tokens(stack)[1]) * 4
                for stack, (layers, heads) in model.stacks.items())
    if keep is not None and not isinstance(keep, (bool, np.bool_)):
        raise InvalidArgumentError(f"keep must be True, False or None, got {keep!r}.")
    keep_all = bool(eager_stacks) or (total <= KEEP_BYTES if keep is None else bool(keep))
    if keep_all and not eager_stacks and total > MATERIALIZE_BYTES:
        raise InvalidArgumentError(
            f"keep=True would hold {total / 2 ** 30:.1f} GiB of weights ({len(tokens)} tokens); the limit is "
            f"{MATERIALIZE_BYTES / 2 ** 30:.1f} GiB. Leave keep=None: weights are then computed when indexed."
        )
    collector = Collector(model, result, keep_all)
    call = dict(inputs, output_hidden_states=hidden_states, output_attentions=bool(eager_stacks), return_dict=True,
                **model.call_kwargs)
    if model.family == "decoder" and _accepts(model.model, "use_cache"):
        # one pass over a (long) text: a key/value cache would only hold memory. Encoder-decoders keep their
        # default: some (T5Gemma) mask their decoder's pad tokens only when they run without a cache.
        call["use_cache"] = False
    head_blocks = lm_blocks(model, len(tokens), keep_logits)
    if head_blocks:
        call["logits_to_keep"] = 1
    last_hidden: list[torch.Tensor] = []
    hook = None
    chunk_bytes = capture.CHUNK_BYTES
    try:
        with torch.no_grad(), capture.capture(
            model.site_index, gates=gates, masks=masks, record=False,
            sink=collector.sink if (keep_all and not fallback) else None,
            mask_sink=None if fallback else collector.mask_sink, chunk_bytes=chunk_bytes,
            fused=not keep_all and model.sdpa_ok,
        ) as state:
            if head_blocks:
                # the model is shared between threads: keep only this call's final hidden states
                def grab(_module, _args, out, state=state):
                    if capture.current() is state:
                        last_hidden.append(out[0] if isinstance(out, tuple) else out.last_hidden_state)

                hook = model.model.base_model.register_forward_hook(grab)
            with fallback_masks.applying(softmax_masks):
                outputs = model.model(**call)
    except torch.OutOfMemoryError as exc:
        raise ModelOutOfMemoryError(
            f"Out of memory running '{model.name}' on {len(tokens)} tokens ({model.device}); try a shorter text.",
            code="oom_tokens", model=model.name, tokens=len(tokens), device=str(model.device)
        ) from exc
    finally:
        if hook is not None:
            hook.remove()

    if eager_stacks:
        for stack, tensors in fallback_masks.eager_maps(model, outputs, state).items():
            if stack not in eager_stacks:
                continue
            for layer, t in enumerate(tensors):
                collector.sink(capture.Site(stack, layer, t.shape[1], ""), 0, 0, t, t.shape[-2], t.shape[-1])
        collector.keep = True
    eager_kept = {stack: MaskStack([m.numpy()], [0] * model.stacks[stack][0]) for stack, m in eager_masks.items()}
    replay_call = {k: v for k, v in call.items() if k not in ("output_hidden_states", "output_attentions")}
    if "logits_to_keep" not in replay_call and model.head == "lm" and _accepts(model.model, "logits_to_keep"):
        replay_call["logits_to_keep"] = 1
    run = Replay(model, replay_call, gates, masks, chunk_bytes)
    result.run = run if not eager_stacks else None
    replay = None if keep_all else run
    collector.finish(result, replay)
    result.masks.update(eager_kept)
    fill_outputs(model, result, outputs, input_ids, labels, top_k, keep_logits,
                  last_hidden[0] if last_hidden else None)
    if hidden_states:
        result.hidden_states = collect_hidden(model, outputs)
    return result


