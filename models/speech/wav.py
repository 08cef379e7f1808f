"""WAV files for the speech model: reading (the standard library's ``wave``), writing, and resampling to
Whisper's 16 kHz with numpy only (windowed-sinc interpolation)."""

from __future__ import annotations

import math
import wave
from pathlib import Path

import numpy as np

from ..errors import InvalidAudioError

SAMPLE_RATE = 16000  # Hz, Whisper's input rate


def read_wav(path: str | Path) -> tuple[np.ndarray, int]:
    """Read a PCM WAV file with the standard ``wave`` module.

    Args:
        path: a ``.wav`` file with 8-, 16-, 24- or 32-bit integer PCM samples, any channel count.

    Returns:
        ``(audio, sample_rate)``: float32 ``(samples,)`` in [-1, 1] (channels averaged) and Hz.

    Raises:
        InvalidAudioError: not a readable PCM WAV file (e.g. float WAV, compressed, truncated).
    """
    try:
        with wave.open(str(path), "rb") as w:
            channels, width, rate, n = w.getnchannels(), w.getsampwidth(), w.getframerate(), w.getnframes()
            raw = w.readframes(n)
    except (OSError, EOFError, wave.Error) as exc:
        raise InvalidAudioError(f"Cannot read {path} as a PCM WAV file: {exc}",
                                code="wav_unreadable", path=str(path), detail=str(exc)) from exc
    if width == 1:
        data = (np.frombuffer(raw, dtype=np.uint8).astype(np.float32) - 128.0) / 128.0
    elif width == 2:
        data = np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0
    elif width == 3:
        b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        ints = (b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16))
        ints = np.where(ints >= 1 << 23, ints - (1 << 24), ints)
        data = ints.astype(np.float32) / float(1 << 23)
    elif width == 4:
        data = np.frombuffer(raw, dtype="<i4").astype(np.float32) / float(1 << 31)
    else:
        raise InvalidAudioError(f"{path}: unsupported sample width of {width} bytes.",
                                code="wav_sample_width", path=str(path), width=width)
    frames = len(data) // channels
    data = data[: frames * channels].reshape(frames, channels).mean(axis=1)
    return data.astype(np.float32), int(rate)


def write_wav(path: str | Path, audio: np.ndarray, sample_rate: int = SAMPLE_RATE) -> None:
    """Write float audio in [-1, 1], ``(samples,)``, as a mono 16-bit PCM WAV file (values clipped,
    scaled by 32767); ``sample_rate`` in Hz. OS errors (unwritable path) propagate."""
    pcm = np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0)
    pcm = np.round(pcm * 32767.0).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(int(sample_rate))
        w.writeframes(pcm.tobytes())


def resample(audio: np.ndarray, orig_rate: int, target_rate: int = SAMPLE_RATE, zero_crossings: int = 16) -> np.ndarray:
    """Band-limited resampling with a Hann-windowed sinc kernel (numpy only).

    Each output sample at input time ``t`` is ``sum_k x[k] * c * sinc(c * (t - k)) * w(t - k)`` with
    cutoff ``c = min(1, target_rate / orig_rate)`` (so downsampling low-passes below the new Nyquist
    frequency) and a Hann window ``w`` spanning ``zero_crossings / c`` input samples each side
    (J. O. Smith, "Digital Audio Resampling", band-limited interpolation).

    Args:
        audio: float32 ``(samples,)``. orig_rate, target_rate: Hz, positive.

    Returns:
        float32 ``(round(samples * target_rate / orig_rate),)``.

    Raises:
        InvalidAudioError: a non-positive rate.
    """
    if orig_rate <= 0 or target_rate <= 0:
        raise InvalidAudioError(f"Sample rates must be positive, got {orig_rate} and {target_rate}.",
                                code="bad_sample_rate", first=orig_rate, second=target_rate)
    x = np.asarray(audio, dtype=np.float64)
    if orig_rate == target_rate or x.size == 0:
        return x.astype(np.float32)
    ratio = target_rate / orig_rate
    cutoff = min(1.0, ratio)
    half = int(math.ceil(zero_crossings / cutoff))
    n_out = int(round(x.size * ratio))
    out = np.empty(n_out, dtype=np.float64)
    padded = np.concatenate([np.zeros(half), x, np.zeros(half + 1)])
    offsets = np.arange(-half + 1, half + 1)
    chunk = 1 << 14
    for s in range(0, n_out, chunk):
        t = np.arange(s, min(n_out, s + chunk)) / ratio          # positions in input samples
        base = np.floor(t).astype(np.int64)
        idx = base[:, None] + offsets[None, :]                    # (m, taps)
        dist = t[:, None] - idx
        window = 0.5 + 0.5 * np.cos(np.pi * np.clip(dist / (half + 1), -1, 1))
        kernel = cutoff * np.sinc(cutoff * dist) * window
        out[s : s + len(t)] = (padded[idx + half] * kernel).sum(axis=1)
    return out.astype(np.float32)
