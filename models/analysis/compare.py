"""Comparing masks: what a replaced attention mask does to a model's output, and grouped-query layouts.

Everything here works on :class:`models.Analysis` results (numpy) plus the model's config; nothing
touches Streamlit or plotly. Used by the "Masks" page; usable from a notebook::

    import models
    from models import compare
    m = models.load("smollm2-135m")
    cmp = compare.compare_masks(m, "The cat chased the mouse", ["causal", "bidirectional", "sliding_window:3"])
    cmp.runs[1].kl          # (n,) nats: KL(native || bidirectional) of each position's next-token distribution
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from .result import Analysis
from .run import analyze
from ..loading.model import LoadedModel
from ..errors import InvalidArgumentError
from .masks import MaskMode, parse_mask

_EPS = 1e-12


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float64 (max-subtracted, so finite for any finite logits)."""
    x = np.asarray(logits, dtype=np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def next_token_kl(reference_logits: np.ndarray, logits: np.ndarray) -> np.ndarray:
    """KL divergence of each position's next-token distribution from the reference one.

    ``KL(P_ref || P) = Σ_v P_ref(v) · (log P_ref(v) − log P(v))`` (Kullback & Leibler 1951), with
    ``P = softmax(logits)`` per position.

    Args:
        reference_logits, logits: float ``(positions, vocab)`` of the same text (e.g. the native mask and
            a replaced one).

    Returns:
        float64 ``(positions,)`` in nats, ≥ 0 (tiny negative rounding clipped to 0); finite for finite logits.

    Raises:
        InvalidArgumentError: the two arrays differ in shape or are not 2-D.
    """
    ref = np.asarray(reference_logits)
    other = np.asarray(logits)
    if ref.shape != other.shape or ref.ndim != 2:
        raise InvalidArgumentError(f"Logits must both be (positions, vocab) of the same shape, got {ref.shape} and "
                                   f"{other.shape}.",
                                   code="arg_same_shape", name="reference_logits, logits", shape="(positions, vocab)",
                                   first=str(ref.shape), second=str(other.shape))
    log_p = _log_softmax(ref)
    log_q = _log_softmax(other)
    kl = (np.exp(log_p) * (log_p - log_q)).sum(axis=-1)
    return np.maximum(kl, 0.0)


def cosine_drift(reference_hidden: np.ndarray, hidden: np.ndarray) -> np.ndarray:
    """``1 − cos(h_ref, h)`` for each layer and token: how far a hidden state turned away from its
    reference (0 = same direction, 1 = orthogonal, 2 = opposite); ``cos`` is the cosine similarity
    ``a·b / (‖a‖ ‖b‖)``, clipped to [-1, 1].

    Args:
        reference_hidden, hidden: float ``(layers + 1, tokens, hidden)`` (embeddings + every layer),
            as in ``Analysis.hidden_states[stack]``.

    Returns:
        float64 ``(layers + 1, tokens)``. A zero vector against a zero vector counts as no drift; a zero
        vector against a non-zero one as drift 1 (never NaN).

    Raises:
        InvalidArgumentError: the two arrays differ in shape or are not 3-D.
    """
    a = np.asarray(reference_hidden, dtype=np.float64)
    b = np.asarray(hidden, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 3:
        raise InvalidArgumentError(f"Hidden states must both be (layers+1, tokens, hidden) of the same shape, got "
                                   f"{a.shape} and {b.shape}.",
                                   code="arg_same_shape", name="reference_hidden, hidden",
                                   shape="(layers+1, tokens, hidden)",
                                   first=str(a.shape), second=str(b.shape))
    na = np.linalg.norm(a, axis=-1)
    nb = np.linalg.norm(b, axis=-1)
    dot = (a * b).sum(axis=-1)
    both_zero = (na < _EPS) & (nb < _EPS)
    cos = np.where(both_zero, 1.0, dot / np.maximum(na * nb, _EPS))
    return 1.0 - np.clip(cos, -1.0, 1.0)


def empty_rows(matrix: np.ndarray) -> np.ndarray:
    """Boolean ``(n,)``: True for each query (row) of a boolean ``(n, n)`` mask with no allowed key."""
    return cast(np.ndarray, ~np.asarray(matrix, dtype=bool).any(axis=-1))  # numpy's stubs allow a scalar


def native_mask(loaded: LoadedModel, n: int, layer: int = 0, stack: str | None = None) -> np.ndarray:
    """The model's own mask for one self-attention layer, as a boolean ``(n, n)`` matrix (True = allowed).

    Encoder stacks see every token (bidirectional); decoder stacks are causal, and a sliding-window
    layer (Mistral's ``sliding_window``, or ``layer_types[layer] == "sliding_attention"`` for Gemma 3 /
    Qwen2) keeps only the last ``sliding_window`` keys, transformers' ``sliding_window_causal_mask_function``
    (Jiang et al. 2023, §2; see :mod:`models.analysis.masks`). Padding never occurs (one text per call).

    Args:
        n: tokens. layer: 0-based layer (for per-layer ``layer_types``). stack: default ``loaded.mask_stack``;
            any stack other than ``encoder`` is treated as causal self-attention.

    Returns:
        bool numpy ``(n, n)``.
    """
    # MaskMode.matrix is None only for ``native``
    stack = stack or loaded.mask_stack
    if stack == "encoder":
        return cast(np.ndarray, MaskMode("bidirectional").matrix(n))
    cfg = loaded.text_config
    window: Any = getattr(cfg, "sliding_window", None)  # an int when the model has one (checked below)
    layer_types = getattr(cfg, "layer_types", None)
    sliding = False
    if isinstance(window, int) and window > 0:
        if layer_types:
            sliding = 0 <= layer < len(layer_types) and layer_types[layer] == "sliding_attention"
        else:
            sliding = True
    if sliding:
        return cast(np.ndarray, MaskMode("sliding_window", width=int(window)).matrix(n))
    return cast(np.ndarray, MaskMode("causal").matrix(n))


def applied_mask(loaded: LoadedModel, analysis: Analysis, layer: int = 0, stack: str | None = None) -> np.ndarray:
    """The mask one self-attention layer was called with in ``analysis``: bool ``(n, n)``, True = allowed.

    Read from ``analysis.masks`` (recorded by the capture function on the interface path); on the fallback
    path, where no mask is recorded, :func:`native_mask` derived from the config.

    Raises:
        KeyError: ``stack`` (default ``loaded.mask_stack``) is not in ``analysis.attentions``.
    """
    stack = stack or loaded.mask_stack
    recorded = analysis.masks.get(stack)
    if recorded is not None and 0 <= layer < recorded.shape[0]:
        return recorded[layer]
    return native_mask(loaded, analysis.attentions[stack].shape[-1], layer, stack)


@dataclass
class MaskRun:
    """One mask applied to the model's main self-attention stack.

    Attributes:
        mask: the mask as given (``"causal"``, ``"sliding_window:3"``, or ``"custom"`` for a matrix).
        matrix: boolean ``(n, n)``, True where query ``i`` may attend key ``j``.
        analysis: the :class:`Analysis` of that run (``hidden_states`` always kept; ``logits`` when the
            model has a prediction head).
        kl: float64 ``(n,)`` KL(native || this) of each position's next-token distribution in nats
            (None for models without logits).
        drift: float64 ``(layers + 1, n)`` cosine drift of the main stack's hidden states from native.
    """

    mask: str
    matrix: np.ndarray
    analysis: Analysis
    kl: np.ndarray | None
    drift: np.ndarray

    @property
    def empty_rows(self) -> np.ndarray:
        """Boolean ``(n,)``: queries with no allowed key (their attention rows are all zero)."""
        return empty_rows(self.matrix)

    @property
    def layer_drift(self) -> np.ndarray:
        """float64 ``(layers + 1,)``: mean cosine drift over tokens, per layer (index 0 = embeddings)."""
        return self.drift.mean(axis=-1)


@dataclass
class MaskComparison:
    """The native run plus one :class:`MaskRun` per compared mask, all on the same tokens.

    Attributes:
        stack: the self-attention stack the masks replace (``loaded.mask_stack``).
        native: the run with the model's own mask (``hidden_states`` kept; ``logits`` with a head).
        native_matrices: one bool ``(n, n)`` matrix per layer of ``stack``: the mask that layer applied
            (:func:`applied_mask`).
        runs: one :class:`MaskRun` per mask, in the order given.
    """

    stack: str
    native: Analysis
    native_matrices: list[np.ndarray]
    runs: list[MaskRun] = field(default_factory=list)


def run_mask(loaded: LoadedModel, text: str, mask, native: Analysis, *, max_tokens: int | None = None) -> MaskRun:
    """Run ``text`` with ``mask`` on the main self-attention stack and measure its effect against ``native``.

    Args:
        loaded: the model (interface capture path; masks cannot be replaced on the fallback path).
        text: the same text ``native`` was computed from.
        mask: anything :func:`models.analysis.masks.parse_mask` accepts (a boolean ``(n, n)`` array for custom).
        native: ``analyze(loaded, text, hidden_states=True, keep_logits=True, max_tokens=...)``.
        max_tokens: default ``native.max_tokens``.

    Returns:
        :class:`MaskRun`; for ``native`` its ``matrix`` is :func:`native_mask` of layer 0.

    Raises:
        InvalidMaskError: bad mask or wrong custom shape. UnsupportedOperationError: fallback path.
        EmptyTextError etc. as :func:`models.analyze`.
    """
    stack = loaded.mask_stack
    mode = parse_mask(mask)
    n = native.attentions[stack].shape[-1]
    matrix = mode.matrix(n)
    if matrix is None:
        matrix = native_mask(loaded, n, 0, stack)
    result = analyze(loaded, text, target=native.target, mask=mode,
                     max_tokens=max_tokens or native.max_tokens, hidden_states=True,
                     keep_logits=native.logits is not None)
    kl = None
    if native.logits is not None and result.logits is not None:
        kl = next_token_kl(native.logits, result.logits)
    drift = cosine_drift(native.hidden_states[stack], result.hidden_states[stack])
    return MaskRun(mask=str(mode), matrix=matrix, analysis=result, kl=kl, drift=drift)


def compare_masks(loaded: LoadedModel, text: str, masks: list, *, target: str | None = None,
                  max_tokens: int | None = None) -> MaskComparison:
    """Run ``text`` natively and once per mask; see :func:`run_mask` for what is measured.

    Args:
        masks: list of masks (see :func:`models.analysis.masks.parse_mask`).
        target: decoder text for encoder-decoders (generated once when None, then reused by every run).
        max_tokens: as for :func:`models.analyze`.

    Returns:
        :class:`MaskComparison`.

    Raises:
        EmptyTextError, InvalidMaskError, UnsupportedOperationError (as :func:`models.analyze`).
    """
    stack = loaded.mask_stack
    native = analyze(loaded, text, target=target, hidden_states=True, keep_logits=loaded.head != "none",
                     max_tokens=max_tokens)
    layers = native.attentions[stack].shape[0]
    out = MaskComparison(stack=stack, native=native,
                         native_matrices=[applied_mask(loaded, native, layer, stack) for layer in range(layers)])
    for mask in masks:
        out.runs.append(run_mask(loaded, text, mask, native, max_tokens=native.max_tokens))
    return out


# --------------------------------------------------------------------------------- encoder-decoders


def produced_word_rows(analysis: Analysis) -> list[tuple[str, tuple[int, ...]]]:
    """For each target word of an encoder-decoder analysis, the decoder positions that *produce* it.

    The decoder reads the target shifted right by one start token (``target_tokens[0]``), so the query
    at position ``i`` predicts the token at input position ``i + 1``: a word made of target tokens
    ``(a, b)`` is produced at query positions ``(a − 1, b − 1)``. Use these rows of the cross-attention
    ``(layers, heads, target_len, source_len)`` for a word alignment (Bahdanau et al. 2015, §3.1, eq. 6:
    the alignment of target word ``y_i`` is the attention weights ``α_ij`` while generating it).

    Returns:
        ``[(word text, query positions), ...]`` in target order; empty for other families.
    """
    if analysis.family != "encoder-decoder" or not analysis.target_words:
        return []
    rows = []
    for word in analysis.target_words:
        positions = tuple(i - 1 for i in word.tokens if i >= 1)
        if positions:
            rows.append((word.text, positions))
    return rows


def produced_tokens(analysis: Analysis, end_label: str = "</s>") -> list[tuple[str, bool]]:
    """For each decoder position of an encoder-decoder analysis, the token it predicts: ``(label,
    special)``. Position ``i`` reads ``target_tokens[i]`` and predicts ``target_tokens[i + 1]``; the
    last position predicts the end of the text (``(end_label, True)``: pass the tokenizer's
    ``eos_token``, e.g. Whisper's ``<|endoftext|>``).

    Returns:
        ``target_len`` pairs; empty for other families.
    """
    if analysis.family != "encoder-decoder" or not analysis.target_tokens:
        return []
    targets = analysis.target_tokens
    out = [(tok.label, tok.special) for tok in targets[1:]]
    out.append((end_label, True))
    return out
