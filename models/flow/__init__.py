"""Where the information flows: beyond the attention weights (issue 14).

An attention weight says how much a query looks at a key, not how much that key changes the result. From one
more forward pass of an :class:`models.Analysis` (same inputs, heads off and masks), on the interface path:

* **value-weighted attention** ``‖α_ij f^h(x_j)‖ = α_ij ‖W_O^h v_j^h‖`` (Kobayashi et al. 2020, "Attention is Not
  Only a Weight", EMNLP, eq. 5-6): :meth:`Flow.value_weighted`;
* **contributions** of each source token, each head, the residual stream and the MLP to each position's
  stream, by the proximity measure of ALTI (Ferrando et al. 2022) and "Information Flow Routes" (Ferrando &
  Voita 2024), as llm-transparency-tool computes it (:mod:`.measure`), and the **graph of routes** to a
  prediction: :meth:`Flow.route`;
* the **logit lens** (nostalgebraist 2020, "interpreting GPT: the logit lens"): every layer's residual stream
  through the model's own final norm and unembedding (or masked-LM head): :meth:`Flow.logit_lens`;
* each head's **direct effect**: what the logits lose when the head's output is taken out of the last residual
  stream, all else kept (the direct path of Elhage et al. 2021; through the frozen norms of later post-LN layers):
  :meth:`Flow.direct_effect`.

Use :func:`information_flow`.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import torch

from .. import checks
from ..errors import InvalidArgumentError, UnsupportedOperationError
from ..analysis.outputs import topk
from ..anatomy.residual import WHY, FlowLayout, flow_layout
from ..anatomy.tensors import tolerance
from .measure import Route, proximity, route_graph, shares
from .record import LayerFlow, _alive, _check, guard_memory, run_flow

__all__ = ["DirectEffect", "Flow", "LayerFlow", "LogitLens", "Route", "information_flow", "proximity", "shares",
           "special_share"]


@dataclass
class LogitLens:
    """The top tokens of every residual stream at one position (row 0: the embeddings; row ``l + 1``: layer
    ``l``'s output; the last row is the model's own prediction).

    Attributes:
        ids, probs: int64 / float32 ``(layers + 1, k)``: top-k token ids and their softmax probabilities.
        labels: the tokens as decoded text, ``(layers + 1) x k`` (leading spaces kept: ``" chased"``).
        final_id: the model's own top token at this position; final_rank, final_prob: ``(layers + 1,)`` its
            rank (0 = top) and probability at each stream.
        last_logits: float32 ``(vocab,)``: the last row's logits (equal to the model's).
    """

    ids: np.ndarray
    probs: np.ndarray
    labels: list[list[str]]
    final_id: int
    final_rank: np.ndarray
    final_prob: np.ndarray
    last_logits: np.ndarray


@dataclass
class DirectEffect:
    """Each head's direct effect on the logits at one position: ``head(x) − head(x − c_lh)`` with ``x`` the last
    residual stream and ``c_lh`` the head's output as it reaches it.

    Attributes:
        logits: float32 ``(layers, heads, vocab)``: the change of every logit (positive: the head promotes it).
        on_final: float32 ``(layers, heads)``: the change of the model's own top token's logit.
        final_id: that token.
    """

    logits: np.ndarray
    on_final: np.ndarray
    final_id: int

    def top(self, layer: int, head: int, k: int = 5) -> tuple[list[int], list[int]]:
        """``(promoted, suppressed)``: the ids of the ``k`` logits head ``(layer, head)`` raises most and lowers
        most.

        Raises:
            InvalidArgumentError: a layer or head out of range, or ``k`` not a whole number >= 1.
        """
        layers, heads, vocab = self.logits.shape
        row = self.logits[checks.whole("layer", layer, 0, layers - 1), checks.whole("head", head, 0, heads - 1)]
        k = checks.whole("k", k, 1, vocab)
        order = np.argsort(row)
        return [int(i) for i in order[::-1][:k]], [int(i) for i in order[:k]]


@dataclass
class Flow:
    """The information flow of one stack of one analysis (see the package docstring). Numbers are float32.

    Attributes:
        model, stack: where it was measured.
        layers: :class:`LayerFlow` per layer (contributions, shares, value norms, outputs).
        x_in: ``(n, d)``: the stream entering layer 0 (the embeddings).
        head_refused: why there is no logit lens or direct effect: a reason key of :data:`models.anatomy.residual.WHY`
            (no token head, the head reads the other stack, the logits not rebuilt), else None.
    """

    model: str
    stack: str
    layers: list[LayerFlow]
    x_in: np.ndarray
    head_refused: str | None = None
    _head: object = field(default=None, repr=False)
    _rows: dict = field(default_factory=dict, repr=False)
    _tokenizer: object = field(default=None, repr=False)

    def _layer(self, layer) -> int:
        """``layer`` checked against this flow's layers (:func:`models.checks.whole`)."""
        return checks.whole("layer", layer, 0, len(self.layers) - 1)

    def token_shares(self, layer: int, rows=None) -> np.ndarray:
        """float32 ``(len(rows), n_k + 2)``: at layer ``layer``, each source token's share of the stream after the
        attention at each of ``rows`` (default: every position), then the residual's and the biases'; each row sums
        to 1 (:meth:`LayerFlow.token_shares`). Rows already computed are kept.

        Args:
            layer: 0 .. layers - 1.
            rows: a position or a list of positions (negative ones count from the end), or None for all.

        Raises:
            InvalidArgumentError: a layer or row out of range.
        """
        layer = self._layer(layer)
        n = self.x_in.shape[0]
        rows = list(range(n)) if rows is None else sorted(set(cast(list[int], checks.positions("rows", rows, n))))
        cache = self._rows.setdefault(int(layer), {})
        todo = [r for r in rows if r not in cache]
        if todo:
            for r, row in zip(todo, self.layers[layer].token_shares(todo)):
                cache[r] = row
        return np.stack([cache[r] for r in rows]) if rows else np.zeros((0, n + 2), np.float32)

    @property
    def tokens(self) -> np.ndarray:
        """float32 ``(layers, n, n_k)``: token ``j``'s share of position ``i`` after each layer's attention (every
        row of every layer: ``n² × d`` work per layer, see :meth:`token_shares`)."""
        return np.stack([self.token_shares(layer)[:, :-2] for layer in range(len(self.layers))])

    @guard_memory
    def weights(self, layer: int) -> np.ndarray:
        """float32 ``(heads, n, n_k)``: layer ``layer``'s attention weights (before heads are gated), computed from
        the layer's kept query and key by the family's eager function: the analysis's weights with no forward pass
        (an analysis of a long text computes a layer by running the model up to it)."""
        layer = self._layer(layer)
        return self.layers[layer].weights(range(self.x_in.shape[0])).cpu().numpy()

    @property
    def value_norms(self) -> np.ndarray:
        """float32 ``(layers, heads, n_k)``: ``‖W_O^h v_j^h‖₂`` (Kobayashi et al. 2020, eq. 6)."""
        return np.stack([lf.value_norms for lf in self.layers])

    def value_weighted(self, weights: np.ndarray, layer: int, head: int | None = None) -> np.ndarray:
        """``α_ij · ‖f^h(x_j)‖`` (Kobayashi et al. 2020, eq. 6), in the units of the residual stream, for one layer's
        weights float ``(heads, n, n_k)``, or with ``head`` for that head's ``(n, n_k)``.

        Raises:
            InvalidArgumentError: a layer or head out of range, or weights of another shape.
        """
        norms = self.layers[self._layer(layer)].value_norms  # (heads, n_k)
        if head is not None:
            head = checks.whole("head", head, 0, norms.shape[0] - 1)
        got: np.ndarray | None
        try:
            got = np.asarray(weights, dtype=np.float32)
        except (TypeError, ValueError):
            got = None
        n = self.x_in.shape[0]
        want = (norms.shape[0], n, norms.shape[1]) if head is None else (n, norms.shape[1])
        if got is None or got.shape != want:
            raise InvalidArgumentError(f"weights must be a float array of shape {want}, got "
                                       f"{None if got is None else got.shape}.", code="arg_shape",
                                       name="weights", shape=str(want),
                                       got=str(None if got is None else got.shape))
        return got * (norms[:, None, :] if head is None else norms[head][None, :])

    def route(self, position: int = -1, threshold: float = 0.04) -> Route:
        """The graph of routes to the last stream at ``position`` (edges with contribution ≥ ``threshold``;
        Ferrando & Voita 2024 use 0.04).

        Raises:
            InvalidArgumentError: ``threshold`` outside 0..1 or ``position`` out of range.
        """
        threshold = checks.number("threshold", threshold, 0, 1)
        return guard_memory(route_graph)(self.token_shares, [lf.mlp for lf in self.layers],
                                         [lf.mlp_residual for lf in self.layers], len(self.layers),
                                         check_position(position, self.x_in.shape[0]), float(threshold))

    def _need_head(self):
        if self._head is None:
            raise UnsupportedOperationError(f"No logit lens for '{self.model}': {WHY[self.head_refused]}.",
                                            code="flow_no_head", model=self.model, why=self.head_refused)
        return self._head

    @guard_memory
    def logit_lens(self, position: int = -1, k: int = 5) -> LogitLens:
        """The top ``k`` tokens of every residual stream at ``position`` (nostalgebraist 2020).

        Raises:
            UnsupportedOperationError: no token head (see ``head_refused``). InvalidArgumentError: bad position or k.
        """
        head = self._need_head()
        p = check_position(position, self.x_in.shape[0])
        k = checks.whole("k", k, 1, 1000)
        streams = np.stack([self.x_in[p]] + [lf.x_out[p] for lf in self.layers])
        logits = head(torch.from_numpy(streams))
        top = topk(logits, int(k), self._tokenizer)
        final = int(torch.argmax(logits[-1]))
        rank = (logits > logits[:, final:final + 1]).sum(-1)
        probs = torch.softmax(logits, -1)
        return LogitLens(ids=top.ids, probs=top.probs, labels=top.tokens, final_id=final, final_rank=rank.numpy(),
                         final_prob=probs[:, final].numpy().astype(np.float32),
                         last_logits=logits[-1].numpy().astype(np.float32))

    @guard_memory
    def direct_effect(self, position: int = -1) -> DirectEffect:
        """Each head's direct effect on the logits at ``position`` (see :class:`DirectEffect`).

        Raises:
            UnsupportedOperationError: no token head (see ``head_refused``), or a post-LN stack whose residual path
                passes norms the flow does not freeze (a decoder with cross-attention: BART, Marian).
            InvalidArgumentError: a bad position.
        """
        head = self._need_head()
        p = check_position(position, self.x_in.shape[0])
        if not all(lf.carry_known for lf in self.layers):
            raise UnsupportedOperationError(f"No direct effects for '{self.model}': {WHY['post_cross']}.",
                                            code="flow_no_head", model=self.model, why="post_cross")
        rows = slice(p, p + 1)
        carried = []
        for layer, lf in enumerate(self.layers):
            v = lf.head_out(p)  # (H, d)
            if lf.carry is not None:  # post-LN: through this layer's output norm, then each later layer's two
                v = lf.carry[1].apply(v[None], rows)[0]
                for later in self.layers[layer + 1:]:
                    assert later.carry is not None  # carry_known everywhere: a post-LN stack, every layer carries
                    v = later.carry[1].apply(later.carry[0].apply(v[None], rows), rows)[0]
            carried.append(v)
        c = torch.stack(carried)  # (L, H, d)
        x = torch.from_numpy(self.layers[-1].x_out[p]).to(c.device)
        without = (x[None, None] - c).reshape(-1, c.shape[-1])  # the last stream less each head's carried output
        full = head(x[None])[0]
        out = torch.cat([full[None] - head(without[i:i + 64]) for i in range(0, without.shape[0], 64)])
        out = out.reshape(c.shape[0], c.shape[1], -1)
        out[(c == 0).all(-1)] = 0.0  # a head that adds nothing (switched off) changes nothing, not rounding noise
        final = int(torch.argmax(full))
        return DirectEffect(logits=out.numpy().astype(np.float32), on_final=out[..., final].numpy().astype(np.float32),
                            final_id=final)


