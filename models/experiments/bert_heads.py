"""Experiment 3 as the page runs it: what BERT's heads look at (Clark et al. 2019, :mod:`.clark`) and the map
types of Kovaleva et al. 2019 (:mod:`.patterns`), both from one analysis of each input."""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Sequence

from .. import checks
from ..loading.model import LoadedModel
from .clark import TargetsResult, _analyze, _each, _inputs, _measure, _needs_encoder, _targets, default_pairs
from .common import Progress, Stopwatch, probe_estimate
from .patterns import PatternCounts, _patterns, _types


@dataclass
class ClarkResult:
    """:class:`.clark.TargetsResult` and :class:`.patterns.PatternCounts` of the same inputs; ``seconds``: their total
    wall time."""

    targets: TargetsResult
    patterns: PatternCounts
    seconds: float


@checks.needs_model
def what_heads_look_at(loaded: LoadedModel, sentences: Sequence | None = None, *,
                       progress: Progress = None) -> ClarkResult:
    """:func:`.clark.bert_attention_targets` and :func:`.patterns.pattern_counts` from one analysis of each input
    (default: :func:`.clark.default_pairs`, Clark et al.'s ``[CLS] A [SEP] B [SEP]`` format, on which every Kovaleva
    type can occur).

    Raises:
        as :func:`.clark.bert_attention_targets`.
    """
    _needs_encoder(loaded, "The 'what BERT's heads look at' experiment")
    items = _inputs(default_pairs() if sentences is None else sentences)
    clock = Stopwatch()
    analyses = list(_each(loaded, items, progress))
    targets = _targets(loaded, items, analyses, clock)
    return ClarkResult(targets, _patterns(loaded, items, analyses, clock), clock.seconds)


@checks.needs_model
def estimate_seconds(loaded: LoadedModel, sentences: Sequence | None = None) -> float:
    """Estimated wall time of :func:`what_heads_look_at`, in seconds: the first input measured (its analysis and
    both reductions) x the number of inputs.

    Raises:
        as :func:`.clark.bert_attention_targets`.
    """
    _needs_encoder(loaded, "The 'what BERT's heads look at' experiment")
    items = _inputs(default_pairs() if sentences is None else sentences)

    def one():
        a = _analyze(loaded, items[0])
        return _measure(a), _types(a)

    return probe_estimate(one, len(items))[1]
