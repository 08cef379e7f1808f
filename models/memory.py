"""The server's memory budget (issue 44): new heavy work waits, or is refused with a message, instead of meeting the
kernel's OOM killer; memory given back where the caches drop entries.

* **Budget.** ``DIKKAT_MEMORY_GIB`` (read as the caches' budgets are, :func:`models.budget.budget_from_env`), default
  :data:`DEFAULT_SHARE` of the machine's memory (the smaller of ``MemTotal`` and the cgroup's limit). Besides the
  process's own resident memory against that budget, the machine (or container) must keep :func:`reserve` bytes
  available, so two replicas, or another program, on one machine are also kept from the OOM killer.
* **Admission.** Every forward pass of the engine opens :func:`models.capture.rerun`, which calls :func:`admit`
  first: when this process holds more than the budget (or the machine has less than the reserve left), the caches that
  may shed (:meth:`models.budget.ByteLRU.shed`: the app's analyses, not the loaded models) drop their least recently
  used half, garbage is collected and freed memory given back to the system (:func:`trim`); if that is not enough and
  other passes are running, it waits up to ``DIKKAT_MEMORY_WAIT_S`` seconds (default 20) for them to end, then raises
  :class:`~models.errors.ModelOutOfMemoryError` with code ``memory_budget``. A pass inside an admitted one (a layer
  computed again inside an analysis) is not checked again.
* **Eviction.** :func:`after_eviction` is what a cache calls with the entries it dropped: freed by reference counting
  (every result of the engine is free of reference cycles, ``tests/engine/test_memory.py``) the memory goes back to
  glibc's allocator, which keeps freed pages of its arenas unless asked (``malloc_trim``): on Information flow that was
  ~0.8 GB over 14 texts; so every :data:`TRIM_BYTES` dropped it is asked. An entry still alive after its drop (a cycle,
  or a page still using it) counts towards one full garbage collection per :data:`COLLECT_BYTES`, never one per run.
* **A settled heap** (a server: :func:`keep_heap_settled`). Python's cyclic collector walks every object it tracks in
  a full (oldest-generation) collection: with torch, transformers and the loaded models that is millions of objects,
  and a class of thirty on two cores measured 17 such collections of up to 1.06 s each, under Python's lock, in one
  lesson's server (issue 48). Once turned on, the objects alive after each model's load are frozen (``gc.freeze``,
  after a full collection): the collector never walks them again, and its collections walk what the runs make. A
  collection this module asks for (:func:`collect`) unfreezes first, so that a dropped model in a reference cycle is
  still freed; cyclic garbage of what was alive at a freeze (a session that ends later) waits for the next one.
"""

from __future__ import annotations

import ctypes
from typing import Literal
import gc
import os
import re
import threading
import time
import weakref
from contextlib import contextmanager
from pathlib import Path
from collections.abc import Iterator

from . import budget as _budget
from .errors import ModelOutOfMemoryError

DEFAULT_SHARE = 0.8  # of the machine's memory, when DIKKAT_MEMORY_GIB is not set
RESERVE_SHARE, RESERVE_MIN = 0.05, 256 << 20  # the machine keeps this much available (share of its memory, at least)
TRIM_BYTES = 64 << 20  # malloc_trim after this many bytes of dropped cache entries
COLLECT_BYTES = 256 << 20  # a full gc.collect() after this many bytes of dropped entries that stayed alive
POLL_S = 0.25

_LOCK = threading.Lock()
_DEPTH = threading.local()  # admitted passes open in this thread
_state = {"running": 0, "dropped": 0, "alive": 0, "trims": 0, "collections": 0, "refused": 0, "waited": 0}


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def _meminfo(field: str) -> int | None:
    """A field of /proc/meminfo in bytes (``MemTotal``, ``MemAvailable``), or None."""
    found = re.search(rf"^{field}:\s+(\d+) kB", _read("/proc/meminfo") or "", re.MULTILINE)
    return int(found.group(1)) * 1024 if found else None


