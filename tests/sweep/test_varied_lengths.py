"""The architecture sweep at other lengths (issue 47 point 5): the tiny models of tests/archsweep.py run on texts
of 1, 4, 16 and 60 words (1 to 64 tokens) besides the sweep's own sentence, for the five families an independent
sweep found failing at other shapes (DeepSeek-V4, XLNet, CPM-Ant, Nyströmformer, Funnel) and a cross-section of
the families people load (GPT-2, Llama with GQA, Mistral's sliding window, Gemma 3, Qwen 2, Phi-3, BLOOM's ALiBi,
GPT-Neo's local layers, BERT, RoBERTa, T5, BART, Marian). A raw error, numbers that are not the model's own, a
head switch that does nothing, or a next-token readout that sees its target fails; a refusal with its reason
passes."""

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
