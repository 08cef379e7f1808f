"""Types checked (issue 47): mypy (pinned in requirements-dev.txt, configured in pyproject.toml's [tool.mypy]) over
models/, live/, viz/, views/, pagestate/ and app.py. Every module is clean except those pyproject lists as not yet
consistent, and a listed module that has become clean must leave the list, so the list only shrinks and a new
module is checked from the day it lands. One mypy run without the list answers both (its cache in .mypy_cache/)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

from conftest import ROOT

ERROR = re.compile(r"^(?P<file>[\w/]+\.py):\d+: error: ")


def _module(path: str) -> str:
    return path[:-3].replace("/", ".").removesuffix(".__init__")


def test_mypy_finds_nothing_outside_the_listed_modules_and_something_in_each(tmp_path):
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    listed = set(next(o["module"] for o in project["overrides"] if o.get("ignore_errors")))
    config = tmp_path / "mypy.toml"  # the project's settings without the list
    lines = [f"{k} = {v!r}".replace("'", '"').replace("True", "true").replace("False", "false")
             for k, v in project.items() if k != "overrides"]
    config.write_text("[tool.mypy]\n" + "\n".join(lines) + "\n", encoding="utf-8")
    mypy = Path(sys.executable).with_name("mypy")
    out = subprocess.run([str(mypy), "--config-file", str(config), "--cache-dir", str(ROOT / ".mypy_cache" / "all")],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode in (0, 1), out.stdout + out.stderr  # 2: mypy itself failed
    failing = {_module(m["file"]) for line in out.stdout.splitlines() if (m := ERROR.match(line))}
    new = sorted(failing - listed)
    assert not new, "type errors in modules that check clean:\n" + "\n".join(
        line for line in out.stdout.splitlines() if (m := ERROR.match(line)) and _module(m["file"]) in new)
    assert not sorted(listed - failing), "clean now: take them off pyproject.toml's [[tool.mypy.overrides]]"
