"""Positions (the Positions lesson, ``views/positions.py``): :func:`sinusoidal_encoding` (Vaswani et al. 2017,
§3.5), :func:`rope_shift_check` and :func:`rope_dot_grid` on the model's own rotary embedding (Su et al.
2021), :func:`alibi_slopes` / :func:`alibi_bias` (Press et al. 2021, §3), :func:`word_order_experiment`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import torch


from .. import checks
from ..analysis import Analysis, analyze
from ..analysis.tokens import Word
from ..anatomy.rotary import find_rotary
from ..errors import InvalidArgumentError, UnsupportedOperationError, WordMismatchError
from ..loading.model import LoadedModel
from .qkv import apply_rope

def sinusoidal_encoding(n: int, d: int, base: float = 10000.0) -> np.ndarray:
    """The fixed positional encoding of Vaswani et al. 2017, §3.5.

    ``PE[pos, 2i] = sin(pos / base^(2i/d))``, ``PE[pos, 2i+1] = cos(pos / base^(2i/d))``.

    Args:
        n: positions. d: dimensions (an odd ``d`` ends with a sine column). base: 10000 in the paper.

    Returns:
        float32 ``(n, d)`` in [-1, 1].

    Raises:
        InvalidArgumentError: n < 1 or d < 2 (or not whole numbers), base not > 0.
        AttentionTooLargeError: the table above :data:`models.checks.MAX_BYTES`.
    """
    n, d = checks.whole("n", n, 1), checks.whole("d", d, 2)
    base = checks.number("base", base, 0.0, above=True)
    checks.cells("positional encoding", n, d)
    pos = np.arange(n, dtype=np.float64)[:, None]
    i = np.arange(0, d, 2, dtype=np.float64)[None, :]
    angle = pos / base ** (i / d)
    pe = np.zeros((n, d))
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle[:, : d // 2])
    return pe.astype(np.float32)


@checks.needs_model
def position_kind(loaded: LoadedModel) -> str:
    """How the model encodes positions: ``rope`` (Su et al. 2021), ``alibi`` (Press et al. 2021),
    ``relative`` (T5 bias, Raffel et al. 2020), ``sinusoidal`` (Vaswani et al. 2017, §3.5) or ``learned``
    (absolute position embeddings, as BERT and GPT-2; also the default for any other model type)."""
    cfg = loaded.config
    # RoPE found by what a module computes; GPT-J and CodeGen rotate inside their attention layers from a
    # sin/cos buffer without a module to call (their ``rotary_dim``): the lesson uses textbook tables there
    if find_rotary(loaded) is not None or getattr(loaded.text_config, "rotary_dim", None):
        return "rope"
    if cfg.model_type in ("bloom", "mpt") or getattr(cfg, "alibi", False):
        return "alibi"
    if cfg.model_type in ("t5", "mt5", "umt5", "longt5"):
        return "relative"
    if cfg.model_type in ("marian", "whisper") or getattr(cfg, "sinusoidal_pos_embds", False):
        return "sinusoidal"
    return "learned"


@checks.needs_model
def rotary_module(loaded: LoadedModel):
    """The model's rotary embedding module, found by what it computes (:func:`models.anatomy.rotary.find_rotary`:
    a module answering ``(cos, sin)`` rotation tables, whatever its buffers are called), or None."""
    rot = find_rotary(loaded)
    return rot.module if rot is not None else None


@checks.needs_model
def rope_tables(loaded: LoadedModel, positions: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin float32 CPU tensors ``(len(positions), rotary_dim)`` at the given positions, from the
    loaded model's own rotary embedding (``cos(pos·θ^(-2i/d))``, θ = ``rope_theta``; Su et al. 2021, eq. 15;
    scaled RoPE variants use whatever the module computes; Gemma 3's per-layer-type module gives its full
    attention layers' table).

    Raises:
        UnsupportedOperationError: the model has no rotary embedding.
    """
    rot = find_rotary(loaded)
    if rot is None:
        raise UnsupportedOperationError(f"Model '{loaded.name}' does not use RoPE (no rotary embedding).",
                                        code="no_rope", model=loaded.name)
    return rot.tables(positions, loaded.device)


