"""Figures of "Why a head attends" (viz/why.py): the term matrix keeps its sums when cut to the largest parts, names
and tokens are drawn as text, the actual distance is marked on the RoPE curve, numbers follow the language; and the
page's strings (assets/i18n/why.json) name every reason models.why can give."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import numpy as np
import pytest

from viz import numbers as nb
from viz import why as vw

ROOT = Path(__file__).resolve().parents[2]
RNG = np.random.default_rng(0)
M = RNG.normal(size=(11, 13))
QN = [f"q{a}" for a in range(11)]
KN = [f"k{b}" for b in range(12)] + ["<b>bias</b>"]


def test_term_table_keeps_every_sum():
    cells, rows, cols, rest_row, rest_col = vw.term_table(M, top=4)
    assert cells.shape == (5, 5) and rest_row and rest_col
    assert list(rows) == list(np.argsort(-np.abs(M.sum(1)))[:4]) \
        and list(cols) == list(np.argsort(-np.abs(M.sum(0)))[:4])
    np.testing.assert_allclose(cells.sum(), M.sum())
    np.testing.assert_allclose(cells[:4].sum(1), M.sum(1)[rows])  # each kept row: its part's whole query-side total
    np.testing.assert_allclose(cells[:, :4].sum(0), M.sum(0)[cols])
    whole, *_, rest_row, rest_col = vw.term_table(M, top=20)
    assert whole.shape == M.shape and not rest_row and not rest_col


def test_terms_figure_draws_the_sums_and_escapes_names():
    fig = vw.terms_figure(M, QN, KN, top=12, rest_name="the rest", sum_name="sum", lang="tr")
    main, sums = fig.data
    assert np.asarray(main.z).shape == (11, 13)  # every part kept: no "rest" row or column
    grid = np.asarray(sums.z, dtype=object)
    assert grid.shape == (12, 14) and grid[:11, :13].tolist() == [[None] * 13] * 11
    np.testing.assert_allclose(np.asarray(grid[:11, 13], dtype=float), np.asarray(main.z).sum(1))
    np.testing.assert_allclose(float(grid[11, 13]), M.sum())
    assert sums.text[11][13] == nb.num(M.sum(), 2, "tr", sign=True)  # the language's decimal comma
    assert main.text[0][0] == nb.num(np.asarray(main.z)[0, 0], 2, "tr", sign=True) and "-0,00" not in str(main.text)
    assert "&lt;b&gt;bias&lt;/b&gt;" in fig.layout.xaxis.ticktext and "<b>bias</b>" not in fig.layout.xaxis.ticktext
    cut = vw.terms_figure(M, QN, KN, top=3, rest_name="rest")
    assert list(cut.layout.yaxis.ticktext)[-2:] == ["rest", "sum"] and np.asarray(cut.data[0].z).shape == (4, 4)
    with pytest.raises(ValueError):
        vw.terms_figure(M, QN[:3], KN)


def test_neuron_and_side_bars():
    q, k = RNG.normal(size=8), RNG.normal(size=8)
    fig = vw.neuron_figure(q, k, q * k, names=("q", "k", "q⊙k"))
    assert len(fig.data) == 3 and [fig.data[r].xaxis for r in range(3)] == ["x", "x2", "x3"]
    assert list(fig.data[2].marker.color) == [vw.UP if v >= 0 else vw.DOWN for v in q * k]
    with pytest.raises(ValueError):
        vw.neuron_figure(q, k[:4], q)
    fig = vw.sides_figure(M.sum(1), M.sum(0), QN, KN, top=5, rest_name="rest")
    qbars = fig.data[0]
    assert len(qbars.x) == 6 and list(fig.layout.yaxis.ticktext)[-1] == "rest"
    np.testing.assert_allclose(sum(qbars.x), M.sum())  # the bars of a side add up to the score


def test_rope_figures_mark_the_distance():
    d = np.arange(10)
    fig = vw.rope_figure(d, np.cos(d), actual=3, actual_score=0.5, actual_name="this <pair>")
    assert len(fig.data) == 2 and list(fig.data[1].x) == [3] and list(fig.data[1].y) == [0.5]
    assert fig.data[1].name == "this &lt;pair&gt;"
    assert len(vw.rope_figure(d, np.cos(d), actual=-2).data) == 1  # a key after the query: not on the curve
    keys = vw.rope_keys_figure(np.ones(5), -np.ones(5), ["a", "<s>", "c", "d", "e"], j=1)
    assert list(keys.layout.xaxis.ticktext)[1] == "<b>&lt;s&gt;</b>"


def test_composition_figure_draws_the_earlier_layers():
    scores = np.full((3, 4, 5), np.nan)
    scores[:, :2] = RNG.uniform(size=(3, 2, 5))
    fig = vw.composition_figure(scores, 2, titles=("Q", "K", "V"))
    assert len(fig.data) == 3 and all(np.asarray(t.z).shape == (2, 5) for t in fig.data)
    assert fig.layout.coloraxis.cmax == pytest.approx(float(np.nanmax(scores)))
    with pytest.raises(ValueError):
        vw.composition_figure(scores, 0)


BUILDERS = {
    "neuron_figure": lambda lang: vw.neuron_figure(np.full(4, 1e-7), np.ones(4), np.full(4, 1e-7), lang=lang),
    "terms_figure": lambda lang: vw.terms_figure(M * 1e-7, QN, KN, lang=lang),
    "sides_figure": lambda lang: vw.sides_figure(M.sum(1), M.sum(0) * 1e-7, QN, KN, lang=lang),
    "rope_figure": lambda lang: vw.rope_figure(np.arange(4), np.full(4, 1e-7), actual=1, lang=lang),
    "rope_keys_figure": lambda lang: vw.rope_keys_figure(np.full(3, 1e-7), np.ones(3), ["a", "b", "c"], lang=lang),
    "composition_figure": lambda lang: vw.composition_figure(np.full((3, 2, 2), 1e-7), 1, lang=lang),
}


def test_every_builder_is_checked_and_takes_lang():
    found = {name for name, fn in inspect.getmembers(vw, inspect.isfunction)
             if fn.__module__ == vw.__name__ and not name.startswith("_") and "Figure" in str(
                 inspect.signature(fn).return_annotation)}
    assert found == set(BUILDERS)
    assert all("lang" in inspect.signature(getattr(vw, name)).parameters for name in found)


@pytest.mark.parametrize("lang", ("en", "tr"))
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_figures_write_numbers_the_languages_way(name, lang):
    """As tests/viz/test_number_format.py checks every other builder: the language's separators, no SI suffix."""
    fig = BUILDERS[name](lang)
    assert fig.layout.separators == nb.separators(lang)
    for trace in fig.data:
        for attr in ("hovertemplate", "texttemplate"):
            value = getattr(trace, attr, None)
            for spec in re.findall(r"%\{[^}:]*:([^}]*)\}", value if isinstance(value, str) else ""):
                assert not spec.strip().endswith("s"), (value, spec)
    layout = fig.layout
    parts = [layout[k] for k in layout if k.startswith(("xaxis", "yaxis")) and layout[k] is not None]
    parts += [t.colorbar for t in fig.data if "colorbar" in t and t.showscale is not False]
    for part in parts:
        assert part.tickformat or part.exponentformat not in (None, "B", "SI", "SI extended"), part


def test_the_pages_strings_are_its_own():
    """Every key of why.json is the page's (``why_``, and its title ``page_why``), in both languages (the reasons
    of a refusal are checked against models.why in tests/app/test_why_page.py)."""
    strings = json.loads((ROOT / "assets" / "i18n" / "why.json").read_text(encoding="utf-8"))
    assert all(key.startswith("why_") or key == "page_why" for key in strings)
    assert all(set(entry) == {"en", "tr"} for entry in strings.values())
