"""Causal labels: a head is called what its pattern suggests only when switching it off moves what that pattern
is for.

A pattern (from :class:`models.atlas.Atlas`'s metrics) makes a head a *candidate*:

=========  =====================================================  ===============================================
label      candidate when (pooled over the corpus)               test: switching the head off ...
=========  =====================================================  ===============================================
induction  induction on repeated random tokens >= 0.3 (decoders;  raises the loss on the second copy of repeated
           encoders: on the corpus)                                random tokens (Olsson et al. 2022, §2, arg. 3)
previous   previous-token share >= 0.4                            lowers the induction scores of the induction
                                                                  heads after it (K-composition: Olsson et al.
                                                                  2022, §2; Elhage et al. 2021)
sink       first-token share >= 0.5                               moves the first-token share of later layers
                                                                  (Xiao et al. 2024, §3; Gu et al. 2025)
special    share on control tokens other than the first >= 0.3   raises the model's loss (Clark et al. 2019, §3.2,
                                                                  found [SEP] heads a near no-op)
self       self share >= 0.4                                      raises the model's loss
local      mean distance <= 1.5 tokens, neither previous nor self raises the model's loss
=========  =====================================================  ===============================================

The model's loss is :func:`models.pruning.metric_kind`'s metric (next-token loss, masked-token loss, or the
embedding's cosine distance for encoders without a head) on the corpus's texts. Each test is a mean change over
texts (or repeated sequences) with a 95 % percentile bootstrap interval; the label *passes* when the interval
excludes 0 in the direction stated (for ``first_share_later``, either direction) and the mean change is at least
:data:`MIN_EFFECT` (a change too small to matter does not make a label, however sure). A candidate that fails
is "pattern only". The heads are switched off as the pruning sweep does it (:func:`models.pruning.evaluate`: one
batched forward pass per text, one row per candidate; analyses with ``heads_off`` for the attention-based
quantities).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from .. import checks
from ..analysis import analyze
from ..loading.model import LoadedModel
from .atlas import Atlas
from .verdict import RULES

#: label -> minimum of its pattern metric
THRESHOLDS = {"induction": 0.3, "previous": 0.4, "sink": 0.5, "special": 0.3, "self": 0.4, "local": 1.5}
LABELS = tuple(THRESHOLDS)
#: the smallest change that counts, by quantity (nats per token for losses; shares; 1 - cos): a label needs its
#: interval past 0 *and* its mean past this size
MIN_EFFECT = {"loss": 0.01, "mask_loss": 0.01, "seq2seq_loss": 0.01, "second_copy_loss": 0.01,
              "embedding_distance": 0.002, "downstream_induction": 0.02, "first_share_later": 0.01}
#: the heads tested per label (the strongest patterns)
CANDIDATES = 3
COLUMNS = ["stack", "layer", "head", "label", "pattern", "pattern_value", "quantity", "delta", "lo", "hi", "passed",
           "texts", "primary"]


def candidates(table: pd.DataFrame, k: int = CANDIDATES) -> list[tuple[str, str, float, tuple[str, int, int]]]:
    """``(label, pattern metric, value, head)`` of the up to ``k`` strongest heads of each label's pattern
    (:data:`THRESHOLDS`)."""
    t = table.copy()
    t["special_other"] = t["special"] - t["first"]
    has_repeat = bool(t["induction_repeat"].notna().any())
    rules = {**RULES, "induction": "induction_repeat" if has_repeat else "induction"}
    out = []
    for label, metric in rules.items():
        col = t[metric]
        if label == "local":
            pick = t[(col <= THRESHOLDS[label]) & (t["previous"] < THRESHOLDS["previous"])
                     & (t["self"] < THRESHOLDS["self"])].sort_values(metric)
        else:
            pick = t[col >= THRESHOLDS[label]].sort_values(metric, ascending=False)
        for _, r in pick.head(k).iterrows():
            out.append((label, metric, float(r[metric]), (r["stack"], int(r["layer"]), int(r["head"]))))
    return out


def _interval(deltas: np.ndarray, draws: int = 1000, seed: int = 0) -> tuple[float, float, float]:
    """Mean of ``deltas`` (finite values) and its 95 % percentile bootstrap interval."""
    d = deltas[np.isfinite(deltas)]
    if not len(d):
        return float("nan"), float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(draws, len(d)))].mean(axis=1)
    return float(d.mean()), float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def metric_deltas(loaded: LoadedModel, texts: list[str], heads: list, *, max_tokens: int = 256,
                  batch_size: int = 32, second_copy: int | None = None, first_copy: int | None = None) -> np.ndarray:
    """float64 ``(texts, heads)``: the model's metric with each head switched off minus with none off, per text
    (:func:`models.pruning.evaluate`). With ``second_copy = L``, the loss counts only the last ``L - 1`` tokens
    (the second copy of a repeated sequence, its first token left out); with ``first_copy = L``, only the
    ``L - 1`` tokens before them (the first copy, its first token left out)."""
    from ..pruning.core import evaluate, keep_matrix, prepare

    keep = keep_matrix(loaded, [[]] + [[h] for h in heads])
    out = np.full((len(texts), len(heads)), np.nan)
    # every text taken or refused (empty, one token) before the first gated pass
    preps = [prepare(loaded, text, max_tokens=max_tokens) for text in texts]
    for i, prep in enumerate(preps):
        if second_copy is not None:
            n = prep.labels.shape[1]
            prep.labels[0, : n - second_copy + 1] = -100
        if first_copy is not None:
            n = prep.labels.shape[1]
            prep.labels[0, : max(0, n - 2 * first_copy + 1)] = -100
            prep.labels[0, n - first_copy:] = -100
        values = evaluate(loaded, prep, keep, batch_size=batch_size)
        out[i] = values[1:] - values[0]
    return out


def induction_scores(weights: np.ndarray, length: int) -> np.ndarray:
    """Olsson et al. (2022) §2: mean weight from each query ``i`` of the second copy to key ``i - L + 1``;
    ``weights`` float ``(..., n, n)`` of a text whose last ``2 L`` tokens are the two copies. Returns ``(...)``."""
    n = weights.shape[-1]
    q = np.arange(n - length + 1, n)
    return weights[..., q, q - length + 1].mean(axis=-1)


def second_copy_effects(loaded: LoadedModel, *, sequences: int = 8, length: int = 40, max_tokens: int | None = None,
                        batch_size: int = 64, copy: str = "second") -> tuple[list, np.ndarray]:
    """Every head's effect on the loss of the second (or, ``copy="first"``, the first) copy of repeated random
    tokens (decoders): ``(heads, float64 (sequences, heads))``, the loss with the head off minus with none off,
    nats per token. The second copy's rise minus the first's is what a head does for in-context copying alone
    (a head every prediction needs raises both).

    Raises:
        InvalidArgumentError: ``sequences`` not a whole number from 1 to 1,000, ``batch_size`` not one from 1 to
            4,096, ``copy`` not ``"second"`` or ``"first"``, and what :func:`_limit` and
            :func:`models.experiments.induction.repeated_text` refuse (``max_tokens``, ``length``).
        UnsupportedOperationError: a tokenizer with fewer than ``length`` whole-word tokens.
    """
    from ..experiments.induction import repeated_text
    from ..pruning.core import head_list

    checks.loaded_model(loaded)
    sequences = checks.whole("sequences", sequences, 1, 1000)
    batch_size = checks.whole("batch_size", batch_size, 1, 4096)
    copy = checks.choice("copy", copy, ("second", "first"))
    heads = head_list(loaded)
    max_tokens = _limit(loaded, max_tokens)
    texts = [repeated_text(loaded, length, seed)[0] for seed in range(sequences)]
    which = {"second_copy": length} if copy == "second" else {"first_copy": length}
    return heads, metric_deltas(loaded, texts, heads, max_tokens=max_tokens, batch_size=batch_size, **which)


@checks.needs_model
def causal_labels(loaded: LoadedModel, atlas: Atlas, *, texts: int = 16, sequences: int = 8, length: int = 40,
                  k: int = CANDIDATES, max_tokens: int | None = None, progress: Callable[[float], None] | None = None,
                  save: bool = True, heads: list | None = None) -> pd.DataFrame:
    """Test every candidate label of the atlas's heads (module docstring) and store the result with the atlas
    (``labels.parquet``, read back by :meth:`Atlas.labels`).

    Args:
        loaded: the atlas's model. texts: corpus texts for the loss and first-token tests. sequences, length:
            repeated random sequences (decoders) for the induction and previous-token tests. k: candidates
            per label. max_tokens: each text cut to this many tokens (default 256, or the model's limit).
            progress: called with the fraction done.
            save: store the result with the atlas. heads: only the candidates among these ``(stack, layer, head)``
            (one group of a distributed run, :func:`models.atlas.cluster.causal_labels_ray`; None: all).

    Returns:
        One row per (head, label, quantity): :data:`COLUMNS`; ``delta`` the mean change when the head is
        switched off (nats per token for the losses, a share for ``first_share_later`` and
        ``downstream_induction``, ``1 - cos`` for ``embedding_distance``), ``lo``/``hi`` its 95 % interval,
        ``passed`` the test's verdict, ``texts`` how many texts or sequences it averaged, ``primary`` whether
        this row decides the label (a sink's loss row is reported beside its first-token test).

    Raises:
        InvalidArgumentError: an atlas of another model, or counts out of range. Whatever
        :func:`models.pruning.prepare` raises for a model whose heads cannot be switched off.
    """
    from ..errors import InvalidArgumentError
    from ..pruning.core import metric_kind

    if atlas.model != loaded.name:
        raise InvalidArgumentError(f"The atlas is of '{atlas.model}', not '{loaded.name}'.", code="atlas_model",
                                   atlas=atlas.model, model=loaded.name)
    texts = checks.whole("texts", texts, 1, 1000)
    sequences = checks.whole("sequences", sequences, 1, 1000)
    k = checks.whole("k", k, 1, 50)
    max_tokens = _limit(loaded, max_tokens)
    table = atlas.table()
    cands = candidates(table, k)
    if heads is not None:
        wanted = {(str(s), int(layer), int(h)) for s, layer, h in heads}
        cands = [c for c in cands if c[3] in wanted]
    corpus = [t for _, t in atlas.texts(limit=texts)]
    kind = metric_kind(loaded)
    rows = []
    repeats = loaded.family == "decoder" and table["induction_repeat"].notna().any()
    steps = 4
    done = 0

    def tick():
        nonlocal done
        done += 1
        if progress is not None:
            progress(done / steps)

    def add(head, label, metric, value, quantity, deltas, passed_if, primary=True):
        mean, lo, hi = _interval(np.asarray(deltas, dtype=float))
        big = abs(mean) >= MIN_EFFECT[quantity]
        rows.append({"stack": head[0], "layer": head[1], "head": head[2], "label": label, "pattern": metric,
                     "pattern_value": value, "quantity": quantity, "delta": mean, "lo": lo, "hi": hi,
                     "passed": bool(big and passed_if(lo, hi)),
                     "texts": int(np.isfinite(np.asarray(deltas, dtype=float)).sum()),
                     "primary": primary})

    # 1. the model's loss on the corpus, every candidate at once
    heads = sorted({c[3] for c in cands})
    loss = metric_deltas(loaded, corpus, heads, max_tokens=max_tokens) if heads else np.zeros((0, 0))
    tick()
    col = {h: i for i, h in enumerate(heads)}
    for label, metric, value, head in cands:
        if label in ("special", "self", "local") or (label == "induction" and not repeats) or (
                label == "previous" and not repeats):
            add(head, label, metric, value, kind, loss[:, col[head]], lambda lo, hi: lo > 0)
        if label == "sink":  # reported beside the first-token test, which decides the label
            add(head, label, metric, value, kind, loss[:, col[head]], lambda lo, hi: lo > 0, primary=False)
    # 2. induction: the second copy's loss
    if repeats:
        from ..experiments.induction import repeated_text

        reps = [repeated_text(loaded, length, seed)[0] for seed in range(sequences)]
        ind_heads = [c[3] for c in cands if c[0] == "induction"]
        if ind_heads:
            d = metric_deltas(loaded, reps, ind_heads, max_tokens=max_tokens, second_copy=length)
            for j, (label, metric, value, head) in enumerate([c for c in cands if c[0] == "induction"]):
                add(head, label, metric, value, "second_copy_loss", d[:, j], lambda lo, hi: lo > 0)
        tick()
        # 3. previous-token: the induction heads after it lose their score
        top_ind = table.sort_values("induction_repeat", ascending=False).head(k)
        targets = [(r["stack"], int(r["layer"]), int(r["head"])) for _, r in top_ind.iterrows()]
        base = [_ind(loaded, text, targets, length, max_tokens, ()) for text in reps]
        for label, metric, value, head in [c for c in cands if c[0] == "previous"]:
            later = [i for i, t in enumerate(targets) if t[1] > head[1] and t[0] == head[0]]
            if not later:
                continue
            deltas = [(_ind(loaded, text, targets, length, max_tokens, (head,)) - b)[later].mean()
                      for text, b in zip(reps, base)]
            add(head, label, metric, value, "downstream_induction", deltas, lambda lo, hi: hi < 0)
        tick()
    # 4. sink: the first-token share of later layers
    sinks = [c for c in cands if c[0] == "sink"]
    if sinks:
        base = [_first_later(loaded, text, max_tokens, ()) for text in corpus]
        for label, metric, value, head in sinks:
            deltas = [(_first_later(loaded, text, max_tokens, (head,)) - b)[head[1] + 1:].mean()
                      if head[1] + 1 < len(b) else np.nan for text, b in zip(corpus, base)]
            add(head, label, metric, value, "first_share_later", deltas, lambda lo, hi: lo > 0 or hi < 0)
    tick()
    out = pd.DataFrame(rows, columns=COLUMNS)
    if save:
        save_labels(atlas, out)
    return out


def save_labels(atlas: Atlas, labels: pd.DataFrame) -> None:
    """Store ``labels`` with the atlas (``labels.parquet``, written to a temporary name and renamed)."""
    tmp = atlas.folder / ".labels.parquet.tmp"
    labels.to_parquet(tmp, index=False)
    tmp.replace(atlas.folder / "labels.parquet")


def _limit(loaded: LoadedModel, max_tokens) -> int:
    """``max_tokens`` checked (default 256, or the model's limit if smaller)."""
    limit = max(2, loaded.max_positions)
    return checks.whole("max_tokens", min(256, limit) if max_tokens is None else max_tokens, 2, limit)


def _ind(loaded: LoadedModel, text: str, targets: list, length: int, max_tokens: int, off: tuple) -> np.ndarray:
    """Induction score of each target head on one repeated sequence, ``off`` switched off: float64 ``(targets,)``."""
    r = analyze(loaded, text, heads_off=list(off), max_tokens=max_tokens, top_k=1)
    return np.array([induction_scores(np.asarray(r.attentions[s][layer, head]), length)
                     for s, layer, head in targets], dtype=float)


def _first_later(loaded: LoadedModel, text: str, max_tokens: int, off: tuple) -> np.ndarray:
    """Per layer of the main stack, the first-token share averaged over heads: float64 ``(layers,)``."""
    r = analyze(loaded, text, heads_off=list(off), max_tokens=max_tokens, top_k=1)
    stack = loaded.input_stack if loaded.input_stack in r.statistics else next(iter(r.statistics))
    return np.nanmean(r.statistics[stack]["first"], axis=1).astype(float)
