"""Lessons as files (issue 29): a lesson is a TOML file in ``lessons/`` (read with Python's ``tomllib``)::

    id = "attention-intro"                       # lower-case letters, digits and dashes
    [title]
    en = "..."
    tr = "..."

    [[steps]]                                    # in order; a step opens one page of the app
    page = "qkv"                                 # a page of app.py: PAGES
    [steps.chapter]                              # optional: a step that starts a chapter
    en = "..."
    tr = "..."
    [steps.text]                                 # what the teacher says: 2-5 sentences, plain text
    en = "..."
    tr = "..."
    [steps.params]                               # the page's link (query parameters), TOML values
    model_key = "minilm-l6"
    text = "The cat chased the mouse"
    qkv_layer = 2
    [steps.question]                             # optional: live.questions (kind, prompt, its parameters)
    kind = "top_key"
    layer = 2
    head = 5
    query = 3
    [steps.question.prompt]
    en = "..."
    tr = "..."

Every text is written in English and Turkish. :func:`load_lesson` checks a file against the app without loading a
model: each page exists (:data:`PAGES`), each parameter is one that page reads (:data:`PARAMS`; the sidebar's
``model_key`` and ``text`` on every page), and each value is one the page would take (a catalog model of
``models.list_models()``; layers and heads inside ``models.get_spec(key).layers`` / ``.heads``; an option of the
widget; a number inside the widget's bounds); a question fits its model. A mistake raises :class:`LessonError` with
a ``code`` (Turkish: ``assets/i18n/lesson_errors.json``) and ``where``, the field at fault (``steps.3.params.layer``:
steps counted from 1, as a teacher counts them).

:func:`save_lesson` writes the same layout with a small TOML writer of its own (:func:`to_toml`): the schema is
fixed (strings, whole numbers, decimals, booleans, flat lists, tables of texts), and a new pinned dependency
(``tomli-w``) would make every ``make run`` install again for ~60 lines.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

import models
from models import pruning
from models.analysis import kv_layout

from .questions import LANGS, LessonError, Question, check_head, check_question, parse_head, parse_question, texts

__all__ = ["LESSONS", "PAGES", "PARAMS", "Lesson", "LessonError", "Step", "load_lesson", "parse_lesson",
           "save_lesson", "shipped_lessons", "to_toml", "validate_lesson"]

ROOT = Path(__file__).resolve().parent.parent
LESSONS = ROOT / "lessons"
PAGES = ("explore", "pruning", "masks", "flow", "why", "experiments", "atlas", "qkv", "positions", "cost", "kvcache")
"""The app's pages (``app.py``: ``views/<page>.py``)."""
TEXT_PAGES = ("explore", "pruning", "flow", "why", "qkv")  # refuse a speech model (Whisper): they read a sentence
_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")

# ------------------------------------------------------------------------------- what each page reads from a link


@dataclass(frozen=True)
class _Ctx:
    """What a parameter is checked against: its ``where``, the step's ``page`` and ``params``, and the catalog
    models the step may open with (its ``model_key``, else each interface language's default model)."""

    where: str
    page: str
    params: Mapping
    specs: tuple[models.ModelSpec, ...]


def _stacks(spec: models.ModelSpec) -> dict[str, tuple[int, int]]:
    """A catalog model's stacks and their ``(layers, heads)``, from its family (no loading)."""
    names = {"encoder": ("encoder",), "decoder": ("decoder",)}.get(spec.family, ("encoder", "decoder", "cross"))
    return {stack: (spec.layers, spec.heads) for stack in names}


