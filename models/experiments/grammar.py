"""Experiment 6: grammar probes in Turkish (issue 32): do heads follow the case suffix, not the position?

Turkish marks who does what to whom with suffixes: the definite object carries the accusative ``-(y)I``
(``fare-yi``), and the word order may change without changing the meaning (``Kedi fareyi kovaladı`` SOV,
``Fareyi kedi kovaladı`` OSV, ``Fareyi kovaladı kedi`` OVS, ``Kedi kovaladı fareyi`` SVO; Göksel & Kerslake 2005,
*Turkish: A Comprehensive Grammar*, ch. 23 and §14.3). English has to keep the order ("The cat chased the mouse" /
"The mouse, the cat chased"). Swapping the case suffix changes the meaning (``kapıyı vurdu`` "hit the door" /
``kapıya vurdu`` "knocked on the door"); a plural subject may take the verb's plural ``-lAr``
(``Kediler fareyi kovaladılar``).

Three minimal-pair sets written for the project (``assets/turkish/grammar_pairs.json``, :func:`load_pairs`) are
read at the morpheme level (:mod:`models.turkish`: keys summed over a morpheme's pieces, queries averaged over
them, the word-level rule of Clark et al. 2019 §4.1), and per head:

* ``verb_to_acc``: how much the verb (the mean of its morphemes' rows) attends to the object's case suffix, in each
  word order; ``verb_to_case``: the same for the accusative, dative and ablative forms of the case set;
* ``tracking``: the share of items where the verb's most-attended morpheme, among the morphemes of the other
  words (punctuation and special tokens left out), is the accusative suffix **in both** SOV and OSV: a head that
  follows the suffix where it moves, not a position (the attention-to-a-relation measure of Clark et al. 2019 §4.2,
  scored per morpheme);
* ``agree_to_subject``: how much the verb's plural suffix ``-lAr`` attends to the subject word (``agree_to_object``:
  to the object word, the control);
* the effect of switching the ``top`` tracking heads off against ``controls`` draws of as many random other heads
  (:func:`models.analyze` ``heads_off``: the head's slice of the output projection's input zeroed). On a causal LM
  the measure is the log-probability of the accusative suffix's pieces given the text before them
  (:func:`suffix_logprob`, SOV and OSV sentences), and, with the top agreement heads off, of the plural suffix's
  pieces; on an encoder without a masked-LM head (the bundled multilingual-e5-small) it is how far apart the
  sentence embeddings of a case minimal pair are (``1 - cos``, mean-pooled as :func:`models.pruning.embed`): a head
  that carries the case into the sentence's representation brings them closer when switched off.

On a causal LM the verb comes after the suffix in SOV and OSV, so the verb's attention to the suffix cannot itself
help predict the suffix: the switch-off effect tests the heads (which also act at the suffix's own position), not
that one edge. Masked-LM scoring of the suffix is not implemented: no bundled encoder has a masked-LM head.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import checks
from ..analysis import analyze
from ..errors import InvalidArgumentError, UnsupportedOperationError
from ..loading.model import LoadedModel
from .common import Progress, Source, Stopwatch, check_int, report
from .grammar_measures import (CASES, ORDERS, PAIRS_FILE, Roles, attention_to, load_pairs, roles, suffix_logprob,
                               top_target, tracking_share)

__all__ = ["CASES", "ORDERS", "PAIRS_FILE", "GrammarResult", "Roles", "SOURCES", "attention_to", "estimate_seconds",
           "grammar_probes", "load_pairs", "roles", "suffix_logprob", "top_target", "tracking_share"]

SOURCES = (
    Source(cite="Göksel & Kerslake 2005", title="Turkish: A Comprehensive Grammar (Routledge)",
           where="ch. 23 (word order), §14.3 (case marking: accusative, dative, ablative), §24.2 (plural agreement)",
           model="the Turkish language", url="https://doi.org/10.4324/9780203340769"),
    Source(cite="Clark et al. 2019", title="What Does BERT Look At? An Analysis of BERT's Attention",
           where="§4.1 (word-level attention), §4.2 and fig. 5 (single heads match dependency relations, e.g. "
                 "direct objects: head 8-10, 86.8 %)",
           model="BERT-base (English)", url="https://arxiv.org/abs/1906.04341"),
    Source(cite="Linzen et al. 2016", title="Assessing the Ability of LSTMs to Learn Syntax-Sensitive Dependencies",
           where="§2-4 (subject-verb number agreement scored on minimal pairs)", model="LSTM language models (English)",
           url="https://arxiv.org/abs/1611.01368"),
)
TOP = 4
CONTROLS = 4


# ---------------------------------------------------------------------------------------------------- result
@dataclass
class GrammarResult:
    """What the three sets show on one model (``L`` layers, ``H`` heads of its self-attention stack).

    Attributes:
        stack: the stack read (``encoder`` or ``decoder``). orders, cases: the names of the first axes below.
        verb_to_acc: float64 ``(orders, L, H)``: the verb's attention to the accusative suffix, mean over items.
        verb_to_case: float64 ``(cases, L, H)``: the verb's attention to the object's case suffix per case (NaN for a
            case without items). case_items: int ``(cases,)`` items per case.
        tracking: float64 ``(L, H)``: the share of items where the verb's most-attended morpheme is the accusative
            suffix in both SOV and OSV. tracking_chance: that share for a head that picks one of the candidate
            morphemes at random in each order (mean over items of ``1/n_SOV · 1/n_OSV``).
        agree_to_subject, agree_to_object: float64 ``(L, H)``: the plural suffix ``-lAr`` of the verb attending to
            the subject word / the object word, mean over the agreement items.
        top, top_agree: ``(stack, layer, head)`` of the ``top`` heads by tracking (ties by mean verb→Acc attention
            over SOV and OSV) and by ``agree_to_subject``.
        metric: ``suffix_logprob`` (causal LM: mean log-probability of the Acc suffix's pieces, nats) or
            ``case_distance`` (encoder: mean ``1 - cos`` of a case minimal pair's sentence embeddings).
        full, off, random: the metric with all heads, with ``top`` off, with as many random other heads off
            (float64 ``(controls,)``).
        agree_full, agree_off, agree_random: causal LM only (else NaN / empty): mean log-probability of the plural
            suffix's pieces in the plural sentences, all heads / ``top_agree`` off / random heads off.
        agreement_preference: causal LM only: mean over items of log p(-lAr | plural subject) − log p(-lAr |
            singular subject) in nats (> 0: the model prefers the agreeing verb); NaN on an encoder.
        agreement_preferred: the share of items where that difference is > 0 (NaN on an encoder).
        items: ``set -> items read``. examples: the first word-order item (its sentences and English glosses).
        seconds: wall time, in seconds.
    """

    stack: str
    orders: tuple[str, ...]
    cases: tuple[str, ...]
    verb_to_acc: np.ndarray
    verb_to_case: np.ndarray
    case_items: np.ndarray
    tracking: np.ndarray
    tracking_chance: float
    agree_to_subject: np.ndarray
    agree_to_object: np.ndarray
    top: list[tuple[str, int, int]]
    top_agree: list[tuple[str, int, int]]
    metric: str
    full: float
    off: float
    random: np.ndarray
    agree_full: float
    agree_off: float
    agree_random: np.ndarray
    agreement_preference: float
    agreement_preferred: float
    items: dict
    examples: dict
    seconds: float

    @property
    def best(self) -> tuple[int, int]:
        """``(layer, head)`` of the best tracking head (the first of :attr:`top`)."""
        return self.top[0][1], self.top[0][2]


def _stack(loaded: LoadedModel) -> str:
    if loaded.family == "decoder" and "decoder" in loaded.stacks:
        return "decoder"
    if loaded.family == "encoder" and "encoder" in loaded.stacks:
        return "encoder"
    raise UnsupportedOperationError(
        f"The grammar probes read one self-attention stack over a Turkish sentence: an encoder or a decoder-only "
        f"model; '{loaded.name}' is a{'n' if loaded.family[0] in 'ae' else ''} {loaded.family}.",
        code="arg_choice", name="the model's family", options="encoder, decoder", value=loaded.family)


def _sets(limit: int | None) -> tuple[list, list, list]:
    pairs = load_pairs()
    cut = (lambda items: items) if limit is None else (lambda items: items[:limit])
    return cut(pairs["word_order"]), cut(pairs["case"]), cut(pairs["agreement"])


class _Reader:
    """One sentence read once: its morpheme-level attention, the units of its morphemes, its logits (causal LM)."""

    def __init__(self, loaded: LoadedModel, stack: str, text: str):
        from ..turkish import analysis_units, morpheme_attention

        a = analyze(loaded, text, keep=True, keep_logits=loaded.head == "lm", top_k=1)
        q, k = analysis_units(a, stack)
        self.units = morpheme_attention(np.asarray(a.attentions[stack][:]), q, k)  # (L, H, U, U)
        self.index = {(m.start, m.end): u for u, m in enumerate(q.morphemes) if m is not None and q.segments[u] == 0}

    def of(self, spans) -> list[int]:
        return [self.index[s] for s in spans if s in self.index]


def _logprob(loaded: LoadedModel, text: str, span: tuple[int, int], off) -> float:
    a = analyze(loaded, text, heads_off=off or None, keep=False, keep_logits=True, top_k=1)
    assert a.logits is not None  # keep_logits=True on a causal LM (the only kind asked)
    return suffix_logprob(a.logits, [t.id for t in a.tokens], [(t.start, t.end) for t in a.tokens],
                          [t.special for t in a.tokens], *span)


def _nanmean(values) -> float:
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    return float(v.mean()) if v.size else float("nan")


def _word_orders(loaded: LoadedModel, stack: str, items: list, tick):
    """The word-order set: the verb's attention to the accusative suffix per order ``(orders, L, H)``, the tracking
    share ``(L, H)``, the chance of a random pick, and ``(text, suffix span)`` of every SOV and OSV sentence."""
    layers, heads = loaded.stacks[stack]
    acc = np.zeros((len(ORDERS), layers, heads))
    tops: dict[str, list[np.ndarray]] = {o: [] for o in ("SOV", "OSV")}
    suffix: dict[str, list[int]] = {o: [] for o in ("SOV", "OSV")}
    chance, spans = [], []
    for it in items:
        candidates_per_order = []
        for o_i, order in enumerate(ORDERS):
            r = roles(it[order], it["subject"], it["object"], it["verb"])
            if r.case_label != "Acc":
                raise InvalidArgumentError(f"No accusative suffix found on '{it['object']}' in {it[order]!r}.",
                                           code="arg_choice", name="word", options=it[order], value=it["object"])
            read = _Reader(loaded, stack, it[order])
            verb, target = read.of(r.verb), read.of([r.case])
            acc[o_i] += attention_to(read.units, verb, target)
            if order in tops:
                candidates = read.of(r.others)
                tops[order].append(top_target(read.units, verb, candidates))
                suffix[order].append(target[0])
                candidates_per_order.append(len(candidates))
                spans.append((it[order], r.case))
            tick()
        chance.append(1.0 / (candidates_per_order[0] * candidates_per_order[1]))
    acc /= max(1, len(items))
    tracking = tracking_share(np.stack(tops["SOV"]), np.stack(tops["OSV"]), np.asarray(suffix["SOV"]),
                              np.asarray(suffix["OSV"]))
    return acc, tracking, float(np.mean(chance)) if chance else float("nan"), spans


def _case_swaps(loaded: LoadedModel, stack: str, items: list, tick):
    """The case set: the verb's attention to the object's case suffix per case ``(cases, L, H)`` (NaN for a case
    without items), the items per case, and each item's sentences."""
    layers, heads = loaded.stacks[stack]
    per_case = np.zeros((len(CASES), layers, heads))
    counts = np.zeros(len(CASES), dtype=np.int64)
    pairs = []
    for it in items:
        for label, text in it["sentences"].items():
            r = roles(text, it["subject"], it["objects"][label], it["verb"])
            if r.case_label != label:
                raise InvalidArgumentError(f"No {label} suffix found on '{it['objects'][label]}' in {text!r}.",
                                           code="arg_choice", name="word", options=text, value=it["objects"][label])
            read = _Reader(loaded, stack, text)
            per_case[CASES.index(label)] += attention_to(read.units, read.of(r.verb), read.of([r.case]))
            counts[CASES.index(label)] += 1
            tick()
        pairs.append(list(it["sentences"].values()))
    with np.errstate(invalid="ignore"):
        per_case = np.where(counts[:, None, None] > 0, per_case / np.maximum(counts, 1)[:, None, None], np.nan)
    return per_case, counts, pairs


def _agreement(loaded: LoadedModel, stack: str, items: list, causal: bool, tick):
    """The agreement set: the plural suffix's attention to the subject and to the object ``(L, H)`` each, the
    ``(text, suffix span)`` of each plural sentence, and (causal LM) each item's log p(-lAr | plural subject) −
    log p(-lAr | singular subject)."""
    layers, heads = loaded.stacks[stack]
    to_subject, to_object = np.zeros((layers, heads)), np.zeros((layers, heads))
    spans, preference = [], []
    for it in items:
        r = roles(it["plural"], it["subject"], it["object"], it["verb"])
        if r.agreement is None:
            raise InvalidArgumentError(f"No plural suffix found on '{it['verb']}' in {it['plural']!r}.",
                                       code="arg_choice", name="word", options=it["plural"], value=it["verb"])
        read = _Reader(loaded, stack, it["plural"])
        rows = read.of([r.agreement])
        to_subject += attention_to(read.units, rows, read.of(r.subject))
        to_object += attention_to(read.units, rows, read.of(r.obj))
        tick()
        spans.append((it["plural"], r.agreement))
        if causal:
            m = roles(it["mismatch"], it["subject_singular"], it["object"], it["verb"])
            preference.append(_logprob(loaded, it["plural"], r.agreement, ()) -
                              _logprob(loaded, it["mismatch"], m.agreement, ()) if m.agreement else np.nan)
            tick()
    n = max(1, len(items))
    return to_subject / n, to_object / n, spans, preference


def _case_distance(loaded: LoadedModel, pairs: list[list[str]], off, tick) -> float:
    """Mean ``1 - cos`` of the sentence embeddings (:func:`models.pruning.embed`) of every two forms of each case
    item, with ``off`` switched off."""
    from ..pruning import cosine, embed

    values = []
    for texts in pairs:
        e = embed(loaded, texts, off)
        tick(len(texts))
        values += [1.0 - float(cosine(e[i], e[j])) for i in range(len(texts)) for j in range(i + 1, len(texts))]
    return _nanmean(values)


@checks.needs_model
def grammar_probes(loaded: LoadedModel, *, limit: int | None = None, top: int = TOP, controls: int = CONTROLS,
                   seed: int = 0, progress: Progress = None) -> GrammarResult:
    """Run the three Turkish minimal-pair sets on ``loaded`` (see the module docstring for every measure).

    Args:
        limit: read only the first ``limit`` items of each set (None: all, 24 each); at least 1.
        top: how many tracking (and agreement) heads to switch off; at most half the heads.
        controls: random draws of as many other heads (0 for none). seed: numpy ``default_rng`` seed of the draws.

    Raises:
        UnsupportedOperationError: an encoder-decoder (code ``arg_choice``); heads that cannot be switched off
            on the fallback path.
        InvalidArgumentError: ``limit`` below 1, ``top`` outside [1, heads / 2], ``controls`` outside [0, 32], a
            negative ``seed``; a role word the segmenter does not find (code ``arg_choice``).
    """
    stack = _stack(loaded)
    layers, heads = loaded.stacks[stack]
    limit = checks.whole("limit", limit, 1, None, none=True)
    top = check_int("top", top, 1, max(1, (layers * heads) // 2))
    controls = check_int("controls", controls, 0, 32)
    seed = check_int("seed", seed, 0)
    causal = loaded.family == "decoder" and loaded.head == "lm"
    word_order, case_set, agreement = _sets(limit)
    clock = Stopwatch()
    case_texts = sum(len(it["sentences"]) for it in case_set)
    n_effect = (2 * len(word_order) + len(agreement)) if causal else case_texts
    steps = 4 * len(word_order) + case_texts + len(agreement) * (2 if causal else 1) + n_effect * (2 + controls)
    done = 0

    def tick(n: int = 1) -> None:
        nonlocal done
        done += n
        report(progress, done / steps)

    report(progress, 0.0)
    acc, tracking, chance, wo_spans = _word_orders(loaded, stack, word_order, tick)
    per_case, counts, case_pairs = _case_swaps(loaded, stack, case_set, tick)
    to_subject, to_object, agree_spans, preference = _agreement(loaded, stack, agreement, causal, tick)
    # the top heads, and the same number of random other heads, switched off
    both = acc[:2].mean(axis=0)
    order = np.lexsort((-both.ravel(), -tracking.ravel()))
    chosen = [(stack, int(i // heads), int(i % heads)) for i in order[:top]]
    order_agree = np.argsort(-to_subject.ravel(), kind="stable")
    chosen_agree = [(stack, int(i // heads), int(i % heads)) for i in order_agree[:top]]
    rng = np.random.default_rng(seed)

    def draws(picked):
        others = [h for h in ((stack, la, he) for la in range(layers) for he in range(heads)) if h not in picked]
        if len(others) < top:
            return []
        return [[others[j] for j in rng.choice(len(others), size=top, replace=False)] for _ in range(controls)]

    if causal:
        metric = "suffix_logprob"

        def score(off, spans) -> float:
            values = []
            for text, span in spans:
                values.append(_logprob(loaded, text, span, off))
                tick()
            return _nanmean(values)

        full, off = score((), wo_spans), score(chosen, wo_spans)
        rnd = np.asarray([score(d, wo_spans) for d in draws(chosen)], dtype=np.float64)
        agree_full, agree_off = score((), agree_spans), score(chosen_agree, agree_spans)
        agree_rnd = np.asarray([score(d, agree_spans) for d in draws(chosen_agree)], dtype=np.float64)
        pref = np.asarray(preference, dtype=np.float64)
        pref = pref[np.isfinite(pref)]
        agreement_preference = float(pref.mean()) if pref.size else float("nan")
        agreement_preferred = float((pref > 0).mean()) if pref.size else float("nan")
    else:
        metric = "case_distance"
        full, off = _case_distance(loaded, case_pairs, (), tick), _case_distance(loaded, case_pairs, chosen, tick)
        rnd = np.asarray([_case_distance(loaded, case_pairs, d, tick) for d in draws(chosen)], dtype=np.float64)
        agree_full = agree_off = agreement_preference = agreement_preferred = float("nan")
        agree_rnd = np.zeros(0)
    report(progress, 1.0)
    first = word_order[0] if word_order else {}
    return GrammarResult(
        stack, ORDERS, CASES, acc, per_case, counts, tracking, chance,
        to_subject, to_object, chosen, chosen_agree, metric, full, off, rnd, agree_full, agree_off, agree_rnd,
        agreement_preference, agreement_preferred,
        {"word_order": len(word_order), "case": len(case_set), "agreement": len(agreement)},
        {k: first[k] for k in (*ORDERS, "en", "en_OSV") if k in first}, clock.seconds)


def estimate_seconds(loaded: LoadedModel, limit: int | None = None) -> float:
    """Estimated wall time of :func:`grammar_probes`, in seconds: the first word-order sentence read once with every
    weight kept and scored once with heads off (a suffix log-probability on a causal LM, a sentence embedding on an
    encoder), each measured here, times how many of each the run makes.

    Raises:
        UnsupportedOperationError: an encoder-decoder. InvalidArgumentError: ``limit`` below 1.
    """
    stack = _stack(loaded)
    limit = checks.whole("limit", limit, 1, None, none=True)
    word_order, case_set, agreement = _sets(limit)
    case_texts = sum(len(it["sentences"]) for it in case_set)
    causal = loaded.family == "decoder" and loaded.head == "lm"
    first = load_pairs()["word_order"][0]
    r = roles(first["SOV"], first["subject"], first["object"], first["verb"])  # loads the segmenter's lexicon
    off = [(stack, 0, 0)]
    clock = Stopwatch()
    _Reader(loaded, stack, first["SOV"])
    read = clock.seconds
    clock = Stopwatch()
    if causal:
        assert r.case is not None  # the shipped first word-order sentence has its accusative suffix
        _logprob(loaded, first["SOV"], r.case, off)
    else:
        from ..pruning import embed

        embed(loaded, [first["SOV"]], off)
    one = clock.seconds
    analyses = 4 * len(word_order) + case_texts + len(agreement)
    effect = (2 * len(word_order) + len(agreement)) * (2 + CONTROLS) + 2 * len(agreement) if causal \
        else case_texts * (2 + CONTROLS)
    return float(read * analyses + one * effect)
