"""Issue 33, item 6, on a page: "1 of 270 heads off (0 %)" (a share that is not zero, rounded to zero) and the
percent sign on the wrong side in Turkish. The formatter itself is tested in tests/viz/test_number_format.py."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[2] / "app.py")


def test_a_share_in_a_text_goes_through_the_formatter():
    """{share:.0%} in a UI string: the sign on the language's side, a nonzero share never 0."""
    from views.shared.strings import _LocalNumber

    assert format(_LocalNumber(1 / 270, "tr"), ".0%") == "<%1" and format(_LocalNumber(1 / 270, "en"), ".0%") == "<1 %"
    assert format(_LocalNumber(0.3, "tr"), ".0%") == "%30" and format(_LocalNumber(0.012, "tr"), ".1%") == "%1,2"
    assert format(_LocalNumber(1234.5, "tr"), ",.1f") == "1.234,5" and format(_LocalNumber(1234, "tr"), ",") == "1.234"


def test_one_head_off_is_not_none_off_in_turkish(smollm2):
    """smollm2-135m has 270 heads: one switched off is "(<%1)", not "(%0)" or "(0 %)"."""
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["model_key"] = "smollm2-135m"
    at.session_state["text"] = "The cat chased the mouse"
    at.session_state["lang"] = "tr"
    at.run()
    at.switch_page("views/pruning.py")
    at.run()
    at.pills[0].unselect(0).run()
    assert not at.exception, [e.value for e in at.exception]
    count = [m.value for m in at.markdown if "kafadan" in m.value and "kapalı" in m.value]
    assert count and count[0].startswith("270 kafadan 1 tanesi kapalı"), count
    assert "(<%1)" in count[0] and "%0" not in count[0] and "0 %" not in count[0], count