@dataclass(frozen=True)
class Param:
    """One query parameter a page reads.

    Attributes:
        kind: ``text``, ``flag`` (a TOML boolean), ``whole`` (a whole number in ``bounds``), ``choice`` (one of
            ``options``), ``several`` (a list of at most ``most`` of ``options``), ``layer`` / ``head`` (inside the
            models ``of`` names; ``head`` may be ``"mean"`` with ``mean``), ``heads`` (a list of
            ``stack.layer.head``), ``model`` (a catalog key).
        options, bounds: fixed, or a function of the step (:class:`_Ctx`).
        of: the catalog models whose layers and heads bound the value (default: the step's).
        when: ``(predicate of the step, what it needs in words)``: the page reads the parameter only then.
    """

    kind: str
    options: object = None
    bounds: object = None
    most: int = 0
    of: Callable | None = None
    mean: bool = False
    when: tuple[Callable, str] | None = None


def _of(value, ctx: _Ctx):
    return value(ctx) if callable(value) else value


def _fixed(key: str) -> Callable:
    return lambda ctx: (models.get_spec(key),)


def _encdec(ctx: _Ctx) -> tuple:
    spec = models.CATALOG.get(ctx.params.get("masks_encdec_choice", "whisper-base"))
    return (spec,) if spec is not None else ()  # a hub model's shape is not known before it loads


def _gqa(ctx: _Ctx) -> tuple:
    """The Masks page's GQA section: the step's model when its heads share key/value heads, else smollm2-135m."""
    return tuple(s if s.kv_heads and s.kv_heads < s.heads else models.get_spec("smollm2-135m") for s in ctx.specs)


def _section(name: str) -> tuple[Callable, str]:
    return lambda ctx: ctx.params.get("masks_section", "compare") == name, f"masks_section = {name}"


def _kind(kind: str) -> tuple[Callable, str]:
    def test(ctx):
        return (_section("compare")[0](ctx)
                and kind in (ctx.params.get("masks_kinds") or ["bidirectional", "causal"]))
    return test, f"masks_kinds ∋ {kind}"


def _speech_encdec(speech: bool) -> tuple[Callable, str]:
    def test(ctx):
        spec = models.CATALOG.get(ctx.params.get("masks_encdec_choice", "whisper-base"))
        return _section("encdec")[0](ctx) and (spec is not None and spec.reads == "speech") == speech
    return test, "masks_section = encdec, masks_encdec_choice: " + ("whisper-base" if speech else "text")


def _stack_options(skip_cross: bool) -> Callable:
    def options(ctx):
        common = [s for s in ("encoder", "decoder", "cross") if all(s in _stacks(spec) for spec in ctx.specs)]
        return [s for s in common if not (skip_cross and s == "cross")]
    return options


def _experiments() -> tuple:
    from models import experiments

    return tuple(experiments.EXPERIMENTS)


def _atlas_metrics(ctx) -> tuple:
    from models.atlas import RANKABLE  # pandas and pyarrow: only when a lesson opens the atlas

    return RANKABLE


TEXT, FLAG, MODEL = Param("text"), Param("flag"), Param("model")
LAYER, HEAD, HEAD_OR_MEAN = Param("layer"), Param("head"), Param("head", mean=True)
MASK_MAX = 24  # the Masks page draws at most 24 tokens (views/mask_sections/common.py: MAX_TOKENS)
MASK_KINDS = ("bidirectional", "causal", "sliding_window", "strided", "sink_window", "custom")
ENCDEC_PRESETS = ("Helsinki-NLP/opus-mt-tr-en", "whisper-base", "google-t5/t5-small", "facebook/bart-base")
CLIPS = ("the_cat_chased_the_mouse_en.wav", "kedi_fareyi_kovaladi_tr.wav", "record")
AUDIO_LANGUAGES = ("en", "tr", "de", "fr", "es")
BIG = 10_000_000  # a bound the page sets by the text's length, unknown before a model reads it

SIDEBAR = {"model_key": MODEL, "text": TEXT}
"""The sidebar's parameters, read on every page (a lesson keeps to the catalog: no ``model_custom``, and the
interface language is the class's, not the lesson's: no ``lang``)."""

