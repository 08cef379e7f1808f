"""OpenAI's word-timestamp recipe (``whisper/timing.py``, openai/whisper v20230306), ported to numpy: the median
filter, dynamic time warping, and ``find_alignment``'s steps from cross-attention weights to token times. Used by
:mod:`.alignment`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import checks
from ..errors import InvalidArgumentError

TOKENS_PER_SECOND = 50      # whisper/audio.py: SAMPLE_RATE / (HOP_LENGTH * 2), 20 ms per encoder frame
HOP_LENGTH = 160            # whisper/audio.py: samples per mel frame
MEDIAN_WIDTH = 7            # whisper/timing.py find_alignment: medfilt_width=7
PROMPT_ROWS = 3             # len(tokenizer.sot_sequence): <|startoftranscript|> <|lang|> <|transcribe|>


def median_filter(x: np.ndarray, width: int = MEDIAN_WIDTH) -> np.ndarray:
    """Median of each window of ``width`` values along the last axis, edges padded by reflection.

    A port of ``whisper/timing.py`` ``median_filter`` (= transformers' ``_median_filter``): the last axis is padded
    by ``width // 2`` each side in ``reflect`` mode (edge not repeated: ``[a, b, c, d]`` -> ``[c, b, a, b, c, d, c,
    b]`` for width 5), then each window's middle value after a sort is taken. An axis no longer than ``width // 2``
    is returned unchanged, as there.

    Args:
        x: float ``(..., t)``. width: odd window size (7 in ``find_alignment``).

    Returns:
        a copy of ``x``'s shape and dtype.

    Raises:
        InvalidArgumentError: ``width`` not a positive odd whole number; ``x`` not an array of finite numbers.
    """
    if isinstance(width, bool) or not isinstance(width, (int, np.integer)) or width <= 0 or width % 2 != 1:
        raise InvalidArgumentError(f"The median filter's width must be a positive odd number, got {width!r}.",
                                   code="arg_odd_width", value=checks.shown(width))
    x = checks.array("x", x, dtype=None, finite=True)
    pad = int(width) // 2
    if x.ndim == 0 or x.shape[-1] <= pad:
        return x.copy()
    padded = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(pad, pad)], mode="reflect")
    windows = np.lib.stride_tricks.sliding_window_view(padded, int(width), axis=-1)
    return np.sort(windows, axis=-1)[..., pad]


def dtw(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dynamic time warping: the monotonic path of least total cost from cell (0, 0) to (n - 1, m - 1).

    A port of ``whisper/timing.py`` ``dtw_cpu`` + ``backtrace`` (= transformers' ``_dynamic_time_warping``).
    Accumulated costs are float32 as there: ``C[i, j] = cost[i-1, j-1] + C[step]`` with ``C[0, 0] = 0``, ``inf`` on
    the other borders; the step is the diagonal when it is strictly the smallest, else the vertical one when
    strictly the smallest, else the horizontal one (every tie goes to the horizontal step, even a larger one). The
    backtrace walks from ``(n, m)`` to ``(0, 0)``. Cells are filled one anti-diagonal at a time: the same values
    as OpenAI's column-by-column loop (each cell needs only the two diagonals before it).

    Args:
        cost: finite float ``(n, m)``, n, m >= 1: rows text tokens, columns frames (OpenAI passes ``-matrix``).

    Returns:
        ``(text_indices, time_indices)``: int64 ``(L,)`` each, the path from ``(0, 0)`` to ``(n - 1, m - 1)``,
        both non-decreasing, each step +1 in one or both.

    Raises:
        InvalidArgumentError: ``cost`` not 2-D, empty, or not finite.
    """
    x = checks.array("cost", cost, shape="(n, m)")
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 1:
        raise InvalidArgumentError(f"dtw needs a non-empty 2-D cost matrix, got shape {x.shape}.",
                                   code="arg_shape", name="cost", shape="(n, m), n, m >= 1", got=str(x.shape))
    if not np.isfinite(x).all():
        raise InvalidArgumentError("dtw needs a finite cost matrix (NaN or inf found).", code="arg_not_finite",
                                   name="cost")
    n, m = x.shape
    acc = np.full((n + 1, m + 1), np.inf, dtype=np.float32)
    trace = np.full((n + 1, m + 1), -1, dtype=np.int8)
    acc[0, 0] = 0
    for d in range(2, n + m + 1):  # cells (i, j) with i + j = d, 1 <= i <= n, 1 <= j <= m
        i = np.arange(max(1, d - m), min(n, d - 1) + 1)
        j = d - i
        c0, c1, c2 = acc[i - 1, j - 1], acc[i - 1, j], acc[i, j - 1]
        t = np.where((c0 < c1) & (c0 < c2), 0, np.where((c1 < c0) & (c1 < c2), 1, 2))
        acc[i, j] = x[i - 1, j - 1] + np.choose(t, [c0, c1, c2])  # float64 sum stored as float32, as dtw_cpu
        trace[i, j] = t
    trace[0, :] = 2
    trace[:, 0] = 1
    i, j, path = n, m, []
    while i > 0 or j > 0:
        path.append((i - 1, j - 1))
        step = trace[i, j]
        if step == 0:
            i, j = i - 1, j - 1
        elif step == 1:
            i -= 1
        elif step == 2:
            j -= 1
        else:  # pragma: no cover - every cell reached has a step
            raise RuntimeError(f"dtw: unexpected trace value {step} at {(i, j)}")
    text_indices, time_indices = np.array(path[::-1], dtype=np.int64).T
    return text_indices, time_indices