def _cgroup() -> tuple[int | None, int | None]:
    """``(limit, usage)`` bytes of this process's memory cgroup (v2, else v1), None where there is no limit."""
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        raw = _read(limit_file)
        if raw is None:
            continue
        raw = raw.strip()
        usage = _read(usage_file)
        if not raw.isdigit() or int(raw) >= 1 << 60:  # "max", or v1's "no limit" (a huge number)
            return None, None
        return int(raw), int(usage.strip()) if usage and usage.strip().isdigit() else None
    return None, None


def machine_bytes() -> int:
    """The memory this process may use at most: the smaller of the machine's ``MemTotal`` and its cgroup's limit, in
    bytes (8 GiB when neither can be read)."""
    limits = [x for x in (_meminfo("MemTotal"), _cgroup()[0]) if x]
    return min(limits) if limits else 8 << 30


def available_bytes() -> int | None:
    """Bytes the machine (and this process's cgroup) can still give: the smaller of ``MemAvailable`` and the cgroup's
    limit minus its usage; None when neither can be read."""
    limit, usage = _cgroup()
    found = [x for x in (_meminfo("MemAvailable"), None if limit is None or usage is None else limit - usage)
             if x is not None]
    return min(found) if found else None


def budget_bytes() -> int:
    """``DIKKAT_MEMORY_GIB`` in bytes (read each call), default :data:`DEFAULT_SHARE` of :func:`machine_bytes`."""
    return _budget.budget_from_env("DIKKAT_MEMORY_GIB", DEFAULT_SHARE * machine_bytes() / _budget.GIB)


def reserve() -> int:
    """Bytes the machine keeps available before new heavy work waits: :data:`RESERVE_SHARE` of
    :func:`machine_bytes`, at least :data:`RESERVE_MIN`."""
    return max(RESERVE_MIN, int(RESERVE_SHARE * machine_bytes()))


def resident() -> int:
    """This process's resident memory (``VmRSS``), in bytes (0 where /proc cannot be read)."""
    found = re.search(r"VmRSS:\s+(\d+) kB", _read("/proc/self/status") or "")
    return int(found.group(1)) * 1024 if found else 0


def over() -> str | None:
    """Why new heavy work should not start now: ``"process"`` (resident memory above the budget), ``"machine"``
    (less than :func:`reserve` available), or None."""
    if resident() > budget_bytes():
        return "process"
    free = available_bytes()
    if free is not None and free < reserve():
        return "machine"
    return None


_LIBC: ctypes.CDLL | Literal[False] | None = None  # False: no malloc_trim here


def trim() -> bool:
    """Give freed memory of glibc's arenas back to the system (``malloc_trim(0)``); False where there is no glibc."""
    global _LIBC
    if _LIBC is None:
        try:
            _LIBC = ctypes.CDLL("libc.so.6")
            _LIBC.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            _LIBC = False
    if not _LIBC:
        return False
    _LIBC.malloc_trim(0)
    with _LOCK:
        _state["trims"] += 1
    return True


_SETTLED = {"on": False, "freezes": 0}


def keep_heap_settled() -> None:
    """Turn on the settled heap for this process (above; the app's server does, once): what is alive now is frozen at
    once, and again after each model's load (:func:`settle`). A library user's process is left as Python runs it."""
    if not _SETTLED["on"]:
        _SETTLED["on"] = True
        settle()


def settle() -> None:
    """With the settled heap on: a full collection, then every object alive frozen out of the collector's walks
    (``gc.freeze``, Python's ``gc`` documentation). Called after each model's load; does nothing when off."""
    if _SETTLED["on"]:
        gc.collect()
        gc.freeze()
        _SETTLED["freezes"] += 1


def collect() -> None:
    """A full garbage collection that also walks what :func:`settle` froze (a dropped model in a cycle is freed),
    frozen again after."""
    if _SETTLED["on"]:
        gc.unfreeze()
    gc.collect()
    if _SETTLED["on"]:
        gc.freeze()


