"""Figures built without leaving plotly objects behind (issue 44: memory bounded by construction).

plotly copies every trace given to ``go.Figure(...)`` or ``Figure.add_trace``: the figure holds a new trace built from
the given one's properties (``_plotly_utils.basevalidators.BaseDataValidator.validate_coerce``). The object built for
the call is then left over, and when it has a compound property (a colour bar, a marker, a line, hover labels) it is a
reference cycle (each child points back to its parent) holding its arrays until a full garbage collection, which a
server with torch's large heap runs seldom: a 1,000 × 1,000 heatmap's ``z`` is 7.7 MiB, and Head pruning at 1,000
tokens left 23.5 MiB per text this way (``bench/app_memory.py``). :func:`figure` and :func:`add_trace` hand the traces
to plotly and then empty the objects left over (:func:`release`), so their arrays are freed at once. The figure
itself is emptied once it is sent (``views.shared.output.empty_figure``).
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.basedatatypes import BasePlotlyType


def release(obj) -> None:
    """Empty a plotly object that no figure holds (a trace, or a list or tuple of them) and every compound object
    below it: their properties are cleared and their links to their parents cut, so nothing of them is left in a
    reference cycle. An object a figure holds (it has a parent) is left as it is."""
    given = obj if isinstance(obj, (list, tuple)) else [obj]
    stack = [o for o in given if isinstance(o, BasePlotlyType) and o._parent is None]
    while stack:  # the objects given and everything below them
        node = stack.pop()
        stack.extend(node._compound_props.values())
        for children in node._compound_array_props.values():
            stack.extend(children or ())
        node._compound_props.clear()
        node._compound_array_props.clear()
        node._orphan_props.clear()
        node._parent = None


def figure(data=None, **kwargs) -> go.Figure:
    """``go.Figure(data, **kwargs)``, the traces given emptied afterwards (:func:`release`); plotly holds copies."""
    fig = go.Figure(data, **kwargs)
    release(data)
    return fig


def add_trace(fig: go.Figure, trace, **kwargs) -> go.Figure:
    """``fig.add_trace(trace, **kwargs)`` (``row``/``col``/``secondary_y`` as plotly takes them), the trace given
    emptied afterwards (:func:`release`); returns ``fig``."""
    fig.add_trace(trace, **kwargs)
    release(trace)
    return fig
