"""`make serve REPLICAS=N` (issue 12): app processes behind nginx with sticky sessions (deploy/replicas.py)."""

from __future__ import annotations

import http.client
import socket
import sys
import urllib.parse
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "deploy"))

import replicas  # noqa: E402


def _free_ports(n: int) -> int:
    """A port p with p .. p + n free on 127.0.0.1."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n >= 65535:
            continue
        try:
            held = []
            for p in range(base, base + n + 1):
                sock = socket.socket()
                held.append(sock)
                sock.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
    raise RuntimeError("no free port range")


def _get(port: int, path: str = "/", cookie: str | None = None, headers: dict | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", path, headers={**({"Cookie": cookie} if cookie else {}), **(headers or {})})
    response = conn.getresponse()
    response.read()
    conn.close()
    return response


@pytest.fixture(scope="module")
def two_replicas():
    port = _free_ports(2)
    cluster = replicas.start(2, port, "127.0.0.1", debug=True)
    try:
        yield port, cluster
    finally:
        replicas.stop(cluster)
        assert all(p.poll() is not None for p in cluster.procs) and not cluster.folder.exists()


def test_sessions_stick_to_one_replica(two_replicas):
    """A browser without the cookie is given one; every request that carries it (page, websocket, download
    links) reaches the same app process, and different browsers are spread over both."""
    port, _ = two_replicas
    first = _get(port)
    assert first.status == 200
    cookie = first.getheader("Set-Cookie")
    assert cookie and cookie.startswith("dikkat_replica=") and "HttpOnly" in cookie
    route = cookie.split(";")[0]
    seen = {_get(port, "/_stcore/health", cookie=route).getheader("X-Dikkat-Replica") for _ in range(12)}
    assert len(seen) == 1
    again = _get(port, cookie=route)
    assert again.getheader("Set-Cookie") is None  # the route is kept, not replaced
    spread = {_get(port, "/_stcore/health", cookie=f"dikkat_replica=browser{i}").getheader("X-Dikkat-Replica")
              for i in range(24)}
    assert spread == {f"127.0.0.1:{port + 1}", f"127.0.0.1:{port + 2}"}


def test_websocket_upgrade_passes_through(two_replicas):
    """Streamlit's websocket (/_stcore/stream) is upgraded through nginx, with the browser's Origin checked
    against the Host it sent (port included: a proxy that dropped the port had every student refused)."""
    port, _ = two_replicas
    for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
        response = _get(port, "/_stcore/stream", cookie="dikkat_replica=a",
                        headers={"Host": host, "Origin": f"http://{host}", "Upgrade": "websocket",
                                 "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
                                 "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
                                 "Sec-WebSocket-Protocol": "streamlit"})
        assert response.status == 101, host


def test_a_replica_that_exits_is_started_again(two_replicas):
    port, cluster = two_replicas
    cluster.replicas[0].kill()
    cluster.replicas[0].wait()
    assert cluster.restart_dead() == 1 and cluster.replicas[0].poll() is None
    replicas.wait_healthy(f"http://127.0.0.1:{port + 1}", cluster.replicas[0])
    assert cluster.restart_dead() == 0


def test_nginx_conf_lists_every_backend():
    conf = replicas.nginx_conf(["10.0.0.1:8501", "10.0.0.2:8501"], "0.0.0.0", 80, Path("/tmp/x"))
    assert "server 10.0.0.1:8501" in conf and "server 10.0.0.2:8501" in conf
    assert "hash $dikkat_route consistent" in conf and "listen 0.0.0.0:80" in conf
    assert "X-Dikkat-Replica" not in conf  # students are not told the servers' addresses
    # the cookie names the replica that answered: each has its own group, the others as backups
    assert "upstream dikkat_r2 {\n        server 10.0.0.2:8501 max_fails=0;\n        server 10.0.0.1:8501" in conf
    assert "r1 dikkat_r1;" in conf and '"~(^| )10\\.0\\.0\\.2:8501$" r2;' in conf
    assert "proxy_next_upstream error timeout http_404;" in conf  # a download link is asked of every replica


def test_each_replica_is_visited_once_by_the_server_itself(two_replicas, tmp_path, monkeypatch):
    """deploy/warm.py (issue 27): the class's first visit (model load, first analysis) made by the server, on each
    replica and through nginx; a visit that cannot be made is reported, never raised. The test run sets
    DIKKAT_WARM=0 and DIKKAT_AHEAD=0, so the fixture's cluster started neither in the background. Its progress is
    written for the replica's teacher panel (live/readiness.py, issue 50 point 1)."""
    import warm

    from live import readiness

    monkeypatch.setenv("DIKKAT_CLASS_DATA", str(tmp_path))

    port, cluster = two_replicas
    assert cluster.warm == [] and cluster.ahead is None
    lines = []
    done = warm.warm(f"http://127.0.0.1:{port + 1}", ["", "model_key=minilm-l6&lang=tr"], timeout=300,
                     say=lines.append)
    assert all(isinstance(s, float) and s > 0 for s in done.values()) and len(done) == 2, lines
    ready = readiness.read(port + 1)
    assert (ready.done, ready.total, ready.failed, ready.ready) == (2, 2, 0, True)
    assert 0 < ready.seconds < 300
    through_nginx = warm.warm(f"http://127.0.0.1:{port}", [""], timeout=300, say=lines.append)
    assert isinstance(through_nginx[""], float), lines
    # a page other than the first, by its url path (the lesson steps' visits); one that is not there is said
    pages = warm.warm(f"http://127.0.0.1:{port + 1}",
                      ["masks?model_key=minilm-l6&masks_section=bert_gpt", "nosuch?x=1"],
                      timeout=300, say=lines.append)
    assert isinstance(pages["masks?model_key=minilm-l6&masks_section=bert_gpt"], float), lines
    assert isinstance(pages["nosuch?x=1"], str), lines
    assert (readiness.read(port + 1).done, readiness.read(port + 1).failed) == (2, 1)
    nobody = _free_ports(0)
    dead = warm.warm(f"http://127.0.0.1:{nobody}", [""], timeout=1, say=lines.append)
    assert dead == {} and "did not answer" in lines[-1]
    assert (readiness.read(nobody).done, readiness.read(nobody).ready) == (0, False)  # preparing, not ready


