"""Speech through Whisper: audio in, encoder / decoder / cross-attention out.

Whisper (Radford et al. 2022, "Robust Speech Recognition via Large-Scale Weak Supervision", §2.2)
turns 16 kHz audio into an 80-bin log-mel spectrogram (25 ms window, 10 ms hop) always padded to 30 s
(3000 mel frames); two convolutions (the second with stride 2) make 1500 encoder frames of 20 ms. The
decoder reads a prompt ``<|startoftranscript|> <|lang|> <|transcribe|> <|notimestamps|>`` and then the
text, attending to the encoder frames through cross-attention.

:func:`analyze_audio` runs the full 30 s window (the model refuses anything else) and then crops every
attention array to the frames that cover the clip. Attention that went to the padding frames is not
dropped: it is summed into one extra key column, the special pseudo-token ``<|padding|>``, so each row
still sums to 1 and the share spent on silence stays visible.

WAV files are read with the standard library's ``wave`` module and resampled with numpy only
(:mod:`models.speech.wav`); Whisper's prompt tokens and alignment heads are :mod:`models.speech.whisper_tokens`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Iterable
from typing import cast

import numpy as np
import torch

from .. import capture, checks
from ..analysis import KEEP_BYTES, Analysis, attach_stacks
from ..analysis.heads import heads_to_gates, validate_heads
from ..analysis.outputs import topk
from ..analysis.tokens import Token, Word, group_words
from ..errors import InvalidAudioError, ModelOutOfMemoryError
from ..loading.model import LoadedModel
from ..analysis.store import AttentionStack, Replay
from .wav import SAMPLE_RATE, read_wav, resample, write_wav  # noqa: F401  (models.audio.read_wav ... as before)
from .checked import FRAME_SECONDS, WINDOW_SECONDS, checked_arguments
from .whisper_tokens import _UNICODE_TO_BYTE, _check_whisper, alignment_heads, language_token, prompt_ids  # noqa: F401

HOP_SECONDS = 0.01           # one mel frame (hop of 160 samples)
PADDING_PIECE = "<|padding|>"


@dataclass
class AudioAnalysis:
    """The result of :func:`analyze_audio`.

    Attributes:
        analysis: the :class:`models.analysis.Analysis`. ``tokens`` are the encoder frames (one per
            20 ms, labelled with their start time, e.g. ``"0.20s"``; ``id`` is the frame index), plus,
            when the clip is shorter than 30 s and ``padding="column"``, a last special token
            ``<|padding|>`` standing for all padding frames (``id`` -1). ``target_tokens`` are the decoder
            inputs: the four prompt tokens (special) and the transcript's tokens. ``attentions``:
            ``encoder`` (frames x frames), ``decoder`` (target x target), ``cross`` (target x frames),
            float32 ``(layers, heads, query, key)``, each row summing to 1.
        spectrogram: float32 ``(mel_bins, 2 * frames)`` (80 bins for whisper-base): Whisper's normalised
            log-mel input (``(max(log10(mel), max - 8) + 4) / 4``, OpenAI ``whisper/audio.py``
            ``log_mel_spectrogram``, as computed by ``WhisperFeatureExtractor``) for the cropped span,
            10 ms per column.
        frame_seconds: seconds per encoder frame (0.02).
        transcript: the decoded text (generated, or the ``target`` given), stripped.
        duration_seconds: length of the clip analysed (after resampling, at most 30 s).
        frames: encoder frames kept (``ceil(duration / 0.02)``, at most 1500).
        padding_frames: encoder frames that only saw Whisper's zero padding (1500 - ``frames``).
        language: the language code forced in the prompt (``"en"``).
        note: one sentence that says how the encoder was cropped.
    """

    analysis: Analysis
    spectrogram: np.ndarray
    frame_seconds: float
    transcript: str
    duration_seconds: float
    frames: int
    padding_frames: int
    language: str
    note: str


# ----------------------------------------------------------------------------- audio files


# ----------------------------------------------------------------------------- helpers


def _text_tokens(tok, ids: list[int], text_offset: int = 0) -> tuple[str, list[Token]]:
    """Text of byte-level token ids and one :class:`Token` per id with exact character spans.

    A character split over two tokens belongs to the token that completes it (the first piece gets
    ``text == ""``). Leading spaces are left out of a token's span (``" cat"`` covers ``"cat"``), as the
    fast tokenizer's ``trim_offsets`` does. The returned text is stripped of leading whitespace.
    """
    pieces = tok.convert_ids_to_tokens(ids)
    buf = b""
    ends: list[int] = []
    for piece in pieces:
        buf += bytes(_UNICODE_TO_BYTE.get(ch, 0) for ch in piece) if piece is not None else b""
        ends.append(len(buf.decode("utf-8", errors="ignore")))
    full = buf.decode("utf-8", errors="replace")
    lead = len(full) - len(full.lstrip())
    text = full[lead:]
    tokens, start = [], 0
    for tid, piece, end in zip(ids, pieces, ends):
        s, e = max(0, start - lead), max(0, end - lead)
        piece_text = text[s:e]
        if piece_text.strip():  # like the fast tokenizer's trim_offsets: the leading space is not the token's
            s += len(piece_text) - len(piece_text.lstrip())
        tokens.append(Token(text[s:e], s, e, False, int(tid), piece or ""))
        start = end
    return text, tokens


def _frame_tokens(n: int, word_frames: int, padding: bool) -> tuple[str, list[Token], list[Word]]:
    """Pseudo-text ``"0.00s 0.02s ..."`` with one token per encoder frame, words of ``word_frames``
    frames, and the ``<|padding|>`` special token when ``padding``."""
    labels = [f"{i * FRAME_SECONDS:.2f}s" for i in range(n)]
    tokens: list[Token] = []
    pos = 0
    for i, label in enumerate(labels):
        tokens.append(Token(label, pos, pos + len(label), False, i, label))
        pos += len(label) + 1
    text = " ".join(labels)
    words = []
    for s in range(0, n, word_frames):
        group = tokens[s : s + word_frames]
        words.append(Word(group[0].text, group[0].start, group[-1].end, 0, tuple(range(s, s + len(group)))))
    if padding:
        tokens.append(Token("", len(text), len(text), True, -1, PADDING_PIECE))
    return text, tokens, words


def _crop(w: torch.Tensor, n: int, crop_queries: bool, crop_keys: bool, padding: bool) -> torch.Tensor:
    """Crop one layer's weights ``(heads, q, k)`` to the first ``n`` frames on the chosen axes.

    With ``padding``: the keys beyond ``n`` are summed into one extra last column, and (for queries)
    the rows beyond ``n`` are averaged into one extra last row, so rows keep summing to 1. Without:
    the kept keys are renormalised to sum to 1.
    """
    w = w.float()
    if crop_keys:
        kept, rest = w[..., :n], w[..., n:].sum(dim=-1, keepdim=True)
        w = torch.cat([kept, rest], dim=-1) if padding else kept / kept.sum(dim=-1, keepdim=True).clamp_min(1e-12)
    if crop_queries:
        head = w[:, :n]
        if padding and w.shape[1] > n:
            head = torch.cat([head, w[:, n:].mean(dim=1, keepdim=True)], dim=1)
        w = head
    return w


# ----------------------------------------------------------------------------- analysis


def analyze_audio(
    loaded: LoadedModel,
    audio: np.ndarray,
    sample_rate: int,
    *,
    language: str = "en",
    target: str | None = None,
    heads_off: Iterable | None = None,
    max_new_tokens: int = 32,
    top_k: int = 10,
    padding: str = "column",
    word_seconds: float = 0.1,
    keep: bool | None = None,
) -> AudioAnalysis:
    """Transcribe a clip with Whisper and capture every encoder, decoder and cross-attention head.

    Steps: resample to 16 kHz; log-mel features padded to 30 s (``WhisperFeatureExtractor``); unless
    ``target`` is given, a greedy transcript (``num_beams=1``, Whisper's suppressed tokens) with the
    language and the ``transcribe`` task forced in the prompt; then one forward pass of prompt +
    transcript under :func:`models.capture.rerun` (heads in ``heads_off`` switched off, as in
    :func:`models.analysis.analyze`: the transcript itself comes from the intact model); finally every
    array is cropped from 1500 encoder frames to ``ceil(duration / 0.02)``.

    Args:
        loaded: a Whisper model from :func:`models.load` (``"whisper-base"``).
        audio: float32 ``(samples,)`` mono in [-1, 1]; ``(samples, channels)`` is averaged to mono.
        sample_rate: Hz of ``audio``.
        language: language forced in the prompt: code (``"tr"``), name (``"turkish"``) or ``"<|tr|>"``.
        target: transcript to analyse instead of generating one.
        heads_off: ``(stack, layer, head)`` triples to switch off (stacks ``encoder``, ``decoder``,
            ``cross``): the head's output is zeroed (Michel et al. 2019, head mask ξ_h = 0).
        max_new_tokens: most text tokens generated.
        top_k: predictions kept per decoder position (``analysis.next_token``).
        padding: ``"column"``: attention to the padding frames is summed into a last ``<|padding|>``
            key (and the padding frames' encoder rows averaged into a last query row);
            ``"renormalize"``: dropped, and each cropped row rescaled to sum to 1.
        word_seconds: the encoder-side ``words`` group this many seconds of frames.
        keep: hold every cropped weight (True), compute them when indexed (False), or decide by size
            (None: kept while the cropped encoder weights take at most
            :data:`models.analysis.KEEP_BYTES`, about 8 s of audio on whisper-base). Weights that are not
            kept come from the same forward pass run again, cropped block by block the same way
            (:class:`models.analysis.store.AttentionStack`; the ``<|padding|>`` row's mean may differ from the kept
            one in the last bits of float32), and the passes that keep nothing run the fused sdpa kernel.

    Returns:
        :class:`AudioAnalysis`. ``analysis.loss`` is the mean cross-entropy (nats) of the transcript's
        tokens and the final ``<|endoftext|>``; ``analysis.truncated`` counts encoder frames beyond
        30 s that were cut.

    Raises:
        UnsupportedOperationError: ``loaded`` is not a Whisper model, or heads that cannot be switched
            off on the fallback path.
        InvalidAudioError: empty or non-finite audio, a non-positive ``sample_rate``, or a bad ``padding``
            value.
        InvalidArgumentError: ``keep`` not a bool or None; ``loaded`` not a loaded model; ``language`` not a
            string; a number out of the range :func:`_counts` says; a ``target`` with a lone surrogate.
        UnknownLanguageError: unknown ``language``.
        InvalidHeadError: bad ``heads_off``.
        EmptyTextError: a ``target`` with no text.
        ModelOutOfMemoryError: the forward pass ran out of memory.
    """
    x, sample_rate, language, target, max_new_tokens, top_k, word_seconds = checked_arguments(
        loaded, audio, sample_rate, language, target, max_new_tokens, top_k, padding, word_seconds, keep)
    x = resample(x, int(sample_rate), SAMPLE_RATE)
    max_samples = int(WINDOW_SECONDS * SAMPLE_RATE)
    cut_samples = max(0, x.size - max_samples)
    x = x[:max_samples]
    duration = x.size / SAMPLE_RATE
    total = int(loaded.model.config.max_source_positions)  # 1500
    n = max(1, min(total, math.ceil(round(duration / FRAME_SECONDS, 6))))
    keep_pad = padding == "column" and n < total
    heads_off = validate_heads(loaded, () if heads_off is None else heads_off)
    gates = heads_to_gates(loaded, heads_off)
    prompt = prompt_ids(loaded, language)
    tok = loaded.tokenizer

    feats = loaded.processor.feature_extractor(x, sampling_rate=SAMPLE_RATE, return_tensors="np")["input_features"]
    features = torch.from_numpy(np.asarray(feats)).to(device=loaded.device, dtype=loaded.dtype)

    eot = int(loaded.model.generation_config.eos_token_id)
    limit = int(loaded.model.config.max_target_positions) - len(prompt)
    model, fallback = loaded.model, loaded.capture_path == "fallback"
    n_enc = n + (1 if keep_pad else 0)
    enc_layers, enc_heads = loaded.stacks.get("encoder", (0, 0))
    keep_all = fallback or (enc_layers * enc_heads * n_enc * n_enc * 4 <= KEEP_BYTES if keep is None else bool(keep))
    record, fused = keep_all and not fallback, not keep_all and loaded.sdpa_ok
    attentions: dict = {}

    def oom(exc):
        raise ModelOutOfMemoryError(f"Out of memory running '{loaded.name}' on {duration:.1f} s of audio.",
                                    code="oom_audio", model=loaded.name, seconds=round(duration, 1)) from exc

    try:
        # The encoder runs once (30 s, 1500 frames); its output feeds generation and the decoder pass.
        with capture.rerun(loaded, gates=gates, record=record, oom=oom, fused=fused) as state:
            encoded = model.get_encoder()(features, output_attentions=fallback, return_dict=True)
        if keep_all:
            layers = _layer_weights(loaded, state, encoded, ("encoder",))
            attentions["encoder"] = _stack([_crop(w, n, True, True, keep_pad) for w in layers.get("encoder", [])])
            del layers
        del state
        if fallback:
            encoded.attentions = None
        if target is None:
            intact = encoded
            if any(stack == "encoder" for stack, _ in gates):  # the transcript comes from the intact model
                with torch.no_grad():
                    intact = model.get_encoder()(features, return_dict=True)
            text_ids = _greedy_text(loaded, intact, language, min(max_new_tokens, limit))
            del intact
        else:
            text_ids = tok(" " + target.strip(), add_special_tokens=False)["input_ids"][:limit]
        transcript, t_tokens = _text_tokens(tok, text_ids)

        dec_ids = prompt + text_ids
        labels = prompt[1:] + text_ids + [eot]
        with capture.rerun(loaded, gates=gates, record=record, oom=oom, fused=fused) as state:
            outputs = model(
                encoder_outputs=encoded, decoder_input_ids=torch.tensor([dec_ids], device=loaded.device),
                output_attentions=fallback, return_dict=True,
            )
    except torch.OutOfMemoryError as exc:  # outside the re-runs: the intact encoder, the transcript's generation
        oom(exc)

    if keep_all:
        layers = _layer_weights(loaded, state, outputs, ("decoder", "cross"))
        attentions["decoder"] = _stack(layers.get("decoder", []))
        attentions["cross"] = _stack([_crop(w, n, False, True, keep_pad) for w in layers.get("cross", [])])
        del layers
    else:
        call = {"input_features": features, "decoder_input_ids": torch.tensor([dec_ids], device=loaded.device),
                "use_cache": False}
        # a Replay by what it does (run): the stacks take it as one
        replay = cast(Replay, _CroppedReplay(Replay(loaded, call, gates, {}, capture.state.CHUNK_BYTES), n,
                                             keep_pad))
        t = len(dec_ids)
        shapes = {"encoder": (n_enc, n_enc), "decoder": (t, t), "cross": (t, n_enc)}
        attentions = {stack: AttentionStack(stack, (layers_, heads_) + shapes[stack], replay=replay)
                      for stack, (layers_, heads_) in loaded.stacks.items()}
    logits = outputs.logits[0]
    label_t = torch.tensor(labels, device=logits.device)
    first = len(prompt) - 1  # the <|notimestamps|> position predicts the first text token
    loss = float(torch.nn.functional.cross_entropy(logits[first:].float(), label_t[first:]))
    next_token = topk(logits, top_k, tok)
    del state, outputs

    text, f_tokens, f_words = _frame_tokens(n, max(1, round(word_seconds / FRAME_SECONDS)), keep_pad)
    specials = tok.convert_ids_to_tokens(prompt)
    target_tokens = [Token("", 0, 0, True, int(i), p) for i, p in zip(prompt, specials)] + t_tokens
    target_words = group_words(target_tokens, [transcript])
    truncated = math.ceil(round(cut_samples / SAMPLE_RATE / FRAME_SECONDS, 6))
    analysis = Analysis(
        model=loaded.name, family=loaded.family, capture_path=loaded.capture_path, text=text,
        tokens=f_tokens, words=f_words, attentions=attentions, target=transcript, target_tokens=target_tokens,
        target_words=target_words, truncated=truncated, max_tokens=total, next_token=next_token, loss=loss,
        heads_off=heads_off, mask="native", kv_heads=None,
    )
    attach_stacks(analysis, attentions)  # held (cropped) weights, statistics and overview when read
    spectrogram = np.ascontiguousarray(np.asarray(feats, dtype=np.float32)[0, :, : 2 * n])
    return AudioAnalysis(
        analysis=analysis, spectrogram=spectrogram, frame_seconds=FRAME_SECONDS, transcript=transcript,
        duration_seconds=duration, frames=n, padding_frames=total - n, language=language,
        note=_window_note(n, total, keep_pad, cut_samples),
    )


def _window_note(n: int, total: int, keep_pad: bool, cut_samples: int) -> str:
    """What :func:`analyze_audio` shows of Whisper's 30 s window: ``n`` of ``total`` encoder frames kept, the padding
    frames summed in one column (``keep_pad``) or left out, and ``cut_samples`` samples cut at the end."""
    pad = total - n
    if pad == 0:
        note = f"The clip fills Whisper's whole 30 s window: all {total} encoder frames are shown."
    elif keep_pad:
        note = (f"Whisper always encodes 30 s; the encoder is cropped to the first {n} of {total} frames "
                f"({n * FRAME_SECONDS:.2f} s). Attention to the {pad} padding frames is summed in the last "
                f"column '{PADDING_PIECE}'.")
    else:
        note = (f"Whisper always encodes 30 s; the encoder is cropped to the first {n} of {total} frames "
                f"({n * FRAME_SECONDS:.2f} s). Attention to the {pad} padding frames is left out and each "
                "row renormalised.")
    if cut_samples:
        note += f" The audio was longer than 30 s: {cut_samples / SAMPLE_RATE:.2f} s at the end were cut."
    return note


def _greedy_text(loaded: LoadedModel, encoded, language: str, max_new_tokens: int) -> list[int]:
    """Greedy transcript token ids (text only: ids below ``<|endoftext|>``) from the encoder output
    ``encoded``, with the language and the ``transcribe`` task forced
    (``WhisperForConditionalGeneration.generate``, which also applies Whisper's suppressed tokens)."""
    lang_piece = loaded.tokenizer.convert_ids_to_tokens([language_token(loaded, language)])[0]
    with torch.no_grad():
        out = loaded.model.generate(
            encoder_outputs=encoded, language=lang_piece, task="transcribe", max_new_tokens=max(1, max_new_tokens),
            do_sample=False, num_beams=1, return_timestamps=False,
        )
    seq = out.sequences if hasattr(out, "sequences") else out
    eot = int(loaded.model.generation_config.eos_token_id)
    return [int(i) for i in seq[0].tolist() if int(i) < eot]


def _layer_weights(loaded: LoadedModel, state, outputs, stacks: tuple[str, ...]) -> dict[str, list[torch.Tensor]]:
    """``stack -> [layer weights (heads, q, k)]`` of batch row 0, from the capture state (interface
    path) or from the model outputs (fallback path)."""
    per_stack: dict[str, list[torch.Tensor]] = {}
    if loaded.capture_path == "fallback":
        names = {"encoder": ("attentions", "encoder_attentions"), "decoder": ("decoder_attentions",),
                 "cross": ("cross_attentions",)}
        for stack in stacks:
            for attr in names[stack]:
                for w in getattr(outputs, attr, None) or ():
                    per_stack.setdefault(stack, []).append(w[0])
    else:
        for site in loaded.sites:
            if site.stack in stacks:
                w = state.weights.pop((site.stack, site.layer), None)
                if w is not None:
                    per_stack.setdefault(site.stack, []).append(w[0])
    return per_stack


class _CroppedReplay:
    """A :class:`models.analysis.store.Replay` whose blocks are cropped to the first ``n`` encoder frames as
    :func:`_crop` crops a whole layer: encoder keys and cross-attention keys (summed into a padding column,
    or renormalised), encoder queries (the padding frames' rows averaged into one last row)."""

    CROPS = {"encoder": (True, True), "cross": (False, True), "decoder": (False, False)}  # (queries, keys)

    def __init__(self, inner: Replay, n: int, padding: bool):
        self.inner, self.n, self.padding = inner, n, padding

    def run(self, want: set, visit) -> None:
        """As :meth:`models.analysis.store.Replay.run`, in cropped coordinates.

        Raises:
            RuntimeError: a block of a cropped stack that does not hold whole rows (the encoder and
                cross-attention have no mask, so every block does); ModelOutOfMemoryError as ``Replay.run``.
        """
        n = self.n
        pads: dict[tuple[str, int], tuple[torch.Tensor, int]] = {}  # (stack, layer) -> (row sums, rows)

        def cropped(stack, layer, q0, k0, w):
            crop_q, crop_k = self.CROPS[stack]
            if crop_k:
                if k0 != 0 or w.shape[-1] < n:
                    raise RuntimeError(f"{stack} layer {layer}: a block without whole rows cannot be cropped")
                w, k0 = _crop(w, n, False, True, self.padding), 0
            if not crop_q:
                visit(stack, layer, q0, k0, w)
                return
            rows = max(0, min(w.shape[1], n - q0))
            if rows:
                visit(stack, layer, q0, k0, w[:, :rows])
            if self.padding and rows < w.shape[1]:
                total, count = pads.get((stack, layer), (0.0, 0))
                pads[(stack, layer)] = (total + w[:, rows:].float().sum(dim=1, keepdim=True), count + w.shape[1] - rows)

        self.inner.run(want, cropped)
        for (stack, layer), (total, count) in pads.items():
            visit(stack, layer, n, 0, total / count)


def _stack(layers: list[torch.Tensor]) -> np.ndarray:
    """Layers ``(heads, q, k)`` -> float32 numpy ``(layers, heads, q, k)``."""
    return torch.stack([w.float() for w in layers]).cpu().numpy()


def cross_attention_peaks(result: AudioAnalysis, heads: Iterable[tuple[int, int]] | None = None) -> np.ndarray:
    """For each decoder position, the encoder frame its cross-attention peaks on.

    The cross-attention maps of ``heads`` (``(layer, head)`` pairs; default: every head of the last
    half of the layers) are averaged, and the argmax is taken over the speech frames only (never the
    ``<|padding|>`` column).

    Returns:
        int64 ``(target_len,)`` frame indices; multiply by ``result.frame_seconds`` for seconds.

    Raises:
        IndexOutOfRangeError (an IndexError): a ``(layer, head)`` outside the cross-attention array.
    """
    cross = result.analysis.attentions["cross"]  # (layers, heads, T, frames [+1])
    if heads is None:
        layers = cross.shape[0]
        heads = [(layer, h) for layer in range(layers // 2, layers) for h in range(cross.shape[1])]
    avg = cross.heads(heads).mean(axis=0)[:, : result.frames]
    return avg.argmax(axis=-1).astype(np.int64)


def analyze_wav(loaded: LoadedModel, path: str | Path, **kwargs) -> AudioAnalysis:
    """:func:`analyze_audio` on a WAV file (read with :func:`read_wav`); keyword arguments pass through.

    Raises:
        InvalidAudioError: an unreadable or unsupported WAV file (a path no file system can name included);
            InvalidArgumentError: ``path`` not a string or a path; and everything :func:`analyze_audio` raises.
    """
    checks.loaded_model(loaded)
    path = checks.instance("path", path, (str, Path), "a WAV file's path")
    try:
        audio, rate = read_wav(path)
    except UnicodeEncodeError as exc:  # a lone surrogate: no file system can name it
        raise InvalidAudioError(f"Cannot read {path!r} as a PCM WAV file: {exc}", code="wav_unreadable",
                                path=checks.shown(path), detail=str(exc)) from None
    return analyze_audio(loaded, audio, rate, **kwargs)
