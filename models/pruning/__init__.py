"""Head pruning: switch attention heads off and measure what changes.

Three measurements of how much each head matters, all returning numpy arrays and plain dataclasses:

* :func:`ablation_scores`: the change of a metric when that head alone is switched off. Computed in
  batches: the input is repeated ``B`` times and each batch row switches off a different head (a
  ``(batch, heads)`` gate per layer, see :mod:`models.capture`), so ``N`` heads cost ``ceil(N / B)``
  forward passes instead of ``N``. :func:`ablation_scores_one_at_a_time` is the slow reference.
* :func:`gradient_importance`: Michel, Levy & Neubig (2019), "Are Sixteen Heads Really Better than
  One?", eq. 2: ``I_h = E_x |∂L(x)/∂ξ_h|`` where ``ξ_h`` is a gate multiplying head ``h``'s output,
  evaluated at ``ξ = 1`` (all heads on). The gates are the capture mechanism's differentiable gates.
* :func:`pruning_curve`: switch heads off in order of importance (least important first), 0 % to 90 %
  in steps, and evaluate the metric on a sentence set, next to the same curve for random orders
  (Michel et al. 2019, fig. 3/4; Voita et al. 2019, fig. 7).

The metric depends on the model's head (:func:`metric_kind`):

* ``"loss"`` (decoders, ``head == "lm"``): mean next-token cross-entropy of the text in nats, as in
  :func:`models.analyze` (``CE(logits[:-1], ids[1:])``).
* ``"mask_loss"`` (encoders with an MLM head): cross-entropy in nats at the ``[MASK]`` positions, with
  the full (unpruned) model's top fill as the label (so it grows when pruning loses the top fill); a
  text without a mask token is scored on reconstructing its own tokens at every non-special position.
* ``"seq2seq_loss"`` (encoder-decoders): teacher-forced cross-entropy of the full model's greedy output.
* ``"embedding_distance"`` (encoders without a head, e.g. minilm-l6): ``1 - cos(e_pruned, e_full)`` of
  the mean-pooled sentence embedding (Reimers & Gurevych 2019). Its gradient at ``ξ = 1`` is exactly 0
  (the full model is its minimum), so :func:`gradient_importance` uses the first-order sensitivity of the
  unit embedding instead: ``I_h = E_x ‖∂ê(x)/∂ξ_h‖₂`` with ``ê = e/‖e‖``; to second order
  ``1 - cos ≈ ½ ‖Δê‖²``.

Which heads to switch off (the Head pruning page's presets) and the ``off=`` text of a link:
:mod:`.select`.

Heads are named by ``(stack, layer, head)`` triples, as in ``models.analyze(heads_off=...)``; arrays of
scores are ``stack -> float64 (layers, heads)``. Nothing here touches the shared model's state: gates
travel in the :func:`models.capture.rerun` context of each call.
"""

from .core import (
    DEFAULT_SHARES, HeadId, MAX_TOKENS, METRIC_KINDS, Prepared, check_heads, evaluate, gates_from_keep, head_list,
    keep_matrix, metric_kind, prepare,
)
from .curve import CurveEstimate, PruningCurve, estimate_curve_seconds, pruning_curve
from .effects import Continuation, Ranking, cosine, embed, greedy_continuation, rank_sentences
from .select import heads_from_text, heads_to_text, keep_best_per_layer, least_important, whole_layer
from .importance import (
    HeadScores, ablation_scores, ablation_scores_one_at_a_time, gradient_importance, rank_correlation,
)

__all__ = [
    "Continuation",
    "CurveEstimate",
    "DEFAULT_SHARES",
    "HeadId",
    "HeadScores",
    "MAX_TOKENS",
    "METRIC_KINDS",
    "Prepared",
    "PruningCurve",
    "Ranking",
    "ablation_scores",
    "ablation_scores_one_at_a_time",
    "check_heads",
    "cosine",
    "embed",
    "estimate_curve_seconds",
    "evaluate",
    "gates_from_keep",
    "gradient_importance",
    "greedy_continuation",
    "head_list",
    "heads_from_text",
    "heads_to_text",
    "keep_best_per_layer",
    "keep_matrix",
    "least_important",
    "metric_kind",
    "prepare",
    "pruning_curve",
    "rank_correlation",
    "rank_sentences",
    "whole_layer",
]
