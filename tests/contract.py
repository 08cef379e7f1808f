"""What the contract tests share (issue 47): the odd values every parameter is tried with, what a returned value
must be, and one call timed. tests/engine/test_contracts.py (tiny models) and tests/bundled/test_contracts_speech.py
(Whisper) use them."""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np
import torch

import live
import models

# None, NaN, ±inf, a negative, a huge count, an empty string, bytes, a lone surrogate, an empty list, an object, a bool
ODD = (None, float("nan"), float("inf"), float("-inf"), -1, 10 ** 30, "", b"x", "a\ud800b", [], object(), True)
REFUSAL_SECONDS = 1.0  # a refusal comes before the work starts


def finite(value, depth: int = 0) -> bool:
    """Every float in ``value`` is finite (arrays, tensors, dicts, lists, tuples and dataclasses, 3 levels)."""
    if depth > 3:
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, np.ndarray) and value.dtype.kind == "f":
        return bool(np.isfinite(value).all())
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return bool(torch.isfinite(value).all())
    if isinstance(value, dict):
        return all(finite(v, depth + 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(finite(v, depth + 1) for v in value[:100])
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return all(finite(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value))
    return True


@dataclasses.dataclass
class Tally:
    """What the contract tests count (README's testing section): calls made, raw Python errors, results that are
    not finite, refusals that took a second or more."""

    calls: int = 0
    raw: int = 0
    not_finite: int = 0
    slow: int = 0


def call(fn, kwargs: dict, tally: Tally | None = None, *, limit: float | None = REFUSAL_SECONDS) -> str | None:
    """Call ``fn(**kwargs)``; None when it keeps its contract (a finite result, or a coded error within ``limit``
    seconds: refused before the work), else what went wrong. A result is not timed (the work itself takes what
    the machine gives it)."""
    tally = tally if tally is not None else Tally()
    tally.calls += 1
    start = time.perf_counter()
    try:
        result = fn(**kwargs)
    except (models.DikkatError, live.LiveError):
        if limit is not None and time.perf_counter() - start >= limit:
            tally.slow += 1
            return f"refused after {time.perf_counter() - start:.2f} s: not before the work"
        return None
    except Exception as exc:  # noqa: BLE001  (a raw Python error: the fault this test is for)
        tally.raw += 1
        return f"{type(exc).__name__}: {str(exc)[:100]}"
    if not finite(result):
        tally.not_finite += 1
        return "returned a number that is not finite"
    return None


def odd_calls(name: str, fn, good: dict, tally: Tally, *, odd: tuple = ODD) -> list[str]:
    """Each parameter of ``good`` in turn replaced by each odd value: the faults, one line each."""
    faults = []
    for param in good:
        for value in odd:
            fault = call(fn, dict(good, **{param: value}), tally)
            if fault:
                faults.append(f"{name}({param}={value!r:.30}): {fault}")
    return faults
