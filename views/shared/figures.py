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


def shared_figure(build):
    """Decorator: ``build(*args, **kwargs) -> go.Figure`` (or a tuple that starts with one; a pure function of its
    arguments, the tuple's other items read-only) built once per distinct
    arguments for every session, kept in :data:`CACHE` as a dict (:func:`_figure_dict`) (its bytes counted against the
    cache's budget). Each call returns a new ``go.Figure`` made from the kept dict without validation; plotly's figure
    deep-copies every trace's and the layout's properties as it is made (``BaseFigure.__init__``), so the caller may
    change it and the kept dict stays as built (a second copy of our own cost Information flow 23 ms a run). Arguments
    that cannot be keyed (an object, a callable) build the figure every time."""
    name = (build.__module__, build.__qualname__)

    @functools.wraps(build)
    def wrapper(*args, **kwargs):
        key = key_of((args, kwargs))
        if key is UNKEYED:
            return build(*args, **kwargs)
        kept = CACHE.get_or_create(("figure", name, key), lambda: _as_kept(build(*args, **kwargs)))
        if isinstance(kept, tuple):  # (figure, what else the builder returned)
            return (go.Figure(kept[0], _validate=False),) + kept[1:]
        return go.Figure(kept, _validate=False)

    wrapper.uncached = build
    return wrapper
