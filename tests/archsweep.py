"""Every text model type in transformers' auto mappings, as a tiny random model, through Dikkat.

For each model type of the causal-LM, masked-LM and seq-to-seq mappings a tiny config is made from the
type's default config (:func:`tiny_config`: sizes shrunk by attribute name, sub-configs too), the model is
built with random weights, saved as safetensors with the tests' word-level tokenizer, loaded with
:func:`models.load` and checked against plain transformers (eager attention) by :func:`check`:

* ``weights``: every recorded map equals eager ``output_attentions`` of the same layer (atol 1e-5), rows
  sum to 1 (0 for a query with no allowed key; ``1 - sink_share`` in a layer with an attention sink),
  nothing is NaN;
* ``outputs``: the analysis' logits equal eager's;
* ``heads``: switching one head off changes the output, and switching it back on restores it bit for bit;
* ``mask``: a replaced (diagonal) mask gives weights that are exactly the identity (times ``1 - sink
  share`` in a layer with an attention sink).

``python tests/archsweep.py [--out docs/architectures.md] [types ...]`` writes the coverage table;
``tests/sweep/test_archsweep.py`` runs the same checks under pytest.
"""

from __future__ import annotations

import argparse
import gc
import inspect
import sys
import tempfile
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import models  # noqa: E402
from models.lessons.positions import position_kind  # noqa: E402
from tiny import VOCAB, _tokenizer  # noqa: E402

TEXT = "kedi fareyi kovaladı the cat chased the mouse"
SIZE = {  # attribute name -> tiny value
    "hidden_size": 32, "d_model": 32, "n_embd": 32, "embed_dim": 32, "dim": 32, "model_dim": 32, "emb_dim": 32,
    "num_attention_heads": 4, "n_head": 4, "n_heads": 4, "num_heads": 4, "encoder_attention_heads": 4,
    "decoder_attention_heads": 4, "num_key_value_heads": 2, "num_kv_heads": 2,
    # 8 layers: a hybrid's first attention layer comes after several others (Jamba: block 4 of 8)
    "num_hidden_layers": 8, "n_layer": 8, "n_layers": 8, "num_layers": 8, "encoder_layers": 2, "decoder_layers": 2,
    "num_decoder_layers": 2,
    "rotary_dim": 8, "kv_lora_rank": 16, "q_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8,
    "v_head_dim": 8, "n_group": 2, "topk_group": 1,
    "intermediate_size": 64, "d_ff": 64, "ffn_dim": 64, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "n_inner": 64,
    "head_dim": 8, "d_kv": 8, "attention_head_size": 8, "kv_channels": 8,
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "max_position_embeddings": 128, "n_positions": 128, "max_source_positions": 128, "max_target_positions": 128,
    "vocab_size": VOCAB, "n_shared_experts": 1,
    "mamba_n_heads": 4, "mamba_d_head": 16, "n_mamba_heads": 4, "mamba_headdim": 16, "mamba_d_state": 16,
    # per-layer input embeddings (Gemma 4), entity and hash vocabularies (LUKE, BLT), expert sizes (LongCat),
    # latents (Perceiver)
    "vocab_size_per_layer_input": VOCAB, "hidden_size_per_layer_input": 8, "entity_vocab_size": 16,
    "entity_emb_size": 16, "encoder_hash_byte_group_vocab": 64, "hidden_size_global": 32, "expert_ffn_hidden_size": 32,
    "ffn_hidden_size": 64, "zero_expert_num": 2, "d_latents": 32, "num_latents": 16,
    # experts per token and linear-attention (Mamba-like) sizes under other names
    "num_experts_per_token": 2, "moe_topk": 2, "linear_head_dim": 8, "linear_num_heads": 4, "linear_key_head_dim": 8,
    "linear_value_head_dim": 8, "linear_num_key_heads": 2, "linear_num_value_heads": 4, "num_kv_shared_layers": 2,
}
MAX_PARAMS = 20_000_000  # a tiny model has well under 1M; more means a size was not shrunk
LAYERS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers")
# sizes whose None means "not used" (no low-rank query, no expert groups), not "derive from the rest"
OPTIONAL = {"q_lora_rank", "kv_lora_rank", "n_group", "topk_group"}
# types whose defaults hold a size that SIZE cannot shrink by name
EXTRA = {
    "gpt_neo": {"attention_types": [[["global", "local"], 4]]},
    "mobilebert": {"embedding_size": 16, "intra_bottleneck_size": 16, "true_hidden_size": 16},
    "squeezebert": {"embedding_size": 32},
    "bamba": {"attn_layer_indices": [4]},
    "lfm2_moe": {"layer_types": ["conv"] * 4 + ["full_attention"] + ["conv"] * 3},
    "esm": {"pad_token_id": 0, "mask_token_id": 4},
    "mamba2": {"head_dim": 16},
    "xmod": {"default_language": "en_XX"},
    "reformer": {"axial_pos_embds_dim": [16, 16], "axial_pos_shape": [8, 16]},
    # the tests' tokenizer pads with id 0 and starts with [CLS] = 2, XLM's default pad_index: a real checkpoint's
    # pad_index is its tokenizer's pad (else the model masks the [CLS] key as padding)
    "xlm": {"pad_index": 0, "pad_token_id": 0},
    "neomme": {"head_dim": 16},  # M-RoPE rotates a multiple of 4 dims: 0.25 x 16
    "gemma4_assistant": {"hidden_size_per_layer_input": 0},
    # its default has only linear-attention layers (a checkpoint names its attention layers)
    "granitemoehybrid": {"layer_types": ["linear_attention"] * 4 + ["attention"] + ["linear_attention"] * 3},
    "cohere_compass_text": {"rope_parameters": {kind: {"rope_type": "default", "rope_theta": 10000.0}
                                                for kind in ("full_attention", "sliding_attention")}},
    "flaubert": {"pad_index": 0, "pad_token_id": 0},
}
# a type in several mappings is tried as its first: BART as a seq-to-seq model, BERT as a masked LM
MAPPINGS = ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
            "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES")