PARAMS: dict[str, dict[str, Param]] = {
    "explore": {
        "view": Param("choice", ("head", "model", "heatmap", "summary")),
        "stack": Param("choice", _stack_options(False)),
        **{k: FLAG for k in ("hide_special", "hide_first", "avg", "rollout", "value", "side")},
        "words": Param("choice", (True, False, "morphemes")),  # word level, or Turkish morphemes (issue 32)
        "img_fmt": Param("choice", ("PNG", "SVG")),
        "layer": LAYER, "head": HEAD, "hv_start": Param("whole", bounds=(0, BIG)),
        "pair": Param("text", when=(lambda ctx: all(s.family == "encoder" for s in ctx.specs), "an encoder model")),
    },
    "pruning": {"off": Param("heads"), "prune_show_layer": LAYER, "prune_show_head": HEAD},
    "masks": {
        "masks_section": Param("choice", ("compare", "bert_gpt", "encdec", "gqa", "per_head")),
        "masks_kinds": Param("several", MASK_KINDS, most=4, when=_section("compare")),
        "masks_window": Param("whole", bounds=(1, MASK_MAX), when=_kind("sliding_window")),
        "masks_stride": Param("whole", bounds=(1, MASK_MAX), when=_kind("strided")),
        "masks_sink_window": Param("whole", bounds=(1, MASK_MAX), when=_kind("sink_window")),
        "masks_sinks": Param("whole", bounds=(0, MASK_MAX), when=_kind("sink_window")),
        "masks_custom_start": Param("choice", lambda ctx: models.masks.STARTS, when=_kind("custom")),
        "masks_cmp_layer": Param("layer", when=_section("compare")),
        "masks_cmp_head": Param("head", mean=True, when=_section("compare")),
        "masks_bg_enc_layer": Param("layer", of=_fixed("minilm-l6"), when=_section("bert_gpt")),
        "masks_bg_enc_head": Param("head", of=_fixed("minilm-l6"), mean=True, when=_section("bert_gpt")),
        "masks_bg_dec_layer": Param("layer", of=_fixed("smollm2-135m"), when=_section("bert_gpt")),
        "masks_bg_dec_head": Param("head", of=_fixed("smollm2-135m"), mean=True, when=_section("bert_gpt")),
        "masks_encdec_choice": Param("choice", ENCDEC_PRESETS, when=_section("encdec")),
        "masks_src": Param("text", when=_speech_encdec(False)),
        "masks_tgt": Param("text", when=_speech_encdec(False)),
        "masks_encdec_hide": Param("flag", when=_section("encdec")),
        "masks_ed_layer": Param("layer", of=_encdec, when=_section("encdec")),
        "masks_ed_head": Param("head", of=_encdec, mean=True, when=_section("encdec")),
        "masks_align_threshold": Param("choice", tuple(round(0.05 * i, 2) for i in range(21)),
                                       when=_speech_encdec(False)),
        "masks_clip": Param("choice", CLIPS, when=_speech_encdec(True)),
        "masks_audio_lang": Param("choice", AUDIO_LANGUAGES, when=_speech_encdec(True)),
        "masks_audio_tgt": Param("text", when=_speech_encdec(True)),
        "masks_audio_heads": Param("choice", ("alignment", "selected"), when=_speech_encdec(True)),
        "masks_gqa_layer": Param("layer", of=_gqa, when=_section("gqa")),
        # masks per head (issue 31)
        "masks_ph_text": Param("choice", ("long", "sidebar"), when=_section("per_head")),
        "masks_ph_preset": Param("choice", ("window", "duo", "custom"), when=_section("per_head")),
        "masks_ph_window": Param("whole", bounds=(1, MASK_MAX), when=_section("per_head")),
        "masks_ph_sinks": Param("whole", bounds=(0, MASK_MAX), when=_section("per_head")),
        "masks_ph_k": Param("whole", bounds=(0, BIG), when=_section("per_head")),
        "masks_ph_score": Param("choice", ("lost", "retrieval"), when=_section("per_head")),
        "masks_ph_default": Param("text", when=_section("per_head")),
        "masks_ph_budget": Param("whole", bounds=(2, BIG), when=_section("per_head")),
    },
    "flow": {
        "flow_mask": Param("choice", ("native", "bidirectional", "causal")), "flow_use_off": FLAG,
        "flow_level": Param("choice", ("tokens", "words", "morphemes")),  # Turkish morphemes (issue 32)
        "flow_stack": Param("choice", _stack_options(True)), "flow_position": Param("whole", bounds=(0, BIG)),
        "flow_layer": LAYER, "flow_head": HEAD,
        "flow_threshold": Param("choice", (0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2)),
        "flow_de_layer": LAYER, "flow_de_head": HEAD,
    },
    "why": {
        "why_mask": Param("choice", ("native", "bidirectional", "causal")), "why_use_off": FLAG,
        "why_stack": Param("choice", _stack_options(False)), "why_layer": LAYER, "why_head": HEAD,
        "why_i": Param("whole", bounds=(0, BIG)), "why_j": Param("whole", bounds=(0, BIG)),
        "why_parts": Param("choice", (4, 6, 8, 10, 12)), "why_by": Param("choice", ("weighted", "at_j")),
        "why_comp": FLAG,
    },
    "experiments": {"exp_which": Param("choice", lambda ctx: _experiments())},
    "atlas": {
        "atlas_corpus": Param("choice", ("en", "tr", "upload")), "atlas_column": TEXT,
        "atlas_max_tokens": Param("whole", bounds=(2, BIG)), "atlas_limit": Param("whole", bounds=(0, 100_000)),
        "atlas_repeats": Param("whole", bounds=(0, 1000)), "atlas_metric": Param("choice", _atlas_metrics),
        "atlas_lowest": FLAG, "atlas_stack": Param("choice", _stack_options(False)),
        "atlas_layer": LAYER, "atlas_head": HEAD,
    },
    "qkv": {
        "qkv_stack": Param("choice", _stack_options(True)), "qkv_layer": LAYER, "qkv_head": HEAD,
        "qkv_query": Param("whole", bounds=(0, BIG)), "qkv_noscale": FLAG,
        "qkv_temperature": Param("choice", tuple(round(0.1 * i, 1) for i in range(1, 51))),
    },
    "positions": {
        **{k: Param("whole", bounds=(0, 100_000)) for k in ("pos_m", "pos_n", "pos_t")},
        "pos_alibi_head": Param("whole", bounds=lambda ctx: (0, min(s.heads for s in ctx.specs) - 1),
                                when=(lambda ctx: all(s.heads > 1 for s in ctx.specs), "a model of 2 heads or more")),
        "pos_text_a": TEXT, "pos_text_b": TEXT, "pos_wo_layer": LAYER, "pos_wo_head": HEAD_OR_MEAN,
    },
    "cost": {
        "cost_lengths": Param("several", tuple(2 ** i for i in range(4, 11)), most=7),
        "cost_repeats": Param("whole", bounds=(1, 5)), "cost_log": FLAG,
    },
    "kvcache": {
        "kv_preset": Param("choice", lambda ctx: tuple(f"loaded:{s.key}" for s in ctx.specs[:1]
                                                       if len(ctx.specs) == 1) + tuple(kv_layout.KV_PRESETS)),
        **{k: Param("whole", bounds=b, when=(lambda ctx: "kv_preset" in ctx.params, "kv_preset"))
           for k, b in (("kv_layers", (1, 1000)), ("kv_heads_q", (1, 1024)), ("kv_heads_kv", (1, 1024)),
                        ("kv_head_dim", (1, 4096)), ("kv_window", (0, BIG)), ("kv_window_layers", (0, 1000)))},
        "kv_bytes": Param("choice", (1, 2, 4), when=(lambda ctx: "kv_preset" in ctx.params, "kv_preset")),
        "kv_tokens": Param("whole", bounds=(1, BIG)), "kv_prompt": TEXT, "kv_new_tokens": Param("whole", bounds=(4, 64)),
    },
}
"""Each page's query parameters (``views/``: ``url_init``, ``UrlState.bind``, ``layer_head``), beside the sidebar's
:data:`SIDEBAR`; ``tests/engine/test_lessons_format.py`` checks the two lists match the pages' own."""


