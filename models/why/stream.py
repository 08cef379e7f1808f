"""The residual stream entering a layer, as a sum of named parts (:class:`Stream`): the embeddings, each earlier
head's output, each earlier layer's MLP, and the biases, each as it reaches the layer.

The parts (Elhage et al. 2021, "A Mathematical Framework for Transformer Circuits", §2: the residual stream is the
sum of every earlier component's output; Ferrando et al. 2022, §3: a norm is linear once its statistics are frozen)::

    x_L = Σ_e E(e) + Σ_{l<L} [ Σ_h T_l(P_l(W_O^h o_h^l)) + T_l(m_l) ] + b

* ``e``: each embedding module's output (token, absolute position, token type), through the embedding norm ``E``
  (BERT) frozen, else as it is; a part the modules do not account for is kept as "other input terms";
* ``W_O^h o_h^l``: head ``h`` of layer ``l``, its slice of the output projection (0 when switched off); ``P_l`` the
  frozen norm on the attention output (Gemma's sandwich, post-LN), else the identity;
* ``m_l``: the rest of layer ``l`` (its MLP; in a decoder of an encoder-decoder also its cross-attention), through
  the layer's output norm (post-LN);
* ``T_l``: the frozen norms of later post-LN layers a vector added at layer ``l`` passes through (each post-LN
  layer maps its stream through ``P`` then ``A``); the identity in pre-LN and sandwich models;
* ``b``: every constant: the output projections' biases and the norms' ``β``, carried the same way.

Each part is computed for the positions asked, when asked (``(parts, positions, d)`` per block), so the stream is
never held once per part.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import torch

from ..anatomy.norms import FrozenNorm, freeze
from ..anatomy.tensors import close
from .record import Earlier, Pass


@dataclass(frozen=True)
class Component:
    """One part of the residual stream (or of a side's constant) in a score's decomposition.

    Attributes:
        kind: ``embedding``, ``head``, ``mlp``, ``bias`` (the constants in the stream) or ``own_bias`` (the explained
            layer's own constant on one side: its input norm's ``β`` through the projection, the projection's bias).
        name: in words, English (``"token embedding"``, ``"head 1.4"``, ``"MLP 3"``, ``"biases"``); the page builds
            its own words from ``kind``, ``layer`` and ``head``.
        layer, head: the earlier layer (and head) that wrote it, else None.
        off: a head switched off in the analysis (its part is exactly zero).
    """

    kind: str
    name: str
    layer: int | None = None
    head: int | None = None
    off: bool = False

    def at(self, position: int, label: str = "") -> str:
        """This part at a position, in words: ``"head 1.4's output at 3 ('cat')"``."""
        where = f"{position} ({label!r})" if label else str(position)
        if self.kind == "embedding":
            return f"the {self.name} of {where}"
        if self.kind in ("head", "mlp"):
            return f"{self.name}'s output at {where}"
        if self.kind == "bias":
            return f"the biases in the stream at {where}"
        return f"this layer's {self.name}"


def _apply(norm: FrozenNorm, v: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """A frozen norm's linear part on ``v (m, p, d)`` at positions ``pos``."""
    return norm.apply(v.transpose(0, 1), pos).transpose(0, 1)


class Stream:
    """The stream entering a layer as :data:`components` (see the module docstring).

    Args:
        embeddings: ``(name, vectors (n, d))`` of each embedding part, already through the embedding norm.
        earlier: :class:`~models.why.record.Earlier` of each layer before.
        biases: ``(n, d)``: the constant part ``b``. heads: query heads per layer.
        gates: ``layer -> (heads,)`` 0/1 of the heads switched off, for the ``off`` flags.
        mlp_name: what the rest of a layer is called (``"MLP"``; ``"cross-attention + MLP"`` in a seq2seq decoder).
    """

    def __init__(self, embeddings: list, earlier: list[Earlier], biases: torch.Tensor, heads: int, gates: dict,
                 mlp_name: str = "MLP"):
        self.embeddings, self.earlier, self.biases, self.heads = embeddings, earlier, biases, heads
        comps = [Component("embedding", name) for name, _ in embeddings]
        for layer in range(len(earlier)):
            gate = gates.get(layer)
            on = [1.0] * heads if gate is None else [float(g) for g in gate.reshape(-1, heads)[0]]
            comps += [Component("head", f"head {layer}.{h}", layer, h, off=not on[h]) for h in range(heads)]
            comps.append(Component("mlp", f"{mlp_name} {layer}", layer))
        comps.append(Component("bias", "biases"))
        self.components = comps

    def carry(self, v: torch.Tensor, born: int, pos: torch.Tensor) -> torch.Tensor:
        """``v (m, p, d)`` added to the stream after layer ``born`` (−1: the embeddings) as it reaches the layer:
        through each later post-LN layer's ``P`` then ``A`` (:data:`T_l` in the module docstring)."""
        for e in self.earlier[born + 1:]:
            if e.kind == "post":
                assert e.post is not None and e.after is not None  # a post-LN layer has both (earlier_layer)
                v = _apply(e.after, _apply(e.post, v, pos), pos)
        return v

    def blocks(self, pos: torch.Tensor):
        """The parts at positions ``pos (p,)``, block by block in the order of :attr:`components`: float32
        ``(m, p, d)`` each (the embeddings, then per earlier layer its heads and its MLP, then the biases)."""
        for _, vectors in self.embeddings:
            yield self.carry(vectors[pos][None], -1, pos)
        for layer, e in enumerate(self.earlier):
            heads = self.heads
            dh = e.o_in.shape[1] // heads
            z = torch.einsum("phc,dhc->hpd", e.o_in[pos].reshape(-1, heads, dh), e.w_o.reshape(-1, heads, dh))
            rest = e.rest[pos][None]
            if e.kind in ("sandwich", "post"):
                assert e.post is not None  # sandwich and post-LN layers have one (earlier_layer)
                z = _apply(e.post, z, pos)
            if e.kind == "post":
                assert e.after is not None  # a post-LN layer has one (earlier_layer)
                z, rest = _apply(e.after, z, pos), _apply(e.after, rest, pos)
            yield self.carry(z, layer, pos)
            yield self.carry(rest, layer, pos)
        yield self.biases[pos][None]

    def total(self, pos: torch.Tensor) -> torch.Tensor:
        """float32 ``(p, d)``: the sum of every part at ``pos`` (equal to the stream: checked when explained)."""
        return sum(block.sum(0) for block in self.blocks(pos))


def stream_biases(n: int, d: int, start: torch.Tensor | None, earlier: list[Earlier]) -> torch.Tensor:
    """The constant part ``b`` (n, d) entering the layer after ``earlier``: the embedding norm's ``β`` (``start``),
    then per layer the projection's bias (through ``P``), the norms' ``β``, carried like any other part."""
    b = torch.zeros(n, d) if start is None else start.expand(n, d).clone()
    every = torch.arange(n)
    for e in earlier:
        bias = torch.zeros(d) if e.b_o is None else e.b_o
        if e.kind == "pre":
            b = b + bias
        elif e.kind == "sandwich":
            assert e.post is not None  # a sandwich layer has one (earlier_layer)
            b = b + _apply(e.post, bias.expand(1, n, d), every)[0] + e.post.shift
        else:
            assert e.post is not None and e.after is not None  # a post-LN layer has both (earlier_layer)
            b = _apply(e.post, (b + bias)[None], every)[0] + e.post.shift
            b = _apply(e.after, b[None], every)[0] + e.after.shift
    return b


def embedding_parts(rec: Pass, first_block: str, token_modules: set[str], modules: dict,
                    tol: float) -> tuple[list, torch.Tensor | None] | str:
    """The embedding parts of the stream entering the stack's first layer (see the module docstring).

    Args:
        rec: the pass. first_block: the name of the stack's first layer. token_modules: the names of the model's input
            embedding (``get_input_embeddings()``) and of the modules sharing its weight (T5's per-stack copies).
        tol: tolerance.

    Returns:
        ``([(name, vectors (n, d)), ...], β of the embedding norm (d,) or None)``, the parts summing to the stream
        entering layer 0 (with ``β``); or the reason key ``norm`` when the embedding norm is not a per-position affine
        norm.
    """
    x0 = rec.streams[0]
    n, d = x0.shape
    start = rec.firsts[first_block]
    prev = max((o for o in rec.firsts.values() if o < start), default=0)
    found: dict[str, torch.Tensor] = {}
    for o, name, t in rec.embeds:
        if prev < o < start and tuple(t.shape) == (n, d):
            found[name] = t
    norm_call = next((c for c in reversed(rec.outside) if prev < c[0] < start and c[3] is not None
                      and tuple(c[3].shape) == (n, d) and close(c[3], x0, tol)), None)
    target = norm_call[2] if norm_call is not None else x0
    parts = _subset(found, target, tol)
    if parts is None:
        token_module = next((name for name in found if name in token_modules), None)
        token = found.get(token_module) if token_module else None
        parts = [(token_module, token), (None, target - token)] if token is not None else [(None, target)]
    named = [(_label(name, token_modules), v) for name, v in parts]
    if norm_call is None:
        return named, None
    frozen = freeze(modules[norm_call[1]], norm_call[2], norm_call[3], atol=tol)
    if frozen is None:
        return "norm"
    every = torch.arange(n)
    return [(label, _apply(frozen, v[None], every)[0]) for label, v in named], frozen.shift


def _subset(found: dict, target: torch.Tensor, tol: float):
    """The embedding outputs whose sum (times a fitted factor: Gemma 1 scales after the lookup) is ``target``,
    largest set first; None when none is."""
    items = list(found.items())[:6]
    for r in range(len(items), 0, -1):
        for combo in combinations(items, r):
            total = sum(v for _, v in combo)
            denom = float((total * total).sum())
            rho = float((total * target).sum()) / denom if denom > 0 else 1.0
            rho = 1.0 if abs(rho - 1.0) < 1e-6 else rho
            if close(total * rho, target, tol):
                return [(name, v * rho) for name, v in combo]
    return None


def _label(name: str | None, token_modules: set[str]) -> str:
    if name is None:
        return "other input terms" if token_modules else "embeddings"
    if name in token_modules:
        return "token embedding"
    low = name.lower()
    if "position" in low or low.endswith("wpe"):
        return "position embedding"
    if "type" in low:
        return "token type embedding"
    return name
