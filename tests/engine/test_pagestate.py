"""Issue 49: each page's state is declared once (pagestate/), and everything else derives from the declaration: the
app's page list, every page's link, a lesson step's check, what a following student resets. Old links keep
working. No model is loaded (the bundled models' pages run in tests/app)."""

from __future__ import annotations

import ast
import re

import pytest

import pagestate
from conftest import ROOT
from live import lessons as L
from pagestate import from_link, link_text


def _param(page: str, key: str) -> pagestate.Param:
    return pagestate.param(page, key)


# a set of links as the app wrote them before issue 49 (query parameter -> text), and the values each page's widget
# takes from them; ``options``/``bounds`` are what the running page passes (a 6-layer, 12-head model, 9 tokens)
OLD_LINKS = [
    ("explore", "view", "model", {}, "model"),
    ("explore", "layer", "3", {"bounds": (0, 5)}, 3),
    ("explore", "layer", "9", {"bounds": (0, 5)}, None),  # a link from a bigger model: the default instead
    ("explore", "head", "mean", {"options": ["mean", *range(12)]}, "mean"),
    ("explore", "head", "5", {"options": [*range(12)]}, 5),
    ("explore", "hide_special", "1", {}, True),
    ("explore", "hide_first", "0", {}, False),
    ("explore", "words", "morphemes", {}, "morphemes"),  # the page reads the text itself (1, true, m ...)
    ("explore", "words", "1", {}, "1"),
    ("explore", "img_fmt", "SVG", {}, "SVG"),
    ("explore", "img_fmt", "GIF", {}, None),
    ("explore", "hv_start", "48", {}, 48),
    ("flow", "flow_threshold", "0.1", {}, 0.1),
    ("flow", "flow_threshold", "0.10", {}, 0.1),  # a number written another way
    ("flow", "flow_mask", "causal", {}, "causal"),
    ("flow", "flow_use_off", "0", {}, False),
    ("flow", "flow_position", "8", {"bounds": (0, 8)}, 8),
    ("why", "why_parts", "10", {}, 10),
    ("why", "why_by", "at_j", {}, "at_j"),
    ("masks", "masks_kinds", "causal,sliding_window,causal,junk", {}, ["causal", "sliding_window"]),
    ("masks", "masks_kinds", "", {}, []),  # an emptied choice
    ("masks", "masks_window", "5", {}, 5),
    ("masks", "masks_window", "25", {}, None),  # past the page's 24 tokens
    ("masks", "masks_section", "per_head", {}, "per_head"),
    ("cost", "cost_lengths", "16,64", {"options": [16, 32, 64, 128]}, [16, 64]),
    ("qkv", "qkv_temperature", "0.5", {}, 0.5),
    ("positions", "pos_m", "abc", {}, None),
    ("app", "lang", "tr", {}, "tr"),
    ("app", "scale", "projector", {}, "projector"),
    ("app", "scale", "huge", {}, None),
    ("app", "text", "Kedi fareyi kovaladı", {}, "Kedi fareyi kovaladı"),
    ("app", "model_key", "smollm2-135m", {"options": ["minilm-l6", "smollm2-135m"]}, "smollm2-135m"),
]


@pytest.mark.parametrize("page,key,raw,given,expected", OLD_LINKS)
def test_old_links_keep_working(page, key, raw, given, expected):
    spec = _param(page, key)
    assert spec.name == key  # every link parameter kept its name
    assert from_link(spec, raw, **given) == expected


def test_a_value_written_to_the_link_reads_back_the_same():
    for page in (*pagestate.PAGES, pagestate.APP):
        for spec in page.params:
            if spec.default is None or spec.raw:
                continue
            assert from_link(spec, link_text(spec.default)) == spec.default, (page.name, spec.key)


def test_the_heads_switched_off_round_trip_through_the_link():
    stacks = {"decoder": (30, 9)}
    heads = {("decoder", 3, 1), ("decoder", 0, 2)}
    text = pagestate.heads_to_link(heads)
    assert text == "decoder.0.2,decoder.3.1"
    assert pagestate.heads_from_link(text + ",decoder.30.0,encoder.0.0,junk", stacks) == heads


def test_every_page_of_the_app_is_declared_and_app_py_takes_its_list_from_the_declaration():
    app = (ROOT / "app.py").read_text(encoding="utf-8")
    assert not re.search(r'st\.Page\("views/', app), "app.py lists pages by hand"
    assert "pagestate.PAGES" in app
    files = {p.stem for p in (ROOT / "views").glob("*.py")} - {"__init__", "hosting", "explore_levels"}
    assert {p.name for p in pagestate.PAGES} == files
    assert [p.name for p in pagestate.PAGES if p.default] == ["explore"]
    assert "live" not in pagestate.FOLLOWED and L.PAGES == pagestate.FOLLOWED


def test_a_page_binds_only_what_it_declares():
    """Every literal key a page's files bind, sync or drop through its link state is declared for that page (the
    running page raises KeyError for one that is not: ``UrlState.param``)."""
    folders = {"masks": "mask_sections", "atlas": "atlas_sections"}
    for page in pagestate.PAGES:
        folder = folders.get(page.name)
        paths = [ROOT / "views" / f"{page.name}.py"] + (sorted((ROOT / "views" / folder).glob("*.py"))
                                                        if folder else [])
        used = set()
        for path in paths:
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call):
                    name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                    first = node.args[:2] if name == "layer_head" else node.args[:1]
                    literal = [a.value for a in first if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                    if name in ("bind", "sync", "drop") or (name == "layer_head" and len(literal) == 2):
                        used |= set(literal)  # (the Masks sections' own layer_head takes a prefix)
        assert used <= set(page.by_key), (page.name, used - set(page.by_key))
        assert used or not page.params, page.name


def test_no_page_reads_or_writes_the_link_by_hand():
    """One mechanism for the link (issue 49): no ``st.query_params[...]`` in a page but the live class's own
    parameters (its room code, the teacher's page: views/live_sections) and the heads' one reader/writer."""
    allowed = {"views/live_sections/room.py", "views/live_sections/panel.py", "views/live_sections/redraw.py",
               "views/shared/heads.py", "views/shared/urlstate.py"}
    found = []
    for path in (ROOT / "views").rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        if rel not in allowed and re.search(r"query_params\[|query_params\.get\(", path.read_text(encoding="utf-8")):
            found.append(rel)
    assert not found, found


def test_a_lesson_takes_exactly_the_declared_parameters_and_the_viewers_own_are_never_broadcast():
    assert set(L.PARAMS) == set(pagestate.FOLLOWED)
    for name in pagestate.FOLLOWED:
        assert L.PARAMS[name] == pagestate.page(name).by_key
    assert set(pagestate.SIDEBAR) == {"model_key", "text"}
    assert set(pagestate.OWN) == {"lang", "scale"}
    assert pagestate.keys_of("flow") >= {"flow_threshold", "model_key", "text"}


def test_the_masks_clips_are_the_shipped_audio_files():
    assert sorted(p.name for p in (ROOT / "assets" / "audio").glob("*.wav")) == sorted(pagestate.declared.CLIPS[:-1])


def test_a_declaration_refuses_an_unknown_kind_and_a_key_twice():
    with pytest.raises(ValueError):
        pagestate.Param("x", "number")
    with pytest.raises(ValueError):
        pagestate.Page("p", "t", "i", (pagestate.Param("x", "flag"), pagestate.Param("x", "text")))
    with pytest.raises(KeyError):
        pagestate.param("flow", "flow_nothing")
