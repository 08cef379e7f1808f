"""Ray started and ended by the build itself (issue 46): twice in one process, each time a local instance of its own
joined with its token and gone afterwards (the Atlas page's builds run this way, one after another)."""

from __future__ import annotations

from pathlib import Path

import ray

from models import atlas
from models.atlas import cluster


def test_two_builds_in_one_process_each_start_and_end_their_own_ray(tmp_path):
    corpus = atlas.corpus_from_texts(list(atlas.shipped_corpus("tr").texts[:3]), name="tr3")
    pids = []
    for i in range(2):
        a = cluster.build_atlas_ray("minilm-l6", corpus, workers=1, root=tmp_path / str(i))
        assert a.complete and a.done() == (3, 3) and not ray.is_initialized()
        pids.append(a.ray_run.pids[0])
    assert pids[0] != pids[1]  # a fresh worker each time: the first instance ended with its build


def test_auto_finds_no_private_local_instance_and_says_so_in_one_line(tmp_path):
    """While this process holds a local instance of its own, ``--ray auto`` in another process does not find it
    (it is no cluster of the machine's) and answers with one line, exit code 2, no traceback; so does a Ray
    Client address without its extra, and the Ray-only options without --ray."""
    import subprocess
    import sys

    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat\nthe dog ran\n", encoding="utf-8")
    base = [sys.executable, "-m", "models", "atlas", "--model", "minilm-l6", "--corpus", str(corpus), "--root",
            str(tmp_path / "root")]
    with cluster.session("local", 1):
        assert ray.is_initialized()
        for extra, said in ((["--ray", "auto"], "error: Could not join the Ray cluster at auto"),
                            (["--ray", "ray://127.0.0.1:1"], "error: Could not join the Ray cluster at ray://"),
                            (["--workers", "2"], "error: --workers and --shard-texts are for a build on Ray")):
            done = subprocess.run(base + extra, capture_output=True, text=True, timeout=300,
                                  cwd=str(Path(__file__).resolve().parents[2]))
            assert done.returncode == 2, (extra, done.stderr[-2000:])
            assert said in done.stderr and "Traceback" not in done.stderr, (extra, done.stderr[-2000:])
    assert not ray.is_initialized()
    assert not list((tmp_path / "root").glob("*/*/parts/*.parquet"))
