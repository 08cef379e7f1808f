"""The shipped lesson (lessons/attention-intro.toml) step by step in the app, in English and Turkish: each step's
link opens its page with no exception and no error, on the step's model and sentence, with every parameter of the
link taken; and each step's question, measured on its bundled model, answers with one of its choices.

One AppTest per step and language, opened as a link opens it (the step's query parameters, one run): models and
analyses are cached by the process, so a step costs one run of its page."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import models
from live import lessons as L
from live import questions as Q

APP = str(Path(__file__).resolve().parents[2] / "app.py")
LESSON = L.load_lesson(L.LESSONS / "attention-intro.toml")
STEPS = list(enumerate(LESSON.steps, start=1))
# The model's answers the lesson's later texts rely on (step 6: "the loss falls"; step 14: "the sink is the first
# token"; its prompt: "a window of 3 alone makes the loss jump"): a change here means the texts need one too.
EXPECTED = {1: "2", 3: "2", 4: "3", 5: "falls", 7: "6", 8: "0", 10: "decoder.1.3", 11: "falls", 12: "rises_lot",
            13: "0", 14: "rises_little", 15: "4", 16: "7"}


def _shown(value) -> str:
    """A Session State value as the link writes it (views/shared/urlstate.py: UrlState.sync)."""
    return L.link_text(value)


@pytest.mark.parametrize("lang", ["en", "tr"])
@pytest.mark.parametrize("number, step", STEPS, ids=[f"step{n}-{s.page}" for n, s in STEPS])
def test_each_step_opens_its_page_as_its_link_says(number, step, lang):
    at = AppTest.from_file(APP, default_timeout=600)
    at.query_params = {"lang": lang, **step.query()}
    at.switch_page(step.page_path)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert at.session_state["lang"] == lang and at.title and at.title[0].value
    model = step.params["model_key"]
    assert at.selectbox(key="model_key").value == model
    if "text" in step.params:
        assert at.text_area(key="text").value == step.params["text"]
    for key, value in step.params.items():
        if key == "off":  # the heads switched off live in the pruning page's state, per model
            off = at.session_state["prune_off"]  # views/shared/cache.py: HEADS_OFF_KEY
            assert sorted(tuple(h) for h in off[model]) == sorted(Q.parse_head(h, "off") for h in value)
        else:
            assert _shown(at.session_state[key]) == L.link_text(value), key


QUESTIONS = [(n, s) for n, s in STEPS if s.question is not None]


@pytest.mark.parametrize("number, step", QUESTIONS, ids=[f"step{n}-{s.question.kind}" for n, s in QUESTIONS])
def test_each_question_is_answered_by_its_model_with_one_of_its_choices(number, step):
    loaded = models.load(step.question_model())
    state = step.query()
    choices = Q.choices_for(loaded, step.question, state)
    measured = Q.measure(loaded, step.question, state)
    assert 2 <= len(choices) <= Q.MAX_CHOICES
    assert measured.answer in [c.value for c in choices]
    assert measured.answer == EXPECTED[number], (number, measured)
    if number == 14:  # its prompt says a window of 3 alone makes the loss jump
        alone = Q.LossChange(prompt=step.question.prompt, mask="sliding_window:3")
        assert Q.measure(loaded, alone, state).answer == "rises_lot"
