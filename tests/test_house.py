"""The house in order (issue 16): every test file has a layer, the code passes ruff, no module is too long,
and the README's Python example runs as written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


from conftest import LAYERS, ROOT


def test_every_test_file_has_a_layer():
    files = {p.stem for p in (ROOT / "tests").glob("test_*.py")}
    named = [f for group in LAYERS.values() for f in group]
    assert len(named) == len(set(named)), "a file in two layers"
    assert files == set(named), files ^ set(named)


def test_ruff_finds_nothing():
    ruff = Path(sys.executable).with_name("ruff")
    out = subprocess.run([str(ruff), "check", str(ROOT)], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr


def _readme_python() -> str:
    text = (ROOT / "README.md").read_text()
    block = text.split("## From Python", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    return block


def test_the_readme_python_example_runs_as_written():
    """Every line of README.md's Python example runs (bundled smollm2), and what its comments promise holds."""
    import ast

    import numpy as np

    code = _readme_python()
    values = {}
    scope: dict = {}
    for node in ast.parse(code).body:
        line = ast.get_source_segment(code, node)
        if isinstance(node, ast.Expr):
            values[line.split("#")[0].strip()] = eval(compile(ast.Expression(node.value), "README", "eval"), scope)
        else:
            exec(compile(ast.Module([node], []), "README", "exec"), scope)
    a = scope["a"]
    n = len(a.tokens)
    assert values['a.attentions["decoder"].shape'] == (30, 9, n, n)
    layer5 = values['a.attentions["decoder"][5]']
    assert layer5.shape == (9, n, n) and layer5.dtype == np.float32
    np.testing.assert_allclose(layer5.sum(-1), 1, atol=1e-5)
    np.testing.assert_array_equal(values['a.attentions["decoder"][5, 2, 2:5]'], layer5[2, 2:5])
    assert values['a.statistics["decoder"]["entropy"]'].shape == (30, 9)
    assert values['a.overview["decoder"].shape'][:2] == (30, 9)
    assert "".join(values["[t.label for t in a.tokens]"]).replace(" ", "") == "Kedifareyikovaladı"
    assert values['a.masks["decoder"][0]'].shape == (n, n)


def _imports(path: Path) -> set[str]:
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_the_three_layers_keep_to_themselves():
    """viz/ draws from numpy (no torch, no streamlit, no models: a notebook or another app can use it);
    models/ is the engine (no streamlit, no pages)."""
    for path in (ROOT / "viz").rglob("*.py"):
        assert not _imports(path) & {"torch", "streamlit", "models", "views", "transformers"}, path
    for path in (ROOT / "models").rglob("*.py"):
        assert not _imports(path) & {"streamlit", "views", "plotly"}, path


def test_no_module_is_over_500_lines():
    """Issue 16: one topic per module in models/, viz/ and views/."""
    long = {str(p.relative_to(ROOT)) for folder in ("models", "viz", "views") for p in (ROOT / folder).rglob("*.py")
            if len(p.read_text(encoding="utf-8").splitlines()) > 500}
    assert not long, long
