"""Kovaleva et al. 2019 ("Revealing the Dark Secrets of BERT", §4.1, fig. 1-2): every attention map (head x input)
sorted into five types (vertical, diagonal, vertical+diagonal, block, heterogeneous) by :func:`pattern_type`, a
rule-based stand-in for their CNN classifier, whose thresholds are the module constants below. The inputs and the
key groups are :mod:`.clark`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Sequence

import numpy as np

from .. import checks
from ..errors import InvalidArgumentError
from ..loading.model import LoadedModel
from ..analysis.tokens import Token
from .clark import STACK, _analyze, _each, _inputs, _needs_encoder, key_groups
from .common import Progress, Stopwatch, probe_estimate

PATTERN_TYPES = ("vertical", "diagonal", "vertical+diagonal", "block", "heterogeneous")
VERTICAL_SHARE = 0.5   # vertical: at least this much weight on the delimiter columns (special tokens, punctuation)
DIAGONAL_SHARE = 0.5   # diagonal: at least this much weight on one diagonal line (key = query - 1, + 1 or + 0)
MIXED_SHARE = 0.3      # vertical+diagonal: at least this much on the delimiter columns AND on the diagonal line
BLOCK_SHARE = 0.8      # block (a sentence pair only): at least this much on the query's own sentence
CHANCE_LIFT = 0.2      # every share must also beat a uniform map's by this much of the way to 1 (see pattern_type)
DIAGONAL_OFFSETS = (-1, 1, 0)  # lines tried, in order of preference on ties


@dataclass(frozen=True)
class PatternFeatures:
    """The numbers :func:`pattern_type` decides on, each a share of attention weight in [0, 1] averaged over
    the map's queries (rows with weight).

    Attributes:
        vertical: weight on the delimiter columns (special tokens and punctuation) off the diagonal line.
        diagonal: weight on the diagonal line ``key = query + offset`` (queries that have such a key).
        offset: the line's offset, -1 (previous token), +1 (next) or 0 (itself): of :data:`DIAGONAL_OFFSETS`, the
            one with the most weight.
        block: weight on the non-delimiter tokens of the query's own sentence, over the non-delimiter queries;
            None unless the input is a pair (two segments).
    """

    vertical: float
    diagonal: float
    offset: int
    block: float | None


def pattern_features(weights: np.ndarray, special, punctuation=None, segments=None, *,
                     offset: int | None = None) -> PatternFeatures:
    """:class:`PatternFeatures` of one ``(n, n)`` self-attention map.

    Args:
        weights: float ``(n, n)``, rows (queries) summing to 1 (or 0 for a masked row).
        special: bool ``(n,)``: special tokens ([CLS], [SEP] ...). punctuation: bool ``(n,)`` or None (none).
        segments: int ``(n,)`` sentence of each token (0/1 for a pair, :attr:`models.Token.segment`) or None.
        offset: the diagonal line to measure; None picks the one of :data:`DIAGONAL_OFFSETS` with the most weight.

    Raises:
        InvalidArgumentError: ``weights`` not square, or a flag array of another length.
    """
    w = checks.array("weights", weights, ndim=2, shape="(n, n)")
    if w.shape[0] != w.shape[1]:
        raise InvalidArgumentError(f"An attention map must be a square (n, n) array, got shape {w.shape}.",
                                   code="arg_shape", name="weights", shape="(n, n)", got=str(w.shape))
    n = w.shape[0]

    def flags(x, name, dtype):
        arr = np.zeros(n, dtype=dtype) if x is None else np.asarray(x, dtype=dtype).reshape(-1)
        if arr.shape != (n,):
            raise InvalidArgumentError(f"{name} must have one value per token ({n}), got {arr.shape[0]}.",
                                       code="arg_shape", name=name, shape=f"({n},)", got=str(arr.shape))
        return arr

    delim = flags(special, "special", bool) | flags(punctuation, "punctuation", bool)
    seg = flags(segments, "segments", np.int64)
    live = w.sum(1) > 0
    q = np.arange(n)
    best, chosen = -1.0, 0
    for o in DIAGONAL_OFFSETS if offset is None else (offset,):
        rows = live & (q + o >= 0) & (q + o < n)
        share = float(w[rows, q[rows] + o].mean()) if rows.any() else 0.0
        if share > best + 1e-12:
            best, chosen = share, o
    offset = chosen
    if not live.any():
        return PatternFeatures(0.0, 0.0, offset, None)
    on_line = (q[None, :] - q[:, None]) == offset  # (n, n)
    vertical = float((w * (delim[None, :] & ~on_line)).sum(1)[live].mean())
    block = None
    if len(set(seg[~delim].tolist())) >= 2:
        rows = live & ~delim
        same = (seg[:, None] == seg[None, :]) & ~delim[None, :]
        block = float((w * same).sum(1)[rows].mean()) if rows.any() else 0.0
    return PatternFeatures(vertical, max(best, 0.0), offset, block)


def _lift(x: float, chance: float) -> float:
    """How far ``x`` is from ``chance`` toward 1: ``(x - chance) / (1 - chance)`` (1 when chance is 1)."""
    return 1.0 if chance >= 1.0 else (x - chance) / (1.0 - chance)


def pattern_type(weights: np.ndarray, special, punctuation=None, segments=None) -> str:
    """Kovaleva et al.'s (2019, §4.1, fig. 1) type of one self-attention map, by rules.

    Kovaleva et al. labelled ~400 maps by hand and trained a CNN on them; no such classifier ships here, so this is
    a rule-based stand-in on the shares of :func:`pattern_features` (``v`` vertical, ``d`` diagonal, ``b`` block):

    1. ``vertical+diagonal``: ``v >= MIXED_SHARE`` (0.3) and ``d >= MIXED_SHARE``;
    2. ``vertical``: ``v >= VERTICAL_SHARE`` (0.5): the delimiter columns ([CLS], [SEP], punctuation) take at
       least half the weight (Kovaleva: "mainly attention to special BERT tokens");
    3. ``diagonal``: ``d >= DIAGONAL_SHARE`` (0.5): one line next to the main diagonal (previous / next token,
       or the token itself) takes at least half;
    4. ``block``: a sentence pair only, ``b >= BLOCK_SHARE`` (0.8): the queries of each sentence stay in it;
    5. ``heterogeneous``: anything else.

    Each share also has to beat chance: its lift over the same share of a uniform map of the same tokens (same
    line),
    ``(x - x_uniform) / (1 - x_uniform)``, must be at least ``CHANCE_LIFT`` (0.2), so a short uniform map whose
    few delimiter columns already hold much of the weight is not called vertical. Rules are tried in order;
    the first that holds names the type. Delimiters are only special tokens and punctuation: a vertical stripe on a
    content word is "heterogeneous" here.

    Args:
        weights, special, punctuation, segments: as :func:`pattern_features`.

    Returns:
        one of :data:`PATTERN_TYPES`.

    Raises:
        InvalidArgumentError: as :func:`pattern_features`.
    """
    f = pattern_features(weights, special, punctuation, segments)
    n = np.asarray(weights).shape[0]
    u = pattern_features(np.full((n, n), 1.0 / max(n, 1)), special, punctuation, segments, offset=f.offset)

    def holds(x: float, threshold: float, chance: float) -> bool:
        return x >= threshold and _lift(x, chance) >= CHANCE_LIFT

    v_ok = holds(f.vertical, MIXED_SHARE, u.vertical)
    d_ok = holds(f.diagonal, MIXED_SHARE, u.diagonal)
    if v_ok and d_ok:
        return "vertical+diagonal"
    if holds(f.vertical, VERTICAL_SHARE, u.vertical):
        return "vertical"
    if holds(f.diagonal, DIAGONAL_SHARE, u.diagonal):
        return "diagonal"
    if f.block is not None and u.block is not None and holds(f.block, BLOCK_SHARE, u.block):
        return "block"
    return "heterogeneous"


@dataclass
class PatternCounts:
    """Kovaleva types of every head's map on every sentence read.

    Attributes:
        model: the model's name. sentences: the inputs read.
        counts: ``type -> int``: maps of each type over all heads x sentences (:data:`PATTERN_TYPES` order).
        head_counts: int ``(layers, heads, 5)``: per head, how many sentences gave each type.
        per_head: str ``(layers, heads)``: each head's most common type (ties: the earlier in
            :data:`PATTERN_TYPES`).
        per_layer: int ``(layers, 5)``: maps of each type per layer (summed over heads and sentences).
        maps: the number of maps classified (``layers x heads x sentences``). seconds: wall time, in seconds.
    """

    model: str
    sentences: list
    counts: dict[str, int]
    head_counts: np.ndarray
    per_head: np.ndarray
    per_layer: np.ndarray
    maps: int
    seconds: float

    @property
    def shares(self) -> dict[str, float]:
        """``type -> float``: the share of all maps of each type, in [0, 1]."""
        return {t: c / self.maps if self.maps else 0.0 for t, c in self.counts.items()}


def _segments(tokens: list[Token]) -> np.ndarray:
    return np.array([t.segment for t in tokens], dtype=np.int64)


@checks.needs_model
def pattern_counts(loaded: LoadedModel, sentences: Sequence | None = None, *,
                   progress: Progress = None) -> PatternCounts:
    """Sort every head's map on every sentence into Kovaleva et al.'s five types (§4.1, fig. 2) with
    :func:`pattern_type`.

    "block" needs two sentences in one input: pass ``(text, text_pair)`` pairs; the default single sentences
    never give it.

    Args:
        loaded: an encoder. sentences: texts or ``(text, text_pair)`` pairs; None for :func:`default_sentences`.
        progress: called with the fraction done, in [0, 1].

    Returns:
        :class:`PatternCounts`.

    Raises:
        as :func:`bert_attention_targets`.
    """
    _needs_encoder(loaded, "The attention-pattern experiment")
    items = _inputs(sentences)
    return _patterns(loaded, items, _each(loaded, items, progress), Stopwatch())


def _patterns(loaded: LoadedModel, items: list, analyses, clock: Stopwatch) -> PatternCounts:
    """:class:`PatternCounts` of the ``analyses`` of ``items`` (one per item, in order)."""
    layers, heads = loaded.stacks[STACK]
    head_counts = np.zeros((layers, heads, len(PATTERN_TYPES)), dtype=np.int64)
    for a in analyses:
        head_counts += _types(a)
    counts = {t: int(head_counts[..., j].sum()) for j, t in enumerate(PATTERN_TYPES)}
    per_head = np.asarray(PATTERN_TYPES)[head_counts.argmax(-1)]
    return PatternCounts(loaded.name, items, counts, head_counts, per_head, head_counts.sum(axis=1),
                         int(head_counts.sum()), clock.seconds)


def _types(a) -> np.ndarray:
    """int ``(layers, heads, 5)``: one-hot type of every head's map in one analysis."""
    groups = key_groups(a.tokens)
    special = groups["first"] | groups["separator"]
    seg = _segments(a.tokens)
    stack = a.attentions[STACK]
    layers, heads = stack.shape[:2]
    out = np.zeros((layers, heads, len(PATTERN_TYPES)), dtype=np.int64)
    for layer in range(layers):
        w = np.asarray(stack[layer])
        for head in range(heads):
            out[layer, head, PATTERN_TYPES.index(pattern_type(w[head], special, groups["punctuation"], seg))] = 1
    return out


@checks.needs_model
def estimate_patterns_seconds(loaded: LoadedModel, sentences: Sequence | None = None) -> float:
    """Estimated wall time of :func:`pattern_counts`, in seconds (the first sentence measured x their number).

    Raises:
        as :func:`pattern_counts`.
    """
    _needs_encoder(loaded, "The attention-pattern experiment")
    items = _inputs(sentences)
    return probe_estimate(lambda: _types(_analyze(loaded, items[0])), len(items))[1]
