"""Explore's morpheme level (issue 32): the weights of :func:`viz.prepare.prepare` regrouped into morphemes, and the
words that say what each morpheme is; and, for a page that draws one ``(query, key)`` map at a time (Information
flow, Head pruning), any level's axes as membership matrices (:class:`LevelAxis`, :func:`word_axis`) and the map
merged onto them (:func:`merge_units`). numpy only (no models: the units come in as plain objects).

A token axis is grouped by a membership matrix ``M`` (pieces x units; every row sums to 1; a piece that straddles two
morphemes has a share in each, in proportion to its characters): :func:`models.turkish.analysis_units` makes one per
axis. :func:`prepare_units` applies every other Explore option first (heads, average, rollout, value-weighting, hidden
tokens with rows renormalised), then ``W' = Q · W · M_k`` with ``Q`` the query units' averaging matrix: **keys summed
over a morpheme's pieces, queries averaged over them**, the word level's rule (:func:`viz.transforms.merge_words`,
Clark et al. 2019), so every row still sums to 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from viz import transforms as tf
from viz.heatmap import HOVER_LABEL_CELLS
from viz.prepare import Prepared, prepare
from viz.text import plotly_labels

__all__ = ["UnitsPrepared", "prepare_units", "unit_description", "unit_hover", "legend_lines", "straddling_pieces",
           "heatmap_hover", "LevelAxis", "word_axis", "merge_units", "panel_hover"]


@dataclass(frozen=True)
class UnitsPrepared(Prepared):
    """:class:`viz.prepare.Prepared` at a unit level (morphemes), with the unit behind each row and column.

    Attributes:
        q_units, k_units: the morpheme of each row / column (anything with ``text``, ``kind``, ``label``,
            ``tags``, ``word``), None for a token that is a unit of its own (``[CLS]``, ``</s>``).
        q_shares: for each row, the share of each piece in ``q_index`` (1.0 for a whole piece, 0.5 for half of a
            piece that straddles two morphemes).
    """

    q_units: list = field(default_factory=list)
    k_units: list = field(default_factory=list)
    q_shares: list = field(default_factory=list)


def prepare_units(a, stack: str, query, key=None, *, hide_special: bool = False, hide_first: bool = False,
                  mode: str = "heads", layer: int | None = None, head: int | None = None,
                  rows: tuple[int, int] | None = None, value_norms: np.ndarray | None = None) -> UnitsPrepared:
    """Explore's options at the morpheme level: :func:`viz.prepare.prepare` at the token level (every option but
    ``words``), then the kept pieces grouped into the units of ``query`` / ``key``.

    Args:
        a, stack, hide_special ... value_norms: as :func:`viz.prepare.prepare`.
        query, key: the units of the query and key axes (:class:`models.turkish.MorphemeUnits`, or anything with
            ``membership`` float ``(pieces, units)``, ``labels``, ``morphemes``); ``key`` defaults to ``query``.

    A unit left with no piece (a hidden special token, a morpheme outside a window of rows) is left out; a unit some
    of whose pieces are hidden is the mean (queries) or sum (keys) of the pieces left.

    Returns:
        an :class:`UnitsPrepared`: float32 weights ``(layers, heads', query units, key units)``, rows summing to what
        the token rows summed to (1, or 0 for a row with no allowed key); labels are the morphemes' text.

    Raises:
        ValueError: a membership matrix whose piece count is not the axis's token count; as
        :func:`viz.prepare.prepare`.
    """
    key = query if key is None else key
    base = prepare(a, stack, hide_special=hide_special, hide_first=hide_first, words=False, mode=mode, layer=layer,
                   head=head, rows=rows, value_norms=value_norms)
    q_tokens, k_tokens = a.axis_tokens(stack)
    mq_all = np.asarray(query.membership, dtype=np.float32)
    mk_all = np.asarray(key.membership, dtype=np.float32)
    if mq_all.shape[0] != len(q_tokens) or mk_all.shape[0] != len(k_tokens):
        raise ValueError(f"memberships of {mq_all.shape[0]} query and {mk_all.shape[0]} key pieces for an axis of "
                         f"{len(q_tokens)} x {len(k_tokens)} tokens")
    q_pos = np.array([i[0] for i in base.q_index], dtype=int)
    k_pos = np.array([i[0] for i in base.k_index], dtype=int)
    mq, mk = mq_all[q_pos], mk_all[k_pos]
    q_cols, k_cols = np.nonzero(mq.sum(axis=0) > 0)[0], np.nonzero(mk.sum(axis=0) > 0)[0]
    mq, mk = mq[:, q_cols], mk[:, k_cols]
    average = (mq / mq.sum(axis=0)).T  # (query units, kept query pieces)
    w = average @ base.weights @ mk
    q_index, q_shares = [], []
    for u in range(mq.shape[1]):
        r = np.nonzero(mq[:, u])[0]
        q_index.append(tuple(int(q_pos[i]) for i in r))
        q_shares.append(tuple(float(mq[i, u]) for i in r))
    k_index = [tuple(int(k_pos[i]) for i in np.nonzero(mk[:, u])[0]) for u in range(mk.shape[1])]
    q_seg = dict(zip(q_pos.tolist(), base.q_segments))
    k_seg = dict(zip(k_pos.tolist(), base.k_segments))
    return UnitsPrepared(
        weights=np.ascontiguousarray(w, dtype=np.float32),
        q_labels=[query.labels[c] for c in q_cols], k_labels=[key.labels[c] for c in k_cols],
        q_segments=[q_seg[i[0]] for i in q_index], k_segments=[k_seg[i[0]] for i in k_index],
        q_index=q_index, k_index=k_index, renormalised=base.renormalised, n_tokens=base.n_tokens,
        q_units=[query.morphemes[c] for c in q_cols], k_units=[key.morphemes[c] for c in k_cols],
        q_shares=q_shares,
    )


def unit_description(unit, names: Callable[[str], str], kinds: Mapping[str, str]) -> str:
    """What a unit is, in the interface language: a suffix's labels (``accusative: definite object (-(y)I)``; ``dı``
    of ``kovaladı``: ``past tense (-DI) + 3rd person singular``), a stem's kind and part of speech (``stem: noun``),
    ``unknown word``, ``punctuation``; ``""`` for a token that is a unit of its own (None).

    Args:
        unit: a morpheme (``kind``, ``label``, ``tags``) or None.
        names: label -> its name (:func:`models.turkish.label_name` in the interface language).
        kinds: kind -> its name (:data:`models.turkish.KIND_NAMES`, one language).
    """
    if unit is None:
        return ""
    tags = tuple(getattr(unit, "tags", ()) or ()) or (unit.label,)
    if unit.kind == "suffix":
        return " + ".join(names(tag) for tag in tags)
    if unit.kind == "stem":
        return f"{kinds.get('stem', 'stem')}: {names(unit.label)}"
    return kinds.get(unit.kind, unit.kind)


def unit_hover(labels: Sequence[str], units: Sequence, names: Callable[[str], str],
               kinds: Mapping[str, str]) -> list[str]:
    """``"yi — accusative: definite object (-(y)I)"`` for each unit (the label alone for a token of its own): the
    heatmap's hover. Plain text (the caller escapes it for where it is shown)."""
    out = []
    for label, unit in zip(labels, units):
        desc = unit_description(unit, names, kinds)
        out.append(f"{label} — {desc}" if desc else str(label))
    return out


