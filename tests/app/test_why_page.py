"""The "Why a head attends" page (views/why.py, issue 30) through Streamlit's AppTest: it renders on a rotary decoder
and a BERT encoder in both languages, shows the analysis's own weight, follows the heads switched off on the Head
pruning page, says in one caption that a model without RoPE has no position split, and refuses a fallback-path model
with the reason in the interface language."""

from __future__ import annotations

import json

import numpy as np
from links import APP, open_linked
from plotly_json import decode
from streamlit.testing.v1 import AppTest
from test_hosting_app import PAYLOAD, _texts, _unescaped

import models
from views import shared
from viz import numbers as nb

TEXT = "The cat chased the mouse and the dog"


def _clean(at) -> None:
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def _metric(at, label: str) -> str:
    found = [m.value for m in at.metric if m.label == label]
    assert found, [m.label for m in at.metric]
    return found[0]


def _figures(at) -> list[dict]:
    return [json.loads(e.proto.spec) for e in at.main if type(e).__name__ == "UnknownElement"
            and e.type == "plotly_chart"]


def _captions(at) -> str:
    return "\n".join(c.value for c in at.caption)


def test_why_page_on_smollm2_shows_the_analysis_weight_and_follows_heads_off(smollm2):
    """A rotary decoder in English: every section drawn, the weight shown is ``models.analyze``'s weight at [layer,
    head, i, j] (written as the page writes it), the RoPE split is there; switching off every head of layer 0 on the
    Head pruning page changes the score of a head of layer 3."""
    link = {"why_layer": "3", "why_head": "2", "why_i": "7", "why_j": "4"}
    at = open_linked("views/why.py", "smollm2-135m", link, TEXT)
    _clean(at)
    assert (at.selectbox(key="why_layer").value, at.selectbox(key="why_head").value) == (3, 2)
    assert (at.selectbox(key="why_i").value, at.selectbox(key="why_j").value) == (7, 4)
    weights = models.analyze(smollm2, TEXT).attentions["decoder"]
    assert _metric(at, "Weight") == nb.num(float(weights[3, 2, 7, 4]), 4, "en")
    assert [h.value for h in at.header][:4] == ["1. Neuron view: the query and the key",
                                                "2. The score as a sum of terms",
                                                "3. Which earlier heads feed this score", "4. Position or content?"]
    assert "Content (distance 0)" in [m.label for m in at.metric]
    terms = next(m.value for m in at.markdown if m.value.startswith("The largest terms"))
    assert terms.count("key side:") == 5 and "query side:" in terms
    before = _metric(at, "Score σ · q · k")
    # the heads switched off on the Head pruning page reach this page's analysis and the decomposition
    at.session_state[shared.HEADS_OFF_KEY] = {"smollm2-135m": [["decoder", 0, h] for h in range(9)]}
    at.run()
    _clean(at)
    assert at.toggle(key="why_use_off").value and "(9)" in at.toggle(key="why_use_off").label
    after = _metric(at, "Score σ · q · k")
    assert after != before, (before, after)
    off = models.analyze(smollm2, TEXT, heads_off=[("decoder", 0, h) for h in range(9)]).attentions["decoder"]
    assert _metric(at, "Weight") == nb.num(float(off[3, 2, 7, 4]), 4, "en")
    # the key side's grid of earlier heads: layer 0, switched off, writes nothing
    grid = next(f for f in _figures(at) if f["layout"]["title"]["text"].startswith("Key side of head 3.2"))
    z = decode(grid["data"][0]["z"])
    assert z.shape == (3, 9) and (z[0] == 0).all() and (z[1:] != 0).any()


def test_why_page_key_follows_the_row(smollm2):
    """Another query starts the key again at the key this head weights most for it."""
    at = open_linked("views/why.py", "smollm2-135m", {"why_layer": "2", "why_head": "1", "why_i": "3"}, TEXT)
    _clean(at)
    weights = models.analyze(smollm2, TEXT).attentions["decoder"]
    assert at.selectbox(key="why_j").value == int(np.argmax(weights[2, 1, 3]))
    at.selectbox(key="why_i").set_value(6).run()
    _clean(at)
    assert at.selectbox(key="why_j").value == int(np.argmax(weights[2, 1, 6]))


def test_why_page_in_turkish_on_smollm2(smollm2):
    link = {"why_layer": "3", "why_head": "2", "why_i": "7", "why_j": "4", "lang": "tr"}
    at = open_linked("views/why.py", "smollm2-135m", link, TEXT)
    at.radio(key="lang").set_value("tr").run()
    _clean(at)
    assert at.title[0].value == shared._strings()["why_title"]["tr"]
    weights = models.analyze(smollm2, TEXT).attentions["decoder"]
    assert _metric(at, "Ağırlık") == nb.num(float(weights[3, 2, 7, 4]), 4, "tr")
    terms = next(m.value for m in at.markdown if "puanının en büyük terimleri" in m.value)
    assert terms.count("anahtar tarafı:") == 5 and "key side" not in terms


