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
=============  =====================================================  ==========================================

:data:`EXPERIMENTS` lists them with the bundled models each runs on; :func:`run` and :func:`estimate_seconds` call
one by key.
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass
from typing import Callable

import torch

from .. import checks
from ..loading.model import LoadedModel
from .common import Progress, Source, report

__all__ = ["EXPERIMENTS", "Experiment", "SinksResult", "Source", "estimate_seconds", "get", "run"]


@dataclass
class SinksResult:
    """Both halves of the attention-sink experiment: :class:`.sinks.FirstTokenShare` and
    :class:`.sinks.StreamingLosses`; ``seconds`` is their total wall time."""

    share: object
    streaming: object
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
    runner: Callable[[LoadedModel, Progress], object]
    estimator: Callable[[LoadedModel], float]

    @property
    def sources(self) -> tuple[Source, ...]:
        mod = importlib.import_module(f"{__name__}.{self.module}")
        return tuple(getattr(mod, "SOURCES", None) or (mod.SOURCE,))


def _lazy(module: str, fn: str) -> Callable:
    """``models.experiments.<module>.<fn>``, imported when first called (the registry imports no experiment)."""
    def call(*args, **kwargs):
        return getattr(importlib.import_module(f"{__name__}.{module}"), fn)(*args, **kwargs)
    return call


def _by_passes(passes: Callable[[LoadedModel], list[tuple[float, int]]]) -> Callable[[LoadedModel], float]:
    """An estimator: the measured plain forward pass (:func:`forward_seconds`) times ``passes(loaded)``, a list of
    ``(passes, tokens)``, summed (causal LMs only)."""
    def estimate(loaded: LoadedModel) -> float:
        from .sinks import _causal_lm

        _causal_lm(loaded, "This experiment")
        return float(sum(n * forward_seconds(loaded, tokens) for n, tokens in passes(loaded)))
    return estimate


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
               _lazy("grammar", "estimate_seconds")),
    Experiment("inner_language", "inner_language", ("gemma3-270m", "smollm2-135m"),
               _lazy("inner_language", "inner_language"), _lazy("inner_language", "estimate_seconds")),
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
    plain forward pass (:func:`forward_seconds`) times the passes the experiment makes; for the others the module's
    own measured probe (its first unit of work, scaled). ``bench/experiments.py`` prints estimate ÷ actual.

    Raises:
        InvalidArgumentError: an unknown key. UnsupportedOperationError: a model the experiment cannot run on.
    """
    experiment = get(key)
    return float(experiment.estimator(checks.loaded_model(loaded)))