def check_position(position, n: int) -> int:
    """``position`` as an index into ``n`` positions (negative ones count from the end).

    Raises:
        InvalidArgumentError: not a whole number from ``-n`` to ``n - 1``.
    """
    return checks.whole("position", position, -n, n - 1) % n


def _head_fn(loaded, layout: FlowLayout):
    """``head(x float32 (m, d)) -> float32 (m, vocab)`` on the CPU, or None. Holds weak references to the head's
    modules (a cached flow must not keep a model the model cache dropped)."""
    if layout.head is None:
        return None
    spec = layout.head
    modules = dict(loaded.model.named_modules())
    names = [spec[1]] if spec[0] == "module" else list(spec[1:3])
    refs = {name: weakref.ref(modules[name]) for name in names}

    def call(name, x):
        module = _alive(refs[name], "logits")
        param = next(module.parameters())
        out = module(x.to(device=param.device, dtype=param.dtype)[None])
        out = out[0] if isinstance(out, tuple) else out
        return out[0].float()

    def head(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            if spec[0] == "module":
                logits = call(spec[1], x)
            else:
                _, norm, lm, factor = spec
                logits = call(lm, call(norm, x) * factor)
            if layout.softcap is not None:
                logits = torch.tanh(logits / layout.softcap) * layout.softcap
        return logits.cpu()

    return head


@checks.needs_model
def information_flow(loaded, analysis, *, stack: str | None = None) -> Flow:
    """Measure the information flow of ``analysis`` (the same inputs, heads off and mask) on ``stack``.

    Args:
        loaded: the model ``analysis`` came from (:func:`models.load`).
        analysis: from :func:`models.analyze` (interface path).
        stack: ``encoder`` or ``decoder`` (default: the stack the model's head reads, else its input stack).

    Cost: one forward pass (the fused attention kernel where the model has one) with each layer decomposed as it
    finishes; per layer it keeps the attention call's query, key and value (``n`` per head; the mask, ``n²``, and
    T5's position bias, ``heads × n²``, are one tensor shared by every layer), the projection's input and the
    streams (``n × d``) and the shares by head and MLP. Token contributions are computed when asked, for the
    rows asked (:meth:`Flow.token_shares`; :meth:`Flow.route` asks only for the rows on the route), each row's
    weights again by the family's own eager function.

    Returns:
        The :class:`Flow`.

    Raises:
        UnsupportedOperationError: a fallback-path model, a stack the flow cannot place (``flow_layout``'s
            ``refused``: hybrid blocks, a shared layer, heads mixed before the projection), cross-attention, or
            an identity that does not hold on this run.
        InvalidArgumentError: an analysis of another model, an unknown stack or a bad position.
        ModelOutOfMemoryError: the pass ran out of memory.
    """
    if getattr(analysis, "model", None) != loaded.name or not hasattr(analysis, "run"):
        raise InvalidArgumentError(f"The analysis is not one of '{loaded.name}' (it is of "
                                   f"{getattr(analysis, 'model', None)!r}): pass the model it came from.",
                                   code="flow_other_model", model=loaded.name,
                                   other=checks.shown(getattr(analysis, "model", None)))
    layout = flow_layout(loaded)
    if analysis.run is None:  # weights read from output_attentions: a stack outside the interface
        raise UnsupportedOperationError(
            f"Model '{loaded.name}' runs a stack on the fallback path: the information flow needs the values each "
            "head read, which only the attention interface hands over.", code="flow_needs_interface",
            model=loaded.name)
    if stack is None:
        stack = layout.head_stack or loaded.input_stack
    if not isinstance(stack, str) or stack == "cross" or stack not in loaded.stacks:
        raise InvalidArgumentError(f"stack must be one of {[s for s in loaded.stacks if s != 'cross']}, got "
                                   f"{checks.shown(stack)}"
                                   " (cross-attention's flow is part of the decoder's: its MLP stage).",
                                   code="arg_choice", name="stack", value=checks.shown(stack),
                                   options=", ".join(s for s in loaded.stacks if s != "cross"))
    if stack in layout.refused:
        detail = layout.placed.get(stack, WHY[layout.refused[stack]])
        raise UnsupportedOperationError(f"No information flow for the {stack} of '{loaded.name}': {detail}.",
                                        code="flow_refused", model=loaded.name, stack=stack,
                                        why=layout.refused[stack])
    rec = run_flow(loaded, layout, stack, analysis.run)
    layers = [rec.layers[layer] for layer in sorted(rec.layers)]
    head = _head_fn(loaded, layout) if stack == layout.head_stack else None
    refused = layout.head_refused if layout.head_stack in (None, stack) else "other_stack"
    flow = Flow(model=loaded.name, stack=stack, layers=layers, x_in=rec.x_in0,
                head_refused=None if head else refused, _head=head, _tokenizer=loaded.tokenizer)
    logits = getattr(rec.outputs, "logits", None)
    if head is not None and logits is not None:
        mine = guard_memory(head)(torch.from_numpy(layers[-1].x_out[-1:]))[0]
        _check("the logits rebuilt from the last residual stream", mine, logits[0, -1].float().cpu(), None,
               tolerance(loaded.dtype))
    return flow


def special_share(analysis, flow: Flow) -> tuple[np.ndarray, np.ndarray]:
    """Per layer, the share of attention that lands on special tokens ([CLS], [SEP], <s>, </s> ...), averaged over
    heads and queries: with the raw weights ``α_ij``, and with the value-weighted ones ``α_ij ‖f^h(x_j)‖``
    renormalised per query (Kobayashi et al. 2020, §4.2 and fig. 3: "BERT pays poor attention to special tokens"
    once the vectors' norms are counted).

    Args:
        analysis: the :class:`models.Analysis` ``flow`` was measured on (its tokens say which are special; the
            weights come from the flow, :meth:`Flow.weights`, without running the model again).
        flow: from :func:`information_flow`.

    Returns:
        ``(raw, weighted)``: float32 ``(layers,)`` each, in 0..1 (heads switched off are left out; a layer with
        every head off gives 0).

    Raises:
        InvalidArgumentError: ``flow`` is not of ``analysis`` (another model or stack size).
    """
    from ..analysis.result import Analysis

    checks.instance("analysis", analysis, Analysis, "an Analysis (models.analyze)")
    checks.instance("flow", flow, Flow, "a Flow (models.information_flow)")
    q_tokens, k_tokens = analysis.axis_tokens(flow.stack)
    if analysis.model != flow.model or len(k_tokens) != flow.x_in.shape[0]:
        raise InvalidArgumentError("The flow was not measured on this analysis.", code="flow_not_of_analysis")
    special = np.array([t.special for t in k_tokens])
    raw, weighted = [], []
    for layer, lf in enumerate(flow.layers):
        assert lf.gate is not None  # set by the flow pass (models.flow.record)
        on = lf.gate.cpu().numpy() != 0  # a head switched off adds nothing: left out of both means
        att = flow.weights(layer)[on]  # (H on, n, n_k)
        vw = att * lf.value_norms[on][:, None, :]
        vw = vw / np.maximum(vw.sum(-1, keepdims=True), 1e-30)
        raw.append(att[..., special].sum(-1).mean() if on.any() else 0.0)
        weighted.append(vw[..., special].sum(-1).mean() if on.any() else 0.0)
    return np.asarray(raw, np.float32), np.asarray(weighted, np.float32)

