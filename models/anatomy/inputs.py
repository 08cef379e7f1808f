"""The tiny input every load-time probe runs the model on, and what a model's forward pass accepts: moved to
:mod:`models.sites.inputs` (the floor the probe and the capture share); the names are re-exported here."""

from ..sites.inputs import accepts, probe_inputs

__all__ = ["accepts", "probe_inputs"]
