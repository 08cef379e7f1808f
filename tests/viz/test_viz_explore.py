"""Unit tests of the Explore page's figure builders (viz/head_view.py, model_view.py, heatmap.py,
summary.py, export.py) on small hand-made inputs."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from viz import transforms as tf
from viz.export import attentions_npz, matrix_csv
from viz.head_view import head_view_data, head_view_html, head_view_svg
from viz.heatmap import head_heatmap, image_config, tick_positions
from viz.model_view import model_view, point_to_cell
from viz.summary import head_summary_table

LABELS = ["[CLS]", "Ked", "i", "kovaladı", "[SEP]"]


def random_attention(layers=2, heads=3, n=5, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.random((layers, heads, n, n)).astype(np.float32)
    return w / w.sum(-1, keepdims=True)


def test_head_view_html_is_self_contained_with_exact_labels():
    html = head_view_html(random_attention()[0], LABELS, LABELS, head_names=["0", "1", "2"], title="t")
    assert "kovaladı" in html and "Ä±" not in html
    assert "<script src" not in html and "https://" not in html
    data = json.loads(html.split('id="hv-data">', 1)[1].split("</script>", 1)[0])
    assert data["q"] == LABELS and len(data["w"]) == 3
    assert data["w"][0][1] == [int(round(v * 1000)) for v in random_attention()[0, 0, 1]]


def test_head_view_html_escapes_script_end_in_labels():
    labels = ["</script>", "a", "b"]
    html = head_view_html(np.full((1, 3, 3), 1 / 3, np.float32), labels, labels, head_names=["0"])
    assert html.count("</script>") == 2  # only the two real closing tags


def test_head_view_svg_draws_lines_with_weight_as_opacity():
    w = np.zeros((2, 2, 2), np.float32)
    w[0] = [[1.0, 0.0], [0.25, 0.75]]
    w[1] = [[0.5, 0.5], [0.5, 0.5]]
    svg = head_view_svg(w, ["ı", "ş"], ["ı", "ş"], head_names=["0", "1"], heads=[0])
    assert svg.count("<line") == 3  # head 0 only; the 0.0 weight is not drawn
    assert 'stroke-opacity="0.750"' in svg and ">ı</text>" in svg


def test_head_view_layout_holds_long_labels_and_wraps_title_and_notes():
    """Issue 13: at a fixed 560 px the head view cut long words ("…adıklarımızdanmışsınız") and notes. Columns
    are as wide as their longest label, and the title and notes wrap to the drawing's width."""
    from viz.head_view import COL_W, GAP_W, head_view_layout, text_width

    word = "Çekoslovakyalılaştıramadıklarımızdanmışsınız"
    note = "Hidden: [CLS], [SEP]; the rows are renormalised over the key pieces, a " * 3
    lay = head_view_layout(["a", word], ["b"], title="Layer 3 · encoder · " * 8, notes=[note, "short"])
    assert lay.col_q >= text_width(word) + 10 > COL_W and lay.col_k == COL_W
    assert lay.width == lay.col_q + GAP_W + lay.col_k
    assert len(lay.title_lines) > 1 and len(lay.note_lines) > 2 and lay.note_lines[-1] == "short"
    assert all(text_width(x) <= lay.width - 8 for x in lay.title_lines + lay.note_lines)
    assert " ".join(lay.note_lines[:-1]).split() == note.split()  # nothing lost in the wrapping
    assert lay.top == 36 + 18 * (lay.text_lines - 1)
    assert text_width("漢字") == 26 and text_width("e\u0301") == 8  # wide characters; a combining mark is free
    w = np.full((1, 2, 1), 0.5, np.float32)
    svg = head_view_svg(w, ["a", word], ["b"], head_names=["0"], title="Layer 3 · encoder · " * 8, notes=[note])
    assert f'width="{round(lay.width)}"' in svg and svg.count('fill="#555"') == len(lay.note_lines) - 1
    assert f'<text x="{lay.col_q - 4}"' in svg  # query labels end at their column's edge
    data = head_view_data(w, ["a", word], ["b"], head_names=["0"], title="t", notes=[note])
    assert data["layout"]["colq"] == lay.col_q and data["note_lines"] == head_view_layout(
        ["a", word], ["b"], "t", [note]).note_lines


def test_model_view_grid_and_click_mapping():
    w = random_attention(layers=3, heads=4, n=6)
    fig, info = model_view(w, layer_names=["0", "1", "2"], head_names=["a", "b", "c", "d"], selected=(1, 2))
    assert not info.pooled and (info.cell_q, info.cell_k) == (6, 6)
    scatter = fig.data[1]
    assert len(scatter.x) == 12
    assert list(scatter.customdata[1 * 4 + 2]) == [1, 2]
    assert point_to_cell({"customdata": [2, 3]}, 4) == (2, 3)
    assert point_to_cell({"point_index": 7, "curve_number": 1}, 4) == (1, 3)
    assert point_to_cell({"point_index": 7, "curve_number": 0}, 4) is None


