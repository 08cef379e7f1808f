"""Experiment 2: induction heads (Olsson et al. 2022, "In-context Learning and Induction Heads"; Elhage et al. 2021).

A sequence of random tokens is read twice in a row. On the second copy an induction head at token ``A`` looks back
at the token that followed ``A`` the first time and copies it: query ``i`` attends key ``i - L + 1`` (``L`` the
sequence length), and the model predicts the second copy almost perfectly while the first is random to it.

* :func:`induction_heads` measures each head's induction score (a ``layers x heads`` grid), the loss on the first
  and the second copy, and the second copy's loss with the top induction heads switched off, next to the same
  number of random heads switched off.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .. import checks
from ..analysis import analyze
from ..errors import InvalidArgumentError, UnsupportedOperationError
from ..loading.model import LoadedModel
from .common import Progress, Source, Stopwatch, check_int, report
from .sinks import _causal_lm

SOURCE = Source(
    cite="Olsson et al. 2022",
    title="In-context Learning and Induction Heads",
    where="§2 (induction heads: prefix matching and copying), fig. 1-2 (loss on repeated tokens), "
          "argument 3 (knocking the heads out)",
    model="Anthropic's own models: small attention-only ones and full Transformers up to 13 B parameters",
    url="https://arxiv.org/abs/2209.11895",
)
LENGTH = 50
SEQUENCES = 4
TOP = 4
RANDOM_CONTROLS = 4


def _vocabulary(loaded: LoadedModel) -> np.ndarray:
    """Token ids that are a whole word with a leading space and read back as themselves (so a text of them,
    tokenised again, gives exactly those ids): int64 ``(m,)``, sorted."""
    cache = loaded.__dict__.setdefault("_induction_vocab", {})
    if "ids" in cache:
        return cache["ids"]
    tok = loaded.tokenizer
    specials = set(tok.all_special_ids)
    out = []
    for i in range(min(len(tok), 60_000)):
        if i in specials:
            continue
        s = tok.decode([i])
        if len(s) < 4 or s[0] != " " or not s[1:].isascii() or not s[1:].isalpha():
            continue
        if tok(s, add_special_tokens=False)["input_ids"] == [i]:
            out.append(i)
    cache["ids"] = np.asarray(out, dtype=np.int64)
    return cache["ids"]


def _words(loaded: LoadedModel, length: int) -> np.ndarray:
    """:func:`_vocabulary`, when it has at least ``length`` tokens.

    Raises:
        UnsupportedOperationError: fewer (code ``induction_vocab``).
    """
    vocab = _vocabulary(loaded)
    if len(vocab) < length:
        raise UnsupportedOperationError(
            f"'{loaded.name}''s tokenizer has {len(vocab)} whole-word tokens; {length} are needed.",
            code="induction_vocab", model=loaded.name)
    return vocab


@checks.needs_model
def repeated_text(loaded: LoadedModel, length: int = LENGTH, seed: int = 0) -> tuple[str, list[int]]:
    """A text of ``length`` random whole-word tokens, written twice (numpy ``default_rng(seed)``; drawn without
    replacement, so no token repeats inside one copy).

    Returns:
        ``(text, ids)``: the text and the ``length`` token ids of one copy.

    Raises:
        InvalidArgumentError: ``length`` not a whole number from 1 to what fits the model twice (half its
            ``max_positions``); ``seed`` not a whole number >= 0.
        UnsupportedOperationError: fewer than ``length`` whole-word tokens (code ``induction_vocab``).
    """
    length = check_int("length", length, 1, max(1, loaded.max_positions // 2))
    seed = check_int("seed", seed, 0)
    vocab = _words(loaded, length)
    rng = np.random.default_rng(seed)
    ids = [int(i) for i in rng.choice(vocab, size=length, replace=False)]
    one = loaded.tokenizer.decode(ids)
    return one + one, ids


@dataclass
class InductionResult:
    """What the repeated random sequences show.

    Attributes:
        scores: float64 ``(layers, heads)``: the induction score of every head: the mean attention from each query
            ``i`` of the second copy to key ``i - L + 1`` (the token after the current token's first occurrence),
            averaged over queries and sequences, in [0, 1] (Olsson et al. 2022, §2: prefix matching; the queries of
            the second copy only, where the earlier occurrence exists).
        loss_first, loss_second: mean next-token loss on the first and on the second copy, nats per token (the
            first token of each copy, which no context predicts, left out).
        top: the ``(stack, layer, head)`` triples switched off: the ``TOP`` highest scores.
        loss_second_off: the second copy's loss with ``top`` switched off, nats.
        loss_second_random: float64 ``(controls,)``: the second copy's loss with as many random heads switched off
            (none of ``top``), nats; one value per random draw.
        length: tokens per copy. sequences: how many random sequences were averaged. seconds: wall time, in s.
    """

    scores: np.ndarray
    loss_first: float
    loss_second: float
    top: list[tuple[str, int, int]]
    loss_second_off: float
    loss_second_random: np.ndarray
    length: int
    sequences: int
    seconds: float


def _copy_losses(logits: np.ndarray, ids: list[int], start: int, length: int) -> tuple[float, float]:
    """Mean CE in nats over the tokens of the first and of the second copy (each copy's first token left out).

    ``logits``: float32 ``(positions, vocab)``; ``ids``: every input id; copies start at ``start`` and
    ``start + length``."""
    logp = torch.log_softmax(torch.from_numpy(np.asarray(logits, dtype=np.float32)), dim=-1)
    target = torch.tensor(ids[1:])
    ce = -logp[:-1].gather(1, target[:, None])[:, 0].double().numpy()  # ce[p - 1]: loss of predicting token p
    first = ce[start: start + length - 1].mean()  # tokens start + 1 .. start + length - 1
    second = ce[start + length: start + 2 * length - 1].mean()
    return float(first), float(second)


def induction_scores(weights: np.ndarray, start: int, length: int) -> np.ndarray:
    """Induction score of every head from one sequence's weights (Olsson et al. 2022, §2: an induction head at the
    second occurrence of a token attends the token that followed its first occurrence).

    Args:
        weights: float ``(layers, heads, n, n)`` (or ``(heads, n, n)``) attention of the text, copies starting at
            token ``start`` and ``start + length``.

    Returns:
        float64 ``weights.shape[:-2]``: ``mean_i w[i, i - length + 1]`` over the queries ``i`` of the second copy.

    Raises:
        InvalidArgumentError: weights not ``(..., n, n)``, ``start`` < 0, ``length`` < 1, or the second copy
            (``start + 2 * length`` tokens) beyond the ``n`` tokens.
    """
    w = np.asarray(weights)
    if w.ndim < 2 or w.shape[-1] != w.shape[-2]:
        raise InvalidArgumentError(f"induction_scores needs weights of shape (..., n, n), not {w.shape}.",
                                   code="induction_weights_shape", shape=str(w.shape))
    start = check_int("start", start, 0, w.shape[-1] - 2)
    length = check_int("length", length, 1, (w.shape[-1] - start) // 2)
    q = np.arange(start + length, start + 2 * length)
    return w[..., q, q - length + 1].astype(np.float64).mean(axis=-1)


@checks.needs_model
def induction_heads(loaded: LoadedModel, *, length: int = LENGTH, sequences: int = SEQUENCES, top: int = TOP,
                    controls: int = RANDOM_CONTROLS, seed: int = 0, progress: Progress = None) -> InductionResult:
    """Find the induction heads of a causal LM and knock them out (Olsson et al. 2022, §2 and argument 3).

    Each of ``sequences`` random sequences (:func:`repeated_text`, seeds ``seed ..``) is analysed once (weights of
    every layer and head; loss per copy from the logits), then the ``top`` heads with the highest mean induction
    score are switched off (their slice of the output projection's input zeroed, as :func:`models.analyze`'s
    ``heads_off``), and, as a control, ``controls`` draws of as many random other heads.

    Raises:
        UnsupportedOperationError: not a decoder-only LM (code ``needs_causal_lm``); a tokenizer with too few
            whole-word tokens (code ``induction_vocab``) or that does not read the text back as the same tokens
            (code ``induction_roundtrip``).
        InvalidArgumentError: ``length`` outside [4, 500], ``sequences`` outside [1, 64], ``top`` below 1 or above
            half the heads (all but one without controls), ``controls`` outside [0, 64], a negative ``seed``.
    """
    stack = _causal_lm(loaded, "The induction-heads experiment")
    layers, heads = loaded.stacks[stack]
    length = check_int("length", length, 4, 500)
    sequences = check_int("sequences", sequences, 1, 64)
    controls = check_int("controls", controls, 0, 64)
    seed = check_int("seed", seed, 0)
    # the random controls draw as many heads from the others: at most half the heads can be the top ones
    top = check_int("top", top, 1, (layers * heads) // 2 if controls else layers * heads - 1)
    _words(loaded, length)
    clock = Stopwatch()
    steps = sequences * (2 + controls)
    done = 0
    report(progress, 0.0)
    texts, scores, first, second = [], [], [], []
    for s in range(sequences):
        text, one = repeated_text(loaded, length, seed + s)
        a = analyze(loaded, text, max_tokens=2 * length + 8, keep=True, keep_logits=True, top_k=1)
        ids = [t.id for t in a.tokens]
        start = len(ids) - 2 * length
        if start < 0 or ids[start:] != one + one:
            raise UnsupportedOperationError(
                f"'{loaded.name}''s tokenizer does not read the random words back as the same tokens.",
                code="induction_roundtrip", model=loaded.name)
        scores.append(induction_scores(np.asarray(a.attentions[stack][:]), start, length))
        assert a.logits is not None  # keep_logits=True on a causal LM
        f, sec = _copy_losses(a.logits, ids, start, length)
        texts.append((text, ids, start))
        first.append(f)
        second.append(sec)
        done += 1
        report(progress, done / steps)
    mean_scores = np.mean(scores, axis=0)
    order = np.argsort(-mean_scores, axis=None, kind="stable")
    chosen = [(stack, int(i // heads), int(i % heads)) for i in order[:top]]
    rng = np.random.default_rng(seed)
    others = [(stack, int(i // heads), int(i % heads)) for i in order[top:]]
    draws = [[others[j] for j in rng.choice(len(others), size=top, replace=False)] for _ in range(controls)]

    def second_loss(off) -> float:
        nonlocal done
        out = []
        for text, ids, start in texts:
            a = analyze(loaded, text, max_tokens=2 * length + 8, heads_off=off, keep=False, keep_logits=True, top_k=1)
            assert a.logits is not None  # keep_logits=True on a causal LM
            out.append(_copy_losses(a.logits, ids, start, length)[1])
            done += 1
            report(progress, done / steps)
        return float(np.mean(out))

    off_loss = second_loss(chosen)
    random_losses = np.asarray([second_loss(d) for d in draws], dtype=np.float64)
    return InductionResult(mean_scores, float(np.mean(first)), float(np.mean(second)), chosen, off_loss,
                           random_losses, length, sequences, clock.seconds)
