"""Replaced masks on the fallback path: applied through the model's own attention_mask where a probe proves
it, refused with the reason elsewhere (models.fallback_masks)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import archsweep  # noqa: E402

import models  # noqa: E402
from models import fallback_masks  # noqa: E402

TEXT = "the cat chased the mouse and the dog"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    made = {}

    def get(model_type: str):
        if model_type not in made:
            folder = tmp_path_factory.mktemp(model_type) / model_type
            archsweep.build(model_type, folder)
            made[model_type] = models.load(str(folder))
        return made[model_type]

    return get


def _restricted(weights: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """The native weights restricted to the allowed keys, each row renormalised: what a replaced mask gives
    in the first layer (its input does not depend on any mask)."""
    w = weights * allowed
    return w / w.sum(-1, keepdims=True)


@pytest.mark.parametrize("model_type,mask", [("mpnet", "custom"), ("falcon", "bidirectional"),
                                             ("xglm", "sliding_window:2")])
def test_a_probed_model_takes_the_replaced_mask(tiny, model_type, mask):
    """First layer under a replaced mask = the native first layer restricted to the allowed keys and
    renormalised (softmax over fewer keys), exactly 0 elsewhere; later layers differ from native; a.masks
    lists the mask."""
    loaded = tiny(model_type)
    assert loaded.capture_path == "fallback"
    native = models.analyze(loaded, TEXT)
    n = len(native.tokens)
    stack = next(iter(native.attentions))
    if mask == "custom":
        mask = fallback_masks.probe_pattern(n, causal=False).numpy() & ~np.eye(n, k=1, dtype=bool)
        allowed = mask
    else:
        allowed = models.masks.parse_mask(mask).matrix(n)
    replaced = models.analyze(loaded, TEXT, mask=mask)
    got = np.asarray(replaced.attentions[stack])
    assert (got[:, :, ~allowed] == 0).all()
    assert (got[:, :, allowed] > 0).all()  # keys after the query too, where the mask allows them (falcon)
    np.testing.assert_allclose(got.sum(-1), 1, atol=1e-5)
    first = np.asarray(native.attentions[stack])[0]
    if not (allowed & (first[0] == 0)).any():  # within the native mask: the first layer is its restriction
        np.testing.assert_allclose(got[0], _restricted(first, allowed), atol=1e-6)
    assert not np.allclose(got[-1], np.asarray(native.attentions[stack])[-1], atol=1e-3)
    np.testing.assert_array_equal(np.asarray(replaced.masks[stack]), np.broadcast_to(allowed, got.shape[:1] + allowed.shape))
    assert native.masks == {}  # the native mask of a fallback model is its own business


def test_a_model_whose_attention_mask_is_not_per_query_refuses(tiny):
    """BLOOM builds its ALiBi and mask from a 2-D padding mask: no form passes the probe."""
    loaded = tiny("bloom")
    assert fallback_masks.mask_support(loaded) is None
    with pytest.raises(models.UnsupportedOperationError, match="does not take a per-query mask"):
        models.analyze(loaded, TEXT, mask="causal")
    assert np.asarray(models.analyze(loaded, TEXT).attentions["decoder"]).sum(-1).min() > 0.999  # native still works


def test_a_query_without_keys_is_refused_on_the_fallback_path(tiny):
    """An additive mask cannot give a row zero weights (softmax of equal minima is uniform): refused."""
    loaded = tiny("mpnet")
    n = len(models.analyze(loaded, TEXT).tokens)
    mask = np.ones((n, n), dtype=bool)
    mask[2] = False
    with pytest.raises(models.UnsupportedOperationError, match="allows no key"):
        models.analyze(loaded, TEXT, mask=mask)


def test_the_probe_runs_once_per_model(tiny, monkeypatch):
    loaded = tiny("mpnet")
    fallback_masks.mask_support(loaded)
    calls = []
    monkeypatch.setattr(loaded.model, "forward", lambda *a, **k: calls.append(1))
    assert fallback_masks.mask_support(loaded) == loaded.probes["fallback_mask"]
    assert calls == []


def test_the_causal_scope_refuses_masks_above_the_diagonal():
    """A model that adds its own causal mask ("causal" scope) takes masks within it and refuses the rest."""
    from models.analysis import _check_fallback_masks

    class Fake:
        name, family, capture_path = "fake", "decoder", "fallback"
        probes = {"fallback_mask": ("4d_additive", "causal")}

    _check_fallback_masks(Fake(), {"decoder": torch.ones(4, 4, dtype=torch.bool).tril()})
    with pytest.raises(models.UnsupportedOperationError, match="only masks within the causal mask"):
        _check_fallback_masks(Fake(), {"decoder": torch.ones(4, 4, dtype=torch.bool)})


@pytest.mark.parametrize("form", fallback_masks.FORMS)
def test_argument_forms(form):
    allowed = torch.tensor([[True, False], [True, True]])
    arg = fallback_masks.as_argument(allowed, form, torch.float32, "cpu")
    if form == "4d_additive":
        assert arg.shape == (1, 1, 2, 2) and arg[0, 0, 0, 1] == torch.finfo(torch.float32).min and arg[0, 0, 1, 0] == 0
    else:
        assert arg.shape == ((1, 2, 2) if form == "3d" else (1, 1, 2, 2))
        assert arg.flatten().tolist() == [1, 0, 1, 1]
