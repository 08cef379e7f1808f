"""Whether a lesson step's page would take its parameters (:func:`check_step`): each is one the page declares
(:mod:`pagestate`), each value of its kind, inside its options or bounds, and read in the step's state; a question
fits its model. Raises :class:`~live.questions.LessonError` with a ``code`` and ``where``."""

from __future__ import annotations

import math

import models
import pagestate
from pagestate import Context as _Ctx, Param, model_stacks as _stacks
from pagestate.declared import section as _section

from .questions import LANGS, LessonError, check_head, check_question, parse_head

MODEL = pagestate.SIDEBAR["model_key"]


def _bad(ctx: _Ctx, key: str, value, expected: str) -> LessonError:
    return LessonError(f"'{ctx.where}.{key}': the page '{ctx.page}' takes {expected}, not {value!r}.",
                       code="lesson_bad_value", where=f"{ctx.where}.{key}", page=ctx.page, value=repr(value),
                       expected=expected)


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _same(a, b) -> bool:
    """An option as the link compares it: as text, or as the same number (:func:`pagestate.from_link`)."""
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
        lo, hi = spec.bounds_for(ctx)
        if not _whole(value) or not lo <= value <= hi:
            raise _bad(ctx, key, value, f"a whole number from {lo} to {hi}")
    if kind in ("choice", "several"):
        options = spec.options_for(ctx)
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


def check_step(step, where: str) -> None:
    pages = pagestate.FOLLOWED
    if step.page not in pages:
        raise LessonError(f"'{where}.page': the app has no page {step.page!r} ({', '.join(pages)}).",
                          code="lesson_unknown_page", where=f"{where}.page", page=step.page, pages=", ".join(pages))
    known = {**pagestate.SIDEBAR, **pagestate.page(step.page).by_key}
    if "model_key" in step.params:
        _check_param(_Ctx(step.page, step.params, (), f"{where}.params"), "model_key", MODEL, step.params["model_key"])
    specs = tuple(models.get_spec(k) for k in ([step.params["model_key"]] if "model_key" in step.params else
                                               dict.fromkeys(models.default_model_for_language(x) for x in LANGS)))
    ctx = _Ctx(step.page, step.params, specs, f"{where}.params")
    for key, value in step.params.items():
        if key not in known:
            raise LessonError(f"'{where}.params.{key}': the page '{step.page}' does not read '{key}' "
                              f"({', '.join(known)}).", code="lesson_unknown_param", where=f"{where}.params.{key}",
                              page=step.page, param=key, params=", ".join(known))
        _check_param(ctx, key, known[key], value)
    needs_text = step.page in pagestate.TEXT_PAGES or (step.page == "masks" and _section("compare")[0](ctx))
    for spec in specs:
        if needs_text and spec.reads != "text":
            raise LessonError(f"'{where}.params.model_key': the page '{step.page}' reads a sentence; '{spec.key}' "
                              f"reads {spec.reads}.", code="lesson_model_page", where=f"{where}.params.model_key",
                              page=step.page, model=spec.key)
    if step.question is not None:
        _check_question(step, where)


def _check_question(step, where: str) -> None:
    model = step.question_model()
    if model is None:
        raise LessonError(f"'{where}.question' is asked of a model: give the step's params.model_key or the "
                          "question's model.", code="lesson_question_field", where=f"{where}.question.model",
                          expected="a catalog model", got="none")
    _check_param(_Ctx(step.page, step.params, (), f"{where}.question"), "model", MODEL, model)
    spec = models.get_spec(model)
    if spec.reads == "text" and not str(step.params.get("text") or "").strip():
        raise LessonError(f"'{where}.question' is asked about the step's sentence: give params.text.",
                          code="lesson_question_field", where=f"{where}.params.text", expected="a text", got="none")
    check_question(step.question, spec.key, _stacks(spec), spec.family, spec.reads, f"{where}.question")
