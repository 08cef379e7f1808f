"""Cost of attention (the Cost lesson, ``views/cost.py``): :func:`measure_cost` (time and memory of a forward
pass against sequence length, with the default ``sdpa`` implementation and with weights captured),
:func:`attention_matrix_size`."""

from __future__ import annotations

import copy
import threading
import time
import weakref
from dataclasses import dataclass
from typing import NoReturn
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import torch

from .. import checks
from .. import capture
from ..analysis import weight_budget_tokens
from ..errors import ModelOutOfMemoryError, UnsupportedOperationError
from ..loading.construct import building
from ..loading.model import LoadedModel

IMPLEMENTATIONS = ("sdpa", "captured")


def attention_matrix_size(n: int, *, bytes_per_value: int = 4, layers: int = 1, heads: int = 1) -> tuple[int, int]:
    """Entries and bytes of the attention weights for ``n`` tokens: ``n² · layers · heads`` entries,
    times ``bytes_per_value`` (4 for float32, 2 for bf16).

    Returns:
        ``(entries, bytes)`` as Python ints (no overflow).

    Raises:
        InvalidArgumentError: ``n``, ``layers`` or ``heads`` not a whole number >= 0, ``bytes_per_value`` not >= 1
            (code ``arg_whole``).
    """
    n, layers, heads = (checks.whole(k, v, 0) for k, v in (("n", n), ("layers", layers), ("heads", heads)))
    entries = n * n * layers * heads
    return entries, entries * checks.whole("bytes_per_value", bytes_per_value, 1)


_TWINS: dict[tuple, torch.nn.Module] = {}
_TWIN_LOCK = threading.Lock()


@checks.needs_model
def default_twin(loaded: LoadedModel, implementation: str = "sdpa") -> torch.nn.Module:
    """The same model (same parameter tensors, no copy) built with another attention implementation.

    ``models.load`` builds models with Dikkat's capturing implementation; to time the implementation
    transformers uses by default (``sdpa``: ``torch.nn.functional.scaled_dot_product_attention``, a
    fused kernel that never returns the weights), the model class is instantiated on the meta device
    with ``attn_implementation=implementation`` and every parameter and buffer of ``loaded.model`` is
    assigned into it. Cached per process.

    Raises:
        UnsupportedOperationError: the architecture has no such implementation.
    """
    key = (id(loaded.model), implementation)
    with _TWIN_LOCK:
        if key in _TWINS:
            return _TWINS[key]
        config = copy.deepcopy(loaded.model.config)
        try:
            with building(), torch.device("meta"):  # one model built at a time (models/loading/construct.py)
                twin = type(loaded.model)._from_config(config, attn_implementation=implementation,
                                                      dtype=loaded.dtype)
        except (ValueError, ImportError) as exc:
            raise UnsupportedOperationError(
                f"Model '{loaded.name}' ({config.model_type}) has no '{implementation}' attention implementation: "
                f"{exc}",
                code="no_attn_implementation", model=loaded.name, model_type=config.model_type,
                implementation=implementation, detail=str(exc)
            ) from exc
        twin.load_state_dict(loaded.model.state_dict(), assign=True, strict=False)
        source = dict(loaded.model.named_buffers())
        for name, _ in list(twin.named_buffers()):
            if name in source:
                owner, _, leaf = name.rpartition(".")
                mod = twin.get_submodule(owner) if owner else twin
                mod._buffers[leaf] = source[name]
        leftovers = [n for n, p in list(twin.named_parameters()) + list(twin.named_buffers()) if p.is_meta]
        if leftovers:
            raise UnsupportedOperationError(
                f"Could not share every weight of '{loaded.name}' with an '{implementation}' copy "
                f"(missing: {leftovers[:3]}).",
                code="twin_weights_missing", model=loaded.name, implementation=implementation,
                missing=", ".join(leftovers[:3])
            )
        twin.eval()
        _TWINS[key] = twin
        return twin


