"""Experiment 7: the inner language (Wendler et al. 2024, "Do Llamas Work in English? On the Latent Language of
Multilingual Transformers").

Wendler et al. prompt Llama-2 to translate a word between two non-English languages (``Français: "fleur" - 中文:
"``) and read every layer's residual stream at the last position through the model's own final norm and
unembedding (the logit lens, nostalgebraist 2020). The probability of the answer's first token stays near zero
through the first half of the layers; in the middle layers the **English** word's first token rises (English is
nowhere in the prompt), and only in the last layers does the target language take over (fig. 2; Llama-2 7B, 13B,
70B).

Here the target is Turkish: each prompt is a few-shot translation into Turkish (``assets/turkish/
translation_pairs.json``, :func:`load_pairs`), ``SHOTS`` demonstrations then the query::

    Français: "livre" - Türkçe: "kitap"
    ...
    Français: "fleur" - Türkçe: "            -> çiçek; English latent: flower

in two forms: from French (``fr``: Wendler's design, English absent from the prompt) and from English (``en``: the
English word is in the prompt, so its probability also measures copying). Per layer, the probability of the
Turkish answer's first token and of the English translation's first token (each as the tokenizer reads it right
after the prompt), from :func:`models.information_flow`'s logit lens (the last lens equals the model's logits,
checked on each run). Pairs whose two first tokens are the same token are left out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from .. import checks
from ..analysis import analyze
from ..errors import InvalidArgumentError
from ..loading.model import LoadedModel
from .common import ASSETS, Progress, Source, Stopwatch, check_int, report

SOURCE = Source(
    cite="Wendler et al. 2024",
    title="Do Llamas Work in English? On the Latent Language of Multilingual Transformers",
    where="§3-4, fig. 2 (logit lens per layer on translation, repetition and cloze tasks: English rises in the "
          "middle layers before the target language takes over)",
    model="Llama-2 7B, 13B, 70B (32-80 layers)",
    url="https://arxiv.org/abs/2402.10588",
)
PAIRS_FILE = ASSETS / "turkish" / "translation_pairs.json"
LANGUAGE_NAMES = {"fr": "Français", "en": "English", "tr": "Türkçe"}
TASKS = ("fr", "en")
SHOTS = 4


@lru_cache(maxsize=1)
def load_pairs() -> list[dict]:
    """The translation pairs of ``assets/turkish/translation_pairs.json``: ``{"en", "fr", "tr"}`` per word."""
    return json.loads(PAIRS_FILE.read_text(encoding="utf-8"))["pairs"]


def prompt(pairs: list[dict], index: int, source: str = "fr", shots: int = SHOTS) -> str:
    """The few-shot translation prompt of pair ``index``: ``shots`` demonstrations (the pairs after it, wrapping
    round), then ``<Source>: "<word>" - Türkçe: "``.

    Raises:
        InvalidArgumentError: an unknown ``source`` (``fr``, ``en``), ``index`` out of range, or ``shots`` outside
            [0, len(pairs) - 1].
    """
    source = checks.choice("source", source, TASKS)
    index = checks.whole("index", index, 0, len(pairs) - 1)
    shots = checks.whole("shots", shots, 0, max(0, len(pairs) - 1))
    name = LANGUAGE_NAMES[source]
    demos = [pairs[(index + 1 + k) % len(pairs)] for k in range(shots)]
    lines = [f'{name}: "{d[source]}" - Türkçe: "{d["tr"]}"\n' for d in demos]
    return "".join(lines) + f'{name}: "{pairs[index][source]}" - Türkçe: "'


def first_token(tokenizer, text: str, word: str) -> int:
    """The id of the first token of ``word`` as the tokenizer reads it right after ``text`` (``text + word``
    tokenized, the tokens of ``text`` taken off); the first token of ``word`` alone where the two readings do not
    share ``text``'s tokens."""
    before = tokenizer(text, add_special_tokens=False)["input_ids"]
    both = tokenizer(text + word, add_special_tokens=False)["input_ids"]
    if len(both) > len(before) and both[:len(before)] == before:
        return int(both[len(before)])
    return int(tokenizer(word, add_special_tokens=False)["input_ids"][0])


