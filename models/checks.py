"""The argument checks of every public function of the engine (issue 27): one spelling of "a whole number in a
range", "a finite number", "one of these", "a loaded model", "a text" and "positions of a sequence", each raising
:class:`~models.errors.InvalidArgumentError` (or :class:`~models.errors.EmptyTextError` for an empty text) with a
``code`` and the values it names, so the app says the same in Turkish (``errmsg_<code>`` in
``assets/i18n/errors.json``).

A function checks its arguments before it allocates anything: a size asked for is bounded here (by the model's
own limit, or by :data:`MAX_BYTES` for an array built on request), never by the allocator's ``MemoryError``.
"""

from __future__ import annotations

import functools
import math
import numbers
from typing import Any, Literal, overload
from collections.abc import Iterable, Sequence

import numpy as np
import torch

from .errors import AttentionTooLargeError, EmptyTextError, InvalidArgumentError

# the largest array a function builds on request (a mask, a bias, a table): 256 MiB, so that its temporaries
# (a few times that) stay within a laptop's memory; an n × n bool mask to n = 16,384, float64 to n = 5,792 (a
# model's own limit for weights, 8,192 tokens, is a 64 MiB bool mask)
MAX_BYTES = 1 << 28
# the message an empty text gets, by the text's name (the others: "empty_text")
EMPTY_CODES = {"text": "empty_text", "text pair": "empty_text_pair", "target text": "empty_target_text",
               "prompt": "empty_prompt"}


def shown(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters (a message names what it got without quoting a whole text)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _range(low, high) -> str:
    if low is not None and high is not None:
        return f"[{low}, {high}]"
    return f">= {low}" if low is not None else f"<= {high}"


@overload
def whole(name: str, value: Any, low: int | None = None, high: int | None = None, *,
          none: Literal[False] = False) -> int: ...
@overload
def whole(name: str, value: Any, low: int | None = None, high: int | None = None, *,
          none: bool) -> int | None: ...
def whole(name: str, value: Any, low: int | None = None, high: int | None = None, *,
          none: bool = False) -> int | None:
    """``value`` as a Python int in ``[low, high]`` (either end open when None); ``None`` passes when ``none``.

    A bool is not a whole number here; numpy integers are.

    Raises:
        InvalidArgumentError: code ``arg_whole`` (params ``name``, ``range``, ``value``).
    """
    if value is None and none:
        return None
    ok = isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))
    if ok:
        value = int(value)
        ok = (low is None or value >= low) and (high is None or value <= high)
    if not ok:
        rng = _range(low, high) if (low is not None or high is not None) else "(any)"
        raise InvalidArgumentError(f"{name} must be a whole number ({rng}), got {shown(value)}.",
                                   code="arg_whole", name=name, range=rng, value=shown(value))
    return value


def number(name: str, value: Any, low: float | None = None, high: float | None = None, *,
           above: bool = False) -> float:
    """``value`` as a finite float in ``[low, high]`` (``(low, high]`` when ``above``).

    Raises:
        InvalidArgumentError: code ``arg_number`` (params ``name``, ``range``, ``value``).
    """
    ok = isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
    if ok:
        value = float(value)
        ok = math.isfinite(value) and (low is None or (value > low if above else value >= low)) and (
            high is None or value <= high)
    if not ok:
        rng = _range(low, high) if (low is not None or high is not None) else "(any)"
        if above and low is not None:
            rng = f"> {low}" if high is None else f"({low}, {high}]"
        raise InvalidArgumentError(f"{name} must be a finite number ({rng}), got {shown(value)}.",
                                   code="arg_number", name=name, range=rng, value=shown(value))
    return value


def choice(name: str, value: Any, options: Iterable) -> Any:
    """``value`` when it is one of ``options``.

    Raises:
        InvalidArgumentError: code ``arg_choice`` (params ``name``, ``options``, ``value``).
    """
    options = list(options)
    try:
        ok = bool(value in options)
    except (TypeError, ValueError):  # unhashable against a dict's keys; an array (ambiguous truth value)
        ok = False
    if not ok:
        listed = ", ".join(map(str, options))
        raise InvalidArgumentError(f"{name} must be one of {listed}; got {shown(value)}.",
                                   code="arg_choice", name=name, options=listed, value=shown(value))
    return value


