"""Experiment 5: heads that can go (Michel et al. 2019; Voita et al. 2019).

Most heads can be switched off at test time with little loss, if the least important go first; the same number
of heads in random order costs more. This is :func:`models.pruning.pruning_curve` (importance by Michel et al.'s
gradient, eq. 2) over the shipped sentence set, with the published curves' shape beside it.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .. import pruning
from ..loading import LoadedModel
from .common import ASSETS, Progress, Source, report

SOURCES = (
    Source(cite="Michel et al. 2019", title="Are Sixteen Heads Really Better than One?",
           where="§4.2, fig. 3 (heads pruned by increasing importance, 10 % steps)",
           model="WMT'14 En-Fr Transformer-large, BERT-base fine-tuned on MNLI", url="https://arxiv.org/abs/1905.10650"),
    Source(cite="Voita et al. 2019", title="Analyzing Multi-Head Self-Attention: Specialized Heads Do the Heavy "
           "Lifting, the Rest Can Be Pruned", where="abstract, §6 (pruning with L0 gates)",
           model="Transformer-base, WMT En-Ru", url="https://arxiv.org/abs/1905.09418"),
)
# What the papers report, as shares of heads (the shape drawn beside our curve).
PUBLISHED = {
    "michel_bert_flat": 0.4,   # "up to 40 % of heads" of BERT (MNLI) pruned with no noticeable drop (§4.2)
    "michel_wmt_flat": 0.2,    # ... and up to 20 % of the WMT model's heads
    "voita_encoder_off": 38 / 48,  # 38 of 48 encoder heads pruned: -0.15 BLEU (abstract)
}
RANDOM_ORDERS = 3
RISE = 0.1  # "no noticeable change": the metric within 10 % of the scale below


def sentence_set() -> list[str]:
    """The shipped sentences (``assets/sentences.json``), Turkish and English."""
    return [s["text"] for s in json.loads((ASSETS / "sentences.json").read_text(encoding="utf-8"))["sentences"]]


@dataclass
class Prunable:
    """A pruning curve and how far it stays flat.

    Attributes:
        curve: :class:`models.pruning.PruningCurve` (``seconds``: importance and curve together).
        flat_share: the largest share of heads switched off (least important first) at which the metric is still
            within ``RISE`` of its scale of the unpruned value: ``m(s) - m(0) <= RISE * scale``, ``scale`` being
            ``m(0)`` for the loss kinds (nats) and 1 for ``embedding_distance`` (``1 - cos``, 0 unpruned).
        flat_share_random: the same for the mean of the random orders.
    """

    curve: pruning.PruningCurve
    flat_share: float
    flat_share_random: float

    @property
    def seconds(self) -> float:
        """Wall time of importance and curve, in seconds."""
        return self.curve.seconds


def flat_share(shares: np.ndarray, values: np.ndarray, scale: float, rise: float = RISE) -> float:
    """The largest ``shares[i]`` such that every step up to ``i`` keeps ``values - values[0] <= rise * scale``.

    Args:
        shares: float ``(steps,)`` increasing, ``shares[0] == 0``. values: float ``(steps,)``. scale: > 0.
    """
    ok = np.asarray(values, dtype=np.float64) - float(values[0]) <= rise * scale
    bad = np.flatnonzero(~ok)
    last = (bad[0] - 1) if bad.size else len(ok) - 1
    return float(np.asarray(shares)[max(last, 0)])


def heads_that_can_go(loaded: LoadedModel, texts: Sequence[str] | None = None, *, random_orders: int = RANDOM_ORDERS,
                      progress: Progress = None) -> Prunable:
    """Gradient importance (Michel et al. 2019, eq. 2) and the pruning curve on ``texts`` (default
    :func:`sentence_set`), then how far each curve stays flat (:func:`flat_share`).

    Raises:
        EmptyTextError, ModelOutOfMemoryError, UnsupportedOperationError: as :func:`models.pruning.prepare`
            (e.g. a model whose heads cannot be switched off one by one).
    """
    texts = list(sentence_set() if texts is None else texts)
    report(progress, 0.0)
    importance = pruning.gradient_importance(loaded, texts, progress=lambda f: report(progress, 0.2 * f))
    curve = pruning.pruning_curve(loaded, texts, importance, random_orders=random_orders,
                                  progress=lambda f: report(progress, 0.2 + 0.8 * f))
    curve = dataclasses.replace(curve, seconds=importance.seconds + curve.seconds)
    scale = 1.0 if curve.metric == "embedding_distance" else max(float(curve.by_importance[0]), 1e-9)
    return Prunable(curve, flat_share(curve.shares, curve.by_importance, scale),
                    flat_share(curve.shares, curve.random_mean, scale))


def estimate_seconds(loaded: LoadedModel, texts: Sequence[str] | None = None,
                     random_orders: int = RANDOM_ORDERS) -> float:
    """:func:`models.pruning.estimate_curve_seconds` on the same sentences (measured on the shortest, scaled by
    tokens), in seconds."""
    texts = list(sentence_set() if texts is None else texts)
    return pruning.estimate_curve_seconds(loaded, texts, random_orders=random_orders).seconds