def link_text(value) -> str:
    """A TOML value as the link writes it (``views/shared/urlstate.py``: ``url_sync``): a boolean ``1``/``0``, a
    list comma-separated, a number as Python writes it."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (list, tuple)):
        return ",".join(link_text(v) for v in value)
    return str(value)


def _bad(ctx: _Ctx, key: str, value, expected: str) -> LessonError:
    return LessonError(f"'{ctx.where}.{key}': the page '{ctx.page}' takes {expected}, not {value!r}.",
                       code="lesson_bad_value", where=f"{ctx.where}.{key}", page=ctx.page, value=repr(value),
                       expected=expected)


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _same(a, b) -> bool:
    """An option as the link compares it: as text, or as the same number (``url_init``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=0, abs_tol=1e-9)
    return type(a) is type(b) and a == b


def _check_range(ctx: _Ctx, key: str, spec: Param, value) -> None:
    """A layer or head inside every model the parameter belongs to (:attr:`Param.of`, else the step's)."""
    for s in (spec.of(ctx) if spec.of is not None else ctx.specs):
        if spec.kind == "layer" and not 0 <= value < s.layers:
            raise LessonError(f"'{ctx.where}.{key}': '{s.key}' has layers 0 to {s.layers - 1}, not {value}.",
                              code="lesson_layer_range", where=f"{ctx.where}.{key}", model=s.key, layer=value,
                              last=s.layers - 1)
        if spec.kind == "head" and not 0 <= value < s.heads:
            raise LessonError(f"'{ctx.where}.{key}': '{s.key}' has heads 0 to {s.heads - 1}, not {value}.",
                              code="lesson_head_range", where=f"{ctx.where}.{key}", model=s.key, head=value,
                              last=s.heads - 1)


