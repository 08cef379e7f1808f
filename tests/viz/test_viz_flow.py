"""Figures of the information flow (viz/flow.py): where nodes and edges are drawn, labels as plain visible text."""

from __future__ import annotations

import numpy as np

from viz import flow as vf


def test_route_figure_places_nodes_and_bins_edges_by_contribution():
    nodes = [("in", 2, 1), ("mid", 1, 1), ("mlp", 1, 1), ("in", 1, 0), ("in", 1, 1)]
    edges = [(("mid", 1, 1), ("in", 2, 1), 0.9, "residual"), (("mlp", 1, 1), ("in", 2, 1), 0.1, "mlp"),
             (("in", 1, 0), ("mid", 1, 1), 0.6, "attention"), (("in", 1, 1), ("mid", 1, 1), 0.3, "residual")]
    fig = vf.route_figure(nodes, edges, ["<b>", "cat"], 2, kind_names={"attention": "dikkat"})
    assert vf.node_xy(("mid", 1, 1)) == (1, 1.5) and vf.node_xy(("mlp", 1, 1)) == (1.3, 1.75)
    lines = [t for t in fig.data if t.mode == "lines"]
    attention = [t for t in lines if t.name == "dikkat"]
    assert len(attention) == 1 and list(attention[0].x) == [0, 1, None] and list(attention[0].y) == [1.0, 1.5, None]
    residual = sorted((t.line.width, len(t.x) // 3) for t in lines if t.legendgroup == "residual")
    assert residual == [(1 + 8 * 0.5, 1), (1 + 8 * 1.01, 1)]  # 0.3 and 0.9 fall in different width bins
    markers = fig.data[-1]
    assert [c[0] for c in markers.customdata] == ["cat", "cat", "cat", "&lt;b&gt;", "cat"]  # escaped, never markup
    assert list(fig.layout.xaxis.ticktext) == ["&lt;b&gt;", "cat"]


def test_lens_figure_shows_spaces_and_escapes_tokens():
    fig = vf.lens_figure([[" chased", "\n"], ["<s>", ""]], np.array([[0.5, 0.2], [0.9, 0.0]]), ["embeddings", "L0"])
    assert [list(row) for row in fig.data[0].text] == [["␣chased", "⏎"], ["&lt;s&gt;", "∅"]]
    assert list(fig.layout.yaxis.ticktext) == ["embeddings", "L0"]


def test_share_figure_bars():
    fig = vf.share_figure(np.array([0.6, 0.7]), np.array([0.2, 0.3]), names=("a", "b"))
    assert [t.name for t in fig.data] == ["a", "b"] and list(fig.data[1].y) == [0.2, 0.3]
