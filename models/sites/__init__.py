"""The vocabulary the load-time probe (:mod:`models.anatomy`) and the capture (:mod:`models.capture`) share: the floor
both stand on, importing neither.

* :mod:`.site`: :class:`Site`, one attention layer as the probe found it (stack, layer, heads, module name, output
  projection, where its heads are gated), and how a module's dotted name tells its stack and layer.
* :mod:`.inputs`: the tiny input every probe runs a model on, and what a model's forward pass accepts.
* :mod:`.maps`: a model's eager ``output_attentions`` read as per-layer ``(batch, heads, queries, keys)`` maps, and
  checked to be attention weights over the tokens.

The probe fills these answers in (:mod:`models.anatomy.probe`), the capture reads them; the old paths
(``models.anatomy.site``, ``.inputs``, ``.maps``) re-export the same names.
"""

from .site import (CROSS_MARKERS, GATE_MIXED, GATE_NONE, GATE_OUTPUT, GATE_PROJ, GATE_SOFTMAX, GATES, LAYER_INDEX, Site,
                   layer_block, layer_of, stack_of)

__all__ = ["CROSS_MARKERS", "GATES", "GATE_MIXED", "GATE_NONE", "GATE_OUTPUT", "GATE_PROJ", "GATE_SOFTMAX",
           "LAYER_INDEX", "Site", "layer_block", "layer_of", "stack_of"]