def loaded_model(value: Any, name: str = "loaded"):
    """``value`` when it is a :class:`~models.loading.model.LoadedModel` (what :func:`models.load` returns).

    Raises:
        InvalidArgumentError: code ``arg_model`` (params ``name``, ``value``): a model's name or a bare
            transformers model instead.
    """
    from .loading.model import LoadedModel

    if not isinstance(value, LoadedModel):
        raise InvalidArgumentError(f"{name} must be a loaded model (models.load(...)), got {shown(value)}.",
                                   code="arg_model", name=name, value=type(value).__name__)
    return value


def callback(name: str, value: Any) -> Any:
    """``value`` when it is None or callable (a ``progress`` function called with the fraction done).

    Raises:
        InvalidArgumentError: code ``arg_callback`` (params ``name``, ``value``).
    """
    if value is not None and not callable(value):
        raise InvalidArgumentError(f"{name} must be a function (called with the fraction done) or None, got "
                                   f"{shown(value)}.", code="arg_callback", name=name, value=shown(value))
    return value


def needs_model(fn):
    """Decorator of a function whose first argument is ``loaded``: it is checked by :func:`loaded_model` before
    the function runs (a model's name or ``None`` in its place gets an InvalidArgumentError, not an
    AttributeError from deep inside), and so is a ``progress`` keyword (:func:`callback`)."""

    @functools.wraps(fn)
    def checked(loaded, *args, **kwargs):
        loaded_model(loaded)
        callback("progress", kwargs.get("progress"))
        return fn(loaded, *args, **kwargs)

    return checked


def text(value: Any, name: str = "text") -> str:
    """``value`` when it is a non-blank string that UTF-8 can encode.

    Raises:
        InvalidArgumentError: not a string (code ``arg_text``), or a string with a lone surrogate (a half of a
            UTF-16 pair, e.g. ``"\\ud800"``; code ``text_unencodable``, params ``name``, ``position``): no
            tokenizer can read it.
        EmptyTextError: empty or only whitespace (code from :data:`EMPTY_CODES`, else ``empty_text``).
    """
    if not isinstance(value, str):
        raise InvalidArgumentError(f"The {name} must be a string, got {type(value).__name__}.", code="arg_text",
                                   name=name, value=type(value).__name__)
    if not value.strip():
        raise EmptyTextError(f"The {name} is empty: type a sentence to analyse.",
                             code=EMPTY_CODES.get(name, "empty_text"))
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(
            f"The {name} has a lone surrogate (U+{ord(value[exc.start]):04X}) at character {exc.start}: it is half "
            "of a UTF-16 pair and no tokenizer can read it. Remove it or give the whole character.",
            code="text_unencodable", name=name, position=exc.start) from None
    return value


def texts(value: Any, name: str = "texts", *, least: int = 1) -> list[str]:
    """One text or a sequence of texts, as a list of checked texts (:func:`text`), at least ``least``.

    Raises:
        InvalidArgumentError: not a string or a sequence of strings, fewer than ``least`` (code ``arg_texts``),
            or a text :func:`text` refuses.
        EmptyTextError: an empty list, or a blank text.
    """
    items = [value] if isinstance(value, str) else value
    if isinstance(items, (list, tuple)) and not items and least >= 1:
        raise EmptyTextError(f"No text was given ({name} is empty): type a sentence to analyse.", code="empty_text")
    if not isinstance(items, (list, tuple)) or len(items) < least:
        raise InvalidArgumentError(f"{name} must be a text or a list of at least {least} texts, got {shown(value)}.",
                                   code="arg_texts", name=name, least=least, value=shown(value))
    return [text(t, name) for t in items]


def positions(name: str, value: Any, n: int, *, none: bool = True) -> list[int] | None:
    """Positions of a sequence of ``n``: one int or a sequence of ints, each in ``[-n, n - 1]`` (negative ones
    count from the end), returned as a list of ints in ``[0, n - 1]``; ``None`` passes when ``none``.

    Raises:
        InvalidArgumentError: code ``arg_positions`` (params ``name``, ``n``, ``value``).
    """
    if value is None and none:
        return None
    items = value.tolist() if isinstance(value, np.ndarray) else value
    if isinstance(items, numbers.Integral):
        items = [items]
    ok = isinstance(items, (list, tuple, range)) and len(items) > 0 and all(
        isinstance(i, numbers.Integral) and not isinstance(i, (bool, np.bool_)) and -n <= int(i) < n for i in items)
    if not ok:
        raise InvalidArgumentError(f"{name} must be a position or a non-empty list of positions in [{-n}, {n - 1}], "
                                   f"got {shown(value)}.", code="arg_positions", name=name, n=n, value=shown(value))
    return [int(i) % n for i in items]


