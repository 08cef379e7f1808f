"""Public functions found by generated inputs to raise raw Python errors, return a bare NaN or start work they can never
finish (issue 47): each now refuses with a coded DikkatError whose message exists in both languages, before any work.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

import models
from models import atlas, pruning
from models.turkish import labels

ROOT = Path(__file__).resolve().parents[2]
TR = json.loads((ROOT / "assets" / "i18n" / "errors.json").read_text(encoding="utf-8"))


def _refused(call, code: str, kind=models.InvalidArgumentError) -> models.DikkatError:
    start = time.perf_counter()
    with pytest.raises(kind) as exc:
        call()
    assert time.perf_counter() - start < 1.0  # refused before the work, not after it
    assert exc.value.code == code and f"errmsg_{code}" in TR  # its Turkish message exists
    return exc.value


def test_a_morpheme_label_and_its_language_are_checked():
    assert labels.label_name("Acc", "tr") == "belirtme hâli (-(y)I)"
    assert labels.label_name("NoSuchLabel") == "NoSuchLabel"  # a label the table lacks: itself
    _refused(lambda: labels.label_name("Acc", lang=None), "arg_choice")
    _refused(lambda: labels.label_name(float("-inf")), "arg_text")  # returned -inf before
    _refused(lambda: labels.label_name(b"Acc"), "arg_text")


@pytest.mark.parametrize("bad", [{"random_orders": 10**30}, {"random_orders": -1}, {"random_orders": 2.5},
                                 {"seed": -3}, {"batch_size": 0}])
def test_a_pruning_curve_that_can_never_finish_is_refused_before_it_starts(tiny, bad):
    loaded = tiny("bert")
    n = len(pruning.head_list(loaded))
    error = _refused(lambda: pruning.pruning_curve(loaded, ["the cat"], np.zeros(n), **bad), "arg_whole")
    assert error.params["name"] == next(iter(bad))


def test_an_atlas_table_with_no_bootstrap_draws_is_refused(tiny, tmp_path):
    built = atlas.build_atlas(tiny("bert"), atlas.corpus_from_texts(["the cat sat.", "a b a b"], name="two"),
                              repeats=0, root=tmp_path)
    assert len(built.table(draws=10)) > 0
    for draws in (0, -5, 10**30, 1.5):
        _refused(lambda d=draws: built.table(draws=d), "arg_whole")  # failed inside numpy before


def test_a_rank_correlation_that_does_not_exist_is_said_not_nan():
    error = _refused(lambda: pruning.rank_correlation(np.ones(6), np.arange(6.0)), "rank_constant",
                     kind=models.UndefinedError)
    assert "constant" in str(error)
