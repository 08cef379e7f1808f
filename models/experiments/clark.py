"""Experiment 3: what BERT's heads look at (Clark et al. 2019; Kovaleva et al. 2019).

Two measurements on an encoder (BERT-style) and the shipped example sentences (``assets/sentences.json``):

* :func:`bert_attention_targets`: the attention every head gives, on average, to the first special token
  ([CLS] / ``<s>``), to the other special tokens ([SEP] / ``</s>``), to punctuation, to the previous, the next and
  the current token (Clark et al. 2019, §3.1-3.2, fig. 2). On BERT-base, early heads attend to [CLS], the middle
  layers put over half of their attention on [SEP], deep heads attend to periods and commas, and a few heads put
  most of their weight on the previous or the next token.
* :func:`.patterns.pattern_counts`: every map (head x sentence) sorted into Kovaleva et al.'s five types
  (vertical, diagonal, vertical+diagonal, block, heterogeneous; §4.1, fig. 1-2), in :mod:`.patterns`.

:func:`.bert_heads.what_heads_look_at` does both from one analysis of each input (what the page runs).

Layers and heads are numbered from 0 here; both papers number layers from 1 (Clark's "layers 6-10" are our 5-9).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from collections.abc import Sequence

import numpy as np

from .. import checks
from ..analysis import analyze
from ..errors import InvalidArgumentError, UnsupportedOperationError
from ..loading.model import LoadedModel
from ..analysis.statistics import is_punctuation
from ..analysis.tokens import Token

from .common import Progress, Source, Stopwatch, long_text, probe_estimate, report, sentence_set

SOURCES = (
    Source(
        cite="Clark et al. 2019",
        title="What Does BERT Look At? An Analysis of BERT's Attention",
        where="§3.1 (relative position), §3.2 and fig. 2 (attention to [CLS], [SEP], periods/commas per head)",
        model="BERT-base (uncased), 1000 Wikipedia segments of up to 128 tokens, [CLS] A [SEP] B [SEP]",
        url="https://arxiv.org/abs/1906.04341",
    ),
    Source(
        cite="Kovaleva et al. 2019",
        title="Revealing the Dark Secrets of BERT",
        where="§4.1, fig. 1 (five self-attention map types) and fig. 2 (their share per GLUE task)",
        model="BERT-base (uncased) fine-tuned on 7 GLUE tasks; a CNN trained on ~400 hand-labelled maps",
        url="https://arxiv.org/abs/1908.08593",
    ),
)
SOURCE = SOURCES[0]

# What the papers report, to show beside our figures; layers numbered from 1, as in the papers. Only what their text
# states (Clark §3.1-3.2, p. 3-4; Kovaleva §4.1, p. 3-4): the per-layer curves of Clark's fig. 2 and the bars of
# Kovaleva's fig. 2 exist only as plots, so they are described, marked qualitative, never turned into numbers.
# Kovaleva's shares are of BERT fine-tuned on GLUE tasks (sentence pairs for most), not of a pre-trained model.
PUBLISHED = {
    "clark": {
        "sep_layers": "Over half of BERT's attention in layers 6-10 focuses on [SEP] (§3.2).",
        "sep_to_sep": "Heads processing [SEP] put more than 90% of their attention on themselves and the other "
                      "[SEP] (§3.2, fig. 2 bottom).",
        "by_depth": "Early heads attend to [CLS], middle heads to [SEP], deep heads to periods and commas "
                    "(fig. 2; qualitative, read from the plot).",
        "previous": "Four heads (in layers 2, 4, 7 and 8) put more than 50% of their attention on the previous "
                    "token on average (§3.1).",
        "next": "Five heads (in layers 1, 2, 2, 3 and 6) put more than 50% of their attention on the next token "
                "(§3.1).",
        "current": "Most heads put little attention on the current token (§3.1; qualitative).",
        "previous_heads": 4,
        "next_heads": 5,
        "sep_layers_1based": (6, 10),
        "sep_share_min": 0.5,
    },
    "kovaleva": {
        "types": "Five recurring map types: vertical (attention to [CLS]/[SEP]), diagonal (previous/following "
                 "token), vertical+diagonal, block (within each sentence of a pair), heterogeneous (§4.1, fig. 1).",
        "labelled": "About 400 maps were labelled by hand; 'vertical' was 30% of them (§4.1).",
        "heterogeneous": "Heterogeneous maps, the upper bound on heads that could carry linguistic structure, "
                         "range from 32% (MRPC) to 61% (QQP) of all heads, depending on the task (§4.1, fig. 2).",
        "repeated": "The same few types repeat across heads and tasks; most of the attention is on special tokens, "
                    "the previous/next token or both (§4.1; qualitative).",
        "labelled_vertical_share": 0.30,
        "heterogeneous_share_range": (0.32, 0.61),
    },
}

STACK = "encoder"
# Targets of bert_attention_targets, in display order.
TARGETS = ("first", "separator", "punctuation", "previous", "next", "current")
TARGET_LABELS = {
    "first": "first special token ([CLS] / <s>)",
    "separator": "other special tokens ([SEP] / </s>)",
    "punctuation": "punctuation (periods, commas ...)",
    "previous": "previous token (key = query - 1)",
    "next": "next token (key = query + 1)",
    "current": "the token itself (key = query)",
}

def _needs_encoder(loaded: LoadedModel, what: str) -> None:
    """UnsupportedOperationError (code ``needs_encoder``) unless ``loaded`` is an encoder (BERT-style) model."""
    if loaded.family != "encoder" or STACK not in loaded.stacks:
        raise UnsupportedOperationError(
            f"{what} needs an encoder (a BERT-style model such as minilm-l6 or multilingual-e5-small); "
            f"'{loaded.name}' is a{'n' if loaded.family[:1] in 'ae' else ''} {loaded.family}.",
            code="needs_encoder", model=loaded.name, family=loaded.family)


def middle_layers(layers: int) -> tuple[int, int]:
    """``(lo, hi)``: the layers ``lo .. hi - 1`` (from 0) that are BERT-base's layers 6-10 of 12 (from 1), where
    Clark et al. (§3.2) found over half of the attention on [SEP], scaled to a model of ``layers`` layers
    (``round(layers * 5 / 12)`` to ``round(layers * 10 / 12)``; 12 layers: 5 .. 9; 6 layers: 2 .. 4)."""
    return int(round(layers * 5 / 12)), max(int(round(layers * 10 / 12)), int(round(layers * 5 / 12)) + 1)


def default_sentences() -> list[str]:
    """Every text of ``assets/sentences.json`` (12 short sentences, Turkish and English), in file order."""
    return sentence_set()


def default_pairs() -> list[tuple[str, str]]:
    """Consecutive sentences of the shipped long English text (:func:`.common.long_text`, 22 sentences of one story)
    two by two, ``(1st, 2nd), (3rd, 4th) ...`` (11 pairs), read as ``[CLS] A [SEP] B [SEP]`` (``<s> A </s></s> B
    </s>``): Clark et al.'s input (two consecutive segments of one text, §2), and the only inputs on which
    Kovaleva's "block" type can appear."""
    sentences = re.split(r"(?<=[.!?])\s+", long_text().strip())
    return [(sentences[i], sentences[i + 1]) for i in range(0, len(sentences) - 1, 2)]


