"""Issue 26: the engine's import graph has no cycle and each layer keeps to itself.

Every import counts: at module level, inside a function (an import deferred to break a cycle is still the
cycle), and under ``if TYPE_CHECKING:`` (a type-only import that closes a loop is a sign that a module does two
things). An edge goes from a module to each ``models`` module it names; a ``from package import name`` whose
name is a submodule is an edge to that submodule."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


PRODUCT = ("models", "viz", "views", "live", "deploy", "pagestate")
"""Every folder of the product (tests/ and bench/ are not; app.py is the entry point above them all)."""


def import_graph(*packages: str) -> dict[str, set[str]]:
    """``module -> {modules of packages it imports}`` over every ``.py`` file under each of ``packages`` (default:
    ``models``)."""
    files = {_module_name(p): p for package in (packages or ("models",)) for p in (ROOT / package).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        here = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")
                    target = ".".join(base[:len(base) - node.level + 1] + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    edges.add(sub if sub in files else target)
            elif isinstance(node, ast.Import):
                edges |= {a.name for a in node.names}
        graph[name] = {e for e in edges if e in files and e != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan 1972)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle_through_a_function_level_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_cycle_among_the_engine_modules():
    graph = import_graph("models")
    assert len(graph) > 60 and "models.anatomy.probe" in graph["models.loading.loader"]
    assert not cycles(graph), cycles(graph)


def test_no_cycle_in_the_whole_product():
    """Issue 49: the pages, the live class, the page-state declaration and the launcher too (the sidebar imported the
    live panel inside a function while the live sections imported the sidebar's package: app.py composes them)."""
    graph = import_graph(*PRODUCT)
    assert "views.shared.sidebar" in graph and "live.lessons" in graph and "pagestate" in graph
    assert "pagestate" in graph["live.lesson_checks"] and "views.shared" in graph["views.live_sections.room"]
    assert not cycles(graph), cycles(graph)


def test_no_function_is_over_125_lines():
    """Issue 26: ``analyze`` (224 lines) and ``dikkat_attention`` (144) were split into named steps; no function's
    body (docstring left out) in models/, viz/ or views/ grows past the longest left today."""
    long = []
    for folder in PRODUCT:
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    first = node.body[0]
                    docstring = isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant)
                    start = node.body[1].lineno if docstring and len(node.body) > 1 else first.lineno
                    if node.end_lineno - start + 1 > 125:
                        long.append(f"{path.relative_to(ROOT)}:{node.name}")
    assert not long, long


def test_make_test_runs_every_tier():
    """``make test`` runs the tiers one after the other (each one's time printed): its list is the suite's."""
    import re

    from conftest import TIERS

    listed = re.search(r"^TIERS := (.+)$", (ROOT / "Makefile").read_text(), re.M).group(1).split()
    assert listed == list(TIERS)


def test_the_probe_and_the_capture_share_a_floor_below_both():
    """Issue 49: the vocabulary the load-time probe (models.anatomy) and the capture (models.capture) share lives in
    models.sites, which imports neither; the capture imports nothing from the anatomy probe that runs on it, and the
    old paths re-export the same objects."""
    import models.anatomy.inputs
    import models.anatomy.maps
    import models.anatomy.site
    import models.sites.inputs
    import models.sites.maps
    import models.sites.site

    graph = import_graph("models")
    floor = {m for m in graph if m == "models.sites" or m.startswith("models.sites.")}
    assert len(floor) >= 4
    for name in floor:
        assert not {e for e in graph[name] if e.startswith(("models.anatomy", "models.capture"))}, (name, graph[name])
    for name in (m for m in graph if m == "models.capture" or m.startswith("models.capture.")):
        assert not {e for e in graph[name] if e.startswith("models.anatomy")}, (name, graph[name])
    for old, new in ((models.anatomy.site, models.sites.site), (models.anatomy.inputs, models.sites.inputs),
                     (models.anatomy.maps, models.sites.maps)):
        assert old.__all__ and all(getattr(old, n) is getattr(new, n) for n in old.__all__), old.__name__
