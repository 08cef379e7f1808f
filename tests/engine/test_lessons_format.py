"""Lessons as files (live/lessons.py, issue 29): the shipped lesson reads and fits the app, a lesson survives a save
and a load, every mistake is refused with its own code and a Turkish text, and the table of what each page reads
from a link is declared in pagestate/ (tests/engine/test_pagestate.py). No model is loaded."""

from __future__ import annotations

import ast
import copy
import json
import re
import string
import tomllib
from pathlib import Path

import pytest

from live import lessons as L
from live import questions as Q
from test_live_questions import CODES as ANSWER_CODES

ROOT = Path(__file__).resolve().parents[2]
T = {"en": "Look.", "tr": "Bakın."}
SENTENCE = "The cat chased the mouse"
BUNDLED = {"minilm-l6", "smollm2-135m", "whisper-base", "gemma3-270m"}


def _lesson(*steps: dict, **top) -> dict:
    return {"id": "t", "title": T, "steps": [dict(s) for s in steps], **top}


def _step(page: str = "explore", question: dict | None = None, **params) -> dict:
    step = {"page": page, "text": T, "params": {"model_key": "minilm-l6", "text": SENTENCE, **params}}
    if question is not None:
        step["question"] = question
    return step


def _key(**fields) -> dict:
    return {"kind": "top_key", "prompt": T, "layer": 0, "head": 0, "query": 1, **fields}


# ------------------------------------------------------------------------------------------ the shipped lesson


def test_the_shipped_lesson_reads_and_keeps_to_the_bundled_models_and_sentences():
    lessons = L.shipped_lessons()
    assert [x.id for x in lessons] == ["attention-intro"]
    lesson = lessons[0]
    assert lesson.source == L.LESSONS / "attention-intro.toml"
    chapters = lesson.chapters()
    assert len(chapters) == 10 and chapters[0][0] == 0
    bounds = [i for i, _ in chapters] + [len(lesson.steps)]
    for (start, title), end in zip(chapters, bounds[1:]):
        assert any(s.question is not None for s in lesson.steps[start:end]), title["en"]
    sentences = {x["text"] for name in ("sentences.json", "examples.json")
                 for x in next(iter(json.loads((ROOT / "assets" / name).read_text(encoding="utf-8")).values()))}
    pages = set()
    for step in lesson.steps:
        pages.add(step.page)
        assert step.params["model_key"] in BUNDLED
        assert step.question_model() in BUNDLED | {None}
        if "text" in step.params:
            assert step.params["text"] in sentences, step.params["text"]
        for text in [step.text] + ([step.chapter] if step.chapter else []) + \
                    ([step.question.prompt] if step.question else []):
            for lang in ("en", "tr"):
                assert not re.search(r"\*\*|`|\n|</?[a-z]", text[lang]), text[lang]  # plain text
        for lang in ("en", "tr"):  # 2-5 sentences ("et al.", "vd." and Turkish ordinals, "5. katman", end none)
            body = re.sub(r"\b(et al|vd|e\.g)\.", "", step.text[lang])
            assert 2 <= len(re.findall(r"(?<!\d)[.?!](\s|$)", body)) <= 5, step.text[lang]
    assert {"qkv", "explore", "positions", "masks", "experiments", "pruning", "cost", "kvcache"} <= pages
    kinds = {s.question.kind for s in lesson.steps if s.question}
    assert kinds == set(Q.KINDS)


def test_a_step_gives_its_link_and_its_question_model():
    step = L.Step(page="pruning", text=T, params={"model_key": "smollm2-135m", "text": SENTENCE, "flag": True,
                                                  "kinds": ["causal", "sink_window"], "x": 0.1,
                                                  "off": ["decoder.3.1", "decoder.0.2"]},
                  question=Q.Sink(prompt=T))
    assert step.query() == {"model_key": "smollm2-135m", "text": SENTENCE, "flag": "1", "kinds": "causal,sink_window",
                            "x": "0.1", "off": "decoder.0.2,decoder.3.1"}
    assert step.page_path == "views/pruning.py" and step.question_model() == "smollm2-135m"
    assert L.Step(page="cost", text=T).question_model() is None


