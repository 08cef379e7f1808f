"""What every experiment shares: its published source, progress reporting and a measured time estimate."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable
from typing import TypeVar

from .. import checks

ASSETS = Path(__file__).resolve().parents[2] / "assets"

Progress = Callable[[float], None] | None
T = TypeVar("T")


@dataclass(frozen=True)
class Source:
    """Where a finding was published.

    Attributes:
        cite: authors and year, e.g. ``"Xiao et al. 2023"``. title: the paper's title.
        where: the figure, table or section the claim is read from. model: what it was measured on.
        url: the paper's arXiv or ACL Anthology page (shown as text; the app fetches nothing).
    """

    cite: str
    title: str
    where: str
    model: str
    url: str


def sentence_set() -> list[str]:
    """The shipped example sentences (``assets/sentences.json``; 12 short sentences, Turkish and English), in file
    order."""
    import json

    return [s["text"] for s in json.loads((ASSETS / "sentences.json").read_text(encoding="utf-8"))["sentences"]]


def long_text() -> str:
    """The shipped long English text (``assets/texts/long_en.txt``: 22 sentences of one story, 507 tokens on
    smollm2-135m)."""
    return (ASSETS / "texts" / "long_en.txt").read_text(encoding="utf-8")


def report(progress: Progress, fraction: float) -> None:
    """Call ``progress`` (if any) with ``fraction`` clipped to [0, 1]."""
    if progress is not None:
        progress(min(1.0, max(0.0, float(fraction))))


class Stopwatch:
    """Seconds since creation (``time.perf_counter``): ``Stopwatch().seconds``."""

    def __init__(self) -> None:
        self.start = time.perf_counter()

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.start


def probe_estimate(first_unit: Callable[[], T], units: int) -> tuple[T, float]:
    """Run the first of ``units`` equal units of work and estimate the whole: its time × ``units``.

    Returns:
        ``(the unit's result, estimated seconds for all units)``; seconds of wall time on this machine.
    """
    clock = Stopwatch()
    value = first_unit()
    return value, clock.seconds * units


def check_int(name: str, value, low: int, high: int | None = None) -> int:
    """``value`` as an int in ``[low, high]`` (:func:`models.checks.whole`).

    Raises:
        InvalidArgumentError: not a whole number, or out of range.
    """
    return checks.whole(name, value, low, high)
