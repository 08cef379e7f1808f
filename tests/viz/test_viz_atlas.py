"""The Head atlas's builders (viz/atlas.py): corpus text in a snippet is escaped and long texts are cut around the
marked tokens; tokens in the queries-and-keys plane never reach plotly as markup or template; the grid outlines the
picked head."""

from __future__ import annotations


import numpy as np

from viz import atlas as va


def _spans(text: str) -> tuple[list[int], list[int]]:
    starts, ends, pos = [], [], 0
    for word in text.split(" "):
        starts.append(pos)
        ends.append(pos + len(word))
        pos += len(word) + 1
    return starts, ends


def test_a_snippet_escapes_the_text_and_marks_query_and_keys():
    text = "<b>bold</b> *star* <script>x()</script> & [a](http://e.f)"
    starts, ends = _spans(text)
    out = va.snippet_html(text, starts, ends, 1, [0, 2, -1], [0.7, 0.005, 0.0], lang="tr")
    assert "<b>" not in out and "<script>" not in out and "&lt;b&gt;bold&lt;/b&gt;" in out
    assert "*star*" in out and "&amp;" in out and "[a](http://e.f)" in out
    assert out.count("<span") == 2  # the query and the one key over min_weight (0.005 is not marked)
    assert 'title="anahtar' not in out and "0,700" in out  # numbers in the language's style


def test_a_long_text_is_cut_around_the_marks_and_a_mark_without_characters_is_shown():
    text = " ".join(f"w{i}" for i in range(400))
    starts, ends = _spans(text)
    starts.append(len(text))
    ends.append(len(text))  # an added control token: no characters
    out = va.snippet_html(text, starts, ends, 200, [10, 400], [0.5, 0.4])
    assert len(out) < len(text) and out.count("…") >= 2 and "w200" in out and "w10" in out and "w100<" not in out
    assert "◆" in out


def test_the_plane_and_the_grid_keep_tokens_as_text():
    hostile = ["<s>", "a<b>c", "%{fullData.name}", "x&y"]
    fig = va.qk_scatter(np.arange(4.0), np.arange(4.0), ["query", "key", "query", "key"],
                        ["first", "word", "punctuation", "special"], hostile, [0, 0, 1, 1], [0, 1, 0, 1],
                        role_names={"query": "q", "key": "k"}, kind_names={}, lang="en")
    raw = fig.to_json()
    assert "<s>" not in raw and "a<b>c" not in raw and "&lt;s&gt;" in raw
    assert all("fullData" not in (tr.hovertemplate or "") for tr in fig.data)
    grid = va.metric_grid(np.random.default_rng(0).random((3, 4)), selected=(1, 2), lang="tr")
    box = grid.layout.shapes[0]
    assert grid.data[-1].customdata is not None and (box.x0, box.x1, box.y0, box.y1) == (1.5, 2.5, 0.5, 1.5)
    assert grid.layout.separators == ",."
