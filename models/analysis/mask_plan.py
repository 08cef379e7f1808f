"""The ``mask`` argument of :func:`models.analyze` resolved for one text: one boolean matrix per self-attention stack
(:mod:`models.analysis.masks`), or a mask per head (:mod:`models.analysis.head_masks`)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import torch

from .. import checks
from ..errors import InvalidMaskError
from . import head_masks
from .masks import check_fallback_masks, parse_mask

if TYPE_CHECKING:
    from ..loading.model import LoadedModel


def resolve_masks(loaded: LoadedModel, mask, n_main: int, n_target: int | None = None,
                  ) -> tuple[dict[str, torch.Tensor | head_masks.HeadRules], str]:
    """Turn the ``mask`` argument of :func:`analyze` into ``stack -> bool tensor``.

    A single mask applies to the model's main self-attention stack (``encoder`` for encoders,
    ``decoder`` for decoders and encoder-decoders); a dict maps stacks to masks.

    Args:
        loaded: the model. mask: as for :func:`analyze`.
        n_main: tokens of the main input (``tokens``). n_target: decoder tokens of an encoder-decoder.

    Returns:
        ``(stack -> bool CPU tensor (n, n), True = allowed; description)``. ``native`` stacks are left
        out of the dict; the description is e.g. ``"causal"`` or ``"encoder=native, decoder=causal"``.

    A :class:`models.analysis.head_masks.HeadMasks` (or a pattern string only heads take: ``a_shape``,
    ``vertical_slash``, ``block_sparse``, ``full``) gives its stack a
    :class:`~models.analysis.head_masks.HeadRules` (a mask per head) instead of one matrix.

    Raises:
        InvalidMaskError: bad mask, a dict naming a stack the model lacks, or ``cross``; a bad head mask
            (:func:`models.analysis.head_masks.resolve`).
        UnsupportedOperationError: a replaced mask on the fallback path; a mask per head on a stack that does
            not route through the AttentionInterface.
    """
    named = isinstance(mask, dict)  # a dict names its stacks in the description
    if isinstance(mask, str) and head_masks.is_head_pattern(mask):
        mask = head_masks.HeadMasks(default=mask)  # a chosen pattern for every head (a_shape, vertical_slash ...)
    if isinstance(mask, head_masks.HeadMasks):
        stack = loaded.mask_stack if mask.stack is None else mask.stack
        if not isinstance(stack, str):
            raise InvalidMaskError(f"HeadMasks.stack must be a stack's name, got {checks.shown(stack)}.",
                                   code="no_such_stack", model=loaded.name, stack=checks.shown(stack),
                                   stacks=", ".join(loaded.stacks))
        mask = {stack: mask}
    if isinstance(mask, dict):
        for stack in mask:
            if stack not in loaded.stacks:
                raise InvalidMaskError(
                    f"Model '{loaded.name}' has no '{stack}' stack to mask (it has {', '.join(loaded.stacks)}).",
                    code="no_such_stack", model=loaded.name, stack=checks.shown(stack),
                    stacks=", ".join(loaded.stacks)
                )
        items = {stack: m if isinstance(m, head_masks.HeadMasks) else parse_mask(m) for stack, m in mask.items()}
    else:
        main = loaded.mask_stack
        items = {main: parse_mask(mask)}
    out: dict[str, torch.Tensor | head_masks.HeadRules] = {}
    descs = {stack: str(mode) for stack, mode in items.items()}
    for stack, mode in items.items():
        if stack == "cross":
            raise InvalidMaskError("Cross-attention masks cannot be replaced (only self-attention stacks).",
                                   code="mask_cross")
        n = n_target if (stack == "decoder" and loaded.family == "encoder-decoder") else n_main
        if isinstance(mode, head_masks.HeadMasks):
            _, out[stack], heads_desc = head_masks.resolve(loaded, replace(mode, stack=stack), n or 0)
            descs[stack] = heads_desc
            continue
        matrix = mode.matrix(n or 0)
        if matrix is not None:
            out[stack] = torch.from_numpy(np.ascontiguousarray(matrix))
    check_fallback_masks(loaded, out)
    desc = ", ".join(f"{s}={d}" for s, d in descs.items()) if named else next(iter(descs.values()), "native")
    return out, desc
