"""The arguments of :func:`models.speech.audio.analyze_audio` checked before any work (issue 47: every public
function keeps its contract): a coded refusal, never a raw Python error, for any value."""

from __future__ import annotations

import math

import numpy as np

from .. import checks
from ..errors import EmptyTextError, InvalidArgumentError, InvalidAudioError
from ..loading.model import LoadedModel
from .wav import SAMPLE_RATE
from .whisper_tokens import _check_whisper

FRAME_SECONDS = 0.02         # one encoder frame (conv2 has stride 2)
WINDOW_SECONDS = 30.0        # Whisper's fixed input window


def _counts(loaded: LoadedModel, sample_rate, max_new_tokens, top_k, word_seconds) -> tuple[int, int, int, float]:
    """:func:`analyze_audio`'s numbers checked before any work: ``sample_rate`` a whole number of Hz from 1 to
    1,000,000 (InvalidAudioError ``bad_sample_rate`` below 1, as :func:`resample` says), ``max_new_tokens`` from 1
    to the decoder's positions, ``top_k`` from 1 to the vocabulary, ``word_seconds`` from one frame (0.02 s) to the
    30 s window.

    Raises:
        InvalidAudioError: a sample rate below 1. InvalidArgumentError: any other number out of its range.
    """
    if isinstance(sample_rate, (int, float, np.integer, np.floating)) and not isinstance(sample_rate, bool) \
            and sample_rate <= 0:
        raise InvalidAudioError(f"Sample rates must be positive, got {sample_rate} and {SAMPLE_RATE}.",
                                code="bad_sample_rate", first=sample_rate, second=SAMPLE_RATE)
    if isinstance(sample_rate, (float, np.floating)) and math.isfinite(sample_rate) and float(sample_rate).is_integer():
        sample_rate = int(sample_rate)  # 22050.0 from an audio library is a whole number of Hz
    config = loaded.model.config
    return (checks.whole("sample_rate", sample_rate, 1, 1_000_000),
            checks.whole("max_new_tokens", max_new_tokens, 1, int(config.max_target_positions)),
            checks.whole("top_k", top_k, 1, int(config.vocab_size)),
            checks.number("word_seconds", word_seconds, FRAME_SECONDS, WINDOW_SECONDS))


def checked_arguments(loaded: LoadedModel, audio, sample_rate, language, target, max_new_tokens, top_k, padding,
                      word_seconds, keep) -> tuple[np.ndarray, int, str, str | None, int, int, float]:
    """:func:`~models.speech.audio.analyze_audio`'s arguments checked, in its order: ``(samples, sample_rate,
    language, target, max_new_tokens, top_k, word_seconds)``, the samples float32 ``(samples,)`` (a stereo
    ``(samples, channels)`` array averaged to mono).

    Raises:
        InvalidArgumentError: ``loaded`` not a loaded model, ``language`` not a string, ``keep`` not a bool or
            None, a number out of the range :func:`_counts` says, a ``target`` with a lone surrogate.
        UnsupportedOperationError: not a Whisper model. EmptyTextError: a blank ``target``.
        InvalidAudioError: empty, non-finite or non-numeric audio, a sample rate below 1, a bad ``padding``.
    """
    checks.loaded_model(loaded)
    _check_whisper(loaded)
    sample_rate, max_new_tokens, top_k, word_seconds = _counts(loaded, sample_rate, max_new_tokens, top_k,
                                                               word_seconds)
    language = checks.instance("language", language, str, "a language code such as 'tr' or 'en'")
    if target is not None:
        if not isinstance(target, str) or not target.strip():
            raise EmptyTextError("The target transcript is empty: type what is said, or leave it out.",
                                 code="empty_transcript")
        target = checks.text(target, "target")
    if keep is not None and not isinstance(keep, (bool, np.bool_)):
        raise InvalidArgumentError(f"keep must be True, False or None, got {keep!r}.", code="arg_choice",
                                   name="keep", options="True, False, None", value=checks.shown(keep))
    if padding not in ("column", "renormalize"):
        raise InvalidAudioError(f"padding must be 'column' or 'renormalize', got {padding!r}.", code="arg_choice",
                                name="padding", options="column, renormalize", value=checks.shown(padding))
    try:
        x = np.asarray(audio, dtype=np.float32)
    except (TypeError, ValueError):
        x = np.zeros(0, dtype=np.float32)  # not samples at all: refused just below as empty
    if x.ndim == 2:
        x = x.mean(axis=1 if x.shape[1] < x.shape[0] else 0)
    if x.ndim != 1 or x.size == 0:
        raise InvalidAudioError(f"Audio must be a non-empty 1-D array of samples, got shape {np.shape(audio)}.",
                                code="audio_empty", shape=str(np.shape(audio)))
    if not np.isfinite(x).all():
        raise InvalidAudioError("Audio contains NaN or infinite samples.", code="audio_not_finite")
    return x, sample_rate, language, target, max_new_tokens, top_k, word_seconds