# a second shape of config (issue 47 point 5): wider, more heads, another GQA ratio (3 query heads per key/value
# head instead of 2), a wider MLP; the layer counts stay (GPT-Neo's attention_types name 8 layers)
SHAPES = {
    "a": SIZE,
    "b": {**SIZE, **{name: 48 for name in ("hidden_size", "d_model", "n_embd", "embed_dim", "dim", "model_dim",
                                          "emb_dim")},
          **{name: 6 for name in ("num_attention_heads", "n_head", "n_heads", "num_heads", "encoder_attention_heads",
                                  "decoder_attention_heads")},
          "num_key_value_heads": 2, "num_kv_heads": 2, "encoder_layers": 3, "decoder_layers": 3,
          "num_decoder_layers": 3,
          **{name: 96 for name in ("intermediate_size", "d_ff", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim",
                                   "n_inner", "ffn_hidden_size")}},
}


def model_types() -> dict[str, tuple[str, str]]:
    """``model_type -> (mapping, model class name)``, the first mapping of :data:`MAPPINGS` that has it."""
    from transformers.models.auto import modeling_auto

    out: dict[str, tuple[str, str]] = {}
    for mapping in MAPPINGS:
        for model_type, cls in getattr(modeling_auto, mapping).items():
            out.setdefault(model_type, (mapping, cls if isinstance(cls, str) else cls[0]))
    return dict(sorted(out.items()))


