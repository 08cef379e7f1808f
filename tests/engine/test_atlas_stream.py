"""What the atlas on Ray stands on, without Ray (issue 46): a corpus file read in a stream (the same texts and
digest as in memory, every bad file refused before any work), the time left from the tokens left, each head's
verdict where heads are ranked, and the texts cut to the token limit."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import models
from models import atlas
from models.atlas.eta import Eta
from models.atlas.stream import CorpusFile, open_corpus
from models.atlas.verdict import verdicts

TEXTS = ["  the cat  ", "", "kedi fareyi kovaladı", "x" * 250_000, "a, b; c"]


def write_all(folder) -> dict:
    """The same column of texts as .txt, .jsonl, .csv and .parquet files."""
    files = {"txt": folder / "c.txt", "jsonl": folder / "c.jsonl", "csv": folder / "c.csv",
             "parquet": folder / "c.parquet"}
    files["txt"].write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    files["jsonl"].write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(TEXTS)),
                              encoding="utf-8")
    pd.DataFrame({"id": range(len(TEXTS)), "text": TEXTS}).to_csv(files["csv"], index=False)
    pq.write_table(pa.table({"id": list(range(len(TEXTS))), "text": TEXTS}), files["parquet"], row_group_size=2)
    return files


@pytest.mark.parametrize("kind", ["txt", "jsonl", "csv", "parquet"])
def test_a_streamed_file_gives_the_in_memory_corpus_texts_and_digest(tmp_path, kind):
    """Stripped, empty texts left out, a text cut to 200,000 characters: what corpus_from_texts keeps, so the same
    digest (and atlas folder) as the in-memory corpus; the .parquet file also loads whole."""
    path = write_all(tmp_path)[kind]
    streamed = CorpusFile(path)
    whole = atlas.corpus_from_texts(TEXTS, name=path.name)
    assert tuple(streamed.texts()) == whole.texts == ("the cat", "kedi fareyi kovaladı", "x" * 200_000, "a, b; c")
    assert streamed.digest == whole.digest and len(streamed) == 4
    assert list(streamed.scan()[2]) == [7, 20, 200_000, 7]
    assert streamed.head(2).texts == whole.texts[:2]
    assert atlas.load_corpus(path).digest == whole.digest
    assert atlas.corpus_from_bytes(path.read_bytes(), name=path.name, suffix=path.suffix).texts == whole.texts


def test_the_stream_reads_as_far_as_it_is_asked(tmp_path):
    """A text before a broken line is read without reading the line (the file is not read whole); the checking
    pass refuses the whole file before any work, naming the line."""
    path = tmp_path / "c.jsonl"
    path.write_text('{"text": "one"}\n{"text": "two"}\nnot json\n', encoding="utf-8")
    streamed = CorpusFile(path)
    assert next(iter(streamed.texts())) == "one"
    with pytest.raises(models.InvalidCorpusError) as err:
        streamed.scan()
    assert err.value.code == "corpus_json" and err.value.params["line"] == 3


@pytest.mark.parametrize("name, data, column, code", [
    ("empty.txt", b"\n  \n", None, "corpus_empty"),
    ("bin.txt", b"abc\x00\x01\x02", None, "corpus_binary"),
    ("latin.txt", "çay".encode("latin-1"), None, "corpus_binary"),
    ("t.csv", b"id,body\n1,hello\n", None, "corpus_column"),
    ("t.jsonl", b'{"body": "x"}\n', None, "corpus_column"),
    ("empty.jsonl", b"\n\n", None, "corpus_empty"),
    ("t.parquet", b"PAR1 not really", None, "corpus_binary"),
])
def test_a_bad_streamed_file_is_refused_by_the_checking_pass(tmp_path, name, data, column, code):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(models.InvalidCorpusError) as err:
        CorpusFile(path, column=column).scan()
    assert err.value.code == code


def test_a_parquet_file_without_the_column_names_its_columns(tmp_path):
    path = write_all(tmp_path)["parquet"]
    with pytest.raises(models.InvalidCorpusError) as err:
        CorpusFile(path, column="body").scan()
    assert err.value.code == "corpus_column" and err.value.params["columns"] == "id, text"
    for bad, code in ((tmp_path / "none.jsonl", "corpus_missing"), (tmp_path / "c.txt", "")):
        if code:
            with pytest.raises(models.InvalidCorpusError) as err:
                CorpusFile(bad)
            assert err.value.code == code
    (tmp_path / "c.pdf").write_bytes(b"%PDF")
    with pytest.raises(models.InvalidCorpusError) as err:
        CorpusFile(tmp_path / "c.pdf")
    assert err.value.code == "corpus_suffix"
    assert open_corpus("tr").name == "tr" and isinstance(open_corpus(path), CorpusFile)


def test_time_left_counts_the_tokens_a_text_can_give_at_the_throughput_after_warm_up():
    """Texts of 100, 400 and 100,000 characters at 0.25 tokens per character, cut to 512 tokens: 25 + 100 + 512
    tokens in all. The first text (warm-up, 10 s) is not timed; the second takes 1 s for 100 tokens, so the
    last 512 tokens are 5.12 s away. Tokens per character are measured on uncut texts only."""
    now = [0.0]
    eta = Eta([100, 400, 100_000], 512, tokens_per_char=0.25, clock=lambda: now[0])
    assert eta.tokens_left() == 25 + 100 + 512 and eta.seconds_left() is None
    now[0] = 10.0
    eta.add(0, 25, 0)
    eta.tick()
    assert eta.seconds_left() is None
    now[0] = 11.0
    eta.add(1, 100, 0)
    eta.tick()
    assert eta.tokens_per_second() == pytest.approx(100.0)
    assert eta.seconds_left() == pytest.approx(5.12)
    assert eta.fraction_tokens() == pytest.approx(125 / 637)
    eta.add(2, 512, 99_488)
    assert eta.tokens_per_char == pytest.approx(125 / 500) and eta.cut == 1 and eta.tokens_left() == 0
    resumed = Eta([100, 400], 512, 0.25)
    resumed.skip(0)
    assert resumed.tokens_left() == 100


def test_time_left_fits_what_a_text_of_each_length_costs():
    """Texts whose analysis takes 0.01 + 1e-5·n² s (an atlas's work grows with the square of the tokens): read
    short ones on 2 workers (twice as much analysis time as wall time), the estimate for the long ones left is
    the fitted cost halved, not the short texts' rate per token (which would say 9 times less)."""
    now = [0.0]
    short = [10 + 3 * i for i in range(31)]  # tokens 10 .. 100; 0.25 tokens per character
    eta = Eta([4 * n for n in short] + [512 * 4] * 10, 512, tokens_per_char=0.25, clock=lambda: now[0])
    cost = lambda n: 0.01 + 1e-5 * n * n  # noqa: E731
    for i, n in enumerate(short):
        eta.add(i, n, 0, 5.0 if i == 0 else cost(n))  # the first text's warm-up is not fitted
        now[0] += cost(n) / 2
        eta.tick()
    assert eta.cost() == pytest.approx([0.01, 0.0, 1e-5 * 512 ** 2], rel=1e-6, abs=1e-9)
    assert eta.seconds_left() == pytest.approx(10 * cost(512) / 2, rel=1e-6)
    assert eta.tokens_left() / eta.tokens_per_second() < eta.seconds_left() / 5


def test_each_head_carries_its_verdict_and_effect_interval():
    """A passed test makes a head proven; tested and failed, pattern only; not among the candidates, untested.
    Ranked by a label's pattern metric, the verdict is that label's (a head proven as a sink is untested as
    an induction head)."""
    heads = pd.DataFrame({"stack": ["decoder"] * 3, "layer": [17, 18, 2], "head": [4, 6, 0]})
    labels = pd.DataFrame([
        {"stack": "decoder", "layer": 17, "head": 4, "label": "induction", "quantity": "second_copy_loss",
         "delta": 0.066, "lo": -0.015, "hi": 0.127, "passed": False, "primary": True},
        {"stack": "decoder", "layer": 18, "head": 6, "label": "induction", "quantity": "second_copy_loss",
         "delta": 2.80, "lo": 2.5, "hi": 3.1, "passed": True, "primary": True},
        {"stack": "decoder", "layer": 17, "head": 4, "label": "sink", "quantity": "first_share_later",
         "delta": -0.2, "lo": -0.3, "hi": -0.1, "passed": True, "primary": True},
        {"stack": "decoder", "layer": 17, "head": 4, "label": "sink", "quantity": "loss",
         "delta": 9.0, "lo": 8.0, "hi": 10.0, "passed": True, "primary": False},
    ])
    ind = verdicts(labels, heads, "induction_repeat")
    assert list(ind["verdict"]) == ["pattern_only", "proven", "untested"]
    assert ind.loc[0, ["effect", "effect_lo", "effect_hi"]].tolist() == [0.066, -0.015, 0.127]
    assert ind.loc[1, "effect_quantity"] == "second_copy_loss" and np.isnan(ind.loc[2, "effect"])
    best = verdicts(labels, heads)
    assert list(best["verdict"]) == ["proven", "proven", "untested"]
    assert best.loc[0, "verdict_label"] == "sink" and best.loc[0, "effect"] == -0.2
    assert list(verdicts(None, heads)["verdict"]) == ["untested"] * 3
    assert list(verdicts(labels, heads, "first")["verdict"]) == ["proven", "untested", "untested"]


def test_rank_table_and_find_heads_carry_the_verdicts_stored_with_the_atlas(tiny, tmp_path):
    """Labels stored with an atlas reach its table, its ranking and the cross-atlas finder."""
    loaded = tiny("gpt2")
    a = atlas.build_atlas(loaded, atlas.corpus_from_texts(["the cat sat on the mat"] * 3), repeats=0,
                          root=tmp_path)
    assert set(a.table()["verdict"]) == {"untested"}
    top = a.rank("previous", top=1).iloc[0]
    stored = pd.DataFrame([{"stack": top["stack"], "layer": int(top["layer"]), "head": int(top["head"]),
                            "label": "previous", "pattern": "previous", "pattern_value": top["previous"],
                            "quantity": "downstream_induction", "delta": -0.3, "lo": -0.4, "hi": -0.2,
                            "passed": True, "texts": 3, "primary": True}])
    from models.atlas.labels import save_labels

    save_labels(a, stored)
    assert a.rank("previous", top=1).iloc[0]["verdict"] == "proven"
    assert (a.table()["verdict"] == "proven").sum() == 1
    found = atlas.find_heads("previous", top=1, root=tmp_path).iloc[0]
    assert (found["verdict"], found["effect_hi"]) == ("proven", -0.2)
    assert atlas.find_heads("entropy", top=50, root=tmp_path)["verdict"].value_counts()["proven"] == 1


def test_texts_cut_to_the_token_limit_are_listed_with_how_much_was_cut(tiny, tmp_path):
    loaded = tiny("gpt2")
    texts = ["ab", "abcdefghijk", "xyz q"]  # under 20 characters: the character-level tiny tokenizer is let in
    a = atlas.build_atlas(loaded, atlas.corpus_from_texts(texts), max_tokens=6, repeats=0, root=tmp_path)
    cut = a.cut_texts()
    lengths = [len(loaded.tokenizer(t)["input_ids"]) for t in texts]
    assert dict(zip(cut["text"], cut["truncated"])) == {i: n - 6 for i, n in enumerate(lengths) if n > 6}
    assert set(cut["tokens"]) == {6} and cut["start"].iloc[0] in texts
