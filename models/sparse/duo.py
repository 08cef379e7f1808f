"""Retrieval heads switched to a window: Wu et al. 2024's masking test (arXiv 2404.15574, fig. 1 and §3.1) in
DuoAttention's form (Xiao et al. 2024, arXiv 2410.10819): needle recall and loss with (a) every head full,
(b) the top-k retrieval heads full and every other head a window + sinks, (c) k random heads full instead, and
the key/value cache each needs."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import checks
from ..analysis.head_masks import full_heads
from .kept import kv_bytes
from .needle import DEPTHS, make_needles, retrieval_scores, run_needle


@dataclass(frozen=True)
class DuoRow:
    """One configuration of :func:`duo_compare`.

    Attributes:
        name: ``all full`` | ``top-k retrieval full`` | ``random k full`` | ``window everywhere``. k: heads kept
            full. recall: mean share of answer digits produced (teacher forced), over needles (and draws).
        recall_range: ``(min, max)`` over the random draws (the one value otherwise). loss: mean answer-digit
            cross-entropy, nats. kv: ``{length: bytes}`` of the key/value cache at each length.
    """

    name: str
    k: int
    recall: float
    recall_range: tuple[float, float]
    loss: float
    kv: dict = field(default_factory=dict)


@dataclass(frozen=True)
class DuoResult:
    """:func:`duo_compare`'s result: ``scores`` float32 ``(layers, heads)`` (retrieval scores from the all-full
    runs), ``rows`` per configuration, ``lengths`` and ``depths`` tested, ``window`` and ``sinks``, and
    ``per_length``: ``length -> name -> recall`` (means over the needles of that length)."""

    scores: np.ndarray
    rows: list[DuoRow]
    lengths: tuple[int, ...]
    depths: tuple[float, ...]
    window: int
    sinks: int
    per_length: dict


def duo_compare(loaded, lengths=(2048,), depths=DEPTHS, fractions=(0.05, 0.10), draws: int = 3, window: int = 64,
                sinks: int = 4, seed: int = 0, progress=None) -> DuoResult:
    """Needle recall and loss of a causal LM when only some heads keep the full context.

    Args:
        loaded: a causal LM on the AttentionInterface. lengths, depths: the needles (:func:`make_needles`).
        fractions: shares of all heads kept full in (b) and (c), each in (0, 1]. draws: random draws for (c).
        window, sinks: every other head's ``sink_window``. progress: called with a fraction in [0, 1].

    Returns:
        :class:`DuoResult`.

    Raises:
        InvalidArgumentError: bad arguments (as :func:`make_needles`, ``draws`` below 1, a fraction out of range).
        UnsupportedOperationError: not a causal LM, or off the AttentionInterface.
    """
    draws = checks.whole("draws", draws, 1, 50)
    fractions = [checks.number("fraction", f, 0.0, 1.0, above=True) for f in checks.sequence("fractions", fractions)]
    needles = make_needles(loaded, lengths, depths, seed)
    layers, heads = loaded.stacks["decoder"]
    ks = [max(1, round(f * layers * heads)) for f in fractions]
    total = len(needles) * (2 + len(ks) * (1 + draws))
    done = [0]

    def step():
        done[0] += 1
        if progress is not None:
            progress(done[0] / total)

    def measure(mask) -> tuple[list, list, dict]:
        runs = []
        for needle in needles:
            runs.append((needle, run_needle(loaded, needle, mask)))
            step()
        by_length: dict[int, list[float]] = {}
        for needle, run in runs:
            by_length.setdefault(needle.length, []).append(run.recall)
        return [r.recall for _, r in runs], [r.loss for _, r in runs], by_length

    def kv(mask) -> dict:
        return {n: kv_bytes(loaded, mask, n)["bytes"] for n in sorted({x.length for x in needles})}

    full = [(needle, run_needle(loaded, needle)) for needle in needles]
    for _ in full:
        step()
    scores = retrieval_scores(full)
    rows, per_length = [], {}
    every = full_heads([(layer, h) for layer in range(layers) for h in range(heads)], window, sinks)
    rec = [r.recall for _, r in full]
    rows.append(DuoRow("all full", layers * heads, float(np.mean(rec)), (float(np.mean(rec)),) * 2,
                       float(np.mean([r.loss for _, r in full])), kv(every)))
    per_length["all full"] = _means({n.length: [] for n, _ in full}, full)
    rng = np.random.default_rng(seed)
    order = np.argsort(-scores.reshape(-1), kind="stable")
    for k in ks:
        top = full_heads([divmod(int(i), heads) for i in order[:k]], window, sinks)
        rec, loss, by = measure(top)
        name = f"top-{k} retrieval full"
        rows.append(DuoRow(name, k, float(np.mean(rec)), (float(np.mean(rec)),) * 2, float(np.mean(loss)), kv(top)))
        per_length[name] = {n: float(np.mean(v)) for n, v in by.items()}
        means, losses = [], []
        by_all: dict[int, list[float]] = {}
        for _ in range(draws):
            pick = rng.choice(layers * heads, size=k, replace=False)
            mask = full_heads([divmod(int(i), heads) for i in pick], window, sinks)
            rec, loss, by = measure(mask)
            means.append(float(np.mean(rec)))
            losses.append(float(np.mean(loss)))
            for n, v in by.items():
                by_all.setdefault(n, []).extend(v)
        name = f"random {k} full"
        rows.append(DuoRow(name, k, float(np.mean(means)), (min(means), max(means)), float(np.mean(losses)),
                           kv(mask)))
        per_length[name] = {n: float(np.mean(v)) for n, v in by_all.items()}
    window_only = full_heads([], window, sinks)
    rec, loss, by = measure(window_only)
    rows.append(DuoRow("window everywhere", 0, float(np.mean(rec)), (float(np.mean(rec)),) * 2, float(np.mean(loss)),
                       kv(window_only)))
    per_length["window everywhere"] = {n: float(np.mean(v)) for n, v in by.items()}
    return DuoResult(scores, rows, tuple(sorted({n.length for n in needles})), tuple(depths), window, sinks, per_length)


def _means(acc: dict, runs) -> dict:
    for needle, run in runs:
        acc[needle.length].append(run.recall)
    return {n: float(np.mean(v)) for n, v in acc.items()}
