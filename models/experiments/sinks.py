"""Experiment 1: attention sinks (Xiao et al. 2023, "Efficient Streaming Language Models with Attention Sinks").

Two measurements on a causal LM and a long shipped text (``assets/texts/long_en.txt``, 507 tokens on smollm2):

* :func:`first_token_share`: the attention every layer gives the first token (fig. 2: the bottom two layers spread
  their attention locally, every layer above puts most of it on the initial token, whatever that token is);
* :func:`streaming_losses`: StreamingLLM as mask swaps (§3.2, fig. 3, table 1): the next-token loss of the text
  under full attention, under a sliding window of ``w`` keys alone, and under the window plus the first ``k``
  tokens ("sinks"). A window alone loses the sinks and its loss jumps; the window plus 4 sinks stays close to
  full attention.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Sequence

import numpy as np

from .. import checks
from ..analysis import analyze
from ..errors import InvalidArgumentError, UnsupportedOperationError
from ..loading.model import LoadedModel
from .common import Progress, Source, Stopwatch, check_int, long_text, report

SOURCE = Source(
    cite="Xiao et al. 2023",
    title="Efficient Streaming Language Models with Attention Sinks",
    where="fig. 2 (attention per layer), fig. 3 and table 1 (window vs window + 4 initial tokens)",
    model="Llama-2-7B/13B, Falcon, Pythia, MPT",
    url="https://arxiv.org/abs/2309.17453",
)
MAX_TOKENS = 512
WINDOWS = (16, 32, 64)
SINKS = 4


def _causal_lm(loaded: LoadedModel, what: str) -> str:
    """The self-attention stack of a decoder-only LM, or UnsupportedOperationError (code ``needs_causal_lm``)."""
    if loaded.family != "decoder" or loaded.head != "lm" or "decoder" not in loaded.stacks:
        raise UnsupportedOperationError(
            f"{what} needs a decoder-only language model (a causal LM such as smollm2-135m); "
            f"'{loaded.name}' is a{'n' if loaded.family[0] in 'ae' else ''} {loaded.family}.",
            code="needs_causal_lm", model=loaded.name)
    return "decoder"


@dataclass
class FirstTokenShare:
    """The attention each layer gives the first token.

    Attributes:
        per_head: float64 ``(layers, heads)``: the mean over all queries of the weight on key 0
            (``Analysis.statistics[stack]["first"]``, the measure of Clark et al. 2019 §3.2 and fig. 2; query 0 has
            only key 0, 1/n of the mean).
        per_layer: float64 ``(layers,)``: mean over heads of ``per_head``, in [0, 1].
        tokens: tokens of the text read. first_token: the first token's text (shown as the model reads it).
        loss: the text's next-token loss under the model's own mask, nats per token (:attr:`models.Analysis.loss`;
            :func:`streaming_losses` takes it as its full-attention loss instead of reading the text again).
        seconds: wall time, in seconds.
    """

    per_head: np.ndarray
    per_layer: np.ndarray
    tokens: int
    first_token: str
    loss: float
    seconds: float

    def bottom_top(self, bottom: int = 2) -> tuple[float, float]:
        """(mean share of the first ``bottom`` layers, mean share of the layers above): the contrast of fig. 2.
        A model of ``bottom`` layers or fewer compares its first layer with the others (one layer: NaN above)."""
        bottom = max(1, min(bottom, len(self.per_layer) - 1))
        above = self.per_layer[bottom:]
        return float(self.per_layer[:bottom].mean()), float(above.mean()) if above.size else float("nan")


@checks.needs_model
def first_token_share(loaded: LoadedModel, text: str | None = None, *, max_tokens: int = MAX_TOKENS,
                      progress: Progress = None) -> FirstTokenShare:
    """Measure each layer's attention on the first token (Xiao et al. 2023, fig. 2; "attention sink").

    One analysis of ``text`` (default :func:`long_text`); the per-head means are the engine's block-by-block
    statistics (:class:`models.analysis.statistics.HeadStatistics`, ``first``), so a long text never holds its
    ``layers x heads x n²`` weights.

    Raises:
        UnsupportedOperationError: not a decoder-only LM (code ``needs_causal_lm``).
        EmptyTextError, InvalidArgumentError (``max_tokens``), ModelOutOfMemoryError: as :func:`models.analyze`.
    """
    stack = _causal_lm(loaded, "The attention-sink experiment")
    clock = Stopwatch()
    report(progress, 0.0)
    a = analyze(loaded, long_text() if text is None else text, max_tokens=max_tokens, keep=False)
    report(progress, 0.5)
    per_head = np.asarray(a.statistics[stack]["first"], dtype=np.float64)
    report(progress, 1.0)
    return FirstTokenShare(per_head, per_head.mean(axis=1), len(a.tokens), a.tokens[0].piece,
                           float("nan") if a.loss is None else float(a.loss), clock.seconds)


@dataclass
class StreamingLosses:
    """Next-token loss of one text under full attention, a sliding window, and the window plus sinks.

    Attributes:
        windows: the window sizes ``w`` (keys ``q - w + 1 .. q``), int ``(k,)``.
        sinks: how many first tokens every query also sees (StreamingLLM's "4 initial tokens").
        full: loss under the model's own (full causal) mask, in nats per token.
        window: float64 ``(k,)`` loss under ``sliding_window:w``, nats.
        with_sinks: float64 ``(k,)`` loss under ``sink_window:w,sinks``, nats.
        tokens: tokens of the text read. seconds: wall time, in seconds.
    """

    windows: np.ndarray
    sinks: int
    full: float
    window: np.ndarray
    with_sinks: np.ndarray
    tokens: int
    seconds: float

    @property
    def window_gap(self) -> np.ndarray:
        """float64 ``(k,)``: window loss − full loss, nats."""
        return self.window - self.full

    @property
    def sinks_gap(self) -> np.ndarray:
        """float64 ``(k,)``: window + sinks loss − full loss, nats."""
        return self.with_sinks - self.full


@checks.needs_model
def streaming_losses(loaded: LoadedModel, text: str | None = None, *, windows: Sequence[int] = WINDOWS,
                     sinks: int = SINKS, max_tokens: int = MAX_TOKENS, full: FirstTokenShare | None = None,
                     progress: Progress = None) -> StreamingLosses:
    """StreamingLLM's experiment as mask swaps (Xiao et al. 2023, §3.2, fig. 3, table 1).

    The text is read three ways per window size: the model's own causal mask (once), ``sliding_window:w`` (each
    query sees its last ``w`` tokens) and ``sink_window:w,sinks`` (those plus the first ``sinks`` tokens), see
    :mod:`models.analysis.masks`. The loss is :attr:`models.Analysis.loss`, ``CE(logits[:-1], ids[1:])`` in nats.
    Unlike the paper, the positions stay the text's own (a mask, not an evicting cache with re-numbered positions),
    so this isolates what the first tokens' keys add, not the position shift.

    ``full``: the :func:`first_token_share` of the same text and ``max_tokens``, whose loss is the full-attention
    loss (one pass fewer).

    Raises:
        UnsupportedOperationError: not a decoder-only LM (code ``needs_causal_lm``).
        InvalidArgumentError: ``windows`` not a non-empty list, a window below 1, ``sinks`` below 0, or a text of
            one token (no next-token loss).
        EmptyTextError, ModelOutOfMemoryError: as :func:`models.analyze`.
    """
    _causal_lm(loaded, "The StreamingLLM experiment")
    if (isinstance(windows, (str, bytes)) or not isinstance(windows, (list, tuple, range, np.ndarray))
            or not len(windows)):
        raise InvalidArgumentError(f"windows must be a non-empty list of window sizes, got {windows!r}.",
                                   code="arg_sequence", name="windows", least=1, value=checks.shown(windows))
    windows = [check_int("window", w, 1) for w in windows]
    sinks = check_int("sinks", sinks, 0)
    text = long_text() if text is None else text
    clock = Stopwatch()
    steps = 1 + 2 * len(windows)

    def loss(mask: str, step: int) -> tuple[float, int]:
        a = analyze(loaded, text, max_tokens=max_tokens, mask=mask, keep=False, top_k=1)
        if a.loss is None:
            raise InvalidArgumentError(f"The text is {len(a.tokens)} token long: a next-token loss needs at least 2.",
                                       code="loss_needs_two_tokens", tokens=len(a.tokens))
        report(progress, (step + 1) / steps)
        return float(a.loss), len(a.tokens)

    report(progress, 0.0)
    if full is not None and not np.isnan(full.loss):
        full_loss, n = full.loss, full.tokens
        report(progress, 1 / steps)
    else:
        full_loss, n = loss("native", 0)
    window, with_sinks = [], []
    for i, w in enumerate(windows):
        window.append(loss(f"sliding_window:{w}", 1 + 2 * i)[0])
        with_sinks.append(loss(f"sink_window:{w},{sinks}", 2 + 2 * i)[0])
    return StreamingLosses(np.asarray(windows), sinks, full_loss, np.asarray(window), np.asarray(with_sinks), n,
                           clock.seconds)
