"""One attention layer of a loaded model (:class:`Site`) and how a module's dotted name tells its stack and layer:
moved to :mod:`models.sites.site`, the floor the probe and the capture share; the names are re-exported here."""

from ..sites.site import (CROSS_MARKERS, GATE_MIXED, GATE_NONE, GATE_OUTPUT, GATE_PROJ, GATE_SOFTMAX, GATES,
                          LAYER_INDEX, Site, layer_block, layer_of, stack_of)

__all__ = ["CROSS_MARKERS", "GATES", "GATE_MIXED", "GATE_NONE", "GATE_OUTPUT", "GATE_PROJ", "GATE_SOFTMAX",
           "LAYER_INDEX", "Site", "layer_block", "layer_of", "stack_of"]
