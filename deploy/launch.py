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
``DIKKAT_MODE=classroom``, passes ``DIKKAT_COOKIE_SECRET`` (if set) on as Streamlit's cookie secret, and starts
``python -m models ahead`` in the background (:func:`start_ahead`; ``DIKKAT_AHEAD=0`` turns it off) and
``deploy/warm.py``, which opens the app once as a student would (``DIKKAT_WARM=0`` turns it off).
Other programs import :func:`streamlit_command` (with ``deploy/`` on ``sys.path``).

::

    python deploy/launch.py --with-redis -- python deploy/replicas.py --replicas 2 ...

runs the command (``make serve REPLICAS=N``: the replicas behind nginx) with ``DIKKAT_REDIS_URL`` set, so that
every replica shares one live class (``live/``): unless it is set already, a private ``redis-server`` (Debian's
``redis-server``; ``make redis``) is started first on 127.0.0.1 with a password, writing an append-only file in
the class's data folder (``DIKKAT_CLASS_DATA``, default ``.data/class``), started again whenever it stops, and
stopped when the command ends (``deploy/class_redis.py``).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path
from collections.abc import Mapping

sys.path.insert(0, str(Path(__file__).resolve().parent))
from class_redis import KeptRedis, data_dir, free_port, start_redis, stop_redis  # noqa: E402

__all__ = ["KeptRedis", "free_port", "run_with_redis", "start_ahead", "start_redis", "stop_redis",
           "streamlit_command", "streamlit_flags", "classroom_env"]

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


def run_with_redis(command: list[str], environ: Mapping[str, str] | None = None) -> int:
    """Run ``command`` from the repository root with ``DIKKAT_REDIS_URL`` set: as it is when set, else to the
    class's Redis (:class:`class_redis.KeptRedis`: an append-only file in :func:`class_redis.data_dir`, started again
    whenever it stops), stopped after it. SIGTERM is passed on to the command.

    Returns:
        the command's exit status.

    Raises:
        SystemExit: no Redis could be started.
    """
    env = dict(os.environ if environ is None else environ)
    redis = None
    if not env.get("DIKKAT_REDIS_URL"):
        redis = KeptRedis(data_dir(env), say=lambda line: print(line, file=sys.stderr, flush=True))
        env["DIKKAT_REDIS_URL"] = redis.start()
    try:
        child = subprocess.Popen(command, cwd=ROOT, env=env)
        previous = signal.signal(signal.SIGTERM, lambda *_: child.terminate())
        try:
            interrupted = False
            while True:
                try:
                    return child.wait()
                except KeyboardInterrupt:  # the terminal's Ctrl-C reached the command too: let it stop
                    if interrupted:  # a second Ctrl-C: stop it now
                        child.terminate()
                    interrupted = True
        finally:
            signal.signal(signal.SIGTERM, previous)
    finally:
        if redis is not None:
            redis.stop()


def start_ahead(environ: Mapping[str, str] | None = None, python: str = sys.executable) -> subprocess.Popen | None:
    """Start ``python -m models ahead`` in the background at the lowest CPU priority (``nice 19``): the bundled
    models' experiments and pruning curves that are not on disk yet are computed once, while the class can already
    use the app, and every server of the machine then reads them (``models/ahead.py``; it computes in one process
    at a time and returns at once when everything is kept). Its lines (``ahead: ...``) go to this terminal.
    ``DIKKAT_AHEAD=0`` turns it off (None is returned)."""
    env = dict(os.environ if environ is None else environ)
    if env.get("DIKKAT_AHEAD", "1") == "0":
        return None
    return subprocess.Popen([python, "-m", "models", "ahead"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            preexec_fn=lambda: os.nice(19))


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--with-redis"]:
        command = argv[2:] if argv[1:2] == ["--"] else argv[1:]
        if not command:
            raise SystemExit("Dikkat: --with-redis needs a command after it")
        raise SystemExit(run_with_redis(command))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8501, help="the port (default 8501)")
    parser.add_argument("--address", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    parser.add_argument("--classroom", action="store_true", help="classroom mode (make serve)")
    args = parser.parse_args(argv)
    command = streamlit_command(args.port, args.address, args.classroom)
    env = classroom_env() if args.classroom else dict(os.environ)
    if args.classroom:
        start_ahead(env)  # the class's slow results, computed once (it outlives the exec below: a child of the app)
        import warm  # deploy/warm.py: the class's first visit made by the server itself (no student waits for it)

        host = "127.0.0.1" if args.address in ("0.0.0.0", "::", "") else args.address
        warm.start(f"http://{host}:{args.port}", env)
    os.chdir(ROOT)
    sys.stdout.flush()
    os.execve(command[0], command, env)


if __name__ == "__main__":
    main()