def _inputs(sentences) -> list[str | tuple[str, str]]:
    """The sentences to read: the default list, or the caller's (each a text or a ``(text, text_pair)`` pair),
    each checked (:func:`models.checks.text`).

    Raises:
        InvalidArgumentError: not a list of such, or empty. EmptyTextError: a blank text.
    """
    if sentences is None:
        return list(default_sentences())
    items = list(checks.sequence("sentences", [sentences] if isinstance(sentences, str) else sentences))
    for i, s in enumerate(items):
        if isinstance(s, tuple) and len(s) == 2:
            items[i] = (checks.text(s[0], "text"), checks.text(s[1], "text pair"))
        elif not isinstance(s, tuple):
            items[i] = checks.text(s, "text")
        else:
            raise InvalidArgumentError(f"Each sentence must be a string or a (text, text_pair) pair of strings, "
                                       f"got {checks.shown(s)}.", code="arg_text", name="sentence",
                                       value=type(s).__name__)
    return items


def _analyze(loaded: LoadedModel, item):
    text, pair = (item, None) if isinstance(item, str) else item
    return analyze(loaded, text, text_pair=pair, top_k=1)


def key_groups(tokens: list[Token]) -> dict[str, np.ndarray]:
    """The key columns of each column target, as bool ``(n,)`` masks over ``tokens``.

    ``first``: token 0 when it is a special token ([CLS], ``<s>``), else none. ``separator``: every other special
    token ([SEP], ``</s>``, also a typed one). ``punctuation``: non-special tokens whose text is punctuation or
    symbols only (:func:`models.analysis.statistics.is_punctuation`, the engine's flag). ``delimiter``: the union of the
    three (the columns of a Kovaleva "vertical" map).
    """
    special = np.array([t.special for t in tokens], dtype=bool)
    first = np.zeros(len(tokens), dtype=bool)
    if len(tokens) and special[0]:
        first[0] = True
    punct = np.array([is_punctuation(t.text) and not t.special for t in tokens], dtype=bool)
    return {"first": first, "separator": special & ~first, "punctuation": punct, "delimiter": special | punct}


