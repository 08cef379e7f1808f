"""Projector mode (issue 29, point 6): the sidebar's text size switch (Normal / Large / Projector) in both languages,
kept in the link and read back from it, and a figure's fonts multiplied by its factor (the plotly JSON a chart
sends), while the builders in viz/ keep their sizes for notebooks."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest
from streamlit.testing.v1 import AppTest

from views.shared.scale import AXIS_TITLE_PX, BASE_PX, TITLE_PX, scale_figure
from viz.heatmap import head_heatmap

APP = str(Path(__file__).resolve().parents[2] / "app.py")
NAMES = {"en": ("Text size", ["Normal", "Large", "Projector"]),
         "tr": ("Yazı boyutu", ["Normal", "Büyük", "Projeksiyon"])}


def run(query: dict | None = None, lang: str = "en") -> AppTest:
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["lang"] = lang
    at.session_state["model_key"] = "minilm-l6"
    at.session_state["text"] = "The cat chased the mouse."
    if query:
        at.query_params = dict(query)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def css_scale(at: AppTest) -> float:
    """The ``--dk-scale`` the page sets for assets/css/app.css (app.css itself sets the default, 1)."""
    for element in at.get("html"):
        found = re.match(r"<style>:root \{ --dk-scale: ([0-9.]+); \}</style>", element.proto.body.strip())
        if found:
            return float(found.group(1))
    raise AssertionError("no --dk-scale on the page")


def figures(at: AppTest) -> list[dict]:
    return [json.loads(e.proto.spec) for e in at.main if type(e).__name__ == "UnknownElement"
            and e.type == "plotly_chart"]


def heatmap(at: AppTest) -> dict:
    return next(f for f in figures(at) if len(f["data"]) == 1 and f["data"][0]["type"] == "heatmap")


def zoom(at: AppTest) -> float:
    frame = next(e for e in at.main if type(e).__name__ == "UnknownElement" and e.type == "iframe")
    data = re.search(r'id="hv-data">(.*?)</script>', frame.proto.srcdoc, re.S).group(1)
    return json.loads(data)["layout"]["zoom"]


@pytest.mark.parametrize("lang", ["en", "tr"])
def test_the_switch_is_in_the_sidebar_in_both_languages(lang):
    at = run(lang=lang)
    switch = at.sidebar.segmented_control(key="scale")
    label, names = NAMES[lang]
    assert switch.label == label and switch.options == names
    assert switch.value == "normal" and css_scale(at) == 1.0
    assert "scale" not in at.query_params  # the normal size keeps the link short


def test_the_text_size_goes_into_the_link_and_comes_back_from_it():
    at = run()
    normal_zoom = zoom(at)
    at.sidebar.segmented_control(key="scale").set_value("projector").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.query_params["scale"] == "projector" and css_scale(at) == 1.5
    assert normal_zoom < zoom(at) <= normal_zoom * 1.5  # the head view: its zoom times the factor, within its column
    at.switch_page("views/pruning.py").run()  # another page keeps it
    assert at.sidebar.segmented_control(key="scale").value == "projector" and css_scale(at) == 1.5
    assert at.query_params["scale"] == "projector"

    link = {key: at.query_params[key] for key in at.query_params}
    opened = run(link, lang="tr")  # a teacher's link, opened in a fresh session
    assert opened.sidebar.segmented_control(key="scale").value == "projector" and css_scale(opened) == 1.5
    assert css_scale(run({"scale": "large"})) == 1.25
    junk = run({"scale": "huge"})  # junk in a link: the normal size, and out of the link
    assert junk.sidebar.segmented_control(key="scale").value == "normal" and "scale" not in junk.query_params


def test_a_figure_s_fonts_are_multiplied_by_the_factor():
    """The head heatmap as the page sends it: at the normal size the builder leaves the sizes to the theme (viz/
    unchanged); in projector mode every text of the figure is written out 1.5 times the theme's, and the top
    margin over the key labels grows with them."""
    normal = heatmap(run({"view": "heatmap"}))
    big = heatmap(run({"view": "heatmap", "scale": "projector"}))
    n, b = normal["layout"], big["layout"]
    assert "size" not in n.get("font", {}) and "size" not in n["title"].get("font", {})
    assert b["font"]["size"] == BASE_PX * 1.5 and b["title"]["font"]["size"] == TITLE_PX * 1.5
    for axis in ("xaxis", "yaxis"):
        assert b[axis]["title"]["font"]["size"] == AXIS_TITLE_PX * 1.5
        assert b[axis]["tickfont"]["size"] == BASE_PX * 1.5  # 8 labels: room for them at the larger size
    assert b["hoverlabel"]["font"]["size"] == BASE_PX * 1.5
    bar = big["data"][0]["colorbar"]
    assert bar["tickfont"]["size"] == bar["title"]["font"]["size"] == BASE_PX * 1.5
    assert b["margin"]["t"] == round(n["margin"]["t"] * 1.5)
    assert b["height"] >= n["height"] + b["margin"]["t"] - n["margin"]["t"]


def test_scale_figure_multiplies_sizes_a_builder_set_and_keeps_labels_apart():
    fig = go.Figure(go.Scatter(x=[0, 1], y=[0, 1], mode="text", text=["a", "b"], textfont=dict(size=13)))
    fig.add_annotation(x=0, y=0, text="note", font=dict(size=11))
    fig.update_layout(title=dict(text="t", font=dict(size=13)), legend=dict(y=-0.3), margin=dict(t=40, b=60),
                      height=300)
    scale_figure(fig, 1.25)
    assert fig.data[0].textfont.size == 16.2 and fig.layout.annotations[0].font.size == 13.8
    assert fig.layout.title.font.size == 16.2 and fig.layout.legend.y == pytest.approx(-0.375)
    assert (fig.layout.margin.t, fig.layout.margin.b, fig.layout.height) == (50, 75, 325)
    assert scale_figure(go.Figure(), 1.0).layout.font.size is None  # the normal size changes nothing

    # 40 query rows at 18 px need a taller plot; 40 upright key labels keep the size their column allows (>= 12 px)
    labels = [f"token{i}" for i in range(40)]
    fig = head_heatmap(np.full((40, 40), 1 / 40), labels, labels, height=600)  # rows of 12 px at the normal size
    plot = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    scale_figure(fig, 1.5, width=800)
    grown = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    assert grown / 40 >= 1.3 * 18 - 0.1 and grown > plot
    assert BASE_PX <= fig.layout.xaxis.tickfont.size < BASE_PX * 1.5
