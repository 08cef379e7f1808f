"""A result file computed ahead that is not what models.ahead.save wrote (issue 44 point 6): every size checked before
anything is read or inflated, then the format, the job, the arrays and the result's types; a bad file is treated as
not computed, with a warning and a reason, never handed to a page (models/ahead_read.py)."""

from __future__ import annotations

import io
import json
import logging
import os
import sys
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest

from models import ahead, ahead_read, pruning

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_ahead import _induction, curve  # noqa: E402

BOMB_BYTES = 256 * 1024 * 1024  # inflated; about 260 KB on disk


@pytest.fixture()
def ahead_root(tmp_path, monkeypatch):
    monkeypatch.setenv("DIKKAT_AHEAD_ROOT", str(tmp_path / "ahead"))
    return tmp_path / "ahead"


@pytest.fixture(scope="module")
def gpt2(tiny):
    return tiny("gpt2")


def _kept(gpt2) -> tuple[ahead.Job, Path]:
    """A good curve kept for the tiny gpt2; its job and .json path."""
    job = ahead.curve_job("smollm2-135m", ["a b", "c d"])
    path = ahead.save(job, gpt2, curve())
    assert isinstance(ahead.load(job, gpt2), pruning.PruningCurve)
    return job, path


def _members(npz: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(npz) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def _npy(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.lib.format.write_array(out, array, allow_pickle=False)
    return out.getvalue()


def _another_class(job, path, gpt2):
    other = ahead.save(ahead.experiment_job("induction", "smollm2-135m"), gpt2, _induction())
    data = json.loads(other.read_text())
    data["job"] = json.loads(path.read_text())["job"]  # a copy that claims to be the curve
    path.write_text(json.dumps(data))
    path.with_suffix(".npz").write_bytes(other.with_suffix(".npz").read_bytes())


def _field_of_another_type(job, path, gpt2):
    data = json.loads(path.read_text())
    data["result"]["fields"]["shares"] = "ten steps"
    path.write_text(json.dumps(data))


def _arrays_that_disagree(job, path, gpt2):
    data = json.loads(path.read_text())
    name = data["result"]["fields"]["n_pruned"]["__array__"]
    short = np.array([0, 1, 2])
    if "arrays" in data:  # listed as it is: only the shapes disagree
        data["arrays"][name] = {"dtype": short.dtype.str, "shape": [3]}
    members = _members(path.with_suffix(".npz"))
    members[f"{name}.npy"] = _npy(short)
    with zipfile.ZipFile(path.with_suffix(".npz"), "w") as zf:
        for member, raw in members.items():
            zf.writestr(member, raw)
    path.write_text(json.dumps(data))


def _truncated_npz(job, path, gpt2):
    npz = path.with_suffix(".npz")
    npz.write_bytes(npz.read_bytes()[: npz.stat().st_size // 2])


def _nested_too_deep(job, path, gpt2):
    data = json.loads(path.read_text())
    path.write_text(json.dumps(data)[:-1] + ', "deep": ' + "[" * 100_000 + "]" * 100_000 + "}")


def _an_older_format(job, path, gpt2):
    data = json.loads(path.read_text())
    del data["format"], data["arrays"]  # what the release before this one wrote
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("spoil, reason", [
    (_another_class, "InductionResult where PruningCurve is declared"),
    (_field_of_another_type, "a str where ndarray is declared"),
    (_arrays_that_disagree, "does not agree with the other arrays on steps"),
    (_truncated_npz, "cannot be read"),
    (_nested_too_deep, "not JSON"),
    (_an_older_format, "not of format 2"),
])
def test_a_malformed_file_is_not_computed_with_a_warning(ahead_root, gpt2, caplog, spoil, reason):
    """Each of these reached the Head pruning page before (an InductionResult, a string of shares, an n_pruned
    shorter than the shares: the page indexed past it) or raised out of load (BadZipFile, RecursionError)."""
    job, path = _kept(gpt2)
    spoil(job, path, gpt2)
    with caplog.at_level(logging.WARNING, logger="models.ahead"):
        assert ahead.load(job, gpt2) is None
    assert reason in ahead.ignored(job, gpt2)
    assert [r.getMessage() for r in caplog.records if reason in r.getMessage()]
    assert ahead.load(job, gpt2) is None and ahead.ignored(job, gpt2)  # remembered, not read again
    ahead.save(job, gpt2, curve(orders=2))  # computed again: replaces it
    assert ahead.load(job, gpt2).random.shape == (2, 10) and ahead.ignored(job, gpt2) is None


def _bomb(npz: Path, name: str) -> None:
    """Replace member ``name`` of ``npz`` by a valid .npy of BOMB_BYTES zeros, deflated (about 1,000 : 1)."""
    members = _members(npz)
    with zipfile.ZipFile(npz, "w") as zf:
        for member, raw in members.items():
            if member != f"{name}.npy":
                zf.writestr(member, raw)
        info = zipfile.ZipInfo(f"{name}.npy")
        info.compress_type = zipfile.ZIP_DEFLATED
        with zf.open(info, "w", force_zip64=True) as out:
            np.lib.format.write_array_header_1_0(out, {"descr": "<f8", "fortran_order": False,
                                                       "shape": (BOMB_BYTES // 8,)})
            chunk = bytes(1 << 20)
            for _ in range(BOMB_BYTES >> 20):
                out.write(chunk)


@pytest.mark.parametrize("listed", ["as kept", "as inflated"])
def test_a_zip_bomb_is_refused_before_it_is_inflated(ahead_root, gpt2, listed):
    """An experiment's .npz of 0.3 MB (within the 16.5 MiB its arrays may take on disk) whose first array inflates to
    256 MiB: refused from the zip directory's uncompressed sizes (listed as the kept array) or from the list of
    arrays (listed as what it inflates to), with at most 4 MiB of Python memory; the code before read every member
    with np.load and handed the page induction scores of 33 million values."""
    job = ahead.experiment_job("induction", "smollm2-135m")
    path = ahead.save(job, gpt2, _induction())
    name = json.loads(path.read_text())["result"]["fields"]["scores"]["__array__"]
    _bomb(path.with_suffix(".npz"), name)
    assert path.with_suffix(".npz").stat().st_size < BOMB_BYTES // 500
    with zipfile.ZipFile(path.with_suffix(".npz")) as zf:
        info = zf.getinfo(f"{name}.npy")
        assert info.compress_type == zipfile.ZIP_DEFLATED and info.file_size > BOMB_BYTES
    if listed == "as inflated":
        data = json.loads(path.read_text())
        data["arrays"][name]["shape"] = [BOMB_BYTES // 8]
        path.write_text(json.dumps(data))
    tracemalloc.start()
    try:
        assert ahead.load(job, gpt2) is None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * 2**20, peak
    why = ahead.ignored(job, gpt2)
    assert (f"{name}.npy inflates to {info.file_size} bytes" if listed == "as kept" else
            "the arrays hold more than the") in why, why


@pytest.mark.parametrize("which", [".json", ".npz"])
def test_a_file_too_large_is_not_read(ahead_root, gpt2, which):
    """A 64 MiB .json file, or a 4 GiB .npz file (sparse: no disk used), is refused from its size on disk."""
    job, path = _kept(gpt2)
    os.truncate(path.with_suffix(which), (64 << 20) if which == ".json" else (4 << 30))
    tracemalloc.start()
    try:
        assert ahead.load(job, gpt2) is None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20, peak
    assert "bytes, more than the" in ahead.ignored(job, gpt2)


def test_the_limits_follow_the_model_and_the_job(gpt2):
    """A curve of 3 random orders on the tiny gpt2 (8 heads): (3 + 3) x 10 steps of float64; an experiment: 16 MiB
    plus 64 KiB per head."""
    curve_limits = ahead_read.limits(ahead.curve_job("x", ["a"]), gpt2)
    assert curve_limits.array_bytes == 6 * 10 * 8
    experiment = ahead_read.limits(ahead.experiment_job("sinks", "x"), gpt2)
    assert experiment.array_bytes == 16 * 2**20 + 8 * 64 * 1024
    assert experiment.json_bytes < 5 * 2**20


def test_every_experiment_names_the_class_its_result_must_be():
    from models.experiments import EXPERIMENTS, SinksResult
    from models.experiments.induction import InductionResult

    types = {key: e.result_type() for key, e in EXPERIMENTS.items()}
    assert types["sinks"] is SinksResult and types["induction"] is InductionResult
    assert all(isinstance(t, type) and t.__module__.startswith("models.") for t in types.values())
