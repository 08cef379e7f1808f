"""What a page parameter is (:class:`Param`), what a page is (:class:`Page`), and how a parameter's value is
written in a link and read back (:func:`from_link`, :func:`to_link`, :func:`typed`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast
from collections.abc import Callable, Iterable, Mapping

import models
from models import pruning

MEAN = "mean"
"""The head option that stands for the mean over heads (its value in the link: ``head=mean``)."""

KINDS = ("text", "flag", "whole", "choice", "several", "layer", "head", "heads", "model")


@dataclass(frozen=True)
class Context:
    """What a parameter's options, bounds and conditions are computed from when no page is running (a lesson step):
    ``page``, the step's ``params`` (TOML values), the catalog models the step may open with (``specs``), and
    ``where`` the step sits in its file (for messages)."""

    page: str
    params: Mapping
    specs: tuple[models.ModelSpec, ...]
    where: str = ""


def model_stacks(spec: models.ModelSpec) -> dict[str, tuple[int, int]]:
    """A catalog model's stacks and their ``(layers, heads)``, from its family (no loading)."""
    names = {"encoder": ("encoder",), "decoder": ("decoder",)}.get(spec.family, ("encoder", "decoder", "cross"))
    return {stack: (spec.layers, spec.heads) for stack in names}


@dataclass(frozen=True)
class Param:
    """One parameter a page keeps in its link.

    Attributes:
        key: the widget's Session State key; also the query parameter's name unless ``url`` is given.
        kind: ``text``, ``flag`` (a boolean, ``1``/``0`` in the link), ``whole`` (a whole number in ``bounds``),
            ``choice`` (one of ``options``), ``several`` (a list of at most ``most`` of ``options``, comma-separated),
            ``layer`` / ``head`` (inside the models ``of`` names; ``head`` may be :data:`MEAN` with ``mean``),
            ``heads`` (a set of ``stack.layer.head``), ``model`` (a catalog key).
        options, bounds: fixed, or a function of a lesson step (:class:`Context`); ``None`` where only the running
            page knows them (the loaded model's layers, the text's length): the page passes them when it binds.
        default: the value shown when neither the session nor the link has one; ``None`` where the page computes it
            (the text's last token, the model's first stack).
        most: ``several`` only: how many options at most.
        of: the catalog models whose layers and heads bound a ``layer``/``head`` (default: the step's).
        mean: ``head`` only: :data:`MEAN` is an option.
        when: ``(predicate of the step, what it needs in words)``: the page reads the parameter only then.
        url: the query parameter's name when it differs from ``key``.
        raw: the page reads the link's text itself (Explore's ``words``: ``1``, ``true``, ``m``, ``morphemes``...).
        own: a viewer's own (the interface language, the text size): never broadcast to a class.
        lesson: a lesson step may set it (not the viewer's own, nor a folder or hub model).
    """

    key: str
    kind: str
    options: Iterable | Callable[[Context], Iterable] | None = None
    bounds: tuple[int, int] | Callable[[Context], tuple[int, int]] | None = None
    default: object = None
    most: int = 0
    of: Callable | None = None
    mean: bool = False
    when: tuple[Callable, str] | None = None
    url: str = ""
    raw: bool = False
    own: bool = False
    lesson: bool = True

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"{self.key}: unknown kind {self.kind!r} ({', '.join(KINDS)})")

    @property
    def name(self) -> str:
        """The query parameter's name."""
        return self.url or self.key

    def static_options(self) -> tuple | None:
        """The options when they do not depend on a step or a model, else None."""
        return None if self.options is None or callable(self.options) else tuple(self.options)

    def static_bounds(self) -> tuple[int, int] | None:
        return None if self.bounds is None or callable(self.bounds) else cast("tuple[int, int]", tuple(self.bounds))

    def options_for(self, ctx: Context) -> tuple:
        return tuple(self.options(ctx) if callable(self.options) else (self.options or ()))

    def bounds_for(self, ctx: Context) -> tuple[int, int]:
        assert self.bounds is not None, f"{self.key}: no bounds"  # a "whole" parameter is declared with its bounds
        return cast("tuple[int, int]", tuple(self.bounds(ctx) if callable(self.bounds) else self.bounds))


