"""Needle in a haystack and retrieval heads (Wu et al. 2024, "Retrieval Head Mechanistically Explains
Long-Context Factuality", arXiv 2404.15574).

A needle (``The special magic number for <city> is <7 digits>.``) is put at a depth of a haystack made of the
shipped corpus (``assets/corpora/en.jsonl``, its paragraphs and long texts), and the text ends with the question
and the start of the answer; the model must continue with the digits. Each digit is read with teacher forcing
(the text holds the right answer; a digit counts as retrieved when the model's top-1 next token is that digit),
so one forward pass reads the whole answer: greedy decoding would stop at the first wrong digit, so recall here
is an upper bound of greedy decoding's per-digit recall.

Retrieval score (Wu et al. 2024, §2, eq. 1): while the model produces needle token ``w``, head ``h`` copies it when
the key it gives most weight to (``argmax`` of its weights row) is a needle token equal to ``w``; ``g_h`` is the set
of needle tokens the head copies, ``k`` the needle's tokens, and the score is ``|g_h ∩ k| / |k|``, averaged over
the needles. Only rows where the model's top-1 prediction is the digit count (a token the model does not produce
is not copied).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .. import capture, checks
from ..errors import InvalidArgumentError, ModelOutOfMemoryError, UnsupportedOperationError
from ..loading.model import LoadedModel

DEPTHS = (0.1, 0.3, 0.5, 0.7, 0.9)  # where the needle sits, as a share of the haystack
CITIES = ("Ankara", "Lisbon", "Nairobi", "Oslo", "Lima", "Hanoi", "Quito", "Tbilisi", "Dakar", "Riga")
NEEDLE = " The special magic number for {city} is"
QUESTION = "\nQuestion: What is the special magic number for {city} mentioned in the text above?\nAnswer:" + NEEDLE


@dataclass(frozen=True)
class Needle:
    """One needle-in-a-haystack text as token ids.

    Attributes:
        ids: int token ids of the whole text (haystack with the needle, question, answer digits).
        needle: positions of the needle's digit tokens in ``ids`` (the keys a retrieval head copies from).
        answer: positions of the answer's digit tokens (the last tokens of ``ids``), in the same order.
        length: tokens in ``ids``. depth: where the needle sits (share of the haystack before it).
        city, number: the needle's words.
    """

    ids: tuple[int, ...]
    needle: tuple[int, ...]
    answer: tuple[int, ...]
    length: int
    depth: float
    city: str
    number: str


@dataclass(frozen=True)
class NeedleRun:
    """One needle through the model (:func:`run_needle`).

    Attributes:
        correct: bool ``(digits,)``: the model's top-1 next token at each answer digit is that digit.
        loss: mean next-token cross-entropy over the answer digits, in nats.
        copied: bool ``(layers, heads, digits)``: the head copied the digit (top-1 right, its argmax key a needle
            token with the same id).
    """

    correct: np.ndarray
    loss: float
    copied: np.ndarray

    @property
    def recall(self) -> float:
        """Share of the answer digits the model produces (teacher forced)."""
        return float(self.correct.mean()) if self.correct.size else 0.0


@functools.lru_cache(maxsize=4)
def _haystack(tokenizer_name: str, tokenizer) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The corpus's paragraphs and long texts as token ids, and the positions after which a sentence ends."""
    from ..experiments.common import ASSETS

    rows = [json.loads(line) for line in (ASSETS / "corpora" / "en.jsonl").read_text(encoding="utf-8").splitlines()]
    text = " ".join(r["text"] for r in rows if r.get("kind") != "sentence") or " ".join(r["text"] for r in rows)
    ids = tokenizer(" " + text, add_special_tokens=False)["input_ids"]
    ends = tuple(i + 1 for i, t in enumerate(ids) if tokenizer.decode([t]).rstrip().endswith((".", "!", "?")))
    return tuple(ids), ends


def make_needles(loaded: LoadedModel, lengths=(2048,), depths=DEPTHS, seed: int = 0) -> list[Needle]:
    """One needle per (length, depth): a 7-digit number for a city, put after the sentence end nearest the depth.

    Args:
        loaded: a causal LM (its tokenizer cuts the texts). lengths: total tokens of each text (haystack, needle,
            question and answer; at most the model's ``max_positions`` and the corpus's length). depths: shares of
            the haystack before the needle, each in [0, 1]. seed: the numbers' random generator.

    Returns:
        ``len(lengths) × len(depths)`` :class:`Needle` s, lengths outer.

    Raises:
        InvalidArgumentError: a length below 64 tokens or above the model's limit or the corpus; a depth outside
            [0, 1]. UnsupportedOperationError: not a causal LM.
    """
    checks.loaded_model(loaded)
    if loaded.family != "decoder" or loaded.head != "lm":
        raise UnsupportedOperationError(f"The needle test needs a causal LM; '{loaded.name}' is a {loaded.family}.",
                                        code="needle_not_causal", model=loaded.name, family=loaded.family)
    tok = loaded.tokenizer
    hay, ends = _haystack(getattr(tok, "name_or_path", ""), tok)
    prefix = tok("")["input_ids"]
    rng = np.random.default_rng(seed)
    out = []
    for length in checks.sequence("lengths", lengths):
        limit = min(int(loaded.max_positions or 10 ** 9), len(hay) + 64)
        checks.whole("length", length, 64, limit)
        for depth in checks.sequence("depths", depths):
            checks.number("depth", depth, 0.0, 1.0)
            city = CITIES[int(rng.integers(len(CITIES)))]
            number = str(int(rng.integers(1_000_000, 9_999_999)))
            out.append(_one(tok, hay, ends, prefix, int(length), float(depth), city, number))
    return out


