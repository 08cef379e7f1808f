"""How much each head matters: ablation (batched and one at a time), gradient importance (Michel et al.
2019, eq. 2), rank correlation between two rankings."""

from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Callable, Sequence

import numpy as np
import torch

from .. import checks
from ..errors import InvalidArgumentError, UndefinedError, UnsupportedOperationError
from ..loading.model import LoadedModel
from .core import (
    _STACK_ORDER, HeadId, Prepared, _float, _forward, _row_metric, _texts, _unit_embedding, check_batch, evaluate,
    gates_from_keep, head_list, metric_kind, prepare,
)


# --------------------------------------------------------------------------------------------------
# Scores
# --------------------------------------------------------------------------------------------------


@dataclass
class HeadScores:
    """A score per head.

    Attributes:
        values: ``stack -> float64 (layers, heads)``.
        kind: ``ablation`` | ``gradient``. metric: the metric kind (:func:`metric_kind`).
        base: mean metric of the full model over ``texts`` (nats for the loss kinds; 0 for
            ``embedding_distance``, up to rounding).
        texts: the texts the scores are averaged over.
        seconds: wall time of the computation, in seconds.
        forward_passes: how many batched forward passes were run (ablation), or for ``gradient`` one per
            text (each with one backward pass), or ``ceil(heads / batch_size)`` forward-mode passes per
            text for ``embedding_distance``.
    """

    values: dict[str, np.ndarray]
    kind: str
    metric: str
    base: float
    texts: list[str]
    seconds: float = 0.0
    forward_passes: int = 0

    def flat(self) -> np.ndarray:
        """float64 ``(total_heads,)`` in :func:`head_list` order."""
        return np.concatenate([self.values[s].reshape(-1) for s in sorted(self.values, key=_STACK_ORDER.index)])

    def ranked(self) -> list[tuple[HeadId, float]]:
        """Heads from the least to the most important (ties by head order)."""
        heads = [(s, layer, h) for s in sorted(self.values, key=_STACK_ORDER.index)
                 for layer in range(self.values[s].shape[0]) for h in range(self.values[s].shape[1])]
        flat = self.flat()
        order = np.argsort(flat, kind="stable")
        return [(heads[i], float(flat[i])) for i in order]


def _to_stacks(loaded: LoadedModel, flat: np.ndarray) -> dict[str, np.ndarray]:
    out = {stack: np.zeros((layers, heads)) for stack, (layers, heads) in loaded.stacks.items()}
    for value, (stack, layer, head) in zip(flat, head_list(loaded)):
        out[stack][layer, head] = value
    return out


@checks.needs_model
def ablation_scores(loaded: LoadedModel, texts: str | Sequence[str], *, batch_size: int = 64,
                    max_tokens: int | None = None, reuse_prefix: bool = True,
                    progress: Callable[[float], None] | None = None) -> HeadScores:
    """Per-head ablation score: metric with that head alone switched off minus metric of the full model,
    averaged over ``texts`` (Michel et al. 2019, §3.1, "ablating one head").

    Batched: the text is repeated ``batch_size`` times and row ``b`` switches off head ``b`` of the chunk
    (gate ``(batch, heads)`` per layer), so ``N`` heads take ``ceil(N / batch_size)`` forward passes.
    Positive = the metric gets worse without the head (loss up, embedding moves away).
    Rows are in layer order, so a batch whose heads all lie in layer ``l`` or later runs the layers
    before ``l`` once (``reuse_prefix``, see :func:`evaluate`).

    Args:
        texts: one text or several (the score is their mean).
        batch_size: rows per forward pass (memory grows linearly with it).
        reuse_prefix: see :func:`evaluate`.
        progress: called with the fraction done, in [0, 1].

    Returns:
        :class:`HeadScores` of kind ``ablation``; ``values[stack]`` float64 ``(layers, heads)``.

    Raises:
        EmptyTextError, ModelOutOfMemoryError, UnsupportedOperationError.
    """
    import time

    texts = _texts(texts)
    batch_size = check_batch(batch_size)
    start = time.perf_counter()
    n = len(head_list(loaded))
    keep = np.ones((n + 1, n))
    keep[np.arange(n), np.arange(n)] = 0.0  # row i: head i off; last row: the full model
    total = np.zeros(n)
    base = 0.0
    passes = 0
    # every text taken or refused (empty, one token) before the first gated pass
    preps = [prepare(loaded, text, max_tokens=max_tokens) for text in texts]
    for i, prep in enumerate(preps):
        values = evaluate(loaded, prep, keep, batch_size=batch_size, reuse_prefix=reuse_prefix)
        passes += math.ceil(len(keep) / batch_size)
        total += values[:-1] - values[-1]
        base += values[-1]
        if progress:
            progress((i + 1) / len(texts))
    flat = total / len(texts)
    return HeadScores(_to_stacks(loaded, flat), "ablation", metric_kind(loaded), base / len(texts), texts,
                      time.perf_counter() - start, passes)


