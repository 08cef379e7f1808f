"""Ray started and ended by the build itself (issue 46): twice in one process, each time a local instance of its own
joined with its token and gone afterwards (the Atlas page's builds run this way, one after another)."""

from __future__ import annotations

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
