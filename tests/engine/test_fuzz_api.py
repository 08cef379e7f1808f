"""Property-based fuzzing of the engine's API (issue 12): whatever a caller passes, ``models.analyze``
either returns weights whose rows sum to 1 (or 0) or raises a DikkatError, never another exception."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import models
from models.analysis.tokens import truncate as _truncate

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
                    derandomize=True)
WIDTHS = st.one_of(st.integers(-3, 40), st.integers(), st.text(max_size=8), st.none(), st.floats(),
                   st.just("9" * 4300), st.builds(np.ones, st.integers(0, 3)))
MASKS = st.one_of(
    st.sampled_from(["native", "bidirectional", "causal", "sliding_window:3", "strided:2", "SLIDING(2)", "cross"]),
    st.text(max_size=24),
    st.tuples(st.sampled_from(["sliding_window", "strided", "causal", "x"]), WIDTHS),
    st.lists(st.lists(st.one_of(st.booleans(), st.integers(0, 1)), max_size=5), max_size=5),
    st.lists(st.lists(st.text(max_size=2), min_size=2, max_size=2), min_size=2, max_size=2),
    st.dictionaries(st.sampled_from(["encoder", "decoder", "cross"]), st.sampled_from(["causal", "bidirectional"]),
                    max_size=2),
    st.integers(), st.none(),
)
HEADS = st.one_of(
    st.none(), st.text(max_size=6),
    st.sets(st.tuples(st.sampled_from(["encoder", "decoder", "x"]), st.integers(-2, 8), st.integers(-2, 14)),
            max_size=3),
    st.lists(st.tuples(st.sampled_from(["encoder"]), st.one_of(st.integers(0, 5), st.booleans(), st.floats())),
             max_size=2),
)
TEXTS = st.text(st.characters(codec="utf-8"), max_size=80)
WORDS = st.text(st.sampled_from(list("Kedi fareyi kovaladı the cat")), min_size=1, max_size=40).filter(str.strip)


@pytest.fixture(scope="module")
def minilm():
    return models.load("minilm-l6")


@SETTINGS
@given(text=st.one_of(WORDS, WORDS, TEXTS), pair=st.one_of(st.none(), st.none(), TEXTS), mask=MASKS,
       heads_off=st.one_of(st.none(), HEADS),
       max_tokens=st.one_of(st.none(), st.none(), st.integers(-5, 10 ** 6), st.booleans(), st.floats()),
       top_k=st.one_of(st.just(5), st.integers(-2, 40), st.none(), st.text(max_size=2)))
def test_analyze_returns_attention_or_a_dikkat_error(minilm, text, pair, mask, heads_off, max_tokens, top_k):
    try:
        a = models.analyze(minilm, text, text_pair=pair, mask=mask, heads_off=heads_off, max_tokens=max_tokens,
                           top_k=top_k)
    except models.DikkatError:
        return
    w = np.asarray(a.attentions["encoder"])
    sums = w.sum(-1)
    assert ((np.abs(sums - 1) < 1e-4) | (np.abs(sums) < 1e-6)).all()
    assert len(a.tokens) <= min(a.max_tokens, minilm.max_positions)


@settings(max_examples=100, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(a=st.text(st.sampled_from(list("abcçdefgğıijk .,!?'-ş")), min_size=1, max_size=1500),
       b=st.text(st.sampled_from(list("xyzşöü mnop.'-kedi")), min_size=1, max_size=1500),
       limit=st.integers(8, 300))
def test_cut_pairs_truncate_exactly_as_the_tokenizer(minilm, a, b, limit):
    """The pair is cut before tokenizing (the tokenizer's own truncation of a long pair builds every
    combination of overflowing pieces), with the same tokens, offsets and segments as its truncation."""
    tok = minilm.tokenizer
    kw = dict(return_offsets_mapping=True, return_special_tokens_mask=True)
    full = tok(a, b, truncation=False, **kw)
    if len(full["input_ids"]) <= limit:
        return
    want = tok(a, b, truncation=True, max_length=limit, **kw)
    got = _truncate(tok, a, b, full, limit)
    for key in ("input_ids", "offset_mapping", "special_tokens_mask", "token_type_ids"):
        assert got[key] == want[key], key


@SETTINGS
@given(mask=MASKS, n=st.integers(0, 6))
def test_masks_parse_to_a_matrix_or_an_invalid_mask_error(mask, n):
    try:
        matrix = models.masks.parse_mask(mask).matrix(n)
    except models.InvalidMaskError:
        return
    assert matrix is None or (matrix.shape == (n, n) and matrix.dtype == bool)
