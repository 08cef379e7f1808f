"""Head atlas (issue 28): the metrics by hand and against Neuronpedia's formulas, blocks, intervals, the store,
resuming, finding heads, and every bad corpus."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

import models
from models import atlas
from models.atlas.metrics import SUMS, TextSums

TEXTS = ["kedi fareyi kovaladı. kedi fareyi kovaladı.", "the cat chased the mouse, the cat.", "a b c a b c a b c",
         "dün kedi uyudu.", "fare kaçtı! kedi, fare, kedi?", "abc abd abe abc", "the mouse.", "kedi"]


def neuronpedia(attn: list[torch.Tensor], ids: list[int], threshold: float = 0.01) -> dict[str, np.ndarray]:
    """A transcription of Neuronpedia's compute_attention_metrics_for_batch for one sequence (batch 1, no
    padding): ``attn`` per layer ``(heads, n, n)``; returns the sums and counts it accumulates (float64)."""
    n = len(ids)
    layers, heads = len(attn), attn[0].shape[0]
    out = {k: np.zeros((layers, heads)) for k in ("self", "prev", "ent", "dist", "dist2", "ind")}
    if n < 2:
        return {**out, "positions": 0, "prev_n": 0, "ind_n": 0}
    pos = torch.arange(n)
    d = (pos[:, None] - pos[None, :]).abs().double()
    seen: dict[int, list[int]] = {}
    iq, ik, rep = [], [], 0
    for q, t in enumerate(ids):
        prev = seen.setdefault(t, [])
        has = False
        for p in prev:
            if p + 1 < n:
                iq.append(q)
                ik.append(p + 1)
                has = True
        rep += has
        prev.append(q)
    for layer, a in enumerate(attn):
        a = a.double()
        out["self"][layer] = a.diagonal(dim1=-2, dim2=-1).sum(-1).numpy()
        out["prev"][layer] = a.diagonal(offset=-1, dim1=-2, dim2=-1).sum(-1).numpy()
        out["ent"][layer] = (-(a * torch.log(a.clamp_min(torch.finfo(torch.float32).tiny)))).sum((-1, -2)).numpy()
        out["dist"][layer] = (a * d).sum((-1, -2)).numpy()
        out["dist2"][layer] = (a * d.square()).sum((-1, -2)).numpy()
        if iq:
            v = a[:, iq, ik]
            out["ind"][layer] = v.masked_fill(v < threshold, 0).sum(-1).numpy()
    return {**out, "positions": n, "prev_n": n - 1, "ind_n": rep}


@pytest.mark.parametrize("arch", ["gpt2", "bert", "llama", "gpt_neo"])
def test_atlas_metrics_equal_neuronpedia_formulas(tiny, tmp_path, arch):
    """Same texts, same weights: the atlas's six HeadVis metrics equal Neuronpedia's pooled formulas within 1e-6
    (interface path: GPT-2, BERT, Llama with GQA; fallback path: GPT-Neo)."""
    loaded = tiny(arch)
    corpus = atlas.corpus_from_texts(TEXTS, name="t")
    a = atlas.build_atlas(loaded, corpus, repeats=0, root=tmp_path)
    assert a.complete and a.done() == (len(TEXTS), len(TEXTS))
    stack = next(iter(loaded.stacks))
    total = None
    for text in TEXTS:
        r = models.analyze(loaded, text)
        w = r.attentions[stack]
        ref = neuronpedia([torch.tensor(w[layer]) for layer in range(w.shape[0])],
                          [t.id for t in r.tokens])
        total = ref if total is None else {k: total[k] + ref[k] for k in total}
    expect = {"self": total["self"] / total["positions"], "previous": total["prev"] / total["prev_n"],
              "entropy": total["ent"] / total["positions"], "distance": total["dist"] / total["positions"],
              "distance_var": total["dist2"] / total["positions"] - (total["dist"] / total["positions"]) ** 2,
              "induction": total["ind"] / total["ind_n"]}
    assert total["ind_n"] > 0 and expect["induction"].max() > 0.01  # the texts do repeat tokens
    for name, value in expect.items():
        np.testing.assert_allclose(a.metric(name, stack), value, atol=1e-6, rtol=0, err_msg=name)


def _sums(w: torch.Tensor, ids, *, special=None, punct=None, word_of=None, blocks=None) -> TextSums:
    heads, n, _ = w.shape
    acc = TextSums(1, heads, n, n, ids=ids, special=special or [False] * n, punctuation=punct or [False] * n,
                   word_of=word_of if word_of is not None else list(range(n)))
    for q0, q1, k0, k1 in blocks or [(0, n, 0, n)]:
        acc.add(0, q0, k0, w[:, q0:q1, k0:k1])
    return acc


def _metric(acc: TextSums, name: str) -> np.ndarray:
    return atlas.pooled(acc.sums)[name][0]


def test_metrics_by_hand_on_constructed_heads():
    """Head 0 attends the previous token (query 0 itself), head 1 uniformly over its causal prefix, head 2
    every query to key 0: values worked out by hand."""
    n = 5
    w = torch.zeros(3, n, n)
    w[0, 0, 0] = 1
    for q in range(1, n):
        w[0, q, q - 1] = 1
    for q in range(n):
        w[1, q, : q + 1] = 1 / (q + 1)
    w[2, :, 0] = 1
    acc = _sums(w, ids=[7, 8, 9, 7, 8], special=[True, False, False, False, False])
    assert _metric(acc, "previous").tolist() == pytest.approx([1.0, (1 / 2 + 1 / 3 + 1 / 4 + 1 / 5) / 4, 0.25])
    assert _metric(acc, "self").tolist() == pytest.approx([0.2, (1 + 1 / 2 + 1 / 3 + 1 / 4 + 1 / 5) / 5, 0.2])
    # distance: head 0 |q - (q-1)| = 1 for q >= 1; head 1: mean over k <= q of (q - k) = q/2; head 2: q
    assert _metric(acc, "distance").tolist() == pytest.approx([4 / 5, sum(q / 2 for q in range(n)) / n, 2.0])
    # variance of head 2's distances 0..4 (each query once): E[q^2] - E[q]^2 = 6 - 4 = 2
    assert _metric(acc, "distance_var")[2] == pytest.approx(2.0)
    assert _metric(acc, "entropy").tolist() == pytest.approx([0.0, sum(math.log(q + 1) for q in range(n)) / n, 0.0])
    # ids 7 8 9 7 8: query 3 (7) -> key 1, query 4 (8) -> key 2; head 0 gives w[3,1] = w[4,2] = 0: induction 0
    assert _metric(acc, "induction")[0] == 0.0
    assert _metric(acc, "induction")[1] == pytest.approx((1 / 4 + 1 / 5) / 2)
    assert _metric(acc, "first").tolist() == pytest.approx([0.4, (1 + 1 / 2 + 1 / 3 + 1 / 4 + 1 / 5) / 5, 1.0])
    assert _metric(acc, "special").tolist() == pytest.approx(_metric(acc, "first").tolist())
    query, strength, keys, weights = acc.strongest()
    assert strength[0, 2] == 0.0  # head 2 puts everything on the first token: no plain pattern
    assert strength[0, 0] == 1.0 and keys[0, 0, 0] == query[0, 0] - 1  # head 0's strongest row: its previous token


def test_induction_ignores_weights_under_the_threshold():
    n = 4
    w = torch.zeros(1, n, n)
    w[0, 2, 1] = 0.009  # ids 5 6 5 6: query 2 -> key 1, query 3 -> key 2
    w[0, 2, 0] = 0.991
    w[0, 3, 2] = 0.5
    w[0, 3, 3] = 0.5
    w[0, 0, 0] = w[0, 1, 1] = 1
    assert _metric(_sums(w, ids=[5, 6, 5, 6]), "induction")[0] == pytest.approx(0.5 / 2)


def test_blocks_of_rows_and_keys_give_the_whole_sums():
    gen = torch.Generator().manual_seed(0)
    n = 9
    w = torch.rand(4, n, n, generator=gen).tril()
    w = w / w.sum(-1, keepdim=True)
    ids = [1, 2, 3, 1, 2, 4, 1, 2, 3]
    words = [0, 0, 1, 2, 2, 2, 3, 4, 4]
    kw = dict(ids=ids, special=[True] + [False] * (n - 1), punct=[False] * 4 + [True] + [False] * 4, word_of=words)
    whole = _sums(w, **kw)
    parts = _sums(w, blocks=[(0, 4, 0, 4), (4, 9, 0, 3), (4, 9, 3, 9)], **kw)
    np.testing.assert_allclose(parts.sums, whole.sums, atol=1e-9)
    for a, b in zip(parts.strongest(), whole.strongest()):
        np.testing.assert_allclose(a, b)
    assert _metric(whole, "same_word").max() > 0


def test_bootstrap_interval_holds_the_value_and_is_zero_wide_for_equal_texts():
    rng = np.random.default_rng(1)
    per = rng.random((40, 2, 3, len(SUMS))) + 0.1
    value = atlas.pooled(per.sum(0))
    ci = atlas.bootstrap(per, draws=400)
    for name in ("self", "previous", "entropy", "induction"):
        assert np.all(ci[name][0] <= value[name]) and np.all(value[name] <= ci[name][1])
        assert np.all(ci[name][1] - ci[name][0] > 0)
    same = np.repeat(per[:1], 30, axis=0)
    lo, hi = atlas.bootstrap(same, draws=100)["previous"]
    np.testing.assert_allclose(lo, hi, atol=1e-12)


def test_an_interrupted_build_resumes_without_reading_finished_texts(tiny, tmp_path, monkeypatch):
    loaded = tiny("gpt2")
    monkeypatch.setattr(atlas.build, "PART_TEXTS", 2)
    corpus = atlas.corpus_from_texts(TEXTS, name="t")
    seen = []
    a = atlas.build_atlas(loaded, corpus, repeats=2, root=tmp_path, stop=lambda: len(seen) >= 3,
                          progress=lambda done, total, left: seen.append(done))
    assert not a.complete and a.done()[0] == 3
    read = []
    b = atlas.build_atlas(loaded, corpus, repeats=2, root=tmp_path, progress=lambda d, t, left: read.append(d))
    total = b.done()[1]  # the tiny tokenizer has no whole-word tokens: no repeated sequences, and says why
    assert b.manifest["no_repeats"] and total == len(TEXTS)
    assert b.complete and read == list(range(4, total + 1))  # 3 were done before
    whole = atlas.build_atlas(loaded, corpus, repeats=2, root=tmp_path / "other")
    pd_cols = ["previous", "induction", "entropy", "first"]
    np.testing.assert_allclose(b.table()[pd_cols].to_numpy(), whole.table()[pd_cols].to_numpy(), atol=1e-12)
    assert b.folder == atlas.folder_for(loaded, corpus, atlas.build.check_settings(loaded, None, None, 2, None),
                                        tmp_path)


def test_examples_related_and_find_heads_across_atlases(tiny, tmp_path):
    corpus = atlas.corpus_from_texts(TEXTS, name="t")
    a = atlas.build_atlas(tiny("gpt2"), corpus, repeats=0, root=tmp_path)
    b = atlas.build_atlas(tiny("bert"), corpus, repeats=0, root=tmp_path)
    ex = a.examples("decoder", 1, 2, k=3)
    assert len(ex) == 3 and list(ex["strength"]) == sorted(ex["strength"], reverse=True)
    row = ex.iloc[0]
    assert row["content"] == TEXTS[row["text"]] and 0 <= row["query"] < len(row["starts"])
    rel = a.related("decoder", 1, 2, k=4)
    assert len(rel) == 4 and not ((rel["layer"] == 1) & (rel["head"] == 2)).any()
    assert list(rel["similarity"]) == sorted(rel["similarity"], reverse=True)
    found = atlas.find_heads("previous", top=100, root=tmp_path)
    assert set(found["model"]) == {a.model, b.model} and len(found) == 16
    for at in (a, b):
        mine = found[found["model"] == at.model]
        stack = next(iter(at.stacks))
        grid = at.metric("previous", stack)
        for _, r in mine.iterrows():
            assert r["value"] == pytest.approx(grid[r["layer"], r["head"]], abs=1e-9)
    assert list(atlas.find_heads("previous", top=3, model=b.model, root=tmp_path)["model"]) == [b.model] * 3
    with pytest.raises(models.InvalidArgumentError) as err:
        atlas.find_heads("nope", root=tmp_path)
    assert err.value.code == "atlas_metric"
    with pytest.raises(models.InvalidHeadError):
        a.examples("decoder", 9, 0)


@pytest.mark.parametrize("name, data, column, code", [
    ("empty.txt", b"\n  \n", None, "corpus_empty"),
    ("bin.txt", b"abc\x00\x01\x02", None, "corpus_binary"),
    ("latin.txt", "çay".encode("latin-1"), None, "corpus_binary"),
    ("t.csv", b"id,body\n1,hello\n", None, "corpus_column"),
    ("t.csv", b"id,body\n1,hello\n", "text2", "corpus_column"),
    ("t.jsonl", b'{"body": "x"}\n', None, "corpus_column"),
    ("t.jsonl", b'{"text": "x"}\nnot json\n', None, "corpus_json"),
    ("t.pdf", b"%PDF", None, "corpus_suffix"),
])
def test_bad_corpus_files_get_a_specific_error(tmp_path, name, data, column, code):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(models.InvalidCorpusError) as err:
        atlas.load_corpus(path, column=column)
    assert err.value.code == code


def test_corpus_files_in_each_format_and_size_limit(tmp_path):
    (tmp_path / "a.txt").write_text("one\n\ntwo  \n", encoding="utf-8")
    (tmp_path / "a.csv").write_text('body,text\n1,"one, two"\n2,three\n', encoding="utf-8")
    (tmp_path / "a.jsonl").write_text('{"t": "x"}\n{"t": "y"}\n', encoding="utf-8")
    assert atlas.load_corpus(tmp_path / "a.txt").texts == ("one", "two")
    assert atlas.load_corpus(tmp_path / "a.csv").texts == ("one, two", "three")
    assert atlas.load_corpus(tmp_path / "a.jsonl", column="t").texts == ("x", "y")
    big = tmp_path / "big.txt"
    with open(big, "wb") as f:  # sparse: 2 GiB on paper, nothing on disk
        f.truncate(2 << 30)
    with pytest.raises(models.InvalidCorpusError) as err:
        atlas.load_corpus(big)
    assert err.value.code == "corpus_too_large" and err.value.params["mib"] == 2048
    with pytest.raises(models.InvalidCorpusError):
        atlas.load_corpus(tmp_path / "missing.txt")
    with pytest.raises(models.InvalidCorpusError):
        atlas.corpus_from_texts("one string")


def test_shipped_corpora_hold_300_texts_of_mixed_length():
    for lang in ("en", "tr"):
        c = atlas.shipped_corpus(lang)
        assert len(c) >= 300 and len(set(c.texts)) == len(c)
        assert {"sentence", "paragraph", "long"} <= set(c.kinds)
        assert max(len(t.split()) for t in c.texts) >= 300
        rows = [json.loads(x) for x in (atlas.corpus.ASSETS / f"{lang}.jsonl").read_text(encoding="utf-8").splitlines()]
        assert all(set(r) == {"id", "kind", "topic", "text"} for r in rows)
    assert any(ch in "".join(atlas.shipped_corpus("tr").texts) for ch in "ğış")


def test_a_corpus_the_tokenizer_cannot_read_is_refused(tiny, tmp_path):
    loaded = tiny("bert")
    corpus = atlas.corpus_from_texts(["Кошка гонялась за мышью", "貓追老鼠"], name="ru")
    with pytest.raises(models.InvalidCorpusError) as err:
        atlas.build_atlas(loaded, corpus, root=tmp_path)
    assert err.value.code == "corpus_language" and err.value.params["unknown"] > 0.25
    assert not list(tmp_path.iterdir())  # nothing written


def test_bad_settings_and_a_speech_model_are_refused(tiny, tmp_path):
    loaded = tiny("gpt2")
    corpus = atlas.corpus_from_texts(TEXTS, name="t")
    for kw in ({"max_tokens": 1}, {"limit": 0}, {"repeats": -1}, {"max_tokens": True}):
        with pytest.raises(models.InvalidArgumentError):
            atlas.build_atlas(loaded, corpus, root=tmp_path, **kw)
    with pytest.raises(models.InvalidCorpusError):
        atlas.build_atlas(loaded, ["a", "b"], root=tmp_path)


def test_query_key_normalisation_keeps_every_softmax_row():
    from models.atlas.embedding import normalise

    rng = np.random.default_rng(3)
    q, k = rng.normal(size=(7, 4)) * 3, rng.normal(size=(7, 4)) + 5
    q2, k2, alpha = normalise(q, k)

    def soft(s):
        e = np.exp(s - s.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    np.testing.assert_allclose(soft(q2 @ k2.T), soft(q @ k.T), atol=1e-12)
    np.testing.assert_allclose(k2.mean(0) * alpha, q.mean(0), atol=1e-12)  # key centroid moved onto the queries'
    assert np.linalg.norm(q2, axis=1).mean() == pytest.approx(np.linalg.norm(k2, axis=1).mean())


def test_joint_embedding_places_every_query_and_key(tiny, tmp_path):
    from models.atlas.embedding import joint_embedding

    loaded = tiny("llama")
    a = atlas.build_atlas(loaded, atlas.corpus_from_texts(TEXTS[:4], name="t"), repeats=0, root=tmp_path)
    df = joint_embedding(loaded, a, "decoder", 1, 3, texts=3)
    n = sum(len(models.analyze(loaded, t).tokens) for t in TEXTS[:3])
    assert (df["role"] == "query").sum() == n and (df["role"] == "key").sum() == n
    assert set(df["kind"]) <= {"first", "special", "punctuation", "word"} and "first" in set(df["kind"])
    assert 0 < sum(df.attrs["explained"]) <= 1 and np.isfinite(df[["x", "y"]].to_numpy()).all()
    with pytest.raises(models.UnsupportedOperationError):
        joint_embedding(tiny("gpt_neo"), atlas.build_atlas(tiny("gpt_neo"), atlas.corpus_from_texts(TEXTS[:2]),
                                                           repeats=0, root=tmp_path), "decoder", 0, 0, texts=1)


def test_background_job_is_shared_and_stops_resumably(tiny, tmp_path):
    from models.atlas import jobs

    loaded = tiny("gpt2")
    corpus = atlas.corpus_from_texts(TEXTS * 3, name="job")
    job = jobs.start(loaded, corpus, repeats=0, root=tmp_path)
    assert jobs.start(loaded, corpus, repeats=0, root=tmp_path) is job or job.finished  # joined, not started twice
    job.wait(60)
    assert job.finished and job.error is None and job.done == job.total == len(TEXTS) * 3
    assert atlas.Atlas(job.folder).complete and jobs.running(job.folder) is job
    with pytest.raises(models.InvalidArgumentError):
        jobs.start(loaded, corpus, max_tokens=-1, root=tmp_path)


def test_command_line_builds_an_atlas_and_answers_bad_input_with_a_message(tiny_folder, tmp_path, monkeypatch, capsys):
    from models.__main__ import main

    monkeypatch.setenv("DIKKAT_ATLAS_ROOT", str(tmp_path / "root"))
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(TEXTS), encoding="utf-8")
    model = str(tiny_folder("gpt2"))
    assert main(["atlas", "--model", model, "--corpus", str(corpus), "--top", "previous"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["complete"] and out["texts"] == len(TEXTS) and len(out["top"]) == 8  # 2 layers x 4 heads
    assert out["top"][0]["previous"] >= out["top"][-1]["previous"]
    for argv in (["--corpus", str(tmp_path / "none.txt")], ["--corpus", str(corpus), "--top", "x"],
                 ["--corpus", str(corpus), "--max-tokens", "-3"]):
        assert main(["atlas", "--model", model, *argv]) == 2
        assert "error:" in capsys.readouterr().err


def test_label_candidates_and_intervals_by_hand():
    from models.atlas.labels import _interval, candidates, induction_scores

    rows = []
    for layer, head, prev, first, special, self_, dist, ind in [
            (0, 0, 0.9, 0.0, 0.0, 0.05, 1.0, 0.0),   # previous-token
            (0, 1, 0.1, 0.8, 0.8, 0.05, 3.0, 0.0),   # sink on the first token (a control token)
            (1, 0, 0.0, 0.1, 0.6, 0.0, 5.0, 0.0),    # [SEP]-like: control tokens other than the first
            (1, 1, 0.2, 0.1, 0.1, 0.2, 1.2, 0.0),    # local
            (1, 2, 0.0, 0.1, 0.1, 0.5, 0.6, 0.0),    # self
            (1, 3, 0.0, 0.1, 0.1, 0.0, 9.0, 0.7)]:   # induction
        rows.append({"stack": "decoder", "layer": layer, "head": head, "previous": prev, "first": first,
                     "special": special, "self": self_, "distance": dist, "induction": ind,
                     "induction_repeat": ind})
    import pandas as pd

    got = {(label, head[1], head[2]) for label, _, _, head in candidates(pd.DataFrame(rows))}
    # head 0.0 is near (distance 1) but attends its previous token: a previous-token head, not "local"
    assert got == {("previous", 0, 0), ("sink", 0, 1), ("special", 1, 0), ("local", 1, 1), ("self", 1, 2),
                   ("induction", 1, 3)}
    mean, lo, hi = _interval(np.array([1.0, 1.0, 1.0, np.nan]))
    assert (mean, lo, hi) == (1.0, 1.0, 1.0)
    w = np.zeros((6, 6))  # two copies of 3 tokens; query i attends i - 3 + 1
    for i in range(4, 6):
        w[i, i - 2] = 1
    assert induction_scores(w, 3) == 1.0


def test_causal_labels_are_stored_with_the_atlas(tiny, tmp_path):
    from models.atlas.labels import COLUMNS

    loaded = tiny("bert-mlm")  # random weights attend almost uniformly: on 3-token texts every head looks "local"
    a = atlas.build_atlas(loaded, atlas.corpus_from_texts(["a", "b", "c", "d", "e"], name="t"), repeats=0,
                          root=tmp_path)
    out = atlas.causal_labels(loaded, a, texts=4, k=2)
    assert list(out.columns) == COLUMNS and len(out) >= 1
    assert set(out["quantity"]) <= {"mask_loss", "first_share_later"}
    assert (out["lo"] <= out["delta"]).all() and (out["delta"] <= out["hi"]).all()
    assert out[out["passed"]]["lo"].gt(0).all() or out[out["passed"]]["quantity"].eq("first_share_later").all()
    stored = a.labels()
    assert stored is not None and stored.equals(out)
    with pytest.raises(models.InvalidArgumentError):
        atlas.causal_labels(tiny("gpt2"), a)  # an atlas of another model


def test_related_heads_across_atlases_find_the_same_head_of_another_corpus(tiny, tmp_path):
    loaded = tiny("gpt2")
    a = atlas.build_atlas(loaded, atlas.corpus_from_texts(TEXTS, name="one"), repeats=0, root=tmp_path)
    b = atlas.build_atlas(loaded, atlas.corpus_from_texts(TEXTS[::-1], name="two"), repeats=0, root=tmp_path)
    rel = a.related("decoder", 1, 2, k=3, across=True, root=tmp_path)
    best = rel.iloc[0]  # the same texts in another order: the same head, profile identical
    assert (best["corpus"], best["layer"], best["head"]) == ("two", 1, 2) and best["similarity"] == pytest.approx(1.0)
    assert b.related("decoder", 1, 2, k=2)["model"].eq(b.model).all()