@dataclass(frozen=True)
class Page:
    """One page of the app: ``views/<name>.py``, its title (a string key of ``assets/i18n``), its icon, and its
    parameters in the order the page draws them.

    Attributes:
        reads_text: the page analyses the sidebar's sentence (a speech model cannot be used there).
        followed: a live class follows it (the teacher's desk, the Class page, is not).
    """

    name: str
    title: str
    icon: str
    params: tuple[Param, ...] = ()
    reads_text: bool = False
    followed: bool = True
    default: bool = False
    by_key: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        keys = [p.key for p in self.params]
        if len(set(keys)) != len(keys):
            raise ValueError(f"page {self.name}: a parameter is declared twice")
        object.__setattr__(self, "by_key", {p.key: p for p in self.params})

    @property
    def file(self) -> str:
        """The page's script, as ``st.Page`` and ``st.switch_page`` name it."""
        return f"views/{self.name}.py"

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(p.key for p in self.params)


def link_text(value) -> str:
    """A value as the link writes it: a boolean ``1``/``0``, a list comma-separated, a number as Python writes it."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (list, tuple)):
        return ",".join(link_text(v) for v in value)
    return str(value)


_NO = object()


def from_link(spec: Param, raw: str, options: Iterable | None = None,
              bounds: tuple[int, int] | None = None):
    """The value a link's text ``raw`` gives the widget of ``spec``, or :data:`None` when the text is not one the
    widget would take (junk in a link is ignored, never raised: a link is outside input).

    ``options`` and ``bounds`` are the running page's (the loaded model's layers, the text's length); the
    declaration's are used when they are fixed. A ``choice`` matches an option by its text or as the same number
    (``5`` for the option ``5.0``); ``several`` keeps the known options of a comma-separated list (repeats dropped;
    ``""`` is an emptied choice); ``flag`` takes ``1``/``true``/``yes``/``on``; ``whole``/``layer`` a whole number
    inside the bounds.
    """
    if spec.raw:
        return raw
    options = spec.static_options() if options is None else tuple(options)
    bounds = spec.static_bounds() if bounds is None else bounds
    if spec.kind == "several":
        by_text = {str(option): option for option in (options or ())}
        picked = [by_text[part] for part in dict.fromkeys(raw.split(",")) if part in by_text]
        return picked if picked or not raw else None
    if options is not None and spec.kind in ("choice", "head", "model"):
        value = _option(raw, options)
        return None if value is _NO else value
    if spec.kind == "flag":
        return raw.lower() in ("1", "true", "yes", "on")
    if spec.kind in ("whole", "layer") or (spec.kind == "head" and options is None):  # a head of no model yet
        try:
            value = int(raw)
        except ValueError:
            return None
        return value if bounds is None or bounds[0] <= value <= bounds[1] else None
    return raw


def _option(raw: str, options: tuple):
    for option in options:
        if str(option) == raw:
            return option
    try:  # a number written another way ("5" for the option 5.0)
        number = float(raw)
    except ValueError:
        return _NO
    for option in options:
        if isinstance(option, (int, float)) and not isinstance(option, bool) and option == number:
            return option
    return _NO


def typed(spec: Param, text: str):
    """A link's text as the TOML value a lesson file holds for ``spec`` (a saved session), or None when it cannot
    be one."""
    if spec.kind == "flag":
        return text == "1"
    if spec.kind == "heads":
        return [h for h in text.split(",") if h]
    if spec.kind == "several":
        return [_number(p) for p in text.split(",") if p]
    if spec.kind in ("whole", "layer") or (spec.kind == "head" and text != MEAN):
        return int(text) if text.lstrip("-").isdigit() else None
    return _number(text) if spec.kind == "choice" else text


def _number(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def heads_to_link(heads) -> str:
    """The heads switched off as the link's ``off`` writes them: ``"decoder.0.2,decoder.3.1"`` (sorted;
    :func:`models.pruning.heads_to_text`)."""
    return pruning.heads_to_text(heads)


def heads_from_link(raw: str, stacks: dict[str, tuple[int, int]]) -> frozenset[tuple[str, int, int]]:
    """The heads a link's ``off`` names that a model of ``stacks`` (``stack -> (layers, heads)``) has; junk is
    ignored (:func:`models.pruning.heads_from_text`)."""
    return pruning.heads_from_text(raw or "", stacks)
