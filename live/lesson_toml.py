"""A lesson written as TOML (:func:`to_toml`), with a small writer of its own: the schema is fixed (strings, whole
numbers, decimals, booleans, flat lists, tables of texts), and a new pinned dependency (``tomli-w``) would make every
``make run`` install again for ~60 lines."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from .questions import LessonError

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


def to_toml(lesson) -> str:
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