def legend_lines(units: Sequence, names: Callable[[str], str], kinds: Mapping[str, str], *,
                 segments: Sequence[int] | None = None, most: int = 30) -> tuple[list[str], bool]:
    """One line per word that has a suffix or is unknown to the analyzer, in order: ``fareyi = fare + yi
    (accusative: definite object (-(y)I))``; stems plainly, a word of one stem and punctuation left out.

    Args:
        units: the morphemes of an axis in order (:attr:`UnitsPrepared.q_units`; None entries are skipped).
        segments: the text segment of each unit (a sentence pair's two texts number their words apart).
        most: at most this many lines.

    Returns:
        ``(lines, more)``: plain text lines (the caller escapes them) and whether words were left out.
    """
    words: dict[tuple, list] = {}
    for unit, seg in zip(units, segments if segments is not None else [0] * len(units)):
        if unit is not None:
            words.setdefault((seg, unit.word), []).append(unit)
    lines = []
    for parts in words.values():
        if all(p.kind in ("stem", "punct") for p in parts):
            continue
        word = "".join(p.text for p in parts)
        if len(parts) == 1 and parts[0].kind == "unknown":
            lines.append(f"{word} ({unit_description(parts[0], names, kinds)})")
            continue
        shown = [p.text if p.kind == "stem" else f"{p.text} ({unit_description(p, names, kinds)})" for p in parts]
        lines.append(f"{word} = " + " + ".join(shown))
    return lines[:most], len(lines) > most