# ----------------------------------------------------------------------------------------- saving and loading


def test_save_then_load_gives_the_same_lesson(tmp_path):
    lesson = L.shipped_lessons()[0]
    path = tmp_path / "copy.toml"
    L.save_lesson(lesson, path)
    again = L.load_lesson(path)
    assert again == lesson and again.source == path
    assert L.to_toml(again) == path.read_text(encoding="utf-8")


def test_the_writer_escapes_what_toml_must_escape(tmp_path):
    odd = {"en": 'Say "hi" \\ C:\\path\ttab\x01 \x7f ğüşİı 🐈', "tr": "iki\nsatır \r\n \b\f"}
    data = _lesson(_step(hide_special=True, layer=5, head=11, view="heatmap"),
                   _step("qkv", qkv_temperature=0.3, qkv_noscale=False),
                   _step("masks", masks_kinds=["causal", "sliding_window"], masks_window=3, masks_cmp_head="mean"))
    data["title"] = odd
    data["steps"][0]["chapter"] = odd
    data["steps"][1]["question"] = _key(prompt=odd, query=-1)
    lesson = L.parse_lesson(data)
    text = L.to_toml(lesson)
    assert tomllib.loads(text)["title"] == odd
    L.save_lesson(lesson, tmp_path / "odd.toml")
    assert L.load_lesson(tmp_path / "odd.toml") == lesson


def test_save_refuses_a_lesson_that_does_not_check_and_writes_nothing(tmp_path):
    bad = L.Lesson(id="t", title=T, steps=(L.Step(page="explore", text=T, params={"layer": 99}),))
    with pytest.raises(L.LessonError) as info:
        L.save_lesson(bad, tmp_path / "bad.toml")
    assert info.value.code == "lesson_layer_range" and not (tmp_path / "bad.toml").exists()


# --------------------------------------------------------------------------------------------- every mistake


