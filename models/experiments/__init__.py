"""Published findings about attention, reproduced live on the bundled models (issue 15).

Each experiment states a claim and where it was published (:class:`Source`), runs on a bundled model, and returns
plain dataclasses of numpy arrays; the Experiments page draws them next to the published numbers. Each one is also
an outside check of the engine: if the captured weights, the masks or the heads switched off were wrong, the known
effect would not appear.

=============  =====================================================  ==========================================
key            finding                                                function
=============  =====================================================  ==========================================
``sinks``      attention sinks; StreamingLLM (Xiao et al. 2023)       :func:`.sinks.first_token_share`,
                                                                      :func:`.sinks.streaming_losses`
``induction``  induction heads (Olsson et al. 2022)                   :func:`.induction.induction_heads`
``clark``      what BERT's heads look at (Clark et al. 2019;          :func:`.bert_heads.what_heads_look_at`
               Kovaleva et al. 2019)
``alignment``  Whisper's alignment heads (Radford et al. 2022)        :func:`.alignment.whisper_alignment`
``prunable``   heads that can go (Michel et al. 2019; Voita et al.)   :func:`.prunable.heads_that_can_go`
``grammar``    Turkish grammar probes: case suffix across word        :func:`.grammar.grammar_probes`
               orders, agreement (Göksel & Kerslake 2005; Clark et
               al. 2019; Linzen et al. 2016)
``inner_``     the inner language: English in the middle layers       :func:`.inner_language.inner_language`
``language``   (Wendler et al. 2024)
``retrieval_`` retrieval heads (Wu et al. 2024) kept full, a window   :func:`.retrieval.retrieval_heads`
``heads``      + sinks elsewhere: DuoAttention (Xiao et al. 2024)
=============  =====================================================  ==========================================

:data:`EXPERIMENTS` lists them with the bundled models each runs on; :func:`run` and :func:`estimate_seconds` call
one by key.
"""

from __future__ import annotations

import importlib
import inspect
import time
from dataclasses import dataclass
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import torch

from .. import checks
from ..loading.model import LoadedModel
from .common import Progress, Source, report

if TYPE_CHECKING:
    from .sinks import FirstTokenShare, StreamingLosses

__all__ = ["EXPERIMENTS", "Experiment", "SinksResult", "Source", "estimate_seconds", "get", "run"]


@dataclass
class SinksResult:
    """Both halves of the attention-sink experiment: :class:`.sinks.FirstTokenShare` and
    :class:`.sinks.StreamingLosses`; ``seconds`` is their total wall time."""

    share: FirstTokenShare
    streaming: StreamingLosses
    seconds: float


def _sinks(loaded: LoadedModel, progress: Progress = None) -> SinksResult:
    from . import sinks

    share = sinks.first_token_share(loaded, progress=lambda f: report(progress, 0.2 * f))
    streaming = sinks.streaming_losses(loaded, full=share, progress=lambda f: report(progress, 0.2 + 0.8 * f))
    return SinksResult(share, streaming, share.seconds + streaming.seconds)


@dataclass(frozen=True)
class Experiment:
    """One published finding.

    Attributes:
        key: its name in :data:`EXPERIMENTS` (and the page's link). module: the module under
            ``models.experiments`` that computes it (its ``SOURCE`` or ``SOURCES``).
        models: the bundled catalog models it runs on, the default first.
        runner: ``(loaded, progress=None) -> result``. estimator: ``loaded -> seconds``, a measured estimate of the
            run's wall time on this machine (:func:`estimate_seconds`).
    """

    key: str
    module: str
    models: tuple[str, ...]
    runner: Callable[..., object]  # (loaded, *, progress=None) -> result
    estimator: Callable[[LoadedModel], float]

    @property
    def sources(self) -> tuple[Source, ...]:
        mod = importlib.import_module(f"{__name__}.{self.module}")
        return tuple(getattr(mod, "SOURCES", None) or (mod.SOURCE,))

    def result_type(self) -> type:
        """The class :attr:`runner` returns: its function's return annotation (the function of a lazy runner is
        imported), e.g. :class:`.induction.InductionResult`; what a result kept on disk must be
        (:mod:`models.ahead_read`)."""
        target = getattr(self.runner, "target", None)
        fn = getattr(importlib.import_module(f"{__name__}.{target[0]}"), target[1]) if target else self.runner
        fn = inspect.unwrap(fn)  # a checked function: its own annotations, its own module's names
        hint = inspect.get_annotations(fn)["return"]
        return eval(hint, vars(importlib.import_module(fn.__module__))) if isinstance(hint, str) else hint  # noqa: S307