def straddling_pieces(tokens: Sequence, straddling: Sequence[bool]) -> list[str]:
    """The labels of the pieces flagged as straddling two morphemes (:attr:`models.turkish.MorphemeUnits.straddling`),
    in order."""
    return [tok.label for tok, flag in zip(tokens, straddling) if flag]


def heatmap_hover(fig, query_hover: Sequence[str] | None, key_hover: Sequence[str] | None):
    """Put ``query_hover`` / ``key_hover`` (:func:`unit_hover`) in the hover of a :func:`viz.heatmap.head_heatmap`
    figure in place of the bare labels (the axes keep the morphemes' text). A figure too large to name both tokens
    in its hover, or None for the hover texts (not the morpheme level), is left as it is. Returns ``fig``.

    Raises:
        ValueError: hover texts that do not match the matrix.
    """
    if query_hover is None or key_hover is None:
        return fig
    trace = fig.data[0]
    z = np.asarray(trace.z)
    if len(query_hover) != z.shape[0] or len(key_hover) != z.shape[1]:
        raise ValueError(f"{len(query_hover)} query / {len(key_hover)} key hover texts for a {z.shape} matrix")
    if trace.customdata is None:
        return fig
    custom = np.empty(z.shape + (2,), dtype=object)
    custom[:, :, 0] = np.asarray(plotly_labels(query_hover), dtype=object)[:, None]
    custom[:, :, 1] = np.asarray(plotly_labels(key_hover), dtype=object)[None, :]
    trace.customdata = custom
    return fig


@dataclass(frozen=True)
class LevelAxis:
    """One token axis grouped into units (the word level; :class:`models.turkish.MorphemeUnits` is the morpheme
    level's, with the same attributes).

    Attributes:
        membership: float32 ``(n_pieces, n_units)``: the share of piece ``i`` in unit ``u``; every row sums to 1.
        labels: display text of each unit (the word as typed, or the token's label for a unit of its own).
        morphemes: the morpheme of each unit (None at the word level).
        segments: the text segment (0 / 1) of each unit.
    """

    membership: np.ndarray
    labels: list[str]
    morphemes: list
    segments: list[int]


def word_axis(tokens: Sequence, words: Sequence) -> LevelAxis:
    """The word level of one token axis, as Explore's (:func:`viz.prepare.prepare` with ``words``): each word's
    pieces one unit (share 1 each), a piece in no word (a special token, a whitespace piece) a unit of its own,
    units ordered by their first piece (:func:`viz.transforms.word_units`).

    Args:
        tokens: the axis's tokens (``label``, ``segment``). words: its words (``text``, ``tokens``: indices).

    Raises:
        ValueError: a token index out of range or in two words.
    """
    units = tf.word_units(len(tokens), [w.tokens for w in words])
    texts = {tuple(sorted(w.tokens)): w.text for w in words}
    matrix = np.zeros((len(tokens), len(units)), dtype=np.float32)
    for u, idx in enumerate(units):
        matrix[list(idx), u] = 1.0
    return LevelAxis(matrix, [texts.get(u, tokens[u[0]].label) for u in units], [None] * len(units),
                     [int(getattr(tokens[u[0]], "segment", 0)) for u in units])


