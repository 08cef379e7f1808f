"""Indices checked before the kernel runs (models.checks.index_guard): a probe that runs a model in a way it may not
take and catches what fails must fail alike on a GPU, where an index out of range is a device-side assert that ends
the process's use of the GPU, not an IndexError. Found on an H200: Longformer's mask probe (a 3-D mask read as its
2-D padding mask over its padded length) took a worker's CUDA context down and every later test of it failed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import archsweep  # noqa: E402

import models  # noqa: E402
from models import checks  # noqa: E402

T = torch.arange(12.0).reshape(3, 4)
E = torch.nn.Embedding(3, 2)
OUT_OF_RANGE = {
    "t[idx]": lambda: T[torch.tensor([3])],
    "t[rows, cols]": lambda: T[torch.tensor([0]), torch.tensor([4])],
    "t[..., idx]": lambda: T[..., torch.tensor([-5])],
    "t[None, :, idx]": lambda: T[None, :, torch.tensor([4])],
    "t[list]": lambda: T[[0, 3]],
    "t[idx] = v": lambda: T.clone().__setitem__(torch.tensor([3]), 0.0),
    "index_select": lambda: T.index_select(1, torch.tensor([4])),
    "gather": lambda: torch.gather(T, 1, torch.tensor([[4]])),
    "scatter_": lambda: torch.zeros(3).scatter_(0, torch.tensor([3]), 1.0),
    "index_add": lambda: torch.zeros(3).index_add(0, torch.tensor([3]), torch.ones(1)),
    "take": lambda: torch.take(T, torch.tensor([12])),
    "embedding": lambda: E(torch.tensor([[1, 3]])),
}
IN_RANGE = {
    "t[idx]": lambda: T[torch.tensor([0, 2, -3])],
    "t[..., idx]": lambda: T[..., torch.tensor([3, -4])],
    "t[bool]": lambda: T[T > 3],
    "t[slice, int]": lambda: T[1:, 2],
    "gather": lambda: torch.gather(T, 1, torch.tensor([[3]])),
    "embedding": lambda: E(torch.tensor([[0, 2]])),
}


@pytest.mark.parametrize("name", list(OUT_OF_RANGE))
def test_an_index_out_of_range_is_refused_before_the_op_runs(name):
    with pytest.raises(checks.IndexOutOfBounds, match="out of bounds"), checks.index_guard():
        OUT_OF_RANGE[name]()


@pytest.mark.parametrize("name", list(IN_RANGE))
def test_indices_in_range_run_as_without_the_guard(name):
    with checks.index_guard():
        got = IN_RANGE[name]()
    assert torch.equal(got, IN_RANGE[name]())


def test_the_longformer_mask_probe_fails_its_3d_form_before_any_kernel_reads_out_of_range(tmp_path, monkeypatch):
    """The probe tries the attention_mask forms first: Longformer reads the 3-D one as its padding mask at keys up to
    its padded length (511) of 12; the guard refuses that read, the probe moves on and finds the softmax form."""
    refused = []
    check = checks._bad

    def spy(index, size, dim):
        try:
            check(index, size, dim)
        except checks.IndexOutOfBounds as exc:
            refused.append(str(exc))
            raise

    monkeypatch.setattr(checks, "_bad", spy)
    archsweep.build("longformer", tmp_path / "longformer")
    loaded = models.load(str(tmp_path / "longformer"), device="cpu", dtype="float32")
    assert refused and all("size 12" in r for r in refused), refused
    assert loaded.probes["fallback_mask"].form == "softmax"
