"""Figures built once for every session (views/shared/figures.py, issue 27): a second call with the same arguments
builds nothing and sends the browser exactly what the builder made; a caller's changes stay its own."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

from views.shared import figures, keys
from viz import heatmap as vh, model_view as vmv

LABELS = ["kedi", "fareyi", "kovaladı"]


def _sent(fig) -> dict:
    """What the browser gets: the figure's JSON, parsed (key order aside)."""
    return json.loads(pio.to_json(fig, validate=False))


def _counted(build):
    calls = []

    def counted(*args, **kwargs):
        calls.append(1)
        return build(*args, **kwargs)

    counted.__qualname__ = f"counted_{build.__qualname__}_{id(calls)}"  # a cache entry of its own per test
    return figures.shared_figure(counted), calls


def test_a_figure_is_built_once_and_is_the_builders_own():
    w = np.array([[1.0, 0, 0], [0.3, 0.7, 0], [0.2, 0.5, 0.3]])
    cached, calls = _counted(vh.head_heatmap)
    first = cached(w, LABELS, LABELS, title="katman 0", lang="tr")
    second = cached(w.copy(), list(LABELS), LABELS, title="katman 0", lang="tr")
    assert len(calls) == 1
    direct = vh.head_heatmap(w, LABELS, LABELS, title="katman 0", lang="tr")
    assert _sent(second) == _sent(direct)
    assert isinstance(second.data[0].z, np.ndarray) and np.array_equal(second.data[0].z, direct.data[0].z)
    first.update_layout(title_text="changed")  # one session's styling reaches no other session's figure
    first.data[0].z[0, 0] = 9.0  # nor a change of an array in place (plotly's figure holds copies of the kept dict's)
    first.layout.xaxis.tickvals = [0]
    third = cached(w, LABELS, LABELS, title="katman 0", lang="tr")
    assert third.layout.title.text == direct.layout.title.text and third.data[0].z[0, 0] == direct.data[0].z[0, 0]
    assert third.layout.xaxis.tickvals == direct.layout.xaxis.tickvals
    cached(w, LABELS, LABELS, title="katman 0", lang="en")  # another language, another figure
    w2 = w.copy()
    w2[2] = [0.1, 0.1, 0.8]
    cached(w2, LABELS, LABELS, title="katman 0", lang="tr")  # other weights, another figure
    assert len(calls) == 3


def test_a_figure_with_an_argument_that_has_no_key_is_built_each_time():
    def bars(values, colour_of=None):
        return go.Figure(go.Bar(y=values, marker_color=colour_of(values) if colour_of else None))

    cached, calls = _counted(bars)
    cached([1, 2], colour_of=lambda v: "#d62728")  # a function is no value the cache can key: built, not kept
    cached([1, 2], colour_of=lambda v: "#d62728")
    assert len(calls) == 2
    cached(np.array([1, 2]))
    cached(np.array([1, 2]))
    assert len(calls) == 3


def test_the_model_view_keeps_what_it_drew():
    w = np.random.default_rng(0).random((2, 3, 4, 4)).astype(np.float32)
    cached, calls = _counted(vmv.model_view)
    fig, info = cached(w, selected=(1, 2))
    again, info_again = cached(w, selected=(1, 2))
    assert len(calls) == 1 and info == info_again == vmv.model_view(w, selected=(1, 2))[1]
    assert _sent(again) == _sent(vmv.model_view(w, selected=(1, 2))[0])
    cached(w, selected=(0, 0))
    assert len(calls) == 2


def test_the_why_page_draws_its_figures_once_for_every_session(monkeypatch):
    """Issue 48: a cached rerun of Why cost 134 ms, most of it plotly building the same figures for each student. A
    second session builds none of them, styles none of them again (each figure as sent is kept too), and sends
    exactly the charts the first one sent, and those a session building and styling every figure itself would
    send."""
    from streamlit.testing.v1 import AppTest

    from views.shared import cache

    def session():
        at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "app.py"), default_timeout=600)
        for key, value in {"lang": "tr", "model_key": "minilm-l6", "text": "Kedi fareyi kovaladı.", "why_layer": 2,
                           "why_head": 5}.items():
            at.session_state[key] = value
        at.switch_page("views/why.py")
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]

    import functools

    from viz import pruning as vp
    from viz import why as vw

    from views.shared import charts

    built, styled = [], []
    real_style = charts.style
    monkeypatch.setattr(charts, "style", lambda fig, columns: styled.append(columns) or real_style(fig, columns))
    for module, name in ((vw, "neuron_figure"), (vw, "terms_figure"), (vw, "sides_figure"), (vp, "head_grid")):
        real = getattr(module, name)
        counted = functools.wraps(real)(lambda *a, _real=real, **k: built.append(_real.__name__) or _real(*a, **k))
        monkeypatch.setattr(module, name, counted)  # the same name and module: the same figures in the cache
    first = session()
    assert len(styled) >= 5
    built.clear(), styled.clear()
    second = session()
    assert built == [] and len(second) >= 5  # every chart of the page from the shared cache, none built again
    assert styled == []  # and each sent as the first session sent it: none styled and converted again
    assert second == first
    monkeypatch.setattr(cache.CACHE, "get_or_create", lambda key, make: make())  # no cache: each figure built
    assert session() == first and len(built) >= 5


