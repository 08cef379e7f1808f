"""Every experiment's rows judged by the rule written beside the claim (issue 33), on hand-made results."""

from __future__ import annotations

from types import SimpleNamespace as NS

import numpy as np
import pytest

import models
from models.experiments.verdicts import verdicts


def _held(which, result):
    return [v.held for v in verdicts(which, result)]


def test_sinks_rules():
    share = NS(per_layer=np.array([0.1, 0.2, 0.7, 0.8, 0.6]), bottom_top=lambda: (0.15, 0.7))
    stream = NS(windows=np.array([8, 16]), window_gap=np.array([1.2, 0.4]), sinks_gap=np.array([0.2, 0.1]))
    assert _held("sinks", NS(share=share, streaming=stream)) == [True, True, True, True]
    weak = NS(per_layer=np.array([0.1, 0.2, 0.3, 0.1, 0.6]), bottom_top=lambda: (0.15, 0.33))
    stream2 = NS(windows=np.array([8]), window_gap=np.array([0.3]), sinks_gap=np.array([0.2]))
    # 0.33 < 0.5; 2 of 3 layers above 20 %; +0.3 nats is no explosion; 0.2 of 0.3 is not three quarters recovered
    assert _held("sinks", NS(share=weak, streaming=stream2)) == [False, False, False, False]


def test_induction_rules():
    r = NS(scores=np.array([[0.1, 0.5]]), loss_first=8.0, loss_second=2.0, loss_second_off=5.0,
           loss_second_random=np.array([2.1, 2.5]))
    assert _held("induction", r) == [True, True, True]
    r = NS(scores=np.array([[0.1, 0.2]]), loss_first=8.0, loss_second=5.0, loss_second_off=5.2,
           loss_second_random=np.array([5.1, 5.3]))
    assert _held("induction", r) == [False, False, False]  # +0.2 is inside the random draws (up to +0.3)


def test_clark_rules_and_the_bleu_row_is_not_judged():
    per_layer = {"separator": np.array([0.1, 0.1, 0.6, 0.6, 0.6, 0.1])}  # 6 layers: the middle ones are 2..4
    targets = NS(per_layer=per_layer, heads_above=lambda target: [(0, 2)] if target == "previous" else [])
    r = NS(targets=targets, patterns=NS(shares={"vertical": 0.2, "heterogeneous": 0.9}))
    assert _held("clark", r) == [True, True, False, True, False]
    per_layer = {"separator": np.full(6, 0.03)}  # minilm-l6: 3 % on [SEP]
    r = NS(targets=NS(per_layer=per_layer, heads_above=lambda target: []), patterns=r.patterns)
    assert _held("clark", r)[0] is False
    assert _held("prunable", NS(flat_share=0.3)) == [True, None]
    assert _held("alignment", NS(max_difference=0.0, mean_difference=0.0, control_mean_difference=0.4)) == [True, True]
    assert _held("alignment", NS(max_difference=0.1, mean_difference=0.05,
                                 control_mean_difference=0.1)) == [False, False]
    with pytest.raises(models.InvalidArgumentError):
        verdicts("nope", None)
