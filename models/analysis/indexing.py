"""Indices of stored attention weights and masks, checked: an index out of range raises
:class:`models.errors.IndexOutOfRangeError` (a DikkatError and an IndexError) that names the axis (layer, head,
row, key) in words and in both languages, where numpy would say "index 30 is out of bounds for axis 0"."""

from __future__ import annotations

import math
import numbers
import re
from typing import NoReturn

import numpy as np

from ..errors import IndexOutOfRangeError, InvalidArgumentError

# the axes of an attention stack (layers, heads, query rows, keys); a mask stack has no heads
ATTENTION_AXES = ("layer", "head", "row", "key")
MASK_AXES = ("layer", "row", "key")
_NUMPY_BOUNDS = re.compile(r"index (-?\d+) is out of bounds for axis (\d+) with size (\d+)")
_NUMPY_COUNT = re.compile(r"too many indices for array: array is (\d+)-dimensional, but (\d+) were indexed")


def out_of_range(axis: str, index: int, size: int) -> NoReturn:
    """Raise the error for ``index`` outside an axis of ``size`` (``axis`` among :data:`ATTENTION_AXES`).

    Raises:
        IndexOutOfRangeError: always (code ``index_<axis>``)."""
    raise IndexOutOfRangeError(f"{axis} {index} is out of range for {size} ({axis}s 0 .. {size - 1}, or -{size} .. -1 "
                                "from the end)", code=f"index_{axis}", index=index, size=size)


def checked_int(index, size: int, axis: str) -> int:
    """``index`` (an int, negative from the end) as ``0 .. size - 1``.

    Raises:
        IndexOutOfRangeError: ``index`` outside ``-size .. size - 1``. InvalidArgumentError: not a whole number
            (code ``arg_whole``; a float that is one, 2.0, is taken)."""
    whole = isinstance(index, numbers.Integral) and not isinstance(index, (bool, np.bool_))
    if not whole and isinstance(index, (float, np.floating)) and math.isfinite(index) and float(index).is_integer():
        index, whole = int(index), True
    if not whole:
        raise InvalidArgumentError(f"{axis} must be a whole number (-{size} .. {size - 1}), got {repr(index)[:60]}.",
                                   code="arg_whole", name=axis, range=f"-{size} .. {size - 1}",
                                   value=repr(index)[:60])
    i = int(index) + (size if index < 0 else 0)
    if not 0 <= i < size:
        out_of_range(axis, int(index), size)
    return i


def indexed(array: np.ndarray, key, axes: tuple[str, ...], offset: int = 0):
    """``array[key]`` with numpy's rules, and numpy's IndexError for an index out of range (or too many indices)
    raised as :class:`IndexOutOfRangeError` naming the axis.

    Args:
        array: the array indexed. key: any numpy index. axes: the name of each axis of ``array`` after the first
            ``offset`` (an array built as ``block[None]`` has a leading axis of 1 that no user index reaches).

    Raises:
        IndexOutOfRangeError: an index outside its axis (code ``index_<axis>``) or more indices than axes
            (code ``index_axes``).
        InvalidArgumentError: an index numpy refuses otherwise (a float, a string; code ``bad_index``).
    """
    try:
        return array[key]
    except IndexError as exc:
        said = str(exc)  # raised below, outside the handler: numpy's own traceback says nothing more
    bounds = _NUMPY_BOUNDS.search(said)
    if bounds is not None:
        index, axis, size = (int(g) for g in bounds.groups())
        names = ("",) * offset + axes
        out_of_range(names[axis] if axis < len(names) and names[axis] else "key", index, size)
    count = _NUMPY_COUNT.search(said)
    if count is not None:
        given, dims = int(count.group(2)) - offset, int(count.group(1)) - offset
        raise IndexOutOfRangeError(f"{given} indices given for an array of {dims} axes ({', '.join(axes)})",
                                   code="index_axes", index=given, size=dims)
    shown = repr(key) if len(repr(key)) <= 80 else repr(key)[:77] + "..."
    raise InvalidArgumentError(f"{shown} is not an index of these weights: {said} (use ints, slices, int arrays or "
                               "bool masks)", code="bad_index", index=shown)
