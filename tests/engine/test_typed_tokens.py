"""Classroom polish (issue 13), engine and figure side: typed special tokens, control characters."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pytest

import models
from viz.head_view import head_view_svg


def test_typed_control_tokens_are_special_and_keep_their_span(minilm, smollm2):
    """The tokenizer turns a typed "[SEP]", "<s>" or "<|endoftext|>" into the real control token; the app
    showed it as a word and "Hide special tokens" kept it. It is special now, its characters kept."""
    text = "the cat [SEP] sat on the [MASK] mat"
    a = models.analyze(minilm, text)
    typed = [x for x in a.tokens if x.typed]
    assert [(x.piece, text[x.start:x.end]) for x in typed] == [("[SEP]", "[SEP]")]
    assert all(x.special for x in typed)
    mask = next(x for x in a.tokens if x.piece == "[MASK]")
    assert not mask.special  # a typed [MASK] is a word for the model to fill, not a control token
    assert [x.typed for x in a.tokens if x.special] == [False, True, False]  # [CLS], typed [SEP], final [SEP]

    a = models.analyze(smollm2, "a<|endoftext|>b")
    assert [(x.label, x.special) for x in a.tokens] == [("a", False), ("<|endoftext|>", True), ("b", False)]

    a = models.analyze(models.load("multilingual-e5-small", device="cpu"), "Kedi <s> fare")
    typed = [x for x in a.tokens if x.typed]
    assert [x.piece for x in typed] == ["<s>"] and a.tokens[0].special and not a.tokens[0].typed


def test_unknown_characters_are_not_typed_control_tokens(minilm):
    """[UNK] standing for characters the vocabulary lacks is a word of the text, not a typed control token."""
    a = models.analyze(minilm, "the 𓀀 sign")
    unk = [x for x in a.tokens if x.id == minilm.tokenizer.unk_token_id]
    assert unk and not any(x.special for x in unk)


@pytest.mark.parametrize("text", ["\x00", "\x00\x01\x02", " \x00 "])
def test_a_text_of_control_characters_is_an_empty_text_error(minilm, text):
    """A text of only NUL gave an analysis of [CLS] [SEP] with no message."""
    with pytest.raises(models.EmptyTextError):
        models.analyze(minilm, text)
    with pytest.raises(models.EmptyTextError, match="text_pair"):
        models.analyze(minilm, "the cat", text_pair=text)


def test_head_view_svg_is_valid_xml_with_a_nul_in_a_label():
    w = np.full((1, 2, 2), 0.5, dtype=np.float32)
    svg = head_view_svg(w, ["a\x00b", "<c>"], ["\x01", "d&e"], head_names=["0"], title="t\x00", notes=["n\x0b"])
    root = ET.fromstring(svg)  # raised "not well-formed (invalid token)" before
    texts = [el.text for el in root.iter("{http://www.w3.org/2000/svg}text")]
    assert "a\ufffdb" in texts and "<c>" in texts and "d&e" in texts


# ---------------------------------------------------------------- the pages
