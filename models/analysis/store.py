"""Attention weights on demand: array-like stacks that compute a layer's or a head's exact weights when asked.

An :class:`~models.Analysis` of a short text keeps every weight (it costs little); a long text's analysis
keeps none (its per-head statistics and pooled overview, :mod:`models.analysis.statistics`, are computed in one more
pass when first read). Either way
``a.attentions[stack]`` is an :class:`AttentionStack` that reads like the float32 array
``(layers, heads, query, key)`` it stands for:

* ``a.attentions[stack][layer]`` -> float32 ``(heads, query, key)``; ``[layer, head]`` -> ``(query, key)``;
  ``[layer, head, rows]`` or ``[layer, :, rows]`` keeps only those heads and query rows (the forward pass
  still runs up to that layer).
* ``.shape``, ``.dtype``, ``len()``, ``np.asarray(...)``, arithmetic and numpy methods (``.sum``, ``.max``
  ...) work on the whole array while it fits :data:`MATERIALIZE_BYTES`; beyond it they raise
  :class:`~models.errors.AttentionTooLargeError`, which says to index a layer.

Weights that were not kept are computed from the layer's queries, keys and row log-sum-exp where the analysis
kept them (:class:`models.analysis.lse_weights.LseWeights`: one product and one ``exp`` per block, no forward
pass; equal to the eager weights to float rounding), else recomputed by :class:`Replay`: the same forward pass
(same inputs, heads switched off, masks) runs again under :func:`models.capture.rerun`, sends only the wanted
layer's weights (block by block, only the wanted heads and rows) to a buffer, and stops right after that layer.
The same eager functions run on the same inputs in the same blocks, so the recomputed weights are
bit-identical to the ones the analysis saw (and equal the family's eager weights, as the capture path
guarantees).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from collections.abc import Callable, Iterator

import numpy as np
import torch
from numpy.lib.mixins import NDArrayOperatorsMixin

from .. import capture
from ..errors import AttentionTooLargeError, ModelOutOfMemoryError
from .indexing import ATTENTION_AXES, MASK_AXES, checked_int, indexed

# Largest array built at once by np.asarray(stack) or stack[layer] (bytes).
MATERIALIZE_BYTES = 1 << 30
# Computed layers kept per stack for the next request (bytes, least recently used evicted).
LAYER_CACHE_BYTES = 64 << 20


def _gib(n: int) -> str:
    return f"{n / 2 ** 30:.2f} GiB" if n >= 2 ** 30 else f"{n / 2 ** 20:.0f} MiB"


class LazyArray(NDArrayOperatorsMixin):
    """Base of the array-likes here: ``shape``/``dtype`` known, values built by :meth:`_build` on demand.

    Anything not indexed (``np.asarray``, ufuncs and operators, numpy methods) goes through
    :meth:`__array__`, which refuses arrays above :data:`MATERIALIZE_BYTES`.
    """

    shape: tuple[int, ...]
    dtype: np.dtype
    what: str = "array"

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def nbytes(self) -> int:
        """Bytes the whole array would take (it may not be held)."""
        return self.size * np.dtype(self.dtype).itemsize

    def __len__(self) -> int:
        return self.shape[0]

    def __iter__(self) -> Iterator[np.ndarray]:
        for i in range(self.shape[0]):
            yield self[i]

    def _check(self, nbytes: int, what: str) -> None:
        if nbytes > MATERIALIZE_BYTES:
            raise AttentionTooLargeError(
                f"{what} would take {_gib(nbytes)}, above the {_gib(MATERIALIZE_BYTES)} allowed at once: ask for "
                "less, e.g. one head a.attentions[stack][layer, head] or a block of query rows "
                "a.attentions[stack][layer, head, 0:256].",
                code="weights_too_large", size=_gib(nbytes), limit=_gib(MATERIALIZE_BYTES)
            )

    def _build(self) -> np.ndarray:
        raise NotImplementedError

    def __getitem__(self, key) -> np.ndarray:
        raise NotImplementedError

    def __array__(self, dtype=None, copy=None):
        self._check(self.nbytes, f"The whole {self.what} of shape {self.shape}")
        arr = self._build()
        return arr if dtype is None else arr.astype(dtype, copy=False)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        inputs = tuple(np.asarray(x) if isinstance(x, LazyArray) else x for x in inputs)
        return getattr(ufunc, method)(*inputs, **kwargs)

    def __getattr__(self, name: str):
        if name.startswith("_") or not hasattr(np.ndarray, name):
            raise AttributeError(name)
        return getattr(np.asarray(self), name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(shape={self.shape}, dtype={np.dtype(self.dtype).name})"


class Replay:
    """Runs an analysis's forward pass again and hands chosen layers' weights to a callback.

    Args:
        loaded: the :class:`~models.LoadedModel` (kept alive by the analysis).
        call: the keyword arguments of the original forward call (input ids, decoder ids ...).
        gates, masks: the heads switched off and replaced masks of the original call.
        chunk_bytes: the block size of the original call (so blocks, and bits, are the same).
    """

    def __init__(self, loaded, call: dict, gates: dict, masks: dict, chunk_bytes: int):
        self.call, self.gates, self.masks, self.chunk_bytes = call, gates, masks, chunk_bytes
        # A weak reference: a cached analysis must not keep a model the model cache has dropped (its bytes
        # would be counted nowhere); such a model is loaded again when weights are next asked for.
        self._loaded = weakref.ref(loaded)
        self._strong = loaded if not loaded.load_args else None  # built by hand, cannot be loaded again
        self.load_args = dict(loaded.load_args)
        # Stopping inside a forward pass skips accelerate's post-forward hooks (offloaded weights would
        # stay on the execution device): run to the end when the model is dispatched.
        self.stop_early = not getattr(loaded.model, "hf_device_map", None)

    @property
    def loaded(self):
        """The model, loaded again by :func:`models.load` if the model cache dropped it."""
        model = self._loaded()
        if model is None:
            from ..loading.loader import load

            model = load(**self.load_args)
            self._loaded = weakref.ref(model)
        return model

    def run(self, want: set, visit: Callable[[str, int, int, int, torch.Tensor], None]) -> None:
        """One forward pass; ``visit(stack, layer, q0, k0, weights)`` gets each block of the wanted
        ``(stack, layer)`` pairs, with ``weights`` ``(heads, rows, cols)`` in compute dtype on the model's
        device (see :class:`models.capture.CaptureState`). Stops after the last wanted layer (runs to the
        end on a model placed with ``device_map``).

        Raises:
            ModelOutOfMemoryError: the forward pass ran out of memory.
        """

        def sink(site, q0, k0, w, q_len, k_len):
            visit(site.stack, site.layer, q0, k0, w[0])

        def oom(exc):
            raise ModelOutOfMemoryError(
                f"Out of memory computing the attention weights again on {loaded.device}; free memory or use a "
                "shorter text.",
                code="oom_recompute", device=str(loaded.device)) from exc

        loaded = self.loaded
        call = {k: v.to(loaded.device) if isinstance(v, torch.Tensor) else v for k, v in self.call.items()}
        try:
            with capture.rerun(loaded, gates=self.gates, masks=self.masks, oom=oom, sink=sink, want=want,
                               stop_after=self.stop_early, chunk_bytes=self.chunk_bytes):
                loaded.model(**call)
        except capture.StopForward:
            pass


def _is_int(key) -> bool:
    """An integer index (numpy's too), not a bool."""
    return isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_))


