"""Experiment 5: heads that can go (Michel et al. 2019; Voita et al. 2019).

Most heads can be switched off at test time with little loss, if the least important go first; the same number
of heads in random order costs more. This is :func:`models.pruning.pruning_curve` (importance by Michel et al.'s
gradient, eq. 2) over the shipped sentence set, with the published curves' shape beside it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from collections.abc import Sequence

import numpy as np

from .. import checks
from .. import pruning
from ..errors import InvalidArgumentError
from ..loading.model import LoadedModel
from .common import Progress, Source, check_int, report, sentence_set

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
# "No noticeable change", read for each metric: a loss within ln 1.1 nats of the unpruned one (perplexity at most 10 %
# higher); a sentence embedding at cosine 0.95 or more from the unpruned one (1 - cos <= 0.05).
RISE = {"loss": math.log(1.1), "mask_loss": math.log(1.1), "seq2seq_loss": math.log(1.1), "embedding_distance": 0.05}


@dataclass
class Prunable:
    """A pruning curve and how far it stays flat.

    Attributes:
        curve: :class:`models.pruning.PruningCurve` (``seconds``: importance and curve together).
        flat_share: the largest share of heads switched off (least important first) up to which the metric stays
            within ``RISE[metric]`` of the unpruned value (:func:`flat_share`): the loss kinds within ln 1.1 nats
            (perplexity +10 %), ``embedding_distance`` (``1 - cos``, 0 unpruned) at most 0.05.
        flat_share_random: the same for the mean of the random orders.
    """

    curve: pruning.PruningCurve
    flat_share: float
    flat_share_random: float

    @property
    def seconds(self) -> float:
        """Wall time of importance and curve, in seconds."""
        return self.curve.seconds


def flat_share(shares: np.ndarray, values: np.ndarray, rise: float) -> float:
    """The largest ``shares[i]`` such that every step up to ``i`` keeps ``values - values[0] <= rise``: how far a
    pruning curve stays flat (our reading of Michel et al. 2019, §4.2, "without noticeable drop").

    Args:
        shares: float ``(steps,)`` increasing, ``shares[0] == 0``. values: float ``(steps,)`` the metric (nats, or
            ``1 - cos``). rise: the largest rise over ``values[0]`` still counted as no change, in the metric's unit.

    Returns:
        a share in [0, 1] (``shares[0]`` when the first step already rises more).

    Raises:
        InvalidArgumentError: arrays of different lengths or empty, or a negative ``rise``.
    """
    shares, values = np.asarray(shares, dtype=np.float64), np.asarray(values, dtype=np.float64)
    if shares.shape != values.shape or shares.ndim != 1 or not shares.size or rise < 0:
        raise InvalidArgumentError(f"flat_share needs equal, non-empty 1-D arrays and rise >= 0; got shapes "
                                   f"{shares.shape} and {values.shape}, rise {rise}.", code="arg_flat_share",
                                   first=str(shares.shape), second=str(values.shape), rise=rise)
    bad = np.flatnonzero(values - values[0] > rise)
    last = (bad[0] - 1) if bad.size else len(values) - 1
    return float(shares[max(last, 0)])


@checks.needs_model
def heads_that_can_go(loaded: LoadedModel, texts: Sequence[str] | None = None, *, random_orders: int = RANDOM_ORDERS,
                      progress: Progress = None) -> Prunable:
    """Gradient importance (Michel et al. 2019, eq. 2) and the pruning curve on ``texts`` (default
    :func:`sentence_set`), then how far each curve stays flat (:func:`flat_share` with ``RISE[metric]``).

    Args:
        loaded: any model whose heads can be switched off one by one. texts: the sentences. random_orders: how many
            random orders to draw (numpy seed 0). progress: called with the fraction done, in [0, 1].

    Returns:
        :class:`Prunable` (metric in nats for the loss kinds, ``1 - cos`` for ``embedding_distance``).

    Raises:
        InvalidArgumentError: ``random_orders`` outside [1, 64].
        EmptyTextError, ModelOutOfMemoryError, UnsupportedOperationError: as :func:`models.pruning.prepare`
            (e.g. a model whose heads cannot be switched off one by one).
    """
    texts = sentence_set() if texts is None else checks.texts(texts)
    random_orders = check_int("random_orders", random_orders, 1, 64)
    report(progress, 0.0)
    importance = pruning.gradient_importance(loaded, texts, progress=lambda f: report(progress, 0.2 * f))
    curve = pruning.pruning_curve(loaded, texts, importance, random_orders=random_orders,
                                  progress=lambda f: report(progress, 0.2 + 0.8 * f))
    curve = dataclasses.replace(curve, seconds=importance.seconds + curve.seconds)
    rise = RISE[curve.metric]
    return Prunable(curve, flat_share(curve.shares, curve.by_importance, rise),
                    flat_share(curve.shares, curve.random_mean, rise))


@checks.needs_model
def estimate_seconds(loaded: LoadedModel, texts: Sequence[str] | None = None,
                     random_orders: int = RANDOM_ORDERS) -> float:
    """:func:`models.pruning.estimate_curve_seconds` on the same sentences, in seconds: importance and curve
    measured on the shortest sentence, scaled to each sentence by a line ``a + b·n`` in its tokens fitted to timed
    passes on the shortest and the longest.

    Raises:
        as :func:`heads_that_can_go`.
    """
    texts = sentence_set() if texts is None else checks.texts(texts)
    return pruning.estimate_curve_seconds(loaded, texts, random_orders=random_orders).seconds
