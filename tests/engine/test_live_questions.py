"""A lesson's questions (live/questions.py) on tiny random models: each kind's measured answer is the one a direct
computation gives, its answer is among its choices, and wrong inputs raise LessonError with their own code."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import models
from live import questions as Q

TEXT = "the cat chased the mouse"
PROMPT = {"en": "Which?", "tr": "Hangisi?"}
STATE = {"text": TEXT}

# the codes raised while a question is answered (the others are raised while a lesson is read: test_lessons_format)
CODES = ("lesson_stack", "lesson_layer_range", "lesson_head_range", "lesson_question_no_text", "lesson_question_clip",
         "lesson_question_query_range", "lesson_question_choices", "lesson_question_text_model",
         "lesson_question_loss")


def _values(choices: list[Q.Choice]) -> list[str]:
    assert all(set(c.label) == {"en", "tr"} and all(c.label.values()) for c in choices)
    return [c.value for c in choices]


@pytest.mark.parametrize("arch, stack", [("gpt2", "decoder"), ("bert", "encoder")])
def test_top_key_is_the_argmax_of_the_weights_row(tiny, arch, stack):
    loaded = tiny(arch)
    a = models.analyze(loaded, TEXT)
    n = len(a.tokens)
    for layer, head, query in [(0, 0, 2), (1, 3, n - 1), (1, 2, -2)]:
        q = Q.TopKey(prompt=PROMPT, layer=layer, head=head, query=query)
        got = Q.measure(loaded, q, STATE)
        row = np.asarray(a.attentions[stack][layer, head, query % n], dtype=np.float64)
        assert got.answer == str(int(np.argmax(row)))
        assert got.value == pytest.approx(row.max(), abs=1e-6) and got.unit == "weight"
        values = _values(Q.choices_for(loaded, q, STATE))
        assert got.answer in values and list(got.detail) == values
        # a causal model's query sees itself and the tokens before it; an encoder's sees every token
        assert len(values) == (query % n + 1 if stack == "decoder" else n)
        assert sum(got.detail.values()) == pytest.approx(1.0, abs=1e-5)
    label = Q.choices_for(loaded, Q.TopKey(prompt=PROMPT, layer=0, head=0, query=-1), STATE)[2].label
    assert label["en"] == label["tr"] == f"2 · {a.tokens[2].label.strip()}" \
        and a.tokens[2].label.strip() in ("cat", "chased")


@pytest.mark.parametrize("arch, stack", [("gpt2", "decoder"), ("bert", "encoder")])
def test_sink_is_the_token_with_the_most_attention_in_the_later_layers(tiny, arch, stack):
    loaded = tiny(arch)
    att = np.asarray(models.analyze(loaded, TEXT).attentions[stack], dtype=np.float64)  # (layers, heads, q, k)
    for from_layer in (None, 0):
        first = att.shape[0] // 2 if from_layer is None else from_layer
        shares = att[first:].mean(axis=(1, 2)).mean(axis=0)
        q = Q.Sink(prompt=PROMPT, from_layer=from_layer)
        got = Q.measure(loaded, q, STATE)
        assert got.answer == str(int(np.argmax(shares)))
        np.testing.assert_allclose([got.detail[str(j)] for j in range(len(shares))], shares, atol=1e-6)
        assert sum(got.detail.values()) == pytest.approx(1.0, abs=1e-5)
        assert got.answer in _values(Q.choices_for(loaded, q, STATE))


def test_top_head_is_the_head_whose_removal_raises_the_loss_most(tiny):
    loaded = tiny("gpt2")
    heads = ("decoder.0.1", "decoder.1.0", "decoder.1.3")
    base = models.analyze(loaded, TEXT).loss
    rise = {h: models.analyze(loaded, TEXT, heads_off={Q.parse_head(h, "h")}).loss - base for h in heads}
    got = Q.measure(loaded, Q.TopHead(prompt=PROMPT, heads=heads), STATE)
    assert got.unit == "nats" and got.answer == max(rise, key=rise.get)
    for h in heads:
        assert got.detail[h] == pytest.approx(rise[h], abs=1e-4)
    choices = Q.choices_for(loaded, Q.TopHead(prompt=PROMPT, heads=heads), STATE)
    assert _values(choices) == list(heads) and choices[1].label == {"en": "layer 1, head 0", "tr": "katman 1, kafa 0"}


def test_top_head_of_an_embedding_model_is_the_largest_embedding_change(tiny):
    """minilm-l6's kind: no head, so the metric is 1 - cos of the mean-pooled sentence embedding."""
    loaded = tiny("bert")
    heads = ("encoder.0.0", "encoder.0.3", "encoder.1.2")
    full = models.analyze(loaded, TEXT).embedding
    change = {}
    for h in heads:
        e = models.analyze(loaded, TEXT, heads_off={Q.parse_head(h, "h")}).embedding
        change[h] = 1 - float(e @ full / np.linalg.norm(e) / np.linalg.norm(full))
    got = Q.measure(loaded, Q.TopHead(prompt=PROMPT, heads=heads), STATE)
    assert got.unit == "1 - cos" and got.answer == max(change, key=change.get)
    for h in heads:
        assert got.detail[h] == pytest.approx(change[h], abs=1e-4)


