"""Experiment 4: Whisper's alignment heads (Radford et al. 2022; OpenAI's ``whisper/timing.py``).

A few cross-attention heads of a Whisper decoder look at the speech being said. OpenAI lists them per checkpoint
(``whisper/__init__.py`` ``_ALIGNMENT_HEADS``; whisper-base: (3, 1) (4, 2) (4, 3) (4, 7) (5, 1) (5, 2) (5, 4) (5, 6),
decoded from that file, equal to the bundled ``generation_config.alignment_heads``) and turns their maps into word
times by dynamic time warping (``whisper/timing.py`` ``find_alignment``, openai/whisper v20230306, after the
paper); transformers does it in ``generation_whisper.py`` ``_extract_token_timestamps``.

:mod:`.timing` ports ``whisper/timing.py`` (:func:`median_filter`, :func:`dtw`: same padding, same tie-breaking;
:func:`align_tokens`: ``find_alignment``'s recipe); :func:`whisper_alignment` runs it on the engine's captured
cross-attention of the shipped clips next to transformers' times and a control. Times in seconds, 20 ms frames.

Measured on whisper-base (CPU, float32): the engine's weights equal eager ones bit for bit; our token boundaries
are at most 0.18 s and on average 0.050 s from transformers' token ends (the largest gap is the first token's end,
which transformers always puts at 0.0 s); the same recipe on the 16 heads of layers 0-1 is 0.25 s off on average.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import cast
from collections.abc import Sequence

import numpy as np
import torch

from .. import checks
from ..speech.audio import SAMPLE_RATE, AudioAnalysis, analyze_audio, read_wav
from ..speech.wav import resample
from ..errors import InvalidArgumentError, UnsupportedOperationError
from ..loading.construct import building
from ..loading.model import LoadedModel
from ..speech.whisper_tokens import alignment_heads, language_token
from .common import ASSETS, Progress, Source, Stopwatch, probe_estimate, report
from .timing import (  # noqa: F401  (OpenAI's recipe, also read from here)
    HOP_LENGTH, MEDIAN_WIDTH, PROMPT_ROWS, TOKENS_PER_SECOND, TokenAlignment, align_tokens, dtw, median_filter,
    openai_frames,
)

SOURCE = Source(
    cite="Radford et al. 2022",
    title="Robust Speech Recognition via Large-Scale Weak Supervision",
    where=("word-level timestamps of openai/whisper (v20230306, after the paper): whisper/timing.py find_alignment; "
           "alignment heads: whisper/__init__.py _ALIGNMENT_HEADS['base']"),
    model="whisper-base (alignment heads (3,1) (4,2) (4,3) (4,7) (5,1) (5,2) (5,4) (5,6))",
    url="https://arxiv.org/abs/2212.04356",
)

CONTROL_LAYERS = (0, 1)     # default control: every cross-attention head of these layers
CLIPS: tuple[tuple[Path, str], ...] = (  # the shipped clips (assets/audio/README.md)
    (ASSETS / "audio" / "the_cat_chased_the_mouse_en.wav", "en"),
    (ASSETS / "audio" / "kedi_fareyi_kovaladi_tr.wav", "tr"),
)


def _eager_twin(loaded: LoadedModel):
    """The loaded Whisper model's class over the same parameter tensors, with its own (eager) config and generation
    config. ``generate(return_token_timestamps=True)`` sets ``self.model.config._attn_implementation = "eager"``
    for good (``generation_whisper.py``): on the shared model, every session's attention path would change. Built
    on the meta device, it takes the tensors with ``load_state_dict(assign=True)``: nothing copied, nothing shared
    written (inference only)."""
    config = copy.deepcopy(loaded.model.config)
    config._attn_implementation = "eager"
    with building(), torch.device("meta"):  # one model built at a time (models/loading/construct.py)
        twin = type(loaded.model)(config)
    twin.load_state_dict(loaded.model.state_dict(), assign=True)
    twin.generation_config = copy.deepcopy(loaded.model.generation_config)
    if any(t.is_meta for t in list(twin.parameters()) + list(twin.buffers())):  # pragma: no cover - defensive
        raise RuntimeError("The eager twin of the Whisper model has tensors left on the meta device.")
    return twin.eval()


def _transformers_times(twin, features: torch.Tensor, attention_mask: torch.Tensor, lang_piece: str,
                        text_ids: list[int], max_new_tokens: int) -> tuple[np.ndarray, str]:
    """transformers' token times for ``text_ids``: float64 ``(len(text_ids),)`` seconds, and how they were got.

    ``"generate"``: ``twin.generate(..., return_token_timestamps=True)``, greedy, language and task forced, when it
    decodes exactly ``text_ids``; else ``"extract"`` (:func:`_extract_times`). Each value is the token's END
    (transformers PR #36632; ``_decode_asr`` makes token ``i`` span ``t[i-1] .. t[i]``, token 0 from 0.0); the
    float32 times are rounded to 1 µs.
    """
    eot = int(twin.generation_config.eos_token_id)
    with torch.no_grad():
        out = twin.generate(features, attention_mask=attention_mask, language=lang_piece, task="transcribe",
                            return_token_timestamps=True, do_sample=False, num_beams=1,
                            max_new_tokens=max(1, min(max_new_tokens, len(text_ids) + 1)), return_timestamps=False)
    seq = out["sequences"][0].tolist()
    times = out["token_timestamps"][0].double().cpu().numpy()
    keep = [i for i, t in enumerate(seq) if t < eot]
    if [seq[i] for i in keep] == list(text_ids):
        return np.round(times[keep], 6), "generate"
    return _extract_times(twin, features, attention_mask, lang_piece, text_ids), "extract"


def _extract_times(twin, features: torch.Tensor, attention_mask: torch.Tensor, lang_piece: str,
                   text_ids: list[int]) -> np.ndarray:
    """transformers' ``_extract_token_timestamps`` on one eager pass over prompt + ``text_ids`` (the rows generate's
    steps give: prefill, then one per token) and the same ``num_frames``: float64 ``(len(text_ids),)`` seconds."""
    from transformers.generation.utils import GenerateEncoderDecoderOutput

    gc = twin.generation_config
    lang = int(gc.lang_to_id[lang_piece])
    prompt = [int(gc.decoder_start_token_id), lang, int(gc.task_to_id["transcribe"]), int(gc.no_timestamps_token_id)]
    ids = prompt + list(text_ids)
    with torch.no_grad():
        out = twin(input_features=features, decoder_input_ids=torch.tensor([ids], device=features.device),
                   output_attentions=True, return_dict=True)
        sequences = cast(torch.LongTensor, torch.tensor([ids + [int(gc.eos_token_id)]]))  # an int64 tensor
        fake = GenerateEncoderDecoderOutput(sequences=sequences, cross_attentions=(out.cross_attentions,))
        stamps = twin._extract_token_timestamps(fake, gc.alignment_heads, num_frames=attention_mask.sum(-1).cpu(),
                                                num_input_ids=len(prompt))
    return np.round(stamps[0, len(prompt): len(prompt) + len(text_ids)].double().cpu().numpy(), 6)


@dataclass
class ClipAlignment:
    """One clip: OpenAI's recipe on the engine's cross-attention, next to transformers' times.

    Token arrays: one value per text token (``k``: no prompt, no ``<|endoftext|>``); word arrays: one per word of
    the engine's ``target_words`` (punctuation is a word). Times: float64 seconds from the clip's start.

    Attributes:
        path: the WAV file. language: the language forced (``"en"``). transcript: the greedy transcript.
        duration_seconds: the clip's length. frames: encoder frames aligned (:func:`openai_frames`).
        tokens: the text tokens' texts (the raw piece for part of a character). token_ids: int64 ``(k,)``.
        starts, ends: float64 ``(k,)``: OpenAI's recipe on the alignment heads (:func:`align_tokens`).
        hf_starts, hf_ends: float64 ``(k,)``: transformers' (``hf_ends`` are its ``token_timestamps``;
            ``hf_starts`` the previous token's, 0.0 for the first, as its ``_decode_asr`` reads them).
        hf_method: ``"generate"`` or ``"extract"`` (see :func:`whisper_alignment`).
        control_starts, control_ends: float64 ``(k,)``: the same recipe on the control heads.
        words: the words' texts. word_starts, word_ends, hf_word_starts, hf_word_ends: float64 ``(w,)``: the
            start of a word's first token and the end of its last.
        alignment: the alignment heads' :class:`TokenAlignment` (its matrix and DTW path, for drawing).
        audio: the engine's :class:`models.speech.audio.AudioAnalysis` of the clip (spectrogram, every head's weights).
        seconds: wall time for this clip (engine analysis, recipe, transformers), seconds.
    """

    path: str
    language: str
    transcript: str
    duration_seconds: float
    frames: int
    tokens: list[str]
    token_ids: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    hf_starts: np.ndarray
    hf_ends: np.ndarray
    hf_method: str
    control_starts: np.ndarray
    control_ends: np.ndarray
    words: list[str]
    word_starts: np.ndarray
    word_ends: np.ndarray
    hf_word_starts: np.ndarray
    hf_word_ends: np.ndarray
    alignment: TokenAlignment
    audio: AudioAnalysis
    seconds: float

    def _gaps(self, ends: np.ndarray) -> np.ndarray:
        return np.round(np.abs(ends - self.hf_ends), 6)

    @property
    def differences(self) -> np.ndarray:
        """float64 ``(k,)``: ``|ours - transformers'|`` in seconds at each token's end (an inner end is the next
        token's start; the first token's start, 0 on both sides by construction, is not counted)."""
        return self._gaps(self.ends)

    @property
    def control_differences(self) -> np.ndarray:
        """float64 ``(k,)``: as :attr:`differences`, for the control heads."""
        return self._gaps(self.control_ends)


@dataclass
class AlignmentResult:
    """The result of :func:`whisper_alignment`.

    Attributes:
        clips: one :class:`ClipAlignment` per clip, in order.
        heads: the alignment heads ``(layer, head)`` (:func:`models.speech.whisper_tokens.alignment_heads`).
        control_heads: the control heads.
        seconds: wall time of the whole run, seconds.
    """

    clips: list[ClipAlignment]
    heads: list[tuple[int, int]]
    control_heads: list[tuple[int, int]]
    seconds: float

    def _all(self, name: str) -> np.ndarray:
        return np.concatenate([np.zeros(0)] + [getattr(c, name) for c in self.clips])

    @property
    def max_difference(self) -> float:
        """Largest ``|ours - transformers'|`` over every token boundary of every clip, seconds."""
        return float(self._all("differences").max(initial=0.0))

    @property
    def mean_difference(self) -> float:
        """Mean ``|ours - transformers'|`` over every token boundary of every clip, seconds (0 if none)."""
        return float(np.mean(self._all("differences"))) if self._all("differences").size else 0.0

    @property
    def control_mean_difference(self) -> float:
        """Mean ``|control - transformers'|`` over every token boundary of every clip, seconds (0 if none)."""
        return float(np.mean(self._all("control_differences"))) if self._all("control_differences").size else 0.0


