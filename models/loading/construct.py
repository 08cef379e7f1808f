"""One model built at a time in this process.

transformers 5's ``from_pretrained`` (and ``_from_config``) build a model inside context managers that patch the
library for the whole process, not for the calling thread (transformers/initialization.py): ``no_tie_weights``
swaps ``PreTrainedModel.tie_weights`` for a function that does nothing, ``no_init_weights`` swaps
``PreTrainedModel.init_weights`` and ``torch.nn.init``'s functions, and ``local_torch_dtype`` sets torch's
default dtype. Two threads building models at once (a class's sessions opening two pages, the server's warm-up
beside a page) see each other's patches: a tied output layer (``lm_head``) is left untied on the meta device, and
when the two threads' restores interleave, the do-nothing ``tie_weights`` stays for the life of the process, so
every later load of a tied model fails ("Cannot copy out of meta tensor"; the lesson walk of issue 50 met it on
the Positions step: SmolLM2's conversion failed on every run). Upstream: huggingface/transformers pull request
44940 ("tie_weights skipping logic is not tied to model thread scope", open).

Every place in Dikkat that builds a transformers model does it under :data:`BUILD_LOCK` (:func:`building`); a
model's forward passes do not take it."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from collections.abc import Iterator

BUILD_LOCK = threading.RLock()  # re-entrant: a conversion (GGUF -> safetensors) builds inside a load


@contextmanager
def building() -> Iterator[None]:
    """Hold :data:`BUILD_LOCK` while a transformers model is built (``from_pretrained``, ``_from_config``, a
    model class called on a config) and, for a conversion, saved."""
    with BUILD_LOCK:
        yield