@pytest.mark.parametrize("mask, off", [("sliding_window:2", ()), ("native", ("decoder.0.0", "decoder.1.1")),
                                       ("bidirectional", ("decoder.1.2",))])
def test_loss_change_is_the_difference_of_the_two_losses_and_its_bucket(tiny, mask, off):
    loaded = tiny("gpt2")
    before = models.analyze(loaded, TEXT).loss
    after = models.analyze(loaded, TEXT, mask=mask, heads_off={Q.parse_head(h, "h") for h in off}).loss
    q = Q.LossChange(prompt=PROMPT, mask=mask, heads_off=off)
    got = Q.measure(loaded, q, STATE)
    assert got.value == pytest.approx(after - before, abs=1e-5) and got.unit == "nats"
    assert got.answer == Q.bucket(after - before)
    assert got.detail == pytest.approx({"before": before, "after": after})
    assert _values(Q.choices_for(loaded, q, STATE)) == list(Q.BUCKETS)


def test_buckets():
    assert [Q.bucket(x) for x in (-1.0, -0.051, -0.05, 0.0, 0.05, 0.051, 0.49, 0.5, 3.0)] == [
        "falls", "falls", "same", "same", "same", "rises_little", "rises_little", "rises_lot", "rises_lot"]


def _code(fn, *args) -> str:
    with pytest.raises(Q.LessonError) as info:
        fn(*args)
    assert isinstance(info.value, ValueError) and isinstance(info.value, models.DikkatError)
    return info.value.code


def test_a_question_that_does_not_fit_the_model_or_the_text_says_why(tiny):
    gpt2, bert = tiny("gpt2"), tiny("bert")  # 2 layers x 4 heads each
    key = Q.TopKey
    for fn in (Q.measure, Q.choices_for):
        assert _code(fn, gpt2, key(prompt=PROMPT, layer=2, head=0, query=0), STATE) == "lesson_layer_range"
        assert _code(fn, gpt2, key(prompt=PROMPT, layer=0, head=4, query=0), STATE) == "lesson_head_range"
        assert _code(fn, gpt2, key(prompt=PROMPT, layer=0, head=0, query=0, stack="encoder"), STATE) == "lesson_stack"
        assert _code(fn, gpt2, key(prompt=PROMPT, layer=0, head=0, query=5), STATE) == "lesson_question_query_range"
        assert _code(fn, gpt2, key(prompt=PROMPT, layer=0, head=0, query=-6), STATE) == "lesson_question_query_range"
        assert _code(fn, gpt2, key(prompt=PROMPT, layer=0, head=0, query=0),
                     {"text": "  "}) == "lesson_question_no_text"
        assert _code(fn, gpt2, Q.Sink(prompt=PROMPT), {}) == "lesson_question_no_text"
        assert _code(fn, bert, Q.LossChange(prompt=PROMPT, mask="causal"), STATE) == "lesson_question_loss"
        assert _code(fn, gpt2, Q.TopHead(prompt=PROMPT, heads=("decoder.0.0", "decoder.0.9")),
                     STATE) == "lesson_head_range"
        assert _code(fn, gpt2, Q.Sink(prompt=PROMPT, from_layer=2), STATE) == "lesson_layer_range"
    long = {"text": " ".join(["the cat"] * 25)}
    assert _code(Q.choices_for, gpt2, Q.Sink(prompt=PROMPT), long) == "lesson_question_choices"
    assert Q.measure(gpt2, Q.Sink(prompt=PROMPT), long).answer  # the answer itself is still measured
    assert _code(Q.measure, gpt2, Q.TopKey(prompt=PROMPT, layer=0, head=0, query=0), {"text": ""}) \
        == "lesson_question_no_text"