def _check_clips(clips) -> list[tuple[Path, str]]:
    clips = CLIPS if clips is None else clips
    if (isinstance(clips, (str, Path)) or not isinstance(clips, Sequence) or not clips or not all(
            isinstance(c, (tuple, list)) and len(c) == 2 and isinstance(c[0], (str, Path)) and isinstance(c[1], str)
            for c in clips)):
        raise InvalidArgumentError(f"clips must be a non-empty list of (path, language) pairs, got {clips!r}.",
                                   code="arg_clips", value=checks.shown(clips))
    return [(Path(p), lang) for p, lang in clips]


def _check_heads(loaded: LoadedModel, heads, what: str) -> list[tuple[int, int]]:
    layers, n_heads = loaded.stacks["cross"]
    try:
        pairs = [(int(layer), int(head)) for layer, head in heads]
    except (TypeError, ValueError):
        pairs = []
    if not pairs or not all(0 <= layer < layers and 0 <= head < n_heads for layer, head in pairs):
        raise InvalidArgumentError(f"{what} must be (layer, head) pairs within {layers} x {n_heads}, got {heads!r}.",
                                   code="arg_head_pairs", layers=layers, heads=n_heads, value=checks.shown(heads))
    return pairs


def _check_model(loaded: LoadedModel) -> None:
    if (getattr(loaded.model.config, "model_type", None) != "whisper" or loaded.processor is None
            or "cross" not in loaded.stacks):
        raise UnsupportedOperationError(
            f"Model '{loaded.name}' is not a Whisper speech model: the alignment-heads experiment needs one "
            "(e.g. 'whisper-base').", code="not_whisper", model=loaded.name)


