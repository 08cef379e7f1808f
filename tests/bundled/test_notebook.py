"""examples/dikkat.ipynb runs from top to bottom in a fresh kernel (nbclient), offline, and what it shows is
what it says: two head views with their own data and no style outside their div, plotly figures with
plotly.js embedded (no CDN), a prediction that heads switched off change, a sliding-window mask."""

from __future__ import annotations

import json
import os
import re

import nbformat
from nbclient import NotebookClient

from conftest import ROOT


def _html_outputs(cell) -> list[str]:
    return [o["data"]["text/html"] for o in cell.get("outputs", []) if "text/html" in o.get("data", {})]


def test_the_example_notebook_runs_offline_and_shows_what_it_says(tmp_path):
    nb = nbformat.read(ROOT / "examples" / "dikkat.ipynb", as_version=4)
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    os.environ.update(env)
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT / "examples")}}).execute()
    nbformat.write(nb, tmp_path / "executed.ipynb")
    code = [c for c in nb.cells if c.cell_type == "code"]
    errors = [o for c in code for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors
    everything = json.dumps([c.get("outputs", []) for c in code])
    # nothing is fetched from outside: no script or style loaded from a URL, plotly.js itself is in the notebook
    assert not re.search(r'<(script|img|iframe)[^>]*src=\\"https?:|<link[^>]*href=\\"https?:', everything)
    assert "* plotly.js v" in everything  # the library, embedded once

    views = [html for c in code for html in _html_outputs(c) if "dikkat-head-view" in html]
    assert len(views) == 2
    ids = [re.search(r'id="(dikkat-hv-[0-9a-f]+)"', v).group(1) for v in views]
    data = [json.loads(re.search(r'class="hv-data">(.*?)</script>', v, re.S).group(1).replace("<\\/", "</"))
            for v in views]
    assert ids[0] != ids[1] and data[0] != data[1]
    assert "[CLS]" in data[0]["q"] and "[CLS]" not in data[1]["q"]  # the second hides special tokens
    for v, scope in zip(views, ids):
        styles = re.search(r"<style>(.*?)</style>", v, re.S).group(1)
        selectors = [s.strip() for rule in styles.split("}") if "{" in rule for s in rule.split("{")[0].split(",")]
        assert selectors and all(s.startswith("#" + scope) for s in selectors), selectors  # scoped, nothing global
        assert "<body" not in v and ' id="hv-' not in v

    figures = [html for c in code for html in _html_outputs(c) if "Plotly.newPlot" in html]
    assert len(figures) == 3  # model view and two heatmaps
    printed = "".join(o.get("text", "") for c in code for o in c.get("outputs", []) if o.get("name") == "stdout")
    before, after = re.findall(r"next token.*?:\s*(\[.*?\])", printed)
    assert before != after
