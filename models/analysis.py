"""One forward pass on one text: tokens with exact character spans, words, every head's attention."""

from __future__ import annotations

import bisect
import math
import operator
import re
import threading
from dataclasses import dataclass, field
from typing import Iterable, Iterator

import numpy as np
import torch

from . import capture, fallback_masks, statistics as hstats
from .errors import (
    BatchNotSupportedError, EmptyTextError, InvalidArgumentError, InvalidHeadError, InvalidMaskError,
    ModelOutOfMemoryError,
    UnsupportedOperationError,
)
from .loading import LoadedModel
from .sites import accepts as _accepts
from .masks import parse_mask
from .store import MATERIALIZE_BYTES, AttentionStack, LazyMap, MaskStack, Replay


def _combining_marks() -> str:
    """Regex character-class body of every combining mark (Unicode categories Mn, Mc, Me): Arabic harakat,
    Devanagari vowel signs, the dot of a decomposed (NFD) "İ" ... ``\\w`` matches none of them."""
    import sys
    import unicodedata

    ranges: list[list[int]] = []
    for c in range(sys.maxunicode + 1):
        if unicodedata.category(chr(c)) in ("Mn", "Mc", "Me"):
            if ranges and ranges[-1][1] == c - 1:
                ranges[-1][1] = c
            else:
                ranges.append([c, c])
    return "".join(f"\\U{a:08x}" if a == b else f"\\U{a:08x}-\\U{b:08x}" for a, b in ranges)


_MARKS = _combining_marks()
# Words: runs of letters/digits and the combining marks on them (with inner apostrophes), or runs of other
# non-space characters.
WORD_PATTERN = re.compile(rf"[\w{_MARKS}]+(?:['’][\w{_MARKS}]+)*|[^\w\s{_MARKS}]+")
# Fallback path only (its weights come back all at once from the model): float32 bytes of every weight at
# most; longer texts are cut. The interface path reads up to the model's own maximum positions.
WEIGHT_BUDGET_BYTES = 1 << 30
# An analysis keeps every weight when all stacks together take at most this many float32 bytes; above it
# the weights are computed on demand (models.store) and only statistics and overview maps are kept.
KEEP_BYTES = 32 << 20
# Logits of a long input are never held whole (vocabulary x positions float32): above this many bytes the
# prediction head runs on blocks of positions.
LOGITS_BYTES = 256 << 20


@dataclass(frozen=True)
class Token:
    """One token of the input.

    Attributes:
        text: the exact substring of the input it covers (``input[start:end]``), "" for special tokens
            and for the second piece of a character split over two byte-level tokens.
        start, end: character offsets into its segment's text (end exclusive).
        special: True for the tokenizer's control tokens ([CLS], [SEP], <s>, </s>, BOS ...): those it added
            (empty span) and those typed in the text, which the tokenizer turns into the same token (their
            span is kept: :attr:`typed`). The unknown and mask tokens are not control tokens: a typed
            ``[MASK]`` is a word to fill.
        id: vocabulary id.
        piece: the tokenizer's raw token string (byte-level form such as ``Ä±``; never shown as a label).
        segment: 0 for ``text``/``target``, 1 for ``text_pair``.
    """

    text: str
    start: int
    end: int
    special: bool
    id: int
    piece: str
    segment: int = 0

    @property
    def typed(self) -> bool:
        """A special token that was typed in the text (``[SEP]``, ``<|endoftext|>``): it covers characters."""
        return self.special and self.end > self.start

    @property
    def label(self) -> str:
        """Display label: the text without surrounding whitespace; the piece for special tokens;
        ``␣``/``⏎`` for whitespace-only tokens; ``·`` for a continuation byte of a split character."""
        if self.special:
            return self.piece
        stripped = self.text.strip()
        if stripped:
            return stripped
        if self.text:
            return "⏎" if "\n" in self.text else "␣"
        return "·"


@dataclass(frozen=True)
class Word:
    """A word of the input and the tokens it is made of.

    Attributes:
        text: the word as typed. start/end: character span. segment: as for :class:`Token`.
        tokens: indices into the token list, in order.
    """

    text: str
    start: int
    end: int
    segment: int
    tokens: tuple[int, ...]


