"""A head's queries and keys over a corpus in one 2-D picture (AttentionViz: Yeh et al. 2023, "AttentionViz: A
Global View of Transformer Attention", IEEE VIS, §4.1).

Each text's query and key vectors of the head are recomputed from the model's own weights
(:func:`models.lessons.qkv.head_steps`: after RoPE where the family rotates them; with GQA, the key/value head
the query head shares). Before the projection, as AttentionViz does, keys are translated so that their mean is
the queries' mean (adding one vector ``c`` to every key adds ``q·c`` to a whole row of scores, which the
softmax ignores) and queries and keys are scaled by ``α`` and ``1/α`` so that their mean norms match (every
``q·k`` unchanged). Then one PCA (SVD of the centred points) places both in the same plane, so a query lies
near the keys it attends to.

UMAP (McInnes et al. 2018) is not offered: its package (``umap-learn``) needs numba and llvmlite, a compiler
toolchain the size of the rest of Dikkat together, for a picture PCA already gives exactly and reproducibly.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import checks
from ..analysis.statistics import is_punctuation
from ..loading.model import LoadedModel
from .atlas import Atlas

def normalise(q: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """AttentionViz's normalisation (Yeh et al. 2023, §4.1): keys moved so that their mean is the queries'
    mean, then queries scaled by ``α`` and keys by ``1/α`` so that both have the same mean norm.

    Args:
        q: float ``(n_q, d)`` queries. k: float ``(n_k, d)`` keys (of the same texts).

    Returns:
        ``(q', k', α)``: every row of softmax(q' k'ᵀ) equals that row of softmax(q kᵀ) (a row's scores all move by
        ``q·c``; products are unchanged by ``α``).
    """
    k = k - k.mean(axis=0) + q.mean(axis=0)
    alpha = float(np.sqrt(np.linalg.norm(k, axis=1).mean() / max(np.linalg.norm(q, axis=1).mean(), 1e-12)))
    return q * alpha, k / alpha, alpha


#: the most points drawn (queries and keys together); more texts are sampled evenly
MAX_POINTS = 4000


@checks.needs_model
def joint_embedding(loaded: LoadedModel, atlas: Atlas, stack: str, layer: int, head: int, *, texts: int = 24,
                    max_tokens: int | None = None) -> pd.DataFrame:
    """The head's queries and keys over the first ``texts`` corpus texts of the atlas, in one 2-D PCA.

    Args:
        loaded: the atlas's model (interface capture path). stack, layer, head: the head (self-attention).
        texts: corpus texts read (each a forward pass). max_tokens: each cut to this many tokens (default 128,
            or the model's limit if smaller).

    Returns:
        A DataFrame, one row per point: ``x``, ``y`` (the first two principal components, in the units of the
        vectors), ``role`` (``query``/``key``), ``text`` (corpus index), ``position`` (token index),
        ``token`` (its text), ``kind`` (``first``, ``special``, ``punctuation``, ``word``). ``.attrs``:
        ``explained`` (share of variance of each component), ``alpha`` (the query scale).

    Raises:
        InvalidHeadError: no such head. UnsupportedOperationError: the fallback path or cross-attention (no
        recomputed queries and keys there; :func:`models.lessons.layer_input.layer_capture`).
        InvalidArgumentError: ``texts`` or ``max_tokens`` out of range.
    """
    from ..lessons.layer_input import layer_capture
    from ..lessons.qkv import head_steps

    atlas._check_head(stack, layer, head)
    texts = checks.whole("texts", texts, 1, 200)
    limit = max(2, loaded.max_positions)
    max_tokens = checks.whole("max_tokens", min(128, limit) if max_tokens is None else max_tokens, 2, limit)
    sample = atlas.texts(limit=texts)
    qs, ks, rows = [], [], []
    for index, content in sample:
        steps = head_steps(loaded, layer_capture(loaded, content, stack=stack, layer=layer, max_tokens=max_tokens),
                           head)
        tokens = steps.analysis.axis_tokens(stack)[1]
        qs.append(steps.queries)
        ks.append(steps.keys)
        for role in ("query", "key"):
            for pos, tok in enumerate(tokens):
                kind = ("first" if pos == 0 else "special" if tok.special else
                        "punctuation" if is_punctuation(tok.text) else "word")
                rows.append((role, index, pos, tok.text, kind))
    q, k, alpha = normalise(np.concatenate(qs).astype(np.float64), np.concatenate(ks).astype(np.float64))
    # rows: each text's queries then its keys; points in the same order
    points, order = [], 0
    for qi in qs:
        n = len(qi)
        points.append(q[order:order + n])
        points.append(k[order:order + n])
        order += n
    x = np.concatenate(points)
    x = x - x.mean(axis=0)
    _, s, vt = np.linalg.svd(x, full_matrices=False)
    xy = x @ vt[:2].T
    df = pd.DataFrame(rows, columns=["role", "text", "position", "token", "kind"])
    df["x"], df["y"] = xy[:, 0], xy[:, 1]
    if len(df) > MAX_POINTS:
        df = df.iloc[np.linspace(0, len(df) - 1, MAX_POINTS).round().astype(int)].reset_index(drop=True)
    var = s ** 2
    df.attrs["explained"] = (var[:2] / max(var.sum(), 1e-300)).tolist()
    df.attrs["alpha"] = alpha
    return df
