"""The four kinds of question a teacher poses during a lesson (issue 29), each a frozen dataclass, what a student
picks from (:class:`Choice`) and the model's own measured answer (:class:`Measured`); :mod:`live.questions` parses,
checks and answers them (its docstring says what each kind asks and how it is measured)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import models

LANGS = ("en", "tr")
KINDS = ("top_key", "top_head", "loss_change", "sink")
STACKS = ("encoder", "decoder", "cross")
#: loss_change's buckets, in order, and their bounds in nats: |change| <= SAME_NATS is "about the same";
#: SAME_NATS < change < LOT_NATS "rises a little"; change >= LOT_NATS "rises a lot"; change < -SAME_NATS "falls".
BUCKETS = ("falls", "same", "rises_little", "rises_lot")
SAME_NATS = 0.05
LOT_NATS = 0.5
MIN_HEADS, MAX_HEADS = 2, 8  # a top_head question lists this many heads
MAX_CHOICES = 40  # a multiple-choice question over more tokens than this is not one
AUDIO = Path(__file__).resolve().parent.parent / "assets" / "audio"
DEFAULT_CLIP = "the_cat_chased_the_mouse_en.wav"
_SAME_TR, _LOT_TR = (f"{x:g}".replace(".", ",") for x in (SAME_NATS, LOT_NATS))  # Turkish writes 0,05
_BUCKET_LABELS = {
    "falls": {"en": "It falls", "tr": "Düşer"},
    "same": {"en": f"About the same (within ±{SAME_NATS:g} nats)",
             "tr": f"Aşağı yukarı aynı kalır (±{_SAME_TR} nat içinde)"},
    "rises_little": {"en": f"It rises a little (by less than {LOT_NATS:g} nats)",
                     "tr": f"Biraz artar ({_LOT_TR} nattan az)"},
    "rises_lot": {"en": f"It rises a lot (by {LOT_NATS:g} nats or more)",
                  "tr": f"Çok artar ({_LOT_TR} nat ya da daha fazla)"},
}
_STACK_WORDS = {"encoder": {"en": "encoder", "tr": "kodlayıcı"}, "decoder": {"en": "decoder", "tr": "kod çözücü"},
                "cross": {"en": "cross-attention", "tr": "çapraz dikkat"}}


class LessonError(models.DikkatError, ValueError):
    """A lesson file or question that cannot be used: what is wrong, and where.

    Args:
        message: the English message (``str(exc)``).
        code: ``errmsg_<code>`` in ``assets/i18n/lesson_errors.json`` holds its Turkish text.
        **params: the values the message names (``where``: the field, e.g. ``steps.3.params.layer``, steps
            counted from 1).
    """


# -------------------------------------------------------------------------------------------- the questions


@dataclass(frozen=True)
class Choice:
    """One answer a student may pick: ``value`` names it (a token index ``"3"``, a head ``"decoder.3.1"``, a
    bucket ``"rises_lot"``; :attr:`Measured.answer` is one of them), ``label`` shows it (``{"en", "tr"}``)."""

    value: str
    label: dict[str, str]


@dataclass(frozen=True)
class Measured:
    """The model's own answer to a question.

    Attributes:
        answer: the :attr:`Choice.value` of the right choice.
        value: the number behind it (top_key: the weight; top_head: the metric's rise; loss_change: the loss
            change in nats; sink: the mean attention the token receives).
        detail: that number for every choice (``choice value -> number``; loss_change: ``before``, ``after``).
        unit: ``"weight"``, ``"nats"`` or ``"1 - cos"``.
    """

    answer: str
    value: float
    detail: dict[str, float]
    unit: str = ""


@dataclass(frozen=True, kw_only=True)
class Question:
    """What every kind has: ``prompt`` ``{"en", "tr"}`` (plain text), and ``model`` (a catalog key; None: the
    step's ``model_key``)."""

    prompt: dict[str, str]
    model: str | None = None
    kind = ""

    def table(self) -> dict:
        """The question as its TOML table (``kind`` first; defaults left out)."""
        out: dict = {"kind": self.kind}
        for f in fields(self):
            value = getattr(self, f.name)
            if value != f.default:  # a field without a default is always written
                out[f.name] = list(value) if isinstance(value, tuple) else value
        return out


@dataclass(frozen=True, kw_only=True)
class TopKey(Question):
    """Which key does query token ``query`` (from 0; negative: from the end) attend to most in ``head`` of
    ``layer`` of ``stack`` (None: the stack that reads the input; a speech model's decoder)?"""

    layer: int
    head: int
    query: int
    stack: str | None = None
    kind = "top_key"


@dataclass(frozen=True, kw_only=True)
class TopHead(Question):
    """Which of ``heads`` (``"stack.layer.head"``, :func:`models.pruning.heads_to_text`), switched off alone,
    changes the model's prediction most?"""

    heads: tuple[str, ...]
    kind = "top_head"


@dataclass(frozen=True, kw_only=True)
class LossChange(Question):
    """How does the next-token loss change under ``mask`` (:func:`models.parse_mask`'s text) with ``heads_off``
    switched off?"""

    mask: str = "native"
    heads_off: tuple[str, ...] = ()
    kind = "loss_change"


@dataclass(frozen=True, kw_only=True)
class Sink(Question):
    """Which token receives the most attention, on average over the heads and queries of layers ``from_layer``
    on (None: the upper half) of ``stack`` (None: as :class:`TopKey`)?"""

    stack: str | None = None
    from_layer: int | None = None
    kind = "sink"


CLASSES = {cls.kind: cls for cls in (TopKey, TopHead, LossChange, Sink)}
