"""Attention masks as boolean matrices: True where query ``i`` may attend key ``j``.

Mask kinds (``MaskMode``):

* ``native``: the model's own mask (bidirectional for encoders, causal for decoders, the sliding
  window of Mistral/Gemma layers ...); nothing is replaced.
* ``bidirectional``: every query sees every key (BERT; Devlin et al. 2019).
* ``causal``: ``j <= i`` (GPT; Radford et al. 2018; "masked self-attention", Vaswani et al. 2017 §3.2.3).
* ``sliding_window(w)``: ``i - w < j <= i``, the last ``w`` keys including itself (Mistral 7B, Jiang et
  al. 2023; Longformer's window, Beltagy et al. 2020, made causal). Same convention as
  ``transformers.masking_utils.sliding_window_causal_mask_function``.
* ``strided(s)``: ``j <= i`` and (``i - j < s`` or ``(i - j) mod s == 0``), the strided sparse pattern of
  Child et al. 2019 ("Generating Long Sequences with Sparse Transformers", §4.2, A⁽¹⁾ ∪ A⁽²⁾).
* ``sink_window(w, k)``: the sliding window plus the first ``k`` tokens, ``j <= i`` and (``i - j < w`` or
  ``j < k``): StreamingLLM's "window + attention sinks" (Xiao et al. 2023, "Efficient Streaming Language Models
  with Attention Sinks", §3.2 and fig. 1d: 4 initial tokens keep a windowed model's perplexity near full
  attention).
* ``custom``: any boolean ``(n, n)`` matrix.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import torch

from .. import checks
from ..capture import softmax as fallback_masks
from ..errors import InvalidMaskError, UnsupportedOperationError

if TYPE_CHECKING:
    from ..loading.model import LoadedModel

MAX_WIDTH = 10 ** 9  # tokens; a wider window or stride is the same as the whole text
KINDS = ("native", "bidirectional", "causal", "sliding_window", "strided", "sink_window", "custom")
STARTS = ("causal", "bidirectional", "diagonal", "previous", "empty")


def start_matrix(kind: str, n: int) -> np.ndarray:
    """A custom mask to start editing from: bool ``(n, n)``, True where query ``i`` may attend key ``j``.

    ``causal`` is ``j <= i``, ``bidirectional`` all True, ``diagonal`` ``j == i`` (each token sees itself only),
    ``previous`` ``j == i - 1`` (the previous-token pattern of Clark et al. 2019, §3; the first row is empty),
    ``empty`` all False.

    Raises:
        InvalidMaskError: ``kind`` not in :data:`STARTS`, or ``n`` not a whole number ``>= 0``.
        AttentionTooLargeError: n² above :data:`models.checks.MAX_BYTES` bytes.
    """
    if not isinstance(kind, str) or kind not in STARTS:
        raise InvalidMaskError(f"Unknown starting mask {kind!r}; choose one of {', '.join(STARTS)}.",
                               code="unknown_start_mask", kind=_short(kind), choices=", ".join(STARTS))
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise InvalidMaskError(f"n must be a whole number >= 0 (tokens), got {n!r}.", code="bad_mask_size", n=_short(n))
    if n:
        checks.square_size("n", n)  # AttentionTooLargeError above models.checks.MAX_BYTES
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    return {"causal": j <= i, "bidirectional": np.ones((n, n), bool), "diagonal": i == j,
            "previous": j == i - 1, "empty": np.zeros((n, n), bool)}[kind]


@dataclass(frozen=True)
class MaskMode:
    """A mask kind plus its parameter (window width or stride) or matrix.

    Build with :func:`parse_mask`; turn into a matrix with :meth:`matrix`.

    Attributes:
        kind: one of :data:`KINDS`.
        width: ``sliding_window``/``sink_window``: window ``w`` in tokens (the query itself included);
            ``strided``: the stride ``s`` in tokens; None for the other kinds.
        sinks: ``sink_window`` only: how many first tokens every query also sees (``k >= 0``).
        custom: ``custom`` only: bool ``(n, n)``, True = allowed.
    """

    kind: str
    width: int | None = None
    custom: np.ndarray | None = None
    sinks: int | None = None

    def __str__(self) -> str:
        if self.kind in ("sliding_window", "strided"):
            return f"{self.kind}:{self.width}"
        if self.kind == "sink_window":
            return f"{self.kind}:{self.width},{self.sinks}"
        return self.kind

    def matrix(self, n: int) -> np.ndarray | None:
        """Boolean ``(n, n)`` numpy matrix for ``n`` tokens, True where query ``i`` may attend key ``j``;
        ``None`` for ``native``.

        ``causal``: ``j <= i``; ``sliding_window``: ``i - w < j <= i`` (Jiang et al. 2023, §2, "Sliding
        Window Attention"); ``sink_window``: that, or ``j < k`` (Xiao et al. 2023, §3.2); ``strided``: ``j <= i``
        and (``i - j < s`` or ``(i - j) mod s == 0``) (Child et al. 2019, §4.2). A width above ``n`` is treated as
        ``n`` (same matrix).

        Raises:
            InvalidMaskError: a custom matrix that is not ``(n, n)``.
            InvalidArgumentError: ``n`` not a whole number >= 0. AttentionTooLargeError: n² above
                :data:`models.checks.MAX_BYTES` (a text is cut far below it, at the model's ``max_positions``).
        """
        n = checks.square_size("n", n)
        i = np.arange(n)[:, None]
        j = np.arange(n)[None, :]
        if self.kind == "native":
            return None
        if self.kind == "bidirectional":
            return np.ones((n, n), dtype=bool)
        if self.kind == "causal":
            return j <= i
        if self.kind in ("sliding_window", "strided", "sink_window"):
            # a width beyond the text changes nothing (and must not overflow numpy's integers); a MaskMode built
            # without a width (parse_mask always gives one) is refused as parse_mask refuses it (:func:`_width`),
            # one without a sink count takes parse_mask's default (:func:`_sinks`)
            width = min(_width(self.kind, None) if self.width is None else self.width, max(n, 1))
            if self.kind == "sliding_window":
                return (j <= i) & (j > i - width)
            if self.kind == "strided":  # i - j < width, or i - j a multiple of width (i ≡ j mod width); bool n² only
                return (j <= i) & ((j > i - width) | (i % width == j % width))
            sinks = _sinks(None) if self.sinks is None else self.sinks
            return (j <= i) & ((j > i - width) | (j < sinks))
        m = np.asarray(self.custom, dtype=bool)
        if m.shape != (n, n):
            raise InvalidMaskError(f"Custom mask has shape {m.shape}, but the text has {n} tokens: need ({n}, {n}).",
                                   code="mask_custom_shape", shape=str(m.shape), n=n)
        return m


def parse_mask(mask) -> MaskMode:
    """Accept ``"native"``, ``"bidirectional"``, ``"causal"``, ``"sliding_window:4"``, ``"strided:3"``,
    ``"sink_window:8,4"`` (window 8 and 4 sink tokens), ``("sliding_window", 4)``, ``("sink_window", 8, 4)``, a
    :class:`MaskMode`, or a boolean ``(n, n)`` array (custom).

    Strings are case-insensitive and may also be written ``sliding_window=4`` or ``sliding_window(4)``;
    ``sliding``/``window`` mean ``sliding_window``, ``sparse`` means ``strided``, ``streaming``/``sinks`` mean
    ``sink_window`` (whose sink count defaults to 4, StreamingLLM's). ``None`` means
    ``native``. A nested list of rows is read as a custom matrix (cast to bool).

    Returns:
        :class:`MaskMode` (the matrix size is only checked by :meth:`MaskMode.matrix`).

    Raises:
        InvalidMaskError: unknown kind, missing, non-integer or non-positive width (widths above ``MAX_WIDTH``
            are the whole text and are clamped to it) (in tokens), a width given to a kind that takes none, a
            matrix that is not square (ragged rows too) or whose values are not true/false.
    """
    if isinstance(mask, MaskMode):
        return mask
    if mask is None:
        return MaskMode("native")
    if isinstance(mask, np.ndarray) or (isinstance(mask, list) and mask
                                        and isinstance(mask[0], (list, tuple, np.ndarray))):
        try:
            arr = np.asarray(mask)
            if arr.ndim != 2 or arr.shape[0] != arr.shape[1] or arr.dtype.kind not in "biuf":
                raise ValueError
            custom = arr.astype(bool)
        except (ValueError, TypeError):  # ragged rows, or values that are not true/false
            raise InvalidMaskError(
                f"A custom mask must be a square boolean matrix (n rows of n true/false values), got "
                f"{_short(mask)}.", code="mask_not_square", value=_short(mask)) from None
        return MaskMode("custom", custom=custom)
    sinks = None
    if isinstance(mask, tuple) and len(mask) in (2, 3) and isinstance(mask[0], str):
        kind, width = mask[0].strip().lower(), mask[1]
        sinks = mask[2] if len(mask) == 3 else None
    elif isinstance(mask, str):
        match = re.fullmatch(r"\s*([a-z_]+)\s*(?:[:=(]\s*(.*?)\s*\)?)?\s*", mask.lower())
        if not match:
            raise InvalidMaskError(f"Unknown mask {_short(mask)}. Use one of: {', '.join(KINDS)}.",
                                   code="unknown_mask", value=_short(mask), kinds=", ".join(KINDS[:-1]))
        kind, width = match.group(1), match.group(2)
    else:
        raise InvalidMaskError(f"Unknown mask {_short(mask)}. Use one of: {', '.join(KINDS)}.",
                               code="unknown_mask", value=_short(mask), kinds=", ".join(KINDS[:-1]))
    kind = {"sliding": "sliding_window", "window": "sliding_window", "sparse": "strided", "streaming": "sink_window",
            "sinks": "sink_window"}.get(kind, kind)
    if kind == "sink_window":
        if isinstance(width, str) and "," in width:
            width, sinks = (part.strip() for part in width.split(",", 1))
        return MaskMode(kind, width=_width(kind, width), sinks=_sinks(sinks))
    if sinks is not None:
        raise InvalidMaskError(f"Mask '{kind}' takes no sink count, got {_short(sinks)}.",
                               code="mask_no_sinks", kind=kind, value=_short(sinks))
    if kind not in KINDS or kind == "custom":
        raise InvalidMaskError(f"Unknown mask {_short(kind)}. Use one of: {', '.join(KINDS[:-1])}, "
                               "or a boolean matrix.",
                               code="unknown_mask", value=_short(kind), kinds=", ".join(KINDS[:-1]))
    if kind in ("sliding_window", "strided"):
        return MaskMode(kind, width=_width(kind, width))
    if not (width is None or (isinstance(width, str) and width == "")):
        raise InvalidMaskError(f"Mask '{kind}' takes no width, got {_short(width)}. Use '{kind}'.",
                               code="mask_no_width", kind=kind, value=_short(width))
    return MaskMode(kind)


def _short(value, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, for messages about what the caller passed."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _sinks(raw) -> int:
    """The whole-number count >= 0 of sink tokens of a ``sink_window`` mask (None: 4, as StreamingLLM)."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return 4
    value = None
    if isinstance(raw, str) and re.fullmatch(r"\+?\d{1,18}", raw.strip()):
        value = int(raw.strip())
    elif not isinstance(raw, (bool, str)):
        try:
            value = operator.index(raw)
        except TypeError:
            value = None
    if value is None or value < 0:
        raise InvalidMaskError(f"Mask 'sink_window' needs a number of sink tokens of at least 0 (a whole number), got "
                               f"{_short(raw)}, e.g. 'sink_window:8,4'.", code="mask_bad_sinks", value=_short(raw))
    return min(value, MAX_WIDTH)


def _width(kind: str, raw) -> int:
    """The whole-number width (or stride) >= 1 of a ``sliding_window``/``strided`` mask."""
    value = None
    if isinstance(raw, str):
        digits = raw.strip()
        value = int(digits) if re.fullmatch(r"[+-]?\d{1,18}", digits) else None
        if value is None and re.fullmatch(r"\+?\d+", digits):
            value = MAX_WIDTH  # more digits than any text has tokens: the whole text
    elif raw is not None and not isinstance(raw, bool):
        try:
            value = operator.index(raw)
        except TypeError:
            value = None
    if value is None or value < 1:
        got = "" if raw is None or (isinstance(raw, str) and raw == "") else f", got {_short(raw)}"
        raise InvalidMaskError(f"Mask '{kind}' needs a width of at least 1 (a whole number){got}, e.g. '{kind}:4'.",
                               code="mask_bad_width", kind=kind, value=_short(raw))
    return min(value, MAX_WIDTH)  # any width >= the text's length is the same mask


def check_fallback_masks(loaded: LoadedModel, masks: Mapping[str, object]) -> None:
    """Refuse replaced masks for stacks that do not route through the interface (the fallback path, or an
    interface model's ``fallback_stacks``) unless a probe proved how the stack takes them
    (:func:`models.capture.softmax.mask_support`), with the reason."""
    eager = set(loaded.stacks) if loaded.capture_path == "fallback" else set(loaded.fallback_stacks)
    per_head = sorted(stack for stack, m in masks.items() if stack in eager and not isinstance(m, torch.Tensor))
    if per_head:
        raise UnsupportedOperationError(
            f"The {', '.join(per_head)} stack of '{loaded.name}' does not route through transformers' "
            "AttentionInterface: a mask per head needs Dikkat's attention function, which adds one mask plane per "
            "head to the family's own scores. Use one mask for the whole stack.",
            code="head_mask_not_routed", model=loaded.name, stacks=", ".join(per_head))
    # every mask of such a stack is one tensor (a mask per head was refused above)
    wanted = {stack: allowed for stack, allowed in masks.items()
              if stack in eager and isinstance(allowed, torch.Tensor)}
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
    assert support is not None  # None leaves every wanted stack missing: refused above
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
        window = getattr(loaded.text_config, "attention_window", None) if stack == "encoder" else None
        if support.form == "softmax" and window:
            # Longformer / LED: each query's scores cover only keys within w of it (Beltagy et al. 2020, §3.1)
            w = min(window if isinstance(window, (list, tuple)) else [window]) // 2
            i, j = torch.arange(allowed.shape[0])[:, None], torch.arange(allowed.shape[1])[None, :]
            if (allowed & ((i - j).abs() > w)).any():
                raise UnsupportedOperationError(
                    f"{base}, and its sliding-window attention scores only keys within {w} tokens of each query: "
                    f"a mask that allows keys farther away cannot be applied (shorten the text to {w + 1} tokens or "
                    f"use sliding_window:{w} or narrower).",
                    code="fallback_mask_window", model=loaded.name, w=w)
