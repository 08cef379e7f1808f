"""Caches bounded by bytes: measured sizes, least recently used evicted first.

Every cache of Dikkat (loaded models in :func:`models.load`; analyses, prepared views and other results in
the app) is a :class:`ByteLRU`. An entry's size is measured when it is stored (:func:`nbytes`: the arrays,
tensors and Python objects it holds), and again when it is used if it grows later (an on-demand
:class:`~models.analysis.store.AttentionStack` keeps its last computed layers). When the total passes the budget,
the least recently used entries are dropped until it fits; the entry just stored is never dropped, so
one entry larger than the whole budget is still served once.
"""

from __future__ import annotations

import functools
import gc
import math
import os
import sys
import threading
import types
import weakref
from collections import OrderedDict
from dataclasses import fields, is_dataclass
from typing import Any
from collections.abc import Callable, Hashable

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

GIB = 1 << 30
# What a loaded model is made of (its modules and its tokenizer): a result that refers to them (a flow keeps its
# layers' attention modules) leaves them to the model cache, which counts them once (``nbytes(..., skip=MODEL_PARTS)``).
MODEL_PARTS: tuple[type, ...] = (torch.nn.Module, PreTrainedTokenizerBase)


def budget_from_env(name: str, default_gib: float) -> int:
    """A byte budget from the environment variable ``name`` (in GiB, e.g. ``DIKKAT_CACHE_GIB=4``), else
    ``default_gib``. An unreadable, infinite or negative value falls back to the default."""
    raw = os.environ.get(name, "")
    try:
        value = float(raw) if raw.strip() else default_gib
    except ValueError:
        value = default_gib
    if not math.isfinite(value) or value < 0:
        value = default_gib
    return int(value * GIB)


def nbytes(obj: Any, skip: tuple[type, ...] = (), _seen: set | None = None) -> int:
    """Bytes held by ``obj`` and everything it references, each object counted once, objects of the types
    in ``skip`` not at all (an analysis refers to its model, which the model cache counts).

    numpy arrays count their buffer (a view counts its base once), torch tensors their storage, a loaded
    model (anything with ``parameters()``) its parameters and buffers; dataclasses, dicts, lists, tuples,
    sets and objects with ``__dict__`` are followed; other objects count ``sys.getsizeof``. Modules,
    functions and classes count 0.

    Returns:
        int, bytes.
    """
    seen = set() if _seen is None else _seen
    if id(obj) in seen or (skip and isinstance(obj, skip)):
        return 0
    seen.add(id(obj))

    def inner(value: Any) -> int:
        return nbytes(value, skip, seen)

    if isinstance(obj, np.ndarray):
        if obj.base is not None:  # a view: count what owns the buffer (an array, or a tensor's storage)
            return inner(obj.base)
        return int(obj.nbytes)
    if isinstance(obj, torch.Tensor):
        storage = obj.untyped_storage()
        key = ("storage", storage.data_ptr())
        if key in seen:
            return 0
        seen.add(key)
        return int(storage.nbytes())
    if isinstance(obj, torch.nn.Module):
        return sum(inner(t) for t in list(obj.parameters()) + list(obj.buffers()))
    if isinstance(obj, (str, bytes, int, float, bool, type(None))):
        return sys.getsizeof(obj)
    if isinstance(obj, type) or callable(obj) and not hasattr(obj, "__dict__"):
        return 0
    size = sys.getsizeof(obj, 0)
    if isinstance(obj, dict):
        return size + sum(inner(k) + inner(v) for k, v in obj.items())
    if isinstance(obj, (list, tuple, set, frozenset)):
        return size + sum(inner(v) for v in obj)
    if is_dataclass(obj):
        return size + sum(inner(getattr(obj, f.name)) for f in fields(obj))
    attrs = getattr(obj, "__dict__", None)
    if isinstance(attrs, dict) and not isinstance(obj, type(sys)):
        return size + sum(inner(v) for k, v in attrs.items() if not k.startswith("__"))
    return size


