"""Why a score cannot be taken apart exactly: the reasons (:data:`REASONS`) and the two errors the package raises.

* ``why_refused`` (params ``model``, ``stack``, ``why``): the model, stack or layer is outside what the decomposition
  proves (``why`` is a key of :data:`REASONS`; the interface shows ``why_reason_<key>``).
* ``why_identity`` (params ``stack``, ``layer``, ``what``): a check on the run failed (``what``: ``stream``,
  ``query``, ``key``, ``score``, ``weights``): the architecture computes something the decomposition does not model.
"""

from __future__ import annotations

from typing import NoReturn

from ..anatomy.residual import WHY
from ..errors import UnsupportedOperationError

REASONS = {
    "fallback": "its attention does not route through transformers' AttentionInterface (the fallback path), so the "
                "query and key each head used are not seen",
    "cross": "cross-attention reads its keys from the encoder's stream; only self-attention scores are taken apart",
    "projections": "no chain of norm, projection, head norm and rotation was proven to rebuild this layer's query "
                   "and key",
    "norm": "a norm on the way is not a per-position affine norm",
    "sink": "its layers have a learned attention sink, a softmax logit with no key",
    "no_rope": "the model has no rotary position embedding",
    "scores": "its eager attention computes the weights from more than scaling × q·k plus a position bias",
    **{key: text for key, text in WHY.items() if key in ("hybrid", "shared", "mixed", "placement", "post_cross")},
}
WHAT = {"stream": "the parts of the stream entering the layer do not add up to it",
        "query": "the parts of the query do not add up to the query the model used",
        "key": "the parts of the key do not add up to the key the model used",
        "score": "the terms do not add up to the score computed from the model's query and key",
        "weights": "the softmax of the scores is not the weights the model computed"}


def refuse(model: str, stack: str, why: str) -> NoReturn:
    """Raise the refusal for ``why`` (a key of :data:`REASONS`).

    Raises:
        UnsupportedOperationError: code ``why_refused``.
    """
    raise UnsupportedOperationError(f"Cannot take the attention scores of the {stack} of '{model}' apart: "
                                    f"{REASONS[why]}.", code="why_refused", model=model, stack=stack, why=why)


def broken(stack: str, layer: int, what: str, worst: float, tol: float) -> NoReturn:
    """Raise the failed check ``what`` (a key of :data:`WHAT`), off by ``worst`` against ``tol``.

    Raises:
        UnsupportedOperationError: code ``why_identity``.
    """
    raise UnsupportedOperationError(f"The score decomposition does not hold at {stack} layer {layer}: {WHAT[what]} "
                                    f"(off by {worst:.2e}, tolerance {tol:.1e}). This architecture computes "
                                    "something the decomposition does not model.", code="why_identity",
                                    stack=stack, layer=layer, what=what)
