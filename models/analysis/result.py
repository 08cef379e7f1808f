"""What one analysis returns: :class:`Analysis` (tokens, words, every head's attention, the model's
predictions) and :class:`TopK` (top-k predictions per position)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from .indexing import checked_int
from .store import AttentionStack, MaskStack
from .tokens import Token, Word


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
            (:class:`models.analysis.store.AttentionStack`): held whole for short inputs (``kept``), else each
            layer or head is computed exactly when indexed (``a.attentions[stack][layer, head]``).
            Stacks: ``encoder`` (queries and keys: ``tokens``), ``decoder`` (decoders: ``tokens``;
            encoder-decoders: ``target_tokens``), ``cross`` (queries ``target_tokens``, keys ``tokens``).
            Each row sums to 1 (0 for a query with no allowed key under a replaced mask), except in layers
            with an attention sink (``sinks``), whose rows sum to ``1 - sink_share``.
        missing_stacks: ``stack -> why it is not in attentions``: a stack of the model that is not shown
            (:attr:`models.LoadedModel.missing_stacks`; Pegasus-X's local/global encoder).
        sinks: ``stack -> [layers with a learned attention sink]`` (:attr:`models.sites.site.Site.sink`;
            GPT-OSS); empty for models without one. See :meth:`sink_share`.
        statistics: ``stack -> name -> float32 (layers, heads)``: the per-head statistics of the raw
            weights (:class:`models.analysis.statistics.HeadStatistics`; names as ``viz.transforms.STATISTICS``).
        overview: ``stack -> float32 (layers, heads, min(q, 64), min(k, 64))``: every head's map pooled
            (:class:`models.analysis.statistics.Overview`; equal to ``viz.transforms.pool(weights, 64)``).
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
        head_masks: ``stack -> HeadRules`` for a stack run with a mask per head
            (:class:`models.analysis.head_masks.HeadMasks`): each head's pattern (``.patterns``) and, for
            vertical-slash and block-sparse heads, the keys chosen (``.chosen``); see :meth:`head_mask`.
        run: the forward call this analysis ran (inputs, heads off, masks; :class:`models.analysis.store.Replay`), run
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
    statistics: Mapping[str, dict[str, np.ndarray]] = field(default_factory=dict)
    overview: Mapping[str, np.ndarray] = field(default_factory=dict)
    kept: bool = True
    layer_labels: dict[str, list[int]] = field(default_factory=dict)
    sinks: dict[str, list[int]] = field(default_factory=dict)
    missing_stacks: dict[str, str] = field(default_factory=dict)
    head_masks: dict = field(default_factory=dict)
    run: object = field(default=None, repr=False, compare=False)

    def head_mask(self, layer: int, head: int, stack: str | None = None) -> np.ndarray:
        """Bool ``(query_len, key_len)``: the keys one head could attend in this run (True = allowed): its own
        pattern under a mask per head (:attr:`head_masks`), else its layer's mask (:attr:`masks`).

        Raises:
            InvalidArgumentError: a stack this analysis has no mask record of, or no such layer/head.
        """
        from .. import checks
        from ..errors import InvalidArgumentError

        stack = stack or next(iter(self.head_masks or self.masks), None)
        if stack is None or (stack not in self.head_masks and stack not in self.masks):
            raise InvalidArgumentError(f"This analysis recorded no mask for stack {checks.shown(stack)}.",
                                       code="arg_choice", name="stack", options=", ".join(self.masks) or "-",
                                       value=checks.shown(stack))
        recorded = self.masks.get(stack)
        layers = recorded.shape[0] if recorded is not None else self.head_masks[stack].layers
        checks.whole("layer", layer, 0, layers - 1)
        rules = self.head_masks.get(stack)
        if rules is None:
            assert recorded is not None  # a stack without rules per head is one of ``masks`` (checked above)
            checks.whole("head", head, 0, self.attentions[stack].shape[1] - 1)
            return np.asarray(recorded[layer])
        native = np.asarray(recorded[layer]) if recorded is not None and layer not in rules.rules else None
        return rules.matrix(layer, head, native)

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
            InvalidArgumentError: a stack the analysis does not have (code ``no_such_stack``), a layer or head that
                is not a whole number. IndexOutOfRangeError (an IndexError): a layer or head out of range.
        """
        if not isinstance(stack, str) or stack not in self.attentions:
            from ..errors import InvalidArgumentError

            shown = repr(stack)[:60]
            raise InvalidArgumentError(f"'{self.model}' has no stack {shown} (its stacks: "
                                       f"{', '.join(self.attentions)}).",
                                       code="no_such_stack", model=self.model, stack=shown,
                                       stacks=", ".join(self.attentions))
        layer = checked_int(layer, len(self.attentions[stack]), "layer")
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
        perplexity = self.perplexity  # None exactly when there is no loss
        if self.loss is not None and perplexity is not None:
            out["loss"] = round(self.loss, 4)
            out["perplexity"] = round(perplexity, 3)
        if self.next_token is not None:
            out["next_token_top5"] = [
                [tok, round(float(p), 4)]
                for tok, p in zip(self.next_token.tokens[-1][:5], self.next_token.probs[-1][:5])
            ]
        if self.embedding is not None:
            out["embedding_dim"] = int(self.embedding.shape[0])
        if self.mask_fills:
            out["mask_fills"] = {str(i): t.tokens[0][:5] for i, t in self.mask_fills.items()}
        return out
