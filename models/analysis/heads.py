"""Which heads to switch off: ``(stack, layer, head)`` triples checked against a model, and their gates."""

from __future__ import annotations

import operator
from collections.abc import Iterable

import torch

from .. import checks
from ..sites.site import GATE_NONE
from ..errors import InvalidHeadError, UnsupportedOperationError
from ..loading.model import LoadedModel


def validate_heads(loaded: LoadedModel, heads: Iterable | None) -> frozenset:
    """Check ``(stack, layer, head)`` triples against the model and return them as a frozenset.

    Args:
        loaded: the model. heads: an iterable of ``(stack, layer, head)`` triples (str, int, int; 0-based
            layer and head), or None for none.

    Returns:
        frozenset of ``(stack, layer, head)`` with plain ``int`` layer and head.

    Raises:
        InvalidHeadError: a malformed triple, or one naming a stack, layer or head the model lacks.
        UnsupportedOperationError: a fallback-path model whose output projection is unknown.
    """
    stacks = loaded.stacks
    example = f"{{('{next(iter(stacks), 'encoder')}', 0, 1)}}"
    if heads is None:
        return frozenset()
    if isinstance(heads, (str, bytes, dict)) or (
        isinstance(heads, (tuple, list)) and len(heads) == 3 and isinstance(heads[0], str)
        and not isinstance(heads[1], (tuple, list, str))
    ):
        raise InvalidHeadError(
            f"Heads are a collection of (stack, layer, head) triples, got {heads!r}: wrap a single head in a set, "
            f"e.g. {example}.", code="bad_heads", value=checks.shown(heads), example=example
        )
    try:
        items = list(heads)
    except TypeError:
        raise InvalidHeadError(
            f"Heads are a collection of (stack, layer, head) triples, got {heads!r}, e.g. {example}.",
            code="bad_heads", value=checks.shown(heads), example=example
        ) from None
    out = set()
    for item in items:
        try:
            stack, layer, head = item
            if isinstance(layer, bool) or isinstance(head, bool) or not isinstance(stack, str):
                raise TypeError
            layer, head = operator.index(layer), operator.index(head)
        except (TypeError, ValueError):
            raise InvalidHeadError(
                f"Heads are (stack, layer, head) triples with a stack name and two whole numbers, got {item!r}, "
                f"e.g. {example}.", code="bad_heads", value=checks.shown(item), example=example
            ) from None
        if stack not in stacks:
            raise InvalidHeadError(f"Model '{loaded.name}' has no '{stack}' stack (it has {', '.join(stacks)}).",
                                   code="no_such_stack", model=loaded.name, stack=checks.shown(stack),
                                   stacks=", ".join(stacks))
        n_layers, n_heads = stacks[stack]
        if not (0 <= layer < n_layers and 0 <= head < n_heads):
            raise InvalidHeadError(
                f"({stack}, {layer}, {head}) is out of range: '{stack}' has {n_layers} layers x {n_heads} heads.",
                code="head_out_of_range", stack=stack, layer=layer, head=head, layers=n_layers, heads=n_heads
            )
        out.add((stack, layer, head))
    mixed = [s for s in loaded.sites if s.mixed_heads and any(h[:2] == (s.stack, s.layer) for h in out)]
    if mixed:
        raise UnsupportedOperationError(
            f"Model '{loaded.name}' mixes its heads before the output projection ({mixed[0].stack} layer "
            f"{mixed[0].layer}: e.g. differential attention's pairs of heads), so no part of the projection's input "
            "belongs to one head alone: a head cannot be switched off by itself.",
            code="mixed_heads", model=loaded.name, stack=mixed[0].stack, layer=mixed[0].layer)
    if out and (loaded.capture_path == "fallback" or loaded.fallback_stacks):
        missing = [s for s in loaded.sites if s.gate == GATE_NONE
                   and any(h[:2] == (s.stack, s.layer) for h in out)
                   and (loaded.capture_path == "fallback" or s.stack in loaded.fallback_stacks)]
        if missing:
            raise UnsupportedOperationError(
                f"Model '{loaded.name}' uses the fallback capture path and Dikkat does not know its output "
                f"projection for {missing[0].stack} layer {missing[0].layer}: heads cannot be switched off.",
                code="fallback_no_oproj", model=loaded.name, stack=missing[0].stack, layer=missing[0].layer
            )
    return frozenset(out)


def heads_to_gates(loaded: LoadedModel, heads_off: Iterable) -> dict[tuple[str, int], torch.Tensor]:
    """``{(stack, layer, head), ...}`` -> gates ``(stack, layer) -> (heads,)`` with 0 at switched-off heads.

    Raises:
        InvalidHeadError, UnsupportedOperationError: see :func:`validate_heads`.
    """
    gates: dict[tuple[str, int], torch.Tensor] = {}
    for stack, layer, head in validate_heads(loaded, heads_off):
        gate = gates.setdefault((stack, layer), torch.ones(loaded.stacks[stack][1]))
        gate[head] = 0.0
    return gates
