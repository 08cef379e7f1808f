"""The class's Redis that ``deploy/launch.py --with-redis`` starts (issue 44): a private ``redis-server`` on
127.0.0.1 with a password, writing an append-only file, and kept running.

* **Nothing answered is lost when it dies.** It writes every change to an append-only file (``appendonly yes``,
  ``appendfsync everysec``) in the class's data folder (:func:`data_dir`: ``DIKKAT_CLASS_DATA``, else
  ``.data/class`` in the repository root). Redis writes a command to that file before it answers the client
  (https://redis.io/docs/latest/operate/oss_and_stack/management/persistence/: "everysec" fsyncs once a second), so
  a killed ``redis-server`` (SIGKILL, the OOM killer) loses no answer a student saw accepted; only the machine
  itself losing power can lose the last second.
* **It comes back by itself.** :class:`KeptRedis` watches the process and starts it again on the same port, with
  the same password and folder, so it reloads the class from the file; the app's clients reconnect on their own.
  A ``make serve`` started again later finds the same port and password in the folder (``redis.json``, mode 0600)
  and so the classes of the last 12 hours.
* One server per folder: a second launcher on the same folder is refused (a lock file), since two Redis servers
  writing one append-only file would break it.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from collections.abc import Mapping

ROOT = Path(__file__).resolve().parent.parent
WATCH_S = 0.25  # how often the keeper looks whether redis-server still runs


def data_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The class's data folder: ``DIKKAT_CLASS_DATA``, else ``<repository>/.data/class``."""
    env = os.environ if environ is None else environ
    return Path(env.get("DIKKAT_CLASS_DATA") or ROOT / ".data" / "class")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def answers(port: int, password: str | None = None) -> bool:
    """Whether a Redis on 127.0.0.1:``port`` answers a PING (``-NOAUTH`` counts: it is up, with a password) and,
    when ``password`` is given, has finished loading its append-only file (``-LOADING`` is not up yet)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            if password is not None:
                sock.sendall(f"*2\r\n$4\r\nAUTH\r\n${len(password)}\r\n{password}\r\n".encode())
                if not sock.recv(64).startswith(b"+OK"):
                    return False
            sock.sendall(b"*1\r\n$4\r\nPING\r\n")
            return sock.recv(64).startswith((b"+PONG", b"-NOAUTH"))
    except OSError:
        return False


def _shutdown(port: int, password: str, timeout: float = 10) -> None:
    """Stop the Redis on ``port`` that has ``password`` (it writes its file first), waiting up to ``timeout``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            sock.sendall(f"*2\r\n$4\r\nAUTH\r\n${len(password)}\r\n{password}\r\n".encode())
            sock.recv(64)
            sock.sendall(b"*1\r\n$8\r\nSHUTDOWN\r\n")
            sock.recv(64)
    except OSError:
        pass
    deadline = time.time() + timeout
    while answers(port) and time.time() < deadline:
        time.sleep(0.1)


def _executable() -> str:
    exe = shutil.which("redis-server") or ("/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server")
                                           else None)
    if exe is None:
        raise SystemExit("Dikkat: redis-server is not installed (make redis; Debian: sudo apt-get install "
                         "redis-server), or set DIKKAT_REDIS_URL to a Redis the replicas share.")
    return exe


