"""viz.head_masks: the layers × heads grid of each head's pattern, and the kept-share maps per pattern kind
(no model is loaded)."""

from __future__ import annotations

import numpy as np
import pytest

from viz import head_masks as vh


def test_kind_of_a_pattern():
    assert vh.kind_of("sink_window:64,4") == "sink_window"
    assert vh.kind_of("native") == "full" and vh.kind_of("Block-Sparse:64,2") == "block_sparse"


def test_pattern_grid_colours_each_kind_and_names_the_pattern_on_hover():
    patterns = [["full", "sink_window:8,4", "full"], ["vertical_slash:4,4", "sink_window:8,4", "full"]]
    fig = vh.pattern_grid(patterns, kind_labels={"full": "FULL", "sink_window": "WINDOW"}, title="t", lang="tr")
    heat = fig.data[0]
    z = np.asarray(heat.z)
    assert z.shape == (2, 3)
    # one index per kind, in the legend's order: full, sink_window, vertical_slash
    assert z[0, 0] == z[0, 2] == z[1, 2] == 0 and z[0, 1] == z[1, 1] == 1 and z[1, 0] == 2
    legend = [tr.name for tr in fig.data[1:]]
    assert legend == ["FULL", "WINDOW", "vertical_slash"]
    text = np.asarray(heat.text)
    assert text[0, 1] == "WINDOW · sink_window:8,4" and text[1, 0] == "vertical_slash · vertical_slash:4,4"
    colours = {tr.name: tr.marker.color for tr in fig.data[1:]}
    assert colours["FULL"] == vh.KIND_COLOURS["full"] and colours["WINDOW"] == vh.KIND_COLOURS["sink_window"]
    assert fig.layout.yaxis.range == (1.5, -0.5)  # layer 0 at the top
    assert fig.layout.separators == ",."


def test_pattern_grid_of_one_kind_and_bad_input():
    fig = vh.pattern_grid([["full"] * 4] * 3)
    assert np.all(np.asarray(fig.data[0].z) == 0) and len(fig.data) == 2
    with pytest.raises(ValueError):
        vh.pattern_grid([])


def test_kept_share_figure_one_map_per_pattern_on_one_percent_scale():
    share = np.random.default_rng(0).uniform(0, 1, (5, 3, 4))
    fig = vh.kept_share_figure(share, list("abcde"), title="t", lang="en")
    maps = [tr for tr in fig.data if tr.type == "heatmap"]
    assert len(maps) == 5
    np.testing.assert_allclose(np.asarray(maps[2].z), share[2] * 100)
    assert all(m.zmin == 0 and m.zmax == 100 for m in maps)
    assert [m.showscale for m in maps] == [True, False, False, False, False]
    assert maps[0].colorbar.ticksuffix == " %"
    assert vh.kept_share_figure(share, list("abcde"), lang="tr").data[0].colorbar.tickprefix == "%"
    assert [a.text for a in fig.layout.annotations] == list("abcde")
    with pytest.raises(ValueError):
        vh.kept_share_figure(share, ["a"])
    with pytest.raises(ValueError):
        vh.kept_share_figure(share[0], ["a"])