@checks.needs_model
def ablation_scores_one_at_a_time(loaded: LoadedModel, texts: str | Sequence[str], *,
                                  max_tokens: int | None = None) -> HeadScores:
    """Reference for :func:`ablation_scores`: one forward pass (batch 1) per head. Same result, slower.

    Returns:
        :class:`HeadScores` of kind ``ablation``; ``values[stack]`` float64 ``(layers, heads)``.

    Raises:
        EmptyTextError, ModelOutOfMemoryError, UnsupportedOperationError (as :func:`prepare`).
    """
    import time

    texts = _texts(texts)
    start = time.perf_counter()
    n = len(head_list(loaded))
    total = np.zeros(n)
    base = 0.0
    # every text taken or refused (empty, one token) before the first gated pass
    preps = [prepare(loaded, text, max_tokens=max_tokens) for text in texts]
    for prep in preps:
        full = evaluate(loaded, prep, np.ones((1, n)), batch_size=1)[0]
        base += full
        for i in range(n):
            keep = np.ones((1, n))
            keep[0, i] = 0.0
            total[i] += evaluate(loaded, prep, keep, batch_size=1)[0] - full
    return HeadScores(_to_stacks(loaded, total / len(texts)), "ablation", metric_kind(loaded), base / len(texts),
                      texts, time.perf_counter() - start, (n + 1) * len(texts))


@checks.needs_model
def gradient_importance(loaded: LoadedModel, texts: str | Sequence[str], *, normalize_layers: bool = False,
                        max_tokens: int | None = None, batch_size: int = 64,
                        progress: Callable[[float], None] | None = None) -> HeadScores:
    """Gradient importance of every head (Michel, Levy & Neubig 2019, eq. 2).

    ``I_h = E_x |∂L(x)/∂ξ_h|`` at ``ξ = 1``: the gate ``ξ_h`` multiplies head ``h``'s output (the input of
    the output projection), the expectation is the mean over ``texts``. ``L`` is the model's loss metric
    (:func:`metric_kind`); one backward pass per text gives every head at once. For
    ``embedding_distance`` (no loss; ``1 - cos`` has zero gradient at ``ξ = 1``) the importance is
    ``E_x ‖∂ê(x)/∂ξ_h‖₂`` of the unit embedding ``ê``, computed exactly with forward-mode derivatives,
    ``batch_size`` heads per forward pass (one tangent per batch row).

    Args:
        normalize_layers: divide each layer's scores by their ℓ2 norm (Michel et al. 2019, §4.2,
            following Molchanov et al. 2017).
        batch_size: ``embedding_distance`` only: tangents (heads) per forward-mode pass.
        progress: called with the fraction done, in [0, 1], after each text.

    Returns:
        :class:`HeadScores` of kind ``gradient``; ``values[stack]`` float64 ``(layers, heads)``, ≥ 0
        (units of the metric per unit gate: nats for the loss kinds).

    Raises:
        EmptyTextError: no texts or an empty one. ModelOutOfMemoryError.
        UnsupportedOperationError: as :func:`prepare`, or forward-mode derivatives that do not reach the
            embedding.
    """
    import time

    texts = _texts(texts)
    batch_size = check_batch(batch_size)
    start = time.perf_counter()
    n = len(head_list(loaded))
    total = np.zeros(n)
    base = 0.0
    passes = 0
    # every text taken or refused (empty, one token) before the first gated pass
    preps = [prepare(loaded, text, max_tokens=max_tokens) for text in texts]
    for i, prep in enumerate(preps):
        if prep.kind == "embedding_distance":
            total += _embedding_sensitivity(loaded, prep, batch_size)
            passes += math.ceil(n / batch_size)
        else:
            xi = torch.ones(1, n, dtype=loaded.dtype, device=loaded.device, requires_grad=True)
            with torch.enable_grad():
                outputs = _forward(loaded, prep, 1, gates_from_keep(loaded, xi, all_layers=True))
                loss = _row_metric(loaded, prep, outputs)[0]
                (grad,) = torch.autograd.grad(loss, xi)
            total += grad[0].abs().double().cpu().numpy()
            base += float(loss.detach())
            passes += 1
        if progress:
            progress((i + 1) / len(texts))
    values = _to_stacks(loaded, total / len(texts))
    if normalize_layers:
        for arr in values.values():
            norms = np.linalg.norm(arr, axis=1, keepdims=True)
            np.divide(arr, norms, out=arr, where=norms > 0)
    return HeadScores(values, "gradient", metric_kind(loaded), base / len(texts), texts,
                      time.perf_counter() - start, passes)


