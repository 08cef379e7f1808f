"""Why a head attends here (issue 30) on the bundled smollm2-135m: the terms of a real score add up to the score the
model computed, at real positions of a real sentence, and the neuron view's weights are the analysis's."""

from __future__ import annotations

import numpy as np

import models
from models import why

TEXT = "The cat chased the mouse across the kitchen, and the dog watched from the door."


def test_smollm2_scores_are_taken_apart_exactly(smollm2):
    analysis = models.analyze(smollm2, TEXT, heads_off={("decoder", 3, 1)})
    n = len(analysis.tokens)
    for layer, head, i in ((0, 0, n - 1), (12, 4, n // 2), (29, 8, n - 1)):
        explained = why.explain(smollm2, analysis, "decoder", layer)
        row = explained.row_terms(head, i)
        scale = float(np.abs(row.raw).max())
        assert np.abs(row.key_side.sum(1) - row.raw).max() <= 1e-5 * scale
        assert np.abs(row.query_side.sum(1) - row.raw).max() <= 1e-5 * scale
        m = row.matrix(i - 1).astype(np.float64)
        assert abs(m.sum() - row.raw[i - 1]) <= 1e-5 * scale
        np.testing.assert_allclose(row.weights, analysis.attentions["decoder"][layer, head, i], atol=1e-5)
        assert explained.neuron_view(head, i, 0).weight == float(row.weights[0])
        if layer > 3:  # the head switched off adds nothing
            grid = row.by_head("key", i - 1)
            assert grid[3, 1] == 0 and np.abs(grid).sum() > 0
    split = why.rope_split(smollm2, analysis, "decoder", 29, 8, n - 1, 0, max_distance=n - 1)
    assert abs(float(split.curve[n - 1]) - float(split.raw[0])) <= 1e-4 * (1 + float(np.abs(split.raw).max()))
