"""The one launcher of the app: the ``streamlit run app.py`` command line, with its flags, for every way Dikkat is
started (``make run``, ``make serve``, ``deploy/replicas.py``, the browser test, ``bench/classroom.py``,
``bench/render.py``).

Every mode: headless, no file watcher (importing torch upsets Streamlit's watcher), no usage statistics.
Classroom mode adds what a class needs: no rerun on save, no traceback and no developer toolbar for students,
uploads (a recorded clip) up to 10 MB. ``.streamlit/config.toml`` repeats the every-mode settings for a bare
``streamlit run app.py``.

Usage::

    python deploy/launch.py --port 8501 --address 127.0.0.1 [--classroom]

runs the app in this process (``exec``) from the repository root. ``--classroom`` also sets
``DIKKAT_MODE=classroom`` and passes ``DIKKAT_COOKIE_SECRET`` (if set) on as Streamlit's cookie secret.
Other programs import :func:`streamlit_command` (with ``deploy/`` on ``sys.path``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Mapping

ROOT = Path(__file__).resolve().parent.parent
APP = "app.py"  # relative to ROOT: every command runs with ROOT as its working folder

# every mode: no browser opened, no file watcher, no usage statistics
FLAGS = ["--server.headless", "true", "--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false"]
# classroom mode (issue 12): no rerun on save, no traceback or toolbar for students, uploads up to 10 MB
CLASSROOM_FLAGS = ["--server.runOnSave", "false", "--client.showErrorDetails", "none",
                   "--client.toolbarMode", "viewer", "--server.maxUploadSize", "10"]


def streamlit_flags(classroom: bool = False) -> list[str]:
    """The ``streamlit run`` options of a mode (without port and address)."""
    return FLAGS + (CLASSROOM_FLAGS if classroom else [])


def streamlit_command(port: int, address: str, classroom: bool = False, python: str = sys.executable) -> list[str]:
    """``python -m streamlit run app.py`` on ``address:port`` with the mode's flags; run it with the repository
    root (:data:`ROOT`) as the working folder. Classroom mode also needs ``DIKKAT_MODE=classroom`` in the
    environment (:func:`classroom_env`)."""
    return [python, "-m", "streamlit", "run", APP, "--server.port", str(port), "--server.address", address,
            *streamlit_flags(classroom)]


def classroom_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default: this process's) with ``DIKKAT_MODE=classroom`` and, when ``DIKKAT_COOKIE_SECRET``
    is set, ``STREAMLIT_SERVER_COOKIE_SECRET`` from it (every server of a class signs its cookies alike)."""
    env = dict(os.environ if environ is None else environ)
    env["DIKKAT_MODE"] = "classroom"
    if env.get("DIKKAT_COOKIE_SECRET"):
        env["STREAMLIT_SERVER_COOKIE_SECRET"] = env["DIKKAT_COOKIE_SECRET"]
    return env


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8501, help="the port (default 8501)")
    parser.add_argument("--address", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    parser.add_argument("--classroom", action="store_true", help="classroom mode (make serve)")
    args = parser.parse_args(argv)
    command = streamlit_command(args.port, args.address, args.classroom)
    env = classroom_env() if args.classroom else dict(os.environ)
    os.chdir(ROOT)
    sys.stdout.flush()
    os.execve(command[0], command, env)


if __name__ == "__main__":
    main()