def _one_clip(loaded: LoadedModel, twin, path: Path, language: str, heads, control, max_new_tokens: int,
              progress: Progress, done: float, share: float) -> ClipAlignment:
    clock = Stopwatch()
    audio, rate = read_wav(path)  # analyze_audio's samples: mono (channels averaged), 16 kHz
    result = analyze_audio(loaded, audio, rate, language=language, max_new_tokens=max_new_tokens)
    mono = audio.mean(axis=1 if audio.shape[1] < audio.shape[0] else 0) if audio.ndim == 2 else audio
    report(progress, done + share * 0.5)
    a = result.analysis
    assert a.target_tokens is not None and a.target_words is not None  # an encoder-decoder's analysis has both
    prompt = 4  # <|startoftranscript|> <|lang|> <|transcribe|> <|notimestamps|>
    text_tokens = a.target_tokens[prompt:]
    text_ids = [t.id for t in text_tokens]
    frames = min(openai_frames(round(result.duration_seconds * SAMPLE_RATE)), result.frames)
    cross = a.attentions["cross"]
    ours = align_tokens(cross.heads(heads), frames)
    ctrl = align_tokens(cross.heads(control), frames)
    k = len(text_ids)
    if k:
        lang_piece = loaded.tokenizer.convert_ids_to_tokens([language_token(loaded, language)])[0]
        fe = loaded.processor.feature_extractor(resample(mono, int(rate), SAMPLE_RATE), sampling_rate=SAMPLE_RATE,
                                                return_tensors="pt", return_attention_mask=True)
        features = fe["input_features"].to(device=loaded.device, dtype=loaded.dtype)
        hf_ends, method = _transformers_times(twin, features, fe["attention_mask"].to(loaded.device), lang_piece,
                                              text_ids, max_new_tokens)
    else:
        hf_ends, method = np.zeros(0), "generate"
    hf_starts = np.concatenate([[0.0], hf_ends[:-1]]) if k else np.zeros(0)
    starts, ends = ours.boundaries[:k], ours.boundaries[1:k + 1]
    firsts, lasts = [w.tokens[0] - prompt for w in a.target_words], [w.tokens[-1] - prompt for w in a.target_words]
    report(progress, done + share)
    return ClipAlignment(
        path=str(path), language=language, transcript=result.transcript, duration_seconds=result.duration_seconds,
        frames=frames, tokens=[t.text or t.piece for t in text_tokens], token_ids=np.asarray(text_ids, np.int64),
        starts=starts, ends=ends, hf_starts=hf_starts, hf_ends=hf_ends, hf_method=method,
        control_starts=ctrl.boundaries[:k], control_ends=ctrl.boundaries[1:k + 1],
        words=[w.text for w in a.target_words],
        word_starts=starts[firsts], word_ends=ends[lasts], hf_word_starts=hf_starts[firsts],
        hf_word_ends=hf_ends[lasts],
        alignment=ours, audio=result, seconds=clock.seconds,
    )


