"""A mask per head: which keys each head of each layer may attend, for long-context and sparse-attention studies.

Patterns (each head gets one; the model's own mask is ``full``):

* ``full`` (also ``native``): the head keeps the model's own mask, bit for bit.
* every whole-model kind of :mod:`models.analysis.masks`: ``causal``, ``bidirectional``, ``sliding_window:W``,
  ``sink_window:W,K`` (StreamingLLM's window + K attention sinks, Xiao et al. 2023, §3.2), ``strided:S``
  (Child et al. 2019, §4.2) or a boolean ``(n, n)`` array.
* ``a_shape:W,K``: MInference's "A-shape" head (Jiang et al. 2024, arXiv 2407.02490, §3.2, fig. 3a): the first
  K tokens and a local window of W. The same keys as ``sink_window:W,K``.
* ``vertical_slash:V,S``: MInference's "vertical-slash" head (§3.2, fig. 3b, Algorithm 2): the V key columns
  and the S diagonals (query - key offsets) that carry the most weight in the head's last ``LAST_Q = 64``
  query rows (``Â = softmax(Q[-64:]·Kᵀ/√d + m)``, summed over those rows, ``argtopk``). The offset-0 diagonal
  (each token sees itself) is always one of the S, so no query is left without a key.
* ``block_sparse:B,K``: MInference's "block-sparse" head (§3.2, fig. 3c, Algorithm 3): the query × key plane cut
  into ``B × B`` blocks, each block row keeping its K blocks of most attention weight, its diagonal block among
  them. MInference estimates the blocks from mean-pooled Q and K; Dikkat ranks them by the head's own weights
  (the exact mass each block holds), the upper bound of that estimate.

``vertical_slash`` and ``block_sparse`` are chosen from the head's own weights in the same forward pass, under
the model's own mask, at each call (as MInference chooses them online); every pattern is intersected with
nothing: a pattern that allows a key the model's own mask forbids (``bidirectional`` on a decoder) attends it,
as the whole-model masks do, except the two chosen patterns, which only choose among the keys the model's own
mask allows.

Build a :class:`HeadMasks` (a default, per-layer and per-head patterns) and pass it as ``mask=`` to
:func:`models.analyze`; :func:`duo_attention` and :func:`window_everywhere` build the presets.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

from .. import checks
from ..capture.flex_heads import KERNELS
from ..capture.head_rules import LAST_Q  # noqa: F401  (documented here: rows a vertical-slash head is chosen from)
from ..errors import InvalidMaskError
from .masks import MaskMode, parse_mask

if TYPE_CHECKING:
    from ..loading.model import LoadedModel

CHOSEN = ("vertical_slash", "block_sparse")
PATTERNS = ("full", "causal", "bidirectional", "sliding_window", "sink_window", "a_shape", "strided",
            "vertical_slash", "block_sparse", "custom")


@dataclass(frozen=True)
class Chosen:
    """A pattern chosen from the head's own weights at each call: ``vertical_slash`` (``a`` = V columns,
    ``b`` = S diagonals) or ``block_sparse`` (``a`` = block size B in tokens, ``b`` = K blocks per block row)."""

    kind: str
    a: int
    b: int

    def __str__(self) -> str:
        return f"{self.kind}:{self.a},{self.b}"


def parse_pattern(pattern) -> MaskMode | Chosen | None:
    """One head's pattern: None for ``full``/``native``, a :class:`Chosen` for ``vertical_slash:V,S`` /
    ``block_sparse:B,K``, else the :class:`MaskMode` of :func:`models.analysis.masks.parse_mask`
    (``a_shape:W,K`` is ``sink_window:W,K``).

    Raises:
        InvalidMaskError: an unknown pattern, or a parameter that is not a whole number >= 1 (as
            :func:`parse_mask` for its kinds).
    """
    if pattern is None or isinstance(pattern, Chosen):
        return pattern
    match = (re.fullmatch(r"\s*([a-z_\-]+)\s*(?:[:=(]\s*(.*?)\s*\)?)?\s*", pattern.lower())
             if isinstance(pattern, str) else None)
    if match:
        kind = match.group(1).replace("-", "_")
        if kind in ("full", "native"):
            if match.group(2):
                raise InvalidMaskError(f"Pattern '{kind}' takes no parameter, got {checks.shown(match.group(2))}.",
                                       code="mask_no_width", kind=kind, value=checks.shown(match.group(2)))
            return None
        if kind == "a_shape":
            return parse_mask(f"sink_window:{match.group(2) or ''}")
        if kind in CHOSEN:
            a, b = _two(kind, match.group(2))
            return Chosen(kind, a, b)
    try:
        mode = parse_mask(pattern)
    except InvalidMaskError as exc:
        if exc.code != "unknown_mask":
            raise
        raise InvalidMaskError(f"Unknown head pattern {checks.shown(pattern)}. Use one of: {', '.join(PATTERNS[:-1])}, "
                               "or a boolean matrix.", code="unknown_mask", value=checks.shown(pattern),
                               kinds=", ".join(PATTERNS[:-1])) from None
    return None if mode.kind == "native" else mode


def _two(kind: str, raw: str | None) -> tuple[int, int]:
    """The two whole numbers >= 1 of ``vertical_slash:V,S`` / ``block_sparse:B,K``."""
    parts = [p.strip() for p in (raw or "").split(",")]
    if len(parts) != 2 or not all(re.fullmatch(r"\+?\d{1,9}", p) for p in parts) or min(int(p) for p in parts) < 1:
        example = "vertical_slash:64,64" if kind == "vertical_slash" else "block_sparse:64,4"
        raise InvalidMaskError(f"Pattern '{kind}' needs two whole numbers of at least 1, got "
                               f"{checks.shown(raw or '')}, e.g. '{example}'.",
                               code="head_mask_two_numbers", kind=kind, value=checks.shown(raw or ""), example=example)
    return int(parts[0]), int(parts[1])


def is_head_pattern(text: str) -> bool:
    """True for a pattern string only :class:`HeadMasks` take (``full``, ``a_shape``, ``vertical_slash``,
    ``block_sparse``), which :func:`models.analyze` then applies to every head."""
    match = re.match(r"\s*([a-z_\-]+)", text.lower())
    return match is not None and match.group(1).replace("-", "_") in ("full", "a_shape") + CHOSEN


def budget(pattern, n: int) -> int | None:
    """Keys per query a pattern keeps at most on ``n`` tokens (its budget): ``W`` for ``sliding_window``,
    ``W + K`` for ``sink_window``/``a_shape``, ``V + S`` for ``vertical_slash``, ``B · K`` for
    ``block_sparse``; None for patterns without one (full, causal, strided, custom)."""
    if isinstance(pattern, Chosen):
        return pattern.a + pattern.b if pattern.kind == "vertical_slash" else pattern.a * pattern.b
    if isinstance(pattern, MaskMode) and pattern.kind == "sliding_window":
        return pattern.width
    if (isinstance(pattern, MaskMode) and pattern.kind == "sink_window" and pattern.width is not None
            and pattern.sinks is not None):  # parse_mask gives both
        return pattern.width + pattern.sinks
    return None


@dataclass(frozen=True)
class HeadMasks:
    """Which pattern each head of one self-attention stack uses (see the module's list of patterns).

    Precedence: ``heads`` over ``layers`` over ``default``.

    Attributes:
        default: the pattern of every head not named (default ``full``: the model's own mask).
        layers: ``{layer: pattern}`` for every head of a layer.
        heads: ``{(layer, head): pattern}``.
        stack: the self-attention stack (None: the model's ``mask_stack``, the decoder of a decoder).
        fit: allow patterns whose budget is larger than the text (they then keep every key their kind allows);
            else such a pattern is refused (``head_mask_budget``).
        kernel: how a layer whose weights nobody keeps runs its heads (:data:`models.capture.flex_heads.KERNELS`):
            ``dense`` (one sdpa call per group of heads, each with its dense plane), ``flex`` / ``flex_compiled``
            (one FlexAttention call with a block mask: tiles no head reads are skipped), ``auto`` (compiled flex
            from :data:`models.capture.flex_heads.AUTO_TOKENS` tokens); None: :data:`models.capture.flex_heads.KERNEL`.
            The weights are the same (to float rounding); a call flex cannot run as the dense path does runs dense,
            the reason in :attr:`HeadRules.kernels`.
    """

    default: object = "full"
    layers: dict = field(default_factory=dict)
    heads: dict = field(default_factory=dict)
    stack: str | None = None
    fit: bool = False
    kernel: str | None = None


def duo_attention(scores, k: int, window: int = 64, sinks: int = 4, stack: str | None = None) -> HeadMasks:
    """DuoAttention's split (Xiao et al. 2024, arXiv 2410.10819, §3): the ``k`` heads of highest ``scores`` keep
    the full context ("retrieval heads"), every other head a window of ``window`` recent tokens plus ``sinks``
    first tokens ("streaming heads"). On a text shorter than the window the streaming heads see it all
    (``fit``).

    Args:
        scores: float ``(layers, heads)``, e.g. :func:`models.sparse.retrieval_scores` (ties: lower layer, then
            lower head first). k: how many heads keep the full context, 0 .. layers × heads.

    Raises:
        InvalidArgumentError: scores not a 2-D finite array, ``k`` out of range, a window below 1 or sinks below 0.
    """
    scores = checks.array("scores", scores, ndim=2, finite=True)
    k = checks.whole("k", k, 0, scores.size)
    order = np.argsort(-scores.reshape(-1), kind="stable")[:k]
    return full_heads([divmod(int(i), scores.shape[1]) for i in order], window, sinks, stack)


def full_heads(heads, window: int = 64, sinks: int = 4, stack: str | None = None) -> HeadMasks:
    """``heads`` (``(layer, head)`` pairs) keep the full context, every other head ``sink_window:window,sinks``
    (the shape of :func:`duo_attention`, for any choice of heads, random ones too).

    Raises:
        InvalidArgumentError: a window below 1 or sinks below 0."""
    window, sinks = checks.whole("window", window, 1), checks.whole("sinks", sinks, 0)
    return HeadMasks(default=f"sink_window:{window},{sinks}", heads={tuple(h): "full" for h in heads}, stack=stack,
                     fit=True)


def window_everywhere(window: int = 64, sinks: int = 4, stack: str | None = None) -> HeadMasks:
    """Every head ``sink_window:window,sinks`` (StreamingLLM, Xiao et al. 2023, §3.2).

    Raises:
        InvalidArgumentError: a window below 1 or sinks below 0."""
    return full_heads([], window, sinks, stack)


class HeadRules:
    """A :class:`HeadMasks` resolved against a model and a text: per layer, one rule per head (None: the model's
    own mask; a bool ``(n, n)`` CPU tensor; a :class:`Chosen`), read by the capture function
    (:func:`models.capture.head_rules.per_head_mask`), and the choices made at each call.

    Attributes:
        layers, heads: the stack's shape. n: tokens. rules: ``layer -> tuple of heads rules`` (layers whose
            heads all keep the model's own mask are left out). patterns: ``(layer, head) -> str`` of every head.
        chosen: ``(layer, head) -> dict`` what a :class:`Chosen` head kept at its last call (``columns`` and
            ``offsets``, or ``blocks`` as ``(block row, block column)`` pairs), filled by the forward pass.
        modes: ``layer -> tuple`` of each head's parsed pattern (:class:`MaskMode`, :class:`Chosen` or None), for the
            block masks' closed forms (:mod:`models.capture.flex_heads`). kernel: :attr:`HeadMasks.kernel`.
        kernels: ``layer -> str`` the kernel each layer's last fused call ran (``dense``, ``flex``,
            ``flex_compiled``, ``dense (why flex was refused)``, or ``eager (why)`` for a call with arguments sdpa does
            not take, run with the whole mask), filled by the forward pass.
    """

    def __init__(self, layers: int, heads: int, n: int, rules: dict, patterns: dict, modes: dict | None = None,
                 kernel: str | None = None):
        self.layers, self.heads, self.n = layers, heads, n
        self.rules, self.patterns = rules, patterns
        self.modes, self.kernel = modes or {}, kernel
        self.kernels: dict[int, str] = {}
        self.chosen: dict = {}
        self.natives: list[np.ndarray] = []  # the model's own masks met, each stored once
        self.native_of: dict[int, int] = {}
        self._last_native: tuple[torch.Tensor, int] | None = None

    def __repr__(self) -> str:
        kinds = sorted({p.split(":")[0] for p in self.patterns.values()})
        return f"HeadRules({self.layers}×{self.heads} heads, {self.n} tokens, {', '.join(kinds)})"

    def note_native(self, layer: int, allowed: torch.Tensor) -> None:
        """Record the model's own mask of ``layer`` (bool ``(n, n)``), as the capture function met it."""
        if allowed.shape != (self.n, self.n):
            return
        if self._last_native is not None and self._last_native[0] is allowed:  # the same tensor as the layer before
            self.native_of[layer] = self._last_native[1]
            return
        arr = allowed.cpu().numpy()
        for index, seen in enumerate(self.natives):
            if np.array_equal(seen, arr):
                self.native_of[layer] = index
                self._last_native = (allowed, index)
                return
        arr.flags.writeable = False
        self.natives.append(arr)
        self.native_of[layer] = len(self.natives) - 1
        self._last_native = (allowed, self.native_of[layer])

    def matrix(self, layer: int, head: int, native: np.ndarray | None = None) -> np.ndarray:
        """Bool ``(n, n)``: the keys this head could attend in the run (True = allowed): the model's own mask
        for a ``full`` head, the pattern's matrix, or the keys a chosen head kept (within the model's own mask).
        ``native``: the model's own mask of the layer (bool ``(n, n)``), for a layer the run did not record it for
        (a layer with no mask per head).

        Raises:
            InvalidArgumentError: no such layer or head. KeyError: a layer with a mask per head that has not run.
        """
        checks.whole("layer", layer, 0, self.layers - 1)
        checks.whole("head", head, 0, self.heads - 1)
        rule = self.rules.get(layer, (None,) * self.heads)[head]
        if isinstance(rule, torch.Tensor):
            return rule.numpy()
        if layer in self.native_of:
            native = self.natives[self.native_of[layer]]
        if native is None:
            raise KeyError(f"layer {layer} has not run with a mask per head: pass the model's own mask")
        if rule is None:
            return native
        return chosen_matrix(rule, self.chosen[(layer, head)], self.n) & native

def chosen_matrix(rule: Chosen, choice: dict, n: int) -> np.ndarray:
    """Bool ``(n, n)`` of the keys a chosen head kept (before the model's own mask is applied): columns
    ``choice['columns']`` and diagonals ``i - j in choice['offsets']`` (vertical-slash), or the blocks
    ``choice['blocks']`` of ``rule.a`` tokens (block-sparse)."""
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    if rule.kind == "vertical_slash":
        return np.isin(j, choice["columns"]) | np.isin(i - j, choice["offsets"])
    out = np.zeros((n, n), dtype=bool)
    for bi, bj in choice["blocks"]:
        out[bi * rule.a:(bi + 1) * rule.a, bj * rule.a:(bj + 1) * rule.a] = True
    return out


def resolve(loaded: LoadedModel, spec: HeadMasks, n: int) -> tuple[str, HeadRules, str]:
    """Resolve ``spec`` for ``n`` tokens: ``(stack, rules, description)``.

    Raises:
        InvalidMaskError: a stack the model lacks or that is cross-attention; a layer or head that does not
            exist (``head_mask_no_head``); a bad pattern; a custom array that is not ``(n, n)``; a pattern
            whose budget (:func:`budget`) is larger than the text (``head_mask_budget``), or a block-sparse
            block larger than the text.
        InvalidArgumentError: ``spec.kernel`` not one of :data:`models.capture.flex_heads.KERNELS` (``arg_choice``).
    """
    if not isinstance(spec.fit, (bool, np.bool_)):
        raise InvalidMaskError(f"HeadMasks.fit must be True or False, got {checks.shown(spec.fit)}.",
                               code="head_mask_key", value=checks.shown(spec.fit))
    if spec.kernel is not None:
        checks.choice("kernel", spec.kernel, KERNELS)
    stack = loaded.mask_stack if spec.stack is None else spec.stack
    if not isinstance(stack, str) or stack not in loaded.stacks or stack == "cross":
        raise InvalidMaskError(
            f"Model '{loaded.name}' has no self-attention stack '{checks.shown(stack)}' for head masks (it has "
            f"{', '.join(s for s in loaded.stacks if s != 'cross')}).", code="no_such_stack", model=loaded.name,
            stack=checks.shown(stack), stacks=", ".join(s for s in loaded.stacks if s != "cross"))
    layers, heads = loaded.stacks[stack]
    cache: dict[str, tuple] = {}

    def rule_of(pattern, where: str) -> tuple:
        key = pattern if isinstance(pattern, str) else None
        if key is not None and key in cache:
            return cache[key]
        parsed = parse_pattern(pattern)
        if not spec.fit:
            _check_budget(parsed, n, where)
        found: tuple = (parsed, "full" if parsed is None else str(parsed), parsed)
        if isinstance(parsed, MaskMode):
            found = (torch.from_numpy(np.ascontiguousarray(parsed.matrix(n))), str(parsed), parsed)
        if key is not None:
            cache[key] = found
        return found

    default = rule_of(spec.default, "default")
    per_layer = {}
    for layer, pattern in _items(spec.layers, "layers"):
        _check_index(loaded, stack, layers, heads, layer, None)
        per_layer[int(layer)] = rule_of(pattern, f"layer {layer}")
    per_head = {}
    for key, pattern in _items(spec.heads, "heads"):
        if not (isinstance(key, tuple) and len(key) == 2):
            raise InvalidMaskError(f"Head masks are keyed by (layer, head) pairs, got {checks.shown(key)}.",
                                   code="head_mask_key", value=checks.shown(key))
        _check_index(loaded, stack, layers, heads, key[0], key[1])
        per_head[(int(key[0]), int(key[1]))] = rule_of(pattern, f"layer {key[0]}, head {key[1]}")
    rules, patterns, modes = {}, {}, {}
    for layer in range(layers):
        row = [per_head.get((layer, h), per_layer.get(layer, default)) for h in range(heads)]
        if any(r is not None for r, _, _ in row):
            rules[layer] = tuple(r for r, _, _ in row)
            modes[layer] = tuple(m for _, _, m in row)
        patterns.update({(layer, h): name for h, (_, name, _) in enumerate(row)})
    return stack, HeadRules(layers, heads, n, rules, patterns, modes, spec.kernel), _describe(patterns)


def _items(mapping, what: str):
    if not isinstance(mapping, dict):
        raise InvalidMaskError(f"HeadMasks.{what} must be a dict, got {checks.shown(mapping)}.",
                               code="head_mask_key", value=checks.shown(mapping))
    return list(mapping.items())


def _check_index(loaded, stack: str, layers: int, heads: int, layer, head) -> None:
    def inside(value, size: int) -> bool:
        return (isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
                and bool(0 <= value < size))

    ok = inside(layer, layers) and (head is None or inside(head, heads))
    if not ok:
        where = f"layer {checks.shown(layer)}" + ("" if head is None else f", head {checks.shown(head)}")
        raise InvalidMaskError(
            f"Model '{loaded.name}' has no {where} in its {stack} stack ({layers} layers × {heads} heads, counted "
            "from 0).", code="head_mask_no_head", model=loaded.name, where=where, stack=stack, layers=layers,
            heads=heads)


def _check_budget(pattern, n: int, where: str) -> None:
    size = budget(pattern, n)
    block = pattern.a if isinstance(pattern, Chosen) and pattern.kind == "block_sparse" else None
    if (size is not None and size > n) or (block is not None and block > n):
        raise InvalidMaskError(
            f"The pattern '{pattern}' ({where}) keeps {size} keys per query, more than the text's {n} tokens: "
            "use a smaller budget or the full mask.", code="head_mask_budget", pattern=str(pattern), where=where,
            size=size, n=n)


def _describe(patterns: dict) -> str:
    counts: dict[str, int] = {}
    for p in patterns.values():
        counts[p] = counts.get(p, 0) + 1
    return "per head: " + ", ".join(f"{p} ×{c}" for p, c in sorted(counts.items(), key=lambda x: -x[1]))
