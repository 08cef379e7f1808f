"""Tiny random models built from configs, saved to a folder and loaded through ``models.load`` (so the
real folder-loading path is exercised). Shared by the unit tests of every module."""

from __future__ import annotations

from pathlib import Path

import torch

VOCAB = 320


def _tokenizer(folder: Path, kind: str) -> None:
    """A small word-level fast tokenizer with offsets (letters, digits, punctuation)."""
    from tokenizers import Tokenizer, models as tm, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "<s>", "</s>"]
    chars = list("abcdefghijklmnopqrstuvwxyzçğıöşü0123456789.,!?'")
    vocab = {tok: i for i, tok in enumerate(specials)}
    for c in chars:
        vocab.setdefault(c, len(vocab))
    for c in chars:
        vocab.setdefault("##" + c, len(vocab))
    for w in ["kedi", "fare", "##yi", "kova", "##ladı", "the", "cat", "chased", "mouse", "dün", "a"]:
        vocab.setdefault(w, len(vocab))
    assert len(vocab) <= VOCAB
    tok = Tokenizer(tm.WordPiece(vocab=vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    if kind == "encoder":
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
        )
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                       sep_token="[SEP]", mask_token="[MASK]")
    elif kind == "seq2seq":
        tok.post_processor = processors.TemplateProcessing(
            single="$A </s>", special_tokens=[("</s>", vocab["</s>"])]
        )
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", eos_token="</s>",
                                       bos_token="<s>")
    else:
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", bos_token="<s>",
                                       eos_token="</s>")
    fast.model_max_length = 64
    fast.save_pretrained(str(folder))


def _config(arch: str):
    import transformers as tf

    common = dict(vocab_size=VOCAB)
    if arch == "bert":
        return tf.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                             max_position_embeddings=64, **common), tf.BertModel, "encoder"
    if arch == "bert-mlm":
        return tf.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                             max_position_embeddings=64, **common), tf.BertForMaskedLM, "encoder"
    if arch == "gpt2":
        return tf.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=5, eos_token_id=6,
                             **common), tf.GPT2LMHeadModel, "decoder"
    if arch == "llama":
        return tf.LlamaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                              intermediate_size=64, max_position_embeddings=64, bos_token_id=5, eos_token_id=6,
                              pad_token_id=0, **common), tf.LlamaForCausalLM, "decoder"
    if arch == "mistral":
        return tf.MistralConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                intermediate_size=64, max_position_embeddings=64, sliding_window=3, bos_token_id=5,
                                eos_token_id=6, pad_token_id=0, **common), tf.MistralForCausalLM, "decoder"
    if arch == "gemma3":  # one sliding-window layer (w=2), then one full-attention layer
        return tf.Gemma3TextConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                   head_dim=8, intermediate_size=64, max_position_embeddings=64, sliding_window=2,
                                   layer_types=["sliding_attention", "full_attention"], query_pre_attn_scalar=8,
                                   bos_token_id=5, eos_token_id=6, pad_token_id=0, **common), \
            tf.Gemma3ForCausalLM, "decoder"
    if arch == "gpt_neo":
        return tf.GPTNeoConfig(hidden_size=32, num_layers=2, num_heads=4, attention_types=[[["global", "local"], 1]],
                               window_size=4, max_position_embeddings=64, bos_token_id=5, eos_token_id=6,
                               **common), tf.GPTNeoForCausalLM, "decoder"
    if arch == "t5":
        return tf.T5Config(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
                           decoder_start_token_id=0, pad_token_id=0, eos_token_id=6, **common), \
            tf.T5ForConditionalGeneration, "seq2seq"
    if arch == "marian":
        return tf.MarianConfig(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                               decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                               max_position_embeddings=64, decoder_start_token_id=0, pad_token_id=0, eos_token_id=6,
                               forced_eos_token_id=6, **common), tf.MarianMTModel, "seq2seq"
    if arch == "bart":
        return tf.BartConfig(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                             decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                             max_position_embeddings=64, decoder_start_token_id=6, bos_token_id=5, pad_token_id=0,
                             eos_token_id=6, forced_eos_token_id=6, **common), \
            tf.BartForConditionalGeneration, "seq2seq"
    raise ValueError(arch)


ARCHS = ("bert", "bert-mlm", "gpt2", "llama", "mistral", "gemma3", "gpt_neo", "t5", "marian", "bart")


def build_tiny(arch: str, folder: Path, seed: int = 0) -> Path:
    """Write a tiny random ``arch`` model (safetensors) plus tokenizer into ``folder``; return it."""
    config, cls, kind = _config(arch)
    torch.manual_seed(seed)
    model = cls(config).eval()
    if arch in ("gpt2", "llama", "mistral", "gemma3", "gpt_neo", "bert", "bert-mlm"):
        # Random init is near-uniform; sharpen so attention maps are informative.
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "weight" in name and p.dim() == 2:
                    p.mul_(3.0)
    model.save_pretrained(str(folder), safe_serialization=True)
    _tokenizer(folder, kind)
    return folder


def build_long_llama(folder: Path, positions: int, seed: int = 0) -> Path:
    """The tiny Llama of :func:`build_tiny` with room for ``positions`` tokens (config and tokenizer), e.g. for a
    needle in a haystack (tests/engine/test_sparse.py, test_retrieval_experiment.py); returns ``folder``."""
    import json

    config, cls, kind = _config("llama")
    config.max_position_embeddings = positions
    torch.manual_seed(seed)
    cls(config).eval().save_pretrained(str(folder), safe_serialization=True)
    _tokenizer(folder, kind)
    conf = folder / "tokenizer_config.json"
    conf.write_text(json.dumps({**json.loads(conf.read_text()), "model_max_length": positions}))
    return folder
