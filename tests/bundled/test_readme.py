"""README.md's Python example runs as written, on the bundled smollm2 (issue 16)."""

from __future__ import annotations

from conftest import ROOT


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
