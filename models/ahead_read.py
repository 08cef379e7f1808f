"""Reading a result computed ahead (:mod:`models.ahead`) back, checked before it is believed (issue 44 point 6).

The files under :func:`models.ahead.root` are input like any other: a disk that filled up, a copy from another
machine, an older release or a hand edit can leave a file that is not what :func:`models.ahead.save` wrote. A page
reads them for every student, so a bad one must be refused before it costs memory or reaches a page, never
crash it. :func:`read` checks, in this order, and raises :class:`BadResultFile` at the first fault:

1. the ``.json`` file's size on disk against :attr:`Limits.json_bytes` (before it is read);
2. its format (:data:`FORMAT`), and that it is the result of the job asked for (kind, model, parameters);
3. its list of arrays (name, dtype, shape): plain numeric, boolean or text dtypes only (nothing pickled), and their
   bytes together against :attr:`Limits.array_bytes`, derived from what a result of this kind on this model holds;
4. the ``.npz`` file's size on disk, then each member's *uncompressed* size from the zip directory
   (:meth:`zipfile.ZipFile.infolist`) against the array it must hold, before a byte is inflated (a 2 MiB file that
   inflates to 2 GiB is refused here), then each member's ``.npy`` header against the list;
5. the result's tree: each dataclass is one of the engine's (never a live object such as a model or an analysis),
   the one the job's kind returns at the top, every field of the type its annotation names (an array where an
   array is declared, a number where a number is, ...), and the arrays of one object agree on the dimensions their
   docstring names (``(steps,)`` and ``(orders, steps)`` share ``steps``).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import json
import math
import re
import types
import typing
import zipfile
from collections import abc
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = 2  # what models.ahead.save writes; a file of another format is not read
ARRAY_HEADER_BYTES = 4096  # an .npy header: numpy pads it to 64 bytes; ours take about 128
ZIP_ENTRY_BYTES = 4096  # a member's local header, name and directory entry, generously
MAX_DEPTH = 48  # nesting of the result's tree (the deepest result today is 5)
ARRAY_KINDS = "biufcUS"  # booleans, integers, floats, complex numbers, text: nothing that holds objects
# What a result can hold: an experiment keeps a few dozen numbers per head (scores, intervals, per-text values) and a
# few per-token or per-frame arrays (a 30 s clip's alignment matrix, 448 tokens x 1,500 frames in float32, is 2.7 MB);
# a pruning curve keeps (random orders + 3) numbers per step (its shares: the default ten, or at most one per head).
EXPERIMENT_BYTES_PER_HEAD = 64 * 1024
EXPERIMENT_FIXED_BYTES = 16 * 1024 * 1024
JSON_FIXED_BYTES = 4 * 1024 * 1024  # texts, labels, head lists: the largest kept today is 6.5 KB
JSON_BYTES_PER_HEAD = 512


class BadResultFile(ValueError):
    """A result file that is not one :func:`models.ahead.save` wrote for this job (the reason in English, for the
    server's log; the pages say only that a kept result was ignored)."""


@dataclass(frozen=True)
class Limits:
    """The most a result's files may hold (bytes): the ``.json`` file, and the arrays of the ``.npz`` file
    uncompressed, together."""

    json_bytes: int
    array_bytes: int


def limits(job, loaded) -> Limits:
    """The :class:`Limits` of ``job``'s result on ``loaded``: derived from the model's heads and the job's parameters
    (see the constants of this module)."""
    heads = sum(int(layers) * int(per) for layers, per in loaded.stacks.values())
    params = len(json.dumps(job.params, ensure_ascii=True))
    if job.kind == "pruning_curve":
        from .pruning.curve import DEFAULT_SHARES

        orders = int(job.params.get("random_orders", 0))
        arrays = (orders + 3) * max(len(DEFAULT_SHARES), heads + 1) * 8
    else:
        arrays = EXPERIMENT_FIXED_BYTES + heads * EXPERIMENT_BYTES_PER_HEAD
    return Limits(json_bytes=JSON_FIXED_BYTES + 4 * params + heads * JSON_BYTES_PER_HEAD, array_bytes=arrays)


@functools.lru_cache(maxsize=1)
def live_types() -> tuple[type, ...]:
    """The engine's dataclasses that hold a model or what it computed live: never kept on disk
    (:func:`models.ahead.save` leaves them out) and never built from a file."""
    from . import Analysis, AudioAnalysis, Flow, LoadedModel

    return (Analysis, AudioAnalysis, Flow, LoadedModel)


def manifest(arrays: dict[str, np.ndarray]) -> dict[str, dict]:
    """What the ``.json`` file says of each array of the ``.npz`` file: ``{"dtype": "<f4", "shape": [2, 4]}``."""
    return {name: {"dtype": a.dtype.str, "shape": list(a.shape)} for name, a in arrays.items()}


def expected_type(job) -> type:
    """The class a result of ``job`` is: :class:`models.pruning.PruningCurve` for a pruning curve, the class the
    experiment's function returns for an experiment."""
    if job.kind == "pruning_curve":
        from .pruning.curve import PruningCurve

        return PruningCurve
    from .experiments import get

    return get(job.params.get("key")).result_type()


def read(json_path: Path, npz_path: Path, job, loaded) -> Any:
    """The result kept in ``json_path`` and ``npz_path`` for ``job`` on ``loaded``, every check of the module's
    docstring passed.

    Raises:
        BadResultFile: the first check that failed. FileNotFoundError: no ``.json`` file (nothing kept).
    """
    bound = limits(job, loaded)
    size = json_path.stat().st_size
    if size > bound.json_bytes:
        raise BadResultFile(f"{json_path.name} has {size} bytes, more than the {bound.json_bytes} a result can hold")
    try:
        data = json.loads(json_path.read_bytes().decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise BadResultFile(f"{json_path.name} is not JSON: {str(exc)[:120]}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise BadResultFile(f"{json_path.name} is not of format {FORMAT}")
    if data.get("job") != {"kind": job.kind, "model": job.model, "params": job.params}:
        raise BadResultFile(f"{json_path.name} is the result of another job")
    specs = _array_specs(data.get("arrays"), bound.array_bytes)
    arrays = _read_arrays(npz_path, specs, bound.array_bytes)
    return _Reader(arrays).top(data.get("result"), expected_type(job))


def _array_specs(raw, limit: int) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """The arrays the ``.json`` file lists, checked: name, dtype, shape, and their bytes together within ``limit``."""
    if not isinstance(raw, dict):
        raise BadResultFile("no list of arrays")
    specs, total = {}, 0
    for name, spec in raw.items():
        if not (isinstance(name, str) and re.fullmatch(r"a\d{1,6}", name) and isinstance(spec, dict)):
            raise BadResultFile(f"an array entry {str(name)[:20]!r} is malformed")
        shape = spec.get("shape")
        try:
            dtype = np.dtype(str(spec.get("dtype")))
        except (TypeError, ValueError):
            raise BadResultFile(f"array {name} has no usable dtype") from None
        if dtype.kind not in ARRAY_KINDS or dtype.hasobject or dtype.fields is not None:
            raise BadResultFile(f"array {name} has dtype {dtype.str}, which is not kept")
        if not (isinstance(shape, list) and len(shape) <= 8 and all(type(n) is int and n >= 0 for n in shape)):
            raise BadResultFile(f"array {name} has no usable shape")
        total += math.prod(shape) * dtype.itemsize
        if total > limit:
            raise BadResultFile(f"the arrays hold more than the {limit} bytes a result can hold")
        specs[name] = (dtype, tuple(shape))
    return specs


def _read_arrays(path: Path, specs: dict, limit: int) -> dict[str, np.ndarray]:
    """Each listed array of the ``.npz`` file, every size checked before anything is inflated."""
    size = path.stat().st_size
    most = limit + (len(specs) + 1) * (ARRAY_HEADER_BYTES + ZIP_ENTRY_BYTES)
    if size > most:
        raise BadResultFile(f"{path.name} has {size} bytes, more than the {most} its arrays can take")
    arrays = {}
    try:
        with zipfile.ZipFile(path) as zf:
            members = {info.filename: info for info in zf.infolist()}
            if set(members) != {f"{name}.npy" for name in specs}:
                raise BadResultFile(f"{path.name} does not hold the arrays its result lists")
            for name, (dtype, shape) in specs.items():
                info, nbytes = members[f"{name}.npy"], math.prod(shape) * dtype.itemsize
                if not nbytes <= info.file_size <= nbytes + ARRAY_HEADER_BYTES:
                    raise BadResultFile(f"{name}.npy inflates to {info.file_size} bytes, not the {nbytes} + header "
                                        "of its listed shape")
            for name, (dtype, shape) in specs.items():
                with zf.open(members[f"{name}.npy"]) as fh:
                    arrays[name] = _read_npy(fh, name, dtype, shape)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, NotImplementedError, OSError) as exc:
        raise BadResultFile(f"{path.name} cannot be read: {type(exc).__name__}: {str(exc)[:120]}") from None
    return arrays


def _read_npy(fh, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    fmt = np.lib.format
    try:
        version = fmt.read_magic(fh)
        reader = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
        got_shape, fortran, got_dtype = reader(fh, max_header_size=ARRAY_HEADER_BYTES)
    except ValueError as exc:
        raise BadResultFile(f"{name}.npy has no usable header: {str(exc)[:120]}") from None
    if tuple(got_shape) != shape or got_dtype != dtype or got_dtype.hasobject:
        raise BadResultFile(f"{name}.npy holds {got_dtype} {tuple(got_shape)}, not the listed {dtype} {shape}")
    nbytes = math.prod(shape) * dtype.itemsize
    raw = fh.read(nbytes)
    if len(raw) != nbytes or fh.read(1):
        raise BadResultFile(f"{name}.npy does not hold exactly its {nbytes} bytes")
    return np.frombuffer(bytearray(raw), dtype=dtype).reshape(shape, order="F" if fortran else "C")


# ------------------------------------------------------------------------------------------------ the result's tree


@functools.lru_cache(maxsize=256)
def _hints(cls: type) -> dict[str, Any]:
    """Each field's type annotation, resolved (``Any`` for one that cannot be)."""
    try:
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - a name only imported for type checkers: resolve the fields one by one
        module = vars(importlib.import_module(cls.__module__))
        out = {}
        for f in dataclasses.fields(cls):
            try:
                out[f.name] = eval(f.type, module) if isinstance(f.type, str) else f.type  # noqa: S307 - our source
            except Exception:  # noqa: BLE001
                out[f.name] = Any
        return out


@functools.lru_cache(maxsize=256)
def _documented_dims(cls: type) -> dict[str, tuple]:
    """Field -> the dimensions its docstring names (``float64 ``(orders, steps)```` -> ``("orders", "steps")``):
    a name, a whole number, ``...`` (any leading dimensions) or None (an expression: not checked). Fields documented
    with an alternative shape (``(or ...``) are left out."""
    doc = inspect.getdoc(cls) or ""
    fields = {f.name for f in dataclasses.fields(cls)}
    out = {}
    for m in re.finditer(r"(?:^|[\s.;])((?:\w+, )*\w+): [^:`]*?``\(([^`]*)\)``(\s*\(or)?", doc, flags=re.MULTILINE):
        names, dims, alternative = m.groups()
        parts = [d.strip() for d in dims.split(",")]
        if parts and parts[-1] == "":
            parts.pop()
        shape = tuple(int(d) if d.isdigit() else d if re.fullmatch(r"[A-Za-z_]\w*|\.\.\.", d) else None
                      for d in parts)
        for name in names.split(", "):
            if name in fields and name not in out and not alternative:
                out[name] = shape
    return out


def _check_dims(cls: type, obj) -> None:
    """The arrays of ``obj`` have as many dimensions as documented, and the sizes its docstring names agree."""
    seen: dict[str, int] = {}
    for name, dims in _documented_dims(cls).items():
        value = getattr(obj, name, None)
        if not isinstance(value, np.ndarray):
            continue
        if "..." in dims:
            cut = dims.index("...")
            head, tail = dims[:cut], dims[cut + 1:]
            if value.ndim < len(head) + len(tail):
                raise BadResultFile(f"{cls.__name__}.{name} has {value.ndim} dimensions, fewer than documented")
            pairs = list(zip(head, value.shape)) + list(zip(tail, value.shape[value.ndim - len(tail):]))
        elif value.ndim != len(dims):
            raise BadResultFile(f"{cls.__name__}.{name} has {value.ndim} dimensions, not the {len(dims)} documented")
        else:
            pairs = list(zip(dims, value.shape))
        for dim, size in pairs:
            if isinstance(dim, int) and size != dim or isinstance(dim, str) and seen.setdefault(dim, size) != size:
                raise BadResultFile(f"{cls.__name__}.{name} has shape {value.shape}, which does not agree with the "
                                    f"other arrays on {dim}")


def _options(hint) -> tuple:
    """The members of a union (``X | None``), else ``(hint,)``."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return typing.get_args(hint)
    return (hint,)


def _fits(value, hint) -> bool:
    """Whether ``value`` (already built) is of the kind ``hint`` names; lenient where the annotation is loose (a
    float field that holds a whole number, a list that holds a tuple)."""
    if hint is Any or hint is object or isinstance(hint, (str, typing.TypeVar)):
        return True
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return any(_fits(value, h) for h in typing.get_args(hint))
    if hint is None or hint is type(None):
        return value is None
    cls = typing.get_origin(hint) or hint
    if not isinstance(cls, type):
        return True  # Callable, Literal ...: not what a result keeps
    if cls is float:
        return isinstance(value, (int, float))
    if cls in (list, tuple, abc.Sequence):
        return isinstance(value, (list, tuple))
    if cls is np.ndarray:
        return isinstance(value, np.ndarray)
    try:
        return isinstance(value, cls)
    except TypeError:
        return True


def _droppable(hint) -> bool:
    """Whether a field of this type may be one that :func:`models.ahead.save` left out (a live object): never one
    that holds numbers, text, containers or the engine's own result classes."""
    for option in _options(hint):
        cls = typing.get_origin(option) or option
        if option is Any or option is object or (isinstance(cls, type) and issubclass(cls, live_types())):
            return True
        if isinstance(cls, type) and not dataclasses.is_dataclass(cls) and cls.__module__.split(".")[0] not in (
                "builtins", "numpy", "typing", "collections"):
            return True  # a tensor, a tokenizer ...
        if isinstance(cls, type) and issubclass(cls, (set, frozenset)):
            return True  # kept as left out
    return False


def _item_hints(hint, n: int) -> list:
    """The hint of each of ``n`` items of a list or tuple typed ``hint``."""
    args = typing.get_args(hint) if typing.get_origin(hint) in (list, tuple, abc.Sequence) else ()
    if not args:
        return [Any] * n
    if typing.get_origin(hint) is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        if len(args) != n:
            raise BadResultFile(f"a tuple of {n} items where {len(args)} are declared")
        return list(args)
    return [args[0]] * n


def _single(hint):
    """``X`` for ``X | None``; ``Any`` for a wider union (its items then checked only by the union as a whole)."""
    options = [h for h in _options(hint) if h is not type(None)]
    return options[0] if len(options) == 1 else Any


class _Reader:
    """Builds the result from its JSON data and arrays, checking each value against what its field declares."""

    def __init__(self, arrays: dict[str, np.ndarray]):
        self.arrays = arrays

    def top(self, raw, expected: type):
        value = self.build(raw, expected, 0)
        if not isinstance(value, expected):
            raise BadResultFile(f"the result is a {type(value).__name__}, not a {expected.__name__}")
        return value

    def build(self, raw, hint, depth: int):
        if depth > MAX_DEPTH:
            raise BadResultFile("the result is nested too deep")
        if isinstance(raw, dict) and "__dropped__" in raw:
            if not _droppable(hint):
                raise BadResultFile(f"a value of type {_named(hint)} is marked as left out")
            return None
        value = self._plain(raw, _single(hint), depth)
        if not _fits(value, hint):
            raise BadResultFile(f"a {type(value).__name__} where {_named(hint)} is declared")
        return value

    def _plain(self, raw, hint, depth: int):
        if isinstance(raw, list):
            return [self.build(v, h, depth + 1) for v, h in zip(raw, _item_hints(hint, len(raw)))]
        if raw is None or isinstance(raw, (bool, int, float, str)):
            return raw
        if not isinstance(raw, dict) or len(raw) > 2:
            raise BadResultFile("an entry of the result is malformed")
        if "__array__" in raw:
            if raw["__array__"] not in self.arrays:
                raise BadResultFile(f"the result names an array {str(raw['__array__'])[:20]!r} that is not kept")
            return self.arrays[raw["__array__"]]
        if "__float__" in raw:
            return float(str(raw["__float__"]))
        if "__list__" in raw:
            items = raw["__list__"]
            return np.array(self.build(items, list, depth + 1) if isinstance(items, list) else [], dtype=object)
        if "__tuple__" in raw and isinstance(raw["__tuple__"], list):
            items = raw["__tuple__"]
            return tuple(self.build(v, h, depth + 1) for v, h in zip(items, _item_hints(hint, len(items))))
        if "__dict__" in raw and isinstance(raw["__dict__"], list):
            args = typing.get_args(hint) if typing.get_origin(hint) is dict else ()
            key_hint, value_hint = args if len(args) == 2 else (Any, Any)
            out = {}
            for pair in raw["__dict__"]:
                if not (isinstance(pair, list) and len(pair) == 2):
                    raise BadResultFile("a dictionary entry is malformed")
                out[_hashable(self.build(pair[0], key_hint, depth + 1))] = self.build(pair[1], value_hint, depth + 1)
            return out
        if "__dataclass__" in raw and isinstance(raw.get("fields"), dict):
            return self._dataclass(str(raw["__dataclass__"]), raw["fields"], depth)
        raise BadResultFile(f"unknown entry {sorted(map(str, raw))[:3]}")

    def _dataclass(self, name: str, fields: dict, depth: int):
        module, _, qualname = name.partition(":")
        if not module.startswith("models.") or not re.fullmatch(r"[\w.]+", module + qualname):
            raise BadResultFile(f"not a class of the engine: {name[:80]}")
        try:
            cls = importlib.import_module(module)
            for part in qualname.split("."):
                cls = getattr(cls, part)
        except (ImportError, AttributeError):
            raise BadResultFile(f"no class {name[:80]} in the engine") from None
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)) or issubclass(cls, live_types()):
            raise BadResultFile(f"not a result class of the engine: {name[:80]}")
        hints = _hints(cls)
        obj = cls.__new__(cls)
        for f in dataclasses.fields(cls):
            hint = hints.get(f.name, Any)
            if f.name in fields:
                value = self.build(fields[f.name], hint, depth + 1)
            elif f.default is not dataclasses.MISSING:
                value = f.default
            elif f.default_factory is not dataclasses.MISSING:
                value = f.default_factory()
            elif _fits(None, hint):
                value = None
            else:
                raise BadResultFile(f"{cls.__name__}.{f.name} is missing")
            object.__setattr__(obj, f.name, value)  # frozen dataclasses too; no __post_init__
        _check_dims(cls, obj)
        return obj


def _named(hint) -> str:
    """A type as a message names it: ``ndarray``, ``list[str]``, ``PruningCurve``."""
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "").replace("numpy.", "")


def _hashable(key):
    return tuple(_hashable(k) for k in key) if isinstance(key, list) else key