def _check_param(ctx: _Ctx, key: str, spec: Param, value) -> None:
    """Raise :class:`LessonError` unless the page would take ``value`` for ``key``."""
    if spec.when is not None and not spec.when[0](ctx):
        raise LessonError(f"'{ctx.where}.{key}': the page '{ctx.page}' reads it only with {spec.when[1]}.",
                          code="lesson_param_unused", where=f"{ctx.where}.{key}", page=ctx.page, needs=spec.when[1])
    kind = spec.kind
    if kind == "text" and not isinstance(value, str):
        raise _bad(ctx, key, value, "a text")
    if kind == "flag" and not isinstance(value, bool):
        raise _bad(ctx, key, value, "true or false")
    if kind == "model":
        keys = [s.key for s in models.list_models()]
        if value not in keys:
            raise LessonError(f"'{ctx.where}.{key}': {value!r} is not a model of the catalog ({', '.join(keys)}).",
                              code="lesson_unknown_model", where=f"{ctx.where}.{key}", model=str(value),
                              models=", ".join(keys))
    if kind == "whole":
        lo, hi = _of(spec.bounds, ctx)
        if not _whole(value) or not lo <= value <= hi:
            raise _bad(ctx, key, value, f"a whole number from {lo} to {hi}")
    if kind in ("choice", "several"):
        options = tuple(_of(spec.options, ctx))
        values = value if kind == "several" and isinstance(value, list) else [value]
        if (kind == "several" and (not isinstance(value, list) or len(value) > spec.most or len(set(map(str, value)))
                                   < len(value))) or not all(any(_same(v, o) for o in options) for v in values):
            many = f"a list of at most {spec.most} of: " if kind == "several" else "one of: "
            raise _bad(ctx, key, value, many + ", ".join(map(str, options)))
    if kind in ("layer", "head"):
        if kind == "head" and spec.mean and value == "mean":
            return
        if not _whole(value):
            raise _bad(ctx, key, value, "a whole number from 0" + (' or "mean"' if spec.mean else ""))
        _check_range(ctx, key, spec, value)
    if kind == "heads":
        parts = value if isinstance(value, list) else None
        if parts is None or not parts or not all(isinstance(p, str) for p in parts):
            raise _bad(ctx, key, value, 'a list of heads, e.g. ["decoder.3.1"]')
        for i, part in enumerate(parts):
            stack, layer, head = parse_head(part, f"{ctx.where}.{key}.{i + 1}")
            for s in ctx.specs:
                check_head(s.key, _stacks(s), stack, layer, head, f"{ctx.where}.{key}.{i + 1}")


