"""Which family a model is (encoder, decoder, encoder-decoder), which head predicts, and which transformers
class loads it: from the config alone, before any weight is read."""

from __future__ import annotations

import re


def family_and_head(config) -> tuple[str, str]:
    """``(family, head)`` of a model's config: ``encoder`` / ``decoder`` / ``encoder-decoder`` (how its maps are
    labelled and masked) and ``mlm`` / ``lm`` / ``seq2seq`` / ``none`` (which head predicts), from the config's
    flags, transformers' auto mappings and the class its ``architectures`` names."""
    archs = " ".join(config.architectures or [])
    if getattr(config, "is_encoder_decoder", False) and not re.search(r"ForCausalLM", archs):
        return "encoder-decoder", "seq2seq"  # (WhisperForCausalLM keeps Whisper's config: a decoder alone)
    from transformers.models.auto.modeling_auto import (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
                                                        MODEL_FOR_MASKED_LM_MAPPING_NAMES)

    causal = config.model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    if causal and config.model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES and getattr(config, "causal", None) is False:
        return "encoder", "mlm"  # XLM: one class for both objectives, and the config's `causal` says which
    if not causal and config.model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return "encoder", "mlm"  # a masked LM whose class is called ...WithLMHeadModel (Flaubert)
    if re.search(r"CausalLM|LMHeadModel", archs) or (getattr(config, "is_decoder", False)
                                                      and "ForMaskedLM" not in archs):
        return "decoder", "lm"
    if causal and config.model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES and "ForConditionalGeneration" in archs:
        return "decoder", "lm"  # a multimodal model's language model (Gemma 3 4B and up, GOT-OCR2): a causal LM
    if re.search(r"ForMaskedLM|ForPreTraining", archs):
        return "encoder", "mlm"
    if config.model_type in ("gpt2", "llama", "mistral", "qwen2", "gemma", "gemma2", "gemma3_text", "gpt_neo",
                             "gptj", "falcon", "bloom", "phi", "phi3", "olmo", "smollm3"):
        return "decoder", "lm"
    return "encoder", "none"


def named_class(config, auto):
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


def auto_class(family: str, head: str, config):
    """The transformers auto class that loads a model of this family and head."""
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
