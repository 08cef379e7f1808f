"""Typed control tokens and odd statistics as the pages show them (AppTest; the engine's side is in
tests/engine/test_typed_tokens.py)."""

from __future__ import annotations

import numpy as np

import models
from links import APP


def _explore(**state):
    from streamlit.testing.v1 import AppTest


    at = AppTest.from_file(APP, default_timeout=300)
    for k, v in state.items():
        at.session_state[k] = v
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_explore_says_when_control_tokens_were_typed():
    at = _explore(model_key="minilm-l6", text="the cat [SEP] sat")
    notes = [i.value for i in at.info if "Typed control tokens" in i.value]
    assert notes and "\\[SEP\\]" in notes[0]
    assert not [i for i in _explore(model_key="minilm-l6", text="the cat sat").info if "Typed control" in i.value]


def test_summary_view_has_no_controls_that_do_nothing():
    """In the summary table the layer slider and the image format did nothing and "Shown matrix as CSV"
    exported a heatmap nobody saw: they are inactive / gone there, and active in the heatmap view."""
    at = _explore(model_key="minilm-l6", text="the cat sat", view="summary")
    assert at.slider(key="layer").disabled
    assert not [b for b in at.get("download_button") if b.key == "dl_csv"]
    at = _explore(model_key="minilm-l6", text="the cat sat", view="heatmap")
    assert not at.slider(key="layer").disabled
    assert [b for b in at.get("download_button") if b.key == "dl_csv"]


def test_missing_statistics_are_a_dash_not_none():
    """"None" in the summary's same-word column of an English sentence (no word split into pieces): a
    column with no value is "—"; the other columns stay numbers."""
    import pandas as pd

    from views import shared

    shown = {}

    class Sink:
        def dataframe(self, data, **kwargs):
            shown["data"], shown["kwargs"] = data, kwargs

    shared.dataframe(pd.DataFrame({"same_word": [float("nan")] * 2, "first": [0.5, 0.25]}), decimals=3,
                     container=Sink())
    data = shown["data"]
    assert list(data["same_word"]) == ["—", "—"] and data["first"].dtype == float
    assert "same_word" not in shown["kwargs"]["column_config"] and "first" in shown["kwargs"]["column_config"]


def test_model_picker_labels_fit_the_sidebar():
    from views import shared

    for spec in models.list_models():
        assert len(shared._catalog_label(spec.key)) <= 32, shared._catalog_label(spec.key)


def test_cost_log_axis_labels_powers_of_ten_only():
    """The cost page's log axis read "5, 2, 0.01, 5, 2, 0.001": labels at 2 and 5 of every decade."""
    from viz.cost import cost_curves

    fig = cost_curves({"t": ([128, 256, 512], [0.001, 0.004, 0.016])}, x_title="n", y_title="s", title="x", log=True)
    assert fig.layout.yaxis.type == "log" and fig.layout.yaxis.dtick == 1
    assert cost_curves({"t": ([1, 2], [1, 2])}, x_title="n", y_title="s", title="x",
                       log=False).layout.yaxis.dtick is None


def test_pruning_table_headers_and_the_device_line_read_as_words():
    """A stray "probability ·" header (two columns told apart by a trailing character) and a device line of
    jargon ("capture: interface · encoder 12×12") that stayed English in Turkish."""
    at = _explore(model_key="smollm2-135m", text="The cat sat on the", lang="tr")
    at.switch_page("views/pruning.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    headers = [list(df.value.columns) for df in at.table]  # a static table: wraps in a narrow column
    assert ["sıra", "tüm kafalar açık", "olasılık (tüm kafalar açık)", "kafalar kapalıyken",
            "olasılık (kafalar kapalıyken)"] in headers
    line = next(c.value for c in at.sidebar.caption if c.value.startswith("Aygıt"))
    assert "birebir" in line and "kod çözücü öz-dikkati 30×9" in line and "3 anahtar/değer kafası" in line
    assert "interface" not in line and "capture" not in line


def test_an_unchanged_difference_panel_is_white_with_no_negative_zero():
    """"A − B" when nothing changed showed a ±1µ colour bar and cells reading -0.00."""
    from viz.positions import DIFF_FLOOR, word_order_figure

    a = np.array([[1.0, 0.0], [0.5, 0.5]])
    fig = word_order_figure(["x", "y"], a, a, np.array([[-1e-9, 0.0], [1e-9, -0.0]]), titles=("A", "B", "A − B"),
                            query_title="q", key_title="k")
    diff = fig.data[2]
    assert (diff.zmin, diff.zmax) == (-DIFF_FLOOR, DIFF_FLOOR)
    assert not (np.signbit(np.asarray(diff.text, dtype=float)) & (np.asarray(diff.text, dtype=float) == 0)).any()
