"""Hashable keys of what a figure is made of (issue 27, issue 48): a builder's arguments
(:func:`views.shared.figures.shared_figure`) and a figure as it is sent (:func:`views.shared.charts.plotly_chart`)."""

from __future__ import annotations

import hashlib
import numbers
from typing import TYPE_CHECKING, cast

import numpy as np

if TYPE_CHECKING:
    from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12

UNKEYED = object()
PLAIN = frozenset({str, int, bool, type(None)})  # types :func:`key_of` keeps as they are (a float may be NaN)


def key_of(value, depth: int = 0, max_depth: int = 4):
    """A hashable stand-in for a builder's argument: arrays by shape, dtype and a digest of their bytes, containers
    item by item (to ``max_depth`` levels); :data:`UNKEYED` for anything else (a figure of it is built, not kept).
    Also the key of a figure as sent (:func:`views.shared.charts.plotly_chart`: its properties, to any depth)."""
    if isinstance(value, float) and value != value:  # NaN equals no NaN: a key holding one would never be found
        return ("nan",)
    if value is None or isinstance(value, (str, bool, numbers.Number, bytes)):
        return value
    if isinstance(value, np.generic):  # numpy's scalars (np.bool_ is no numbers.Number)
        return ("scalar", value.dtype.str, key_of(value.item()))
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:  # no bytes to digest: its items, one by one
            return key_of(value.tolist(), depth, max_depth)
        data = np.ascontiguousarray(value)
        digest = hashlib.blake2b(cast("Buffer", data.view(np.uint8)), digest_size=16).digest()  # numpy: no Buffer stub
        return ("ndarray", data.shape, data.dtype.str, digest)
    if depth > max_depth:
        return UNKEYED
    if isinstance(value, (list, tuple)):
        if all(type(v) in PLAIN for v in value):  # labels, ticks: each item is its own key (as below, faster)
            return (type(value).__name__, tuple(value))
        items = tuple(key_of(v, depth + 1, max_depth) for v in value)
        return UNKEYED if any(i is UNKEYED for i in items) else (type(value).__name__, items)
    if isinstance(value, dict):
        items = tuple((key_of(k, depth + 1, max_depth), key_of(v, depth + 1, max_depth)) for k, v in value.items())
        return UNKEYED if any(UNKEYED in pair for pair in items) else ("dict", items)
    return UNKEYED