def _swap(data: dict, path: str, value) -> dict:
    """``data`` with the item at ``path`` (``steps.0.params.layer``) set to ``value`` (deleted when ``...``)."""
    data = copy.deepcopy(data)
    *head, last = path.split(".")
    node = data
    for part in head:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if value is ...:
        del node[int(last) if isinstance(node, list) else last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return data


GOOD = _lesson(_step())
WHISPER = {"model_key": "whisper-base", "masks_section": "encdec"}
MISTAKES = [  # (code, the lesson's table, where the error points)
    ("lesson_missing_field", _swap(GOOD, "id", ...), "lesson"),
    ("lesson_missing_field", _swap(GOOD, "steps.0.page", ...), "steps.1"),
    ("lesson_bad_field", _swap(GOOD, "steps", "explore"), "lesson.steps"),
    ("lesson_bad_field", _swap(GOOD, "steps.0", "explore"), "steps.1"),
    ("lesson_bad_field", _swap(GOOD, "steps.0.params", ["layer"]), "steps.1.params"),
    ("lesson_bad_field", _swap(GOOD, "title", "Attention"), "title"),
    ("lesson_unknown_field", _swap(GOOD, "author", "me"), "author"),
    ("lesson_unknown_field", _swap(GOOD, "steps.0.pgae", "qkv"), "steps.1.pgae"),
    ("lesson_bad_id", _swap(GOOD, "id", "Attention Intro"), "id"),
    ("lesson_no_steps", _swap(GOOD, "steps", []), "steps"),
    ("lesson_missing_language", _swap(GOOD, "title", {"en": "Attention"}), "title"),
    ("lesson_missing_language", _swap(GOOD, "steps.0.text", {"en": "x", "tr": ""}), "steps.1.text"),
    ("lesson_missing_language", _swap(GOOD, "steps.0.chapter", {"tr": "x"}), "steps.1.chapter"),
    ("lesson_unknown_page", _lesson(_step("home")), "steps.1.page"),
    ("lesson_unknown_param", _lesson(_step(qkv_layer=1)), "steps.1.params.qkv_layer"),
    ("lesson_unknown_param", _lesson(_step(lang="tr")), "steps.1.params.lang"),
    ("lesson_unknown_param", _lesson(_step(model_custom="/tmp/model")), "steps.1.params.model_custom"),
    ("lesson_param_unused", _lesson(_step("masks", masks_window=3)), "steps.1.params.masks_window"),
    ("lesson_param_unused", _lesson(_step("masks", masks_section="gqa", masks_cmp_layer=1)),
     "steps.1.params.masks_cmp_layer"),
    ("lesson_param_unused", _lesson(_step(model_key="smollm2-135m", pair="A mouse.")), "steps.1.params.pair"),
    ("lesson_param_unused", _lesson(_step("kvcache", kv_layers=3)), "steps.1.params.kv_layers"),
    ("lesson_param_unused", _lesson(_step("masks", **WHISPER, masks_src="Kedi")), "steps.1.params.masks_src"),
    ("lesson_bad_value", _lesson(_step(view="grid")), "steps.1.params.view"),
    ("lesson_bad_value", _lesson(_step(layer="3")), "steps.1.params.layer"),
    ("lesson_bad_value", _lesson(_step(hide_special=1)), "steps.1.params.hide_special"),
    ("lesson_bad_value", _lesson(_step(text=3)), "steps.1.params.text"),
    ("lesson_bad_value", _lesson(_step(stack="decoder")), "steps.1.params.stack"),
    ("lesson_bad_value", _lesson(_step("masks", masks_kinds=["causal"] * 2)), "steps.1.params.masks_kinds"),
    ("lesson_bad_value", _lesson(_step("masks", masks_kinds=list(L.MASK_KINDS[:5]))), "steps.1.params.masks_kinds"),
    ("lesson_bad_value", _lesson(_step("masks", masks_kinds=["sliding_window"], masks_window=25)),
     "steps.1.params.masks_window"),
    ("lesson_bad_value", _lesson(_step("masks", masks_cmp_head="all")), "steps.1.params.masks_cmp_head"),
    ("lesson_bad_value", _lesson(_step("cost", cost_lengths=[100])), "steps.1.params.cost_lengths"),
    ("lesson_bad_value", _lesson(_step("qkv", qkv_temperature=7.0)), "steps.1.params.qkv_temperature"),
    ("lesson_bad_value", _lesson(_step("pruning", model_key="smollm2-135m", off="decoder.0.1")), "steps.1.params.off"),
    ("lesson_bad_value", _lesson(_step("kvcache", model_key="smollm2-135m", kv_preset="loaded:gemma3-270m")),
     "steps.1.params.kv_preset"),
    ("lesson_bad_value", _lesson(_step("experiments", exp_which="sparsity")), "steps.1.params.exp_which"),
    ("lesson_unknown_model", _lesson(_step(model_key="gpt-5")), "steps.1.params.model_key"),
    ("lesson_unknown_model", _lesson(_step(question=_key(model="gpt-5"))), "steps.1.question.model"),
    ("lesson_model_page", _lesson(_step(model_key="whisper-base")), "steps.1.params.model_key"),
    ("lesson_model_page", _lesson(_step("masks", model_key="whisper-base")), "steps.1.params.model_key"),
    ("lesson_layer_range", _lesson(_step(layer=6)), "steps.1.params.layer"),
    ("lesson_layer_range", _lesson(_step("masks", masks_section="bert_gpt", masks_bg_dec_layer=30)),
     "steps.1.params.masks_bg_dec_layer"),
    ("lesson_layer_range", _lesson(_step("masks", masks_section="gqa", masks_gqa_layer=30)),
     "steps.1.params.masks_gqa_layer"),
    ("lesson_layer_range", _lesson(_step("pruning", model_key="smollm2-135m", off=["decoder.30.0"])),
     "steps.1.params.off.1"),
    ("lesson_layer_range", _lesson(_step("qkv", question=_key(layer=6))), "steps.1.question"),
    ("lesson_head_range", _lesson(_step(head=12)), "steps.1.params.head"),
    ("lesson_head_range", _lesson(_step("positions", model_key="smollm2-135m", pos_wo_head=9)),
     "steps.1.params.pos_wo_head"),
    ("lesson_head_range", _lesson(_step("masks", **WHISPER, masks_ed_head=8)), "steps.1.params.masks_ed_head"),
    ("lesson_head_range", _lesson(_step(question={"kind": "top_head", "prompt": T, "heads": ["encoder.0.12",
                                                                                           "encoder.0.1"]})),
     "steps.1.question"),
    ("lesson_stack", _lesson(_step("pruning", model_key="smollm2-135m", off=["encoder.0.1"])), "steps.1.params.off.1"),
    ("lesson_stack", _lesson(_step(question=_key(stack="cross"))), "steps.1.question"),
    ("lesson_question_kind", _lesson(_step(question={"kind": "quiz", "prompt": T})), "steps.1.question.kind"),
    ("lesson_question_field", _lesson(_step(question=_key(query="chased"))), "steps.1.question.query"),
    ("lesson_question_field", _swap(_lesson(_step(question=_key())), "steps.0.params.model_key", ...),
     "steps.1.question.model"),
    ("lesson_question_field", _swap(_lesson(_step(question=_key())), "steps.0.params.text", ...),
     "steps.1.params.text"),
    ("lesson_question_text_model", _lesson(_step("masks", **WHISPER, question={
        "kind": "top_head", "prompt": T, "heads": ["decoder.0.0", "decoder.0.1"]})), "steps.1.question"),
    ("lesson_question_loss", _lesson(_step(question={"kind": "loss_change", "prompt": T, "mask": "causal"})),
     "steps.1.question"),
]


@pytest.mark.parametrize("code, data, where", MISTAKES, ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(MISTAKES)])
def test_every_mistake_is_refused_with_its_code_and_where(code, data, where):
    with pytest.raises(L.LessonError) as info:
        L.parse_lesson(data)
    assert info.value.code == code, str(info.value)
    assert info.value.params["where"] == where, info.value.params
    _turkish(info.value)