def square_size(name: str, n: Any, *, least: int = 0, bytes_per_cell: int = 1, limit: int = MAX_BYTES) -> int:
    """``n`` for an n × n matrix of ``bytes_per_cell`` bytes a cell: a whole number >= ``least`` with
    n² · bytes_per_cell <= ``limit`` bytes.

    Raises:
        InvalidArgumentError: not a whole number >= ``least`` (code ``arg_whole``).
        AttentionTooLargeError: the matrix passes ``limit`` (code ``matrix_too_large``, params ``n``, ``size``).
    """
    n = whole(name, n, least)
    if n * n * bytes_per_cell > limit:
        size = _size(n * n * bytes_per_cell)
        raise AttentionTooLargeError(
            f"A {n} x {n} matrix takes {size}; the largest built here takes {_size(limit)} "
            f"(n <= {math.isqrt(limit // bytes_per_cell):,}). Ask for fewer positions.",
            code="matrix_too_large", n=n, size=size)
    return n


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**30:,.1f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:,.0f} MiB"


def instance(name: str, value: Any, kind: type | tuple[type, ...], expected: str) -> Any:
    """``value`` when it is an instance of ``kind``; ``expected`` says what it must be in the message (e.g. ``"the
    bytes of a file"``, ``"HeadScores (pruning.ablation_scores)"``).

    Raises:
        InvalidArgumentError: code ``arg_instance`` (params ``name``, ``value``: the type given; ``detail``: what
            it must be, in English).
    """
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        ok = False  # a bool is an int to isinstance, never a count or an index here
    else:
        ok = isinstance(value, kind)
    if not ok:
        raise InvalidArgumentError(f"{name} must be {expected}, got {type(value).__name__}.", code="arg_instance",
                                   name=name, detail=expected, value=type(value).__name__)
    return value


def sequence(name: str, value: Any, *, least: int = 1) -> Sequence:
    """``value`` when it is a list, tuple or range of at least ``least`` items (not a string).

    Raises:
        InvalidArgumentError: code ``arg_sequence`` (params ``name``, ``least``, ``value``).
    """
    if not isinstance(value, (list, tuple, range)) or len(value) < least:
        raise InvalidArgumentError(f"{name} must be a list of at least {least} item(s), got {shown(value)}.",
                                   code="arg_sequence", name=name, least=least, value=shown(value))
    return value


def array(name: str, value: Any, *, ndim: int | None = None, dtype=np.float64, finite: bool = False,
          shape: str | None = None) -> np.ndarray:
    """``value`` as a numpy array of ``dtype`` (None: its own numeric dtype) with ``ndim`` dimensions (any when
    None), all finite when ``finite``. ``shape`` names the expected shape in the message (e.g. ``"(n, n)"``).

    Raises:
        InvalidArgumentError: code ``arg_shape`` (params ``name``, ``shape``, ``got``): not convertible to
            ``dtype`` (a string, a ragged list, None), the wrong number of dimensions, or not finite.
    """
    want = shape or (f"{ndim}-D" if ndim is not None else "numeric")
    try:
        arr = np.asarray(value, dtype=dtype)
    except (TypeError, ValueError, OverflowError):
        arr = None
    if arr is None or arr.dtype.kind not in "biuf":  # a string, an object array
        got = shown(value)
    elif ndim is not None and arr.ndim != ndim:
        got = f"shape {arr.shape}"
    elif finite and not np.isfinite(arr).all():
        got = "values that are not finite"
    else:
        return arr
    raise InvalidArgumentError(f"{name} must be a {want} array{' of finite numbers' if finite else ''}, got {got}.",
                               code="arg_shape", name=name, shape=want, got=got)