def start_redis(port: int | None = None, timeout: float = 15, folder: Path | None = None,
                password: str | None = None) -> tuple[subprocess.Popen, str]:
    """Start a private ``redis-server`` on 127.0.0.1: ``port`` (default a free one), ``password`` (default a random
    one), its append-only file in ``folder`` (default a temporary folder removed by :func:`stop_redis`), its
    configuration given on its standard input (the password is not on its command line). It runs in a session of
    its own, so a Ctrl-C in the terminal leaves it to :func:`stop_redis`.

    Returns:
        ``(process, url)``, the url ``redis://:<password>@127.0.0.1:<port>/0`` (``DIKKAT_REDIS_URL``).

    Raises:
        SystemExit: ``redis-server`` is not installed, or does not answer within ``timeout`` seconds (the reason
            it gave is told).
    """
    exe = _executable()
    port = port or free_port()
    password = password or secrets.token_hex(24)
    own_folder = folder is None
    folder = Path(tempfile.mkdtemp(prefix="dikkat-redis-")) if own_folder else Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = (f"port {port}\nbind 127.0.0.1\nprotected-mode yes\ndir {json.dumps(str(folder))}\nsave \"\"\n"
              f"appendonly yes\nappendfsync everysec\nloglevel warning\nrequirepass {password}\n")
    log = tempfile.TemporaryFile()  # noqa: SIM115  (the server's output file for its life) its start-up lines: shown only when it fails
    proc = subprocess.Popen([exe, "-"], stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    proc.log, proc.folder = log, (folder if own_folder else None)
    proc.stdin.write(config.encode())
    proc.stdin.close()
    deadline = time.time() + timeout
    while not answers(port, password):
        if proc.poll() is not None or time.time() > deadline:
            log.seek(0)
            said = log.read().decode(errors="replace").strip().splitlines()[-5:]
            stop_redis(proc)
            raise SystemExit(f"Dikkat: redis-server did not start on port {port}:\n" + "\n".join(said))
        time.sleep(0.05)
    return proc, f"redis://:{password}@127.0.0.1:{port}/0"


def stop_redis(proc: subprocess.Popen) -> None:
    """Stop a Redis :func:`start_redis` started (killed if it has not exited within 10 s); its temporary folder,
    if it made one, is removed."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if getattr(proc, "log", None) is not None:
        proc.log.close()
    if getattr(proc, "folder", None) is not None:
        shutil.rmtree(proc.folder, ignore_errors=True)


class KeptRedis:
    """The class's Redis, started again whenever it stops (see the module's text).

    Args:
        folder: the data folder (:func:`data_dir`); its ``redis.json`` keeps the port and password.
        say: where a restart is reported (a line; default ``print``).

    Raises (:meth:`start`):
        SystemExit: another launcher uses the folder, or redis-server cannot be started.
    """

    def __init__(self, folder: Path, say=print) -> None:
        self.folder = Path(folder)
        self.say = say
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.restarts = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = None

    def _settings(self) -> tuple[int, str]:
        """The port and password of the folder's last server (a new pair when none, or the port is taken now)."""
        path = self.folder / "redis.json"
        try:
            kept = json.loads(path.read_text(encoding="utf-8"))
            port, password = int(kept["port"]), str(kept["password"])
        except (OSError, ValueError, KeyError, TypeError):
            port, password = 0, ""
        if port and password and answers(port, password):  # our own server, left by a launcher that was killed
            _shutdown(port, password)
        if not port or not password or answers(port):  # answers: someone else listens there now
            port, password = free_port(), secrets.token_hex(24)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump({"port": port, "password": password}, out)
        return port, password

    def start(self) -> str:
        """Start redis-server and its keeper; returns the url (``DIKKAT_REDIS_URL``)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self._lock = open(self.folder / "lock", "w")  # noqa: SIM115  (held as the lock while the keeper lives)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lock.close()
            raise SystemExit(f"Dikkat: the class data folder {self.folder} is used by another server "
                             "(set DIKKAT_CLASS_DATA to another folder)") from None
        self.port, self.password = self._settings()
        self.proc, self.url = start_redis(self.port, folder=self.folder, password=self.password)
        self._thread = threading.Thread(target=self._watch, name="dikkat-redis-keeper", daemon=True)
        self._thread.start()
        return self.url

    def _watch(self) -> None:
        while not self._stop.wait(WATCH_S):
            if self.proc is not None and self.proc.poll() is not None and not self._stop.is_set():
                code = self.proc.returncode
                try:
                    self.proc, _ = start_redis(self.port, folder=self.folder, password=self.password, timeout=60)
                except SystemExit as exc:  # the port taken meanwhile, a full disk ...: said, tried again
                    self.say(f"Dikkat: the class's Redis stopped (exit {code}) and could not be started again: {exc}")
                    continue
                self.restarts += 1
                self.say(f"Dikkat: the class's Redis stopped (exit {code}); started again and reloaded the class")

    def stop(self) -> None:
        """Stop the keeper, then redis-server (its file stays, for the next start)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.proc is not None:
            stop_redis(self.proc)
        if self._lock is not None:
            self._lock.close()
