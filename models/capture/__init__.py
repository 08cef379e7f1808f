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
* :mod:`.rerun`: :func:`rerun`, the one context in which the engine runs a loaded model again under chosen gates,
  masks and hooks (hooks always removed; out of memory raised as :class:`~models.errors.ModelOutOfMemoryError`).
  Nothing else opens :func:`capture` (``tests/engine/test_rerun.py``).

Where each layer's attention sits and how its heads are gated is found once at load time by
:mod:`models.anatomy` and written in the vocabulary of :mod:`models.sites` (:class:`~models.sites.site.Site`), the
floor this package reads; this package imports nothing from :mod:`models.anatomy`, whose probe runs on it.
"""

from ..sites.site import LAYER_INDEX, Site, layer_of, stack_of
from .context import Hook, rerun
from .blocks import allowed_keys, allowed_of, apply_mask, block_of, is_causal, plan_blocks
from .hooks import counting_every_module, install_call_counters, install_projection_gates
from .interface import ATTN_IMPLEMENTATION, dikkat_attention, register
from .state import CHUNK_BYTES, CaptureState, StopForward, capture, current, per_head, probing
from . import softmax  # noqa: F401  (registers its clean-up with state.ON_EXIT)

__all__ = [
    "ATTN_IMPLEMENTATION", "CHUNK_BYTES", "CaptureState", "Hook", "LAYER_INDEX", "Site", "StopForward", "allowed_keys",
    "allowed_of", "apply_mask", "block_of", "capture", "counting_every_module", "current", "dikkat_attention",
    "install_call_counters", "install_projection_gates", "is_causal", "layer_of", "per_head", "plan_blocks",
    "probing", "register", "rerun", "stack_of",
]
