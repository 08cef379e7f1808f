"""What a model returns as ``output_attentions``, read as per-layer maps and checked: moved to
:mod:`models.sites.maps` (the floor the probe and the capture share); the names are re-exported here."""

from ..sites.maps import attention_tuples, check_maps, local_to_full, rows_sum_to_one

__all__ = ["attention_tuples", "check_maps", "local_to_full", "rows_sum_to_one"]