def _lazy(module: str, fn: str) -> Callable:
    """``models.experiments.<module>.<fn>``, imported when first called (the registry imports no experiment)."""
    def call(*args, **kwargs):
        return getattr(importlib.import_module(f"{__name__}.{module}"), fn)(*args, **kwargs)
    cast(Any, call).target = (module, fn)  # read by Experiment.result_type
    return call


def _by_passes(passes: Callable[[LoadedModel], list[tuple[float, int]]]) -> Callable[[LoadedModel], float]:
    """An estimator: the measured plain forward pass (:func:`forward_seconds`) times ``passes(loaded)``, a list of
    ``(passes, tokens)``, summed (causal LMs only)."""
    def estimate(loaded: LoadedModel) -> float:
        from .sinks import _causal_lm

        _causal_lm(loaded, "This experiment")
        return float(sum(n * forward_seconds(loaded, tokens) for n, tokens in passes(loaded)))
    return estimate


def _retrieval_passes(loaded: LoadedModel) -> list[tuple[float, int]]:
    from .retrieval import needle_passes

    return needle_passes(loaded)


def _sink_passes(loaded: LoadedModel) -> list[tuple[float, int]]:
    from .sinks import MAX_TOKENS, WINDOWS

    # the analysis + its statistics pass (weights block by block, ~1.5 passes); then two masks per window
    # (calibrated on smollm2 with bench/experiments.py)
    return [(2.5, MAX_TOKENS), (2 * len(WINDOWS), MAX_TOKENS)]


def _induction_passes(loaded: LoadedModel) -> list[tuple[float, int]]:
    from .induction import LENGTH, RANDOM_CONTROLS, SEQUENCES

    # every weight kept once (~2 passes), then the knock-outs with the full logits (calibrated on smollm2 with
    # bench/experiments.py)
    return [(SEQUENCES * (2 + 1 + RANDOM_CONTROLS), 2 * LENGTH + 1)]


# The grammar probes and the inner language: the units each run makes, counted as the experiment counts them, times
# each unit timed here once the one-off costs are paid (the first analysis, the segmenter's lexicon, the first pass
# with heads off, the information flow's first probe). A unit's forward passes through the model are in _UNIT_PASSES
# (tests/engine/test_experiments.py counts them against a run).
_UNIT_PASSES = {"read": 1, "score": 1, "embed": 1, "prompt": 2}


def _passes(plan: dict[str, int]) -> int:
    """Forward passes through the model of a plan (:func:`_grammar_plan`, :func:`_inner_plan`)."""
    return sum(n * _UNIT_PASSES[unit.split("_")[0]] for unit, n in plan.items())


def _grammar_plan(loaded: LoadedModel, *, limit: int | None = None, top: int | None = None,
                  controls: int | None = None) -> dict[str, int]:
    """The units :func:`.grammar.grammar_probes` runs with these arguments (its defaults where None): ``read_order``,
    ``read_case``, ``read_agreement``, a sentence of each set read with every weight kept (one pass); then on a causal
    LM ``score_order``, ``score_agreement``, a suffix's log-probability (one pass: SOV and OSV, the plural sentences,
    each with all heads, the top heads off and each random draw off; and the plural against the mismatched sentence),
    on an encoder ``embed``, one sentence embedding (one pass: every case form, with the same three kinds of heads)."""
    from . import grammar

    stack = grammar._stack(loaded)
    top = grammar.TOP if top is None else top
    controls = grammar.CONTROLS if controls is None else controls
    word_order, case_set, agreement = grammar._sets(limit)
    case_texts = sum(len(it["sentences"]) for it in case_set)
    layers, heads = loaded.stacks[stack]
    sets = 2 + (controls if layers * heads - top >= top else 0)  # grammar_probes' draws(): none without enough heads
    plan = {"read_order": len(grammar.ORDERS) * len(word_order), "read_case": case_texts,
            "read_agreement": len(agreement)}
    if loaded.family == "decoder" and loaded.head == "lm":
        plan.update(score_order=2 * len(word_order) * sets, score_agreement=len(agreement) * (sets + 2))
    else:
        plan["embed"] = case_texts * sets
    return plan