@dataclass(frozen=True)
class RopeShiftCheck:
    """q·k of two fixed vectors rotated to positions (m, n) and to (m + t, n + t).

    Su et al. 2021, eq. 16: ``(R_m q)·(R_n k) = q·R_{n-m} k`` depends on n − m only.
    ``dot_unrotated`` is q·k with no rotation, for comparison.

    Attributes:
        m, n: query and key positions (tokens). t: the shift added to both.
        dot: ``(R_m q)·(R_n k)``. dot_shifted: ``(R_{m+t} q)·(R_{n+t} k)``. abs_diff: ``|dot - dot_shifted|``.
        theta: RoPE base θ used (the model's, or the textbook one; None if the model's config names none).
        head_dim: rotary dimensions used.
    """

    m: int
    n: int
    t: int
    dot: float
    dot_shifted: float
    dot_unrotated: float
    abs_diff: float
    theta: float | None
    head_dim: int


def _fixed_vectors(head_dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(head_dim, generator=g), torch.randn(head_dim, generator=g)


@checks.needs_model
def head_dim_of(loaded: LoadedModel) -> int:
    """Width of one head's query/key vectors (``head_dim`` of the text config, else hidden size ÷ heads)."""
    cfg = loaded.text_config
    return int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)


@checks.needs_model
def rope_theta(loaded: LoadedModel, layer_type: str | None = None) -> float | None:
    """The model's RoPE base θ (``rope_parameters["rope_theta"]`` or ``rope_theta``), or None. With per-layer-type
    parameters (Gemma 3: ``{"full_attention": {...}, "sliding_attention": {...}}``) the θ of ``layer_type``,
    by default the layer type whose table :func:`rope_tables` returns (full attention's)."""
    cfg = loaded.text_config
    params = getattr(cfg, "rope_parameters", None) or {}
    if isinstance(params, dict) and "rope_theta" in params:
        return float(params["rope_theta"])
    if isinstance(params, dict):  # per layer type
        if layer_type is None:
            rot = find_rotary(loaded)
            layer_type = rot.layer_type if rot is not None else None
        picked = params.get(layer_type) if layer_type is not None else None
        for value in ([picked] if isinstance(picked, dict) else []) + list(params.values()):
            if isinstance(value, dict) and "rope_theta" in value:
                return float(value["rope_theta"])
    value = getattr(cfg, "rope_theta", None)
    return float(value) if value else None


@checks.needs_model
def rope_layer_types(loaded: LoadedModel) -> dict[str, float | None]:
    """``{layer type: θ}`` for a rotary embedding with one table per layer type (Gemma 3: full attention
    θ = 1,000,000, sliding-window attention θ = 10,000); empty for one table for every layer."""
    rot = find_rotary(loaded)
    if rot is None or len(rot.layer_types) < 2:
        return {}
    return {kind: rope_theta(loaded, kind) for kind in rot.layer_types}


MAX_ROPE_DIM = 1 << 16


def _rope_args(loaded: LoadedModel | None, head_dim: int, theta: float, positions: int) -> tuple[int, float]:
    """``(head_dim, theta)`` checked for a RoPE table of ``positions`` rows: ``loaded`` None or a loaded model,
    ``head_dim`` an even whole number in [2, 65536], ``theta`` in [1, 1e12] (below 1 a frequency passes 1 rad per
    position; Su et al. 2021 and every model use 10,000 or more), the table within
    :data:`models.checks.MAX_BYTES`.

    Raises:
        InvalidArgumentError (``arg_model``, ``arg_whole``, ``arg_number``), AttentionTooLargeError.
    """
    if loaded is not None:
        checks.loaded_model(loaded)
    head_dim = checks.whole("head_dim", head_dim, 2, MAX_ROPE_DIM)
    if head_dim % 2:
        raise InvalidArgumentError(f"head_dim must be even (RoPE rotates pairs of dimensions), got {head_dim}.",
                                   code="arg_whole", name="head_dim", range="even, [2, 65536]", value=head_dim)
    theta = checks.number("theta", theta, 1.0, 1e12)
    checks.cells("RoPE table", positions, head_dim)
    return head_dim, theta


