"""A model that cannot run in the half-precision dtype it was asked for (or ``auto`` chose on a GPU) is loaded again
in float32, and says why (:func:`half_precision_fault`, :func:`dtype_note`).

Some families' own code mixes dtypes: DeBERTa builds its relative-position scores in float32 and multiplies them
with bfloat16 queries ("expected scalar type Float but found BFloat16" on CUDA, "expected m1 and m2 to have the same
dtype" on the CPU), Reformer's layer norm meets a float32 input ("mixed dtype"), some CPU kernels have no ``Half``
version ("not implemented for 'Half'"). Others run but round their weights so that the rows of their eager
``output_attentions`` sum to 0.998 .. 1, which the load-time check refuses as "not attention weights". Either way
the load-time probe fails in the half dtype and not in float32: the model is usable, at twice the memory.
"""

from __future__ import annotations

import re
import traceback

import torch

from ..errors import DikkatError, NoAttentionWeightsError
from .library_errors import _chain

HALF = (torch.float16, torch.bfloat16)
# what torch's and the families' dtype mismatches say (CUDA, CPU and MPS wordings)
_DTYPE_WORDS = re.compile(r"b?float16|bfloat16|\bhalf\b|scalar type|same dtype|mixed dtype|dtype", re.IGNORECASE)


def half_precision_fault(exc: BaseException, dtype: torch.dtype) -> str | None:
    """Why loading in ``dtype`` failed when it is a fault of the half dtype, else None.

    Args:
        exc: what the load (weights, probes) raised. dtype: the dtype it loaded in.

    Returns:
        ``"dtype"``: a RuntimeError / TypeError / NotImplementedError naming a dtype in the chain (a mismatch or an
        operation without a half kernel); ``"rounding"``: eager maps whose rows miss 1 by the half dtype's rounding
        (code ``not_attention_maps``, rows summing ...); None otherwise (out of memory, a missing file, a model
        that returns no maps, any failure float32 would meet too).
    """
    if dtype not in HALF or isinstance(exc, (MemoryError, torch.OutOfMemoryError)):
        return None
    if isinstance(exc, NoAttentionWeightsError) and exc.code == "not_attention_maps" \
            and str(exc.params.get("why", "")).startswith("rows summing"):
        return "rounding"
    for link in _chain(exc):
        if isinstance(link, (MemoryError, torch.OutOfMemoryError)):
            return None
        if isinstance(link, (RuntimeError, TypeError, NotImplementedError)) and not isinstance(link, DikkatError) \
                and _DTYPE_WORDS.search(str(link)):
            return "dtype"
    return None


def forget_frames(exc: BaseException) -> None:
    """Drop the local variables of the frames ``exc`` (and what it was raised from) passed through, so the half
    model a failed load built is freed before the float32 one is loaded (the message and types stay)."""
    for link in _chain(exc):
        if link.__traceback__ is not None:
            traceback.clear_frames(link.__traceback__)


def dtype_note(asked: torch.dtype, used: torch.dtype, kind: str, exc: BaseException) -> dict:
    """The note a model loaded again in ``used`` keeps (``LoadedModel.notes``): code ``dtype_fallback``, params
    ``asked``, ``used``, ``kind`` (``dtype`` or ``rounding``, see :func:`half_precision_fault`) and ``detail`` (the
    library's English, for the log), and ``message`` in English."""
    name = lambda d: str(d).replace("torch.", "")  # noqa: E731
    why = ("its code mixes dtypes in that precision" if kind == "dtype"
           else "its attention weights, rounded in that precision, do not sum to 1")
    return {"code": "dtype_fallback", "asked": name(asked), "used": name(used), "kind": kind,
            "detail": str(exc)[:300],
            "message": f"Loaded in {name(used)}, not {name(asked)}: the model cannot run in {name(asked)} ({why}). "
                       "It takes twice the memory."}