def test_a_sent_figure_is_the_figure_plotly_would_send():
    """Issue 48: ``views.shared.charts.plotly_chart`` hands ``st.plotly_chart`` the figure's own properties, styled,
    not plotly's deep copy: the JSON is the one ``fig.to_dict()`` gives for the same styled figure (arrays as
    plotly's typed arrays, frames kept), for a heatmap, a scatter with a long title in two columns and a figure with
    frames; a figure built the same way has the same key, another figure or column count another key."""
    from views.shared import charts

    def figures_():
        rng = np.random.default_rng(0)
        heat = vh.head_heatmap(rng.random((3, 3)), LABELS, LABELS)
        scatter = go.Figure(go.Scatter(x=np.arange(4.0), y=rng.random(4), text=list("abcd")),
                            layout=dict(title="bir başlık " * 12, separators=",."))
        framed = go.Figure(go.Bar(x=[1, 2], y=np.array([3.0, 4.0])), frames=[go.Frame(data=[go.Bar(y=[5, 6])])])
        return heat, scatter, framed

    keys = set()
    for ours, theirs in zip(figures_(), figures_(), strict=True):
        keys.add(charts._sent_key(ours, 2))
        assert charts._sent_key(ours, 2) == charts._sent_key(theirs, 2) != charts._sent_key(theirs, 1)
        charts.style(theirs, 2)
        expected = json.loads(pio.to_json(theirs.to_dict(), validate=False))
        assert json.loads(pio.to_json(charts._as_sent(ours, 2), validate=False)) == expected
        assert "bdata" in json.dumps(expected)  # numpy arrays went as typed arrays, both ways
    assert len(keys) == 3 and None not in keys
    assert expected["frames"]  # the last one kept its frames


def test_a_figure_key_finds_a_nan_and_an_array_of_objects():
    """A figure's key (views/shared/keys.key_of) equals for equal figures even with NaN in them (NaN equals no
    NaN) and keys an array of Python objects by its items (it has no bytes to digest)."""
    a = keys.key_of({"range": [float("nan"), 1.0], "text": np.array(["kedi", None], dtype=object)}, max_depth=64)
    b = keys.key_of({"range": [float("nan"), 1.0], "text": np.array(["kedi", None], dtype=object)}, max_depth=64)
    assert a == b and a is not keys.UNKEYED
    assert a != keys.key_of({"range": [float("nan"), 2.0], "text": np.array(["kedi", None], dtype=object)},
                             max_depth=64)


def test_a_kept_figure_is_made_only_when_something_of_it_is_used():
    """Issue 48: a figure from the shared cache is made (plotly's deep copy of the kept dict) only when read or
    changed; handed untouched to plotly_chart it is keyed by its builder and arguments, not by a digest of every
    property. Read or changed, it is an ordinary figure, keyed by what it now holds."""
    from views.shared import charts

    w = np.array([[1.0, 0, 0], [0.3, 0.7, 0], [0.2, 0.5, 0.3]])
    cached, calls = _counted(vh.head_heatmap)
    fig, same = cached(w, LABELS, LABELS, title="a"), cached(w.copy(), LABELS, LABELS, title="a")
    assert isinstance(fig, go.Figure) and not fig.made and len(calls) == 1
    key = charts._sent_key(fig, 1)
    assert not fig.made and key == charts._sent_key(same, 1) != charts._sent_key(same, 2)
    assert key[1] != charts._sent_key(cached(w, LABELS, LABELS, title="b"), 1)[1]
    direct = vh.head_heatmap(w, LABELS, LABELS, title="a")
    assert _sent(fig) == _sent(direct) and fig.made  # made on first use, the builder's own figure
    same.update_layout(title_text="changed")
    assert same.made and charts._sent_key(same, 1)[0] == "sent figure"  # keyed by what it holds now
    assert _sent(cached(w, LABELS, LABELS, title="a"))["layout"]["title"]["text"] == "a"


def test_a_kept_figure_copies_and_pickles_as_a_plain_figure():
    """A copy or a pickle of a kept figure (made or not) is a ``go.Figure`` holding the same figure; the kept one is
    left as it was."""
    import copy
    import pickle

    w = np.array([[1.0, 0, 0], [0.3, 0.7, 0], [0.2, 0.5, 0.3]])
    cached, _ = _counted(vh.head_heatmap)
    direct = vh.head_heatmap(w, LABELS, LABELS, title="a")
    for make in (copy.deepcopy, copy.copy, lambda f: pickle.loads(pickle.dumps(f))):
        copied = make(cached(w, LABELS, LABELS, title="a"))
        assert type(copied) is go.Figure and _sent(copied) == _sent(direct)
