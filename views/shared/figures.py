"""Figures built once for every session (issue 27: "do the work once per (model, text, heads, mask) for every
session").

Building a plotly figure is most of a page's script run once its analysis is cached: plotly validates and copies
every property as it is set (the Masks page on smollm2-135m: 0.14 s a run, two thirds of it in plotly's
``update_layout`` and validators; one 10-token attention heatmap 14 ms). When a class of 30 does the same click,
each session ran its script on the same 2 cores and the last waited for the other 29. :func:`shared_figure` keeps a
builder's figure, as a plain dict, in the shared :data:`views.shared.cache.CACHE` keyed by the builder and its
arguments (arrays by their bytes); every later call, from any session, gets a fresh figure made from a copy of that
dict without validating it again (it was validated when first built), so what the page does to it after
(its number style, text size, title wrapping) touches no other session's figure.
"""

from __future__ import annotations

import functools

import plotly.graph_objects as go

from .cache import CACHE
from .keys import UNKEYED, key_of
from .output import empty_figure


def _figure_dict(fig: go.Figure) -> dict:
    """``fig`` as ``{"data": [...], "layout": {...}}`` with its arrays as numpy arrays (``fig.to_dict()`` writes them
    as base64 typed-array dicts, which code that reads ``fig.data[0].z`` back cannot use)."""
    return {"data": [trace.to_plotly_json() for trace in fig.data], "layout": fig.layout.to_plotly_json()}


def _as_kept(built):
    """A builder's result as kept: a figure as its dict; a tuple ``(figure, ...)`` with its figure as a dict (the
    model view also returns what it drew). The figure built is emptied (:func:`~.output.empty_figure`: a plotly
    figure is a reference cycle, which kept its arrays until a full garbage collection)."""
    fig = built[0] if isinstance(built, tuple) and built and isinstance(built[0], go.Figure) else built
    kept = _figure_dict(fig)
    empty_figure(fig)
    return (kept,) + built[1:] if fig is not built else kept


class KeptFigure(go.Figure):
    """A figure kept for every session (:func:`shared_figure`), made only when something of it is read or changed:
    then, and only then, ``go.Figure`` is made from the kept dict (plotly deep-copies every property as it does). A
    page that hands it untouched to :func:`views.shared.charts.plotly_chart` never makes it, and its key as sent is
    the builder's and its arguments' (:attr:`kept_key`) instead of a digest of every property: issue 48, making the
    figure and digesting it were a third of the Q/K/V page's rerun over cached results (a py-spy profile of
    ``bench/live_class.py``, 30 students). Everything else is ``go.Figure``'s own."""

    def __init__(self, kept: dict, key: tuple) -> None:  # noqa: D107  (go.Figure's __init__ runs when first needed)
        object.__setattr__(self, "_kept_dict", kept)
        object.__setattr__(self, "kept_key", key)

    @property
    def made(self) -> bool:
        """Whether the figure has been made (something of it was read or changed)."""
        return "_data" in self.__dict__

    def __reduce__(self):
        """A copy or a pickle is a plain ``go.Figure`` of what this one holds (plotly's own ``__reduce__`` would call
        this class with the figure's properties)."""
        return go.Figure, (self.to_dict(),)

    def __getattr__(self, name: str):
        """An attribute plotly's figure sets as it is made: make it (from a copy of the kept dict), then read it."""
        own = self.__dict__
        if name.startswith("__") or "_making" in own or "_data" in own:
            raise AttributeError(name)
        object.__setattr__(self, "_making", True)
        try:
            go.Figure.__init__(self, own["_kept_dict"], _validate=False)
        finally:
            own.pop("_making", None)
        return object.__getattribute__(self, name)


def shared_figure(build):
    """Decorator: ``build(*args, **kwargs) -> go.Figure`` (or a tuple that starts with one; a pure function of its
    arguments, the tuple's other items read-only) built once per distinct
    arguments for every session, kept in :data:`CACHE` as a dict (:func:`_figure_dict`) (its bytes counted against the
    cache's budget). Each call returns a new :class:`KeptFigure`, a ``go.Figure`` made from the kept dict without
    validation when first used; plotly's figure deep-copies every trace's and the layout's properties as it is made
    (``BaseFigure.__init__``), so the caller may change it and the kept dict stays as built (a second copy of our own
    cost Information flow 23 ms a run). Arguments that cannot be keyed (an object, a callable) build the figure every
    time."""
    name = (build.__module__, build.__qualname__)

    @functools.wraps(build)
    def wrapper(*args, **kwargs):
        key = key_of((args, kwargs))
        if key is UNKEYED:
            return build(*args, **kwargs)
        kept_key = ("figure", name, key)
        kept = CACHE.get_or_create(kept_key, lambda: _as_kept(build(*args, **kwargs)))
        if isinstance(kept, tuple):  # (figure, what else the builder returned)
            return (KeptFigure(kept[0], kept_key),) + kept[1:]
        return KeptFigure(kept, kept_key)

    wrapper.uncached = build
    return wrapper
