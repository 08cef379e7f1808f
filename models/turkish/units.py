"""Token pieces -> morphemes: the membership matrix and attention at the morpheme level.

The morpheme level mirrors the word level (:func:`viz.transforms.word_units` and :func:`viz.transforms.merge_words`,
the rule of Clark et al. 2019, "What Does BERT Look At?", §4.1): **keys summed over a morpheme's pieces, queries
averaged over them**; special tokens ([CLS], <s>, ...) and whitespace-only pieces, which belong to no morpheme, stay
units of their own; units are ordered by their first piece.

Pieces and morphemes rarely line up: a subword tokenizer splits ``kovaladı`` as ``kova`` + ``ladı``, and ``ladı``
straddles the stem ``kovala`` and the suffix ``dı``. Such a piece is **split in proportion to its characters**: it
belongs to each morpheme it touches with the share of its non-space characters that fall inside it (``ladı``: 2/4 to
``kovala``, 2/4 to ``dı``), and it is flagged (:attr:`MorphemeUnits.straddling`). So each row of the membership
matrix ``M`` (pieces x units) sums to 1, and

    ``W' = Q · W · M``, ``Q[a, q] = M[q, a] / Σ_q' M[q', a]``

keeps every row of an attention map summing to what it summed to before (1 for a softmax row): a key piece's
weight is shared out among its morphemes, a query piece reads for each of its morphemes with the weight of its
share. With whole pieces only (every entry 0 or 1) this is exactly the word level's rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Sequence

import numpy as np

from .. import checks
from ..analysis.tokens import Token
from ..errors import InvalidArgumentError
from .segment import Morpheme, segment


@dataclass(frozen=True)
class MorphemeUnits:
    """The morpheme-level columns (or rows) of one token axis.

    Attributes:
        membership: float32 ``(n_pieces, n_units)``: the share of piece ``i`` in unit ``u``; every row sums to 1.
        labels: display text of each unit: the morpheme as typed, or the token's label for a unit of its own.
        morphemes: the :class:`models.turkish.Morpheme` of each unit, None for a token of its own.
        segments: the text segment of each unit (0: ``text``/``target``, 1: ``text_pair``).
        straddling: bool ``(n_pieces,)``: the piece covers characters of more than one morpheme (split in
            proportion).
    """

    membership: np.ndarray
    labels: list[str]
    morphemes: list[Morpheme | None]
    segments: list[int]
    straddling: np.ndarray = field(repr=False)

    @property
    def token_units(self) -> list[tuple[int, ...]]:
        """For each unit, the pieces with a share in it (the word level's index groups)."""
        return [tuple(int(i) for i in np.nonzero(self.membership[:, u])[0]) for u in range(self.membership.shape[1])]


def membership(tokens: Sequence[Token], morphemes: Sequence[Morpheme] | Sequence[Sequence[Morpheme]]) -> MorphemeUnits:
    """Map token pieces to morphemes by their character spans.

    Args:
        tokens: an axis of an :class:`models.Analysis` (``a.tokens``, ``a.target_tokens``; offsets into each
            token's segment text).
        morphemes: :func:`models.turkish.segment` of the text the tokens index into; for a text pair, a list of
            two such lists (segment 0, segment 1).

    A piece in one morpheme gets 1 there; a piece straddling morphemes is split by its non-space characters in each
    (rows sum to 1) and flagged; a special token, a whitespace-only piece or a piece outside every morpheme (a
    segment without morphemes) is a unit of its own; the second piece of a character split over two byte-level
    tokens (empty text) goes with the morpheme of that character. Morphemes no piece covers (text cut by
    truncation) are left out.

    Returns:
        a :class:`MorphemeUnits` (units ordered by their first piece).
    """
    tokens = checks.sequence("tokens", tokens, least=0)
    if not all(isinstance(tok, Token) for tok in tokens):
        raise InvalidArgumentError("tokens must be an Analysis's tokens (a.tokens).", code="arg_instance",
                                   name="tokens", detail="a list of Token (a.tokens)", value=checks.shown(tokens))
    per_segment = _per_segment(morphemes)
    owner = [_owners(ms) for ms in per_segment]  # per segment: char offset -> morpheme index (-1: none)
    rows: list[dict[tuple[int, int], float]] = []
    for tok in tokens:
        seg = tok.segment if 0 <= tok.segment < len(owner) else -1
        if tok.special or seg < 0:
            rows.append({})
            continue
        chars = owner[seg]
        if tok.text == "":
            at = tok.start - 1
            m = chars[at] if 0 <= at < len(chars) else -1
            rows.append({(seg, m): 1.0} if m >= 0 else {})
            continue
        counts: dict[tuple[int, int], int] = {}
        for pos in range(tok.start, min(tok.end, len(chars))):
            if chars[pos] >= 0:
                part = (seg, chars[pos])
                counts[part] = counts.get(part, 0) + 1
        total = sum(counts.values())
        rows.append({k: c / total for k, c in counts.items()} if total else {})
    columns: dict[tuple, int] = {}
    labels: list[str] = []
    units: list[Morpheme | None] = []
    segments: list[int] = []
    for i, row in enumerate(rows):
        keys: list[tuple] = sorted(row) if row else [("token", i)]  # (segment, morpheme) or ("token", i)
        for key in keys:
            if key not in columns:
                columns[key] = len(columns)
                if key[0] == "token":
                    units.append(None)
                    labels.append(tokens[i].label)
                    segments.append(tokens[i].segment)
                else:
                    m = per_segment[key[0]][key[1]]
                    units.append(m)
                    labels.append(m.text)
                    segments.append(key[0])
    matrix = np.zeros((len(tokens), len(columns)), dtype=np.float32)
    for i, row in enumerate(rows):
        for key, share in (row.items() if row else [(("token", i), 1.0)]):
            matrix[i, columns[key]] = share
    straddling = np.array([len(r) > 1 for r in rows], dtype=bool)
    return MorphemeUnits(matrix, labels, units, segments, straddling)


def morpheme_attention(weights: np.ndarray, query: MorphemeUnits | np.ndarray,
                       key: MorphemeUnits | np.ndarray | None = None) -> np.ndarray:
    """Token-level attention -> morpheme-level attention: sum over a morpheme's key pieces, mean over its query
    pieces (each piece weighted by its share in the morpheme), ``W' = Q · W · M_k`` (see the module docstring).

    Args:
        weights: float ``(..., n_q, n_k)`` (one head ``(q, k)``, a layer ``(heads, q, k)`` or a stack
            ``(layers, heads, q, k)``).
        query, key: :class:`MorphemeUnits` (or their ``membership`` matrices) of the query and key axes; ``key``
            defaults to ``query`` (self-attention).

    Returns:
        float32 ``(..., n_query_units, n_key_units)``; rows sum to what the token rows summed to (1 for softmax
        rows).

    Raises:
        InvalidArgumentError (a ValueError): weights or memberships that are not finite numeric arrays
            (``arg_shape``), a membership matrix whose piece count does not match ``weights`` or a unit with no
            piece (``arg_same_shape``).
    """
    w = checks.array("weights", weights, dtype=np.float32, finite=True, shape="(..., n_q, n_k)")
    mq = checks.array("query", getattr(query, "membership", query), ndim=2, dtype=np.float32, finite=True,
                      shape="(pieces, units)")
    mk = mq if key is None else checks.array("key", getattr(key, "membership", key), ndim=2, dtype=np.float32,
                                             finite=True, shape="(pieces, units)")
    if w.ndim < 2 or mq.shape[0] != w.shape[-2] or mk.shape[0] != w.shape[-1] \
            or (mq.sum(axis=0) <= 0).any() or (mk.sum(axis=0) <= 0).any():
        raise InvalidArgumentError(
            f"weights {w.shape} do not match memberships of {mq.shape[0]} query and {mk.shape[0]} key pieces with a "
            "piece in every unit", code="arg_same_shape", name="weights and memberships", shape="(..., n_q, n_k)",
            first=str(w.shape), second=f"{mq.shape}, {mk.shape}")
    size = mq.sum(axis=0)
    average = (mq / size).T  # (units_q, n_q)
    return (average @ w @ mk).astype(np.float32)


def analysis_units(analysis, stack: str = "encoder", *,
                   check_language: bool = True) -> tuple[MorphemeUnits, MorphemeUnits]:
    """The morpheme units of a stack's query and key axes (:meth:`models.Analysis.axis_tokens`): the texts are
    segmented (:func:`models.turkish.segment`) and the tokens mapped onto them (:func:`membership`).

    Then ``morpheme_attention(a.attentions[stack][layer], *analysis_units(a, stack))`` is a layer's morpheme map.

    Raises:
        NotTurkishError: ``check_language`` and a text does not read as Turkish: show the word level instead.
    """
    from ..analysis.result import Analysis

    checks.instance("analysis", analysis, Analysis, "an Analysis (models.analyze)")
    source = [segment(analysis.text, check_language=check_language)]
    if getattr(analysis, "text_pair", None):
        source.append(segment(analysis.text_pair, check_language=check_language))
    target = [segment(analysis.target, check_language=check_language)] if getattr(analysis, "target", None) else [[]]
    q_tokens, k_tokens = analysis.axis_tokens(stack)
    on_target = analysis.family == "encoder-decoder" and stack in ("decoder", "cross")
    q_units = membership(q_tokens, target if on_target else source)
    k_units = q_units if stack != "cross" else membership(k_tokens, source)
    return q_units, k_units


def _per_segment(morphemes) -> list[list[Morpheme]]:
    """``[segment 0 morphemes, segment 1 morphemes]`` from one list or a list of lists.

    Raises:
        InvalidArgumentError: not a list of :class:`Morpheme` or of such lists (``arg_instance``).
    """
    items = list(checks.sequence("morphemes", morphemes, least=0))
    out = [list(ms) if isinstance(ms, (list, tuple)) else ms for ms in items] \
        if items and not isinstance(items[0], Morpheme) else [items]
    if not all(isinstance(ms, list) and all(isinstance(m, Morpheme) for m in ms) for ms in out):
        raise InvalidArgumentError("morphemes must be models.turkish.segment(text) (or one such list per segment).",
                                   code="arg_instance", name="morphemes", detail="a list of Morpheme",
                                   value=checks.shown(morphemes))
    return out


def _owners(morphemes: Sequence[Morpheme]) -> np.ndarray:
    """int ``(text_len,)``: the index of the morpheme covering each character, -1 where none does."""
    size = max((m.end for m in morphemes), default=0)
    owners = -np.ones(size, dtype=np.int64)
    for j, m in enumerate(morphemes):
        owners[m.start:m.end] = j
    return owners
