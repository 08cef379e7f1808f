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

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Mapping

import pagestate
from pagestate.declared import AUDIO_LANGUAGES, CLIPS, ENCDEC_PRESETS, MASK_KINDS, MASK_MAX  # noqa: F401

from .lesson_checks import check_step
from .lesson_toml import to_toml
from .questions import LessonError, Question, parse_head, parse_question, texts

__all__ = ["LESSONS", "PAGES", "PARAMS", "Lesson", "LessonError", "Step", "load_lesson", "parse_lesson",
           "save_lesson", "shipped_lessons", "to_toml", "validate_lesson"]

ROOT = Path(__file__).resolve().parent.parent
LESSONS = ROOT / "lessons"
PAGES = pagestate.FOLLOWED
"""The pages a step may open (``app.py``: ``views/<page>.py``; declared in :mod:`pagestate`)."""
PARAMS = {name: dict(pagestate.page(name).by_key) for name in PAGES}
"""Each page's query parameters (:class:`pagestate.Param`, declared in :mod:`pagestate.declared`), beside the
sidebar's :data:`SIDEBAR`."""
SIDEBAR = pagestate.SIDEBAR
link_text = pagestate.link_text
_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")


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
        :func:`pagestate.heads_to_link`). Also the ``state`` a question is measured in."""
        out = {key: link_text(value) for key, value in self.params.items()}
        if "off" in self.params:
            out["off"] = pagestate.heads_to_link(parse_head(h, "off") for h in self.params["off"])
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
        names: dict[type, str] = {str: "a text", list: "a list of tables", dict: "a table"}
        expected = names.get(kind, kind.__name__)
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
        check_step(step, f"steps.{i + 1}")


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



def save_lesson(lesson: Lesson, path) -> None:
    """Check ``lesson`` (:func:`validate_lesson`) and write it to ``path`` as UTF-8 TOML (:func:`to_toml`).

    Raises:
        LessonError: the lesson does not pass :func:`validate_lesson`, or holds a value TOML cannot write.
        OSError: the file cannot be written.
    """
    validate_lesson(lesson)
    Path(path).write_text(to_toml(lesson), encoding="utf-8")
