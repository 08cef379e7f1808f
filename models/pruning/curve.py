"""The pruning curve: heads switched off in order of importance against random orders (Michel et al.
2019, fig. 3/4; Voita et al. 2019, fig. 7), and a measured estimate of its time."""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable, Sequence

import numpy as np

from .. import checks
from ..errors import InvalidArgumentError
from ..loading.model import LoadedModel
from .core import (DEFAULT_SHARES, HeadId, _limit, _texts, evaluate, head_list, keep_matrix, metric_kind,
                   prepare)
from .importance import HeadScores, gradient_importance


# --------------------------------------------------------------------------------------------------
# Pruning curve
# --------------------------------------------------------------------------------------------------


@dataclass
class PruningCurve:
    """Metric against the share of heads pruned.

    Attributes:
        shares: float64 ``(steps,)`` share of heads switched off (0 .. 0.9).
        n_pruned: int ``(steps,)`` heads switched off at each step (``round(share * total)``, numpy
            ``rint``: halves round to even).
        by_importance: float64 ``(steps,)`` mean metric over ``texts``, least important heads off first.
        random: float64 ``(orders, steps)`` the same for random orders (one row per order).
        metric: the metric kind. order: the heads in pruning order (least important first).
        texts: the sentences evaluated. total_heads: heads in the model.
        seconds: wall time of the computation, in seconds.
    """

    shares: np.ndarray
    n_pruned: np.ndarray
    by_importance: np.ndarray
    random: np.ndarray
    metric: str
    order: list[HeadId]
    texts: list[str]
    total_heads: int
    seconds: float = 0.0

    @property
    def random_mean(self) -> np.ndarray:
        """float64 ``(steps,)`` mean over the random orders."""
        return self.random.mean(axis=0)


MAX_RANDOM_ORDERS = 100  # each order adds len(shares) rows per text: 100 orders is 100x the work of the pruned order


@checks.needs_model
def pruning_curve(loaded: LoadedModel, texts: Sequence[str], importance: HeadScores | np.ndarray, *,
                  shares: Sequence[float] = DEFAULT_SHARES, random_orders: int = 3, seed: int = 0,
                  batch_size: int = 64, max_tokens: int | None = None,
                  progress: Callable[[float], None] | None = None) -> PruningCurve:
    """Switch heads off in order of importance and measure the metric on ``texts`` at each share.

    The ``k = round(share * N)`` heads with the lowest importance are switched off (ties in head order),
    as in Michel et al. (2019, §4, fig. 3: heads pruned by increasing importance, 10 % steps); the same
    shares are evaluated for ``random_orders`` random permutations (numpy ``default_rng(seed)``). All
    steps of all orders for one text run as rows of one batch.

    Args:
        texts: the sentence set (e.g. ``assets/sentences.json``).
        importance: :class:`HeadScores` or a float array in :func:`head_list` order (any shape that
            flattens to ``total_heads``); higher = more important.
        shares: shares to evaluate, each in [0, 1].
        random_orders: how many random permutations to evaluate, 0 to :data:`MAX_RANDOM_ORDERS`. seed: their
            numpy seed (>= 0).
        batch_size: rows per forward pass (see :func:`evaluate`), >= 1.
        max_tokens: cut each text to this many tokens.
        progress: called with the fraction done, in [0, 1], after each text.

    Returns:
        :class:`PruningCurve` (metric in nats for the loss kinds, ``1 - cos`` for ``embedding_distance``).

    Raises:
        InvalidArgumentError: importance of the wrong size, a share outside [0, 1], or ``random_orders``, ``seed``
            or ``batch_size`` not a whole number in range (code ``arg_whole``; refused before any work).
        EmptyTextError, ModelOutOfMemoryError, UnsupportedOperationError (as :func:`prepare`).
    """
    import time

    random_orders = checks.whole("random_orders", random_orders, 0, MAX_RANDOM_ORDERS)
    seed = checks.whole("seed", seed, 0)
    batch_size = checks.whole("batch_size", batch_size, 1)
    texts = _texts(texts)
    start = time.perf_counter()
    heads = head_list(loaded)
    n = len(heads)
    flat = importance.flat() if isinstance(importance, HeadScores) else checks.array(
        "importance", importance, finite=True, shape=f"({n},)").reshape(-1)
    if flat.size != n:
        raise InvalidArgumentError(f"importance has {flat.size} values; model '{loaded.name}' has {n} heads.",
                                   code="importance_size", got=flat.size, model=loaded.name, n=n)
    shares_arr = checks.array("shares", shares, ndim=1, finite=True, shape="(k,)")
    if ((shares_arr < 0) | (shares_arr > 1)).any():
        raise InvalidArgumentError("shares must lie in [0, 1].", code="shares_range")
    n_pruned = np.rint(shares_arr * n).astype(int)
    rng = np.random.default_rng(seed)
    orders = [np.argsort(flat, kind="stable")] + [rng.permutation(n) for _ in range(random_orders)]
    keep = np.ones((len(orders) * len(shares_arr), n))
    for o, order in enumerate(orders):
        for s, k in enumerate(n_pruned):
            keep[o * len(shares_arr) + s, order[:k]] = 0.0
    total = np.zeros(len(keep))
    # every text taken or refused (empty, one token) before the first gated pass
    preps = [prepare(loaded, text, max_tokens=max_tokens) for text in texts]
    for i, prep in enumerate(preps):
        total += evaluate(loaded, prep, keep, batch_size=batch_size)
        if progress:
            progress((i + 1) / len(texts))
    mean = (total / len(texts)).reshape(len(orders), len(shares_arr))
    return PruningCurve(
        shares=shares_arr, n_pruned=n_pruned, by_importance=mean[0], random=mean[1:], metric=metric_kind(loaded),
        order=[heads[i] for i in orders[0]], texts=texts, total_heads=n, seconds=time.perf_counter() - start,
    )