def _rope_tables_for(loaded: LoadedModel | None, positions: Sequence[int], head_dim: int, theta: float):
    """The model's rotary tables when it has a rotary embedding, else textbook RoPE tables."""
    if loaded is not None and rotary_module(loaded) is not None:
        return rope_tables(loaded, positions)
    cos, sin = textbook_rope_tables(max(positions) + 1, head_dim, theta)
    idx = torch.tensor(list(positions))
    return cos[idx], sin[idx]


def rope_shift_check(loaded: LoadedModel | None, m: int = 2, n: int = 5, t: int = 7, seed: int = 0, *,
                     head_dim: int = 64, theta: float = 10000.0) -> RopeShiftCheck:
    """Check that q·k after RoPE depends only on the distance n − m.

    Two fixed random vectors q, k (torch seed ``seed``) are rotated to positions (m, n) and to
    (m + t, n + t) with the loaded model's own rotary embedding (``loaded`` a RoPE model), or with
    textbook RoPE (``head_dim``, ``theta``) when ``loaded`` is None or has no rotary embedding; both dot
    products are returned with their absolute difference (float32 rounding only: the angles pos·θ_i
    are computed in float32, so the difference grows slowly with the positions).

    Returns:
        :class:`RopeShiftCheck`.

    Raises:
        InvalidArgumentError: negative positions, or an argument :func:`_rope_args` refuses.
    """
    m, n, t, seed = (checks.whole(k, v) for k, v in (("m", m), ("n", n), ("t", t), ("seed", seed)))
    if min(m, n, m + t, n + t) < 0:
        raise InvalidArgumentError(f"positions must be >= 0, got m={m}, n={n}, m + t={m + t}, n + t={n + t}.",
                                   code="arg_whole", name="m, n, m + t, n + t", range=">= 0",
                                   value=min(m, n, m + t, n + t))
    head_dim, theta = _rope_args(loaded, head_dim, theta, max(m, n, m + t, n + t) + 1)
    cos, sin = _rope_tables_for(loaded, [m, n, m + t, n + t], head_dim, theta)
    q, k = _fixed_vectors(cos.shape[-1], seed)
    rq = apply_rope(q[None], cos, sin)
    rk = apply_rope(k[None], cos, sin)
    dot = float(rq[0] @ rk[1])
    shifted = float(rq[2] @ rk[3])
    model_rope = loaded is not None and rotary_module(loaded) is not None
    return RopeShiftCheck(m=m, n=n, t=t, dot=dot, dot_shifted=shifted, dot_unrotated=float(q @ k),
                          abs_diff=abs(dot - shifted), theta=rope_theta(loaded) if model_rope else theta,
                          head_dim=int(cos.shape[-1]))


def rope_dot_grid(loaded: LoadedModel | None, positions: int, seed: int = 0, *, head_dim: int = 64,
                  theta: float = 10000.0) -> np.ndarray:
    """``G[m, n] = (R_m q)·(R_n k)`` for two fixed vectors at every pair of positions 0..positions−1.

    With the loaded model's rotary embedding when ``loaded`` has one, else textbook RoPE (``theta``,
    ``head_dim``). Because the dot depends only on n − m (Su et al. 2021, eq. 16), G is constant along
    each diagonal (a Toeplitz matrix).

    Returns:
        float32 ``(positions, positions)``; rows are query positions m, columns key positions n.

    Raises:
        InvalidArgumentError: ``positions`` not a whole number >= 1, or an argument :func:`_rope_args` refuses.
        AttentionTooLargeError: positions² above :data:`models.checks.MAX_BYTES` bytes.
    """
    positions, seed = checks.square_size("positions", positions, least=1, bytes_per_cell=4), checks.whole("seed", seed)
    head_dim, theta = _rope_args(loaded, head_dim, theta, positions)
    cos, sin = _rope_tables_for(loaded, range(positions), head_dim, theta)
    q, k = _fixed_vectors(cos.shape[-1], seed)
    rq = apply_rope(q[None].expand(positions, -1), cos, sin)
    rk = apply_rope(k[None].expand(positions, -1), cos, sin)
    return (rq @ rk.T).numpy().astype(np.float32)


