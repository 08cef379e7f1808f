"""The atlas on a local Ray cluster (issue 46): the same atlas as the in-process build, a worker killed mid-run
without a text lost or counted twice, an interrupted build resumed, a decoder's repeated sequences, and a
worker's error reaching the caller as the DikkatError it raised."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest
import ray

from models import atlas
from models.atlas import cluster, store
from models.atlas.stream import CorpusFile
from models.errors import DikkatError


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    """One local Ray instance for the module (2 CPUs: this machine's), shut down at its end."""
    with cluster.session("local", 2):
        yield
    assert not ray.is_initialized()


def corpus_of(n: int, name: str):
    """The first ``n`` texts of the shipped English corpus (sentences, paragraphs and long texts)."""
    return atlas.corpus_from_texts(list(atlas.shipped_corpus("en").texts[:n]), name=name)


def values(a: atlas.Atlas) -> np.ndarray:
    t = a.table().sort_values(["stack", "layer", "head"])
    return t[[c for c in t.columns if t[c].dtype.kind == "f"]].to_numpy()


def rows_per_text(a: atlas.Atlas) -> set[int]:
    """How many sums rows each text has (a text counted twice has twice its heads' rows)."""
    got = store.duck().execute(f"SELECT count(*) FROM read_parquet({store.part_files(a.folder, 'sums')}) "
                               "GROUP BY grp, text").fetchall()
    return {n for (n,) in got}


def test_ray_atlas_equals_the_in_process_one(minilm, tmp_path):
    """40 texts on 2 actors in shards of 8: the same folder name, every head's metrics and intervals as the
    in-process build to 1e-6 (float32 sums in other threads), each text once."""
    corpus = corpus_of(40, "en40")
    here = atlas.build_atlas(minilm, corpus, root=tmp_path / "here")
    seen = []
    there = cluster.build_atlas_ray("minilm-l6", corpus, workers=2, shard_texts=8, root=tmp_path / "ray",
                                    progress=lambda done, total, left, run: seen.append((done, total, run.eta.tokens)))
    assert there.complete and there.done() == (40, 40)
    assert there.folder.name == here.folder.name
    np.testing.assert_allclose(values(there), values(here), atol=1e-6, rtol=1e-6)
    assert rows_per_text(there) == {6 * 12}
    assert [s[0] for s in seen] == sorted(s[0] for s in seen) and seen[-1][:2] == (40, 40)
    assert seen[-1][2] == store.duck().execute(
        f"SELECT sum(tokens) FROM read_parquet({store.part_files(there.folder, 'texts')})").fetchone()[0]
    assert there.ray_run.workers == 2 and there.ray_run.shards == 5


def test_a_worker_killed_mid_run_loses_nothing_and_counts_nothing_twice(minilm, tmp_path):
    """SIGKILL to an actor's process after the first shard: Ray restarts it and runs its shards again; the atlas
    is complete, equal to the in-process one, and every text has its heads' rows once."""
    corpus = corpus_of(48, "en48")
    killed = []

    def kill(done, total, left, run):
        if not killed:
            killed.append(run.pids[0])
            os.kill(run.pids[0], signal.SIGKILL)

    there = cluster.build_atlas_ray("minilm-l6", corpus, workers=2, shard_texts=4, root=tmp_path / "ray",
                                    progress=kill)
    assert killed and there.complete and there.done() == (48, 48)
    assert there.ray_run.restarts >= 1 and killed[0] not in there.ray_run.pids
    assert rows_per_text(there) == {6 * 12}
    here = atlas.build_atlas(minilm, corpus, root=tmp_path / "here")
    np.testing.assert_allclose(values(there), values(here), atol=1e-6, rtol=1e-6)


def test_an_interrupted_ray_build_resumes_where_it_stopped(minilm, tmp_path):
    """Stopped after its first shard the build is incomplete; run again it reads only the texts not in, and the
    atlas equals the one built in one go."""
    corpus = corpus_of(30, "en30")
    first = cluster.build_atlas_ray("minilm-l6", corpus, workers=1, shard_texts=10, root=tmp_path,
                                    stop=lambda: True)
    assert not first.complete and first.done()[0] in (10, 20)
    before = first.done()[0]
    second = cluster.build_atlas_ray("minilm-l6", corpus, workers=2, shard_texts=10, root=tmp_path)
    assert second.complete and second.ray_run.eta.texts == 30 - before
    assert rows_per_text(second) == {6 * 12}
    whole = atlas.build_atlas(minilm, corpus, root=tmp_path / "whole")
    np.testing.assert_allclose(values(second), values(whole), atol=1e-6, rtol=1e-6)


def test_a_streamed_file_with_cut_texts_and_a_decoders_repeats(smollm2, tmp_path):
    """smollm2-135m from a .jsonl file read in a stream: texts cut to 32 tokens are listed with how much was cut,
    the repeated random sequences are read, and the atlas equals the in-process one of the same texts."""
    texts = list(atlas.shipped_corpus("en").texts[320:326])
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    there = cluster.build_atlas_ray("smollm2-135m", CorpusFile(path), workers=2, shard_texts=2, max_tokens=32,
                                    repeats=2, repeat_length=12, root=tmp_path / "ray")
    here = atlas.build_atlas(smollm2, atlas.load_corpus(path), max_tokens=32, repeats=2, repeat_length=12,
                             root=tmp_path / "here")
    assert there.folder.name == here.folder.name and there.complete
    cut = {(g, i): n for g, i, n in there.ray_run.cut}
    assert cut and all(g == "corpus" and n > 0 for (g, _), n in cut.items())
    lengths = [len(smollm2.tokenizer(t)["input_ids"]) for t in texts]
    assert cut == {("corpus", i): n - 32 for i, n in enumerate(lengths) if n > 32}
    assert there.table()["induction_repeat"].notna().all()
    np.testing.assert_allclose(values(there), values(here), atol=2e-5, rtol=1e-5)


def test_a_workers_error_reaches_the_caller_as_its_dikkat_error(tmp_path):
    """Settings the model cannot take are refused by the first actor with the InvalidArgumentError the
    in-process build raises (code arg_whole), before any shard."""
    with pytest.raises(DikkatError) as info:
        cluster.build_atlas_ray("minilm-l6", corpus_of(4, "en4"), workers=1, max_tokens=10**6, root=tmp_path)
    assert info.value.code == "arg_whole"
    assert not list(tmp_path.glob("*/*/parts/*.parquet"))


def test_causal_labels_on_ray_equal_the_in_process_ones(minilm, tmp_path):
    """The candidate heads split over 2 actors (one job per head group): every (head, label, quantity) row and
    verdict of the in-process run, effects to 1e-5 (batches of other heads), stored with the atlas."""
    a = atlas.build_atlas(minilm, corpus_of(12, "en12"), root=tmp_path)
    here = atlas.causal_labels(minilm, a, texts=4, k=2, save=False)
    there = cluster.causal_labels_ray("minilm-l6", a, workers=2, texts=4, k=2)
    key = ["stack", "layer", "head", "label", "quantity"]
    here = here.sort_values(key, ignore_index=True)
    assert len(here) >= 4 and there[key].equals(here[key])
    assert list(there["passed"]) == list(here["passed"])
    np.testing.assert_allclose(there[["delta", "lo", "hi"]].to_numpy(float),
                               here[["delta", "lo", "hi"]].to_numpy(float), atol=1e-5, rtol=1e-4)
    assert a.labels()[key].equals(there[key])
    assert (a.table()["verdict"] != "untested").sum() == len(set(map(tuple, here[["stack", "layer", "head"]].values)))


def test_the_command_line_builds_on_ray_and_lists_the_cut_texts(tiny_folder, tmp_path, capsys):
    """``python -m models atlas --ray local`` on a tiny model read from its folder by the actors, a .csv corpus
    in a stream: the top heads with their verdicts, the texts cut to 8 tokens with how much, Ray's figures; and
    the same atlas folder as the in-process command's."""
    from models.__main__ import main

    corpus = tmp_path / "c.csv"
    corpus.write_text("text\nab\nabcdefghijkl\nabc d\n", encoding="utf-8")
    model = str(tiny_folder("gpt2"))
    argv = ["atlas", "--model", model, "--corpus", str(corpus), "--max-tokens", "8", "--repeats", "0"]
    assert main([*argv, "--ray", "local", "--workers", "2", "--shard-texts", "2",
                 "--root", str(tmp_path / "ray")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["complete"] and out["texts"] == 3 and out["ray"]["workers"] == 2
    assert out["cut"]["texts"] == 1 and out["cut"]["listed"][0]["text"] == 1
    assert out["cut"]["listed"][0]["truncated"] == out["cut"]["tokens"] > 0
    assert {"verdict", "effect"} <= set(out["top"][0]) and out["top"][0]["verdict"] == "untested"
    assert main([*argv, "--root", str(tmp_path / "here")]) == 0
    here = json.loads(capsys.readouterr().out)
    assert Path(here["folder"]).name == Path(out["folder"]).name
    assert [r["previous"] for r in here["top"]] == pytest.approx([r["previous"] for r in out["top"]], abs=1e-6)
    assert main([*argv, "--ray", "nowhere"]) == 2 and "local, auto or ray://" in capsys.readouterr().err
