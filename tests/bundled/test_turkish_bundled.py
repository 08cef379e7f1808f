"""The morpheme level on minilm-l6 (issue 32): "Kedi fareyi kovaladı" through the real WordPiece tokenizer."""

from __future__ import annotations

import numpy as np

import models
from models import turkish


def test_kedi_fareyi_kovaladi_on_minilm(minilm):
    a = models.analyze(minilm, "Kedi fareyi kovaladı")
    q, k = turkish.analysis_units(a, "encoder")
    assert q is k
    named = [label for label, m in zip(q.labels, q.morphemes) if m is not None]
    assert named == ["Kedi", "fare", "yi", "kovala", "dı"]
    assert [q.labels[0], q.labels[-1]] == ["[CLS]", "[SEP]"]  # special tokens stay their own units
    np.testing.assert_allclose(q.membership.sum(1), 1.0, rtol=1e-6)
    weights = np.asarray(a.attentions["encoder"][:])
    out = turkish.morpheme_attention(weights, q, k)
    assert out.shape == (6, 12, len(q.labels), len(q.labels)) and out.dtype == np.float32
    np.testing.assert_allclose(out.sum(-1), 1.0, rtol=1e-5)
    # "kovaladı" is ko + val + ad + ı: "ad" straddles kovala | dı and is split 1/2, 1/2
    assert [a.tokens[i].text for i in np.nonzero(q.straddling)[0]] == ["ad"]
    for i in np.nonzero(q.straddling)[0]:
        row = q.membership[i]
        assert (row > 0).sum() >= 2 and abs(row.sum() - 1) < 1e-6
