"""One text through a model: :func:`analyze` and what it returns (:class:`Analysis`).

* :mod:`.run`: :func:`analyze` in named steps (arguments checked, text encoded, masks split by path, the
  forward pass, the outputs filled in).
* :mod:`.result`: :class:`Analysis` and :class:`TopK`.
* :mod:`.tokens`: tokens with exact character spans, and words.
* :mod:`.heads`, :mod:`.masks`: the heads to switch off and the masks to replace, checked against the model.
* :mod:`.collect`, :mod:`.store`, :mod:`.statistics`: weights collected block by block, kept or computed on
  demand, with per-head statistics and pooled overviews.
* :mod:`.outputs`: next-token, masked-token and sentence-embedding outputs.
* :mod:`.compare`, :mod:`.kv_layout`: what a replaced mask changes; grouped-query layouts and KV-cache sizes.
"""

from .collect import attach_stacks
from .result import Analysis, TopK
from .run import KEEP_BYTES, WEIGHT_BUDGET_BYTES, analyze, default_max_tokens, weight_budget_tokens

__all__ = ["KEEP_BYTES", "WEIGHT_BUDGET_BYTES", "Analysis", "TopK", "analyze", "attach_stacks", "default_max_tokens",
           "weight_budget_tokens"]