#: repeats of each timed pass of the estimate's fit (the least is kept: other work only ever adds time)
FIT_REPEATS = 2


@dataclass
class CurveEstimate:
    """How long :func:`gradient_importance` plus :func:`pruning_curve` will take on a sentence set.

    Each text of ``n`` tokens is taken to cost the probe's time × ``(pass_seconds + token_seconds·n) ÷
    (pass_seconds + token_seconds·n_probe)`` (:meth:`text_seconds`); ``seconds`` is the sum over the set.

    Attributes:
        seconds: the estimate for the whole set, in seconds of wall time on this machine.
        probe_seconds: what the probe took on ``probe_text``: :func:`gradient_importance` (the lesser of two runs;
            the first pays one-off costs) plus :func:`pruning_curve`, in seconds.
        probe_text: the set's text with the fewest tokens, on which the probe ran.
        tokens: tokens of each text, in the set's order.
        pass_seconds: ``a`` of the fitted ``a + b·n``: the fixed time of one of the curve's passes, ≥ 0, in seconds.
        token_seconds: ``b``: the time per token of one of the curve's passes of ``batch_rows`` rows, ≥ 0, in
            seconds per token.
        batch_rows: rows in one of the curve's passes, ``min(batch_size, (random_orders + 1) · len(shares))``.
    """

    seconds: float
    probe_seconds: float
    probe_text: str
    tokens: list[int]
    pass_seconds: float = 0.0
    token_seconds: float = 0.0
    batch_rows: int = 1

    def text_seconds(self, n_tokens: int) -> float:
        """The estimate for one text of ``n_tokens`` tokens, in seconds: the probe's time scaled by the fitted
        line (by ``n_tokens ÷ n_probe`` where the line is 0 at the probe)."""
        probe = min(self.tokens)
        at_probe = self.pass_seconds + self.token_seconds * probe
        if at_probe <= 0:
            return self.probe_seconds * n_tokens / max(probe, 1)
        return self.probe_seconds * (self.pass_seconds + self.token_seconds * n_tokens) / at_probe


def _fit_line(n0: float, t0: float, n1: float, t1: float) -> tuple[float, float]:
    """``(a, b)`` of the line ``t = a + b·n`` through ``(n0, t0)`` and ``(n1, t1)``, then clamped: ``b = 0`` where
    ``t1 < t0`` and ``a = 0`` where the line crosses zero above ``n = 0`` (timing noise either way); one point
    (``n0 == n1``) gives the flat line ``t = t0``."""
    b = max((t1 - t0) / (n1 - n0), 0.0) if n1 != n0 else 0.0
    return max(t0 - b * n0, 0.0), b