def _grammar_seconds(loaded: LoadedModel) -> float:
    """:func:`_grammar_plan`'s units, each timed on one sentence of its set (its words segmented first, as the run's
    sentences mostly meet words already seen), after one read and one scoring that pay the one-off costs."""
    from ..pruning import embed
    from . import grammar
    from .common import Stopwatch

    stack = grammar._stack(loaded)
    plan = _grammar_plan(loaded)
    pairs = grammar.load_pairs()
    o, c, a = pairs["word_order"][1], pairs["case"][1], pairs["agreement"][1]
    label, case_text = next(iter(c["sentences"].items()))
    sentences = {"read_order": (o["OSV"], o["subject"], o["object"], o["verb"]),
                 "read_case": (case_text, c["subject"], c["objects"][label], c["verb"]),
                 "read_agreement": (a["plural"], a["subject"], a["object"], a["verb"])}
    layers, heads = loaded.stacks[stack]
    off = [(stack, h // heads, h % heads) for h in range(min(grammar.TOP, layers * heads))]
    causal = "embed" not in plan

    def score(text: str, span) -> None:
        if causal:
            grammar._logprob(loaded, text, span, off)
        else:
            embed(loaded, [text], off)

    first = grammar.roles(o["SOV"], o["subject"], o["object"], o["verb"])
    grammar._Reader(loaded, stack, o["SOV"])
    score(o["SOV"], first.case)
    seconds, roles = {}, {}
    for unit, args in sentences.items():
        grammar.roles(*args)
        clock = Stopwatch()
        roles[unit] = grammar.roles(*args)
        grammar._Reader(loaded, stack, args[0])
        seconds[unit] = clock.seconds
    scored = {"score_order": ("read_order", "case"), "score_agreement": ("read_agreement", "agreement"),
              "embed": ("read_case", "case")}
    for unit in plan.keys() - seconds.keys():
        read, span = scored[unit]
        clock = Stopwatch()
        score(sentences[read][0], getattr(roles[read], span))
        seconds[unit] = clock.seconds
    return float(sum(n * seconds[unit] for unit, n in plan.items()))


def _inner_plan(loaded: LoadedModel, *, tasks=None, limit: int | None = None,
                shots: int | None = None) -> dict[str, int]:
    """The units :func:`.inner_language.inner_language` runs with these arguments (its defaults where None):
    ``prompt_<task>``, one prompt of a task (two passes: the analysis, then the information flow's own; with the two
    lens readings of its streams through the unembedding), as many per task as the pairs it keeps (those whose Turkish
    and English first tokens differ after the first task's prompt, at most ``limit``)."""
    from . import inner_language as inner

    tasks = inner.TASKS if tasks is None else tuple(tasks)
    shots = inner.SHOTS if shots is None else shots
    pairs, tok = inner.load_pairs(), loaded.tokenizer
    usable = 0
    for i, pair in enumerate(pairs):
        text = inner.prompt(pairs, i, tasks[0], shots)
        usable += inner.first_token(tok, text, pair["tr"]) != inner.first_token(tok, text, pair["en"])
    usable = usable if limit is None else min(usable, limit)
    return {f"prompt_{task}": usable for task in tasks}


def _inner_seconds(loaded: LoadedModel) -> float:
    """The pairs kept counted as the run counts them (that scan timed), then one prompt of each task timed, after a
    two-token prompt that pays the one-off costs; a prompt is what the run does for it: both first tokens, the
    analysis, the information flow, the lens probabilities and the logit lens."""
    from ..analysis import analyze
    from ..flow import information_flow
    from . import inner_language as inner
    from .common import Stopwatch
    from .sinks import _causal_lm

    _causal_lm(loaded, "The inner-language experiment")
    pairs, tok = inner.load_pairs(), loaded.tokenizer

    def one(text: str, pair: dict) -> None:
        ids = [inner.first_token(tok, text, pair["tr"]), inner.first_token(tok, text, pair["en"])]
        flow = information_flow(loaded, analyze(loaded, text, keep=False, top_k=1))
        inner.lens_probabilities(flow, ids)
        flow.logit_lens(-1, k=1)

    one("a b", pairs[0])
    clock = Stopwatch()
    plan = _inner_plan(loaded)
    total = clock.seconds
    for unit, n in plan.items():
        clock = Stopwatch()
        one(inner.prompt(pairs, 1, unit.removeprefix("prompt_")), pairs[1])
        total += n * clock.seconds
    return float(total)


EXPERIMENTS: dict[str, Experiment] = {e.key: e for e in (
    Experiment("sinks", "sinks", ("smollm2-135m", "gemma3-270m"), _sinks, _by_passes(_sink_passes)),
    Experiment("induction", "induction", ("smollm2-135m", "gemma3-270m"), _lazy("induction", "induction_heads"),
               _by_passes(_induction_passes)),
    Experiment("clark", "clark", ("minilm-l6", "multilingual-e5-small"),
               _lazy("bert_heads", "what_heads_look_at"), _lazy("bert_heads", "estimate_seconds")),
    Experiment("alignment", "alignment", ("whisper-base",), _lazy("alignment", "whisper_alignment"),
               _lazy("alignment", "estimate_alignment_seconds")),
    Experiment("prunable", "prunable", ("smollm2-135m", "minilm-l6"), _lazy("prunable", "heads_that_can_go"),
               _lazy("prunable", "estimate_seconds")),
    Experiment("grammar", "grammar", ("multilingual-e5-small", "gemma3-270m"), _lazy("grammar", "grammar_probes"),
               _grammar_seconds),
    Experiment("inner_language", "inner_language", ("gemma3-270m", "smollm2-135m"),
               _lazy("inner_language", "inner_language"), _inner_seconds),
    Experiment("retrieval_heads", "retrieval", ("smollm2-135m", "gemma3-270m"), _lazy("retrieval", "retrieval_heads"),
               _by_passes(_retrieval_passes)),
)}


def get(key: str) -> Experiment:
    """The experiment named ``key``.

    Raises:
        InvalidArgumentError: an unknown key (the message lists the known ones).
    """
    return EXPERIMENTS[checks.choice("experiment", key, EXPERIMENTS)]


def run(key: str, loaded: LoadedModel, *, progress: Progress = None):
    """Run experiment ``key`` on ``loaded``; ``progress`` is called with the fraction done, in [0, 1].

    Returns:
        the experiment's result dataclass (see the module of each key; each has ``seconds``).

    Raises:
        InvalidArgumentError: an unknown key. UnsupportedOperationError: a model the experiment cannot run on
        (e.g. induction heads on an encoder); and what the experiment's function raises.
    """
    experiment = get(key)
    checks.loaded_model(loaded)
    return experiment.runner(loaded, progress=checks.callback("progress", progress))


@checks.needs_model
def forward_seconds(loaded: LoadedModel, tokens: int) -> float:
    """Wall seconds of one plain forward pass of ``tokens`` token ids (capped at the model's position limit) through
    the model (fused attention, no capture), measured once per model and length and remembered on ``loaded``.

    Raises:
        torch.OutOfMemoryError: the pass does not fit (the experiment itself would not either).
    """
    cache = loaded.__dict__.setdefault("_forward_seconds", {})
    tokens = int(min(tokens, loaded.max_positions))
    if tokens not in cache:
        ids = torch.full((1, tokens), int(loaded.tokenizer.convert_tokens_to_ids(loaded.tokenizer.tokenize("a"))[0]),
                         device=loaded.device)
        kwargs = {"use_cache": False} if loaded.family == "decoder" else {}
        with torch.no_grad():
            loaded.model(input_ids=ids, **kwargs)  # warm-up: the first call pays one-off costs
            start = time.perf_counter()
            loaded.model(input_ids=ids, **kwargs)
        cache[tokens] = time.perf_counter() - start
    return cache[tokens]


def estimate_seconds(key: str, loaded: LoadedModel) -> float:
    """How long :func:`run` will take here, in seconds of wall time: for the causal-LM experiments one measured
    plain forward pass (:func:`forward_seconds`) times the passes the experiment makes; for the grammar probes and
    the inner language the units the run makes, counted as it counts them, each timed here once its one-off costs
    are paid; for the others the module's own measured probe (its first unit of work, scaled).
    ``bench/experiments.py`` prints estimate ÷ actual (``--cpu-clock`` on a machine shared with other work).

    Raises:
        InvalidArgumentError: an unknown key. UnsupportedOperationError: a model the experiment cannot run on.
    """
    experiment = get(key)
    return float(experiment.estimator(checks.loaded_model(loaded)))