# ---------------------------------------------------------------------------------------------- the lesson


@dataclass(frozen=True)
class Step:
    """One step of a lesson: a page opened with ``params`` (TOML values: text, whole number, decimal, boolean, or a
    list), what the teacher says (``text``, ``{"en", "tr"}``, plain text), the ``chapter`` it starts (or None) and
    the ``question`` posed there (:mod:`live.questions`, or None)."""

    page: str
    text: dict[str, str]
    params: dict = field(default_factory=dict)
    chapter: dict[str, str] | None = None
    question: Question | None = None

    @property
    def page_path(self) -> str:
        """The page's script, as ``st.switch_page`` and AppTest name it: ``views/<page>.py``."""
        return f"views/{self.page}.py"

    def query(self) -> dict[str, str]:
        """The step's link: query parameter -> text, as the page reads it (``off`` as ``decoder.0.2,decoder.3.1``,
        :func:`models.pruning.heads_to_text`). Also the ``state`` a question is measured in."""
        out = {key: link_text(value) for key, value in self.params.items()}
        if "off" in self.params:
            out["off"] = pruning.heads_to_text(parse_head(h, "off") for h in self.params["off"])
        return out

    def question_model(self) -> str | None:
        """The catalog model a question is asked of: its own ``model``, else the step's ``model_key``."""
        if self.question is None:
            return None
        return self.question.model or self.params.get("model_key")


@dataclass(frozen=True)
class Lesson:
    """A lesson: ``id`` (its file's name without ``.toml``, by convention), ``title`` ``{"en", "tr"}`` and its
    ``steps`` in order; ``source`` is the file it was read from (not compared)."""

    id: str
    title: dict[str, str]
    steps: tuple[Step, ...]
    source: Path | None = field(default=None, compare=False)

    def chapters(self) -> list[tuple[int, dict[str, str]]]:
        """``(index of the step that starts it, title)`` of each chapter, in order."""
        return [(i, s.chapter) for i, s in enumerate(self.steps) if s.chapter is not None]


def _unknown(table: Mapping, known: tuple[str, ...], where: str) -> None:
    for key in table:
        if key not in known:
            raise LessonError(f"'{where}' has a field '{key}' a lesson does not take ({', '.join(known)}).",
                              code="lesson_unknown_field", where=f"{where}.{key}" if where else key,
                              known=", ".join(known))


def _need(table: Mapping, key: str, kind: type, where: str):
    if key not in table:
        raise LessonError(f"'{where}' needs the field '{key}'.", code="lesson_missing_field", where=where, field=key)
    value = table[key]
    if not isinstance(value, kind):
        expected = {str: "a text", list: "a list of tables", dict: "a table"}[kind]
        raise LessonError(f"'{where}.{key}' must be {expected}.", code="lesson_bad_field", where=f"{where}.{key}",
                          expected=expected)
    return value


def _parse_step(table, where: str) -> Step:
    if not isinstance(table, Mapping):
        raise LessonError(f"'{where}' must be a table.", code="lesson_bad_field", where=where, expected="a table")
    _unknown(table, ("page", "chapter", "text", "params", "question"), where)
    params = table.get("params", {})
    if not isinstance(params, Mapping):
        raise LessonError(f"'{where}.params' must be a table.", code="lesson_bad_field", where=f"{where}.params",
                          expected="a table")
    return Step(page=_need(table, "page", str, where), text=texts(table.get("text"), f"{where}.text"),
                params=dict(params),
                chapter=texts(table["chapter"], f"{where}.chapter") if "chapter" in table else None,
                question=parse_question(table["question"], f"{where}.question") if "question" in table else None)


