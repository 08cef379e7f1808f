"""Why a head attends here: the score ``q·k`` taken apart, exactly, for any model (issue 30).

For one layer of one :class:`models.Analysis` (the same inputs, heads off and mask: the scores are those the model
computed under that analysis's settings), on the interface path:

1. **Neuron view** (Vig 2019, §3.3, BertViz's neuron view, for every family): :func:`neuron_view`: the query and key
   vectors of a head as the attention function received them (after the q/k norm and RoPE where the family has them;
   grouped-query attention's shared key head), their elementwise product, the scaling, soft-capping, position bias,
   the logit and the weight.
2. **Score decomposition**: :func:`row_terms` / :func:`score_terms`: the raw score ``s_ij = σ · q_i · k_j`` split
   exactly into a matrix of terms ``σ · Q_a(i) · K_b(j)``, where ``a`` and ``b`` run over the parts of the residual
   stream before the layer (:mod:`.stream`: the embeddings, each earlier head, each earlier MLP, the biases; Elhage et
   al. 2021, §2) plus the layer's own constant, each taken through the layer's norms frozen at the run's statistics
   (Ferrando et al. 2022, §3, eq. 6-7; as the information flow does), the projection, the norm on the heads and the
   rotation (:mod:`.sides`). Rows sum to the query-side terms, columns to the key-side terms, the whole to ``s_ij``;
   T5's relative position bias stays a term of its own (``logit = cap(s) + bias + mask``).
3. **RoPE split**: :func:`rope_split`: content ``σ · (R_0 q̃_i)·(R_0 k̃_j)``, positional ``s_ij − content`` and the
   curve ``σ · (R_Δ q̃_i)·(R_0 k̃_j)`` over distances ``Δ`` (Su et al. 2021, §3.4.2), so a previous-token head is seen
   to be positional (:class:`~.results.RopeSplit` states it precisely).
4. **Composition**: :func:`composition`: Q-, K- and V-composition scores between heads of different layers from the
   weights (Elhage et al. 2021, "Three kinds of composition", virtual weights ``W_QK``, ``W_OV``), and from the
   decomposition which earlier heads write what one head's key side reads (:meth:`~.results.RowTerms.by_head`).

Every identity is checked on the run (the parts of the query and of the key add up to the vectors the model used,
the terms to the score, the softmax of the logits to the model's weights, within
:func:`models.anatomy.tensors.tolerance`); where one cannot hold the call is refused
(:class:`~models.errors.UnsupportedOperationError`, code ``why_refused`` with a reason of :data:`REASONS`, or
``why_identity``): fallback-path models, cross-attention, hybrid blocks, a layer shared between depths, heads mixed
before the projection, a learned sink, a chain from the stream to the query or key not proven.

Use :func:`explain` once per layer and its methods (the page), or the functions below (one call each; the last two
layers explained are kept, so calling them for several heads and positions of one layer runs one pass). Each
checks all of its arguments before the pass runs or any tensor is indexed (:func:`.explain.checked`).
"""

from __future__ import annotations

from .. import checks
from .composition import Composition, composition
from .explain import LayerWhy, checked, explain
from .refuse import REASONS, WHAT
from .results import NeuronView, RopeSplit, RowTerms, ScoreTerms, Term
from .stream import Component

__all__ = ["Component", "Composition", "LayerWhy", "NeuronView", "REASONS", "RopeSplit", "RowTerms", "ScoreTerms",
           "Term", "WHAT", "composition", "explain", "neuron_view", "rope_split", "row_terms", "score_terms"]


@checks.needs_model
def neuron_view(loaded, analysis, stack: str | None, layer: int, head: int, i: int, j: int) -> NeuronView:
    """The neuron view of query ``i`` and key ``j`` of ``head`` in ``layer`` (:class:`~.results.NeuronView`):
    ``explain(loaded, analysis, stack, layer).neuron_view(head, i, j)``.

    Args:
        loaded: the model of ``analysis``. analysis: from :func:`models.analyze`. stack: ``encoder``/``decoder`` (None:
            the input's stack). layer, head: 0-based. i, j: query and key positions (negative count from the end).

    Raises:
        InvalidArgumentError: another model's analysis, an unknown stack, a layer, head or position out of range.
        UnsupportedOperationError: see :func:`explain` (codes ``why_refused``, ``why_identity``).
        ModelOutOfMemoryError: the pass ran out of memory.
    """
    stack, layer, head, i, j = checked(loaded, analysis, stack, layer, head, i, checks.whole("j", j))
    return explain(loaded, analysis, stack, layer).neuron_view(head, i, j)


@checks.needs_model
def row_terms(loaded, analysis, stack: str | None, layer: int, head: int, i: int) -> RowTerms:
    """Every raw score of query ``i`` of ``head`` split into terms (:class:`~.results.RowTerms`):
    ``explain(...).row_terms(head, i)``.

    Raises:
        as :func:`neuron_view`.
    """
    stack, layer, head, i, _ = checked(loaded, analysis, stack, layer, head, i)
    return explain(loaded, analysis, stack, layer).row_terms(head, i)


@checks.needs_model
def score_terms(loaded, analysis, stack: str | None, layer: int, head: int, i: int, j: int,
                k: int = 5) -> ScoreTerms:
    """The raw score of query ``i`` and key ``j`` split into its term matrix, with the ``k`` largest terms in words
    (:class:`~.results.ScoreTerms`): ``explain(...).row_terms(head, i).at(j, k)``.

    Raises:
        as :func:`neuron_view`; InvalidArgumentError also for ``k`` outside [1, 100].
    """
    stack, layer, head, i, j = checked(loaded, analysis, stack, layer, head, i, checks.whole("j", j))
    k = checks.whole("k", k, 1, 100)
    return explain(loaded, analysis, stack, layer).row_terms(head, i).at(j, k)


@checks.needs_model
def rope_split(loaded, analysis, stack: str | None, layer: int, head: int, i: int, j: int | None = None,
               max_distance: int | None = None) -> RopeSplit:
    """Position against content in the raw scores of query ``i`` of ``head`` (:class:`~.results.RopeSplit`):
    ``explain(...).rope_split(head, i, j, max_distance)``.

    Raises:
        as :func:`neuron_view`; UnsupportedOperationError (code ``why_refused``, reason ``no_rope``) for a family
        without rotary embeddings; InvalidArgumentError for ``max_distance`` outside [1, the model's positions].
    """
    stack, layer, head, i, j = checked(loaded, analysis, stack, layer, head, i, j)
    max_distance = checks.whole("max_distance", max_distance, 1, loaded.max_positions, none=True)
    return explain(loaded, analysis, stack, layer).rope_split(head, i, j, max_distance)
