"""Dikkat in a Jupyter notebook: the head view, model view and heatmap of an analysis, inline and offline.

    import models
    from viz import notebook as nb

    a = models.analyze(models.load("minilm-l6"), "The cat chased the mouse.")
    nb.head_view(a, layer=2)             # interactive; any number per notebook
    nb.model_view(a)                     # plotly figure: every layer x head
    nb.heatmap(a, layer=2, head=5)       # plotly figure: one map

* The head view is one ``<div>`` (:func:`viz.head_view.head_view_fragment`): its style is scoped to that
  div and its script to that div's elements, so it restyles nothing in the notebook and a second head view
  never shows the first one's data.
* The figures are plotly figures. Importing this module makes plotly draw them offline: plotly.js is put
  into the notebook itself once, and nothing (plotly.js, MathJax) is fetched from a CDN
  (:func:`use_offline_renderer`).
* Every function takes the options of Explore (:func:`viz.prepare.prepare`: ``hide_special``,
  ``hide_first``, ``words``, ``mode`` = ``heads`` / ``avg`` / ``rollout``). numpy, plotly and the standard
  library only: ``analysis`` is anything with the attributes of a :class:`models.Analysis`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
from plotly.io._base_renderers import NotebookRenderer

from .head_view import head_view_fragment
from .heatmap import head_heatmap
from .model_view import model_view as _model_view
from .prepare import MODES, Prepared, prepare


class _OfflineNotebookRenderer(NotebookRenderer):
    """plotly's ``notebook`` renderer (plotly.js embedded in the notebook once, then each figure as HTML)
    without the MathJax ``<script src>`` from a CDN that it adds to every figure (Dikkat's figures have no
    LaTeX)."""

    def to_mimebundle(self, fig_dict):
        html = pio.to_html(fig_dict, config=self.config, auto_play=self.auto_play,
                           include_plotlyjs=self.include_plotlyjs, include_mathjax=False, full_html=False,
                           animation_opts=self.animation_opts, default_width="100%", default_height=525,
                           validate=False)
        return {"text/html": html}


def use_offline_renderer() -> None:
    """Show plotly figures offline in any notebook front end: add the ``dikkat_notebook`` renderer
    (:class:`_OfflineNotebookRenderer`) to the default renderers, and drop those that fetch plotly.js or
    MathJax from a CDN (``notebook``, ``*_connected``). The ``plotly_mimetype`` renderer stays where it was
    on (JupyterLab draws it with its own copy of plotly.js); a classic notebook or an exported HTML file
    draws the HTML one."""
    if "dikkat_notebook" not in pio.renderers:
        pio.renderers["dikkat_notebook"] = _OfflineNotebookRenderer(connected=False)
    parts = [p for p in (pio.renderers.default or "").split("+")
             if p and "connected" not in p and p not in ("notebook", "dikkat_notebook")]
    pio.renderers.default = "+".join(parts + ["dikkat_notebook"])


use_offline_renderer()


@dataclass(frozen=True)
class HeadView:
    """An interactive head view; Jupyter displays it (``_repr_html_``). ``html``: the ``<div>`` itself."""

    html: str

    def _repr_html_(self) -> str:
        return self.html


class NotebookArgumentError(ValueError):
    """A notebook helper's argument is wrong: no such stack, layer or head, an unknown ``mode``, an option that
    is not a bool, ``rows`` outside the queries. (viz/ does not import the engine, so this is not a
    ``models.DikkatError``; it is a ValueError with a message that names the argument and what it may be.)"""


def _stack(analysis, stack: str | None) -> str:
    stacks = list(analysis.attentions)
    if stack is None:
        return stacks[0]
    if not isinstance(stack, str) or stack not in stacks:
        raise NotebookArgumentError(f"stack must be one of {', '.join(stacks)}; got {stack!r:.60}.")
    return stack


def _check(analysis, stack: str | None, layer: int | None = None, head: int | None = None, **options) -> str:
    """The checked stack; raises :class:`NotebookArgumentError` for a layer or head outside the stack, a
    ``mode`` not in :data:`viz.prepare.MODES`, or an option flag that is not a bool."""
    stack = _stack(analysis, stack)
    layers, heads = (int(x) for x in analysis.attentions[stack].shape[:2])
    for name, value, n in (("layer", layer, layers), ("head", head, heads)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer))
                                  or not 0 <= value < n):
            raise NotebookArgumentError(f"{name} must be a whole number in [0, {n - 1}] ('{stack}' has {n}); "
                                        f"got {value!r:.60}.")
    for name, value in options.items():
        if name == "mode":
            if not isinstance(value, str) or value not in MODES:
                raise NotebookArgumentError(f"mode must be one of {', '.join(MODES)}; got {value!r:.60}.")
        elif not isinstance(value, (bool, np.bool_)):
            raise NotebookArgumentError(f"{name} must be True or False; got {value!r:.60}.")
    return stack


def _layer_label(analysis, stack: str, layer: int) -> int:
    labels = (getattr(analysis, "layer_labels", None) or {}).get(stack)
    return labels[layer] if labels else layer


def _one_layer(analysis, stack: str, layer: int, head: int | None = None, rows=None, **options) -> Prepared:
    """:func:`viz.prepare.prepare` of one layer (with rollout: through every layer up to it)."""
    return prepare(analysis, stack, layer=layer, head=head, rows=rows, **options)


def _options_title(p: Prepared, mode: str, words: bool) -> str:
    parts = [{"avg": "mean of the heads", "rollout": "attention rollout"}.get(mode, "")]
    parts += ["words" if words else "", "rows renormalised over the shown keys" if p.renormalised else ""]
    return " · ".join(x for x in parts if x)


def head_view(analysis, layer: int = 0, *, stack: str | None = None, hide_special: bool = False,
              hide_first: bool = False, words: bool = False, mode: str = "heads", rows: tuple[int, int] | None = None,
              title: str | None = None) -> HeadView:
    """One layer's head view (queries left, keys right, a line per head, query and key whose opacity is the
    weight; BertViz's head view, Vig 2019).

    Args:
        analysis: a :class:`models.Analysis`. stack: default the first of ``analysis.attentions``.
        layer: 0-based layer of that stack. rows: ``(start, stop)`` query tokens to draw (long inputs).
        hide_special, hide_first, words, mode: Explore's options (:func:`viz.prepare.prepare`).
        title: heading (default: model, stack, layer and the options).

    Returns:
        a :class:`HeadView` (displayed by Jupyter).

    Raises:
        NotebookArgumentError: no such stack or layer, an unknown ``mode``, an option that is not a bool.
        ValueError: ``rows`` not ``(start, stop)`` within the queries.
    """
    stack = _check(analysis, stack, layer, hide_special=hide_special, hide_first=hide_first, words=words, mode=mode)
    p = _one_layer(analysis, stack, layer, rows=rows, hide_special=hide_special, hide_first=hide_first,
                   words=words, mode=mode)
    heads = p.weights.shape[1]
    names = [f"head {h}" for h in range(heads)] if heads > 1 else [mode if mode != "heads" else "head 0"]
    if title is None:
        title = f"{getattr(analysis, 'model', '')} · {stack} layer {_layer_label(analysis, stack, layer)}"
        extra = _options_title(p, mode, words)
        title += f" · {extra}" if extra else ""
    first = rows[0] if rows else 0
    return HeadView(head_view_fragment(
        p.weights[0], p.q_labels, p.k_labels, head_names=names, query_segments=p.q_segments,
        key_segments=p.k_segments, title=title, filename=f"head_view_{stack}_{layer}", first_position=first))


def model_view(analysis, *, stack: str | None = None, hide_special: bool = False, hide_first: bool = False,
               words: bool = False, mode: str = "heads", title: str | None = None) -> go.Figure:
    """Every layer x head of one stack as small maps in one grid (BertViz's model view); options as
    :func:`head_view`. Returns a plotly figure. Raises NotebookArgumentError: no such stack, a wrong option."""
    stack = _check(analysis, stack, hide_special=hide_special, hide_first=hide_first, words=words, mode=mode)
    p = prepare(analysis, stack, hide_special=hide_special, hide_first=hide_first, words=words, mode=mode)
    labels = (getattr(analysis, "layer_labels", None) or {}).get(stack)
    fig, _ = _model_view(p.weights, layer_names=[str(x) for x in labels] if labels else None,
                         head_names=None if p.weights.shape[1] > 1 else [mode],
                         title=title if title is not None else f"{getattr(analysis, 'model', '')} · {stack}")
    return fig


def heatmap(analysis, layer: int = 0, head: int = 0, *, stack: str | None = None, hide_special: bool = False,
            hide_first: bool = False, words: bool = False, mode: str = "heads", title: str | None = None) -> go.Figure:
    """One head's map (query rows, key columns); with ``mode`` ``avg`` or ``rollout`` the one combined map.
    Options as :func:`head_view`. Returns a plotly figure. Raises NotebookArgumentError: no such stack,
    layer or head, a wrong option."""
    stack = _check(analysis, stack, layer, head if mode == "heads" else None, hide_special=hide_special,
                   hide_first=hide_first, words=words, mode=mode)
    p = _one_layer(analysis, stack, layer, head=head if mode == "heads" else None, hide_special=hide_special,
                   hide_first=hide_first, words=words, mode=mode)
    if title is None:
        which = (f"head {head}" if mode == "heads"
                 else {"avg": "mean of the heads", "rollout": "rollout"}.get(mode, mode))
        title = f"{getattr(analysis, 'model', '')} · {stack} layer {_layer_label(analysis, stack, layer)} · {which}"
    return head_heatmap(p.weights[0, 0], p.q_labels, p.k_labels, title=title)
