"""The one re-run: a loaded model run again under chosen head gates, masks and forward hooks (:func:`rerun`).

Every place in the engine that runs a model inside a :func:`~models.capture.state.capture` context (an analysis,
weights recomputed on demand, the flow and why passes, pruning, the needle test, speech, the cost lesson, the
load-time gate, residual and mask probes) opens it through :func:`rerun`, which does what each of them used to do by
hand: no gradients (unless the caller keeps its own mode), the pass's forward hooks installed and always removed,
and ``torch.OutOfMemoryError`` turned into the one coded :class:`~models.errors.ModelOutOfMemoryError`, with the
caller's message where it has one. ``tests/engine/test_rerun.py`` fails if :func:`capture` is opened anywhere else.
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import NoReturn
from collections.abc import Callable, Iterable, Iterator

import torch

from .. import memory
from ..errors import ModelOutOfMemoryError
from .state import CaptureState, capture, current


@dataclass(frozen=True)
class Hook:
    """A forward hook :func:`rerun` installs on ``module`` for its pass, and removes after it (also when it fails).

    Attributes:
        module: the module hooked.
        fn: the hook: ``fn(module, args, output)``, ``fn(module, args, kwargs, output)`` with ``with_kwargs``; with
            ``pre``, ``fn(module, args)`` or ``fn(module, args, kwargs)`` before the module runs (see torch's
            ``register_forward_hook`` / ``register_forward_pre_hook``). The model is shared between sessions
            (threads), whose forward calls meet the hook too: see ``own``.
        pre: a forward pre-hook instead of a forward hook.
        with_kwargs: the hook also receives the call's keyword arguments.
        own: call ``fn`` only for forward calls made inside this pass's own context (``models.capture.current()``
            is its state), never for another session's pass through the shared model while it is installed.
    """

    module: torch.nn.Module
    fn: Callable
    pre: bool = False
    with_kwargs: bool = False
    own: bool = False

    def install(self, state: CaptureState | None = None) -> torch.utils.hooks.RemovableHandle:
        """Register the hook (with ``own``, for calls while ``state`` is the current one); returns torch's handle
        (``.remove()``)."""
        # torch registers a hook with kwargs in two steps (``_forward_hooks``, then ``_forward_hooks_with_kwargs``;
        # removal likewise), so another session's forward call through the shared model that reads them in between
        # calls it without the kwargs: ``hook() missing 1 required positional argument`` in that session (27 flow
        # runs of a 30-student soak). Such a call is never this pass's own (its forward starts after the install):
        # skipped.
        arity = (2 if self.pre else 3) + bool(self.with_kwargs)
        own, inner = self.own, self.fn

        def fn(*args):
            if len(args) != arity or (own and current() is not state):
                return None
            return inner(*args)
        if self.pre:
            return self.module.register_forward_pre_hook(fn, with_kwargs=self.with_kwargs)
        return self.module.register_forward_hook(fn, with_kwargs=self.with_kwargs)


def _recompute_oom(loaded, exc: torch.OutOfMemoryError) -> NoReturn:
    """The message of a re-run that names none of its own."""
    raise ModelOutOfMemoryError(f"Out of memory running the model again on {loaded.device}; free memory or use a "
                                "shorter text.", code="oom_recompute", device=str(loaded.device)) from exc


@contextmanager
def rerun(
    loaded,
    *,
    gates: dict[tuple[str, int], torch.Tensor] | None = None,
    masks: dict | None = None,
    hooks: Iterable[Hook] = (),
    record: bool = False,
    no_grad: bool = True,
    oom: Callable[[torch.OutOfMemoryError], NoReturn] | None = None,
    **options,
) -> Iterator[CaptureState]:
    """Context in which forward passes of ``loaded`` run with ``gates`` and ``masks``, with ``hooks`` installed.

    In order: ``torch.no_grad()`` (unless ``no_grad`` is False), a :func:`~models.capture.state.capture` context on
    ``loaded.site_index``, then each hook installed; on the way out (normal, an exception, a
    :class:`~models.capture.state.StopForward`) the hooks are removed, the capture closed and the gradient mode
    restored, in that order. Run the model inside (``loaded.model(**inputs)``) as often as needed.

    Args:
        loaded: the :class:`~models.loading.model.LoadedModel` (``site_index``, ``device``).
        gates: ``(stack, layer) -> (batch, heads)`` or ``(heads,)`` float tensor; 0 switches a head off.
        masks: ``stack ->`` bool ``(n, n)`` mask (or per-head rules) replacing the model's own.
        hooks: :class:`Hook` s for this pass only.
        record: keep every layer's whole weights in ``state.weights``.
        no_grad: run under ``torch.no_grad()``; False keeps the caller's own mode (``torch.enable_grad()`` for a
            gradient through the gates, ``torch.inference_mode()``).
        oom: called with the ``torch.OutOfMemoryError`` raised inside; raises the caller's own
            :class:`~models.errors.ModelOutOfMemoryError` (its message, code and params). None (or an ``oom`` that
            returns): the code ``oom_recompute`` naming the device.
        **options: the rest of :func:`~models.capture.state.capture`'s keyword arguments (``sink``, ``mask_sink``,
            ``want``, ``stop_after``, ``chunk_bytes``, ``fused``, ``rows``, ``stats``).

    Yields:
        The pass's :class:`~models.capture.state.CaptureState`.

    Raises:
        ModelOutOfMemoryError: the pass ran out of memory (``torch.OutOfMemoryError``, what torch's device
            allocators raise), ``from`` the torch error; or it was not started: the server is above its memory budget
            (code ``memory_budget`` or ``memory_machine``, :func:`models.memory.admit`; a pass inside another one
            of this thread is not checked again). Any other exception of the
            body passes through unchanged (``StopForward`` included), after the hooks are removed.
    """
    try:
        with ExitStack() as stack:
            stack.enter_context(memory.heavy("model pass"))  # waits, or refuses, above the memory budget (issue 44)
            if no_grad:
                stack.enter_context(torch.no_grad())
            state = stack.enter_context(capture(loaded.site_index, record=record, gates=gates, masks=masks, **options))
            for hook in hooks:
                stack.callback(hook.install(state).remove)
            yield state
    except torch.OutOfMemoryError as exc:
        if oom is not None:
            oom(exc)
        _recompute_oom(loaded, exc)
