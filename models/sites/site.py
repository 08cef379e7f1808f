"""One attention layer of a loaded model, as the load-time probe found it (:class:`Site`), and how a module's
dotted name tells its stack and layer."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Name fragments that mark cross-attention modules in encoder-decoder models
# (BART/Marian/Whisper: encoder_attn, T5: EncDecAttention, BERT-as-decoder: crossattention).
CROSS_MARKERS = ("encoder_attn", "encdecattention", "crossattention", "cross_attn", "cross_attention")
LAYER_INDEX = re.compile(r"\.(\d+)(?:\.|$)")

# Where a site's heads are switched off (``Site.gate``):
GATE_OUTPUT = "output"    # interface path: the attention function's output, which is the projection's input
GATE_PROJ = "o_proj"      # a forward pre-hook on the output projection's input (``Site.o_proj``)
GATE_SOFTMAX = "softmax"  # fallback path: the weights times the gate at the layer's softmax
GATE_MIXED = "mixed"      # interface path: heads are mixed before the projection; switching one off is refused
GATE_NONE = "none"        # fallback path: no proven projection and no softmax; switching a head off is refused
GATES = (GATE_OUTPUT, GATE_PROJ, GATE_SOFTMAX, GATE_MIXED, GATE_NONE)


@dataclass(frozen=True)
class Site:
    """One attention module of a model: which stack, which layer, how many heads, and where its parts are.

    Attributes:
        stack: ``"encoder"``, ``"decoder"`` or ``"cross"``.
        layer: layer index within the stack (0-based).
        heads: number of query heads (maps recorded per layer).
        name: the module's dotted name in the model (``stack.layer`` on the fallback path).
        o_proj: dotted name of the layer's output projection ``W_O``, proven on the load-time probe: its input
            is the heads' outputs ``A_h · V_h`` side by side, head after head, ``(batch, query_len, heads ·
            head_dim)`` (Vaswani et al. 2017, eq. 1-2). None where no such map was proven (an expert-routed
            projection, a norm in between, heads mixed, a fallback layer without one).
        gate: where switching a head off happens, one of :data:`GATES`: ``output`` (the attention function's
            output, on the interface path, when the projection takes it as it is), ``o_proj`` (a pre-hook
            zeroing the head's slice of ``o_proj``'s input: the fallback path, and the interface path where
            something lies between the function and the projection, BitNet's sub-norm), ``softmax`` (fallback:
            the head's weights times its gate at the layer's softmax, :mod:`models.capture.softmax`),
            ``mixed`` (DiffLlama's differential pairs: refused) or ``none`` (refused). Each of them removes
            exactly the head's slice of the projection's input (Michel et al. 2019, §2).
        index: the layer's own number in the model (the index in its module name), when it differs from
            ``layer``: in a hybrid model only some blocks have attention (Jamba's block 4 may be its
            attention layer 0). None when the module is called several times per forward pass (ALBERT's
            shared layer: its calls are layers ``0 .. n - 1`` by depth).
        sink: the module has a learned attention sink (a ``sinks`` parameter: GPT-OSS, MiMo-V2-Flash's
            sliding layers): one extra logit per head that joins the softmax but attends no token, so a
            query's weights over the tokens sum to ``1 - sink share`` (Xiao et al. 2024, "Efficient
            Streaming Language Models with Attention Sinks", §3.2: a learnable sink token; here without
            a value).
        read_at_softmax: fallback path only: the model returns the scores before the softmax as its
            ``attentions`` (ProphetNet, SqueezeBERT); the weights are read at its attention module's softmax.
    """

    stack: str
    layer: int
    heads: int
    name: str
    o_proj: str | None = None
    gate: str = GATE_OUTPUT
    index: int | None = None
    sink: bool = False
    read_at_softmax: bool = False

    def __post_init__(self) -> None:
        if self.gate not in GATES:
            raise ValueError(f"Site.gate must be one of {GATES}, got {self.gate!r}")
        if self.gate == GATE_PROJ and not self.o_proj:
            raise ValueError("Site.gate 'o_proj' needs the projection's name (o_proj)")

    @property
    def label(self) -> int:
        """The number to show for this layer: ``index`` when known, else ``layer``."""
        return self.layer if self.index is None else self.index

    @property
    def mixed_heads(self) -> bool:
        """Heads are mixed before the output projection (``gate == "mixed"``): no head can be switched off."""
        return self.gate == GATE_MIXED

    @property
    def can_switch_off(self) -> bool:
        """A head of this layer can be switched off by itself (``gate`` is not ``mixed`` or ``none``)."""
        return self.gate not in (GATE_MIXED, GATE_NONE)


def stack_of(name: str, family: str) -> str:
    """Stack of an attention module from its dotted name: ``cross`` for cross-attention modules,
    else ``decoder``/``encoder`` by the family and the name."""
    lowered = name.lower()
    if family == "encoder-decoder":
        if any(marker in lowered for marker in CROSS_MARKERS):
            return "cross"
        return "decoder" if "decoder" in lowered else "encoder"
    return "decoder" if family == "decoder" else "encoder"


def layer_of(name: str) -> int:
    """Layer index of an attention module: the first integer path component of its name
    (``model.layers.3.self_attn`` -> 3, ``encoder.block.0.layer.1.EncDecAttention`` -> 0)."""
    match = LAYER_INDEX.search("." + name)
    return int(match.group(1)) if match else 0


def layer_block(name: str) -> str:
    """The layer that holds the module ``name``: its name up to the first layer index (``model.layers.3``)."""
    found = LAYER_INDEX.search(name)
    return name[:found.end(1)] if found else name