def after_eviction(dropped: list[tuple[object, int]]) -> None:
    """What a cache calls, outside its lock, with the ``(value, bytes)`` entries it dropped (the list is emptied, so
    that it holds no reference to them): every :data:`TRIM_BYTES` dropped, :func:`trim`; every :data:`COLLECT_BYTES`
    of entries still alive once dropped (a reference cycle, or a page still reading one), one full ``gc.collect()``."""
    refs, total = [], 0
    while dropped:
        value, size = dropped.pop()
        total += size
        try:
            refs.append((weakref.ref(value), size))
        except TypeError:  # a dict, tuple or array: nothing to watch
            pass
        value = None
    alive = sum(size for ref, size in refs if ref() is not None)
    with _LOCK:
        _state["dropped"] += total
        _state["alive"] += alive
        full = _state["alive"] >= COLLECT_BYTES
        if full:
            _state["alive"] = 0
            _state["collections"] += 1
        release = full or _state["dropped"] >= TRIM_BYTES
        if release:
            _state["dropped"] = 0
    if full:
        collect()
    if release:
        trim()


def stats() -> dict[str, int]:
    """Counters since start: ``running`` passes, ``trims``, ``collections``, ``refused`` and ``waited`` admissions."""
    with _LOCK:
        return {k: _state[k] for k in ("running", "trims", "collections", "refused", "waited")}


def _free_some() -> None:
    """Drop half of what the caches that may shed hold, collect garbage, give memory back."""
    for cache in list(_budget.SHEDDABLE):
        cache.shed(cache.total // 2)
    collect()
    trim()


def admit(what: str = "pass") -> None:
    """Return when new heavy work may start (see the module's notes), else raise.

    Raises:
        ModelOutOfMemoryError: code ``memory_budget`` (this process holds more than ``DIKKAT_MEMORY_GIB``) or
            ``memory_machine`` (the machine has less than :func:`reserve` available), params ``used`` and ``budget``
            (GiB, one decimal), after the caches shed, garbage was collected and ``DIKKAT_MEMORY_WAIT_S`` seconds
            waited for the passes already running.
    """
    if getattr(_DEPTH, "n", 0) or over() is None:
        return
    _free_some()
    try:
        wait_s = max(0.0, float(os.environ.get("DIKKAT_MEMORY_WAIT_S", "") or 20))
    except ValueError:
        wait_s = 20.0
    deadline = time.monotonic() + wait_s
    counted = False
    while (reason := over()) is not None:
        with _LOCK:
            others = _state["running"]
        if others and time.monotonic() < deadline:  # passes of other sessions may end and give memory back
            if not counted:
                counted = True
                with _LOCK:
                    _state["waited"] += 1
            time.sleep(POLL_S)
            trim()  # what their passes freed is given back, so that resident memory shows it
            continue
        if others:
            _free_some()
            if over() is None:
                return
        with _LOCK:
            _state["refused"] += 1
        if reason == "process":
            used, limit = resident() / _budget.GIB, budget_bytes() / _budget.GIB
            raise ModelOutOfMemoryError(
                f"The server holds {used:.1f} GiB, above its memory budget of {limit:.1f} GiB (DIKKAT_MEMORY_GIB): "
                f"the {what} was not started. Try again in a minute, or a shorter text.",
                code="memory_budget", used=f"{used:.1f}", budget=f"{limit:.1f}")
        total = machine_bytes()
        used, limit = (total - (available_bytes() or 0)) / _budget.GIB, (total - reserve()) / _budget.GIB
        raise ModelOutOfMemoryError(
            f"The machine has {used:.1f} GiB of its {limit:.1f} GiB in use (the rest is kept free): the {what} was not "
            "started. Try again in a minute, or a shorter text.",
            code="memory_machine", used=f"{used:.1f}", budget=f"{limit:.1f}")


@contextmanager
def heavy(what: str = "pass") -> Iterator[None]:
    """Context of one heavy piece of work: :func:`admit` on entry (not again inside one already open in this thread),
    counted as running while open (others wait for it rather than being refused)."""
    depth = getattr(_DEPTH, "n", 0)
    if not depth:
        admit(what)
    _DEPTH.n = depth + 1
    with _LOCK:
        _state["running"] += 1
    try:
        yield
    finally:
        _DEPTH.n = depth
        with _LOCK:
            _state["running"] -= 1