def _range_of(key, n: int, what: str) -> tuple[int, int] | None:
    """``(start, stop)`` of an int or a step-1 slice over an axis of ``n``, else None.

    Raises:
        IndexOutOfRangeError: an int out of range (``what`` names the axis: ``head``, ``row``).
    """
    if _is_int(key):
        i = checked_int(key, n, what)
        return i, i + 1
    if isinstance(key, slice):
        start, stop, step = key.indices(n)
        if step == 1:
            return start, max(start, stop)
    return None


class AttentionStack(LazyArray):
    """One stack's attention weights, float32 ``(layers, heads, query, key)``, held or computed on demand.

    Args:
        stack: ``encoder``, ``decoder`` or ``cross``.
        shape: ``(layers, heads, query, key)``.
        kept: the whole float32 array when the analysis kept it, else None.
        replay: how to recompute weights that were not kept (None when kept).
        lse: the stack's weights from kept queries, keys and log-sum-exp
            (:class:`models.analysis.lse_weights.LseWeights`), used instead of ``replay`` when given.
        lse_refused: why the stack has no ``lse`` source though the analysis asked for one (``keep="lse"``), else
            None.

    Indexing follows numpy's rules. An index that starts with a layer number replays the forward pass up
    to that layer: ``[layer]`` -> ``(heads, q, k)``; ``[layer, head]`` -> ``(q, k)``; with an int or a step-1
    slice of heads and of rows, only those heads and rows are kept (``[layer, h, r0:r1]``). Any other
    index builds the whole array first (within :data:`MATERIALIZE_BYTES`). Values are float32; every row
    sums to 1 (0 for a query with no allowed key).

    Raises:
        AttentionTooLargeError: the array (or layer) asked for exceeds :data:`MATERIALIZE_BYTES`.
        IndexOutOfRangeError (a DikkatError and an IndexError): a layer, head, row or key out of range.
    """

    what = "attention stack"

    def __init__(self, stack: str, shape: tuple[int, int, int, int], kept: np.ndarray | None = None,
                 replay: Replay | None = None, lse=None, lse_refused: str | None = None):
        self.stack, self.shape, self.dtype = stack, tuple(int(x) for x in shape), np.dtype(np.float32)
        if kept is not None:
            kept.flags.writeable = False  # shared by every page and session that reads this analysis
        self.kept, self.replay = kept, replay
        self.lse = lse if kept is None and lse is not None and stack in lse.stacks else None
        self.lse_refused = lse_refused
        self._cache: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    @property
    def cached_nbytes(self) -> int:
        """Bytes of the computed blocks kept for the next request (at most :data:`LAYER_CACHE_BYTES`, or the
        last block alone when it is larger)."""
        with self._lock:
            return sum(v.nbytes for v in self._cache.values())

    @property
    def on_demand(self) -> bool:
        """True when the weights are computed when asked for (not held)."""
        return self.kept is None

    @property
    def source(self) -> str:
        """Where the weights come from: ``kept`` (held), ``lse`` (queries, keys and log-sum-exp kept by the
        analysis) or ``replay`` (the forward pass run again)."""
        return "kept" if self.kept is not None else "lse" if self.lse is not None else "replay"

    def _build(self) -> np.ndarray:
        if self.kept is not None:
            return self.kept
        layers, heads, nq, nk = self.shape
        if self.lse is not None:  # every element written: no zeros first
            out = np.empty(self.shape, dtype=np.float32)
            for layer in range(layers):
                self.lse.block(self.stack, layer, (0, heads), (0, nq), out=torch.from_numpy(out[layer]))
            return out
        out = np.zeros(self.shape, dtype=np.float32)

        def visit(_stack, layer, q0, k0, w):
            out[layer, :, q0:q0 + w.shape[1], k0:k0 + w.shape[2]] = w.float().cpu().numpy()

        assert self.replay is not None  # None only when the weights are kept
        self.replay.run({(self.stack, layer) for layer in range(layers)}, visit)
        return out

    def block(self, layer: int, heads: tuple[int, int] | None = None,
              rows: tuple[int, int] | None = None) -> np.ndarray:
        """Exact weights of one layer for heads ``h0 .. h1 - 1`` and query rows ``r0 .. r1 - 1``.

        Args:
            layer: layer index (negative counts from the end). heads, rows: ``(start, stop)`` ranges; None
                for all.

        Returns:
            float32 ``(h1 - h0, r1 - r0, key)``, read-only (shared with the cache, or a view of the kept
            weights).

        Raises:
            IndexOutOfRangeError: layer out of range. AttentionTooLargeError: the block exceeds
            :data:`MATERIALIZE_BYTES`.
        """
        layers, n_heads, nq, nk = self.shape
        layer = checked_int(layer, layers, "layer")
        h0, h1 = heads or (0, n_heads)
        r0, r1 = rows or (0, nq)
        if self.kept is not None:
            return self.kept[layer, h0:h1, r0:r1]
        key = (layer, h0, h1, r0, r1)
        with self._lock:
            for have in reversed(self._cache):  # a computed block that holds these heads and rows serves them
                l_, a0, a1, b0, b1 = have
                if l_ == layer and a0 <= h0 and h1 <= a1 and b0 <= r0 and r1 <= b1:
                    self._cache.move_to_end(have)
                    return self._cache[have][h0 - a0:h1 - a0, r0 - b0:r1 - b0]
        size = (h1 - h0) * (r1 - r0) * nk * 4
        self._check(size, f"Layer {layer}'s weights ({h1 - h0} heads x {r1 - r0} rows x {nk} keys)")
        if self.lse is not None:
            out = self.lse.block(self.stack, layer, (h0, h1), (r0, r1)).numpy()
            out.flags.writeable = False
            return out
        out = np.zeros((h1 - h0, r1 - r0, nk), dtype=np.float32)

        def visit(_stack, _layer, q0, k0, w):
            a, b = max(q0, r0), min(q0 + w.shape[1], r1)
            if a < b:
                out[:, a - r0:b - r0, k0:k0 + w.shape[2]] = w[h0:h1, a - q0:b - q0].float().cpu().numpy()

        assert self.replay is not None  # None only when the weights are kept
        self.replay.run({(self.stack, layer)}, visit)
        out.flags.writeable = False
        with self._lock:
            self._cache[key] = out
            while sum(v.nbytes for v in self._cache.values()) > LAYER_CACHE_BYTES and len(self._cache) > 1:
                self._cache.popitem(last=False)
        return out

    def heads(self, pairs) -> np.ndarray:
        """The maps of chosen heads, float32 ``(len(pairs), q, k)``, computing each layer once.

        Args:
            pairs: ``(layer, head)`` pairs (e.g. Whisper's alignment heads).

        Raises:
            IndexOutOfRangeError: a layer or head out of range. AttentionTooLargeError: a layer above
            :data:`MATERIALIZE_BYTES`.
        """
        pairs = [(int(layer), int(head)) for layer, head in pairs]
        layers = {layer: self.block(layer) for layer in dict.fromkeys(layer for layer, _ in pairs)}
        for _, head in pairs:
            checked_int(head, self.shape[1], "head")
        if not pairs:
            return np.zeros((0,) + self.shape[2:], dtype=np.float32)
        return np.stack([layers[layer][head] for layer, head in pairs])

    def __getitem__(self, key):
        if self.kept is not None:
            return indexed(self.kept, key, ATTENTION_AXES)
        key = key if isinstance(key, tuple) else (key,)
        if not key or not _is_int(key[0]):
            return indexed(np.asarray(self), key, ATTENTION_AXES)
        layers, n_heads, nq, nk = self.shape
        rest = key[1:]
        heads = (0, n_heads) if not rest else _range_of(rest[0], n_heads, "head")
        rows = (0, nq) if len(rest) < 2 else _range_of(rest[1], nq, "row")
        if heads is None or rows is None:
            # any other index on the heads or rows: this layer whole, indexed as numpy would
            return indexed(self.block(key[0])[None], (0,) + rest, ATTENTION_AXES[1:], offset=1)
        # the computed block stands in for the layer; what was a slice is now the whole axis, what was an int
        # is index 0 (keeping each axis an int or a slice, so numpy places advanced indices the same way)
        picked = [0, 0 if rest and _is_int(rest[0]) else slice(None),
                  0 if len(rest) > 1 and _is_int(rest[1]) else slice(None), *rest[2:]]
        return indexed(self.block(key[0], heads, rows)[None], tuple(picked), ATTENTION_AXES[1:], offset=1)


