"""Numbers for slides and notebooks (case C08): the shown matrix as CSV, all attentions as NPZ.

(Figures are exported from the figures themselves: the camera button of each plotly figure, and the
head view's own SVG/PNG buttons or :func:`viz.head_view.head_view_svg`.)
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
import pandas as pd


def matrix_csv(matrix: np.ndarray, query_labels: Sequence[str], key_labels: Sequence[str]) -> bytes:
    """One ``(query, key)`` matrix as UTF-8 CSV: a header row of key labels, one row per query whose first
    cell is the query label; weights with 6 decimals.

    Raises:
        ValueError: label counts that do not match the matrix.
    """
    m = np.asarray(matrix)
    if m.shape != (len(query_labels), len(key_labels)):
        raise ValueError(f"{len(query_labels)}x{len(key_labels)} labels for a matrix of shape {m.shape}")
    df = pd.DataFrame(m, index=pd.Index(list(query_labels), name="query \\ key"), columns=list(key_labels))
    return df.to_csv(float_format="%.6f").encode("utf-8")


def attentions_npz(attentions: Mapping[str, np.ndarray], *, tokens: Sequence[str], spans: Sequence[tuple[int, int]],
                   special: Sequence[bool], target_tokens: Sequence[str] | None = None, model: str = "",
                   text: str = "") -> bytes:
    """Every stack's attention weights as a compressed NPZ (``numpy.load`` reads it).

    Keys: ``attention_<stack>`` float32 ``(layers, heads, query, key)`` for each stack; ``tokens`` (str
    labels), ``token_spans`` int64 ``(n, 2)`` character offsets, ``special`` bool ``(n,)``;
    ``target_tokens`` for encoder-decoders; ``model`` and ``text`` (0-d str arrays).
    """
    arrays: dict[str, np.ndarray] = {f"attention_{stack}": np.asarray(w, dtype=np.float32)
                                     for stack, w in attentions.items()}
    arrays["tokens"] = np.array(list(tokens), dtype=str)
    arrays["token_spans"] = np.array(list(spans), dtype=np.int64).reshape(-1, 2)
    arrays["special"] = np.array(list(special), dtype=bool)
    if target_tokens is not None:
        arrays["target_tokens"] = np.array(list(target_tokens), dtype=str)
    arrays["model"] = np.array(model)
    arrays["text"] = np.array(text)
    buf = io.BytesIO()
    np.savez_compressed(buf, **cast("dict[str, Any]", arrays))  # numpy's stubs check **kwds against allow_pickle
    return buf.getvalue()
