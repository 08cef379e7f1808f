"""Serve a class from several app processes behind nginx (``make serve REPLICAS=N``).

One Streamlit process runs every session's script under one GIL, so a class of 30 saturates one core. This
starts N classroom-mode app processes on ``127.0.0.1:PORT+1 .. PORT+N`` and nginx (Debian's ``nginx``) on
``ADDRESS:PORT`` in front of them, with sticky sessions: a browser without the cookie ``dikkat_replica`` is sent
to a replica by a random route (``hash ... consistent``), and the response sets the cookie to that replica
(``r1`` .. ``rN``); its requests then go there, to another replica only when it does not answer, and the first
answer from another replica moves the cookie there. So a browser's websocket, its uploads and its download links
(``/media/...``, kept in the memory of the process that made them) reach the same process, also after its replica
was killed and started again (before, the cookie went back to the restarted replica while the tab's session lived
on the other: its CSV links answered 404 and its uploads 400 until a reload). A download link the cookie's replica
does not hold is asked of the others (``proxy_next_upstream ... http_404``: the links are named by their content).
A cookie, not the client's address: a class behind one school router shares one address and would all land on one
replica.

Several machines: run ``make serve`` on each (e.g. ``make serve PORT=8501``), then on the machine students
open ``python deploy/replicas.py --port 80 --backends host1:8501,host2:8501`` (nginx only). Give every
machine the same ``classroom.toml`` and the same ``DIKKAT_COOKIE_SECRET``, so that a form posted after a
reconnect is accepted by any of them.

Usage::

    python deploy/replicas.py --replicas 2 --port 8501 [--address 0.0.0.0] [--backends h:p,...]

Stops every process it started on Ctrl-C or SIGTERM; a replica that exits is started again. Raises SystemExit with
the reason when nginx is not installed (``apt-get install nginx``) or a process does not start.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:  # imported from elsewhere (tests, benches)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import warm  # noqa: E402  (deploy/warm.py: each replica's first visit)
from launch import ROOT, start_ahead, streamlit_command  # noqa: E402  (deploy/launch.py: the flags of `make serve`)

NGINX_CONF = r"""
worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log stderr warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    client_max_body_size 12m;  # the app's 10 MB upload limit plus the form's own bytes
    # Streamlit sends its scripts uncompressed (plotly's alone is 4.7 MB): a class on one Wi-Fi gets them gzipped
    gzip on;
    gzip_proxied any;
    gzip_comp_level 5;
    gzip_min_length 1024;
    gzip_types application/javascript text/javascript text/css application/json image/svg+xml;
    map $http_upgrade $connection_upgrade {{ default upgrade; "" close; }}
    # sticky sessions that follow the replica serving the browser. The cookie names a replica (r1 .. rN): its requests
    # go to that replica, to the others only when it does not answer. A browser without the cookie (or with a route
    # of an older release) is hashed on a random route. Every response from another replica than the cookie names
    # (the first one, or one after its replica died) sets the cookie to the replica that answered, so that the
    # browser's websocket, its uploads and its download links (/media/..., kept in the memory of the process that
    # made them) stay on one process, also after that replica comes back.
    map $cookie_dikkat_replica $dikkat_route {{ "" $request_id; default $cookie_dikkat_replica; }}
    map $cookie_dikkat_replica $dikkat_upstream {{
        default dikkat;
{routes}
    }}
    map $upstream_addr $dikkat_served {{  # the last address tried answered
        default "";
{served}
    }}
    map "$cookie_dikkat_replica|$dikkat_served" $dikkat_set_cookie {{
        "~^(r\d+)\|\1$" "";
        "~\|(?<dikkat_now>r\d+)$" "dikkat_replica=$dikkat_now; Path=/; HttpOnly; SameSite=Lax";
        default "";
    }}
    upstream dikkat {{
        hash $dikkat_route consistent;
{servers}
    }}
{pinned}
    server {{
        listen {address}:{port};
        location / {{
            proxy_pass http://$dikkat_upstream;
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_set_header Host $http_host;  # with the port: Streamlit checks the Origin against it
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_read_timeout 1d;
            proxy_send_timeout 1d;
            proxy_buffering off;
            add_header Set-Cookie $dikkat_set_cookie always;
{debug}        }}
        # a download link (st.download_button's /media/<hash>.csv, named by its content) that the cookie's replica
        # does not hold (a browser that keeps no cookie, a link made before a failover) is asked of the others
        location /media/ {{
            proxy_pass http://$dikkat_upstream;
            proxy_http_version 1.1;
            proxy_set_header Host $http_host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_buffering off;
            proxy_next_upstream error timeout http_404;
{debug}        }}
    }}
}}
"""


def nginx_conf(backends: list[str], address: str, port: int, tmp: Path, debug: bool = False) -> str:
    """The nginx configuration that spreads sessions over ``backends`` (``host:port``) with sticky cookies that
    follow the replica serving the browser (``dikkat_replica=r<i>``, the i-th backend; see the comments in
    :data:`NGINX_CONF`); ``debug`` adds a response header ``X-Dikkat-Replica`` naming the backend (tests only: it
    shows students the servers' addresses)."""
    servers = "\n".join(f"        server {b} max_fails=0;" for b in backends)
    pinned = "\n".join(
        f"    upstream dikkat_r{i} {{\n        server {b} max_fails=0;\n"
        + "".join(f"        server {other} max_fails=0 backup;\n" for other in backends if other != b) + "    }"
        for i, b in enumerate(backends, 1))
    routes = "\n".join(f"        r{i} dikkat_r{i};" for i in range(1, len(backends) + 1))
    served = "\n".join(f'        "~(^| ){re.escape(b)}$" r{i};' for i, b in enumerate(backends, 1))
    header = "            add_header X-Dikkat-Replica $upstream_addr always;\n" if debug else ""
    return NGINX_CONF.lstrip("\n").format(tmp=tmp, servers=servers, pinned=pinned, routes=routes, served=served,
                                          address=address, port=port, debug=header)


def wait_healthy(url: str, proc: subprocess.Popen | None, timeout: float = 120) -> None:
    """Return when ``url``'s ``/_stcore/health`` answers 200.

    Raises:
        SystemExit: ``proc`` (the server, if given) exited, or ``timeout`` seconds passed.
    """
    deadline = time.time() + timeout
    while True:
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if (proc is not None and proc.poll() is not None) or time.time() > deadline:
            raise SystemExit(f"Dikkat: {url} did not start")
        time.sleep(0.5)


@dataclass
class Cluster:
    """What :func:`start` started: the replicas (with the command that restarts each), nginx and its folder."""

    replicas: list[subprocess.Popen] = field(default_factory=list)
    commands: list[list[str]] = field(default_factory=list)
    env: dict = field(default_factory=dict)
    nginx: subprocess.Popen | None = None
    folder: Path | None = None
    ahead: subprocess.Popen | None = None  # python -m models ahead in the background (launch.start_ahead)
    warm: list[subprocess.Popen] = field(default_factory=list)  # deploy/warm.py, one per replica

    @property
    def procs(self) -> list[subprocess.Popen]:
        return self.replicas + ([self.nginx] if self.nginx else [])

    def restart_dead(self) -> int:
        """Start again every replica that exited (its students reconnect to it); returns how many."""
        restarted = 0
        for i, proc in enumerate(self.replicas):
            if proc.poll() is not None:
                print(f"Dikkat: replica {i + 1} exited ({proc.returncode}); starting it again", file=sys.stderr,
                      flush=True)
                self.replicas[i] = subprocess.Popen(self.commands[i], cwd=ROOT, env=self.env)
                restarted += 1
        return restarted


def start(replicas: int, port: int, address: str, backends: list[str] | None = None,
          python: str = sys.executable, debug: bool = False) -> Cluster:
    """Start the replicas (unless ``backends`` are given) and nginx.

    Raises:
        SystemExit: nginx is not installed, or a replica or nginx did not start.
    """
    nginx = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.path.exists(p)), None)
    if nginx is None:
        raise SystemExit("Dikkat: nginx is not installed (Debian: sudo apt-get install nginx).")
    env = dict(os.environ, DIKKAT_MODE=os.environ.get("DIKKAT_MODE", "classroom"))
    # the replicas serve behind this nginx only (127.0.0.1): the live class's rate limits then read the client's
    # address from the X-Forwarded-For entry nginx writes (live.config.behind_proxy)
    env.setdefault("REPLICAS", str(replicas))
    # the cores shared out: replicas that each start one torch thread per core would fight over them
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // max(1, replicas))))
    # one cookie secret for every replica (Streamlit signs its XSRF cookie with it)
    env.setdefault("STREAMLIT_SERVER_COOKIE_SECRET", os.environ.get("DIKKAT_COOKIE_SECRET") or secrets.token_hex(32))
    cluster = Cluster(env=env)
    try:
        if not backends:
            backends = [f"127.0.0.1:{port + i}" for i in range(1, replicas + 1)]
            for i in range(1, replicas + 1):
                cluster.commands.append(streamlit_command(port + i, "127.0.0.1", classroom=True, python=python))
                cluster.replicas.append(subprocess.Popen(cluster.commands[-1], cwd=ROOT, env=env))
            for proc, backend in zip(cluster.replicas, backends):
                wait_healthy(f"http://{backend}", proc)
            cluster.ahead = start_ahead(env, python)  # once for all replicas: they read what it keeps
            # each replica's first visit, made by the server (deploy/warm.py): every process loads its own models
            cluster.warm = [w for w in (warm.start(f"http://{b}", env, python) for b in backends) if w is not None]
        cluster.folder = Path(tempfile.mkdtemp(prefix="dikkat-nginx-"))
        cluster.folder.chmod(0o755)  # nginx's workers (user nobody when started as root) write inside
        conf = cluster.folder / "nginx.conf"
        conf.write_text(nginx_conf(backends, address, port, cluster.folder, debug), encoding="utf-8")
        cluster.nginx = subprocess.Popen([nginx, "-e", "stderr", "-p", str(cluster.folder), "-c", str(conf)])
        wait_healthy(f"http://127.0.0.1:{port}", cluster.nginx, timeout=30)
    except BaseException:
        stop(cluster)
        raise
    return cluster


