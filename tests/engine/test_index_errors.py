"""Stored attention weights and masks indexed out of range raise :class:`models.IndexOutOfRangeError`: a DikkatError
(so the app and a notebook catch one family, in both languages) that names the axis and its length, and an
IndexError (so Python's sequence protocol still works on them, as on numpy arrays). Issue 27: "only DikkatErrors"."""

from __future__ import annotations

import numpy as np
import pytest

import models
from models.experiments import induction

TEXT = "kedi fareyi kovaladı the cat chased the mouse"


@pytest.mark.parametrize("keep", [True, False])
def test_every_axis_out_of_range_names_itself(tiny, keep):
    a = models.analyze(tiny("llama"), TEXT, keep=keep)
    weights = a.attentions["decoder"]
    layers, heads, n, _ = weights.shape
    cases = [((layers,), "index_layer", layers, layers), ((-layers - 1,), "index_layer", -layers - 1, layers),
             ((0, heads), "index_head", heads, heads), ((1, 0, n + 2), "index_row", n + 2, n),
             ((0, 0, 0, n), "index_key", n, n), ((0, [0, heads + 1]), "index_head", heads + 1, heads)]
    for key, code, index, size in cases:
        with pytest.raises(models.IndexOutOfRangeError) as info:
            weights[key]
        assert isinstance(info.value, IndexError) and isinstance(info.value, models.DikkatError)
        assert (info.value.code, info.value.params) == (code, {"index": index, "size": size}), key
        assert str(info.value).startswith(f"{code.removeprefix('index_')} {index} is out of range for {size}")
    with pytest.raises(models.IndexOutOfRangeError) as info:
        weights[0, 0, 0, 0, 0]
    assert info.value.code == "index_axes" \
        and info.value.params == {"index": 5 if keep else 4, "size": 4 if keep else 3}
    with pytest.raises(models.InvalidArgumentError) as info:
        weights[0, 1.5]
    assert info.value.code == "bad_index"
    with pytest.raises(models.IndexOutOfRangeError) as info:
        weights.heads([(0, heads)])
    assert info.value.code == "index_head"
    with pytest.raises(models.IndexOutOfRangeError):
        a.sink_share("decoder", layers)
    assert [w.shape for w in weights] == [(heads, n, n)] * layers  # iteration stops at the first IndexError


def test_masks_out_of_range_name_their_axis(tiny):
    masks = models.analyze(tiny("gemma3"), TEXT, keep=False).masks["decoder"]
    layers, n, _ = masks.shape
    for key, code in [((layers,), "index_layer"), ((0, n), "index_row"), ((0, 0, n), "index_key"),
                      ((slice(None), n), "index_row")]:
        with pytest.raises(models.IndexOutOfRangeError) as info:
            masks[key]
        assert info.value.code == code and info.value.params["size"] == (layers if code == "index_layer" else n)


def test_induction_scores_checks_the_copies_fit():
    w = np.random.default_rng(0).random((2, 3, 10, 10))
    assert induction.induction_scores(w, 1, 4).shape == (2, 3)
    for start, length in [(1, 5), (-1, 2), (9, 1), (0, 0)]:
        with pytest.raises(models.InvalidArgumentError):
            induction.induction_scores(w, start, length)
    with pytest.raises(models.InvalidArgumentError) as info:
        induction.induction_scores(w[..., :9], 0, 2)
    assert info.value.code == "induction_weights_shape"