class _PeakTensorMemory(torch.utils._python_dispatch.TorchDispatchMode):
    """Peak bytes of tensor storage created by the ops run inside the mode (weights and inputs, which
    exist before, are not counted). Every op's outputs are seen; a storage counts until its last
    tensor is freed. Thread-local (dispatch modes are per thread)."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, list[int]] = {}
        self.current = 0
        self.peak = 0

    def _release(self, key: int) -> None:
        entry = self.live.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            self.current -= entry[0]
            del self.live[key]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        flat_in = torch.utils._pytree.tree_leaves((args, kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in flat_in if isinstance(t, torch.Tensor) and not t.is_meta}
        for t in torch.utils._pytree.tree_leaves(out):
            if not isinstance(t, torch.Tensor) or t.is_meta:
                continue
            key = t.untyped_storage().data_ptr()
            if key in self.live:
                self.live[key][1] += 1
            elif key in inputs or key == 0:
                continue  # a view of memory that existed before (weights, inputs)
            else:
                size = t.untyped_storage().nbytes()
                self.live[key] = [size, 1]
                self.current += size
                self.peak = max(self.peak, self.current)
            weakref.finalize(t, self._release, key)
        return out


@dataclass(frozen=True)
class CostPoint:
    """One measurement of a forward pass.

    Attributes:
        n: tokens. implementation: ``sdpa`` (transformers' default, fused, no weights returned) or
            ``captured`` (eager attention with every layer's weights recorded, as :func:`models.analyze`).
        seconds: fastest wall time of ``repeats`` forward passes of the transformer body (no
            prediction head; after one warm-up pass per implementation), torch.no_grad, batch 1.
        peak_bytes: peak memory during one more pass: on CUDA ``torch.cuda.max_memory_allocated`` above
            the level before; on CPU the peak bytes of tensors created by the pass, counted op by op
            (:class:`_PeakTensorMemory`; weights excluded).
        memory_method: ``cuda-allocator``, ``tensor-tracking``, or ``none`` (``measure_memory=False``;
            ``peak_bytes`` is then 0).
        recorded_bytes: bytes of the attention weights kept (captured only, else 0).
        threads: CPU threads torch ran the pass with (``torch.get_num_threads()``; 0 when not recorded).
    """

    n: int
    implementation: str
    seconds: float
    peak_bytes: int
    memory_method: str
    recorded_bytes: int = 0
    threads: int = 0


@checks.needs_model
def default_lengths(loaded: LoadedModel, top: int = 1024) -> list[int]:
    """Powers of two from 16 to ``min(top, the model's limit)`` tokens; ``[max(1, limit)]`` when that
    limit is below 16."""
    limit = min(top, loaded.max_positions)
    out, n = [], 16
    while n <= limit:
        out.append(n)
        n *= 2
    return out or [max(1, limit)]


def _cost_inputs(loaded: LoadedModel, n: int) -> dict[str, torch.Tensor]:
    """``n`` token ids (a sentence repeated), batch 1; encoder-decoders get a one-token decoder input."""
    if not loaded.reads_text:
        raise UnsupportedOperationError(f"Model '{loaded.name}' does not read text tokens: its cost is not measured "
                                        "here.",
                                        code="cost_needs_text", model=loaded.name)
    tok = loaded.tokenizer
    ids = tok("Kedi fareyi kovaladı. The cat chased the mouse across the garden.",
              add_special_tokens=False)["input_ids"]
    ids = (ids * (n // max(1, len(ids)) + 1))[:n]
    inputs = {"input_ids": torch.tensor([ids], device=loaded.device)}
    if loaded.family == "encoder-decoder":
        inputs["decoder_input_ids"] = inputs["input_ids"][:, :1]
    return inputs


def sync_device(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _body(model: torch.nn.Module) -> torch.nn.Module:
    """The transformer without its prediction head (``base_model``), so the cost measured is the
    attention layers' and not the vocabulary projection's."""
    return getattr(model, "base_model", None) or model


def _timing_oom(loaded: LoadedModel, n: int) -> Callable[[torch.OutOfMemoryError], NoReturn]:
    """What running out of memory at length ``n`` raises (:func:`measure_cost`, also through :func:`_one_pass`)."""
    def oom(exc: torch.OutOfMemoryError) -> NoReturn:
        raise ModelOutOfMemoryError(f"Out of memory timing '{loaded.name}' at {n} tokens: {exc}",
                                    code="oom_timing", model=loaded.name, tokens=n) from exc
    return oom


def _one_pass(loaded: LoadedModel, implementation: str, inputs: dict, oom: Callable | None = None) -> int:
    """One forward pass of the transformer body; returns the bytes of attention weights kept. ``oom``: what running
    out of memory raises on the captured path (:func:`models.capture.rerun`)."""
    if implementation == "sdpa":
        _body(default_twin(loaded))(**inputs)
        return 0
    if loaded.capture_path == "fallback":
        out = _body(loaded.model)(**inputs, output_attentions=True)
        weights = [w for w in (getattr(out, "attentions", None) or ()) if w is not None]
        return sum(w.numel() * w.element_size() for w in weights)
    with capture.rerun(loaded, record=True, oom=oom) as state:
        _body(loaded.model)(**inputs)
        return sum(w.numel() * w.element_size() for w in state.weights.values())


@checks.needs_model
def measure_cost(
    loaded: LoadedModel,
    lengths: Iterable[int] | None = None,
    *,
    implementations: Sequence[str] = IMPLEMENTATIONS,
    repeats: int = 2,
    measure_memory: bool = True,
    should_stop: Callable[[], bool] | None = None,
    on_point: Callable[[CostPoint, int, int], None] | None = None,
) -> list[CostPoint]:
    """Time (and memory) of one forward pass of the transformer body against sequence length.

    For each length the implementations are measured one right after the other (side by side, so a
    change in machine load hits both). Lengths above the model's limit are skipped (not shortened), and
    ``captured`` lengths above :func:`models.analysis.weight_budget_tokens` too (the weights of every layer
    must fit the memory budget); lengths < 1 are ignored and duplicates measured once, in increasing order.
    ``should_stop`` is called before each measurement: when it returns True the points measured so far
    are returned.

    Args:
        lengths: token counts (default :func:`default_lengths`).
        implementations: any of ``sdpa`` (:func:`default_twin`) and ``captured`` (the loaded model in a
            :func:`models.capture.rerun` context that records every layer's weights).
        repeats: timed passes per point; the fastest is kept (least disturbed by other work).
        measure_memory: one more pass per point to measure peak memory (see :class:`CostPoint`).
        on_point: called as ``on_point(point, done, total)`` after each point.

    Returns:
        list of :class:`CostPoint` in measuring order (``seconds`` in seconds, ``peak_bytes`` in bytes).

    Raises:
        UnsupportedOperationError: no sdpa twin for this architecture, or a speech model.
        ModelOutOfMemoryError: out of memory at some length.
        InvalidArgumentError: ``lengths`` not a list of whole numbers, an implementation not one of
            :data:`IMPLEMENTATIONS`, ``repeats`` not in [1, 100].
    """
    lengths = default_lengths(loaded) if lengths is None else checks.sequence("lengths", lengths, least=0)
    lengths = sorted({n for n in (checks.whole("length", n) for n in lengths) if n >= 1})
    implementations = [checks.choice("implementation", i, IMPLEMENTATIONS)
                       for i in checks.sequence("implementations", implementations)]
    repeats = checks.whole("repeats", repeats, 1, 100)
    limit = loaded.max_positions
    cap_limit = weight_budget_tokens(loaded)
    plan = [(impl, n) for n in lengths for impl in implementations
            if n <= limit and (impl != "captured" or n <= cap_limit)]
    if "sdpa" in implementations:
        default_twin(loaded)  # build it before the clock starts
    points: list[CostPoint] = []
    warmed: set[str] = set()
    cuda = loaded.device.type == "cuda"
    for done, (impl, n) in enumerate(plan, 1):
        if should_stop is not None and should_stop():
            break
        inputs = _cost_inputs(loaded, n)
        oom = _timing_oom(loaded, n)
        try:
            with torch.no_grad():
                if impl not in warmed:
                    _one_pass(loaded, impl, _cost_inputs(loaded, min(n, 16)), oom)
                    warmed.add(impl)
                times = []
                for _ in range(max(1, repeats)):
                    sync_device(loaded.device)
                    start = time.perf_counter()
                    recorded = _one_pass(loaded, impl, inputs, oom)
                    sync_device(loaded.device)
                    times.append(time.perf_counter() - start)
                peak, method = 0, "none"
                if measure_memory:
                    if cuda:
                        torch.cuda.synchronize(loaded.device)
                        base = torch.cuda.memory_allocated(loaded.device)
                        torch.cuda.reset_peak_memory_stats(loaded.device)
                        _one_pass(loaded, impl, inputs, oom)
                        peak, method = torch.cuda.max_memory_allocated(loaded.device) - base, "cuda-allocator"
                    else:
                        tracker = _PeakTensorMemory()
                        with tracker:
                            _one_pass(loaded, impl, inputs, oom)
                        peak, method = tracker.peak, "tensor-tracking"
        except torch.OutOfMemoryError as exc:  # the sdpa twin's and the fallback path's passes
            oom(exc)
        point = CostPoint(n=n, implementation=impl, seconds=float(min(times)), peak_bytes=int(peak),
                          memory_method=method, recorded_bytes=int(recorded),
                          threads=torch.get_num_threads())
        points.append(point)
        if on_point is not None:
            on_point(point, done, len(plan))
    return points


def quadratic_reference(ns: Sequence[float] | np.ndarray, anchor_n: int, anchor_value: float) -> np.ndarray:
    """``c·n²`` through one measured point (``c = anchor_value / anchor_n²``): the curve a cost that
    grows with the attention matrix would follow, in ``anchor_value``'s unit. float64 ``(len(ns),)``."""
    lengths = np.asarray(ns, dtype=np.float64)
    return anchor_value * (lengths / float(anchor_n)) ** 2