def _digits(tok, number: str) -> list[int]:
    return tok(" " + number, add_special_tokens=False)["input_ids"]


def _one(tok, hay, ends, prefix, length: int, depth: float, city: str, number: str) -> Needle:
    head = tok(NEEDLE.format(city=city), add_special_tokens=False)["input_ids"]
    value = _digits(tok, number)
    stop = tok(".", add_special_tokens=False)["input_ids"]
    question = tok(QUESTION.format(city=city), add_special_tokens=False)["input_ids"]
    room = length - len(prefix) - len(head) - len(value) - len(stop) - len(question) - len(value)
    if room < 8:
        raise InvalidArgumentError(f"A {length}-token text leaves no room for a haystack around the needle.",
                                   code="needle_too_short", length=length)
    cut = max((e for e in ends if e <= depth * room), default=0)
    body = list(hay[:room])
    ids = list(prefix) + body[:cut] + head + value + stop + body[cut:] + question + value
    start = len(prefix) + cut + len(head)
    keep = [i for i, t in enumerate(value) if tok.decode([t]).strip()]  # digits, not a lone space token
    needle = tuple(start + i for i in keep)
    answer = tuple(len(ids) - len(value) + i for i in keep)
    return Needle(tuple(ids), needle, answer, len(ids), depth, city, number)


def run_needle(loaded: LoadedModel, needle: Needle, mask=None) -> NeedleRun:
    """One forward pass over ``needle`` with ``mask`` (anything :func:`models.analyze` takes, e.g. a
    :class:`models.analysis.head_masks.HeadMasks`): the answer digits' predictions and loss, and which heads
    copied each digit (Wu et al. 2024, §2). Only the answer rows' weights are computed (the family's eager
    function on those rows; :attr:`models.capture.CaptureState.rows`), the rest runs fused.

    Raises:
        InvalidArgumentError: not a :class:`Needle`. InvalidMaskError: a bad mask.
        UnsupportedOperationError: a model off the AttentionInterface.
        ModelOutOfMemoryError: out of memory.
    """
    from ..analysis.mask_plan import resolve_masks

    if loaded.capture_path != "interface":
        raise UnsupportedOperationError(f"The needle test reads the weights of Dikkat's attention function; "
                                        f"'{loaded.name}' runs on the fallback path.",
                                        code="needle_not_routed", model=loaded.name)
    checks.loaded_model(loaded)
    if not isinstance(needle, Needle):
        raise InvalidArgumentError(f"needle must be a Needle from make_needles, got {checks.shown(needle)}.",
                                   code="arg_choice", name="needle", options="a Needle", value=checks.shown(needle))
    n = needle.length
    masks, _ = resolve_masks(loaded, mask, n)
    layers, heads = loaded.stacks["decoder"]
    rows = [p - 1 for p in needle.answer]  # the rows that predict each digit
    r0, r1 = min(rows), max(rows) + 1
    argmax = np.zeros((layers, heads, r1 - r0), dtype=np.int64)

    def sink(site, q0, k0, w, q_len, k_len):
        argmax[site.layer] = (w[0].float().argmax(dim=-1) + k0).cpu().numpy()

    def oom(exc):
        raise ModelOutOfMemoryError(f"Out of memory on {loaded.device} running a {n}-token needle.",
                                    code="oom_needle", device=str(loaded.device), n=n) from exc

    ids = torch.tensor([needle.ids], device=loaded.device)
    with capture.rerun(loaded, masks=masks, oom=oom, sink=sink, fused=loaded.sdpa_ok, rows=(r0, r1)):
        logits = loaded.model(input_ids=ids, logits_to_keep=n - r0, use_cache=False).logits[0]
    logits = logits[[r - r0 for r in rows]].float()
    target = torch.tensor([needle.ids[p] for p in needle.answer], device=logits.device)
    correct = (logits.argmax(dim=-1) == target).cpu().numpy()
    loss = float(torch.nn.functional.cross_entropy(logits, target))
    ids_np = np.asarray(needle.ids)
    on_needle = np.isin(argmax, needle.needle)
    same = ids_np[argmax] == np.asarray([needle.ids[p] for p in needle.answer])[None, None, [r - r0 for r in rows]]
    copied = on_needle[..., [r - r0 for r in rows]] & same & correct[None, None, :]
    return NeedleRun(correct, loss, copied)


def retrieval_scores(runs: Sequence[tuple[Needle, NeedleRun]]) -> np.ndarray:
    """Float32 ``(layers, heads)``: each head's retrieval score, ``|g_h ∩ k| / |k|`` averaged over the needles
    (Wu et al. 2024, §2, eq. 1); ``g_h``: the distinct needle digits the head copied, ``k``: the needle's digits.

    Raises:
        InvalidArgumentError: no runs, or runs that are not ``(Needle, NeedleRun)`` pairs."""
    runs = checks.sequence("runs", runs)
    if not all(isinstance(r, tuple) and len(r) == 2 and isinstance(r[0], Needle) and isinstance(r[1], NeedleRun)
               for r in runs):
        raise InvalidArgumentError("runs must be (Needle, NeedleRun) pairs, as run_needle gives.", code="arg_choice",
                                   name="runs", options="(Needle, NeedleRun) pairs", value=checks.shown(runs))
    total: np.ndarray | None = None
    for needle, run in runs:
        digits = [needle.ids[p] for p in needle.answer]
        distinct = sorted(set(digits))
        got = np.zeros(run.copied.shape[:2], dtype=np.float64)
        for d in distinct:
            got += run.copied[..., [i for i, x in enumerate(digits) if x == d]].any(axis=-1)
        score = got / max(len(distinct), 1)
        total = score if total is None else total + score
    assert total is not None  # runs holds at least one pair (checks.sequence)
    return (total / len(runs)).astype(np.float32)
