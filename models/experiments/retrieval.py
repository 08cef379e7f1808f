"""Experiment 8: retrieval heads (Wu et al. 2024) and DuoAttention's split of the heads (Xiao et al. 2024).

Wu et al. 2024 (arXiv 2404.15574) find, with a needle-in-a-haystack test, a few heads that copy the needle to the
answer ("retrieval heads": retrieval score above 0.1, under 5 % of all heads, §3.1); masking the top-k of them makes
the model miss the needle while masking k random heads barely changes it (fig. 1, §4). DuoAttention (Xiao et al.
2024, arXiv 2410.10819) keeps the full context only for such heads and a window + sinks for every other head, and
cuts the key/value cache "up to 2.55× for MHA and 1.67× for GQA models" (abstract).

:func:`retrieval_heads` runs :func:`models.sparse.duo_compare` with defaults small enough for a page (one length
of 1,024 tokens, three depths, two random draws): the retrieval score of every head from the all-full runs, then the
needle recall and loss with (a) every head full, (b) the top-k retrieval heads full and every other head
``sink_window:64,4``, (c) k random heads full instead, for k = 5 % and 10 % of the heads, and the key/value cache each
needs. Our test is DuoAttention's form of Wu et al.'s: the *other* heads are cut to a window (the retrieval heads
are kept), where Wu et al. mask the retrieval heads themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import checks
from ..loading.model import LoadedModel
from ..sparse import DuoResult, duo_compare
from .common import Progress, Source, Stopwatch, report

SOURCES = (
    Source(cite="Wu et al. 2024", title="Retrieval Head Mechanistically Explains Long-Context Factuality",
           where="§2 eq. 1 (retrieval score), §3.1 (under 5 % of heads score above 0.1), fig. 1 and §4 (masking "
                 "the top-k retrieval heads vs k random heads on the needle test)",
           model="Llama-2-7B-80K, Yi-6B/34B-200K, Qwen1.5-14B-Chat, Mistral-7B, Mixtral-8x7B",
           url="https://arxiv.org/abs/2404.15574"),
    Source(cite="Xiao et al. 2024", title="DuoAttention: Efficient Long-Context LLM Inference with Retrieval and "
           "Streaming Heads", where="abstract, §3 (retrieval heads full, streaming heads a window + sinks)",
           model="Llama-2-7B-32K (MHA), Llama-3-8B-1048K (GQA), Mistral-7B", url="https://arxiv.org/abs/2410.10819"),
)
LENGTHS = (1024,)
DEPTHS = (0.1, 0.5, 0.9)
FRACTIONS = (0.05, 0.10)
DRAWS = 2
WINDOW, SINKS = 64, 4
THRESHOLD = 0.1  # Wu et al. 2024 §3.1: a head scoring above 0.1 is a retrieval head
# What the papers report.
PUBLISHED = {
    "retrieval_share": 0.05,  # "less than 5 %" of the heads are retrieval heads (Wu et al. abstract, §3.1)
    "kv_mha": 2.55,           # DuoAttention's key/value memory cut, multi-head attention (Xiao et al. abstract)
    "kv_gqa": 1.67,           # ... grouped-query attention
}


@dataclass
class RetrievalHeads:
    """Retrieval heads and the DuoAttention split on one causal LM.

    Attributes:
        duo: :class:`models.sparse.DuoResult` (``scores`` float32 ``(layers, heads)``; ``rows`` in the order all
            full, then per k: top-k retrieval full, random k full; then window everywhere).
        threshold: the retrieval score above which a head counts as a retrieval head (0.1).
        draws: random draws per k. seconds: wall time, in seconds.
    """

    duo: DuoResult
    threshold: float
    draws: int
    seconds: float

    @property
    def retrieval_share(self) -> float:
        """Share of all heads whose retrieval score is above :attr:`threshold`, in [0, 1]."""
        scores = np.asarray(self.duo.scores)
        return float((scores > self.threshold).mean()) if scores.size else 0.0

    @property
    def heads(self) -> int:
        """Query heads of the decoder (layers × heads)."""
        return int(np.asarray(self.duo.scores).size)

    def row(self, name: str):
        """The :class:`models.sparse.DuoRow` named ``name`` (``all full``, ``top-14 retrieval full`` ...), or None."""
        return next((r for r in self.duo.rows if r.name == name), None)

    def pairs(self) -> list[tuple]:
        """``(top-k row, random-k row)`` for each k, smallest k first."""
        tops = [r for r in self.duo.rows if r.name.startswith("top-")]
        rnd = {r.k: r for r in self.duo.rows if r.name.startswith("random ")}
        return [(top, rnd.get(top.k)) for top in sorted(tops, key=lambda r: r.k)]

    def kv_ratio(self, row) -> float:
        """The all-full row's key/value bytes ÷ ``row``'s, at the longest length tested (1 when unknown)."""
        full = self.row("all full")
        if full is None or not row.kv or not full.kv:
            return 1.0
        n = max(row.kv)
        return float(full.kv[n]) / float(row.kv[n]) if row.kv[n] else 1.0


@checks.needs_model
def retrieval_heads(loaded: LoadedModel, *, lengths=LENGTHS, depths=DEPTHS, fractions=FRACTIONS, draws: int = DRAWS,
                    window: int = WINDOW, sinks: int = SINKS, seed: int = 0,
                    progress: Progress = None) -> RetrievalHeads:
    """Wu et al. 2024's retrieval heads in DuoAttention's form (:func:`models.sparse.duo_compare`).

    Args:
        loaded: a causal LM on the AttentionInterface (smollm2-135m, gemma3-270m). lengths, depths: the needles
            (tokens per text, at most the model's limit; shares of the haystack before the needle). fractions: shares
            of all heads kept full. draws: random draws per k. window, sinks: every other head's window + sinks.
        progress: called with the fraction done, in [0, 1].

    Returns:
        :class:`RetrievalHeads`.

    Raises:
        UnsupportedOperationError: not a causal LM, or off the AttentionInterface. InvalidArgumentError: bad
            arguments (as :func:`models.sparse.duo_compare`). ModelOutOfMemoryError: a needle does not fit.
    """
    clock = Stopwatch()
    report(progress, 0.0)
    lengths = tuple(min(int(n), int(loaded.max_positions or n)) for n in checks.sequence("lengths", lengths))
    duo = duo_compare(loaded, lengths=lengths, depths=depths, fractions=fractions, draws=draws, window=window,
                      sinks=sinks, seed=seed, progress=lambda f: report(progress, f))
    report(progress, 1.0)
    return RetrievalHeads(duo, THRESHOLD, int(draws), clock.seconds)


def needle_passes(loaded: LoadedModel, lengths=LENGTHS, depths=DEPTHS, fractions=FRACTIONS,
                  draws: int = DRAWS) -> list[tuple[float, int]]:
    """The forward passes :func:`retrieval_heads` makes, as ``(passes, tokens)``: per needle, the all-full run and
    the window everywhere, and per k the top-k and ``draws`` random draws. A needle pass runs fused except the answer
    rows' weights and logits (about 0.55 of a plain pass, which :func:`models.experiments.forward_seconds` times with
    every row's logits: on smollm2-135m at 1,024 tokens 1.90 s against 3.59 s; with 1.3 the page said 201 s for an
    85 s run)."""
    needles = len(depths)
    per = 2 + len(fractions) * (1 + draws)
    return [(0.55 * needles * per, min(int(n), int(loaded.max_positions or n))) for n in lengths]
