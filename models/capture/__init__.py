"""The one capture mechanism: record attention weights, switch heads off, replace masks.

* :mod:`.state`: the per-call :class:`CaptureState` in a :class:`contextvars.ContextVar` (:func:`capture`),
  never on the shared model, so Streamlit sessions (threads) sharing one cached model never see each other's
  heads or masks.
* :mod:`.interface`: the interface path, :func:`dikkat_attention` registered with transformers'
  ``AttentionInterface`` (delegates to the family's own ``eager_attention_forward``).
* :mod:`.hooks`: head gates on an output projection's input and forward-call counters (installed at load).
* :mod:`.softmax`: the fallback path's hooks at a layer's softmax (replaced masks, heads switched off there,
  weights read there).
* :mod:`.blocks`: masks as additive tensors and the blocks of query rows a long input is computed in.

Where each layer's attention sits and how its heads are gated is found once at load time by
:mod:`models.anatomy`, which this package reads (:class:`~models.anatomy.site.Site`).
"""

from ..anatomy.site import LAYER_INDEX, Site, layer_of, stack_of
from .blocks import allowed_keys, allowed_of, apply_mask, block_of, is_causal, plan_blocks
from .hooks import counting_every_module, install_call_counters, install_projection_gates
from .interface import ATTN_IMPLEMENTATION, dikkat_attention, register
from .state import CHUNK_BYTES, CaptureState, StopForward, capture, current, per_head, probing
from . import softmax  # noqa: F401  (registers its clean-up with state.ON_EXIT)

__all__ = [
    "ATTN_IMPLEMENTATION", "CHUNK_BYTES", "CaptureState", "LAYER_INDEX", "Site", "StopForward", "allowed_keys",
    "allowed_of", "apply_mask", "block_of", "capture", "counting_every_module", "current", "dikkat_attention",
    "install_call_counters", "install_projection_gates", "is_causal", "layer_of", "per_head", "plan_blocks",
    "probing", "register", "stack_of",
]