def lens_probabilities(flow, ids: list[int], position: int = -1) -> np.ndarray:
    """float64 ``(layers + 1, len(ids))``: the softmax probability of each token id at ``position`` in every residual
    stream of ``flow`` (row 0: the embeddings; row ``l + 1``: layer ``l``'s output; the last row is the model's own
    prediction), through the model's final norm and unembedding as :meth:`models.flow.Flow.logit_lens`.

    Raises:
        UnsupportedOperationError: a flow without a token head. InvalidArgumentError: a bad position, or ``ids`` not a
            non-empty list of ids in the vocabulary.
    """
    from ..flow import check_position

    head = flow._need_head()
    p = check_position(position, flow.x_in.shape[0])
    if isinstance(ids, (str, bytes)) or not isinstance(ids, (list, tuple, np.ndarray)) or not len(ids):
        raise InvalidArgumentError(f"ids must be a non-empty list of token ids, got {checks.shown(ids)}.",
                                   code="arg_sequence", name="ids", least=1, value=checks.shown(ids))
    vocab = int(head(torch.from_numpy(flow.x_in[p:p + 1])).shape[-1])
    ids = [checks.whole("id", i, 0, vocab - 1) for i in ids]
    streams = np.stack([flow.x_in[p]] + [lf.x_out[p] for lf in flow.layers])
    with torch.no_grad():
        probs = torch.softmax(head(torch.from_numpy(streams)).double(), dim=-1)
    return probs[:, list(ids)].numpy()


