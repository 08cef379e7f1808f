"""Token labels reach every figure as text, never as markup or template.

plotly reads tick labels, marker text, hover text and ``customdata`` shown through a hover template as a
subset of HTML: an XLM-R/Llama ``<s>`` token starts strikethrough and vanishes, a typed ``<b>`` turns bold.
A label placed inside a hover *template* would also have its ``%{...}`` evaluated. Each figure below gets
labels that would break in these ways; none may reach the figure raw.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from viz.alignment import alignment_figure
from viz.audio_alignment import spectrogram_attention_figure
from viz.heatmap import head_heatmap
from viz.masks import attention_figure, kl_figure, mask_figure
from viz.positions import alibi_figure, sinusoidal_heatmap, word_order_figure
from viz.pruning import attention_before_after
from viz.qkv import rope_before_after, vector_strips, weight_bars, weighted_values

HOSTILE = ["<s>", "a<b>c", "%{fullData.name}", "x&y"]
N = len(HOSTILE)
W = np.full((N, N), 1.0 / N, dtype=np.float32)


def _strings(obj, key=""):
    """``(key, string)`` for every string anywhere in a plotly figure's JSON (data and layout)."""
    if isinstance(obj, str):
        yield key, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _strings(v, k)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _strings(v, key)


FIGURES = {
    "head_heatmap": lambda: head_heatmap(W, HOSTILE, HOSTILE),
    "alignment": lambda: alignment_figure(W, HOSTILE, HOSTILE),
    "spectrogram": lambda: spectrogram_attention_figure(np.zeros((8, 10)), np.full((N, 10), 0.1), HOSTILE,
                                                        frame_seconds=0.02),
    "mask": lambda: mask_figure(np.tril(np.ones((N, N), dtype=bool)), HOSTILE, HOSTILE),
    "attention": lambda: attention_figure(W, HOSTILE, HOSTILE),
    "kl": lambda: kl_figure(HOSTILE, {"causal": np.zeros(N)}),
    "sinusoidal": lambda: sinusoidal_heatmap(np.zeros((N, 8)), HOSTILE),
    "alibi": lambda: alibi_figure(np.ones(4), np.zeros((N, N)), HOSTILE, 0),
    "word_order": lambda: word_order_figure(HOSTILE, W, W, W - W),
    "before_after": lambda: attention_before_after(W, W, HOSTILE, HOSTILE),
    "vector_strips": lambda: vector_strips(np.ones((N, 4)), HOSTILE, highlight=[0]),
    "weight_bars": lambda: weight_bars(HOSTILE, np.full(N, 0.25), compare=np.full(N, 0.25)),
    "weighted_values": lambda: weighted_values(np.ones((N, 4)), np.full(N, 0.25), np.ones(4), HOSTILE),
    "rope": lambda: rope_before_after(np.ones((N, 4)), np.ones((N, 4)), HOSTILE),
}


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_token_labels_are_escaped_in_every_figure(name):
    fig = FIGURES[name]()
    pairs = list(_strings(json.loads(fig.to_json())))
    strings = [s for _, s in pairs]
    raw = [s for s in strings if "<s>" in s or "a<b>c" in s or "x&y" in s]
    assert not raw, raw
    templates = [s for k, s in pairs if k.endswith("template") and "fullData" in s]
    assert not templates, templates  # a label inside a hover template would be evaluated
    # ... and the labels are there, escaped, so the reader still sees them
    assert any("&lt;s&gt;" in s for s in strings), name
    assert any("x&amp;y" in s for s in strings), name


def test_highlighted_strip_label_is_bold_markup_around_the_escaped_label():
    fig = vector_strips(np.ones((2, 3)), ["q <s>", "k x"], highlight=[0])
    assert list(fig.layout.yaxis.ticktext) == ["<b>q &lt;s&gt;</b>", "k x"]


def test_no_token_is_drawn_blank():
    """Issue 33: a no-break-space token drew as an empty cell in the logit lens and direct-effect tables. Every
    character that draws as nothing is shown as a sign; visible text is left as it is."""
    from viz.text import shown

    assert shown("\u00a0") == "⍽" and shown("a\u00a0b") == "a⍽b" and shown("\u2009") == "⍽"  # thin space too
    assert shown("\u200b") == "‹U+200B›" and shown("\ufeffx") == "‹U+FEFF›x" and shown("\u00ad") == "‹U+00AD›"
    assert shown(" chased") == "␣chased" and shown("a\nb") == "a⏎b" and shown("\u2028") == "⏎"
    assert shown("kovaladı") == "kovaladı" and shown("e\u0301") == "e\u0301" and shown("日本") == "日本"
    for ch in map(chr, range(0x2FFF)):  # nothing shown is empty or only invisible
        out = shown(ch)
        assert out and any(c.isprintable() and not c.isspace() for c in out), hex(ord(ch))


def test_a_zero_width_token_label_is_its_code_point():
    from models.analysis.tokens import Token

    assert Token(id=1, piece="x", text="\u200b", start=0, end=1, special=False).label == "‹U+200B›"