def textbook_rope_tables(positions: int, head_dim: int = 64,
                         theta: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin float32 tensors ``(positions, head_dim)`` of RoPE with ``inv_freq_i = θ^(-2i/d)`` (Su et
    al. 2021, eq. 15), duplicated over the two halves as transformers does (``head_dim`` even)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    freqs = torch.arange(positions, dtype=torch.float32)[:, None] * inv_freq[None]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rope_angles(loaded: LoadedModel | None, positions: int, *, head_dim: int = 64,
                theta: float = 10000.0) -> np.ndarray:
    """Rotation angle in radians of each 2-D pair at each position: ``pos · inv_freq_i``.

    ``inv_freq_i = θ^(-2i/d)`` (Su et al. 2021, eq. 15): the loaded model's own frequencies when it has a
    rotary embedding (read from its table at position 1: ``atan2(sin, cos)``, exact while every
    ``inv_freq_i`` < π, as θ ≥ 1 makes them ≤ 1), else the textbook ones from ``head_dim`` and ``theta``.

    Returns:
        float64 ``(positions, rotary_dim/2)`` radians (not wrapped to 2π); pair ``i`` turns fastest for i = 0.

    Raises:
        InvalidArgumentError: ``positions`` not a whole number >= 1, or an argument :func:`_rope_args` refuses.
        AttentionTooLargeError: the table above :data:`models.checks.MAX_BYTES`.
    """
    positions = checks.whole("positions", positions, 1)
    head_dim, theta = _rope_args(loaded, head_dim, theta, positions)
    rot = find_rotary(loaded) if loaded is not None else None
    if rot is not None:  # the module's own frequencies: the angle it turns each pair by from position 0 to 1
        assert loaded is not None  # find_rotary ran on it
        cos, sin = rot.tables([1], loaded.device)
        angle = np.arctan2(sin[0].double().numpy(), cos[0].double().numpy())
        inv = angle[: angle.shape[-1] // 2]  # the tables come in two halves, one angle per pair in each
    else:
        inv = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    return np.arange(positions, dtype=np.float64)[:, None] * inv[None]


def alibi_slopes(heads: int) -> np.ndarray:
    """ALiBi head slopes (Press et al. 2021, §3): for n heads a power of two, the geometric sequence
    ``m_i = 2^(-8i/n)``, i = 1..n; otherwise the slopes of the nearest lower power of two followed by
    every other slope of the next power of two (the authors' reference implementation).

    Returns:
        float64 ``(heads,)``, each in (0, 1).

    Raises:
        InvalidArgumentError: heads not a whole number in [1, 65536].
    """
    heads = checks.whole("heads", heads, 1, MAX_ROPE_DIM)

    def power_of_2(n: int) -> list[float]:
        return [2.0 ** (-8.0 * i / n) for i in range(1, n + 1)]

    if math.log2(heads).is_integer():
        return np.array(power_of_2(heads))
    closest = 2 ** int(math.floor(math.log2(heads)))
    return np.array(power_of_2(closest) + list(alibi_slopes(2 * closest)[0::2][: heads - closest]))


def alibi_bias(n: int, slope: float, *, causal: bool = True) -> np.ndarray:
    """ALiBi bias matrix added to the scores q_i·k_j (Press et al. 2021, §3, Fig. 3): ``-slope·(i - j)``.

    Args:
        n: positions. slope: the head's m. causal: blocked cells (j > i) are NaN; with
            ``causal=False`` the symmetric ``-slope·|i - j|`` (not in Press et al. 2021, which define
            the causal case only; a common bidirectional adaptation).

    Returns:
        float64 ``(n, n)``, rows = queries i, columns = keys j; values ≤ 0 (or NaN).

    Raises:
        InvalidArgumentError: ``n`` not a whole number >= 0, ``slope`` not finite.
        AttentionTooLargeError: n² above :data:`models.checks.MAX_BYTES` bytes.
    """
    n = checks.square_size("n", n, bytes_per_cell=8)
    slope = checks.number("slope", slope)
    i = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    bias = -slope * np.abs(i - j).astype(np.float64)
    if causal:
        bias = np.where(j <= i, bias, np.nan)
    return bias


def _fold(word: str) -> str:
    """Case-fold with Turkish dotted/dotless i: "I" -> "ı", "İ" -> "i"."""
    return word.replace("I", "ı").replace("İ", "i").lower()


def word_attention(attn: npt.ArrayLike, query_words: Sequence[Word], key_words: Sequence[Word]) -> np.ndarray:
    """Aggregate token attention to words: sum over a key word's pieces, mean over a query word's pieces.

    Summing over key pieces keeps "how much of the row goes to this word"; averaging over query pieces
    keeps each row a distribution (Clark et al. 2019, §4.1; the rule of the pages' word level,
    :func:`viz.transforms.merge_words`): ``W' = Q · W · K`` with ``Q`` the ``(words, queries)`` averaging matrix and
    ``K`` the ``(keys, words)`` indicator matrix. Special tokens and tokens outside any word are left out, so rows
    sum to at most 1.

    Args:
        attn: float ``(..., n_q, n_k)``.

    Returns:
        float32 ``(..., len(query_words), len(key_words))``.
    """
    attn = np.asarray(attn, dtype=np.float32)
    average = np.zeros((len(query_words), attn.shape[-2]), dtype=np.float32)
    for row, word in enumerate(query_words):
        average[row, list(word.tokens)] = 1.0 / len(word.tokens)
    member = np.zeros((attn.shape[-1], len(key_words)), dtype=np.float32)
    for column, word in enumerate(key_words):
        member[list(word.tokens), column] = 1.0
    return (average @ attn @ member).astype(np.float32)


@dataclass
class WordOrder:
    """The word-order experiment: the same words in two orders, attention compared word to word.

    Attributes:
        words: the words in sentence A's order (as typed in A).
        order_b: for each word of A, its index among B's words.
        attn_a: float32 ``(layers, heads, W, W)`` word-level attention of A (rows: query words).
        attn_b: B's word-level attention with rows and columns put into A's word order.
        diff: ``attn_a - attn_b``.
        analysis_a, analysis_b: the two forward passes.
        stack: which self-attention stack.
    """

    words: list[str]
    order_b: list[int]
    attn_a: np.ndarray
    attn_b: np.ndarray
    diff: np.ndarray
    analysis_a: Analysis
    analysis_b: Analysis
    stack: str


@checks.needs_model
def word_order_experiment(loaded: LoadedModel, text_a: str = "Kedi fareyi kovaladı",
                          text_b: str = "Fareyi kedi kovaladı", *, stack: str | None = None) -> WordOrder:
    """Run both sentences and compare the attention between the same words (word level, see
    :func:`word_attention`). A model without position information would give ``diff == 0`` apart from
    the causal mask; the size of ``diff`` shows how much position matters.

    Raises:
        WordMismatchError: the sentences are not the same words in another order (compared
            case-insensitively with Turkish I/ı, İ/i). EmptyTextError etc. as :func:`models.analyze`.
    """
    stack = stack or loaded.input_stack
    a = analyze(loaded, text_a)
    b = analyze(loaded, text_b)
    wa, wb = a.axis_words(stack)[0], b.axis_words(stack)[0]
    fa, fb = [_fold(w.text) for w in wa], [_fold(w.text) for w in wb]
    if sorted(fa) != sorted(fb):
        raise WordMismatchError(
            f"The two sentences must use the same words in another order: {[w.text for w in wa]} "
            f"vs {[w.text for w in wb]}.",
            code="word_order_mismatch", words_a=", ".join(w.text for w in wa), words_b=", ".join(w.text for w in wb)
        )
    used = [False] * len(fb)
    order = []
    for word in fa:
        idx = next(i for i, x in enumerate(fb) if x == word and not used[i])
        used[idx] = True
        order.append(idx)
    attn_a = word_attention(a.attentions[stack], wa, wa)
    raw_b = word_attention(b.attentions[stack], wb, wb)
    attn_b = raw_b[..., order, :][..., :, order]
    return WordOrder(words=[w.text for w in wa], order_b=order, attn_a=attn_a, attn_b=attn_b, diff=attn_a - attn_b,
                     analysis_a=a, analysis_b=b, stack=stack)
