"""The Information flow page and Explore's value-weighted option (issue 14) through Streamlit's AppTest."""

from __future__ import annotations

import json

import numpy as np
from links import open_linked
from plotly_json import decode

from views import shared


def _clean(at) -> None:
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def test_flow_page_shows_kobayashis_numbers_in_both_languages(minilm):
    """minilm-l6: the special-token shares as metrics (raw above value-weighted), no logit lens (no token head),
    the reason in the interface language."""
    at = open_linked("views/flow.py", "minilm-l6", {}, "The cat chased the mouse.")
    _clean(at)
    metrics = {m.label: m.value for m in at.metric}
    raw = float(metrics["Attention on special tokens (weights)"].rstrip(" %"))
    weighted = float(metrics["Attention on special tokens (value-weighted)"].rstrip(" %"))
    assert raw > 50 and weighted < 30, metrics
    assert any("no token head" in i.value for i in at.info)
    at = open_linked("views/flow.py", "minilm-l6", {"lang": "tr"}, "The cat chased the mouse.")
    at.radio(key="lang").set_value("tr").run()
    _clean(at)
    assert any("belirteç başlığı yok" in i.value for i in at.info), [i.value for i in at.info]
    assert [h.value for h in at.header][0].startswith("1. Dikkat ağırlıkları")


def test_flow_page_follows_the_pruned_heads_the_position_and_a_link(smollm2):
    text = "The cat chased the mouse and the dog"
    at = open_linked("views/flow.py", "smollm2-135m", {"flow_position": "3", "flow_threshold": "0.1",
                                                       "flow_layer": "29", "flow_head": "8"}, text)
    _clean(at)
    assert at.selectbox(key="flow_position").value == 3 and at.select_slider(key="flow_threshold").value == 0.1
    assert (at.slider(key="flow_layer").value, at.selectbox(key="flow_head").value) == (29, 8)
    assert not at.toggle(key="flow_use_off").value or at.toggle(key="flow_use_off").disabled
    # heads switched off on the Head pruning page reach this page's analysis (and its cache key)
    at.session_state[shared.HEADS_OFF_KEY] = {"smollm2-135m": [["decoder", 0, h] for h in range(9)]}
    at.run()
    _clean(at)
    assert at.toggle(key="flow_use_off").value and "(9)" in at.toggle(key="flow_use_off").label
    flow = shared.get_flow("smollm2-135m", text, heads_off=frozenset(("decoder", 0, h) for h in range(9)),
                           max_tokens=256, stack="decoder")
    assert (flow.token_shares(0)[:, :-2] == 0).all()  # layer 0 reads no token with all its heads off
    captions = " ".join(c.value for c in at.caption)
    assert "first on top at" in captions


def test_explore_value_weighted_option(minilm):
    """The option value-weights every view's maps: the heatmap drawn is the flow's ‖α W_O v‖, rows renormalised."""
    text = "The cat chased the mouse."
    at = open_linked("views/explore.py", "minilm-l6", {}, text)
    at.session_state["view"], at.session_state["layer"], at.session_state["head"] = "heatmap", 2, 3
    at.checkbox(key="value").check().run()
    _clean(at)
    assert any("Value-weighted (Kobayashi" in c.value for c in at.caption)
    analysis = shared.get_analysis("minilm-l6", text)
    flow = shared.get_flow("minilm-l6", text, stack="encoder")
    want = flow.value_weighted(analysis.attentions["encoder"][2, 3], 2, 3)
    want = want / want.sum(-1, keepdims=True)
    figures = [json.loads(e.proto.spec) for e in at.main if type(e).__name__ == "UnknownElement"
               and e.type == "plotly_chart"]
    z = next(decode(d["z"]) for f in figures for d in f["data"] if d.get("type") == "heatmap")
    np.testing.assert_allclose(z, want, atol=1e-6)
