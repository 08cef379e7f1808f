"""A loaded model, ready for attention capture: :class:`LoadedModel` (what :func:`models.load` returns)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..sites.site import Site
from .catalog import ModelSpec


@dataclass
class LoadedModel:
    """A model ready for :func:`models.analyze`, cached per process and shared between threads.

    Nothing per-request is stored here: heads switched off and masks travel with each call.

    Attributes:
        name: what the caller asked for (catalog key, hub id or folder).
        spec: the catalog entry, or a synthesised one for hub ids and folders.
        model: the ``PreTrainedModel`` in eval mode.
        tokenizer: its (fast) tokenizer, or processor's tokenizer for speech models.
        device: ``torch.device`` the weights live on.
        dtype: compute dtype (float32 on CPU, bfloat16/float16 on GPU).
        family: ``encoder`` | ``decoder`` | ``encoder-decoder``.
        head: ``lm`` (next-token), ``mlm`` (masked-token), ``seq2seq`` or ``none`` (embeddings only).
        capture_path: ``interface`` (custom attention function) or ``fallback`` (eager weights + hooks).
        sites: every attention module, ordered by stack then layer.
        folder: where the weights were read from.
        processor: the ``AutoProcessor`` of a speech model (Whisper: feature extractor + tokenizer), else None.
        load_seconds: wall time of :func:`load`, in seconds.
        site_index: interface path: ``id(attention module) -> Site``, or a tuple of sites (one per call) for a
            module called several times per forward pass (what :func:`models.capture.capture` takes); empty
            on the fallback path.
        load_args: the arguments of :func:`load` that gave this model (to load it again).
        probes: answers of probes run when first needed, e.g. ``fallback_mask`` (how a fallback-path model
            takes a replaced mask: :func:`models.capture.softmax.mask_support`).
        fallback_stacks: interface path: stacks whose attention does not route through the interface and
            whose eager ``output_attentions`` are token-by-token maps (BigBird-Pegasus' encoder): they are
            read from those in the same forward pass; their heads cannot be switched off, their masks not
            replaced.
        missing_stacks: ``stack -> why it is not shown``: a stack that neither routes through the interface
            nor returns token-by-token maps (Pegasus-X's local/global encoder).
        call_kwargs: extra arguments of every analysing forward pass, found at load time
            (:func:`models.anatomy.decoder.decoder_call`): ``{"use_cache": False}`` for an encoder-decoder whose
            decoder is causal only without a cache (FSMT builds its causal mask only then, as in training).
        notes: what the user should know about how the model was loaded, each a dict with ``code``, its params
            and ``message`` (English): ``dtype_fallback`` (params ``asked``, ``used``, ``kind``): the model could
            not run in the half dtype asked for (or chosen by ``auto``) and was loaded in float32, which
            :attr:`dtype` says (:mod:`models.loading.precision`); ``readout_sees_target`` (no params): a
            decoder whose prediction at a position depends on later tokens (XLNet), loaded with ``head`` ``"none"``
            (:func:`models.anatomy.decoder.readout_sees_target`).
    """

    name: str
    spec: ModelSpec
    model: Any
    tokenizer: Any
    device: torch.device
    dtype: torch.dtype
    family: str
    head: str
    capture_path: str
    sites: list[Site]
    folder: Path | None = None
    processor: Any = None
    load_seconds: float = 0.0
    site_index: dict[int, Site] = field(default_factory=dict)
    load_args: dict = field(default_factory=dict)
    probes: dict = field(default_factory=dict)
    fallback_stacks: tuple[str, ...] = ()
    missing_stacks: dict[str, str] = field(default_factory=dict)
    call_kwargs: dict = field(default_factory=dict)
    notes: list[dict] = field(default_factory=list)

    @property
    def stacks(self) -> dict[str, tuple[int, int]]:
        """``stack -> (layers, heads)``, e.g. ``{"encoder": (6, 12)}``."""
        out: dict[str, tuple[int, int]] = {}
        for site in self.sites:
            layers, heads = out.get(site.stack, (0, site.heads))
            out[site.stack] = (max(layers, site.layer + 1), heads)
        return out

    @property
    def input_stack(self) -> str:
        """The self-attention stack that reads the input text: ``decoder`` for decoders, ``encoder`` for
        encoders and encoder-decoders. The lessons walk through it."""
        return "decoder" if self.family == "decoder" else "encoder"

    @property
    def mask_stack(self) -> str:
        """The self-attention stack a mask given for no stack in particular replaces (``analyze(mask=...)``):
        ``encoder`` for encoders, ``decoder`` for decoders and encoder-decoders (whose causal decoder mask
        is the one worth swapping)."""
        return "encoder" if self.family == "encoder" else "decoder"

    @property
    def sdpa_ok(self) -> bool:
        """True when layers that record nothing may run transformers' ``sdpa_attention_forward`` (the fused
        kernel) instead of the family's eager function: interface path and a model class that declares
        sdpa support (``_supports_sdpa``; False e.g. for Gemma 2's softcapping or GPT-OSS's sinks)."""
        return self.capture_path == "interface" and bool(getattr(self.model, "_supports_sdpa", False))

    def layer_labels(self) -> dict[str, list[int]]:
        """``stack -> [block number of each attention layer]`` for stacks whose attention layers are not
        blocks ``0 .. n - 1`` (hybrid models, see :attr:`models.sites.site.Site.index`); other stacks are left
        out."""
        out: dict[str, list[int]] = {}
        for stack in self.stacks:
            labels = [s.label for s in sorted((s for s in self.sites if s.stack == stack), key=lambda s: s.layer)]
            if labels != list(range(len(labels))):
                out[stack] = labels
        return out

    @property
    def decoder_start_id(self) -> int:
        """The token an encoder-decoder's decoder starts from: the config's ``decoder_start_token_id``, else
        the generation config's, else the pad token, else 0 (some configs set none of them)."""
        for source in (self.model.config, getattr(self.model, "generation_config", None)):
            value = getattr(source, "decoder_start_token_id", None)
            if isinstance(value, int):
                return value
        pad = getattr(self.model.config, "pad_token_id", None)
        return pad if isinstance(pad, int) else 0

    @property
    def config(self):
        """The model's transformers ``PretrainedConfig``."""
        return self.model.config

    @property
    def text_config(self):
        """The config of the model's text part (``get_text_config()`` of a composite model), else its config."""
        cfg = self.model.config
        return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg

    @property
    def input_name(self) -> str:
        """What the model reads: ``input_ids`` (text) or ``input_features`` (a speech model's log-mel frames)."""
        return getattr(self.model, "main_input_name", "input_ids")

    @property
    def reads_text(self) -> bool:
        """Whether the model reads text (``input_ids``); False for a speech model (Whisper reads
        ``input_features``, log-mel frames: :func:`models.analyze_audio`). The one test of it, engine and pages."""
        return self.input_name == "input_ids"

    @property
    def num_key_value_heads(self) -> int | None:
        """Key/value heads of a grouped-query attention model (None when every head has its own)."""
        cfg = self.text_config
        kv = getattr(cfg, "num_key_value_heads", None)
        heads = getattr(cfg, "num_attention_heads", None)
        return kv if kv and heads and kv != heads else None

    @property
    def max_positions(self) -> int:
        """Longest input the model accepts, in tokens: the smaller of the config's first position limit
        (``max_position_embeddings``, ``n_positions``, ``max_source_positions`` or ``n_ctx``; minus 2 for
        RoBERTa-style models) and the tokenizer's ``model_max_length``; 512 when neither is known (T5)."""
        cfg = self.model.config
        candidates = []
        for attr in ("max_position_embeddings", "n_positions", "max_source_positions", "n_ctx"):
            value = getattr(cfg, attr, None)
            if isinstance(value, int) and value > 0:
                candidates.append(value)
                break
        tok_max = getattr(self.tokenizer, "model_max_length", None)
        if isinstance(tok_max, int) and 0 < tok_max < 1_000_000:
            candidates.append(tok_max)
        if cfg.model_type in ("roberta", "xlm-roberta", "camembert") and candidates:
            # RoBERTa-style position ids start at padding_idx + 1: two positions are never used.
            candidates[0] -= 2
        # T5 has relative positions (no maximum): pick a safe limit.
        return min(candidates) if candidates else 512
