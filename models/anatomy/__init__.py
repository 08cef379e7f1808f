"""A loaded model's anatomy, probed once at load time and read by everything else.

What each attention layer is and where its parts sit, proven on the model's own forward pass, never from a
table of class names:

* :mod:`models.sites.site` (the floor this package and :mod:`models.capture` share; re-exported as
  :mod:`.site`): :class:`Site`, one attention layer: stack, layer, heads, module name, its output projection
  (``o_proj``), where its heads are switched off (``gate``), learned sink, hybrid block index.
* :mod:`.probe`: :func:`~.probe.discover_sites`, the load-time probe that fills ``LoadedModel.sites``.
* :mod:`.projections`: where a layer's output projection is (both capture paths).
* :mod:`.gates`: where a head's gate goes on the interface path (at the function's output, at the projection's
  input, or refused where heads are mixed).
* :mod:`models.sites.maps` (re-exported as :mod:`.maps`): eager ``output_attentions`` read as maps and checked.
* :mod:`.decoder`: an encoder-decoder's decoder is causal (the load-time check).
* :mod:`.residual`: where each layer's output joins the residual stream (pre-LN, sandwich, post-LN) and how
  the last stream becomes logits, probed on first use by the information flow; :mod:`.norms` freezes a norm.
* :mod:`models.sites.inputs` (re-exported as :mod:`.inputs`), :mod:`.tensors`: the probe's input and small tensor
  facts the probes share.

The capture (:mod:`models.capture`), heads off (:mod:`models.analysis.heads`), masks, the information flow
(:mod:`models.flow`) and the lessons read these answers; none of them searches the model again.
"""

from ..sites.site import GATES, Site, layer_block, layer_of, stack_of

__all__ = ["GATES", "Site", "layer_block", "layer_of", "stack_of"]