def test_model_view_pools_long_inputs_C01():
    w = random_attention(layers=2, heads=2, n=300)
    fig, info = model_view(w, layer_names=["0", "1"], head_names=["0", "1"], max_cell=64)
    assert info.pooled and info.cell_q == 64
    z = np.asarray(fig.data[0].z)
    assert z.dtype == np.uint8 and z.shape == (2 * 64 + 8, 2 * 64 + 8)
    assert z.max() == 255 and z.min() == 0  # map maxima at 255, gaps at 0


def test_heatmap_keeps_repeated_labels_apart():
    labels = ["the", "cat", "the", "mouse"]
    m = np.eye(4, dtype=np.float32)
    fig = head_heatmap(m, labels, labels)
    assert list(fig.layout.xaxis.ticktext) == labels and list(fig.layout.xaxis.tickvals) == [0, 1, 2, 3]
    assert fig.data[0].customdata[2][0][1] == "the"
    assert tick_positions(500, 96)[:3] == [0, 6, 12]
    assert image_config("x", "svg")["toImageButtonOptions"]["format"] == "svg"
    with pytest.raises(ValueError):
        head_heatmap(m, labels[:3], labels)


def test_summary_table_rows_and_columns():
    w = random_attention(layers=2, heads=3, n=5)
    stats = tf.head_statistics(w, special=[True, False, False, False, True], punctuation=[False] * 5,
                               word_of=[-1, 0, 0, 1, -1])
    df = head_summary_table(stats, column_names={"entropy": "H"})
    assert len(df) == 6 and list(df.columns[:3]) == ["layer", "head", "H"]
    assert df.iloc[4]["layer"] == 1 and df.iloc[4]["head"] == 1
    assert df.iloc[4]["H"] == pytest.approx(stats["entropy"][1, 1])


def test_exports_C08():
    m = np.array([[0.25, 0.75], [1.0, 0.0]], np.float32)
    csv = matrix_csv(m, ["ı", "ş"], ["ı", "ş"]).decode("utf-8")
    assert csv.splitlines()[0] == "query \\ key,ı,ş" and csv.splitlines()[1] == "ı,0.250000,0.750000"
    w = random_attention()
    blob = attentions_npz({"encoder": w}, tokens=LABELS, spans=[(0, 0)] * 5, special=[True, 0, 0, 0, True],
                          model="m", text="Kedi")
    with np.load(io.BytesIO(blob)) as z:
        np.testing.assert_array_equal(z["attention_encoder"], w)
        assert list(z["tokens"]) == LABELS and str(z["text"]) == "Kedi"


def test_special_token_labels_are_drawn_literally_by_plotly():
    """XLM-R/Llama special tokens such as ``<s>`` are plotly pseudo-HTML (strikethrough): escaped, they
    show as typed instead of vanishing; a typed ``<b>`` stays text too."""
    import numpy as np

    from viz.heatmap import head_heatmap
    from viz.text import plotly_labels

    assert plotly_labels(["<s>", "a<b>&"]) == ["&lt;s&gt;", "a&lt;b&gt;&amp;"]
    fig = head_heatmap(np.full((2, 2), 0.5, dtype=np.float32), ["<s>", "Ke"], ["<s>", "Ke"])
    assert list(fig.layout.xaxis.ticktext) == ["&lt;s&gt;", "Ke"] and list(fig.layout.yaxis.ticktext)[0] == "&lt;s&gt;"


def test_a_head_view_fragment_keeps_labels_as_data_and_finds_its_own_div():
    """A label with markup ("<!--<script>", "</script>") stays inside the data block as JSON escapes, and the
    fragment's script starts from its own div by id (a classic notebook runs output scripts elsewhere)."""
    import json
    import re

    from viz.head_view import head_view_fragment, head_view_html

    labels = ["<!--<script>", "</script>", "a&b"]
    w = np.full((1, 3, 3), 1 / 3, dtype=np.float32)
    for html in (head_view_fragment(w, labels, labels, head_names=["h"]),
                 head_view_html(w, labels, labels, head_names=["h"])):
        data = re.search(r'class="hv-data"[^>]*>(.*?)</script>', html, re.S).group(1)
        assert "<" not in data and ">" not in data and "&" not in data
        assert json.loads(data)["q"] == labels
    fragment = head_view_fragment(w, labels, labels, head_names=["h"])
    scope = re.search(r'id="(dikkat-hv-[0-9a-f]+)"', fragment).group(1)
    assert f'document.getElementById("{scope}")' in fragment and "currentScript" not in fragment
