"""A classroom server computes the slow results of the bundled models in the background at its first start
(deploy/launch.start_ahead, models/ahead.py), at the lowest CPU priority, and not when DIKKAT_AHEAD=0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "deploy"))

import launch  # noqa: E402


def _nice(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[16])  # field 19 of proc(5), counted after the command's name


def test_start_ahead_runs_the_command_at_the_lowest_priority(tmp_path):
    env = dict(os.environ, DIKKAT_AHEAD="1", DIKKAT_AHEAD_ROOT=str(tmp_path / "ahead"))
    proc = launch.start_ahead(env)
    try:
        assert proc is not None and proc.args[1:] == ["-m", "models", "ahead"]
        assert _nice(proc.pid) == 19
    finally:
        proc.kill()
        proc.wait()
    assert launch.start_ahead(dict(env, DIKKAT_AHEAD="0")) is None


def test_the_command_line_keeps_what_is_there_and_says_so(tmp_path):
    """`python -m models ahead --model X` for a model with no job does nothing and prints the counts as JSON."""
    env = dict(os.environ, DIKKAT_AHEAD_ROOT=str(tmp_path / "ahead"))
    out = subprocess.run([sys.executable, "-m", "models", "ahead", "--model", "no-such-model"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    counts = json.loads(out.stdout)
    assert counts["done"] == counts["kept"] == counts["failed"] == 0
    assert counts["root"] == str(tmp_path / "ahead")