def test_a_speech_question_listens_to_a_shipped_clip_only():
    """No Whisper is loaded: the clip and the kind are refused before the engine is called."""
    speech = SimpleNamespace(name="whisper", reads_text=False, family="encoder-decoder",
                             stacks={"encoder": (2, 2), "decoder": (2, 2), "cross": (2, 2)})
    for clip in ("../../etc/passwd", "/etc/passwd", "nope.wav"):
        assert _code(Q.measure, speech, Q.Sink(prompt=PROMPT), {"masks_clip": clip}) == "lesson_question_clip"
    assert _code(Q.measure, speech, Q.TopHead(prompt=PROMPT, heads=("decoder.0.0", "decoder.0.1")),
                 STATE) == "lesson_question_text_model"
    assert _code(Q.measure, speech, Q.LossChange(prompt=PROMPT, mask="causal"), STATE) == "lesson_question_text_model"
    assert Q.default_stack("encoder-decoder", "speech") == "decoder" and Q.default_stack("encoder", "text") == "encoder"


def test_a_question_table_round_trips():
    for q in (Q.TopKey(prompt=PROMPT, layer=1, head=2, query=-1, stack="decoder", model="smollm2-135m"),
              Q.TopHead(prompt=PROMPT, heads=("decoder.0.1", "decoder.2.3")),
              Q.LossChange(prompt=PROMPT, heads_off=("decoder.0.1",)), Q.LossChange(prompt=PROMPT, mask="causal"),
              Q.Sink(prompt=PROMPT), Q.Sink(prompt=PROMPT, from_layer=3)):
        table = q.table()
        assert table["kind"] == q.kind and ("model" in table) == (q.model is not None)
        assert Q.parse_question(table) == q


@pytest.mark.parametrize("table, code", [
    ("top_key", "lesson_bad_field"),
    ({"kind": "biggest", "prompt": PROMPT}, "lesson_question_kind"),
    ({"prompt": PROMPT}, "lesson_question_kind"),
    ({"kind": "top_key", "prompt": PROMPT, "layer": 0, "head": 0}, "lesson_question_field"),
    ({"kind": "top_key", "prompt": PROMPT, "layer": "0", "head": 0, "query": 1}, "lesson_question_field"),
    ({"kind": "top_key", "prompt": PROMPT, "layer": True, "head": 0, "query": 1}, "lesson_question_field"),
    ({"kind": "top_key", "prompt": PROMPT, "layer": -1, "head": 0, "query": 1}, "lesson_question_field"),
    ({"kind": "top_key", "prompt": PROMPT, "layer": 0, "head": 0, "query": 1, "stack": "middle"},
     "lesson_question_field"),
    ({"kind": "top_key", "prompt": PROMPT, "layer": 0, "head": 0, "query": 1, "heads": []}, "lesson_unknown_field"),
    ({"kind": "top_key", "prompt": {"en": "x"}, "layer": 0, "head": 0, "query": 1}, "lesson_missing_language"),
    ({"kind": "sink", "prompt": {"en": "x", "tr": " "}}, "lesson_missing_language"),
    ({"kind": "sink", "prompt": {"en": "x", "tr": "y", "de": "z"}}, "lesson_unknown_field"),
    ({"kind": "sink", "prompt": "x"}, "lesson_bad_field"),
    ({"kind": "top_head", "prompt": PROMPT, "heads": ["decoder.1.2"]}, "lesson_question_field"),
    ({"kind": "top_head", "prompt": PROMPT, "heads": ["decoder.1.2", "decoder.1.2"]}, "lesson_question_field"),
    ({"kind": "top_head", "prompt": PROMPT, "heads": [f"decoder.0.{h}" for h in range(9)]}, "lesson_question_field"),
    ({"kind": "top_head", "prompt": PROMPT, "heads": ["decoder.1.2", "decoder.x.2"]}, "lesson_question_field"),
    ({"kind": "top_head", "prompt": PROMPT, "heads": "decoder.1.2,decoder.1.3"}, "lesson_question_field"),
    ({"kind": "loss_change", "prompt": PROMPT}, "lesson_question_field"),
    ({"kind": "loss_change", "prompt": PROMPT, "mask": "diagonal:3"}, "lesson_question_field"),
    ({"kind": "loss_change", "prompt": PROMPT, "mask": "sliding_window:0"}, "lesson_question_field"),
    ({"kind": "loss_change", "prompt": PROMPT, "heads_off": ["layer 3"]}, "lesson_question_field"),
])
def test_a_malformed_question_is_refused_with_its_code(table, code):
    with pytest.raises(Q.LessonError) as info:
        Q.parse_question(table, "steps.2.question")
    assert info.value.code == code
    assert info.value.params["where"].startswith("steps.2.question")
