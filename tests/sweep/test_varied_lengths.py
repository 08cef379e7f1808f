"""The architecture sweep at other lengths (issue 47 point 5): the tiny models of tests/archsweep.py run on texts
of 1, 4, 16 and 60 words (1 to 64 tokens) besides the sweep's own sentence, for the five families an independent
sweep found failing at other shapes (DeepSeek-V4, XLNet, CPM-Ant, Nyströmformer, Funnel) and a cross-section of
the families people load (GPT-2, Llama with GQA, Mistral's sliding window, Gemma 3, Qwen 2, Phi-3, BLOOM's ALiBi,
GPT-Neo's local layers, BERT, RoBERTa, T5, BART, Marian). A raw error, numbers that are not the model's own, a
head switch that does nothing, or a next-token readout that sees its target fails; a refusal with its reason
passes. Then a second shape of config (``archsweep.SHAPES["b"]``: 48 wide, 6 heads, 3 query heads per key/value
head) at two lengths, and the encoders with a sentence pair (``[CLS] A [SEP] B [SEP]``, the tokens and segment ids
checked against the tokenizer's own) in both shapes."""

from __future__ import annotations

import pytest

import archsweep

WORDS = ["kedi", "fareyi", "kovaladı", "the", "cat", "chased", "the", "mouse", "dün", "a"]
TYPES = ["deepseek_v4", "xlnet", "cpmant", "nystromformer", "funnel", "gpt2", "llama", "mistral", "gemma3", "qwen2",
         "phi3", "bloom", "gpt_neo", "bert", "roberta", "t5", "bart", "marian"]
LENGTHS = (1, 4, 16, 60)  # words; the sweep's own sentence has 8


def text_of(words: int) -> str:
    return " ".join((WORDS * 10)[:words])


@pytest.mark.parametrize("words", LENGTHS)
@pytest.mark.parametrize("model_type", TYPES)
def test_exact_or_refused_at_every_length(model_type, words, tmp_path):
    result = archsweep.check(model_type, tmp_path, text=text_of(words))
    assert result.verdict in ("pass", "partial", "refused"), result.why


ENCODERS = ["nystromformer", "funnel", "bert", "roberta"]


@pytest.mark.parametrize("words", (4, 16))
@pytest.mark.parametrize("model_type", TYPES)
def test_exact_or_refused_in_another_shape(model_type, words, tmp_path):
    result = archsweep.check(model_type, tmp_path, text=text_of(words), shape="b")
    assert result.verdict in ("pass", "partial", "refused"), result.why


@pytest.mark.parametrize("shape", ("a", "b"))
@pytest.mark.parametrize("words", (1, 12))
@pytest.mark.parametrize("model_type", ENCODERS)
def test_a_sentence_pair_is_exact_or_refused(model_type, words, shape, tmp_path):
    result = archsweep.check(model_type, tmp_path, text=text_of(words), pair=" ".join(reversed(text_of(words +
                             3).split())), shape=shape)
    assert result.verdict in ("pass", "partial", "refused"), result.why
    if result.verdict == "refused":  # the refusal names its reason; a pair itself is never the reason
        assert "pair" not in result.error, result.error