def stop(cluster: Cluster) -> None:
    """Terminate nginx and the replicas, killing any that does not exit within 15 s; remove nginx's folder."""
    procs = cluster.procs + cluster.warm + ([cluster.ahead] if cluster.ahead is not None else [])
    for proc in reversed(procs):
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
    if cluster.folder is not None:
        shutil.rmtree(cluster.folder, ignore_errors=True)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity; a container's CPU quota is not read)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def core_advice(replicas: int, cores: int) -> str | None:
    """What to say when ``replicas`` app processes would share ``cores`` cores (issue 48), or None. A replica runs its
    students' page scripts on one core at a time (Python's lock) and its torch work on every core; two on two cores
    contend for both. Measured on this kind of machine (bench/live_class.py, 30 students, 2026-12-07, from the
    teacher's click to every student's page): two replicas answered no faster than one process, p95 2.19 s (a replica
    killed and started again mid-lesson) and 1.53 s in another run, against 1.81-2.21 s in one process (before the
    same day's cheaper runs: 2.22 s against 1.46 s). Replicas still bring a failover (a replica killed, its students
    back in the room within seconds), which may be worth it."""
    if replicas <= 1 or cores >= 2 * replicas:
        return None
    return (f"Dikkat: {replicas} replicas on {cores} core{'s' if cores != 1 else ''}: they compete for the same cores "
            f"and answer a class no faster than one process (measured on 2 cores with 30 students: the teacher's "
            f"change at p95 1.53-2.19 s with 2 replicas, 1.81-2.21 s with one). REPLICAS=1 (the default) needs no "
            f"nginx or Redis; keep {replicas} for the failover (a replica that dies, its students moved to another). "
            f"Replicas should help from {2 * replicas} cores (not measured).")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=2, help="app processes on this machine (default 2)")
    parser.add_argument("--port", type=int, default=8501, help="the port students open (default 8501)")
    parser.add_argument("--address", default="0.0.0.0", help="the address nginx listens on (default 0.0.0.0)")
    parser.add_argument("--backends", default="", help="host:port,... of app servers already running "
                                                       "(nginx only; no replica is started)")
    args = parser.parse_args(argv)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if args.replicas < 1 and not backends:
        raise SystemExit("Dikkat: --replicas must be at least 1.")
    advice = None if backends else core_advice(args.replicas, usable_cores())
    if advice:
        print(advice, file=sys.stderr, flush=True)
    cluster = start(args.replicas, args.port, args.address, backends or None)
    print(f"Dikkat: {len(backends) or args.replicas} app servers behind nginx on http://{args.address}:{args.port}",
          flush=True)
    signal.signal(signal.SIGTERM, lambda *_: (stop(cluster), sys.exit(0)))
    try:
        while cluster.nginx.poll() is None:  # a replica that exits is started again; nginx ends the class
            cluster.restart_dead()
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        stop(cluster)


if __name__ == "__main__":
    main()