def holds_at_least(obj: Any, limit: int, skip: tuple[type, ...] = (), skip_modules: tuple[str, ...] = (),
                   max_objects: int = 20_000, counted: Callable[[Any], int | None] | None = None) -> bool:
    """True when ``obj`` and what it reaches hold at least ``limit`` bytes, stopping as soon as they do (unlike
    :func:`nbytes`, which measures everything): arrays count their buffer, tensors their storage, other objects
    ``sys.getsizeof``; a function counts what its closure and defaults hold (not its module), a bound method its
    object, a ``functools.partial`` its function and arguments. Not followed: modules, classes, a model's parts
    (:data:`MODEL_PARTS`), objects of the types in ``skip`` and of classes defined in the modules whose names start
    with ``skip_modules``. An object that reaches more than ``max_objects`` objects counts as holding ``limit``. An
    object for which ``counted`` (a cache's :meth:`ByteLRU.counted`) gives bytes counts those, and is not followed:
    the cache has measured it already (a page's cached analysis or kept figure, walked object by object on each of
    30 students' runs, was 6 % of a class's server time, issue 48)."""
    never = (type, type(sys), *MODEL_PARTS, *skip)
    seen, stack, total = set(), [obj], 0
    while stack:
        item = stack.pop()
        if id(item) in seen or isinstance(item, never) or (
                skip_modules and type(item).__module__.startswith(skip_modules)):
            continue
        seen.add(id(item))
        if len(seen) > max_objects:
            return True
        known = counted(item) if counted is not None else None
        if known is not None:
            total += known
            if total >= limit:
                return True
            continue
        if isinstance(item, np.ndarray):
            if item.base is None:
                total += item.nbytes
            else:
                stack.append(item.base)
        elif isinstance(item, torch.Tensor):
            total += int(item.untyped_storage().nbytes())
        elif isinstance(item, types.FunctionType):
            stack.extend(c.cell_contents for c in item.__closure__ or () if c.cell_contents is not None)
            stack.extend(item.__defaults__ or ())
            stack.extend((item.__kwdefaults__ or {}).values())
        elif isinstance(item, types.MethodType):
            stack.extend((item.__self__, item.__func__))
        elif isinstance(item, functools.partial):
            stack.extend((item.func, *item.args, *item.keywords.values()))
        elif not isinstance(item, (types.BuiltinFunctionType, types.MethodDescriptorType)):
            total += sys.getsizeof(item, 0)
            stack.extend(gc.get_referents(item))
        if total >= limit:
            return True
    return False


# The caches whose entries can be computed again (the app's analyses and figures; not the loaded models): under memory
# pressure (models.memory.admit) they drop their least recently used entries with :meth:`ByteLRU.shed`.
SHEDDABLE: weakref.WeakSet[ByteLRU] = weakref.WeakSet()


