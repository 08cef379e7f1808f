"""Which heads to switch off: the Head pruning page's presets as pure functions over head scores, and the
``off=`` text of a link that names switched-off heads.

Heads are ``(stack, layer, head)`` triples as in ``models.analyze(heads_off=...)``; ``stacks`` maps a stack to
its ``(layers, heads)`` (:attr:`models.LoadedModel.stacks`).
"""

from __future__ import annotations


import numpy as np


from .. import checks
from ..errors import InvalidArgumentError, InvalidHeadError
from .core import HeadId
from .importance import HeadScores

MAX_LINK_HEADS = 10_000  # a link naming more parts is read up to here


def keep_best_per_layer(scores: HeadScores) -> frozenset[HeadId]:
    """Every head except the most important one of each layer (Michel et al. 2019, §3.2: most layers can be
    reduced to a single head). Ties go to the lower head index.

    Args:
        scores: importance per head, ``stack -> float64 (layers, heads)`` in ``scores.values``.

    Returns:
        The heads to switch off.
    """
    checks.instance("scores", scores, HeadScores, "HeadScores (pruning.ablation_scores)")
    off = set()
    for stack, values in scores.values.items():
        for layer in range(values.shape[0]):
            best = int(np.argmax(values[layer]))
            off |= {(stack, layer, h) for h in range(values.shape[1]) if h != best}
    return frozenset(off)


def least_important(scores: HeadScores, k: int) -> frozenset[HeadId]:
    """The ``k`` least important heads (ties by head order, :meth:`HeadScores.ranked`).

    Raises:
        InvalidHeadError: ``k`` is not a whole number from 0 to the number of heads.
    """
    checks.instance("scores", scores, HeadScores, "HeadScores (pruning.ablation_scores)")
    ranked = scores.ranked()
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= k <= len(ranked):
        raise InvalidHeadError(f"k must be a whole number from 0 to {len(ranked)} (the heads there are), got {k!r}.",
                               code="bad_head_count", k=str(k), n=len(ranked))
    return frozenset(head for head, _ in ranked[:int(k)])


MAX_COUNT = 65_536  # layers or heads of a stack: far above any model's (Llama 3.1 405B: 126 layers of 128 heads)


def whole_layer(stacks: dict[str, tuple[int, int]], stack: str, layer: int) -> frozenset[HeadId]:
    """Every head of ``stack``'s layer ``layer``.

    Raises:
        InvalidHeadError: no such stack or layer. InvalidArgumentError: ``stacks`` not a dict of ``(layers, heads)``
            whole numbers from 0 to :data:`MAX_COUNT` (a count no model has is refused before a set of it is built).
    """
    checks.instance("stacks", stacks, dict, "a dict stack -> (layers, heads) (loaded.stacks)")
    if not all(isinstance(v, tuple) and len(v) == 2 and all(isinstance(x, (int, np.integer)) and 0 <= x <= MAX_COUNT
                                                              for x in v) for v in stacks.values()):
        raise InvalidArgumentError(f"stacks must map each stack to (layers, heads), got {checks.shown(stacks)}.",
                                   code="arg_instance", name="stacks", detail="a dict stack -> (layers, heads)",
                                   value=checks.shown(stacks))
    if not isinstance(stack, str) or stack not in stacks or isinstance(layer, bool) \
            or not isinstance(layer, (int, np.integer)) or not 0 <= layer < stacks.get(stack, (0, 0))[0]:
        raise InvalidHeadError(f"No layer {layer!r} in stack {stack!r} (stacks: {dict(stacks)}).",
                               code="bad_layer", stack=str(stack), layer=str(layer))
    return frozenset((stack, int(layer), h) for h in range(stacks[stack][1]))


def heads_to_text(heads) -> str:
    """``{("decoder", 3, 1), ("decoder", 0, 2)}`` -> ``"decoder.0.2,decoder.3.1"`` (sorted; a link's ``off=``).

    Raises:
        InvalidHeadError: not an iterable of ``(stack, layer, head)`` triples (code ``bad_heads``).
    """
    try:
        heads = list(heads)
    except TypeError:
        heads = None
    if heads is None or not all(isinstance(h, tuple) and len(h) == 3 and isinstance(h[0], str)
                                and all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x >= 0
                                        for x in h[1:])
                                for h in heads):
        raise InvalidHeadError(f"heads must be (stack, layer, head) triples, got {checks.shown(heads)}.",
                               code="bad_heads", value=checks.shown(heads), example='{("decoder", 0, 1)}')
    return ",".join(f"{s}.{layer}.{h}" for s, layer, h in sorted(heads))


def heads_from_text(raw: str, stacks: dict[str, tuple[int, int]]) -> frozenset[HeadId]:
    """The heads a link's ``off=`` text names that the model has (:func:`heads_to_text`'s inverse); anything
    else in it (unknown stacks, out-of-range or non-ASCII numbers, junk) is ignored, never raised: a link is
    outside input."""
    out = set()
    for part in str(raw).split(",")[:MAX_LINK_HEADS]:
        bits = part.strip().split(".")
        # ASCII digits only (str.isdigit takes "²" and "①", which int() refuses), and short ones (int() refuses
        # more than 4,300 digits)
        if len(bits) == 3 and bits[0] in stacks and all(b.isascii() and b.isdigit() and len(b) < 7 for b in bits[1:]):
            layer, head = int(bits[1]), int(bits[2])
            if layer < stacks[bits[0]][0] and head < stacks[bits[0]][1]:
                out.add((bits[0], layer, head))
    return frozenset(out)