def test_warm_visits_come_from_the_environment():
    import warm

    steps = warm.lesson_visits()
    assert warm.visits_from_env({}) == list(dict.fromkeys([*warm.VISITS, *steps]))
    assert warm.visits_from_env({"DIKKAT_WARM": "0"}) is None
    assert warm.visits_from_env({"DIKKAT_WARM": "?model_key=a; model_key=b"}) == ["model_key=a", "model_key=b"]
    assert warm.start("http://127.0.0.1:1", {"DIKKAT_WARM": "0"}) is None


def test_warm_opens_every_step_of_the_shipped_lessons_on_its_page():
    """Issue 50 point 1: the warm-up loaded the default model and the lesson's decoder only, so the Whisper step took
    72 s and Head pruning on smollm2 about a minute for the first class that reached them. Every step of every shipped
    lesson is now a visit: its page (by url path) and its link."""
    import warm
    from live import lessons

    shipped = [lessons.load_lesson(p) for p in sorted(lessons.LESSONS.glob("*.toml"))]
    steps = warm.lesson_visits()
    assert len(steps) == sum(len(lesson.steps) for lesson in shipped)
    first = shipped[0].steps
    for visit, step in zip(steps, first):
        page, query = warm.split_visit(visit)
        assert page == ("" if step.page == "explore" else step.page)
        assert dict(urllib.parse.parse_qsl(query)) == step.query()
    assert {"whisper-base", "smollm2-135m"} <= {dict(urllib.parse.parse_qsl(warm.split_visit(v)[1])).get("model_key")
                                                  for v in steps}
    assert warm.split_visit("model_key=a&x=1") == ("", "model_key=a&x=1")
    assert warm.split_visit("?model_key=a") == ("", "model_key=a") and warm.split_visit("") == ("", "")
    assert warm.split_visit("why?model_key=a") == ("why", "model_key=a")


def test_scripts_are_sent_gzipped_through_nginx(two_replicas):
    """Streamlit sends its scripts uncompressed; behind Dikkat's nginx a browser that accepts gzip gets them
    compressed (the plotly chart module: 4.7 MB as it is)."""
    import gzip

    from views.shared.preload import STATIC_JS, plotly_chunk

    port, _ = two_replicas
    path = f"/static/js/{plotly_chunk()}"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", path, headers={"Accept-Encoding": "gzip", "Cookie": "dikkat_replica=a"})
    response = conn.getresponse()
    body = response.read()
    conn.close()
    assert response.status == 200 and response.getheader("Content-Encoding") == "gzip"
    plain = (STATIC_JS / plotly_chunk()).read_bytes()
    assert gzip.decompress(body) == plain and len(body) < len(plain) / 2