class ByteLRU:
    """A thread-safe least-recently-used cache whose budget is in bytes.

    Args:
        budget: bytes the entries may hold together (0: keep only the entry being served).
        measure: size of a value in bytes (default :func:`nbytes`), measured when stored and, for values
            that grow, again when used (see :meth:`get_or_create`).
        on_evict: called after entries were dropped (outside the lock, in the thread that stored or remeasured),
            with a list of their ``(value, bytes)`` that it may empty (``models.memory.after_eviction``: memory given
            back to the system, garbage collected where a dropped entry stays alive).
        sheddable: its entries can be computed again, so :meth:`shed` may drop them under memory pressure
            (registered in :data:`SHEDDABLE`).

    Concurrent requests for the same key compute it once; the others wait for that result.
    """

    def __init__(self, budget: int, measure: Callable[[Any], int] = nbytes,
                 on_evict: Callable[[list], None] | None = None, sheddable: bool = False):
        self.budget = int(budget)
        self.measure = measure
        self.on_evict = on_evict
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._ids: dict[int, tuple[int, int]] = {}  # id of a value held -> (its bytes, entries holding it)
        self._lock = threading.Lock()
        self._pending: dict[Hashable, threading.Event] = {}
        self.evictions = 0
        if sheddable:
            SHEDDABLE.add(self)

    @property
    def total(self) -> int:
        """Bytes held by the entries (as last measured)."""
        with self._lock:
            return sum(size for _, size in self._entries.values())

    def sizes(self) -> dict[Hashable, int]:
        """Key -> measured bytes, least recently used first."""
        with self._lock:
            return {k: size for k, (_, size) in self._entries.items()}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def counted(self, value: Any) -> int | None:
        """The bytes this cache counts for ``value`` when ``value`` itself (the same object) is one of its entries,
        else None: a walk of what a page holds stops there (:func:`holds_at_least`, ``counted``)."""
        held = self._ids.get(id(value))
        return None if held is None else held[0]

    def _held(self, value: Any, size: int) -> None:
        self._ids[id(value)] = (size, self._ids.get(id(value), (0, 0))[1] + 1)

    def _released(self, entry: tuple[Any, int] | None) -> None:
        if entry is None:
            return
        held = self._ids.get(id(entry[0]))
        if held is not None:
            if held[1] <= 1:
                del self._ids[id(entry[0])]
            else:
                self._ids[id(entry[0])] = (held[0], held[1] - 1)

    def get(self, key: Hashable, default: Any = None) -> Any:
        """The value for ``key`` (marked as just used), or ``default``."""
        with self._lock:
            if key not in self._entries:
                return default
            self._entries.move_to_end(key)
            return self._entries[key][0]

    def _evict(self, keep: Hashable, budget: int | None = None) -> list[tuple[Any, int]]:
        """Drop least recently used entries (never ``keep``) down to ``budget`` (default the cache's); the dropped
        ``(value, bytes)``. Call with the lock held."""
        budget = self.budget if budget is None else budget
        total = sum(size for _, size in self._entries.values())
        dropped = []
        for key in list(self._entries):
            if total <= budget:
                break
            if key == keep:
                continue
            dropped.append(self._entries.pop(key))
            self._released(dropped[-1])
            total -= dropped[-1][1]
            self.evictions += 1
        return dropped

    def _dropped(self, dropped: list[tuple[Any, int]]) -> None:
        """Hand the dropped entries to ``on_evict`` (outside the lock)."""
        if dropped and self.on_evict is not None:
            self.on_evict(dropped)

    def put(self, key: Hashable, value: Any, size: int | None = None) -> None:
        """Store ``value`` (measured unless ``size`` is given) and evict down to the budget."""
        size = self.measure(value) if size is None else int(size)
        with self._lock:
            self._released(self._entries.get(key))
            self._entries[key] = (value, size)
            self._held(value, size)
            self._entries.move_to_end(key)
            dropped = self._evict(key)
        self._dropped(dropped)

    def remeasure(self, key: Hashable) -> None:
        """Measure ``key``'s value again (it grew) and evict down to the budget."""
        with self._lock:
            entry = self._entries.get(key)
        if entry is None:
            return
        size = self.measure(entry[0])
        dropped = []
        with self._lock:
            if key in self._entries:
                self._released(self._entries[key])
                self._entries[key] = (entry[0], size)
                self._held(entry[0], size)
                dropped = self._evict(key)
        del entry
        self._dropped(dropped)

    def shed(self, to_bytes: int) -> int:
        """Drop least recently used entries until the cache holds at most ``to_bytes`` bytes (memory pressure:
        :func:`models.memory.admit`); returns the bytes dropped."""
        with self._lock:
            dropped = self._evict(object(), max(0, int(to_bytes)))
        freed = sum(size for _, size in dropped)
        self._dropped(dropped)
        return freed

    def get_or_create(self, key: Hashable, create: Callable[[], Any]) -> Any:
        """The value for ``key``, created by ``create()`` (once, even when several threads ask at once)
        and stored when missing."""
        while True:
            with self._lock:
                if key in self._entries:
                    self._entries.move_to_end(key)
                    return self._entries[key][0]
                event = self._pending.get(key)
                if event is None:
                    event = self._pending[key] = threading.Event()
                    break
            event.wait()
        try:
            value = create()
            self.put(key, value)
            return value
        finally:
            with self._lock:
                self._pending.pop(key, None)
            event.set()

    def discard(self, key: Hashable) -> None:
        """Drop ``key`` if present."""
        with self._lock:
            self._released(self._entries.pop(key, None))

    def clear(self) -> None:
        """Drop every entry."""
        with self._lock:
            self._entries.clear()
            self._ids.clear()