def cells(name: str, *dims: int, bytes_per_cell: int = 8, limit: int = MAX_BYTES) -> None:
    """Refuse an array of shape ``dims`` (whole numbers, already checked) of more than ``limit`` bytes.

    Raises:
        AttentionTooLargeError: code ``array_too_large`` (params ``name``, ``shape``, ``size``).
    """
    total = math.prod(dims) * bytes_per_cell
    if total > limit:
        shape = " × ".join(f"{d:,}" for d in dims)
        size = _size(total)
        raise AttentionTooLargeError(f"{name} of shape {shape} takes {size}; the largest array built here takes "
                                     f"{_size(limit)}. Ask for fewer positions.", code="array_too_large",
                                     name=name, shape=shape, size=size)


# ---- indices checked before a kernel runs ----------------------------------------------------------------------

class IndexOutOfBounds(IndexError):
    """An index :func:`index_guard` refused before the kernel ran (the CPU would raise an IndexError there; a GPU
    kernel asserts on the device instead, and the process can use the GPU no more)."""


def _bad(index, size: int, dim: int) -> None:
    """Raise :class:`IndexOutOfBounds` when an integer ``index`` (tensor, list or int) leaves ``[-size, size)``."""
    if isinstance(index, (list, tuple)):
        if not index or not all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in index):
            return
        index = torch.tensor(index)
    if isinstance(index, torch.Tensor):
        if index.is_floating_point() or index.is_complex() or index.dtype == torch.bool or not index.numel():
            return
        low, high = int(index.min()), int(index.max())
    elif isinstance(index, numbers.Integral) and not isinstance(index, bool):
        low = high = int(index)
    else:
        return
    if low < -size or high >= size:
        bad = high if high >= size else low
        raise IndexOutOfBounds(f"index {bad} is out of bounds for dimension {dim} with size {size}")


def _getitem(t: torch.Tensor, key) -> None:
    """Check the integer indices of ``t[key]`` (ints, slices, None, Ellipsis, bool and integer tensors, lists)."""
    items = key if isinstance(key, tuple) else (key,)

    def width(item) -> int:  # dimensions of ``t`` an item consumes
        if item is None or item is Ellipsis:
            return 0
        if isinstance(item, torch.Tensor) and item.dtype == torch.bool:
            return item.dim()
        return 1

    dim = 0
    for at, item in enumerate(items):
        if item is Ellipsis:
            dim = t.dim() - sum(width(i) for i in items[at + 1:])
            continue
        if dim < t.dim() and not isinstance(item, slice) and width(item) == 1:
            _bad(item, t.shape[dim], dim)
        dim += width(item)


class _IndexGuard(torch.overrides.TorchFunctionMode):
    """See :func:`index_guard`."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in ("__getitem__", "__setitem__") and len(args) > 1 and isinstance(args[0], torch.Tensor):
            _getitem(args[0], args[1])
        elif name in ("index_select", "gather", "scatter", "scatter_", "scatter_add", "scatter_add_",
                      "scatter_reduce", "scatter_reduce_", "index_add", "index_add_", "index_copy", "index_copy_",
                      "index_fill", "index_fill_") and len(args) > 2 and isinstance(args[0], torch.Tensor):
            dim = args[1] if isinstance(args[1], int) else kwargs.get("dim")
            if isinstance(dim, int) and args[0].dim():
                _bad(args[2], args[0].shape[dim], dim % args[0].dim())
        elif func is torch.nn.functional.embedding and len(args) > 1 and isinstance(args[1], torch.Tensor):
            _bad(args[0], args[1].shape[0], 0)  # (indices, weight)
        elif func is torch.embedding and len(args) > 1 and isinstance(args[0], torch.Tensor):
            _bad(args[1], args[0].shape[0], 0)  # (weight, indices)
        elif name == "take" and len(args) > 1 and isinstance(args[0], torch.Tensor):
            _bad(args[1], args[0].numel(), 0)
        return func(*args, **kwargs)


def index_guard():
    """Context in which every integer index of a tensor indexing op (``t[idx]`` and ``t[idx] = v``,
    ``index_select``, ``gather``, ``scatter*``, ``index_add/copy/fill``, ``take``, ``embedding``) is checked against
    the size it indexes before the op runs, raising :class:`IndexOutOfBounds` (an IndexError) for one out of range.

    For the probes that run a model in a way it may not take and catch what fails (a mask form the model's code
    does not read): on the CPU torch raises an IndexError there, which the probe catches; on a GPU the kernel
    asserts on the device instead, and every later CUDA call of the process fails. Each checked index costs a
    ``min``/``max`` (a device sync on a GPU): for load-time probes on a short text, not for analyses.
    """
    return _IndexGuard()
