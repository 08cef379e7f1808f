"""The Turkish grammar probes' pair sets and measures (:mod:`models.experiments.grammar`): the sets' loader, where
each role's morphemes are in a sentence (:func:`roles`), and the per-head measures on a morpheme-level attention map,
pure numpy (tested by hand in ``tests/engine/test_grammar_probes.py``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from .. import checks
from ..errors import InvalidArgumentError
from .common import ASSETS

PAIRS_FILE = ASSETS / "turkish" / "grammar_pairs.json"
ORDERS = ("SOV", "OSV", "OVS", "SVO")
CASES = ("Acc", "Dat", "Abl")


@lru_cache(maxsize=1)
def load_pairs() -> dict:
    """The three sets of ``assets/turkish/grammar_pairs.json``: ``word_order`` (items with ``subject``, ``object``,
    ``verb`` and one sentence per order), ``case`` (``subject``, ``verb``, ``objects`` and ``sentences`` per case)
    and ``agreement`` (``subject``, ``object``, ``verb``, the ``plural`` sentence, the grammatical ``singular`` and
    the ungrammatical ``mismatch``: singular subject, plural verb). Each item has English glosses (``en``)."""
    return json.loads(PAIRS_FILE.read_text(encoding="utf-8"))


def _fold(word: str) -> str:
    """Turkish-aware lower case (``I`` -> ``ı``, ``İ`` -> ``i``)."""
    return word.replace("I", "ı").replace("İ", "i").lower()


@dataclass(frozen=True)
class Roles:
    """Where the probes' morphemes are in one sentence (character spans into it, from :func:`models.turkish.segment`).

    Attributes:
        verb: spans of the verb word's morphemes. subject, obj: spans of the subject's and the object's morphemes.
        case: span of the object's case suffix (None when the object has none). case_label: its label.
        agreement: span of the verb's plural suffix (label ``A3pl``), None without one.
        others: spans of every morpheme outside the verb word that is neither punctuation nor unknown: the
            candidates of "the verb's most-attended morpheme".
    """

    verb: tuple[tuple[int, int], ...]
    subject: tuple[tuple[int, int], ...]
    obj: tuple[tuple[int, int], ...]
    case: tuple[int, int] | None
    case_label: str | None
    agreement: tuple[int, int] | None
    others: tuple[tuple[int, int], ...]


def roles(text: str, subject: str, obj: str, verb: str) -> Roles:
    """Find the verb, subject, object, the object's case suffix and the verb's plural suffix in ``text``.

    The words are found by their text (case-folded the Turkish way); their morphemes are
    :func:`models.turkish.segment_words`'. The case suffix is the object's last suffix labelled ``Acc``, ``Dat``
    or ``Abl``.

    Raises:
        InvalidArgumentError: a role word that is not in the text (code ``arg_choice``).
        NotTurkishError: the text does not read as Turkish.
    """
    from ..turkish import segment_words

    for name, value in (("subject", subject), ("obj", obj), ("verb", verb)):
        if not isinstance(value, str) or not value.strip():
            raise InvalidArgumentError(f"{name} must be a word of the text, got {checks.shown(value)}.",
                                       code="arg_choice", name=name, options=checks.shown(text),
                                       value=checks.shown(value))
    words = segment_words(text)
    folded = [_fold(w.text) for w in words]

    def find(word: str):
        key = _fold(word)
        if key not in folded:
            raise InvalidArgumentError(f"'{word}' is not a word of {text!r}.", code="arg_choice", name="word",
                                       options=", ".join(w.text for w in words), value=word)
        return words[folded.index(key)]

    v, s, o = find(verb), find(subject), find(obj)
    spans = lambda w: tuple((m.start, m.end) for m in w.morphemes)  # noqa: E731
    case = next(((m.start, m.end), m.label) for m in reversed(o.morphemes) if m.kind == "suffix" and m.label in CASES) \
        if any(m.kind == "suffix" and m.label in CASES for m in o.morphemes) else (None, None)
    agree = next(((m.start, m.end) for m in v.morphemes if m.kind == "suffix" and m.label == "A3pl"), None)
    others = tuple((m.start, m.end) for w in words if w is not v for m in w.morphemes if m.kind in ("stem", "suffix"))
    return Roles(spans(v), spans(s), spans(o), case[0], case[1], agree, others)


# ---------------------------------------------------------------------------------------------------- measures
def attention_to(units: np.ndarray, rows: list[int], columns: list[int]) -> np.ndarray:
    """How much the ``rows`` morphemes attend to the ``columns`` morphemes: the mean over the rows of the sum over
    the columns (a morpheme-level map's keys are already summed over pieces and its queries averaged).

    Args:
        units: float ``(..., units, units)`` morpheme-level attention (:func:`models.turkish.morpheme_attention`).
        rows, columns: unit indices (non-empty).

    Returns:
        float64 ``units.shape[:-2]``, in [0, 1] for softmax rows.

    Raises:
        ValueError: no rows or no columns.
    """
    if not rows or not columns:
        raise ValueError("attention_to needs at least one row and one column")
    w = np.asarray(units, dtype=np.float64)
    return w[..., rows, :][..., :, columns].sum(axis=-1).mean(axis=-1)


def top_target(units: np.ndarray, rows: list[int], candidates: list[int]) -> np.ndarray:
    """The candidate each head's ``rows`` (averaged) attend to most: int ``units.shape[:-2]``, a value of
    ``candidates`` (the first of equal ones).

    Raises:
        ValueError: no rows or no candidates.
    """
    if not rows or not candidates:
        raise ValueError("top_target needs at least one row and one candidate")
    w = np.asarray(units, dtype=np.float64)[..., rows, :].mean(axis=-2)[..., candidates]
    return np.asarray(candidates)[np.argmax(w, axis=-1)]


def tracking_share(top_first: np.ndarray, top_second: np.ndarray, suffix_first: np.ndarray,
                   suffix_second: np.ndarray) -> np.ndarray:
    """The share of items where a head's top target is the suffix in both orders.

    Args:
        top_first, top_second: int ``(items, ...)``: each head's top target unit in the first and second order
            (:func:`top_target`). suffix_first, suffix_second: int ``(items,)``: the suffix's unit in each.

    Returns:
        float64 ``top_first.shape[1:]`` in [0, 1].
    """
    a, b = np.asarray(top_first), np.asarray(top_second)
    extra = (slice(None),) + (None,) * (a.ndim - 1)
    hit = (a == np.asarray(suffix_first)[extra]) & (b == np.asarray(suffix_second)[extra])
    return hit.mean(axis=0).astype(np.float64)


def suffix_logprob(logits: np.ndarray, ids: list[int], spans: list[tuple[int, int]], special: list[bool],
                   start: int, end: int) -> float:
    """The log-probability, in nats, of the token pieces covering characters ``start .. end`` of the text, each
    given every token before it (a causal LM's ``logits[i - 1]`` predicts token ``i``); a piece that also covers
    characters outside the span counts whole. NaN when no piece after the first covers it.

    Args:
        logits: float ``(tokens, vocab)``. ids: the token ids. spans: each token's ``(start, end)`` in the text.
        special: each token's special flag (special tokens are never counted).
    """
    chosen = [i for i, ((a, b), sp) in enumerate(zip(spans, special)) if i > 0 and not sp and a < end and b > start]
    if not chosen:
        return float("nan")
    logp = torch.log_softmax(torch.from_numpy(np.asarray(logits[[i - 1 for i in chosen]], dtype=np.float32)), dim=-1)
    return float(sum(float(logp[k, ids[i]]) for k, i in enumerate(chosen)))