def test_what_a_page_takes_passes():
    """Values at the edges of what the pages take, and a step with no model checked against both default models."""
    L.parse_lesson(_lesson(
        _step(layer=5, head=11, view="summary", hide_first=True, img_fmt="SVG", hv_start=0, pair="A dog."),
        _step("masks", masks_kinds=["sink_window", "custom", "strided", "sliding_window"], masks_sink_window=24,
              masks_sinks=0, masks_custom_start="diagonal", masks_stride=1, masks_window=1, masks_cmp_head="mean"),
        _step("masks", model_key="smollm2-135m", masks_section="bert_gpt", masks_bg_enc_layer=5, masks_bg_dec_head=8),
        _step("masks", **WHISPER, masks_clip="record", masks_audio_lang="tr", masks_audio_heads="selected",
              masks_encdec_hide=False, masks_ed_layer=5),
        _step("masks", masks_section="encdec", masks_encdec_choice="google-t5/t5-small", masks_src="Kedi",
              masks_ed_layer=11, masks_align_threshold=0.35),
        _step("masks", masks_section="gqa", masks_gqa_layer=29),
        _step("masks", model_key="gemma3-270m", masks_section="gqa", masks_gqa_layer=17),
        _step("qkv", qkv_temperature=5, qkv_query=0, question=_key(query=-7)),
        _step("flow", flow_mask="causal", flow_threshold=0.1, flow_de_head=11, flow_use_off=False),
        _step("cost", cost_lengths=[16, 1024], cost_repeats=5),
        _step("kvcache", kv_preset="Mistral 7B", kv_layers=4, kv_bytes=1, kv_new_tokens=64),
        _step("kvcache", kv_preset="loaded:minilm-l6"),
        _step("positions", model_key="gemma3-270m", pos_alibi_head=3, pos_wo_head="mean"),
        _step("atlas", atlas_metric="induction", atlas_corpus="tr", atlas_layer=5),
        _step("experiments", exp_which="alignment"),
        _step("pruning", model_key="smollm2-135m", off=["decoder.29.8"]),
    ))
    no_model = {"page": "explore", "text": T, "params": {"layer": 5}}  # minilm-l6 (English) and e5 (Turkish)
    L.parse_lesson(_lesson(no_model))
    with pytest.raises(L.LessonError, match="minilm-l6") as info:
        L.parse_lesson(_swap(_lesson(no_model), "steps.0.params.layer", 8))
    assert info.value.code == "lesson_layer_range"


