"""Loading a model by catalog key, Hugging Face id or local folder, ready for attention capture."""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from . import budget, cache, capture, fallback_masks
from .catalog import CATALOG, ModelSpec, get_spec
from .errors import (
    DikkatError,
    HubDownloadTooLargeError,
    HubUnreachableError,
    InvalidArgumentError,
    ModelOutOfMemoryError,
    NoAttentionWeightsError,
    NoUsableModelError,
    UnknownModelError,
)

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")

# Fallback path: output projections (relative to the attention module's layer block) of families
# whose attention does not route through transformers' AttentionInterface.
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
            takes a replaced mask: :func:`models.fallback_masks.mask_support`).
        fallback_stacks: interface path: stacks whose attention does not route through the interface and
            whose eager ``output_attentions`` are token-by-token maps (BigBird-Pegasus' encoder): they are
            read from those in the same forward pass; their heads cannot be switched off, their masks not
            replaced.
        missing_stacks: ``stack -> why it is not shown``: a stack that neither routes through the interface
            nor returns token-by-token maps (Pegasus-X's local/global encoder).
        call_kwargs: extra arguments of every analysing forward pass, found at load time
            (:func:`_decoder_call`): ``{"use_cache": False}`` for an encoder-decoder whose decoder is causal
            only without a cache (FSMT builds its causal mask only then, as in training).
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
    sites: list[capture.Site]
    folder: Path | None = None
    processor: Any = None
    load_seconds: float = 0.0
    site_index: dict[int, capture.Site] = field(default_factory=dict)
    load_args: dict = field(default_factory=dict)
    probes: dict = field(default_factory=dict)
    fallback_stacks: tuple[str, ...] = ()
    missing_stacks: dict[str, str] = field(default_factory=dict)
    call_kwargs: dict = field(default_factory=dict)

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
        blocks ``0 .. n - 1`` (hybrid models, see :attr:`models.capture.Site.index`); other stacks are left
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
    def num_key_value_heads(self) -> int | None:
        """Key/value heads of a grouped-query attention model (None when every head has its own)."""
        cfg = self.model.config.get_text_config() if hasattr(self.model.config, "get_text_config") else self.model.config
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


def _pick_device(device: str) -> torch.device:
    if device != "auto":
        try:
            return torch.device(device)
        except (RuntimeError, TypeError) as exc:
            raise InvalidArgumentError(
                f"Unknown device {device!r}: use auto, cpu, cuda, cuda:N or mps."
            ) from exc
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def _pick_dtype(dtype: str | torch.dtype, device: torch.device) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype != "auto":
        found = getattr(torch, str(dtype), None)
        if not isinstance(found, torch.dtype):
            raise InvalidArgumentError(
                f"Unknown dtype {dtype!r}: use auto, float32, float16, bfloat16 or a torch.dtype."
            )
        return found
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "mps":
        return torch.float16
    return torch.float32


def _check_folder(folder: Path) -> None:
    """Raise :class:`NoUsableModelError` unless ``folder`` holds a config and safetensors weights."""
    if not (folder / "config.json").is_file():
        raise NoUsableModelError(f"Folder {folder} has no config.json: it is not a transformers model folder.",
                                 code="folder_no_config", folder=str(folder))
    if not any(folder.glob("*.safetensors")):
        pickles = [p.name for p in folder.glob("*.bin")] + [p.name for p in folder.glob("*.pt*")]
        if pickles:
            raise NoUsableModelError(
                f"Folder {folder} has only pickle weights ({', '.join(pickles)}); Dikkat loads safetensors "
                "or GGUF only, because pickle files can run code. Convert them to safetensors first.",
                code="folder_pickle_only", folder=str(folder), files=", ".join(pickles)
            )
        raise NoUsableModelError(f"Folder {folder} has no *.safetensors weights.",
                                 code="folder_no_safetensors", folder=str(folder))
    try:
        json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise NoUsableModelError(f"config.json in {folder} is not valid JSON: {exc}",
                                 code="folder_bad_config", folder=str(folder), detail=str(exc)) from exc


def _family_and_head(config) -> tuple[str, str]:
    archs = " ".join(config.architectures or [])
    if getattr(config, "is_encoder_decoder", False) and not re.search(r"ForCausalLM", archs):
        return "encoder-decoder", "seq2seq"  # (WhisperForCausalLM keeps Whisper's config: a decoder alone)
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_MASKED_LM_MAPPING_NAMES

    causal = config.model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    if causal and config.model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES and getattr(config, "causal", None) is False:
        return "encoder", "mlm"  # XLM: one class for both objectives, and the config's `causal` says which
    if not causal and config.model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return "encoder", "mlm"  # a masked LM whose class is called ...WithLMHeadModel (Flaubert)
    if re.search(r"CausalLM|LMHeadModel", archs) or (getattr(config, "is_decoder", False) and "ForMaskedLM" not in archs):
        return "decoder", "lm"
    if causal and config.model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES and "ForConditionalGeneration" in archs:
        return "decoder", "lm"  # a multimodal model's language model (Gemma 3 4B and up, GOT-OCR2): a causal LM
    if re.search(r"ForMaskedLM|ForPreTraining", archs):
        return "encoder", "mlm"
    if config.model_type in ("gpt2", "llama", "mistral", "qwen2", "gemma", "gemma2", "gemma3_text", "gpt_neo",
                             "gptj", "falcon", "bloom", "phi", "phi3", "olmo", "smollm3"):
        return "decoder", "lm"
    return "encoder", "none"


def _named_class(config, auto):
    """``auto`` (the auto class of the config's family), or the transformers class the config's
    ``architectures`` names when ``auto`` does not take this config (a text model of a composite model:
    Emu3ForCausalLM with an Emu3TextConfig). Only classes of the transformers package itself (never remote code)."""
    import transformers as tf

    archs = list(config.architectures or [])
    if not archs or type(config) in getattr(auto, "_model_mapping", {}):
        return auto
    cls = getattr(tf, archs[0], None)
    if isinstance(cls, type) and issubclass(cls, tf.PreTrainedModel) and cls.__module__.startswith("transformers.") \
            and isinstance(config, cls.config_class):
        return cls
    return auto


def _auto_class(family: str, head: str, config):
    import transformers as tf

    if family == "encoder-decoder":
        if config.model_type == "whisper":
            return tf.AutoModelForSpeechSeq2Seq
        return tf.AutoModelForSeq2SeqLM
    if head == "lm":
        return tf.AutoModelForCausalLM
    if head == "mlm":
        return tf.AutoModelForMaskedLM
    return tf.AutoModel


def accepts(model, name: str) -> bool:
    """True when ``model.forward`` takes a keyword argument ``name``."""
    import inspect

    try:
        return name in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def _probe_inputs(loaded: LoadedModel) -> dict[str, torch.Tensor]:
    """A tiny input that exercises every attention module once."""
    model, tok = loaded.model, loaded.tokenizer
    ids = tok("probe text", return_tensors="pt")["input_ids"][:, :8]
    inputs: dict[str, torch.Tensor] = {}
    if getattr(model, "main_input_name", "input_ids") == "input_features":
        cfg = model.config
        inputs["input_features"] = torch.zeros(1, cfg.num_mel_bins, 2 * cfg.max_source_positions, dtype=loaded.dtype)
    else:
        inputs["input_ids"] = ids
    if loaded.family == "encoder-decoder":
        start = loaded.decoder_start_id
        inputs["decoder_input_ids"] = torch.tensor([[start, start]])
    inputs = {k: v.to(loaded.device) for k, v in inputs.items()}
    if loaded.family == "decoder" and accepts(model, "use_cache"):
        inputs["use_cache"] = False  # one pass: a hybrid model's cache may not even answer get_seq_length
    return inputs


def _discover_sites(loaded: LoadedModel) -> None:
    """Run a probe forward pass and fill ``loaded.sites`` / ``capture_path``.

    Raises:
        NoAttentionWeightsError: no attention module routes through the interface and the model
            returns no attention weights with ``output_attentions=True`` either; or what it has is not a
            token-by-token map (self-attention with extra keys, layers of a stack with different head
            counts, fallback tensors that are not probability maps: :func:`_check_maps`).
    """
    model = loaded.model
    names = {id(m): n for n, m in model.named_modules()}
    inputs = _probe_inputs(loaded)
    with torch.no_grad(), capture.probing() as state:
        outputs = model(**inputs)
    if state.probe:  # count each attention module's forward calls, then look again
        capture.install_call_counters(dict.fromkeys(m for m, *_ in state.probe))
        with torch.no_grad(), capture.probing() as state:
            outputs = model(**inputs)
    calls: dict[int, list] = {}  # id(module) -> [(module, query heads)] per call, in call order
    order = []
    for module, heads, q_len, k_len in state.probe or []:
        calls.setdefault(id(module), []).append((heads, q_len, k_len))
        order.append(module)
    if calls:
        # One site per call, numbered by depth within its stack: a hybrid model's attention layers are
        # 0 .. n - 1 (with their own block index kept as ``index``), a module called k times is k layers.
        loaded.capture_path = "interface"
        depth: dict[str, int] = {}
        per_module: dict[int, list[capture.Site]] = {}
        for module in order:
            mid = id(module)
            name = names.get(mid, type(module).__name__)
            stack = capture.stack_of(name, loaded.family)
            layer = depth.get(stack, 0)
            depth[stack] = layer + 1
            heads, q_len, k_len = calls[mid][len(per_module.get(mid, []))]
            if stack != "cross" and q_len != k_len:
                raise NoAttentionWeightsError(
                    f"Model '{loaded.name}' ({model.config.model_type}): {name} attends {k_len} keys from {q_len} "
                    "tokens (it adds keys of its own, e.g. compressed or memory slots), so its weights are not a "
                    "token-by-token map; Dikkat cannot show this architecture's attention.",
                    code="extra_key_slots", model=loaded.name, model_type=model.config.model_type, module=name,
                    keys=k_len, tokens=q_len
                )
            index = capture.layer_of(name) if len(calls[mid]) == 1 else None
            per_module.setdefault(mid, []).append(capture.Site(
                stack, layer, heads, name, index=None if index == layer else index,
                sink=isinstance(getattr(module, "sinks", None), torch.Tensor)))
        for stack in depth:
            counts = sorted({s.heads for sites in per_module.values() for s in sites if s.stack == stack})
            if len(counts) > 1:
                raise NoAttentionWeightsError(
                    f"Model '{loaded.name}' ({model.config.model_type}) has {stack} layers with different numbers of "
                    f"query heads ({', '.join(map(str, counts))}); Dikkat shows a stack as layers x heads maps of one "
                    "size and cannot show this architecture's attention yet.",
                    code="uneven_head_counts", model=loaded.name, model_type=model.config.model_type, stack=stack,
                    counts=", ".join(map(str, counts))
                )
        loaded.site_index = {mid: sites[0] if len(sites) == 1 else tuple(sites) for mid, sites in per_module.items()}
        sites = [s for sites in per_module.values() for s in sites]
        if loaded.family == "encoder-decoder" and "encoder" not in depth:
            sites += _encoder_from_outputs(loaded, inputs)
        loaded.sites = sorted(sites, key=lambda s: (("encoder", "decoder", "cross").index(s.stack), s.layer))
        return

    # Fallback path: eager + output_attentions.
    loaded.capture_path = "fallback"
    try:
        model.set_attn_implementation("eager")
    except Exception:  # older/odd classes: the config flag is what eager code paths read
        model.config._attn_implementation = "eager"
    with torch.no_grad():
        outputs = model(**inputs, output_attentions=True)
    stacks = _attention_tuples(outputs, loaded.family, model.config)
    if not stacks:
        raise NoAttentionWeightsError(
            f"Model '{loaded.name}' ({model.config.model_type}) returns no attention weights: its architecture "
            "either has no softmax attention (e.g. state-space models) or cannot expose it.",
            code="no_attention_weights", model=loaded.name, model_type=model.config.model_type
        )
    stacks, read_at = _scores_to_weights(loaded, stacks, inputs)
    _check_maps(loaded, stacks, inputs)
    out_projs = _find_out_projs(model, stacks, inputs)
    # a stack with a layer whose output projection was not proven: its heads are switched off at the softmax
    # where one module per layer computes that layer's weights (models.fallback_masks)
    unproven = {stack for stack, tensors in stacks.items() if any((stack, i) not in out_projs for i in range(len(tensors)))}
    at_softmax = fallback_masks.softmax_modules(loaded, inputs, unproven, scores=set(read_at)) if unproven else {}
    sites = []
    for stack, tensors in stacks.items():
        for layer, w in enumerate(tensors):
            sites.append(capture.Site(stack, layer, int(w.shape[1]), name=f"{stack}.{layer}",
                                      out_proj=out_projs.get((stack, layer)),
                                      softmax_gate=(stack, layer) not in out_projs and stack in at_softmax,
                                      read_at_softmax=stack in read_at))
    loaded.sites = sites
    capture.install_fallback_hooks(model, sites)
    for site in sites:
        if site.softmax_gate or site.read_at_softmax:
            modules = read_at if site.read_at_softmax else at_softmax
            fallback_masks.install_softmax_hooks(site, modules[site.stack][site.layer])


def _scores_to_weights(loaded: LoadedModel, stacks: dict[str, tuple], inputs: dict) -> tuple[dict, dict]:
    """Some models return the attention scores before the softmax as their ``attentions`` (ProphetNet's
    encoder, SqueezeBERT: rows that do not sum to 1). Where one module per layer computes exactly the softmax
    of those scores (:func:`models.fallback_masks.softmax_modules`), the weights are that softmax, read there
    in every analysis.

    Returns:
        ``stacks`` with such stacks' tensors replaced by their softmax, and ``stack -> [module per layer]`` of
        the stacks read at the softmax.
    """
    def sums_to_one(t) -> bool:
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            return True  # not scores either: _check_maps says why
        sums = t.float().sum(-1)
        return bool(torch.isfinite(sums).all() and ((sums - 1).abs().lt(1e-3) | sums.abs().lt(1e-6)).all())

    suspects = {stack for stack, tensors in stacks.items() if not all(sums_to_one(t) for t in tensors)}
    read_at = fallback_masks.softmax_modules(loaded, inputs, suspects, scores=suspects) if suspects else {}
    out = {stack: tuple(torch.softmax(t.float(), -1).to(t.dtype) for t in tensors) if stack in read_at else tensors
           for stack, tensors in stacks.items()}
    return out, read_at


def _encoder_from_outputs(loaded: LoadedModel, inputs: dict) -> list[capture.Site]:
    """An encoder-decoder whose decoder routes through the interface but whose encoder does not (LongT5,
    BigBird-Pegasus, Pegasus-X): the encoder's sites when its eager ``output_attentions`` are token-by-token
    maps (:func:`_check_maps`), read in the same forward pass (``fallback_stacks``); else none, with the
    reason in ``missing_stacks``."""
    with torch.no_grad():
        outputs = loaded.model(**inputs, output_attentions=True)
    tensors = _attention_tuples(outputs, loaded.family, loaded.model.config).get("encoder")
    why = None
    if not tensors:
        why = f"Model '{loaded.name}' ({loaded.model.config.model_type}) returns no encoder attention weights."
    else:
        try:
            _check_maps(loaded, {"encoder": tensors}, inputs)
        except NoAttentionWeightsError as exc:
            why = str(exc)
    if why:
        loaded.missing_stacks["encoder"] = (
            f"{why} Its encoder does not route through transformers' AttentionInterface either, so the encoder "
            "is not shown; the decoder and cross-attention are.")
        return []
    loaded.fallback_stacks = ("encoder",)
    out_projs = _find_out_projs(loaded.model, {"encoder": tensors}, inputs)  # proven, or none
    sites = [capture.Site("encoder", layer, int(w.shape[1]), name=f"encoder.{layer}",
                          out_proj=out_projs.get(("encoder", layer)))
             for layer, w in enumerate(tensors)]
    capture.install_fallback_hooks(loaded.model, sites)
    return sites


def _check_maps(loaded: LoadedModel, stacks: dict[str, tuple], inputs: dict) -> None:
    """Refuse what a fallback-path model returns as attention unless every tensor is a ``(batch, heads,
    queries, keys)`` probability map over the probe's own tokens: finite, each row summing to 1 (or 0 for a
    query with no allowed key). Local-window tensors (Longformer), pooled queries (Funnel), recurrent states
    (RWKV) and n-gram streams (ProphetNet) fail here instead of being shown as attention.

    Raises:
        NoAttentionWeightsError: naming the first tensor that is not such a map, and why.
    """
    n_in = next((int(v.shape[-1]) for k, v in inputs.items() if k == "input_ids"), None)
    n_dec = int(inputs["decoder_input_ids"].shape[-1]) if "decoder_input_ids" in inputs else None
    lengths = {"encoder": (n_in, n_in), "decoder": (n_dec, n_dec) if n_dec else (n_in, n_in), "cross": (n_dec, None)}
    for stack, tensors in stacks.items():
        for layer, w in enumerate(tensors):
            why = None
            q_len, k_len = lengths[stack]
            if not isinstance(w, torch.Tensor) or w.dim() != 4:
                why = f"a {getattr(w, 'shape', type(w).__name__)} value, not (batch, heads, queries, keys)"
            elif (q_len and w.shape[-2] != q_len) or (k_len and w.shape[-1] != k_len):
                why = f"shape {tuple(w.shape)} for {q_len} queries and {k_len or '?'} keys"
            else:
                sums = w.float().sum(-1)
                if not torch.isfinite(sums).all() or not ((sums - 1).abs().lt(1e-3) | sums.abs().lt(1e-6)).all():
                    why = f"rows summing to {float(sums.min()):.3g} .. {float(sums.max()):.3g}, not 1"
            if why:
                raise NoAttentionWeightsError(
                    f"Model '{loaded.name}' ({loaded.model.config.model_type}) returns {stack} layer {layer}'s "
                    f"'attentions' as {why}: they are not attention weights over the tokens, so Dikkat cannot "
                    "show them as attention.",
                    code="not_attention_maps", model=loaded.name, model_type=loaded.model.config.model_type,
                    stack=stack, layer=layer, why=why
                )


def _linear_width(module) -> tuple[int, int] | None:
    """``(in, out)`` features of a ``nn.Linear`` or transformers' ``Conv1D`` (GPT-2 style), else None."""
    if isinstance(module, torch.nn.Linear):
        return module.in_features, module.out_features
    weight = getattr(module, "weight", None)
    if type(module).__name__ == "Conv1D" and isinstance(weight, torch.Tensor) and weight.dim() == 2:
        return int(weight.shape[0]), int(weight.shape[1])
    return None


def _find_out_projs(model, stacks: dict[str, tuple], inputs: dict) -> dict[tuple[str, int], str]:
    """Fallback path: for each layer of each stack, the output projection whose input holds the heads'
    outputs side by side, found by a probe and proven on it.

    One probe pass records the input and output of every linear map in the blocks of the model's layer lists.
    A map ``o`` is a layer's output projection when, for some linear map ``v`` of the same block (or a third
    of a fused query/key/value map), ``o``'s input equals ``A_h · V_h`` for every head ``h`` (``A_h``: the
    layer's returned weights, ``V_h``: head ``h``'s slice of ``v``'s output; Vaswani et al. 2017, eq. 1-2)
    within 1e-4. Zeroing head ``h``'s slice of that input then removes exactly that head's output. A stack is
    looked for in the layer lists as long as it (an encoder-decoder's decoder block holds both its
    self-attention and its cross-attention: each stack's own weights pick the right pair). A layer with no
    such pair (a norm between attention and projection, an interleaved fused map) gets none, and its heads
    cannot be switched off.

    Returns:
        ``(stack, layer) -> dotted name of the output projection`` for the layers where one was proven.
    """
    lists = _layer_lists(model)
    modules = dict(model.named_modules())
    seen: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def keep(name):
        def hook(_module, args, out) -> None:  # returns None: the output stays as it is
            if args and isinstance(args[0], torch.Tensor) and isinstance(out, torch.Tensor):
                seen.setdefault(name, (args[0].detach(), out.detach()))
        return hook

    prefixes = tuple(f"{name}.{i}." for name, length in lists for i in range(length))
    hooks = [module.register_forward_hook(keep(name)) for name, module in modules.items()
             if name.startswith(prefixes) and _linear_width(module)]
    try:
        with torch.no_grad():
            model(**inputs, output_attentions=True)
    except Exception:  # noqa: BLE001 - no projection found is a refusal later, never a failed load
        return {}
    finally:
        for hook in hooks:
            hook.remove()
    found: dict[tuple[str, int], str] = {}
    for stack, weights in stacks.items():
        candidates = [item for item in lists if item[1] == len(weights)] or lists[:1]
        for list_name, length in candidates:
            mine = {}
            for layer in range(min(len(weights), length)):
                block = f"{list_name}.{layer}."
                name = _out_proj_of(weights[layer][0].float(), [n for n in seen if n.startswith(block)], seen)
                if name:
                    mine[(stack, layer)] = name
            if mine:
                found.update(mine)
                break
    return found


def _out_proj_of(a: torch.Tensor, names: list[str], seen: dict) -> str | None:
    """The map among ``names`` whose input is ``A_h · V_h`` side by side for the weights ``a`` (heads, q, k),
    with ``V`` a slice of another map's output (see :func:`_find_out_projs`); None if there is none."""
    heads, q_len, k_len = a.shape
    for o_name in names:
        # the first q_len rows: Longformer pads the text to a multiple of its window inside the model
        x = _batch_first(seen[o_name][0])
        width = x.shape[-1]
        if x.dim() != 3 or x.shape[1] < q_len or width % heads:
            continue
        x = x[:, :q_len]
        d = width // heads
        for v_name in names:
            v_out = _batch_first(seen[v_name][1])
            if v_out.dim() != 3 or v_out.shape[1] < k_len or v_out.shape[-1] % d:
                continue
            v_out = v_out[:, :k_len]
            for v in _value_layouts(v_out[0].float(), heads, d):
                want = torch.einsum("hqk,khd->qhd", a, v).reshape(q_len, width)
                if torch.allclose(want, x[0].float(), atol=1e-4, rtol=1e-3):
                    return o_name
    return None


def _batch_first(t: torch.Tensor) -> torch.Tensor:
    """A probe tensor (batch 1) as ``(1, tokens, width)``: Longformer runs its projections on ``(tokens, 1,
    width)``."""
    return t.transpose(0, 1) if t.dim() == 3 and t.shape[0] != 1 and t.shape[1] == 1 else t


def _value_layouts(out: torch.Tensor, heads: int, d: int):
    """Candidate per-head values ``(keys, heads, d)`` inside a linear map's output ``(keys, width)``: a
    contiguous block of ``heads · d`` columns (separate value map, or a third of a fused query/key/value map),
    head-interleaved ``(heads, parts, d)`` groups (BLOOM, DeBERTa), or one ``d``-wide block shared by every
    head (multi-query attention: Falcon)."""
    keys, width = out.shape
    full = heads * d
    if width % full == 0:
        for j in range(width // full):
            yield out[:, j * full:(j + 1) * full].reshape(keys, heads, d)
        parts = width // full
        if parts > 1:
            grouped = out.reshape(keys, heads, parts, d)
            for j in range(parts):
                yield grouped[:, :, j]
    for j in range(width // d):
        yield out[:, j * d:(j + 1) * d][:, None, :].expand(keys, heads, d)


def _layer_lists(model) -> list[tuple[str, int]]:
    """``(dotted name, length)`` of each ModuleList of transformer layers, in the model's order (XLM and
    Flaubert keep each layer's attention in a list of its own, ``attentions``, beside ``ffns``)."""
    return [(name, len(module)) for name, module in model.named_modules()
            if isinstance(module, torch.nn.ModuleList) and len(module)
            and re.search(r"(^|\.)(h|layers?|blocks?|attentions)$", name)]


def _attention_tuples(outputs, family: str, config=None) -> dict[str, tuple]:
    """``stack -> per-layer (batch, heads, queries, keys) tensors`` of a model's eager ``output_attentions``.

    With the model's ``config``, local-window maps (Longformer, LED's encoder: ``config.attention_window``) are
    turned into full ``(queries, keys)`` maps (:func:`local_to_full`)."""
    stacks = {}
    if family == "encoder-decoder":
        for stack, attr in (("encoder", "encoder_attentions"), ("decoder", "decoder_attentions"), ("cross", "cross_attentions")):
            value = getattr(outputs, attr, None)
            if value:
                stacks[stack] = value
    else:
        value = getattr(outputs, "attentions", None)
        if value and all(v is not None for v in value):
            stacks["decoder" if family == "decoder" else "encoder"] = value
    window = getattr(config, "attention_window", None) if config is not None else None
    if window is not None and "encoder" in stacks:
        windows = list(window) if isinstance(window, (list, tuple)) else [window] * len(stacks["encoder"])
        stacks["encoder"] = tuple(local_to_full(t, int(w)) if t is not None and t.shape[-1] == int(w) + 1 else t
                                  for t, w in zip(stacks["encoder"], windows))
    return stacks


def local_to_full(local: torch.Tensor, window: int) -> torch.Tensor:
    """Longformer's local attention ``(batch, heads, n, window + 1)`` as full maps ``(batch, heads, n, n)``.

    Column ``c`` of query ``i`` holds the weight on key ``j = i + c - window / 2`` (Beltagy et al. 2020, §3.1;
    transformers' ``LongformerBaseModelOutput.attentions``: "the attention weight of a token to itself is
    located at index ``attention_window / 2``"); keys outside the text (the model's own padding to a multiple
    of the window) are dropped, and every other key gets 0. Only maps without global tokens (none are set by
    Dikkat) have exactly ``window + 1`` columns.

    Args:
        local: float ``(batch, heads, n, window + 1)``. window: the layer's ``attention_window`` (even).

    Returns:
        float ``(batch, heads, n, n)``, same dtype and device.
    """
    n, half = local.shape[-2], window // 2
    i = torch.arange(n, device=local.device)[:, None]
    j = torch.arange(n, device=local.device)[None, :]
    column = j - i + half
    inside = (column >= 0) & (column <= window)
    index = column.clamp(0, window).expand(*local.shape[:-2], n, n)
    return torch.where(inside, local.gather(-1, index), torch.zeros((), dtype=local.dtype, device=local.device))


_LOCK = threading.Lock()  # guards _LOADING (and clear_cache); held only for a lookup, never while loading
_LOADING: dict[tuple, threading.Lock] = {}  # one lock per model being loaded
# Loaded models, least recently used dropped first when their measured parameters, buffers and tokenizer
# pass DIKKAT_MODEL_CACHE_GIB (default 6 GiB); a dropped model is loaded again when next asked for.
_LOADED = budget.ByteLRU(budget.budget_from_env("DIKKAT_MODEL_CACHE_GIB", 6))


def _resolve(name: str) -> tuple[ModelSpec, Path | None, str | None]:
    """(spec, local folder or None, hub id or None) for a catalog key, folder or hub id."""
    if name in CATALOG:
        spec = get_spec(name)
        spec.check_installed()
        if spec.locate:
            return spec, spec.folder(), None
        return spec, cache.cached_folder(spec.key, spec.build_version, spec.build), None
    path = _existing_path(name)
    if path is not None:
        if not path.is_dir():
            if path.suffix == ".gguf":
                from .builders import convert_gguf

                folder = cache.cached_folder(
                    "gguf-" + re.sub(r"[^\w.-]", "_", str(path.resolve())), str(path.stat().st_mtime_ns),
                    lambda out: convert_gguf(path, out),
                )
                return _adhoc_spec(name, "folder"), folder, None
            raise NoUsableModelError(f"{_quoted(name)} is a file; give a model folder (config.json + safetensors) or a .gguf file.",
                                     code="model_path_is_file", name=_quoted(name))
        ggufs = sorted(path.glob("*.gguf"))
        if not (path / "config.json").exists() and len(ggufs) == 1:
            return _resolve(str(ggufs[0]))
        _check_folder(path)
        return _adhoc_spec(name, "folder"), path, None
    if name.startswith(("/", "./", "../", "~")) or name.endswith((".gguf", ".safetensors")):
        raise UnknownModelError(f"Folder or file {_quoted(name)} does not exist on this machine.",
                                code="model_path_missing", name=_quoted(name))
    if is_hub_id(name):  # owner/name, at most the hub's 96 characters
        return _adhoc_spec(name, "hub"), None, name
    raise UnknownModelError(
        f"Unknown model {_quoted(name)}: not a catalog key ({', '.join(CATALOG)}), not an existing folder, "
        "and not a Hugging Face id of the form owner/name.",
        code="unknown_model", name=_quoted(name), catalog=", ".join(CATALOG)
    )


def _existing_path(name: str) -> Path | None:
    """The file or folder ``name`` names on this machine, or None when there is none, including names no
    path can have: ``~user`` of an unknown user (RuntimeError), a component over the file system's 255
    bytes (OSError ENAMETOOLONG), a NUL character (ValueError)."""
    try:
        path = Path(name).expanduser()
        return path if path.exists() else None
    except (OSError, RuntimeError, ValueError):
        return None


def is_hub_id(name: str) -> bool:
    """Whether :func:`load` would fetch ``name`` from the Hugging Face hub: not a catalog key, not an existing
    file or folder, and of the form ``owner/name``. Never raises."""
    return (isinstance(name, str) and name not in CATALOG and _existing_path(name) is None
            and bool(_HUB_ID.match(name)) and len(name) <= 96)


def _quoted(name: str, limit: int = 80) -> str:
    """``'name'`` for a message, cut to ``limit`` characters."""
    return repr(name if len(name) <= limit else name[:limit - 1] + "…")


def _adhoc_spec(name: str, source: str) -> ModelSpec:
    return ModelSpec(key=name, title=name, family="", source=source)


HUB_ENDPOINT: str | None = None  # None: huggingface_hub's (HF_ENDPOINT); tests point it at a local server


def hub_timeout() -> float:
    """Seconds a hub request may wait to connect or for the next bytes (``DIKKAT_HUB_TIMEOUT_S``, default 20)."""
    try:
        return max(0.1, float(os.environ.get("DIKKAT_HUB_TIMEOUT_S", "20")))
    except ValueError:
        return 20.0


def _hub_timeouts() -> None:
    """Give huggingface_hub's shared HTTP client connect/read/write timeouts (:func:`hub_timeout`): its
    default client has none, so a server that accepts the connection and never answers stalls a download
    forever. A client factory the caller set is left alone."""
    import huggingface_hub.constants as hub_constants
    from huggingface_hub.utils import _http

    hub_constants.HF_HUB_DOWNLOAD_TIMEOUT = hub_timeout()
    factory = _http._GLOBAL_CLIENT_FACTORY
    if factory is _http.default_client_factory or (factory is _timed_client and _timed_client.seconds != hub_timeout()):
        _timed_client.seconds = hub_timeout()
        _http.set_client_factory(_timed_client)


def _timed_client():
    """huggingface_hub's default HTTP client with :func:`hub_timeout` on every phase of every request. Set
    per request (a request hook): huggingface_hub passes ``timeout=None`` (no limit) to some calls, which
    overrides a client-wide default."""
    from huggingface_hub.utils import _http

    client = _http.default_client_factory()
    limits = {phase: _timed_client.seconds for phase in ("connect", "read", "write", "pool")}

    def limit(request):
        request.extensions["timeout"] = dict(limits)

    client.event_hooks = {**client.event_hooks, "request": [*client.event_hooks.get("request", []), limit]}
    return client


def _download(hub_id: str) -> Path:
    """Fetch a hub repository's config, tokenizer and safetensors files (never pickle weights)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError

    patterns = ["*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken", "*.jinja", "*.py.none"]
    _hub_timeouts()
    cap = budget.budget_from_env("DIKKAT_HUB_MAX_GIB", 8)
    try:
        planned = snapshot_download(hub_id, allow_patterns=patterns, dry_run=True, endpoint=HUB_ENDPOINT,
                                    etag_timeout=hub_timeout())
        size = sum(f.file_size or 0 for f in planned if f.will_download)
        if size > cap:
            raise HubDownloadTooLargeError(
                f"Hugging Face model '{hub_id}' would download {size / 2 ** 30:.1f} GiB, more than this "
                f"machine allows ({cap / 2 ** 30:.1f} GiB, DIKKAT_HUB_MAX_GIB).",
                code="hub_too_large", model=hub_id, size=round(size / 2 ** 30, 1), cap=round(cap / 2 ** 30, 1))
        folder = Path(snapshot_download(hub_id, allow_patterns=patterns, endpoint=HUB_ENDPOINT,
                                        etag_timeout=hub_timeout()))
    except HubDownloadTooLargeError:
        raise
    except RepositoryNotFoundError as exc:
        raise HubUnreachableError(f"Hugging Face model '{hub_id}' does not exist (or is private).",
                                  code="hub_missing", model=hub_id) from exc
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError) as exc:
        raise HubUnreachableError(
            f"Cannot reach the Hugging Face hub for '{hub_id}' (offline, or no answer within "
            f"{hub_timeout():g} s) and it is not in the local hub cache. Connect to the internet once, or give "
            "a local folder.",
            code="hub_unreachable", model=hub_id, seconds=hub_timeout()
        ) from exc
    except Exception as exc:  # connection errors from httpx/requests
        raise HubUnreachableError(f"Cannot download '{hub_id}' from the Hugging Face hub: {exc}",
                                  code="hub_download_failed", model=hub_id, detail=str(exc)) from exc
    _check_folder(folder)
    return folder


def load(name: str, device: str = "auto", dtype: str | torch.dtype = "auto", *, device_map: str | dict | None = None,
         max_memory: dict | None = None, offload_folder: str | os.PathLike | None = None) -> LoadedModel:
    """Load a model for attention capture; cached per process and shared between threads.

    Args:
        name: a catalog key (``minilm-l6``), a local folder (transformers files with safetensors, or a
            single ``.gguf``), a ``.gguf`` file, or a Hugging Face id (``owner/name``; the only case that
            touches the network).
        device: ``"auto"`` (cuda, then mps, then cpu) or a torch device string.
        dtype: ``"auto"`` (bfloat16 on a CUDA GPU that supports it, else float16 on GPU/mps; float32 on
            CPU) or a torch dtype (or its name, e.g. ``"float32"``).
        device_map: place a model too large for one device across GPUs, CPU and disk with accelerate's
            big-model placement (``"auto"``, ``"balanced"``, ``"sequential"`` or a dict ``module name ->
            device | "cpu" | "disk"``); ``device`` is then where the inputs go (the first module's
            device). Every feature works on a placed model: capture, heads off, masks; weights offloaded to
            disk are read back for each forward pass (slow, but exact). None: the whole model on ``device``.
        max_memory: with ``device_map``: the most each device may hold, e.g. ``{0: "20GiB", "cpu": "60GiB"}``.
        offload_folder: with ``device_map``: where weights placed on ``"disk"`` are written (default: a
            folder under Dikkat's cache).

    Returns:
        :class:`LoadedModel`. Weights are never loaded from pickle files and ``trust_remote_code`` is
        never set. Loaded models are cached per process, bounded by bytes (``DIKKAT_MODEL_CACHE_GIB``,
        default 6 GiB; least recently used dropped first, see :mod:`models.budget`).

    Raises:
        UnknownModelError: not a key, folder or hub id.
        ModelNotInstalledError: catalog model whose package is missing (message has the install command).
        HubUnreachableError: hub id while offline or not found.
        NoUsableModelError: folder without config/safetensors, corrupt files, unsupported architecture.
        NoAttentionWeightsError: the architecture exposes no attention weights.
        ModelOutOfMemoryError: out of memory while loading.
        InvalidArgumentError: a ``device`` string torch does not understand, or an unknown ``dtype`` name.
    """
    import time

    if isinstance(name, os.PathLike):
        name = os.fspath(name)
    if not isinstance(name, str) or not name.strip():
        raise UnknownModelError(
            f"A model name must be a catalog key, a folder or a Hugging Face id, got {name!r}. "
            f"Catalog keys: {', '.join(CATALOG)}."
        )
    capture.register()
    dev = _pick_device(device)
    dt = _pick_dtype(dtype, dev)
    if device_map is not None and not isinstance(device_map, (str, dict)):
        raise InvalidArgumentError(f"device_map must be 'auto', 'balanced', 'sequential' or a dict, got {device_map!r}.")
    placement = None
    if device_map is not None:
        placement = {"device_map": dict(device_map) if isinstance(device_map, dict) else device_map,
                     "max_memory": dict(max_memory) if max_memory else max_memory,
                     "offload_folder": str(offload_folder or cache.cache_root() / "offload" / re.sub(r"\W", "_", name))}
    key = (name, str(dev), str(dt), repr(sorted(placement.items(), key=str)) if placement else None)
    with _LOCK:
        cached = _LOADED.get(key)
        if cached is not None:
            return cached
        key_lock = _LOADING.setdefault(key, threading.Lock())
    with key_lock:  # one load per model at a time; other models load and serve meanwhile
        cached = _LOADED.get(key)
        if cached is not None:
            return cached
        start = time.perf_counter()
        spec, folder, hub_id = _resolve(name)
        if hub_id is not None:
            folder = _download(hub_id)
        try:
            loaded = _load_folder(name, spec, folder, dev, dt, placement)
        except (DikkatError, MemoryError):
            raise
        except Exception as exc:
            if spec.source == "package" and spec.builder:
                # A corrupt cached conversion: rebuild once.
                cache.invalidate(spec.key)
                folder = cache.cached_folder(spec.key, spec.build_version, spec.build)
                loaded = _load_folder(name, spec, folder, dev, dt, placement)
            else:
                raise NoUsableModelError(f"Cannot load '{name}' from {folder}: {exc}",
                                         code="load_failed", model=name, folder=str(folder), detail=str(exc)) from exc
        loaded.load_seconds = time.perf_counter() - start
        loaded.load_args = {"name": name, "device": device, "dtype": dtype, "device_map": device_map,
                            "max_memory": max_memory, "offload_folder": offload_folder}
        _LOADED.put(key, loaded)
        return loaded


def _load_folder(name: str, spec: ModelSpec, folder: Path, dev: torch.device, dt: torch.dtype,
                 placement: dict | None = None) -> LoadedModel:
    from transformers import AutoConfig, AutoTokenizer

    try:
        config = AutoConfig.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False)
    except (ValueError, KeyError, OSError) as exc:
        raise NoUsableModelError(f"Cannot read the configuration of '{name}' in {folder}: {exc}",
                                 code="config_unreadable", model=name, folder=str(folder), detail=str(exc)) from exc
    family, head = _family_and_head(config)
    auto = _named_class(config, _auto_class(family, head, config))
    kwargs = dict(local_files_only=True, trust_remote_code=False, use_safetensors=True, dtype=dt)
    if placement:
        kwargs.update({k: v for k, v in placement.items() if v is not None})
    try:
        try:
            model = auto.from_pretrained(str(folder), attn_implementation=capture.ATTN_IMPLEMENTATION, **kwargs)
        except (ValueError, KeyError) as exc:
            # Families with their own table of attention classes (GPT-Neo ...) reject custom names:
            # they take the fallback path (eager + output_attentions).
            if capture.ATTN_IMPLEMENTATION not in str(exc) and "attn_implementation" not in str(exc):
                raise
            model = auto.from_pretrained(str(folder), attn_implementation="eager", **kwargs)
    except torch.OutOfMemoryError as exc:
        raise ModelOutOfMemoryError(f"Out of memory loading '{name}' on {dev}: {exc}",
                                    code="oom_loading", model=name, device=str(dev)) from exc
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise NoUsableModelError(f"Cannot load the weights of '{name}' from {folder}: {exc}",
                                 code="weights_unreadable", model=name, folder=str(folder), detail=str(exc)) from exc
    if placement:
        dev = _input_device(model, dev)
    else:
        try:
            model.to(dev)
        except torch.OutOfMemoryError as exc:
            raise ModelOutOfMemoryError(f"Out of memory moving '{name}' to {dev}: {exc}",
                                        code="oom_loading", model=name, device=str(dev)) from exc
    model.eval()
    processor = None
    if config.model_type == "whisper" and family == "encoder-decoder":
        from transformers import AutoProcessor

        processor = AutoProcessor.from_pretrained(str(folder), local_files_only=True)
        tokenizer = processor.tokenizer
    else:
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False)
        except Exception as exc:
            raise NoUsableModelError(f"Cannot load the tokenizer of '{name}' from {folder}: {exc}",
                                     code="tokenizer_unreadable", model=name, folder=str(folder),
                                     detail=str(exc)) from exc
        # Without tokenizer files, transformers builds an empty tokenizer of the config's class (only
        # [PAD]/[UNK]/... ): every word would silently become [UNK].
        special = set(tokenizer.all_special_ids)
        if not any(i not in special for i in tokenizer.get_vocab().values()):
            raise NoUsableModelError(
                f"Folder {folder} has no tokenizer files (tokenizer.json, vocab.txt, tokenizer.model ...): its "
                "tokenizer knows only special tokens, so every word would be read as unknown. Save the tokenizer "
                "next to the weights (tokenizer.save_pretrained(folder)).",
                code="folder_no_tokenizer", folder=str(folder)
            )
    if spec.source != "package":
        spec = ModelSpec(key=name, title=name, family=family, source=spec.source,
                         layers=0, heads=0, licence="see the model card")
    loaded = LoadedModel(
        name=name, spec=spec, model=model, tokenizer=tokenizer, device=dev, dtype=dt, family=family,
        head=head, capture_path="interface", sites=[], folder=folder, processor=processor,
    )
    _discover_sites(loaded)
    loaded.call_kwargs = _decoder_call(loaded)
    return loaded


def _decoder_call(loaded: LoadedModel) -> dict:
    """An encoder-decoder's decoder must be causal: with the whole target as input (teacher forcing), a
    position's output may not depend on later target tokens. Probed by changing the last decoder token and
    comparing the outputs before it; a model whose decoder is causal only without a key/value cache (FSMT
    makes its causal mask only then) is run with ``use_cache=False``, the way it trains.

    Returns:
        ``{}``, or ``{"use_cache": False}``.

    Raises:
        NoAttentionWeightsError: the decoder is not causal either way (its maps would let a token see the
            tokens it is to predict).
    """
    if loaded.family != "encoder-decoder":
        return {}
    inputs = _probe_inputs(loaded)
    start = inputs["decoder_input_ids"][0, 0]
    vocab = int(getattr(loaded.model.get_output_embeddings(), "out_features", 0) or 0) or 8
    a = torch.stack([start, torch.tensor((int(start) + 1) % vocab), torch.tensor((int(start) + 2) % vocab)])[None]
    b = a.clone()
    b[0, -1] = (int(start) + 3) % vocab
    for extra in ({}, {"use_cache": False}):
        if extra and not accepts(loaded.model, "use_cache"):
            break
        outs = []
        with torch.no_grad():
            for ids in (a, b):
                out = loaded.model(**dict(inputs, decoder_input_ids=ids.to(loaded.device)), return_dict=True, **extra)
                outs.append(out.logits if getattr(out, "logits", None) is not None else out.last_hidden_state)
        if torch.allclose(outs[0][:, :-1], outs[1][:, :-1], atol=1e-6, rtol=1e-5):
            return extra
    raise NoAttentionWeightsError(
        f"Model '{loaded.name}' ({loaded.model.config.model_type}): its decoder is not causal (a target token's "
        "output depends on later target tokens), so its maps would show tokens attending the tokens they are "
        "to predict.",
        code="decoder_not_causal", model=loaded.name, model_type=loaded.model.config.model_type)


def _input_device(model, default: torch.device) -> torch.device:
    """Where a model placed by accelerate reads its inputs: the first module's device in its
    ``hf_device_map`` that is not ``"disk"`` (an offloaded first module runs on ``default``)."""
    for where in (getattr(model, "hf_device_map", None) or {}).values():
        if where not in ("disk", "meta"):
            return torch.device(f"cuda:{where}" if isinstance(where, int) else where)
    return default


def clear_cache() -> None:
    """Forget every loaded model of this process (tests, memory pressure)."""
    with _LOCK:
        _LOADED.clear()


os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
