"""A model that cannot run in the half dtype asked for is loaded in float32 and says why (models/loading/precision.py):
DeBERTa's own code multiplies float32 position scores with bfloat16 queries (found on an H200: "expected scalar type
Float but found BFloat16"; the CPU says "expected m1 and m2 to have the same dtype"); a model that runs in bfloat16
stays in it, also one whose bfloat16 rows miss a sum of 1 by no more than bfloat16's rounding (DeBERTa-v2, BLOOM,
FSMT: 0.998 .. 1.002; the load check allows the dtype's epsilon); other failures are not retried."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import archsweep  # noqa: E402

import models  # noqa: E402
from models.errors import NoAttentionWeightsError, NoUsableModelError  # noqa: E402
from models.loading import loader  # noqa: E402
from models.loading.precision import half_precision_fault  # noqa: E402

TEXT = "the cat chased the mouse"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    made = {}

    def get(model_type: str) -> Path:
        if model_type not in made:
            made[model_type] = tmp_path_factory.mktemp(model_type) / model_type
            archsweep.build(model_type, made[model_type])
        return made[model_type]

    return get


@pytest.mark.parametrize("model_type,kind", [("deberta", "dtype")])
def test_a_model_that_cannot_run_in_bfloat16_is_loaded_in_float32_and_says_why(folder, model_type, kind):
    loaded = models.load(str(folder(model_type)), device="cpu", dtype="bfloat16")
    assert loaded.dtype == torch.float32 and next(loaded.model.parameters()).dtype == torch.float32
    (note,) = loaded.notes
    assert note["code"] == "dtype_fallback" and (note["asked"], note["used"], note["kind"]) == ("bfloat16", "float32",
                                                                                               kind)
    assert "float32" in note["message"] and "bfloat16" in note["message"]
    analysis = models.analyze(loaded, TEXT)
    weights = np.asarray(analysis.attentions["encoder"])
    np.testing.assert_allclose(weights.sum(-1), 1, atol=1e-5)
    # the same analysis as a float32 load's
    plain = models.load(str(folder(model_type)), device="cpu", dtype="float32")
    assert not plain.notes
    np.testing.assert_array_equal(np.asarray(models.analyze(plain, TEXT).attentions["encoder"]), weights)
    assert models.load(str(folder(model_type)), device="cpu", dtype="bfloat16") is loaded  # kept: loaded once


def test_a_model_that_runs_in_bfloat16_stays_in_it(tiny_folder):
    loaded = models.load(str(tiny_folder("bert")), device="cpu", dtype="bfloat16")
    assert loaded.dtype == torch.bfloat16 and not loaded.notes
    assert np.isfinite(np.asarray(models.analyze(loaded, TEXT).attentions["encoder"])).all()


@pytest.mark.parametrize("model_type", ["deberta-v2", "bloom", "fsmt"])
def test_rows_rounded_in_bfloat16_are_still_attention_weights(folder, model_type):
    """These families' eager rows sum to 1 ± bfloat16's rounding (more than the float32 check's 1e-3 allows): they
    stay in bfloat16, and their rows sum to 1 within its epsilon (2^-7), not within float32's."""
    loaded = models.load(str(folder(model_type)), device="cpu", dtype="bfloat16")
    assert loaded.dtype == torch.bfloat16 and not loaded.notes
    stack = next(iter(loaded.stacks))
    sums = np.asarray(models.analyze(loaded, TEXT).attentions[stack], dtype=np.float64).sum(-1)
    assert np.abs(sums - 1).max() <= 2 ** -7


def test_only_a_fault_of_the_half_dtype_is_retried():
    mismatch = RuntimeError("expected scalar type Float but found BFloat16")
    assert half_precision_fault(mismatch, torch.bfloat16) == "dtype"
    assert half_precision_fault(RuntimeError("mixed dtype (CPU): expect parameter to have scalar type of Float"),
                                torch.float16) == "dtype"
    assert half_precision_fault(mismatch, torch.float32) is None  # float32 has nothing to fall back to
    assert half_precision_fault(torch.OutOfMemoryError("CUDA out of memory"), torch.bfloat16) is None
    assert half_precision_fault(RuntimeError("size mismatch for weight"), torch.bfloat16) is None
    assert half_precision_fault(OSError("no such file"), torch.bfloat16) is None
    wrapped = NoUsableModelError("cannot load", code="load_failed")
    wrapped.__cause__ = mismatch
    assert half_precision_fault(wrapped, torch.bfloat16) == "dtype"
    rounding = NoAttentionWeightsError("rows", code="not_attention_maps", why="rows summing to 0.998 .. 1, not 1")
    assert half_precision_fault(rounding, torch.bfloat16) == "rounding"
    shape = NoAttentionWeightsError("shape", code="not_attention_maps", why="shape (1, 4, 7, 9) for 7 queries")
    assert half_precision_fault(shape, torch.bfloat16) is None


def test_a_float32_load_that_fails_too_raises_the_first_failure(monkeypatch, tmp_path):
    calls = []

    def fake(name, spec, folder, dev, dt, placement=None):
        calls.append(dt)
        if dt == torch.bfloat16:
            raise RuntimeError("expected scalar type Float but found BFloat16")
        raise ValueError("something else")

    monkeypatch.setattr(loader, "_load_folder", fake)
    with pytest.raises(RuntimeError, match="BFloat16"):
        loader._load_in_float32_if_half_fails("m", None, tmp_path, torch.device("cpu"), torch.bfloat16)
    assert calls == [torch.bfloat16, torch.float32]