@dataclass
class TokenAlignment:
    """OpenAI's alignment of text rows to speech frames (:func:`align_tokens`).

    Attributes:
        matrix: float32 ``(rows, frames)``: standardised, median-filtered, head-averaged weights (high = attended).
        text_indices, time_indices: int64 ``(L,)``: the DTW path through ``-matrix`` (:func:`dtw`).
        frames: speech frames kept (20 ms each).
        boundaries: float64 ``(rows,)``: seconds at which the path enters each row (``jump_times`` of
            ``find_alignment``: frame index / 50). Row ``r`` is the query that predicts text token ``r``, so
            ``boundaries[r]`` is token ``r``'s start and ``boundaries[r + 1]`` its end; the last value is the end of
            the last text token (its row predicts ``<|endoftext|>``). ``boundaries[0]`` is always 0.
    """

    matrix: np.ndarray
    text_indices: np.ndarray
    time_indices: np.ndarray
    frames: int
    boundaries: np.ndarray


def align_tokens(weights: np.ndarray, frames: int, *, first_row: int = PROMPT_ROWS, last_row: int | None = None,
                 width: int = MEDIAN_WIDTH) -> TokenAlignment:
    """OpenAI's word-timestamp recipe on cross-attention weights (``whisper/timing.py``, ``find_alignment``).

    Steps, as there: keep the first ``frames`` keys and renormalise each row to sum to 1 (OpenAI crops the
    logits to ``num_frames // 2`` and takes the softmax; ``qk_scale`` 1); standardise each head over the rows,
    ``(w - mean) / std`` with the population std over all rows (``torch.std_mean(dim=-2, unbiased=False)``; a
    frame where a head's rows are all equal, a division by 0 there, is 0 here);
    median filter of ``width`` along time (:func:`median_filter`); mean over heads; keep rows
    ``first_row:last_row`` (OpenAI: ``matrix[len(sot_sequence):-1]``, from ``<|notimestamps|>`` to the last text
    token); :func:`dtw` on ``-matrix``; the frame at which the path enters each row, / 50 = seconds.

    Args:
        weights: float ``(heads, rows, keys >= frames)``: softmax weights, one row per decoder input token
            (``<|startoftranscript|> <|lang|> <|transcribe|> <|notimestamps|>`` then the text).
        frames: speech frames kept (:func:`openai_frames`). first_row, last_row: the rows aligned, after the
            standardisation over all rows. width: the median filter's width.

    Returns:
        :class:`TokenAlignment`.

    Raises:
        InvalidArgumentError: ``weights`` not 3-D with at least one head, ``frames`` outside ``[1, keys]``, or
            no row aligned.
    """
    w = np.asarray(weights, dtype=np.float32)
    if w.ndim != 3 or w.shape[0] < 1:
        raise InvalidArgumentError(f"align_tokens needs weights (heads, rows, keys), got shape {w.shape}.",
                                   code="arg_shape", name="weights", shape="(heads, rows, keys)", got=str(w.shape))
    if isinstance(frames, bool) or not isinstance(frames, (int, np.integer)) or not 1 <= frames <= w.shape[-1]:
        raise InvalidArgumentError(f"frames must be a whole number in [1, {w.shape[-1]}], got {frames!r}.",
                                   code="arg_whole", name="frames", range=f"[1, {w.shape[-1]}]",
                                   value=checks.shown(frames))
    w = w[..., : int(frames)]
    w = w / np.maximum(w.sum(axis=-1, keepdims=True), np.float32(1e-30))
    std = w.std(axis=-2, keepdims=True)
    w = np.where(std > 0, (w - w.mean(axis=-2, keepdims=True)) / np.where(std > 0, std, 1), np.float32(0))
    matrix = median_filter(w, width).mean(axis=0)[first_row:last_row]
    if matrix.shape[0] < 1:
        raise InvalidArgumentError(f"align_tokens: no row left in rows {first_row}:{last_row} of {w.shape[1]}.",
                                   code="align_no_rows", first=first_row, last=last_row, rows=w.shape[1])
    text_indices, time_indices = dtw(-matrix.astype(np.float64))
    jumps = np.pad(np.diff(text_indices), (1, 0), constant_values=1).astype(bool)
    boundaries = time_indices[jumps] / TOKENS_PER_SECOND
    return TokenAlignment(matrix.astype(np.float32), text_indices, time_indices, int(frames),
                          boundaries.astype(np.float64))


def openai_frames(samples: int) -> int:
    """Encoder frames OpenAI aligns for a clip of ``samples`` 16 kHz samples: ``(samples // 160) // 2``, at most
    1500 (``transcribe.py``: ``content_frames = mel.shape[-1] - N_FRAMES`` is ``samples // 160`` mel frames;
    ``find_alignment`` keeps ``num_frames // 2``), and at least 1."""
    return max(1, min(1500, (int(samples) // HOP_LENGTH) // 2))