class LazyMap(Mapping):
    """A read-only mapping computed by ``compute()`` the first time it is read (thread-safe)."""

    def __init__(self, compute: Callable[[], dict]):
        self._compute: Callable[[], dict] | None = compute
        self._data: dict | None = None
        self._lock = threading.Lock()

    @property
    def computed(self) -> bool:
        """True once the values exist."""
        return self._data is not None

    def _get(self) -> dict:
        with self._lock:
            if self._data is None:
                assert self._compute is not None  # dropped only once the values exist
                self._data = self._compute()
                self._compute = None
            return self._data

    def __getitem__(self, key):
        return self._get()[key]

    def __iter__(self):
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())

    def __repr__(self) -> str:
        return f"LazyMap({dict(self._get())!r})" if self.computed else "LazyMap(<not computed yet>)"


class MaskStack(LazyArray):
    """Which keys each query could attend in each layer, bool ``(layers, query, key)``, stored once per
    distinct mask (every layer of a decoder shares one; Gemma 3 has a sliding and a full one).

    Args:
        distinct: the distinct bool ``(query, key)`` masks. index: for each layer, its mask in ``distinct``.
    """

    what = "mask stack"

    def __init__(self, distinct: list[np.ndarray], index: list[int]):
        n_q, n_k = distinct[0].shape if distinct else (0, 0)
        for mask in distinct:
            mask.flags.writeable = False  # shared by every layer that was called with it
        self.distinct, self.index = distinct, list(index)
        self.shape, self.dtype = (len(index), n_q, n_k), np.dtype(bool)

    def _build(self) -> np.ndarray:
        return np.stack([self.distinct[i] for i in self.index]) if self.index else np.zeros(self.shape, dtype=bool)

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        if key and _is_int(key[0]):
            layer = checked_int(key[0], self.shape[0], "layer")
            return indexed(self.distinct[self.index[layer]][None], (0,) + key[1:], MASK_AXES[1:], offset=1)
        return indexed(np.asarray(self), key, MASK_AXES)