def parse_lesson(data: Mapping, source: Path | None = None) -> Lesson:
    """A lesson from the table a TOML file holds, checked (:func:`validate_lesson`).

    Raises:
        LessonError: see :func:`validate_lesson`; also ``lesson_missing_field``, ``lesson_bad_field``,
            ``lesson_unknown_field``, ``lesson_missing_language``, ``lesson_bad_id``, ``lesson_no_steps`` and the
            question's codes (:func:`live.questions.parse_question`).
    """
    _unknown(data, ("id", "title", "steps"), "")
    lesson_id = _need(data, "id", str, "lesson")
    if not _ID.fullmatch(lesson_id):
        raise LessonError(f"A lesson's id is lower-case letters, digits and dashes (e.g. attention-intro), got "
                          f"{lesson_id!r}.", code="lesson_bad_id", where="id", id=lesson_id)
    steps = _need(data, "steps", list, "lesson")
    if not steps:
        raise LessonError("A lesson needs at least one step ([[steps]]).", code="lesson_no_steps", where="steps")
    lesson = Lesson(id=lesson_id, title=texts(data.get("title"), "title"),
                    steps=tuple(_parse_step(s, f"steps.{i + 1}") for i, s in enumerate(steps)), source=source)
    validate_lesson(lesson)
    return lesson


def _check_step(step: Step, where: str) -> None:
    if step.page not in PAGES:
        raise LessonError(f"'{where}.page': the app has no page {step.page!r} ({', '.join(PAGES)}).",
                          code="lesson_unknown_page", where=f"{where}.page", page=step.page, pages=", ".join(PAGES))
    known = {**SIDEBAR, **PARAMS[step.page]}
    if "model_key" in step.params:
        _check_param(_Ctx(f"{where}.params", step.page, step.params, ()), "model_key", MODEL, step.params["model_key"])
    specs = tuple(models.get_spec(k) for k in ([step.params["model_key"]] if "model_key" in step.params else
                                               dict.fromkeys(models.default_model_for_language(x) for x in LANGS)))
    ctx = _Ctx(f"{where}.params", step.page, step.params, specs)
    for key, value in step.params.items():
        if key not in known:
            raise LessonError(f"'{where}.params.{key}': the page '{step.page}' does not read '{key}' "
                              f"({', '.join(known)}).", code="lesson_unknown_param", where=f"{where}.params.{key}",
                              page=step.page, param=key, params=", ".join(known))
        _check_param(ctx, key, known[key], value)
    needs_text = step.page in TEXT_PAGES or (step.page == "masks" and _section("compare")[0](ctx))
    for spec in specs:
        if needs_text and spec.reads != "text":
            raise LessonError(f"'{where}.params.model_key': the page '{step.page}' reads a sentence; '{spec.key}' "
                              f"reads {spec.reads}.", code="lesson_model_page", where=f"{where}.params.model_key",
                              page=step.page, model=spec.key)
    if step.question is not None:
        _check_question(step, where)


def _check_question(step: Step, where: str) -> None:
    model = step.question_model()
    if model is None:
        raise LessonError(f"'{where}.question' is asked of a model: give the step's params.model_key or the "
                          "question's model.", code="lesson_question_field", where=f"{where}.question.model",
                          expected="a catalog model", got="none")
    _check_param(_Ctx(f"{where}.question", step.page, step.params, ()), "model", MODEL, model)
    spec = models.get_spec(model)
    if spec.reads == "text" and not str(step.params.get("text") or "").strip():
        raise LessonError(f"'{where}.question' is asked about the step's sentence: give params.text.",
                          code="lesson_question_field", where=f"{where}.params.text", expected="a text", got="none")
    check_question(step.question, spec.key, _stacks(spec), spec.family, spec.reads, f"{where}.question")