def target_sums(weights: np.ndarray, tokens: list[Token]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Per head, the summed share of each target over the queries that count, and how many queries count.

    Args:
        weights: float ``(layers, heads, n, n)`` self-attention of one input (rows: queries, columns: keys).
        tokens: the ``n`` tokens of that input.

    Returns:
        ``(sums, counts)``: ``sums[target]`` float64 ``(layers, heads)`` = ``Σ_q v_q`` and ``counts[target]`` int
        ``(layers, heads)`` the number of queries ``q`` summed, with ``v_q`` (Clark et al. 2019, §3.1-3.2):

        - ``first`` / ``separator`` / ``punctuation``: ``Σ_{k in group} w_qk`` (groups: :func:`key_groups`),
          over every query whose row has weight (special tokens' own rows included, as in Clark's fig. 2 top);
        - ``previous``: ``w_{q,q-1}`` over queries ``q >= 1``; ``next``: ``w_{q,q+1}`` over ``q <= n - 2``;
          ``current``: ``w_{q,q}`` over every query.

        A row with no weight (possible only under a replaced mask) counts for no target.
    """
    w = np.asarray(weights, dtype=np.float64)
    n = w.shape[-1]
    live = w.sum(-1) > 0  # (layers, heads, n)
    groups = key_groups(tokens)
    sums: dict[str, np.ndarray] = {}
    counts: dict[str, np.ndarray] = {}
    for name in ("first", "separator", "punctuation"):
        cols = groups[name]
        sums[name] = (w[..., cols].sum(-1) * live).sum(-1)
        counts[name] = live.sum(-1)
    for name, offset in (("previous", -1), ("next", 1), ("current", 0)):
        diag = np.diagonal(w, offset=offset, axis1=2, axis2=3)  # (layers, heads, n - |offset|)
        rows = live[..., max(0, -offset):n - max(0, offset)]
        sums[name] = (diag * rows).sum(-1)
        counts[name] = rows.sum(-1)
    return sums, counts


@dataclass
class TargetsResult:
    """Where each head's attention goes, averaged over the queries of the sentences read.

    Attributes:
        model: the model's name. sentences: the inputs read (texts, or ``(text, text_pair)`` pairs).
        tokens: the number of tokens of each input (special tokens included).
        per_head: ``target -> float64 (layers, heads)``: the mean share of attention weight, in [0, 1], that
            each head gives the target (:data:`TARGETS`), every counted query of every sentence weighing the same
            (``Σ_sentences Σ_q v_q / Σ_sentences #q``, see :func:`target_sums`).
        per_layer: ``target -> float64 (layers,)``: the mean of ``per_head`` over the layer's heads (Clark et al.'s
            per-layer view of fig. 2).
        queries: ``target -> int``: the number of (sentence, query) pairs averaged.
        first_token, separator_tokens: the labels of the special tokens met (``[CLS]``, ``[SEP]`` / ``<s>``, ``</s>``).
        seconds: wall time, in seconds.
    """

    model: str
    sentences: list
    tokens: list[int]
    per_head: dict[str, np.ndarray]
    per_layer: dict[str, np.ndarray]
    queries: dict[str, int]
    first_token: str | None
    separator_tokens: list[str]
    seconds: float

    @property
    def special_per_layer(self) -> np.ndarray:
        """float64 ``(layers,)``: the share on every special token (``first`` + ``separator``) per layer."""
        return self.per_layer["first"] + self.per_layer["separator"]

    def heads_above(self, target: str, share: float = 0.5) -> list[tuple[int, int]]:
        """``(layer, head)`` of the heads whose mean share on ``target`` is above ``share`` (Clark §3.1 counts the
        heads above 0.5 for ``previous`` and ``next``), sorted."""
        return [(int(layer), int(head)) for layer, head in np.argwhere(self.per_head[target] > share)]


@checks.needs_model
def bert_attention_targets(loaded: LoadedModel, sentences: Sequence | None = None, *,
                           progress: Progress = None) -> TargetsResult:
    """Measure where every head of an encoder looks (Clark et al. 2019, §3.1-3.2, fig. 2).

    Each sentence is read by :func:`models.analyze` (a short input keeps its weights) and every layer's
    ``(heads, n, n)`` weights are reduced by :func:`target_sums`; the sums and counts are added over sentences
    and divided once, so each counted query of each sentence weighs the same.

    Args:
        loaded: an encoder from :func:`models.load`. sentences: texts or ``(text, text_pair)`` pairs; None for
            :func:`default_sentences`. progress: called with the fraction done, in [0, 1].

    Returns:
        :class:`TargetsResult` (float64 shares in [0, 1]).

    Raises:
        UnsupportedOperationError: not an encoder (code ``needs_encoder``).
        InvalidArgumentError: an empty list, or an item that is neither a string nor a pair of strings.
        EmptyTextError, ModelOutOfMemoryError: as :func:`models.analyze`.
    """
    _needs_encoder(loaded, "The 'what BERT's heads look at' experiment")
    items = _inputs(sentences)
    return _targets(loaded, items, _each(loaded, items, progress), Stopwatch())


def _each(loaded: LoadedModel, items: list, progress: Progress):
    """Each input's analysis in turn, reporting the fraction done after each."""
    report(progress, 0.0)
    for i, item in enumerate(items):
        yield _analyze(loaded, item)
        report(progress, (i + 1) / len(items))


def _targets(loaded: LoadedModel, items: list, analyses, clock: Stopwatch) -> TargetsResult:
    """:class:`TargetsResult` of the ``analyses`` of ``items`` (one per item, in order)."""
    layers, heads = loaded.stacks[STACK]
    sums = {t: np.zeros((layers, heads)) for t in TARGETS}
    counts = {t: np.zeros((layers, heads), dtype=np.int64) for t in TARGETS}
    lengths, first, seps = [], None, []
    for a in analyses:
        s, c, tokens = _measure(a)
        for t in TARGETS:
            sums[t] += s[t]
            counts[t] += c[t]
        lengths.append(len(tokens))
        groups = key_groups(tokens)
        if first is None and groups["first"].any():
            first = tokens[0].label
        for k in np.nonzero(groups["separator"])[0]:
            if tokens[k].label not in seps:
                seps.append(tokens[k].label)
    per_head = {t: np.divide(sums[t], counts[t], out=np.full((layers, heads), np.nan), where=counts[t] > 0)
                for t in TARGETS}
    per_layer = {t: v.mean(axis=1) for t, v in per_head.items()}
    queries = {t: int(counts[t].max()) for t in TARGETS}
    return TargetsResult(loaded.name, items, lengths, per_head, per_layer, queries, first, seps, clock.seconds)


def _measure(a) -> tuple[dict, dict, list[Token]]:
    """One analysis' :func:`target_sums` (read layer by layer, so an analysis whose weights are computed on demand
    never holds every layer at once) and its tokens."""
    stack = a.attentions[STACK]
    parts = [target_sums(np.asarray(stack[layer])[None], a.tokens) for layer in range(stack.shape[0])]
    sums = {t: np.concatenate([p[0][t] for p in parts]) for t in TARGETS}
    counts = {t: np.concatenate([p[1][t] for p in parts]) for t in TARGETS}
    return sums, counts, a.tokens


@checks.needs_model
def estimate_targets_seconds(loaded: LoadedModel, sentences: Sequence | None = None) -> float:
    """Estimated wall time of :func:`bert_attention_targets`, in seconds: the first sentence is measured
    (:func:`models.experiments.common.probe_estimate`) and multiplied by the number of sentences.

    Raises:
        as :func:`bert_attention_targets`.
    """
    _needs_encoder(loaded, "The 'what BERT's heads look at' experiment")
    items = _inputs(sentences)
    return probe_estimate(lambda: _measure(_analyze(loaded, items[0])), len(items))[1]