@dataclass
class InnerLanguage:
    """Per-layer probabilities of the Turkish answer and of its English translation.

    Attributes:
        tasks: the source language of each task (``fr``, ``en``). words: the pairs read (``{"en", "fr", "tr"}``),
            those whose two first tokens differ. dropped: pairs left out (same first token).
        turkish, english: float64 ``(tasks, prompts, layers + 1)``: the probability of the Turkish word's / the
            English word's first token at the last position of each prompt, per stream (0: embeddings, ``l + 1``:
            layer ``l``'s output; the last is the model's own prediction).
        correct: float64 ``(tasks,)``: the share of prompts whose model prediction (last stream's top token) is the
            Turkish word's first token.
        layers: the model's layers. seconds: wall time, in seconds.
    """

    tasks: tuple[str, ...]
    words: list[dict]
    dropped: int
    turkish: np.ndarray
    english: np.ndarray
    correct: np.ndarray
    layers: int
    seconds: float

    def mean(self, task: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """``(turkish, english)``: float64 ``(layers + 1,)`` the mean over prompts of task ``task``."""
        return self.turkish[task].mean(axis=0), self.english[task].mean(axis=0)

    def spread(self, task: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(turkish_low, turkish_high, english_low, english_high)``: float64 ``(layers + 1,)``, the 10th and 90th
        percentiles over the prompts of task ``task`` (the range drawn around the mean)."""
        t, e = self.turkish[task], self.english[task]
        return (np.percentile(t, 10, axis=0), np.percentile(t, 90, axis=0), np.percentile(e, 10, axis=0),
                np.percentile(e, 90, axis=0))

    def english_peak(self, task: int = 0) -> tuple[int, float]:
        """``(stream, probability)``: where the mean English probability is highest before the last stream."""
        e = self.english[task].mean(axis=0)[:-1]
        i = int(np.argmax(e))
        return i, float(e[i])


@checks.needs_model
def inner_language(loaded: LoadedModel, *, tasks=TASKS, limit: int | None = None, shots: int = SHOTS,
                   progress: Progress = None) -> InnerLanguage:
    """Wendler et al.'s logit-lens reading of translation into Turkish (see the module docstring).

    Args:
        tasks: source languages, a non-empty subset of ``("fr", "en")``, in order.
        limit: read only the first ``limit`` usable pairs (None: all 45); at least 1.
        shots: demonstrations before each query, 0 to 8.

    Raises:
        UnsupportedOperationError: not a decoder-only LM (code ``needs_causal_lm``); a model whose logit lens the
            information flow refuses.
        InvalidArgumentError: bad ``tasks``, ``limit`` or ``shots``; a prompt longer than the model reads (code
            ``arg_whole``, fewer ``shots`` needed).
    """
    from ..flow import information_flow
    from .sinks import _causal_lm

    _causal_lm(loaded, "The inner-language experiment")
    if isinstance(tasks, str) or not isinstance(tasks, (list, tuple)) or not tasks:
        raise InvalidArgumentError(f"tasks must be a non-empty list of source languages, got {tasks!r}.",
                                   code="arg_sequence", name="tasks", least=1, value=checks.shown(tasks))
    tasks = tuple(dict.fromkeys(checks.choice("task", t, TASKS) for t in tasks))
    limit = checks.whole("limit", limit, 1, None, none=True)
    shots = check_int("shots", shots, 0, 8)
    pairs = load_pairs()
    clock = Stopwatch()
    tok = loaded.tokenizer
    report(progress, 0.0)
    # the pairs whose Turkish and English first tokens differ after the first task's prompt
    usable, dropped = [], 0
    for i in range(len(pairs)):
        p = prompt(pairs, i, tasks[0], shots)
        if first_token(tok, p, pairs[i]["tr"]) == first_token(tok, p, pairs[i]["en"]):
            dropped += 1
        else:
            usable.append(i)
    if limit is not None:
        usable = usable[:limit]
    steps = max(1, len(tasks) * len(usable))
    turkish = np.zeros((len(tasks), len(usable), loaded.stacks["decoder"][0] + 1))
    english = np.zeros_like(turkish)
    correct = np.zeros(len(tasks))
    done = 0
    for t_i, task in enumerate(tasks):
        for p_i, i in enumerate(usable):
            text = prompt(pairs, i, task, shots)
            ids = [first_token(tok, text, pairs[i]["tr"]), first_token(tok, text, pairs[i]["en"])]
            a = analyze(loaded, text, keep=False, top_k=1)
            if a.truncated:  # the last position would not be the prompt's end
                raise InvalidArgumentError(
                    f"The prompt is {len(a.tokens) + a.truncated} tokens long, more than '{loaded.name}' reads "
                    f"({len(a.tokens)}): use fewer shots than {shots}.", code="arg_whole", name="shots",
                    range=f"0 ≤ shots < {shots}", value=shots)
            flow = information_flow(loaded, a)
            probs = lens_probabilities(flow, ids)
            turkish[t_i, p_i], english[t_i, p_i] = probs[:, 0], probs[:, 1]
            correct[t_i] += float(flow.logit_lens(-1, k=1).ids[-1, 0] == ids[0])
            done += 1
            report(progress, done / steps)
    correct /= max(1, len(usable))
    report(progress, 1.0)
    return InnerLanguage(tasks, [pairs[i] for i in usable], dropped, turkish, english, correct,
                         loaded.stacks["decoder"][0], clock.seconds)


def estimate_seconds(loaded: LoadedModel) -> float:
    """Estimated wall time of :func:`inner_language` (both tasks, every pair), in seconds: the first prompt's
    analysis and information flow measured (after a two-token warm-up that pays the one-off costs), times the
    prompts.

    Raises:
        UnsupportedOperationError: not a decoder-only LM.
    """
    from ..flow import information_flow
    from .common import probe_estimate
    from .sinks import _causal_lm

    _causal_lm(loaded, "The inner-language experiment")
    pairs = load_pairs()
    lens_probabilities(information_flow(loaded, analyze(loaded, "a b", keep=False, top_k=1)), [0])

    def one():
        a = analyze(loaded, prompt(pairs, 0, "fr"), keep=False, top_k=1)
        return lens_probabilities(information_flow(loaded, a), [0])

    return probe_estimate(one, len(TASKS) * len(pairs))[1]