def _overrides(config, size: dict = SIZE) -> dict:
    """Constructor arguments that shrink ``config`` (a default config): every ``size`` attribute it
    has (:data:`SIZE`, or another of :data:`SHAPES`), and its sub-configs (``text_config`` ...) shrunk the same
    way."""
    from transformers import PretrainedConfig

    kw = {}
    for name, value in vars(config).items():
        if name in size and isinstance(value, int) and not isinstance(value, bool):
            kw[name] = size[name] if name == "vocab_size" else min(value, size[name])
        elif name in size and value is None and name not in OPTIONAL:  # derived later from a default that is not tiny
            kw[name] = size[name]
        elif (name.endswith(("layer_ids", "_idxs")) or name == "moe_layers") and isinstance(value, list) \
                and all(isinstance(i, int) for i in value):  # indices of layers (LFM2's full_attn_idxs)
            kw[name] = [i for i in value if i < size["num_hidden_layers"]]
        elif isinstance(value, list) and len(value) > size["num_hidden_layers"] and any(
                getattr(config, n, None) == len(value) for n in LAYERS):  # one entry per layer (layer_types ...)
            short = list(value[:size["num_hidden_layers"]])
            for i, kind in enumerate(k for k in dict.fromkeys(value) if k not in short):  # keep every kind of layer
                short[size["num_hidden_layers"] // 2 + i] = kind
            kw[name] = short
        elif isinstance(value, PretrainedConfig):
            try:
                kw[name] = type(value)(**_overrides(value, size)).to_dict()
            except Exception:  # noqa: BLE001 - a sub-config that does not take its own fields: leave it
                pass
    if getattr(config, "num_key_value_heads", None) == getattr(config, "num_attention_heads", 0):
        # no GQA by default: keep none
        kw["num_key_value_heads"] = kw.get("num_attention_heads", size["num_attention_heads"])
    for name in ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id", "sep_token_id",
                 "cls_token_id", "mask_token_id", "unk_token_id"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value >= VOCAB:
            kw[name] = {"pad_token_id": 0, "bos_token_id": 5, "eos_token_id": 6}.get(name, 6)
    return kw


def tiny_config(model_type: str, shape: str = "a"):
    """The config of ``model_type`` built with its sizes shrunk (:data:`SIZE`, or the ``shape`` of
    :data:`SHAPES`), so that whatever the config derives from them (layer types, head dims) is derived again."""
    from transformers import AutoConfig

    default = AutoConfig.for_model(model_type)
    config = AutoConfig.for_model(model_type, **{**_overrides(default, SHAPES[shape]), **EXTRA.get(model_type, {})})
    if model_type == "encoder-decoder":
        # as EncoderDecoderConfig.from_encoder_decoder_configs makes it: a decoder that reads the encoder (the
        # default's decoder had no cross-attention, so nothing done to the encoder could change the output)
        config.decoder.is_decoder = True
        config.decoder.add_cross_attention = True
    return config


@dataclass
class Result:
    model_type: str
    cls: str
    family: str = ""
    path: str = ""
    checks: dict = field(default_factory=dict)  # name -> True / reason
    error: str = ""

    @property
    def passed(self) -> bool:
        return not self.error and bool(self.checks) and all(v is True for v in self.checks.values())

    @property
    def verdict(self) -> str:
        """``pass``; ``partial`` (right numbers; head switch-off or mask swaps refused with a DikkatError);
        ``refused`` (a DikkatError that names the reason); ``not built`` (the tiny config does not build: not
        Dikkat's doing); ``WRONG`` (numbers that are not the model's attention, or a switch that does
        nothing); ``crash`` (an exception that is not a DikkatError)."""
        if self.family == "not built":
            return "not built"
        if self.error:
            return "refused" if self.error.startswith("refused") else "crash"
        if self.passed:
            return "pass"
        if all(v is True or str(v).startswith("refused") for v in self.checks.values()):
            return "partial"
        return "WRONG"

    @property
    def why(self) -> str:
        """The first reason this type does not pass, one line."""
        if self.error:
            return self.error
        return "; ".join(f"{k}: {v}" for k, v in self.checks.items() if v is not True)


def build(model_type: str, folder: Path, shape: str = "a") -> str:
    """Write a tiny ``model_type`` model (config of ``shape``, :data:`SHAPES`) and tokenizer to ``folder``; return
    its class name."""
    import transformers as tf

    mapping, cls_name = model_types()[model_type]
    config = tiny_config(model_type, shape)
    cls = getattr(tf, cls_name)
    wanted = getattr(cls, "config_class", None)
    if isinstance(wanted, type) and not isinstance(config, wanted):  # a text model of a composite config
        # (or a type that reuses another's class with a config of its own, e.g. EXAONE -> LlamaForCausalLM,
        # as transformers' auto classes build it)
        config = next((v for v in vars(config).values() if isinstance(v, wanted)), config)
    with torch.device("meta"):  # a size SIZE could not shrink would build a real-sized model: refuse it first
        params = sum(p.numel() for p in cls(config).parameters())
    if params > MAX_PARAMS:
        raise ValueError(f"the tiny config still has {params / 1e6:.0f}M parameters (a size the sweep cannot shrink)")
    torch.manual_seed(0)
    model = cls(config).eval()
    with torch.no_grad():  # sharpen the near-uniform random init so maps are informative
        for name, p in model.named_parameters():
            if "weight" in name and p.dim() == 2:
                if not p.any():  # a zero-initialised projection (NeoMME's o_proj) would cut the heads off the output
                    p.normal_(0.0, 0.05)
                p.mul_(2.0)
    kind = {"MODEL_FOR_CAUSAL_LM_MAPPING_NAMES": "decoder", "MODEL_FOR_MASKED_LM_MAPPING_NAMES": "encoder",
            "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES": "seq2seq"}[mapping]
    dummy = {"input_ids": torch.tensor([[40, 41, 42, 43, 6]])}
    if kind == "seq2seq":
        dummy["decoder_input_ids"] = torch.tensor([[5, 40]])
    with torch.no_grad():
        model(**dummy)  # a tiny model that plain transformers cannot run is "not built", not Dikkat's refusal
    model.save_pretrained(str(folder), safe_serialization=True)
    _tokenizer(folder, kind)
    return cls_name


def _reference_model(folder: Path, cls_name: str):
    """The tiny model as plain transformers loads it, eager: the sweep's reference (loaded once per type)."""
    import transformers as tf

    return getattr(tf, cls_name).from_pretrained(str(folder), attn_implementation="eager").eval()


def _reference_inputs(folder: Path, ref, a) -> dict:
    """The inputs of the analysis ``a`` for the reference model ``ref``: its tokens (a pair's checked against the
    tokenizer's own encoding, with its segment ids), an encoder-decoder's target, no KV cache for a decoder."""
    import transformers as tf

    inputs = {"input_ids": torch.tensor([[t.id for t in a.tokens]])}
    if a.text_pair is not None:  # the pair as the tokenizer encodes it on its own: the ids and their segments
        enc = tf.AutoTokenizer.from_pretrained(str(folder))(a.text, a.text_pair, return_tensors="pt")
        if enc["input_ids"].tolist() != inputs["input_ids"].tolist():
            raise AssertionError(f"the pair's tokens {inputs['input_ids'].tolist()} are not the tokenizer's "
                                 f"{enc['input_ids'].tolist()}")
        if "token_type_ids" in enc and "token_type_ids" in inspect.signature(ref.forward).parameters:
            inputs["token_type_ids"] = enc["token_type_ids"]
    if a.target_tokens is not None:
        inputs["decoder_input_ids"] = torch.tensor([[t.id for t in a.target_tokens]])
        # with labels, as the model trains (teacher forcing): FSMT makes its decoder's causal mask only then
        inputs["labels"] = inputs["decoder_input_ids"]
    if a.family == "decoder":
        # no KV cache, as Dikkat runs a decoder: Dory's looped layers with a cache fail in plain transformers
        # (keys of the cached loop against a mask of the new tokens only)
        inputs["use_cache"] = False
    return inputs


def _eager_reference(folder: Path, cls_name: str, a, ref=None):
    """Plain transformers' outputs (attentions included) on the analysis ``a``'s inputs; ``ref``: the reference
    model already loaded (:func:`_reference_model`)."""
    ref = ref if ref is not None else _reference_model(folder, cls_name)
    inputs = _reference_inputs(folder, ref, a)
    with torch.no_grad():
        # a first call first: BigBird rebuilds its attention modules on a short input (block_sparse ->
        # original_full), and transformers' recorder of output_attentions misses the new modules in that call
        ref(**inputs)
        out = ref(**inputs, output_attentions=True)
    return out


# where a layer's heads meet, by the names transformers' models give their attention output projections (the
# sweep's own reference, found without Dikkat's probes): the first linear map of the stack in module order (its
# first attention layer: a hybrid's state-space blocks are passed over) whose name ends so
OUT_PROJ_NAMES = ("o_proj", "out_proj", "attn.c_proj", "attention.output.dense", "self_attention.dense",
                  "attention.dense", "attn.dense", "SelfAttention.o", "out_lin", "post_proj", "attention_out",
                  "attn_out", "wo", "self_attn.o", "attn.output")
NOT_ATTENTION = ("mamba", "mixer", "ssm", "linear_attn", "mlp", "feed_forward", "ffn", "vision", "visual", "image",
                 "audio")
CROSS_NAMES = ("cross", "encoder_attn", "EncDec")


def _head_zeroed_logits(folder: Path, cls_name: str, a, stack: str, heads: int, head: int, within: str = "",
                        ref=None):
    """Plain transformers' logits with ``head`` of ``stack``'s first layer switched off by hand: its slice of the
    output projection's input zeroed (Michel et al. 2019), the whole of what the head adds; None when no
    projection of :data:`OUT_PROJ_NAMES` is found (nothing to compare with). ``within``: the block that holds the
    layer's attention module (a hybrid's first attention layer is not its first layer). ``ref``: the reference model
    already loaded (:func:`_reference_model`)."""
    ref = ref if ref is not None else _reference_model(folder, cls_name)
    part = {"encoder": "encoder", "decoder": "decoder", "cross": "decoder"}[stack] \
        if a.family == "encoder-decoder" else ""
    found = None
    for name, module in ref.named_modules():
        dotted = f".{name}."
        cross = any(k in name for k in CROSS_NAMES)
        if isinstance(module, torch.nn.Linear) and (not part or f".{part}." in dotted) and name.startswith(within) and \
                name.endswith(OUT_PROJ_NAMES) and not any(k in name for k in NOT_ATTENTION) and \
                (cross if stack == "cross" else not cross):
            found = module
            break
    if found is None:
        return None
    config = ref.config.get_text_config() if hasattr(ref.config, "get_text_config") else ref.config
    # a head's width: the config's head_dim, else the width over the config's heads (ConvBERT's projection also
    # reads its convolution heads after the attention heads)
    try:
        width = getattr(config, "head_dim", None)
    except Exception:  # noqa: BLE001  (Gemma 4: a per-layer attribute asked of the whole config)
        width = None
    if not isinstance(width, int) or width <= 0:
        hidden, declared = getattr(config, "hidden_size", None), getattr(config, "num_attention_heads", None)
        width = hidden // declared if isinstance(hidden, int) and isinstance(declared, int) and declared else 0
    if not width or found.in_features < heads * width:
        width = found.in_features // heads
    calls = []

    def zero(_module, args):
        calls.append(1)
        if len(calls) > 1:  # a projection shared by every layer (ALBERT): layer 0 is its first call
            return None
        x = args[0].clone()
        x[..., head * width:(head + 1) * width] = 0
        return (x,) + tuple(args[1:])

    inputs = _reference_inputs(folder, ref, a)
    hook = found.register_forward_pre_hook(zero)
    try:
        with torch.no_grad():
            out = ref(**inputs)
    finally:
        hook.remove()
    logits = getattr(out, "logits", None)
    return None if logits is None else logits[0].float().numpy()


def _full_from_local(local, window: int):
    """Reference for models.anatomy.maps.local_to_full, one entry at a time: query i's column c is key
    i + c - window / 2 (transformers' LongformerBaseModelOutput docs)."""
    if local is None or local.shape[-1] != window + 1:
        return local
    n = local.shape[-2]
    full = torch.zeros(*local.shape[:-1], n, dtype=local.dtype)
    for i in range(n):
        for c in range(window + 1):
            j = i + c - window // 2
            if 0 <= j < n:
                full[..., i, j] = local[..., i, c]
    return full


def declares_rope(config) -> bool:
    """Whether a config says its model rotates queries and keys (the reference for Dikkat's behavioural
    probe, :func:`models.anatomy.rotary.find_rotary`): RoPE parameters (``rope_parameters``, ``rope_theta``) or
    GPT-J's ``rotary_dim``, unless the config turns them off (ESM's ``position_embedding_type="absolute"``,
    GraniteMoeHybrid's ``None``, Zamba2's ``use_mem_rope=False``)."""
    cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    if hasattr(cfg, "position_embedding_type") and cfg.position_embedding_type not in ("rope", "rotary"):
        return False
    if getattr(cfg, "use_mem_rope", None) is False:
        return False
    return bool(getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_theta", None)
                or getattr(cfg, "rotary_dim", None))


def check(model_type: str, workdir: Path, text: str = TEXT, *, pair: str | None = None, shape: str = "a") -> Result:
    """Build, load and check one model type on ``text`` (and the second segment ``pair``, encoders) with a config
    of ``shape`` (:data:`SHAPES`; see the module docstring); messages name the type, not the temporary folder."""
    res = Result(model_type, model_types()[model_type][1])
    folder = workdir / model_type
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            build(model_type, folder, shape)
    except Exception as exc:  # noqa: BLE001 - a type that does not build is reported, not a Dikkat fault
        res.error = f"build: {type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
        res.family = "not built"
        return res
    try:
        loaded = models.load(str(folder), device="cpu")
        res.family, res.path = loaded.family, loaded.capture_path
        a = models.analyze(loaded, text, text_pair=pair, keep_logits=loaded.head != "none")
        kind = position_kind(loaded)  # found by behaviour; the config is the reference
        res.checks["positions"] = True if (kind == "rope") == declares_rope(loaded.model.config) \
            else f"position kind {kind}, config declares RoPE: {declares_rope(loaded.model.config)}"
        for stack, w in a.attentions.items():
            w = np.asarray(w)
            sums = w.sum(-1)
            no_sink = ~np.isin(np.arange(w.shape[0]), a.sinks.get(stack, []))
            # a layer with an attention sink: rows sum to 1 - the sink's share, which sink_share reports
            shares = np.stack([a.sink_share(stack, layer) for layer in range(w.shape[0])])
            ok = np.isfinite(w).all() and ((np.abs(sums + shares - 1) < 1e-4) | (np.abs(sums) < 1e-6)).all() \
                and (shares[no_sink] == 0).all()
            res.checks["rows"] = True if ok else f"{stack}: row sums {sums.min():.3g}..{sums.max():.3g}"
            if res.checks["rows"] is not True:
                break
        reference = _reference_model(folder, res.cls)
        out = _eager_reference(folder, res.cls, a, reference)
        if a.family == "encoder-decoder":
            want = {"encoder": out.encoder_attentions, "decoder": out.decoder_attentions, "cross": out.cross_attentions}
        else:
            want = {"decoder" if a.family == "decoder" else "encoder": out.attentions}
        want = {s: ts for s, ts in want.items() if ts}
        for stack in want:  # models whose 'attentions' are the scores before the softmax (SqueezeBERT)
            if any(s.read_at_softmax for s in loaded.sites if s.stack == stack):
                want[stack] = tuple(torch.softmax(t.float(), -1) for t in want[stack])
        window = getattr(loaded.model.config, "attention_window", None)
        if window is not None and "encoder" in want:  # Longformer / LED: local-window maps, written out by hand
            want["encoder"] = tuple(_full_from_local(t, w) for t, w in zip(
                want["encoder"], window if isinstance(window, (list, tuple)) else [window] * len(want["encoder"])))
        for stack in set(want) & set(a.missing_stacks):  # left out with the reason (Pegasus-X's local/global encoder)
            res.checks["stacks"] = f"refused: {a.missing_stacks[stack]}"
            del want[stack]
        if set(want) != set(a.attentions):
            res.checks["weights"] = f"stacks {sorted(a.attentions)} vs eager {sorted(want)}"
        else:
            bad = None
            for stack, ts in want.items():
                got = np.asarray(a.attentions[stack])
                ref = [t[0].float().numpy() if t is not None else None for t in ts]
                if len(ref) != got.shape[0]:  # a hybrid: eager has an entry for every block, Dikkat for attention ones
                    labels = [s.label for s in loaded.sites if s.stack == stack]
                    ref = [ref[i] if i < len(ref) else None for i in labels]
                if any(r is None for r in ref):
                    bad = f"{stack}: eager has no map for some of Dikkat's layers"
                    break
                if got.shape[0] != len(ref) or any(r.shape != got.shape[1:] for r in ref):
                    bad = f"{stack}: shape {got.shape} vs eager {len(ref)} x {ref[0].shape if ref else None}"
                    break
                err = max(float(np.abs(got[i] - r).max()) for i, r in enumerate(ref))
                if err > 1e-5:
                    bad = f"{stack}: max |Δ| {err:.2g}"
                    break
            if not bad and a.family == "encoder-decoder" and "decoder" in a.attentions:
                dec = np.asarray(a.attentions["decoder"])
                if (dec[..., np.triu(np.ones(dec.shape[-2:], dtype=bool), 1)] > 0).any():
                    bad = "decoder: a target token attends later target tokens (not causal)"
            res.checks["weights"] = bad or True
        if a.family == "decoder" and loaded.head == "lm" and "decoder" in a.attentions:
            # a next-token readout may read no later token: its decoder's maps must be causal (XLNet's were not)
            dec = np.asarray(a.attentions["decoder"])
            later = dec.shape[-1] == dec.shape[-2] and bool(
                (dec[..., np.triu(np.ones(dec.shape[-2:], dtype=bool), 1)] > 0).any())
            res.checks["readout"] = "the next-token readout sees its target (a token attends later tokens)" \
                if later else True
        if a.logits is not None and getattr(out, "logits", None) is not None:
            err = float(np.abs(a.logits - out.logits[0].float().numpy()).max())
            res.checks["outputs"] = True if err < 1e-4 else f"max |Δ logits| {err:.2g}"
        stack = next(s for s in ("encoder", "decoder", "cross") if s in a.attentions)  # the main self-attention
        try:
            off = models.analyze(loaded, text, text_pair=pair, heads_off=[(stack, 0, 1)],
                                 keep_logits=loaded.head != "none")
            back = models.analyze(loaded, text, text_pair=pair, keep_logits=loaded.head != "none")
            changed = not np.array_equal(off.logits, a.logits) if a.logits is not None else True
            same = np.array_equal(back.logits, a.logits) if a.logits is not None else True
            res.checks["heads"] = True if changed and same else ("no effect" if not changed else "not restored")
            # all of the head, not a part: the same logits as its slice of the output projection's input zeroed
            first = next(s for s in loaded.sites if (s.stack, s.layer) == (stack, 0))
            within = first.name.rsplit(".", 1)[0] + "." if loaded.capture_path == "interface" else ""
            want_off = _head_zeroed_logits(folder, res.cls, a, stack, a.attentions[stack].shape[1], 1, within,
                                           reference) \
                if off.logits is not None and res.checks["heads"] is True else None
            if want_off is not None and want_off.shape == off.logits.shape:
                err = float(np.abs(want_off - off.logits).max())
                if err > 1e-4:
                    res.checks["heads"] = f"part of the head stays on: max |Δ logits| {err:.2g} against its " \
                                          "slice of the output projection's input zeroed"
        except models.DikkatError as exc:
            res.checks["heads"] = f"refused: {str(exc)[:100]}"
        try:
            n = len(a.axis_tokens(stack)[0])
            diag = models.analyze(loaded, text, text_pair=pair,
                                  mask={stack: np.eye(n, dtype=bool)} if stack != "cross" else None)
            w = np.asarray(diag.attentions[stack])
            # a layer with a sink gives itself 1 - the sink's share
            sinks = np.stack([diag.sink_share(stack, i) for i in range(w.shape[0])])
            want = np.eye(n)[None, None] * (1 - sinks)[..., None]
            res.checks["mask"] = True if np.allclose(w, want, atol=1e-6) else "mask not applied"
        except models.DikkatError as exc:
            res.checks["mask"] = f"refused: {str(exc)[:100]}"
    except models.DikkatError as exc:
        res.error = f"refused: {type(exc).__name__}: {str(exc)[:160]}"
    except Exception as exc:  # noqa: BLE001
        tb = traceback.extract_tb(exc.__traceback__)[-1]
        res.error = f"crash: {type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''} " \
                    f"({Path(tb.filename).name}:{tb.lineno})"
    finally:
        gc.collect()
    res.error = res.error.replace(str(folder), model_type)
    res.checks = {k: v if v is True else str(v).replace(str(folder), model_type) for k, v in res.checks.items()}
    return res


def table(results: list[Result]) -> str:
    """The coverage table (markdown) of ``results``."""
    import transformers

    counts = {v: sum(r.verdict == v for r in results)
              for v in ("pass", "partial", "refused", "not built", "WRONG", "crash")}
    lines = [
        "# Architectures",
        "",
        f"Every model type of transformers {transformers.__version__}'s causal-LM, masked-LM and seq-to-seq auto "
        "mappings, built as a tiny random model and checked against plain transformers (eager attention) by "
        "`tests/archsweep.py` (run by `make test` as `tests/sweep/test_archsweep.py`). Regenerate with "
        "`.venv/bin/python tests/archsweep.py --out docs/architectures.md`.",
        "",
        "- **pass**: every recorded map equals eager `output_attentions` (atol 1e-5) and rows sum to 1; logits "
        "equal eager's; switching a head off changes the output and switching it on restores it bit for bit; "
        "a replaced mask is applied.",
        "- **partial**: the maps and outputs are right; head switch-off and/or mask swaps are refused with a "
        "message (fallback path).",
        "- **refused**: loading or analysing stops with a DikkatError that names the reason (no softmax "
        "attention, tensors that are not token-by-token maps ...).",
        "- **not built**: the tiny config made from the type's defaults does not build or does not run in "
        "plain transformers (a limit of this sweep, not of Dikkat).",
        "- **WRONG** / **crash**: known faults, listed in `tests/sweep/test_archsweep.py` (`KNOWN`) until fixed.",
        "",
        "Totals: " + ", ".join(f"{v} {n}" for v, n in counts.items()) + f" (of {len(results)}).",
        "",
        "| type | class | family | capture path | result | why not |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        why = r.why.replace("|", "/").replace("\n", " ")
        why = why.split(": ", 1)[1] if why.startswith(("refused: ", "build: ")) else why
        lines.append(f"| {r.model_type} | {r.cls} | {r.family if r.family != 'not built' else ''} | {r.path} | "
                     f"{r.verdict} | {why[:200]} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("types", nargs="*")
    parser.add_argument("--out", default=None, help="write the coverage table (markdown) here")
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    types = args.types or list(model_types())
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for t in types:
            r = check(t, Path(tmp))
            results.append(r)
            print(f"{t:28} {r.family:16} {r.path:10} {r.verdict:9} {r.why[:160]}", flush=True)
    print(f"\n{sum(r.passed for r in results)} of {len(results)} pass; "
          f"{sum(r.family == 'not built' for r in results)} do not build")
    if args.out:
        Path(args.out).write_text(table(results))


if __name__ == "__main__":
    main()
