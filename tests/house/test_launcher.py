"""One launcher (issue 26): the ``streamlit run`` flags are spelled once, in deploy/launch.py; ``make run``,
``make serve``, deploy/replicas.py, the browser test and the benches all start the app through it."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from conftest import ROOT

sys.path.insert(0, str(ROOT / "deploy"))

import launch  # noqa: E402

WATCHER = "fileWatcher" + "Type"  # split, so this file does not spell the flag it looks for
CLASSROOM = {"--server.runOnSave": "false", "--client.showErrorDetails": "none", "--client.toolbarMode": "viewer",
             "--server.maxUploadSize": "10"}
EVERY_MODE = {"--server.headless": "true", "--server." + WATCHER: "none", "--browser.gatherUsageStats": "false"}


def _repository_files() -> list[Path]:
    """The repository's Python files, Makefile, shell scripts and TOML files (hidden folders, such as .venv and
    .streamlit, left out)."""
    out = []
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = [d for d in subfolders if not d.startswith(".") and d not in ("test-results", "out",
                                                                                      "__pycache__", "node_modules")]
        out += [Path(folder, f) for f in files if Path(f).suffix in (".py", ".sh", ".toml", ".cfg") or f == "Makefile"]
    return out


def test_the_flags_are_spelled_in_one_place():
    spelled = sorted(str(p.relative_to(ROOT)) for p in _repository_files()
                     if WATCHER in p.read_text(encoding="utf-8", errors="replace"))
    assert spelled == ["deploy/launch.py"], spelled


def test_every_launch_goes_through_the_launcher():
    """``make run`` and ``make serve`` call deploy/launch.py; no Python file builds its own ``streamlit run``."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipes = {target: re.search(rf"^{target}:.*\n((?:\t.*\n|ifeq.*\n|else\n|endif\n)+)", makefile, re.M).group(1)
               for target in ("run", "serve")}
    assert "\t$(BIN)/python deploy/launch.py --port $(PORT) --address $(RUN_ADDRESS)\n" in recipes["run"]
    assert "\t$(BIN)/python deploy/launch.py --port $(PORT) --address $(ADDRESS) --classroom\n" in recipes["serve"]
    assert "deploy/replicas.py" in recipes["serve"]  # REPLICAS > 1
    assert not any("streamlit" in recipe for recipe in recipes.values()), recipes
    command = re.compile(r"""["']streamlit["'],\s*["']run["']""")  # a command list of its own
    builds = sorted(str(p.relative_to(ROOT)) for p in _repository_files() if p.suffix == ".py"
                    and p != Path(__file__).resolve() and command.search(p.read_text(encoding="utf-8")))
    assert builds == ["deploy/launch.py"], builds
    for user in ("deploy/replicas.py", "tests/browser/test_browser.py", "bench/classroom.py", "bench/render.py"):
        assert "streamlit_command(" in (ROOT / user).read_text(encoding="utf-8"), user


def _options(command: list[str]) -> dict[str, str]:
    start = command.index("app.py") + 1
    flags = command[start:]
    assert len(flags) % 2 == 0, flags
    return dict(zip(flags[::2], flags[1::2]))


def test_classroom_mode_adds_the_classroom_flags():
    personal = launch.streamlit_command(8501, "127.0.0.1", python="/py")
    classroom = launch.streamlit_command(8502, "0.0.0.0", classroom=True, python="/py")
    assert personal[:5] == ["/py", "-m", "streamlit", "run", "app.py"] == classroom[:5]
    assert _options(personal) == {"--server.port": "8501", "--server.address": "127.0.0.1", **EVERY_MODE}
    assert _options(classroom) == {"--server.port": "8502", "--server.address": "0.0.0.0", **EVERY_MODE,
                                   **CLASSROOM}


def test_classroom_env_sets_the_mode_and_passes_the_cookie_secret_on():
    """As ``make serve`` did with ``env ${DIKKAT_COOKIE_SECRET:+STREAMLIT_SERVER_COOKIE_SECRET=...}``."""
    env = launch.classroom_env({"PATH": "/bin", "DIKKAT_MODE": "personal"})
    assert env == {"PATH": "/bin", "DIKKAT_MODE": "classroom"}
    env = launch.classroom_env({"DIKKAT_COOKIE_SECRET": "s3cret", "STREAMLIT_SERVER_COOKIE_SECRET": "old"})
    assert env["STREAMLIT_SERVER_COOKIE_SECRET"] == "s3cret" and env["DIKKAT_MODE"] == "classroom"
    env = launch.classroom_env({"DIKKAT_COOKIE_SECRET": "", "STREAMLIT_SERVER_COOKIE_SECRET": "kept"})
    assert env["STREAMLIT_SERVER_COOKIE_SECRET"] == "kept"


def test_the_cli_execs_the_command_from_the_repository_root(monkeypatch, tmp_path):
    seen = {}

    def execve(path, argv, env):
        seen.update(path=path, argv=argv, env=env, cwd=Path.cwd())
        raise SystemExit(0)

    monkeypatch.setattr(launch.os, "execve", execve)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DIKKAT_COOKIE_SECRET", "abc")
    monkeypatch.delenv("DIKKAT_MODE", raising=False)
    try:
        launch.main(["--port", "9000", "--address", "0.0.0.0", "--classroom"])
    except SystemExit:
        pass
    assert seen["argv"] == launch.streamlit_command(9000, "0.0.0.0", classroom=True)
    assert seen["path"] == sys.executable and seen["cwd"] == ROOT
    assert seen["env"]["DIKKAT_MODE"] == "classroom" and seen["env"]["STREAMLIT_SERVER_COOKIE_SECRET"] == "abc"
    seen.clear()
    try:
        launch.main(["--port", "9001"])
    except SystemExit:
        pass
    assert seen["argv"] == launch.streamlit_command(9001, "127.0.0.1")
    assert "DIKKAT_MODE" not in seen["env"]