def test_a_file_that_cannot_be_read_says_so(tmp_path):
    codes = []
    (tmp_path / "bad.toml").write_text('id = "t"\ntitle = {en = "x"', encoding="utf-8")
    (tmp_path / "latin.toml").write_bytes('id = "ça"'.encode("latin-1"))
    for path in (tmp_path / "missing.toml", tmp_path / "bad.toml", tmp_path / "latin.toml"):
        with pytest.raises(L.LessonError) as info:
            L.load_lesson(path)
        codes.append(info.value.code)
        assert info.value.params["file"] == path.name
        _turkish(info.value)
    assert codes == ["lesson_unreadable"] * 3


def test_two_lessons_with_one_id_are_refused(tmp_path, monkeypatch):
    text = L.to_toml(L.parse_lesson(GOOD))
    (tmp_path / "a.toml").write_text(text, encoding="utf-8")
    (tmp_path / "b.toml").write_text(text, encoding="utf-8")
    monkeypatch.setattr(L, "LESSONS", tmp_path)
    with pytest.raises(L.LessonError) as info:
        L.shipped_lessons()
    assert info.value.code == "lesson_duplicate_id"
    _turkish(info.value)


# ------------------------------------------------------------------------------------ Turkish for every code


def _strings() -> dict:
    return json.loads((ROOT / "assets" / "i18n" / "lesson_errors.json").read_text(encoding="utf-8"))


def _placeholders(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


def _turkish(exc: L.LessonError) -> str:
    """The error's Turkish text, filled with its params (as views/shared/output.py fills it)."""
    tr = _strings()[f"errmsg_{exc.code}"]["tr"]
    return tr.format(**exc.params)


def _raises():
    """(where, code, keyword names) of every ``LessonError(...)`` in live/ (lessons, their checks, TOML, questions)."""
    for name in sorted(p.name for p in (ROOT / "live").glob("*.py")):
        for node in ast.walk(ast.parse((ROOT / "live" / name).read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "LessonError":
                kw = {k.arg: k.value for k in node.keywords}
                yield f"{name}:{node.lineno}", kw.pop("code"), set(kw)


def test_every_code_has_a_turkish_text_with_the_params_its_raises_pass_and_is_tested():
    strings = _strings()
    raised = set()
    for where, code, names in _raises():
        assert isinstance(code, ast.Constant), where
        raised.add(code.value)
        tr = strings.get(f"errmsg_{code.value}", {}).get("tr")
        assert tr, f"{where}: no Turkish errmsg_{code.value}"
        assert _placeholders(tr) == names, f"{where}: errmsg_{code.value} takes {_placeholders(tr)}, gets {names}"
    assert len(raised) >= 25
    assert {k for k in strings if k.startswith("errmsg_")} == {f"errmsg_{c}" for c in raised}
    assert strings["err_LessonError"]["tr"] and not strings["err_LessonError"]["en"]
    tested = {c for c, _, _ in MISTAKES} | {"lesson_unreadable", "lesson_duplicate_id"} | set(ANSWER_CODES)
    assert tested == raised, (raised - tested, tested - raised)