@dataclass
class TopK:
    """Top-k predictions per position.

    Attributes:
        ids: int64 ``(positions, k)``. probs: float32 ``(positions, k)``, probabilities in [0, 1].
        tokens: decoded text of each id (``tokenizer.decode([id])``), ``positions`` lists of ``k``.
    """

    ids: np.ndarray
    probs: np.ndarray
    tokens: list[list[str]]


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
        sinks: ``stack -> [layers with a learned attention sink]`` (:attr:`models.capture.Site.sink`;
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


def tokens_from_encoding(enc: dict, texts: list[str], tokenizer, index: int = 0) -> list[Token]:
    """Build :class:`Token` objects from a fast tokenizer's output.

    Offsets that overlap the previous token's (a character split over byte-level tokens) are clipped,
    so the tokens' ``text`` fields joined in order reproduce each segment exactly.

    Args:
        enc: the tokenizer's output with ``input_ids``, ``offset_mapping`` and ``special_tokens_mask``
            (character offsets), batched (``enc[key][index]``).
        texts: the segments' texts (``[text]`` or ``[text, text_pair]``) the offsets index into.
        tokenizer: the fast tokenizer that produced ``enc`` (for the raw pieces).
        index: batch row.

    Returns:
        one :class:`Token` per input id, in order.
    """
    ids = enc["input_ids"][index]
    ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
    offsets = enc["offset_mapping"][index]
    offsets = offsets.tolist() if hasattr(offsets, "tolist") else list(offsets)
    special = enc["special_tokens_mask"][index]
    special = special.tolist() if hasattr(special, "tolist") else list(special)
    seq_ids = enc.sequence_ids(index) if hasattr(enc, "sequence_ids") else [0] * len(ids)
    type_ids = enc["token_type_ids"][index] if "token_type_ids" in enc else None
    pieces = tokenizer.convert_ids_to_tokens(ids)
    control = control_token_ids(tokenizer)
    tokens: list[Token] = []
    last_end = {0: 0, 1: 0}
    previous_segment = 0
    for i, (tid, (start, end), spec, seg, piece) in enumerate(zip(ids, offsets, special, seq_ids, pieces)):
        is_special = bool(spec) or seg is None
        if seg is not None:
            segment = previous_segment = seg
        elif type_ids is not None and int(type_ids[i]) in (0, 1):
            segment = int(type_ids[i])  # BERT: the final [SEP] of a pair belongs to segment B
        else:
            segment = previous_segment
        if is_special:
            tokens.append(Token("", last_end[segment], last_end[segment], True, int(tid), piece, segment))
            continue
        start = max(int(start), last_end[segment])
        end = max(int(end), start)
        text = texts[segment][start:end]
        # a control token typed in the text ("[SEP]" becomes the real [SEP]): special, with its span
        typed = int(tid) in control and end > start and text.strip() == str(piece).strip()
        tokens.append(Token(text, start, end, typed, int(tid), piece, segment))
        last_end[segment] = end
    return tokens


def control_token_ids(tokenizer) -> frozenset[int]:
    """The ids of the tokenizer's control tokens: its special tokens (``all_special_ids`` and added tokens
    marked special) but the mask token, unless it also serves as BOS, EOS, SEP, CLS or padding. A token
    with one of these ids counts as typed only where the text spells it out (an ``[UNK]`` standing for
    characters the vocabulary lacks does not; smollm2's ``<|endoftext|>``, its unknown token, typed does)."""
    ids = set(getattr(tokenizer, "all_special_ids", None) or ())
    ids |= {i for i, t in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items() if getattr(t, "special", False)}
    roles = {getattr(tokenizer, f"{r}_token_id", None) for r in ("bos", "eos", "sep", "cls", "pad")}
    mask = getattr(tokenizer, "mask_token_id", None)
    if mask not in roles:
        ids.discard(mask)
    return frozenset(int(i) for i in ids if isinstance(i, int))


def group_words(tokens: list[Token], texts: list[str]) -> list[Word]:
    """Group tokens into the words of the input (``WORD_PATTERN``: letter/digit runs, punctuation runs).

    A token belongs to the word its first non-space character falls in. Special tokens and
    whitespace-only tokens belong to no word; a continuation byte joins the previous token's word.

    Args:
        tokens: from :func:`tokens_from_encoding`. texts: the segments' texts.

    Returns:
        the words that own at least one token, segment by segment, in text order.
    """
    words: list[Word] = []
    for segment, text in enumerate(texts):
        spans = [(m.start(), m.end()) for m in WORD_PATTERN.finditer(text)]
        starts = [a for a, _ in spans]
        members: list[list[int]] = [[] for _ in spans]
        last_word = None
        for i, tok in enumerate(tokens):
            if tok.special or tok.segment != segment:
                continue
            if tok.text == "" and last_word is not None:
                members[last_word].append(i)
                continue
            lead = len(tok.text) - len(tok.text.lstrip())
            pos = tok.start + lead
            if pos >= tok.end:
                continue
            # the word containing pos, else the first word starting inside the token
            w = bisect.bisect_right(starts, pos) - 1
            if not (w >= 0 and pos < spans[w][1]):
                w += 1
                if not (w < len(spans) and spans[w][0] < tok.end):
                    continue
            members[w].append(i)
            last_word = w
        for (a, b), idx in zip(spans, members):
            if idx:
                words.append(Word(text[a:b], a, b, segment, tuple(idx)))
    return words


def _check_text(text, what: str) -> str:
    if isinstance(text, (list, tuple)):
        raise BatchNotSupportedError(
            f"analyze() takes one {what} per call, got {len(text)}: call it once per text, e.g. "
            "[analyze(model, t) for t in texts], so each Analysis has its own tokens without padding."
        )
    if not isinstance(text, str):
        raise InvalidArgumentError(f"The {what} must be a string, got {type(text).__name__}.")
    if not text.strip():
        raise EmptyTextError(f"The {what} is empty: type a sentence to analyse.",
                             code="empty_" + what.replace(" ", "_"))
    return text


def validate_heads(loaded: LoadedModel, heads: Iterable) -> frozenset:
    """Check ``(stack, layer, head)`` triples against the model and return them as a frozenset.

    Args:
        loaded: the model. heads: an iterable of ``(stack, layer, head)`` triples (str, int, int; 0-based
            layer and head), or None for none.

    Returns:
        frozenset of ``(stack, layer, head)`` with plain ``int`` layer and head.

    Raises:
        InvalidHeadError: a malformed triple, or one naming a stack, layer or head the model lacks.
        UnsupportedOperationError: a fallback-path model whose output projection is unknown.
    """
    stacks = loaded.stacks
    example = f"{{('{next(iter(stacks), 'encoder')}', 0, 1)}}"
    if heads is None:
        return frozenset()
    if isinstance(heads, (str, bytes, dict)) or (
        isinstance(heads, (tuple, list)) and len(heads) == 3 and isinstance(heads[0], str)
        and not isinstance(heads[1], (tuple, list, str))
    ):
        raise InvalidHeadError(
            f"Heads are a collection of (stack, layer, head) triples, got {heads!r}: wrap a single head in a set, "
            f"e.g. {example}."
        )
    try:
        items = list(heads)
    except TypeError:
        raise InvalidHeadError(
            f"Heads are a collection of (stack, layer, head) triples, got {heads!r}, e.g. {example}."
        ) from None
    out = set()
    for item in items:
        try:
            stack, layer, head = item
            if isinstance(layer, bool) or isinstance(head, bool) or not isinstance(stack, str):
                raise TypeError
            layer, head = operator.index(layer), operator.index(head)
        except (TypeError, ValueError):
            raise InvalidHeadError(
                f"Heads are (stack, layer, head) triples with a stack name and two whole numbers, got {item!r}, "
                f"e.g. {example}."
            ) from None
        if stack not in stacks:
            raise InvalidHeadError(f"Model '{loaded.name}' has no '{stack}' stack (it has {', '.join(stacks)}).")
        n_layers, n_heads = stacks[stack]
        if not (0 <= layer < n_layers and 0 <= head < n_heads):
            raise InvalidHeadError(
                f"({stack}, {layer}, {head}) is out of range: '{stack}' has {n_layers} layers x {n_heads} heads."
            )
        out.add((stack, layer, head))
    mixed = [s for s in loaded.sites if s.mixed_heads and any(h[:2] == (s.stack, s.layer) for h in out)]
    if mixed:
        raise UnsupportedOperationError(
            f"Model '{loaded.name}' mixes its heads before the output projection ({mixed[0].stack} layer "
            f"{mixed[0].layer}: e.g. differential attention's pairs of heads), so no part of the projection's input "
            "belongs to one head alone: a head cannot be switched off by itself.",
            code="mixed_heads", model=loaded.name, stack=mixed[0].stack, layer=mixed[0].layer)
    if out and (loaded.capture_path == "fallback" or loaded.fallback_stacks):
        missing = [s for s in loaded.sites if not (s.out_proj or s.softmax_gate)
                   and any(h[:2] == (s.stack, s.layer) for h in out)
                   and (loaded.capture_path == "fallback" or s.stack in loaded.fallback_stacks)]
        if missing:
            raise UnsupportedOperationError(
                f"Model '{loaded.name}' uses the fallback capture path and Dikkat does not know its output "
                f"projection for {missing[0].stack} layer {missing[0].layer}: heads cannot be switched off.",
                code="fallback_no_oproj", model=loaded.name, stack=missing[0].stack, layer=missing[0].layer
            )
    return frozenset(out)


def _heads_to_gates(loaded: LoadedModel, heads_off: Iterable) -> dict[tuple[str, int], torch.Tensor]:
    """``{(stack, layer, head), ...}`` -> gates ``(stack, layer) -> (heads,)`` with 0 at switched-off heads.

    Raises:
        InvalidHeadError, UnsupportedOperationError: see :func:`validate_heads`.
    """
    gates: dict[tuple[str, int], torch.Tensor] = {}
    for stack, layer, head in validate_heads(loaded, heads_off):
        gate = gates.setdefault((stack, layer), torch.ones(loaded.stacks[stack][1]))
        gate[head] = 0.0
    return gates


def _topk(logits: torch.Tensor, k: int, tokenizer, cache: dict[int, str] | None = None) -> TopK:
    """Top-``k`` of ``softmax(logits)`` per row; ``cache`` maps ids already decoded to their text."""
    probs = torch.softmax(logits.float(), dim=-1)
    values, ids = probs.topk(min(k, probs.shape[-1]), dim=-1)
    ids_np = ids.cpu().numpy()
    # decode each distinct id once
    cache = {} if cache is None else cache
    texts = []
    for row in ids_np:
        out = []
        for i in row.tolist():
            if i not in cache:
                cache[i] = tokenizer.decode([i])
            out.append(cache[i])
        texts.append(out)
    return TopK(ids=ids_np.astype(np.int64), probs=values.cpu().numpy().astype(np.float32), tokens=texts)


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


def resolve_masks(loaded: LoadedModel, mask, n_main: int, n_target: int | None = None) -> tuple[dict[str, torch.Tensor], str]:
    """Turn the ``mask`` argument of :func:`analyze` into ``stack -> bool tensor``.

    A single mask applies to the model's main self-attention stack (``encoder`` for encoders,
    ``decoder`` for decoders and encoder-decoders); a dict maps stacks to masks.

    Args:
        loaded: the model. mask: as for :func:`analyze`.
        n_main: tokens of the main input (``tokens``). n_target: decoder tokens of an encoder-decoder.

    Returns:
        ``(stack -> bool CPU tensor (n, n), True = allowed; description)``. ``native`` stacks are left
        out of the dict; the description is e.g. ``"causal"`` or ``"encoder=native, decoder=causal"``.

    Raises:
        InvalidMaskError: bad mask, a dict naming a stack the model lacks, or ``cross``.
        UnsupportedOperationError: a replaced mask on the fallback path.
    """
    if isinstance(mask, dict):
        for stack in mask:
            if stack not in loaded.stacks:
                raise InvalidMaskError(
                    f"Model '{loaded.name}' has no '{stack}' stack to mask (it has {', '.join(loaded.stacks)})."
                )
        items = {stack: parse_mask(m) for stack, m in mask.items()}
    else:
        main = loaded.mask_stack
        items = {main: parse_mask(mask)}
    out: dict[str, torch.Tensor] = {}
    for stack, mode in items.items():
        if stack == "cross":
            raise InvalidMaskError("Cross-attention masks cannot be replaced (only self-attention stacks).")
        n = n_target if (stack == "decoder" and loaded.family == "encoder-decoder") else n_main
        matrix = mode.matrix(n or 0)
        if matrix is not None:
            out[stack] = torch.from_numpy(np.ascontiguousarray(matrix))
    _check_fallback_masks(loaded, out)
    desc = ", ".join(f"{s}={m}" for s, m in items.items()) if isinstance(mask, dict) else str(next(iter(items.values())))
    return out, desc


def _truncate(tok, text: str, text_pair: str | None, enc_full, limit: int):
    """``tok(text, text_pair, truncation=True, max_length=limit)`` with offsets and special-token mask.

    For a long pair the fast tokenizer builds every combination of the two texts' overflowing pieces
    (memory grows with the product of their lengths: 1.1 GiB for two 20,000-character texts). So each text
    is first cut just after the tokens the truncation keeps (``longest_first``: the longer text loses tokens
    until both fit, as the tokenizers library does, read from ``enc_full``'s per-text counts) and the cut pair
    is tokenized without truncation. The result is used only when its ids equal the kept tokens of the
    uncut text; otherwise (a cut that changed how the last word splits) the tokenizer truncates the whole
    texts itself."""
    kwargs = dict(return_offsets_mapping=True, return_special_tokens_mask=True)
    if text_pair is not None and hasattr(enc_full, "sequence_ids"):
        seq = enc_full.sequence_ids()
        ids = [[i for i, s in zip(enc_full["input_ids"], seq) if s == k] for k in (0, 1)]
        offsets = [[o for o, s in zip(enc_full["offset_mapping"], seq) if s == k] for k in (0, 1)]
        budget = limit - tok.num_special_tokens_to_add(pair=True)
        n1, n2 = len(ids[0]), len(ids[1])
        swap = n1 > n2
        if swap:
            n1, n2 = n2, n1
        n2 = n1 if n1 > budget else max(n1, budget - n1)
        if n1 + n2 > budget:
            n1 = budget // 2
            n2 = n1 + budget % 2
        keep = (n2, n1) if swap else (n1, n2)
        if min(keep) > 0:
            cut = [t[:offsets[k][keep[k] - 1][1]] for k, t in enumerate((text, text_pair))]
            enc = tok(cut[0], cut[1], truncation=False, **kwargs)
            got = enc.sequence_ids()
            if all([i for i, s in zip(enc["input_ids"], got) if s == k] == ids[k][:keep[k]] for k in (0, 1)):
                return enc
    return tok(text, text_pair, truncation=True, max_length=limit, **kwargs)


def _check_fallback_masks(loaded: LoadedModel, masks: dict[str, torch.Tensor]) -> None:
    """Refuse replaced masks for stacks that do not route through the interface (the fallback path, or an
    interface model's ``fallback_stacks``) unless a probe proved how the stack takes them
    (:func:`models.fallback_masks.mask_support`), with the reason."""
    eager = set(loaded.stacks) if loaded.capture_path == "fallback" else set(loaded.fallback_stacks)
    wanted = {stack: allowed for stack, allowed in masks.items() if stack in eager}
    if not wanted:
        return
    support = fallback_masks.mask_support(loaded)
    missing = sorted(s for s in wanted if support is None or s not in support.scopes)
    if missing and loaded.capture_path != "fallback":
        raise UnsupportedOperationError(
            f"The {', '.join(missing)} stack of '{loaded.name}' does not route through transformers' "
            "AttentionInterface (its weights are the model's own output_attentions), and a probe found that its "
            "weights do not follow a replaced mask: its mask cannot be replaced.",
            code="mask_stack_not_routed", model=loaded.name, stacks=", ".join(missing))
    base = (f"Model '{loaded.name}' uses the fallback capture path (its attention does not route through "
            "transformers' AttentionInterface)")
    if missing:
        raise UnsupportedOperationError(
            f"{base}, and a probe found that its weights follow a per-query mask neither through its "
            "attention_mask argument nor at its softmax: its mask cannot be replaced.",
            code="fallback_mask_unsupported", model=loaded.name)
    for stack, allowed in wanted.items():
        if support.form != "softmax" and not allowed.any(-1).all():
            raise UnsupportedOperationError(
                f"{base}: it cannot give zero weights to a query whose mask allows no key; allow at least one "
                "key per query.",
                code="fallback_mask_empty_row", model=loaded.name)
        if support.scopes[stack] == "causal" and (allowed & ~torch.ones_like(allowed).tril()).any():
            raise UnsupportedOperationError(
                f"{base}, and it combines the mask it is given with its own causal mask: only masks within the "
                "causal mask (causal, sliding_window:W, strided:S, or an array with nothing above the diagonal) "
                "can be applied.",
                code="fallback_mask_causal", model=loaded.name)


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
    blocks of positions above ``LOGITS_BYTES`` (256 MiB).

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
    text = _check_text(text, "text")
    if getattr(model.model, "main_input_name", "input_ids") != "input_ids":
        raise UnsupportedOperationError(
            f"Model '{model.name}' reads {model.model.main_input_name} (a speech model), not text: "
            "use models.analyze_audio with a recording.",
            code="speech_model_reads_audio", model=model.name
        )
    if text_pair is not None:
        text_pair = _check_text(text_pair, "text pair")
        if model.family != "encoder":
            raise UnsupportedOperationError(
                f"Model '{model.name}' is {'a decoder' if model.family == 'decoder' else 'an encoder-decoder'}: "
                "text_pair is the second sentence of an encoder's sentence pair ([CLS] A [SEP] B [SEP]). "
                + ("Put both sentences in text." if model.family == "decoder" else
                   "Pass the decoder text as target."),
                   code="text_pair_needs_encoder", model=model.name, family=model.family
            )
    if target is not None:
        target = _check_text(target, "target text")
        if model.family != "encoder-decoder":
            raise UnsupportedOperationError(
                f"Model '{model.name}' is {'an encoder' if model.family == 'encoder' else 'a decoder'}: target is "
                "the decoder text of an encoder-decoder (translation, speech). "
                + ("Use text_pair for a second sentence." if model.family == "encoder" else
                   "Put the whole text in text."),
                   code="target_needs_encdec", model=model.name, family=model.family
            )
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
    gates = _heads_to_gates(model, heads_off)

    texts = [text] if text_pair is None else [text, text_pair]
    enc_full = tok(text, text_pair, return_offsets_mapping=True, return_special_tokens_mask=True, truncation=False)
    n_full = len(enc_full["input_ids"])
    if n_full > limit:
        enc = _truncate(tok, text, text_pair, enc_full, limit)
    else:
        enc = enc_full
    truncated = max(0, n_full - len(enc["input_ids"]))
    tokens = tokens_from_encoding(_batched(enc), texts, tok)
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
        t_tokens = tokens_from_encoding(_batched(tenc), [target], tok)
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
    collector = _Collector(model, result, keep_all)
    call = dict(inputs, output_hidden_states=hidden_states, output_attentions=bool(eager_stacks), return_dict=True,
                **model.call_kwargs)
    if model.family == "decoder" and _accepts(model.model, "use_cache"):
        # one pass over a (long) text: a key/value cache would only hold memory. Encoder-decoders keep their
        # default: some (T5Gemma) mask their decoder's pad tokens only when they run without a cache.
        call["use_cache"] = False
    head_blocks = _lm_blocks(model, len(tokens), keep_logits)
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
    replay = None if keep_all else Replay(model, replay_call, gates, masks, chunk_bytes)
    collector.finish(result, replay)
    result.masks.update(eager_kept)
    _fill_outputs(model, result, outputs, input_ids, labels, top_k, keep_logits,
                  last_hidden[0] if last_hidden else None)
    if hidden_states:
        result.hidden_states = _collect_hidden(model, outputs)
    return result


class _Collector:
    """The sinks of :func:`analyze`'s forward pass: copies each block of weights into the kept arrays (short
    inputs) and records each distinct mask; then builds the stacks and the (lazily computed) statistics
    and overview maps."""

    def __init__(self, model: LoadedModel, result: Analysis, keep: bool):
        self.model, self.result, self.keep = model, result, keep
        self.kept: dict[str, np.ndarray] = {}
        self.masks: dict[str, dict] = {}
        self._alive: list = []  # masks seen, alive until the end so their ids stay unique

    def sink(self, site, q0: int, k0: int, w: torch.Tensor, q_len: int, k_len: int) -> None:
        arr = self.kept.get(site.stack)
        if arr is None:
            layers = self.model.stacks[site.stack][0]
            arr = self.kept[site.stack] = np.zeros((layers, w.shape[1], q_len, k_len), dtype=np.float32)
        rows, cols = w.shape[2:]
        arr[site.layer, :, q0:q0 + rows, k0:k0 + cols] = w[0].detach().float().cpu().numpy()

    def mask_sink(self, site, attention_mask, q_len: int, k_len: int) -> None:
        per = self.masks.setdefault(site.stack, {"distinct": [], "ids": {}, "layers": {}})
        key = id(attention_mask) if attention_mask is not None else None
        index = per["ids"].get(key)
        if index is None:
            allowed = capture.allowed_of(attention_mask, q_len, k_len).numpy()
            index = next((i for i, m in enumerate(per["distinct"]) if m.shape == allowed.shape
                          and np.array_equal(m, allowed)), None)
            if index is None:
                per["distinct"].append(allowed)
                index = len(per["distinct"]) - 1
            per["ids"][key] = index
            self._alive.append(attention_mask)
        per["layers"][site.layer] = index

    def finish(self, result: Analysis, replay: Replay | None) -> None:
        if self.keep:  # in the model's order of stacks (encoder, decoder, cross), whatever ran first
            shapes = {stack: self.kept[stack].shape for stack in self.model.stacks if stack in self.kept}
        else:
            shapes = {}
            for stack, (layers, heads) in self.model.stacks.items():
                q_tokens, k_tokens = result.axis_tokens(stack)
                shapes[stack] = (layers, heads, len(q_tokens), len(k_tokens))
        attach_stacks(result, {stack: AttentionStack(stack, shape, kept=self.kept.get(stack), replay=replay)
                               for stack, shape in shapes.items()})
        for stack, per in self.masks.items():
            layers = self.model.stacks[stack][0]
            index = [per["layers"].get(layer, 0) for layer in range(layers)]
            result.masks[stack] = MaskStack(per["distinct"], index)
        result.kept = self.keep
        self._alive.clear()


def attach_stacks(result: Analysis, stacks: dict[str, AttentionStack | np.ndarray]) -> None:
    """Set ``result.attentions`` (arrays are wrapped as held :class:`AttentionStack` s) and its lazily
    computed ``statistics`` and ``overview`` (:func:`_summaries`). Used by :func:`analyze` and by
    :func:`models.analyze_audio`."""
    result.attentions = {
        stack: s if isinstance(s, AttentionStack) else
        AttentionStack(stack, s.shape, kept=np.ascontiguousarray(s, dtype=np.float32))
        for stack, s in stacks.items()
    }
    once = _Once(lambda: _summaries(result))
    result.statistics = LazyMap(lambda: once()[0])
    result.overview = LazyMap(lambda: once()[1])


class _Once:
    """Calls ``compute`` the first time it is called (thread-safe) and returns that result ever after."""

    def __init__(self, compute):
        self.compute, self.value, self.lock = compute, None, threading.Lock()

    def __call__(self):
        with self.lock:
            if self.value is None:
                self.value = self.compute()
                self.compute = None
            return self.value


def _summaries(result: Analysis) -> tuple[dict, dict]:
    """Per-head statistics and pooled overview maps of every stack (:mod:`models.statistics`), from the kept
    weights, or else from one more forward pass that hands every layer's weights over block by block (never
    a whole layer at once)."""
    accs = {}
    for stack, lazy in result.attentions.items():
        layers, heads, n_q, n_k = lazy.shape
        k_tokens = result.axis_tokens(stack)[1]
        word_of = -np.ones(n_k, dtype=np.int64)
        for i, w in enumerate(result.axis_words(stack)[1]):
            word_of[[t for t in w.tokens if t < n_k]] = i
        special = ([x.special for x in k_tokens] + [False] * n_k)[:n_k]
        punct = ([hstats.is_punctuation(x.text) and not x.special for x in k_tokens] + [False] * n_k)[:n_k]
        accs[stack] = (hstats.HeadStatistics(layers, heads, n_q, n_k, special=special, punctuation=punct,
                                             word_of=word_of, self_attention=stack != "cross"),
                       hstats.Overview(layers, heads, n_q, n_k))

    def feed(stack: str, layer: int, q0: int, k0: int, w: torch.Tensor) -> None:
        block = w.detach().float()
        for acc in accs[stack]:
            acc.add(layer, q0, k0, block)

    replay = None
    for stack, lazy in result.attentions.items():
        if lazy.kept is not None:
            for layer in range(lazy.shape[0]):
                feed(stack, layer, 0, 0, torch.tensor(lazy.kept[layer]))
        else:
            replay = lazy.replay
    if replay is not None:
        replay.run({(stack, layer) for stack, lazy in result.attentions.items() if lazy.kept is None
                    for layer in range(lazy.shape[0])}, feed)
    return ({stack: acc[0].result() for stack, acc in accs.items()},
            {stack: acc[1].result() for stack, acc in accs.items()})


def _lm_blocks(model: LoadedModel, n: int, keep_logits: bool) -> bool:
    """True when a causal LM's logits for ``n`` positions would exceed ``LOGITS_BYTES`` and the head can
    run on blocks of positions (the model takes ``logits_to_keep`` and the caller did not ask for them)."""
    if model.head != "lm" or keep_logits:
        return False
    vocab = getattr(model.model.get_output_embeddings(), "out_features", None) or 0
    return n * vocab * 4 > LOGITS_BYTES and _accepts(model.model, "logits_to_keep")


def _batched(enc):
    """Wrap a single (unbatched) encoding so ``enc[key][0]`` works and sequence_ids stays available."""

    class _One:
        def __init__(self, e):
            self.e = e

        def __getitem__(self, key):
            return [self.e[key]]

        def __contains__(self, key):
            return key in self.e

        def sequence_ids(self, index=0):
            return self.e.sequence_ids(index) if hasattr(self.e, "sequence_ids") else [0] * len(self.e["input_ids"])

    return _One(enc)


def generate_target(model: LoadedModel, inputs: dict) -> str:
    """An encoder-decoder's greedy output (at most 32 tokens) for ``inputs``, as text ("." when empty)."""
    with torch.no_grad():
        out = model.model.generate(**inputs, max_new_tokens=32, do_sample=False, num_beams=1,
                                   decoder_start_token_id=model.decoder_start_id)
    return model.tokenizer.decode(out[0], skip_special_tokens=True).strip() or "."


def _collect_hidden(model: LoadedModel, outputs) -> dict[str, np.ndarray]:
    out = {}
    pairs = (("encoder", "encoder_hidden_states"), ("decoder", "decoder_hidden_states")) if model.family == "encoder-decoder" \
        else ((("decoder" if model.family == "decoder" else "encoder"), "hidden_states"),)
    for stack, attr in pairs:
        hs = getattr(outputs, attr, None)
        if hs:
            out[stack] = torch.stack([h[0] for h in hs]).float().cpu().numpy()
    return out


def _head_blocks(model: LoadedModel, hidden: torch.Tensor, last_logits: torch.Tensor, rows: int) -> Iterator[torch.Tensor]:
    """A causal LM's logits block by block from its final hidden states ``(n, hidden)``: the output
    embedding, then the family's final soft-capping (Gemma 2/3: ``cap · tanh(logits / cap)``) when the
    config has one.

    Checked against the model's own logits at the last position (``last_logits``, from
    ``logits_to_keep=1``): a family whose head does anything else fails the check.

    Raises:
        UnsupportedOperationError: the blocks do not reproduce the model's own logits.
    """
    head = model.model.get_output_embeddings()
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    cap = getattr(cfg, "final_logit_softcapping", None)

    def block(h: torch.Tensor) -> torch.Tensor:
        out = head(h)
        return torch.tanh(out / cap) * cap if cap else out

    mine = block(hidden[-1:])[0].float()
    if not torch.allclose(mine, last_logits.float(), rtol=1e-4, atol=1e-4):
        raise UnsupportedOperationError(
            f"Model '{model.name}': its prediction head is not output embedding + soft-capping, so a long input's "
            "logits cannot be computed in blocks; analyse a shorter text or pass keep_logits=True."
        )
    for b0 in range(0, hidden.shape[0], rows):
        yield block(hidden[b0:b0 + rows])


def _fill_outputs(model: LoadedModel, result: Analysis, outputs, input_ids, labels, top_k: int, keep_logits: bool,
                  last_hidden: torch.Tensor | None = None) -> None:
    tok = model.tokenizer
    if model.head == "lm" and last_hidden is not None:
        # long input: logits of blocks of positions, never all at once
        n = input_ids.shape[1]
        vocab = outputs.logits.shape[-1]
        rows = max(1, LOGITS_BYTES // 8 // (vocab * 4))
        cache: dict[int, str] = {}
        parts, loss_sum = [], 0.0
        with torch.no_grad():
            for b0, logits in zip(range(0, n, rows), _head_blocks(model, last_hidden[0], outputs.logits[0, -1], rows)):
                parts.append(_topk(logits, top_k, tok, cache))
                targets = input_ids[0, b0 + 1:b0 + 1 + logits.shape[0]]
                if targets.numel():
                    loss_sum += float(torch.nn.functional.cross_entropy(
                        logits[:targets.numel()].float(), targets, reduction="sum"))
        result.next_token = TopK(ids=np.concatenate([p.ids for p in parts]),
                                 probs=np.concatenate([p.probs for p in parts]),
                                 tokens=[row for p in parts for row in p.tokens])
        result.loss = loss_sum / (n - 1) if n > 1 else None
    elif model.head in ("lm", "seq2seq"):
        logits = outputs.logits[0]
        result.next_token = _topk(logits, top_k, tok)
        if model.head == "lm":
            if logits.shape[0] > 1:
                loss = torch.nn.functional.cross_entropy(logits[:-1].float(), input_ids[0, 1:])
                result.loss = float(loss)
        else:
            result.loss = float(torch.nn.functional.cross_entropy(logits.float(), labels[0]))
        if keep_logits:
            result.logits = logits.float().cpu().numpy()
    elif model.head == "mlm":
        logits = outputs.logits[0]
        mask_id = tok.mask_token_id
        if mask_id is not None:
            for i in (input_ids[0] == mask_id).nonzero().flatten().tolist():
                result.mask_fills[i] = _topk(logits[i : i + 1], top_k, tok)
        if keep_logits:
            result.logits = logits.float().cpu().numpy()
    else:
        last = outputs.last_hidden_state[0] if getattr(outputs, "last_hidden_state", None) is not None else outputs.hidden_states[-1][0]
        result.embedding = last.float().mean(dim=0).cpu().numpy()
