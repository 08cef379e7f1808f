"""One number formatter per language (issue 33, item 6): a Turkish teacher saw bar labels "13.45" beside a table's
"13,45", "%30'un" beside "89 %", a difference colour bar reading "1µ" and "1 of 270 heads off (0 %)".

The formatter's outputs in both languages (:mod:`viz.numbers`); every figure builder the pages use writes its
numbers the language's way (``layout.separators``, no SI suffix on any axis, colour bar, hover or text); the
texts of ``assets/i18n`` put the percent sign on the language's side. No model is loaded.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest

from viz import (
    alignment, audio_alignment, cost, experiments, flow, head_masks, heatmap, masks, model_view, positions, pruning,
    qkv,
)
from viz import numbers as nb

ROOT = Path(__file__).resolve().parents[2]
LANGS = ("en", "tr")


# ------------------------------------------------------------------------------------------ the formatter


@pytest.mark.parametrize("value, decimals, en, tr", [
    (13.45, 2, "13.45", "13,45"),
    (1234.5, 1, "1,234.5", "1.234,5"),
    (-0.5, 3, "-0.500", "-0,500"),
    (-1e-7, 3, "0.000", "0,000"),  # never "-0.000"
    (float("inf"), 2, "∞", "∞"),
    (float("-inf"), 2, "-∞", "-∞"),
])
def test_decimals_and_thousands(value, decimals, en, tr):
    assert (nb.num(value, decimals, "en"), nb.num(value, decimals, "tr")) == (en, tr)


def test_integers_signed_scientific_and_general():
    assert (nb.integer(131072, "en"), nb.integer(131072, "tr")) == ("131,072", "131.072")
    assert nb.integer(float("nan"), "tr") == "—"
    assert (nb.signed(0.25, 3, "en"), nb.signed(-1.5, 2, "tr"), nb.signed(-1e-9, 2, "tr")) == \
        ("+0.250", "-1,50", "+0,00")
    assert (nb.sci(8.9e-8, 1, "en"), nb.sci(8.9e-8, 1, "tr")) == ("8.9e-08", "8,9e-08")
    assert (nb.number(4e-7, 3, "tr"), nb.number(0.25, 3, "tr"), nb.number(0.0, 3, "en")) == \
        ("4,0e-07", "0,250", "0.000")
    assert (nb.general(1234.5, 6, "tr"), nb.general(1.5e-7, 6, "en"), nb.general(float("nan"), 6, "tr")) == \
        ("1.234,5", "1.5e-07", "—")


@pytest.mark.parametrize("share, decimals, en, tr", [
    (0.3, 0, "30 %", "%30"),
    (0.012, 1, "1.2 %", "%1,2"),
    (0.332, 1, "33.2 %", "%33,2"),
    (1 / 270, 0, "<1 %", "<%1"),  # "1 of 270 heads off (0 %)" read as none
    (0.0004, 1, "<0.1 %", "<%0,1"),
    (0.0, 0, "0 %", "%0"),
    (1.0, 0, "100 %", "%100"),
    (0.9999, 0, ">99 %", ">%99"),  # not all
    (-0.05, 0, "-5 %", "-%5"),
    (-1e-5, 0, ">-1 %", ">-%1"),
    (12.345, 0, "1,234 %", "%1.234"),
    (float("nan"), 0, "—", "—"),
])
def test_percent(share, decimals, en, tr):
    assert (nb.percent(share, decimals, "en"), nb.percent(share, decimals, "tr")) == (en, tr)


def test_signed_percent_and_plotly_helpers():
    assert (nb.percent(0.05, 0, "en", sign=True), nb.percent(0.05, 0, "tr", sign=True)) == ("+5 %", "+%5")
    assert (nb.separators("en"), nb.separators("tr")) == (".,", ",.")
    assert nb.percent_axis("tr")["tickprefix"] == "%" and nb.percent_axis("en")["ticksuffix"] == " %"
    assert nb.percent_hover("x", 1, "tr") == "%%{x:,.1f}" and nb.percent_hover("x", 1, "en") == "%{x:,.1f} %"
    assert nb.d3(2, sign=True) == "+,.2f"
    for peak in (0.0, 1e-9, 1e-6, 5e-4, 0.01, 0.3, 1.0, 7.5, 300.0, 1e6, float("nan")):
        fmt = nb.tick_format(peak)
        assert not _si(fmt), (peak, fmt)
    assert nb.tick_format(1e-6).endswith("e") and nb.tick_format(0.05) == ",.2~f"


# ------------------------------------------------------------------------------------------ the figures

N = 4
W = np.full((N, N), 1 / N)
LABELS = ["a", "b", "c", "d"]
TINY = np.full((N, N), 1e-7)  # values far below 1: plotly's default ticks wrote them "100n", "1µ"

# every figure builder the pages call, each with values that can be below 1 (a builder missing here fails
# test_every_builder_is_checked)
BUILDERS = {
    "alignment.alignment_figure": lambda lang: alignment.alignment_figure(W, LABELS, LABELS, lang=lang),
    "audio_alignment.spectrogram_attention_figure": lambda lang: audio_alignment.spectrogram_attention_figure(
        np.zeros((8, 10)), np.full((N, 10), 1e-7), LABELS, frame_seconds=0.02, peaks=[1, 2, 3, 4], lang=lang),
    "cost.cost_curves": lambda lang: cost.cost_curves({"t": ([128, 4096], [0.001, 0.5])},
                                                      reference=([128, 4096], [1e-4, 0.1]), lang=lang),
    "cost.kv_bars": lambda lang: cost.kv_bars(["4K", "8K"], [0.001, 0.002], [0.01, 0.02], lang=lang),
    "experiments.per_layer_lines": lambda lang: experiments.per_layer_lines({"x": np.array([0.012, 0.33])}, title="t",
                                                                           layer_title="l", value_title="v", lang=lang),
    "experiments.streaming_figure": lambda lang: experiments.streaming_figure([16, 32], np.array([3.0, 2.5]),
                                                                             np.array([2.1, 2.0]), 1.9, title="t",
                                                                             window_label="w", sinks_label="s",
                                                                             full_label="f", window_title="w",
                                                                             loss_title="l", lang=lang),
    "experiments.loss_bars": lambda lang: experiments.loss_bars(["a", "b"], [13.45, 0.5], title="t", loss_title="l",
                                                               spread=[None, (0.4, 0.6)], lang=lang),
    "experiments.lens_tracks": lambda lang: experiments.lens_tracks(
        {"en": (np.array([0.0, 0.3, 0.05]), np.array([0.0, 0.2, 0.0]), np.array([0.01, 0.4, 0.1])),
         "tr": (np.array([0.0, 0.01, 0.6]), np.array([0.0, 0.0, 0.5]), np.array([0.0, 0.02, 0.7]))},
        title="t", stream_title="s", value_title="v", embeddings_label="e", lang=lang),
    "experiments.pattern_bars": lambda lang: experiments.pattern_bars({"v": 1234, "d": 5}, {"v": "V"}, title="t",
                                                                     count_title="c", lang=lang),
    "experiments.dtw_figure": lambda lang: experiments.dtw_figure(TINY, LABELS, np.arange(N), np.arange(N),
                                                                 frame_seconds=0.02, title="t", time_title="s",
                                                                 path_label="p", lang=lang),
    "flow.route_figure": lambda lang: flow.route_figure([("in", 0, 0), ("in", 1, 0)],
                                                        [(("in", 0, 0), ("in", 1, 0), 1e-7, "residual")], ["a"], 1,
                                                        lang=lang),
    "flow.lens_figure": lambda lang: flow.lens_figure([LABELS, LABELS], np.full((2, N), 1e-7), ["0", "1"], lang=lang),
    "flow.share_figure": lambda lang: flow.share_figure(np.array([0.01, 0.5]), np.array([1e-7, 0.2]), lang=lang),
    "head_masks.pattern_grid": lambda lang: head_masks.pattern_grid([["full", "sink_window:64,4"],
                                                                      ["vertical_slash:8,8", "full"]], lang=lang),
    "head_masks.kept_share_figure": lambda lang: head_masks.kept_share_figure(np.full((2, 3, 4), 1e-7), ["a", "b"],
                                                                              lang=lang),
    "heatmap.head_heatmap": lambda lang: heatmap.head_heatmap(np.zeros((N, N)), LABELS, LABELS, lang=lang),
    "masks.mask_figure": lambda lang: masks.mask_figure(np.tril(np.ones((N, N), dtype=bool)), LABELS, LABELS,
                                                        lang=lang),
    "masks.attention_figure": lambda lang: masks.attention_figure(TINY, LABELS, LABELS, lang=lang),
    "masks.kl_figure": lambda lang: masks.kl_figure(LABELS, {"causal": np.full(N, 1e-7)}, lang=lang),
    "masks.drift_figure": lambda lang: masks.drift_figure({"causal": np.full(N, 1e-7)}, lang=lang),
    "masks.gqa_figure": lambda lang: masks.gqa_figure([[0, 1], [2, 3]], lang=lang),
    "model_view.model_view": lambda lang: model_view.model_view(np.full((2, 2, N, N), 1e-7), lang=lang)[0],
    "positions.sinusoidal_heatmap": lambda lang: positions.sinusoidal_heatmap(TINY, LABELS, lang=lang),
    "positions.rope_rotations": lambda lang: positions.rope_rotations(np.full((N, 3), 1e-7), [0, 2], lang=lang),
    "positions.distance_grid": lambda lang: positions.distance_grid(np.zeros((N, N)), lang=lang),
    "positions.alibi_figure": lambda lang: positions.alibi_figure(np.array([0.5, 0.0039]),
                                                                  np.triu(np.full((N, N), np.nan), 1),
                                                                  LABELS, 1, lang=lang),
    "positions.word_order_figure": lambda lang: positions.word_order_figure(LABELS, W, W, W - W, lang=lang),
    "pruning.head_grid": lambda lang: pruning.head_grid(np.full((2, 3), 1e-7), np.eye(2, 3, dtype=bool), diverging=True,
                                                        lang=lang),
    "pruning.attention_before_after": lambda lang: pruning.attention_before_after(W, W, LABELS, LABELS, lang=lang),
    "pruning.pruning_curve": lambda lang: pruning.pruning_curve(np.array([0.0, 0.4]), np.array([1.0, 1e-7]),
                                                                np.array([[1.0, 0.5]]), metric_title="m", lang=lang),
    "qkv.vector_strips": lambda lang: qkv.vector_strips(TINY, LABELS, lang=lang),
    "qkv.weight_bars": lambda lang: qkv.weight_bars(LABELS, np.full(N, 1e-7), compare=np.full(N, 0.25), lang=lang),
    "qkv.weighted_values": lambda lang: qkv.weighted_values(TINY, np.full(N, 0.25), np.zeros(N), LABELS, lang=lang),
    "qkv.rope_before_after": lambda lang: qkv.rope_before_after(TINY, TINY, LABELS, lang=lang),
}
MODULES = (alignment, audio_alignment, cost, experiments, flow, head_masks, heatmap, masks, model_view, positions,
           pruning, qkv)
NOT_BUILDERS = {"experiments.published_marks"}  # adds lines to a figure a builder made


def _si(fmt) -> bool:
    """A d3 format with an SI suffix ("~s", ".3s": 0.000001 -> "1µ")."""
    return isinstance(fmt, str) and bool(re.search(r"s$", fmt.strip()))


def _templates(fig: go.Figure) -> list[str]:
    out = []
    for trace in fig.data:
        for attr in ("hovertemplate", "texttemplate"):
            value = getattr(trace, attr, None)
            out += [value] if isinstance(value, str) else list(value or [])
    return out


def _formatted(fig: go.Figure) -> list:
    """Every axis and colour bar of ``fig`` (what plotly draws tick labels on)."""
    layout = fig.layout
    parts = [layout[name] for name in layout if name.startswith(("xaxis", "yaxis")) and layout[name] is not None]
    for trace in fig.data:  # the colour bars plotly draws (a marker's only when it shows its scale)
        if "colorbar" in trace and trace.showscale is not False:
            parts.append(trace.colorbar)
        if "marker" in trace and "colorbar" in trace.marker and trace.marker.showscale:
            parts.append(trace.marker.colorbar)
    return parts


def test_every_builder_is_checked():
    """Each public function of viz/ returning a plotly figure is in BUILDERS and takes ``lang``."""
    found = set()
    for module in MODULES:
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if fn.__module__ == module.__name__ and not name.startswith("_") and "Figure" in str(
                    inspect.signature(fn).return_annotation):
                found.add(f"{module.__name__.removeprefix('viz.')}.{name}")
                assert f"{module.__name__.removeprefix('viz.')}.{name}" in NOT_BUILDERS or \
                    "lang" in inspect.signature(fn).parameters, name
    assert found - NOT_BUILDERS == set(BUILDERS)


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_figures_write_numbers_the_languages_way(name, lang):
    """The language's separators (Turkish 0,25 and 131.072), and no SI suffix anywhere: no "s" d3 format in a
    template or tick format, and every axis and colour bar either has a tick format or writes exponents as powers
    of ten (plotly's default "B" wrote 0.000001 as "1µ")."""
    fig = BUILDERS[name](lang)
    assert fig.layout.separators == nb.separators(lang)
    for template in _templates(fig):
        for spec in re.findall(r"%\{[^}:]*:([^}]*)\}", template):
            assert not _si(spec), (template, spec)
    for part in _formatted(fig):
        assert not _si(part.tickformat), part.tickformat
        assert part.tickformat or part.exponentformat not in (None, "B", "SI", "SI extended"), part


def test_bar_labels_and_percent_axes_follow_the_language():
    """The bar labels "13.45" beside the table's "13,45"; a percent axis reading "30 %" in Turkish."""
    assert list(BUILDERS["experiments.loss_bars"]("tr").data[0].text) == ["13,45", "0,50"]
    assert list(BUILDERS["experiments.loss_bars"]("en").data[0].text) == ["13.45", "0.50"]
    assert list(BUILDERS["experiments.pattern_bars"]("tr").data[0].text) == ["1.234", "5"]
    for name, axis in (("pruning.pruning_curve", "xaxis"), ("experiments.per_layer_lines", "yaxis")):
        tr, en = BUILDERS[name]("tr").layout[axis], BUILDERS[name]("en").layout[axis]
        assert (tr.tickprefix, tr.ticksuffix or "") == ("%", ""), name
        assert (en.tickprefix or "", en.ticksuffix) == ("", " %"), name
    hover = BUILDERS["pruning.pruning_curve"]("tr").data[-1].hovertemplate
    assert hover.startswith("%%{x:"), hover
    assert "0,25" in BUILDERS["alignment.alignment_figure"]("tr").data[0].hovertext
    assert BUILDERS["cost.cost_curves"]("tr").layout.xaxis.ticktext == ("128", "4.096")


def test_an_unchanged_difference_map_has_a_readable_colour_bar():
    """Pruning's "after − before" of an unchanged head had the range ±1e-6, labelled "1µ"."""
    diff = BUILDERS["pruning.attention_before_after"]("tr").data[2]
    assert diff.zmax == pruning.DIFF_FLOOR and not _si(diff.colorbar.tickformat) and "e" not in diff.colorbar.tickformat


# ------------------------------------------------------------------------------------------ the texts

# plotly's own template variables ("katman %{customdata[0]}"): not a percent sign before a number
PLOTLY_VARIABLES = {"x", "y", "z", "text", "customdata", "hovertext", "meta", "label", "value", "fullData", "data"}
PLACEHOLDER = re.compile(r"(?<!%)\{(\w+)([^{}]*)\}")  # a Python placeholder, "{share:.0%}"


def _strings() -> list[tuple[str, str, str, str]]:
    out = []
    for path in sorted((ROOT / "assets" / "i18n").glob("*.json")):
        for key, entry in json.loads(path.read_text(encoding="utf-8")).items():
            out += [(path.name, key, lang, entry[lang]) for lang in LANGS if lang in entry]
    return out


def _percent_placeholders(text: str) -> list[str]:
    """``%{name...}`` where ``name`` is not plotly's: a placeholder behind a hand-written percent sign."""
    return [m.group(0) for m in re.finditer(r"%\{(\w+)[^{}]*\}", text) if m.group(1) not in PLOTLY_VARIABLES]


def test_i18n_percent_signs_sit_on_the_languages_side():
    """Turkish writes %30 (sign first, no space), English 30 % (one style). A share handed to a text is
    written by the formatter ({share:.0%}: "<%1" for 1 of 270, never "%0"), not by a hand-placed sign."""
    bad = []
    for name, key, lang, text in _strings():
        without = PLACEHOLDER.sub("{}", text)  # literal text only
        if _percent_placeholders(text):
            bad.append((name, key, lang, "%{…} placeholder: use {x:.N%}"))
        if re.search(r"\{\}\s?%", without):
            bad.append((name, key, lang, "placeholder followed by a percent sign: use {x:.N%}"))
        if lang == "tr" and re.search(r"\d\s?%", without):
            bad.append((name, key, lang, "Turkish number followed by %"))
        if lang == "en" and (re.search(r"%\s?\d", without) or re.search(r"\d%", without)):
            bad.append((name, key, lang, "English percent not written 30 %"))
    assert not bad, bad


def test_percent_placeholders_are_in_both_languages():
    """A {share:.0%} in one language is one in the other (the number reaches both through the formatter)."""
    entries = {}
    for _name, key, lang, text in _strings():
        entries.setdefault(key, {})[lang] = {m.group(1) for m in PLACEHOLDER.finditer(text) if m.group(2).endswith("%")}
    assert any(e.get("en") for e in entries.values())
    assert not {k: e for k, e in entries.items() if "tr" in e and "en" in e and e["tr"] != e["en"]}


def test_style_never_adds_a_colour_bar():
    """Setting a marker's colour bar format created the colour bar: line and bar charts (the Masks page's drift
    and KL figures, the K/V cache, Q/K/V) drew a phantom colour bar over their legend and ticks at 1280 px."""
    import plotly.graph_objects as go

    from viz.numbers import style

    fig = style(go.Figure([go.Scatter(x=[0, 1], y=[0.1, 0.2], mode="lines+markers"), go.Bar(x=[0, 1], y=[1, 2])]), "tr")
    assert all(not tr.marker.colorbar.to_plotly_json() for tr in fig.data)
    shown = style(go.Figure(go.Heatmap(z=[[1e-6, 2e-6]])), "tr")
    assert shown.data[0].colorbar.exponentformat == "power"  # a colour bar that is drawn still gets no SI suffix
