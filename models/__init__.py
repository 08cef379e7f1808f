"""Dikkat's attention engine: load real models offline and capture every head's attention.

No Streamlit and no plotly here: a notebook user imports ``models`` directly::

    import models
    m = models.load("minilm-l6")
    a = models.analyze(m, "Kedi fareyi kovaladı")
    a.attentions["encoder"].shape   # (6, 12, n, n), float32
"""

from .audio import AudioAnalysis, analyze_audio
from .analysis import Analysis, analyze, default_max_tokens
from .outputs import TopK
from .tokens import Token, Word
from .catalog import CATALOG, DEFAULT_MODEL, ModelSpec, default_model_for_language, get_spec, list_models
from .errors import (
    AttentionTooLargeError,
    BatchNotSupportedError,
    DikkatError,
    EmptyTextError,
    HubDownloadTooLargeError,
    HubUnreachableError,
    InvalidArgumentError,
    InvalidAudioError,
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
    WordMismatchError,
)
from .loading import LoadedModel, clear_cache, is_hub_id, load
from .masks import MaskMode, parse_mask
from .store import AttentionStack, MaskStack
from .flow import Flow, information_flow

__all__ = [
    "Flow",
    "information_flow",
    "AudioAnalysis", "analyze_audio",
    "Analysis", "TopK", "Token", "Word", "analyze", "default_max_tokens",
    "CATALOG", "DEFAULT_MODEL", "ModelSpec", "default_model_for_language", "get_spec", "list_models",
    "AttentionTooLargeError", "BatchNotSupportedError", "DikkatError", "EmptyTextError", "HubDownloadTooLargeError", "HubUnreachableError", "InvalidArgumentError",
    "InvalidAudioError", "InvalidHeadError", "InvalidMaskError", "ModelNotAllowedError", "ModelNotInstalledError", "ModelOutOfMemoryError", "NoAttentionWeightsError",
    "NoUsableModelError", "UnknownLanguageError", "UnknownModelError", "UnsupportedOperationError",
    "WordMismatchError",
    "LoadedModel", "clear_cache", "is_hub_id", "load", "MaskMode", "parse_mask", "AttentionStack", "MaskStack",
]
