"""The Experiments entry ``retrieval_heads`` (Wu et al. 2024 in DuoAttention's form, issue 31): its run on a tiny
Llama with room for a needle (256 positions: the 1,024-token needles are cut to the model's limit), its time
estimate, its verdicts on constructed results, and its result kept on disk and read back as the pages read it."""

from __future__ import annotations

import numpy as np
import pytest

import models
from models import ahead
from models import experiments as E
from models.experiments import retrieval
from models.experiments.verdicts import verdicts
from models.sparse import DuoResult, DuoRow


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """The tests' tiny Llama (tests/tiny.py: 2 layers x 4 heads, 2 key/value heads) with 256 positions."""
    from tiny import build_long_llama

    return models.load(str(build_long_llama(tmp_path_factory.mktemp("llama-256"), 256)), device="cpu")


def test_the_entry_is_registered_for_the_bundled_causal_lms_and_computed_ahead():
    exp = E.get("retrieval_heads")
    assert exp.models == ("smollm2-135m", "gemma3-270m")
    assert [s.url for s in exp.sources] == ["https://arxiv.org/abs/2404.15574", "https://arxiv.org/abs/2410.10819"]
    jobs = {(j.params["key"], j.model) for j in ahead.default_jobs(installed_only=False) if j.kind == "experiment"}
    assert {("retrieval_heads", "smollm2-135m"), ("retrieval_heads", "gemma3-270m")} <= jobs


def test_a_run_on_a_tiny_llama_scores_every_head_and_measures_each_configuration(llama):
    loaded = llama
    seen = []
    r = E.run("retrieval_heads", loaded, progress=seen.append)
    assert isinstance(r, retrieval.RetrievalHeads) and r.seconds > 0 and r.draws == retrieval.DRAWS
    assert seen[0] == 0.0 and seen[-1] == 1.0 and seen == sorted(seen)
    duo = r.duo
    assert duo.lengths == (256,) and duo.depths == retrieval.DEPTHS and (duo.window, duo.sinks) == (64, 4)
    assert duo.scores.shape == (2, 4) and np.all((duo.scores >= 0) & (duo.scores <= 1))
    assert r.heads == 8 and r.retrieval_share == pytest.approx(float((duo.scores > 0.1).mean()))
    names = [row.name for row in duo.rows]
    assert names[0] == "all full" and names[-1] == "window everywhere"
    assert "top-1 retrieval full" in names and "random 1 full" in names  # 5 % and 10 % of 8 heads: k = 1
    for row in duo.rows:
        assert 0 <= row.recall <= 1 and row.recall_range[0] <= row.recall <= row.recall_range[1] + 1e-9
        assert np.isfinite(row.loss) and set(row.kv) == {256}
    full = r.row("all full")
    assert r.kv_ratio(full) == 1.0
    assert r.kv_ratio(r.row("window everywhere")) == pytest.approx(256 / 68)  # a window of 64 + 4 sinks
    assert all(r.kv_ratio(row) >= 1.0 for row in duo.rows)
    top, rnd = r.pairs()[-1]
    assert top.k == rnd.k == 1
    held = verdicts("retrieval_heads", r)
    assert [v.rule for v in held] == ["retr_share", "retr_top", "retr_random", "retr_kv"] and held[-1].held is None


def test_the_estimate_counts_the_needle_passes(llama):
    passes = retrieval.needle_passes(llama)
    assert passes == [(0.55 * 3 * (2 + 2 * 3), 256)]
    seconds = E.estimate_seconds("retrieval_heads", llama)
    assert seconds == pytest.approx(passes[0][0] * E.forward_seconds(llama, 256))


def test_a_model_without_room_for_a_needle_or_a_causal_lm_head_gets_a_dikkat_error(tiny):
    with pytest.raises(models.InvalidArgumentError) as err:  # 64 positions: no haystack around the needle
        E.run("retrieval_heads", tiny("llama"))
    assert err.value.code == "needle_too_short"
    with pytest.raises(models.UnsupportedOperationError):
        E.run("retrieval_heads", tiny("bert"))
    with pytest.raises(models.UnsupportedOperationError):
        E.estimate_seconds("retrieval_heads", tiny("bert"))


def _result(scores, full, top, rnd, rnd_range) -> retrieval.RetrievalHeads:
    kv = {1024: 100}
    rows = [DuoRow("all full", 270, full, (full, full), 1.0, {1024: 300}),
            DuoRow("top-27 retrieval full", 27, top, (top, top), 1.2, kv),
            DuoRow("random 27 full", 27, rnd, rnd_range, 3.0, kv),
            DuoRow("window everywhere", 0, 0.0, (0.0, 0.0), 5.0, {1024: 90})]
    duo = DuoResult(np.asarray(scores, np.float32), rows, (1024,), (0.5,), 64, 4, {})
    return retrieval.RetrievalHeads(duo, 0.1, 2, 1.0)


def test_verdicts_follow_the_papers_wording():
    """Under 5 % of heads above 0.1; the top k full keep 90 % of the recall; the best random draw at most half."""
    sparse = np.zeros((30, 9))
    sparse.flat[:10] = 0.5  # 10 of 270 heads: 3.7 %
    r = _result(sparse, 1.0, 0.95, 0.1, (0.0, 0.2))
    assert [v.held for v in verdicts("retrieval_heads", r)] == [True, True, True, None]
    assert r.kv_ratio(r.row("top-27 retrieval full")) == 3.0
    dense = np.full((30, 9), 0.5)
    r = _result(dense, 1.0, 0.5, 0.45, (0.3, 0.6))
    assert [v.held for v in verdicts("retrieval_heads", r)] == [False, False, False, None]


def test_a_kept_result_reads_back_as_the_pages_read_it(tmp_path, monkeypatch, tiny):
    monkeypatch.setenv("DIKKAT_AHEAD_ROOT", str(tmp_path))
    loaded = tiny("llama")
    r = _result(np.eye(30, 9), 1.0, 0.95, 0.1, (0.0, 0.2))
    job = ahead.experiment_job("retrieval_heads", "tiny")
    ahead.save(job, loaded, r)
    back = ahead.load(job, loaded)
    assert isinstance(back, retrieval.RetrievalHeads) and isinstance(back.duo.rows[1], DuoRow)
    np.testing.assert_array_equal(back.duo.scores, r.duo.scores)
    assert back.duo.rows[0].kv == {1024: 300} and back.duo.rows[2].recall_range == (0.0, 0.2)
    assert [v.held for v in verdicts("retrieval_heads", back)] == [True, True, True, None]