def test_why_page_on_minilm_says_no_rope_in_a_caption_and_draws_composition(minilm):
    """BERT: no error box for the RoPE section, one caption; the composition, on request, as three maps of the
    earlier layers; Turkish too."""
    at = open_linked("views/why.py", "minilm-l6", {"why_layer": "2", "why_head": "5"}, "The cat chased the mouse.")
    _clean(at)
    assert "has no rotary position embedding" in _captions(at)
    assert "Content (distance 0)" not in [m.label for m in at.metric]
    at.toggle(key="why_comp").set_value(True).run()
    _clean(at)
    comp = [f for f in _figures(at) if sum(d.get("type") == "heatmap" for d in f["data"]) == 3]
    assert comp, "the composition's three maps"
    at = open_linked("views/why.py", "minilm-l6", {"lang": "tr"}, "The cat chased the mouse.")
    at.radio(key="lang").set_value("tr").run()
    _clean(at)
    assert "döner konum gömmesi (RoPE) kullanmıyor" in _captions(at)


def test_why_page_shows_typed_text_as_text(minilm):
    """Tokens of a sentence full of markdown and HTML reach the page's words as the same characters."""
    at = open_linked("views/why.py", "minilm-l6", {}, PAYLOAD)
    _clean(at)
    bad = {x: _unescaped(x) for x in _texts(at) if _unescaped(x)}
    assert not bad, bad


def test_why_page_refuses_a_fallback_model_with_the_reason(tiny_folder):
    """GPT-Neo runs on the fallback path: the page says why it cannot take the score apart, in both languages, with
    no traceback."""
    folder = str(tiny_folder("gpt_neo"))
    for lang, words in (("en", "fallback path"), ("tr", "yedek yol")):
        at = AppTest.from_file(APP, default_timeout=300)
        at.session_state["model_key"] = "minilm-l6"
        at.session_state["model_custom"] = folder
        at.session_state["text"] = "the cat sat on the mat"
        at.session_state["lang"] = lang
        at.run()
        at.switch_page("views/why.py")
        at.run()
        assert not at.exception, [e.message for e in at.exception]
        errors = [e.value for e in at.error]
        assert len(errors) == 1 and words in errors[0], errors
        assert "Traceback" not in errors[0] and "why_reason" not in errors[0]
        assert not at.header  # the page stopped before its sections


def test_every_reason_of_a_refusal_has_its_words():
    """Each reason ``models.why`` can refuse with (REASONS) and each check that can fail (WHAT) is translated."""
    from models import why

    strings = shared._strings()
    missing = [f"why_reason_{k}" for k in why.REASONS if f"why_reason_{k}" not in strings]
    missing += [f"why_what_{k}" for k in why.WHAT if f"why_what_{k}" not in strings]
    assert not missing, missing


def test_why_page_survives_junk_in_the_link(minilm):
    """Values a link cannot mean fall back to the defaults; a layer, query or key beyond the text is kept in range."""
    junk = {"why_layer": "99", "why_head": "-1", "why_i": "500", "why_j": "x", "why_mask": "<b>", "why_parts": "7",
            "why_by": "zz", "why_comp": "maybe", "why_stack": "cross"}
    at = open_linked("views/why.py", "minilm-l6", junk, "a cat")
    _clean(at)
    n = len(models.analyze(minilm, "a cat").tokens)
    assert at.selectbox(key="why_layer").value == 3 and at.selectbox(key="why_head").value == 0
    assert 0 <= at.selectbox(key="why_i").value < n and 0 <= at.selectbox(key="why_j").value < n
    assert at.selectbox(key="why_mask").value == "native" and at.select_slider(key="why_parts").value == 8


def test_why_page_at_layer_0_under_a_causal_mask(minilm):
    """Layer 0 reads only the embeddings: a caption, no grid of earlier heads, no composition; a causal mask on BERT
    hides the later keys (the weight shown is the causal analysis's)."""
    text = "The cat chased the mouse."
    at = open_linked("views/why.py", "minilm-l6", {"why_layer": "0", "why_head": "4", "why_i": "3", "why_j": "5",
                                                   "why_mask": "causal", "why_comp": "1"}, text)
    _clean(at)
    assert "Layer 0 reads only the embeddings" in _captions(at)
    assert any("The mask hides key 5 from query 3" in i.value for i in at.info)
    assert _metric(at, "Weight") == nb.num(0.0, 4, "en")
    assert not [f for f in _figures(at) if "earlier heads" in f["layout"]["title"]["text"]]