@checks.needs_model
def whisper_alignment(loaded: LoadedModel, clips: Sequence[tuple[str | Path, str]] | None = None, *,
                      control_heads: Sequence[tuple[int, int]] | None = None, max_new_tokens: int = 32,
                      progress: Progress = None) -> AlignmentResult:
    """Word times from Whisper's alignment heads, by OpenAI's recipe, next to transformers' own.

    Per clip, the engine transcribes greedily with the language forced and captures every head
    (:func:`models.speech.audio.analyze_audio`); the alignment heads' cross-attention (rows: the 4 prompt tokens + text)
    goes through :func:`align_tokens` over :func:`openai_frames` frames: each text token's start and end. One
    difference from OpenAI: its pass also feeds ``<|endoftext|>``, whose row enters each head's mean and std; the
    engine's input ends at the last text token (whose row predicts it), so that row is not in the statistics
    (measured: one Turkish boundary moves by 20 ms). The same recipe on ``control_heads`` is the control.

    transformers' times come from the same weights and tokens: a twin of the loaded model sharing its tensors with
    its own eager config (the shared model is untouched: ``_eager_twin``) runs ``generate(input_features,
    attention_mask=..., return_token_timestamps=True)``; when it decodes the engine's tokens (``hf_method ==
    "generate"``) its ``token_timestamps`` are used, else ``_extract_token_timestamps`` on one eager pass over the
    engine's tokens (``"extract"``). transformers departs from OpenAI (``generation_whisper.py``): it standardises
    only the text rows (so the first token always ends at 0.0 s), crops the softmaxed weights to
    ``ceil(samples / 160) // 2`` frames without renormalising, and each timestamp is a token's end.

    Args:
        loaded: a Whisper model (``models.load("whisper-base")``).
        clips: ``(path, language)`` pairs; default the two shipped clips (English, Turkish), :data:`CLIPS`.
        control_heads: ``(layer, head)`` pairs for the control; default every head of layers 0 and 1.
        max_new_tokens: most text tokens decoded per clip.
        progress: called with the fraction done, in [0, 1].

    Returns:
        :class:`AlignmentResult`: per clip, token and word times (float64 seconds) and their differences.

    Raises:
        UnsupportedOperationError: ``loaded`` is not a Whisper model (code ``not_whisper``).
        InvalidArgumentError: malformed ``clips`` or ``control_heads``, or ``max_new_tokens`` below 1.
        InvalidAudioError: a clip that cannot be read. UnknownLanguageError: an unknown language.
        ModelOutOfMemoryError: as :func:`models.speech.audio.analyze_audio`.
    """
    _check_model(loaded)
    clips = _check_clips(clips)
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 1:
        raise InvalidArgumentError(f"max_new_tokens must be a whole number >= 1, got {max_new_tokens!r}.",
                                   code="arg_whole", name="max_new_tokens", range=">= 1",
                                   value=checks.shown(max_new_tokens))
    heads = _check_heads(loaded, alignment_heads(loaded), "The alignment heads")
    layers, n_heads = loaded.stacks["cross"]
    default_control = [(layer, h) for layer in CONTROL_LAYERS if layer < layers for h in range(n_heads)]
    control = _check_heads(loaded, default_control if control_heads is None else control_heads, "control_heads")
    clock = Stopwatch()
    report(progress, 0.0)
    twin = _eager_twin(loaded)
    share = 1.0 / len(clips)
    # the clip :func:`estimate_alignment_seconds` already ran with these settings is not run again
    probe = loaded.__dict__.pop("_alignment_probe", None)
    out, earlier = [], 0.0
    for i, (path, lang) in enumerate(clips):
        if probe is not None and probe[0] == (str(path), lang, tuple(heads), tuple(control), int(max_new_tokens)):
            out.append(probe[1])
            earlier += probe[1].seconds
            probe = None
            report(progress, (i + 1) * share)
            continue
        out.append(_one_clip(loaded, twin, path, lang, heads, control, int(max_new_tokens), progress, i * share, share))
    del twin
    report(progress, 1.0)
    return AlignmentResult(out, heads, control, clock.seconds + earlier)


@checks.needs_model
def estimate_alignment_seconds(loaded: LoadedModel, clips: Sequence[tuple[str | Path, str]] | None = None) -> float:
    """Estimated wall time of :func:`whisper_alignment` on ``clips``, in seconds on this machine.

    Measured: the first clip is run (:func:`common.probe_estimate`), its time times the number of clips. Its result
    is kept on ``loaded`` and taken by the next :func:`whisper_alignment` with the same settings (default control
    heads and ``max_new_tokens``), which does not run that clip again.

    Raises:
        As :func:`whisper_alignment`.
    """
    clips = _check_clips(clips)
    result, seconds = probe_estimate(lambda: whisper_alignment(loaded, clips[:1]), len(clips))
    path, lang = clips[0]
    loaded.__dict__["_alignment_probe"] = ((str(path), lang, tuple(result.heads), tuple(result.control_heads), 32),
                                           result.clips[0])
    return float(seconds)