def validate_lesson(lesson: Lesson) -> None:
    """Check every step against the app (no model is loaded; see the module docstring).

    Raises:
        LessonError: ``lesson_unknown_page``, ``lesson_unknown_param``, ``lesson_param_unused`` (a parameter the
            page reads only in another state, e.g. ``masks_window`` without a sliding window),
            ``lesson_bad_value``, ``lesson_unknown_model``, ``lesson_model_page`` (a speech model on a page that
            reads a sentence), ``lesson_layer_range``, ``lesson_head_range``, ``lesson_stack``, and for a question
            ``lesson_question_field`` (no model, or no ``text`` to ask about), ``lesson_question_text_model``,
            ``lesson_question_loss``.
    """
    for i, step in enumerate(lesson.steps):
        _check_step(step, f"steps.{i + 1}")


def load_lesson(path) -> Lesson:
    """Read and check the lesson file ``path`` (UTF-8 TOML).

    Raises:
        LessonError: ``lesson_unreadable`` (missing, not UTF-8, not TOML), and :func:`parse_lesson`'s codes.
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise LessonError(f"Cannot read the lesson '{path.name}': {exc}", code="lesson_unreadable", file=path.name,
                          reason=str(exc)) from None
    return parse_lesson(data, source=path)


def shipped_lessons() -> list[Lesson]:
    """Every lesson of ``lessons/*.toml``, by file name.

    Raises:
        LessonError: a file that does not load (:func:`load_lesson`), or ``lesson_duplicate_id``.
    """
    out = [load_lesson(p) for p in sorted(LESSONS.glob("*.toml"))]
    ids = [lesson.id for lesson in out]
    for lesson_id in ids:
        if ids.count(lesson_id) > 1:
            raise LessonError(f"Two lessons have the id {lesson_id!r}.", code="lesson_duplicate_id", id=lesson_id)
    return out


# ---------------------------------------------------------------------------------------------- writing TOML

_BARE = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _string(text: str) -> str:
    """A TOML basic string (TOML 1.0 §String: ``"``, ``\\`` and control characters escaped)."""
    return '"' + "".join(_ESCAPES.get(c) or (f"\\u{ord(c):04X}" if ord(c) < 0x20 or ord(c) == 0x7F else c)
                         for c in text) + '"'


def _value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise LessonError(f"A lesson's number must be finite, got {value!r}.", code="lesson_bad_field",
                              where="params", expected="a finite number")
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    raise LessonError(f"A lesson cannot hold {value!r}.", code="lesson_bad_field", where="params",
                      expected="text, number, boolean or list")


def _key(key: str) -> str:
    return key if _BARE.fullmatch(key) else _string(key)


def _table(header: str, table: Mapping) -> list[str]:
    return ["", f"[{header}]"] + [f"{_key(k)} = {_value(v)}" for k, v in table.items()]


def to_toml(lesson: Lesson) -> str:
    """The lesson as TOML text, laid out as the module docstring shows (``tomllib.loads`` reads it back equal)."""
    lines = [f"id = {_string(lesson.id)}"] + _table("title", lesson.title)
    for step in lesson.steps:
        lines += ["", "[[steps]]", f"page = {_string(step.page)}"]
        if step.chapter is not None:
            lines += _table("steps.chapter", step.chapter)
        lines += _table("steps.text", step.text)
        if step.params:
            lines += _table("steps.params", step.params)
        if step.question is not None:
            table = step.question.table()
            prompt = table.pop("prompt")
            lines += _table("steps.question", table) + _table("steps.question.prompt", prompt)
    return "\n".join(lines) + "\n"


def save_lesson(lesson: Lesson, path) -> None:
    """Check ``lesson`` (:func:`validate_lesson`) and write it to ``path`` as UTF-8 TOML (:func:`to_toml`).

    Raises:
        LessonError: the lesson does not pass :func:`validate_lesson`, or holds a value TOML cannot write.
        OSError: the file cannot be written.
    """
    validate_lesson(lesson)
    Path(path).write_text(to_toml(lesson), encoding="utf-8")
