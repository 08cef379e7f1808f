"""Reading plotly figure JSON in tests: plotly 7 writes numpy arrays as {"dtype", "bdata", "shape"}."""

from __future__ import annotations

import base64

import numpy as np


def decode(value) -> np.ndarray:
    """A figure array (base64 ``bdata`` dict or plain list) as a numpy array."""
    if isinstance(value, dict) and "bdata" in value:
        arr = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
        shape = value.get("shape")
        if shape:
            arr = arr.reshape([int(s) for s in str(shape).split(",")])
        return arr
    return np.asarray(value)


def shown(ticktext) -> list[str]:
    """Tick labels as plotly displays them (entities such as ``&lt;`` decoded)."""
    import html

    return [html.unescape(str(t)) for t in ticktext]