def _embedding_sensitivity(loaded: LoadedModel, prep: Prepared, batch_size: int) -> np.ndarray:
    """``‖∂ê/∂ξ_h‖₂`` for every head, float64 ``(total_heads,)``: row ``b`` of a batch carries the tangent
    ``e_h`` (one-hot on head ``h``) so one forward-mode pass gives ``batch`` Jacobian columns."""
    import torch.autograd.forward_ad as fwAD

    n = len(head_list(loaded))
    out = np.empty(n)
    with torch.no_grad():
        for start in range(0, n, batch_size):
            rows = min(batch_size, n - start)
            primal = torch.ones(rows, n, dtype=loaded.dtype, device=loaded.device)
            tangent = torch.zeros_like(primal)
            tangent[torch.arange(rows), torch.arange(start, start + rows)] = 1.0
            with fwAD.dual_level():
                xi = fwAD.make_dual(primal, tangent)
                outputs = _forward(loaded, prep, rows, gates_from_keep(loaded, xi, all_layers=True))
                _, jac = fwAD.unpack_dual(_unit_embedding(loaded, outputs))
            if jac is None:
                raise UnsupportedOperationError(f"Forward-mode derivatives do not reach the output of '{loaded.name}'.",
                                                code="no_forward_derivative", model=loaded.name)
            out[start : start + rows] = _float(jac).norm(dim=-1).double().cpu().numpy()
    return out


def rank_correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation ρ of two score arrays of equal size (flattened): the Pearson
    correlation of their ranks, ties given their average rank (Spearman 1904).

    Returns:
        float in [-1, 1].

    Raises:
        InvalidArgumentError: arrays of different sizes.
        UndefinedError: code ``rank_constant``: either array is constant (or empty): its ranks do not vary, and ρ
            (a ratio 0 / 0) does not exist.
    """
    a = np.asarray(a, dtype=np.float64).reshape(-1)
    b = np.asarray(b, dtype=np.float64).reshape(-1)
    if a.shape != b.shape:
        raise InvalidArgumentError(f"Score arrays differ in size: {a.size} vs {b.size}", code="scores_size",
                                   first=a.size, second=b.size)
    ra, rb = _ranks(a), _ranks(b)
    ra -= ra.mean()
    rb -= rb.mean()
    denom = math.sqrt(float((ra * ra).sum() * (rb * rb).sum()))
    if not denom > 0:
        raise UndefinedError("Spearman's rank correlation is undefined: one of the score arrays is constant (all "
                             "its values equal), so its ranks do not vary.", code="rank_constant")
    return float((ra * rb).sum() / denom)


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x), dtype=np.float64)
    # average the ranks of ties
    values, inverse = np.unique(x, return_inverse=True)
    sums = np.bincount(inverse, weights=ranks)
    counts = np.bincount(inverse)
    return (sums / counts)[inverse]
