"""The fallback path's conversions and probes (issue 11), on hand-made tensors; the sweep
(tests/sweep/test_archsweep.py) checks them on every architecture against plain transformers."""

from __future__ import annotations

import torch

from models.anatomy.maps import local_to_full
from models.anatomy.projections import _batch_first


def test_longformer_local_window_becomes_a_full_map():
    """Column c of query i is key i + c - window/2 (transformers' LongformerBaseModelOutput); keys outside the
    text are dropped, every other key gets 0."""
    window, n = 4, 3
    local = torch.arange(n * (window + 1), dtype=torch.float32).reshape(1, 1, n, window + 1)
    full = local_to_full(local, window)
    assert full.shape == (1, 1, n, n)
    # query 0: keys 0, 1, 2 at columns 2, 3, 4; query 1: keys 0..2 at columns 1..3; query 2: columns 0..2
    assert full[0, 0].tolist() == [[2.0, 3.0, 4.0], [6.0, 7.0, 8.0], [10.0, 11.0, 12.0]]
    n = 6  # wider than the window: keys beyond window/2 get 0
    local = torch.ones(2, 3, n, window + 1)
    full = local_to_full(local, window)
    i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    assert torch.equal(full[1, 2], ((j - i).abs() <= window // 2).float())


def test_probe_tensors_are_read_batch_first():
    assert _batch_first(torch.zeros(7, 1, 4)).shape == (1, 7, 4)  # Longformer's (tokens, 1, width)
    assert _batch_first(torch.zeros(1, 7, 4)).shape == (1, 7, 4)
