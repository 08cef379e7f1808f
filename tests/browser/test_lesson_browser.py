"""The shipped lesson as the room sees it (issue 50): a teacher at 1280 x 720 on a projector and three students in
real browsers (two laptops, one a late joiner, and a phone at 390 x 844), the whole lesson in Turkish, walked by
tests/browser/lesson_walk.py, which asserts on every step that the teacher's controls are in the first screen, no
question of an earlier step is shown, the phone's open question comes first, and the answers are counted exactly
across a reload. Screenshots of each step for the teacher and the phone in ``docs/screenshots/lesson/``; each
step's time from the teacher's click to every student settled in ``test-results/lesson-steps.json`` (measured, not
asserted: bench/lesson_room.py times them on a server started as ``make serve`` starts it)."""

from __future__ import annotations

import json

import lesson_walk
from live import lessons as L
from test_live_browser import TOKEN, app_url  # noqa: F401  (the app fixture: a server with a teacher token)


def test_the_shipped_lesson_in_turkish_for_a_teacher_and_three_students(app_url):  # noqa: F811
    timings = lesson_walk.walk(app_url, TOKEN, shots=lesson_walk.ROOT / "docs" / "screenshots" / "lesson")
    steps = next(x for x in L.shipped_lessons() if x.id == "attention-intro").steps
    assert [t["page"] for t in timings] == [s.page for s in steps]  # every step walked
    (lesson_walk.RESULTS / "lesson-steps.json").write_text(
        json.dumps({"steps": timings, **lesson_walk.summary(timings)}, indent=1), encoding="utf-8")