@checks.needs_model
def estimate_curve_seconds(loaded: LoadedModel, texts: Sequence[str], *, random_orders: int = 3,
                           shares: Sequence[float] = DEFAULT_SHARES, batch_size: int = 64,
                           max_tokens: int | None = None) -> CurveEstimate:
    """Measure :func:`gradient_importance` and :func:`pruning_curve` on the set's shortest text and scale the
    time to the whole set by a line fitted to the cost of one pass.

    1. Probe: both functions on the shortest text; :func:`gradient_importance` runs twice and the lesser time
       counts (the first run after loading pays one-off costs that the run, after the estimate, does not pay
       again: about a fifth of the first run on minilm-l6, whose forward-mode derivatives pay them).
    2. Fit: one row of the curve (its least important half of the heads off) through :func:`evaluate` on the
       shortest and on the longest text, ``FIT_REPEATS`` times each, the least time kept; the line
       ``t = a + b₁·n`` through the two points (``a, b₁ ≥ 0``) is the fixed cost of a pass plus a cost per token
       and row. One of the curve's passes of ``R = batch_rows`` rows then takes ``a + b·n`` with ``b = R·b₁``.
    3. Each text's time is the probe's × ``(a + b·n) ÷ (a + b·n_probe)``.

    Scaling by tokens alone (``n ÷ n_probe``) counts the fixed cost of a pass (the weights read once per pass,
    the per-layer overhead) once per token and so overestimates longer texts; fitting ``a + b·n`` on the small
    batch alone, without the ``R`` rows, gives the fixed cost too much weight and underestimates. The fit costs
    four one-row passes: under a tenth of the probe on minilm-l6, about half of it on smollm2-135m (whose one-row
    pass is mostly reading the weights). ``bench/experiments.py --only prunable`` prints estimate ÷ actual for
    the bundled models.

    Args:
        texts: the sentence set (as for :func:`pruning_curve`).
        random_orders, shares, batch_size, max_tokens: as for :func:`pruning_curve`.

    Returns:
        :class:`CurveEstimate` (seconds, and the fitted line).

    Raises:
        EmptyTextError, ModelOutOfMemoryError, UnsupportedOperationError: as :func:`prepare`.
        InvalidArgumentError: as :func:`pruning_curve`.
    """
    import time

    texts = _texts(texts)
    limit = _limit(loaded, max_tokens)
    tokens = [len(loaded.tokenizer(text, truncation=True, max_length=limit)["input_ids"]) for text in texts]
    probe, longest = int(np.argmin(tokens)), int(np.argmax(tokens))
    first = gradient_importance(loaded, [texts[probe]], batch_size=batch_size, max_tokens=max_tokens)
    importance = gradient_importance(loaded, [texts[probe]], batch_size=batch_size, max_tokens=max_tokens)
    curve = pruning_curve(loaded, [texts[probe]], importance, shares=shares, random_orders=random_orders,
                          batch_size=batch_size, max_tokens=max_tokens)
    probe_seconds = min(first.seconds, importance.seconds) + curve.seconds
    keep = keep_matrix(loaded, [curve.order[: len(curve.order) // 2]])

    def one_row(text: str) -> float:
        prep = prepare(loaded, text, max_tokens=max_tokens)
        best = float("inf")
        for _ in range(FIT_REPEATS):
            start = time.perf_counter()
            evaluate(loaded, prep, keep, batch_size=batch_size)
            best = min(best, time.perf_counter() - start)
        return best

    rows = min(batch_size, (max(random_orders, 0) + 1) * len(curve.shares))
    t_probe = one_row(texts[probe])
    t_long = one_row(texts[longest]) if tokens[longest] != tokens[probe] else t_probe
    a, b_row = _fit_line(tokens[probe], t_probe, tokens[longest], t_long)
    est = CurveEstimate(0.0, probe_seconds, texts[probe], tokens, a, b_row * rows, rows)
    est.seconds = sum(est.text_seconds(n) for n in tokens)
    return est