class _Browser:
    """What a browser does against nginx, over HTTP and Streamlit's websocket: it keeps the cookies it is given."""

    def __init__(self, port: int):
        self.port, self.base, self.jar = port, f"http://127.0.0.1:{port}", {}

    def _keep(self, set_cookie: str | None) -> None:
        if set_cookie:
            name, value = set_cookie.split(";")[0].split("=", 1)
            self.jar[name] = value

    def cookie(self) -> str:
        return "; ".join(f"{k}={v}" for k, v in self.jar.items())

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        conn.request(method, path, body=body, headers={"Cookie": self.cookie(), **(headers or {})})
        response = conn.getresponse()
        response.read()
        conn.close()
        self._keep(response.getheader("Set-Cookie"))
        return response

    async def open_page(self, page: str):
        """The websocket of a tab on ``page``, after its first run: ``(ws, session id, first download link)``."""
        import asyncio

        import websockets
        from streamlit.proto.BackMsg_pb2 import BackMsg
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        msg = BackMsg()
        msg.rerun_script.page_name = page
        info = msg.rerun_script.context_info
        info.timezone, info.locale, info.url = "UTC", "en-US", f"{self.base}/{page}"
        ws = await websockets.connect(self.base.replace("http", "ws") + "/_stcore/stream", subprotocols=["streamlit"],
                                      origin=self.base, additional_headers={"Cookie": self.cookie()}, max_size=None,
                                      ping_interval=None, open_timeout=60)
        self._keep(ws.response.headers.get("Set-Cookie"))
        await ws.send(msg.SerializeToString())
        session = link = None
        while True:
            fwd = ForwardMsg()
            fwd.ParseFromString(await asyncio.wait_for(ws.recv(), 300))
            kind = fwd.WhichOneof("type")
            if kind == "new_session":
                session = fwd.new_session.initialize.session_id
            elif kind == "delta" and fwd.delta.WhichOneof("type") == "new_element":
                element = fwd.delta.new_element
                assert element.WhichOneof("type") != "exception", element.exception.message
                if element.WhichOneof("type") == "download_button" and link is None:
                    link = element.download_button.url
            elif kind == "script_finished" and fwd.script_finished != 2:  # 2: ended early for a rerun
                return ws, session, link

    def upload(self, session: str):
        boundary = "dikkatboundary"
        body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"UploadedFile\"; filename=\"t.txt\"\r\n"
                f"Content-Type: text/plain\r\n\r\nthe cat sat\r\n--{boundary}--\r\n").encode()
        return self.request("PUT", f"/_stcore/upload_file/{session}/file-1", body,
                            {"Content-Type": f"multipart/form-data; boundary={boundary}",
                             "X-Xsrftoken": self.jar.get("_streamlit_xsrf", "")})


def test_downloads_and_uploads_reach_the_session_after_its_replica_was_killed(two_replicas):
    """Issue 44 point 6: a tab on the QKV page loses its replica (killed): its reconnect goes to the other one, where
    its page is drawn again with its CSV download; the killed replica is started again. Before, the cookie still
    hashed to the restarted replica, which holds neither the session nor the file: the CSV link answered 404 and an
    upload 400 until the tab was reloaded. Now the first answer from the other replica moves the cookie there."""
    import asyncio

    port, cluster = two_replicas

    async def lesson():
        browser = _Browser(port)
        assert browser.request("GET", "/").status == 200
        ws, _, link = await browser.open_page("qkv")
        assert link and link.startswith("/media/") and link.endswith(".csv")
        assert browser.request("GET", link).status == 200
        served = browser.request("GET", "/_stcore/health").getheader("X-Dikkat-Replica")
        killed = [f"127.0.0.1:{port + 1}", f"127.0.0.1:{port + 2}"].index(served)
        cluster.replicas[killed].kill()
        cluster.replicas[killed].wait()
        await ws.close()
        # the frontend polls the health endpoint before it opens its websocket again
        assert browser.request("GET", "/_stcore/health").status == 200
        ws, session, link = await browser.open_page("qkv")
        try:
            assert cluster.restart_dead() == 1
            replicas.wait_healthy(f"http://{served}", cluster.replicas[killed])
            download = browser.request("GET", link)
            assert download.status == 200 and download.getheader("X-Dikkat-Replica") != served
            assert browser.upload(session).status == 204
            assert browser.request("GET", "/_stcore/health").getheader("X-Dikkat-Replica") != served
            # a tab that keeps no cookie (each request hashed anew) gets its link from whichever replica holds it
            answers = []
            for _ in range(6):
                browser.jar.clear()
                answers.append(browser.request("GET", link).status)
            assert answers == [200] * 6
        finally:
            await ws.close()

    asyncio.run(lesson())


def test_replicas_that_would_share_too_few_cores_are_advised_against():
    """Issue 48: two replicas on two cores answered a class no faster than one process (p95 1.53-2.19 s against
    1.81-2.21 s); make serve says so, with the measured figures, and when replicas should help."""
    import replicas

    said = replicas.core_advice(2, 2)
    assert said is not None and "2 replicas on 2 cores" in said and "1.53-2.19 s with 2 replicas" in said
    assert "1.81-2.21 s with one" in said and "from 4 cores" in said and "REPLICAS=1" in said
    assert replicas.core_advice(3, 4) is not None and "from 6 cores" in replicas.core_advice(3, 4)
    assert replicas.core_advice(1, 1) is None and replicas.core_advice(2, 4) is None \
        and replicas.core_advice(4, 16) is None
    assert replicas.usable_cores() >= 1