def merge_units(weights: np.ndarray, query, key=None) -> np.ndarray:
    """A token-level map at a unit level: **sum over a unit's key pieces, mean over its query pieces** (each piece
    weighted by its share), ``W' = Q · W · M_k`` with ``Q[a, q] = M_q[q, a] / Σ_q' M_q[q', a]`` (the word level's
    rule, Clark et al. 2019, §4.1; :func:`viz.transforms.merge_words` with whole pieces, and
    :func:`models.turkish.morpheme_attention`'s for morphemes). A row that summed to 1 still does; a map of
    contributions (Kobayashi et al. 2020's ``‖α W_O v‖``) gives each unit's contributions added up.

    Args:
        weights: float ``(..., n_q, n_k)``. query, key: :class:`LevelAxis` (or anything with ``membership``, or the
            matrix itself) of the query and key axes; ``key`` defaults to ``query``.

    Returns:
        float32 ``(..., n_query_units, n_key_units)``.

    Raises:
        ValueError: a membership whose piece count does not match ``weights``, or a unit with no piece.
    """
    w = np.asarray(weights, dtype=np.float32)
    mq = np.asarray(getattr(query, "membership", query), dtype=np.float32)
    mk = mq if key is None else np.asarray(getattr(key, "membership", key), dtype=np.float32)
    if w.ndim < 2 or mq.ndim != 2 or mk.ndim != 2 or mq.shape[0] != w.shape[-2] or mk.shape[0] != w.shape[-1]:
        raise ValueError(f"weights {w.shape} do not match memberships {mq.shape} (queries) and {mk.shape} (keys)")
    size = mq.sum(axis=0)
    if (size <= 0).any() or (mk.sum(axis=0) <= 0).any():
        raise ValueError("a unit has no piece")
    return ((mq / size).T @ w @ mk).astype(np.float32)


def panel_hover(fig, query_hover: Sequence[str] | None, key_hover: Sequence[str] | None):
    """Put ``query_hover`` / ``key_hover`` (:func:`unit_hover`) in the hover of every heatmap of ``fig`` that names
    its rows and columns by position (``%{y}``, ``%{x}``: the before / after / difference panels of
    :func:`viz.pruning.attention_before_after`). Heatmaps over :data:`viz.heatmap.HOVER_LABEL_CELLS` cells, and
    None for the texts (not the morpheme level), are left as they are. Returns ``fig``.

    Raises:
        ValueError: hover texts that do not match a heatmap's matrix.
    """
    if query_hover is None or key_hover is None:
        return fig
    q_text = np.asarray(plotly_labels(query_hover), dtype=object)
    k_text = np.asarray(plotly_labels(key_hover), dtype=object)
    for trace in fig.data:
        if trace.type != "heatmap" or trace.z is None:
            continue
        z = np.asarray(trace.z)
        if z.shape != (len(q_text), len(k_text)):
            raise ValueError(f"{len(q_text)} query / {len(k_text)} key hover texts for a {z.shape} matrix")
        if z.size > HOVER_LABEL_CELLS:
            continue
        custom = np.empty(z.shape + (2,), dtype=object)
        custom[:, :, 0] = q_text[:, None]
        custom[:, :, 1] = k_text[None, :]
        trace.customdata = custom
        trace.hovertemplate = (trace.hovertemplate or "").replace("%{y}", "%{customdata[0]}").replace(
            "%{x}", "%{customdata[1]}")
    return fig
