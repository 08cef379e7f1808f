"""Shared fixtures: tiny random models (built once per session), the bundled real models, and a Redis of the tests' own
(the live class's shared store, tests/deploy and tests/app)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# results computed ahead (models/ahead.py) in a folder of this run: what `make ahead` kept on this machine does not
# change what a test sees, and no test writes into the user's cache
os.environ.setdefault("DIKKAT_AHEAD_ROOT", tempfile.mkdtemp(prefix="dikkat-ahead-"))
os.environ.setdefault("DIKKAT_AHEAD", "0")  # a server a test starts computes nothing in the background
os.environ.setdefault("DIKKAT_WARM", "0")  # and opens no page of its own (deploy/warm.py): the tests time their own

import models  # noqa: E402
from tiny import build_tiny  # noqa: E402

_TINY: dict[str, models.LoadedModel] = {}

# Where the fixtures' tiny and bundled models run: DIKKAT_TEST_DEVICE (default cpu), in DIKKAT_TEST_DTYPE (default
# auto: float32 on cpu, bfloat16 on a GPU). bench/device_check.sh runs this tier with cuda and float32. Tests that
# call models.load themselves keep their own device.
TEST_DEVICE = os.environ.get("DIKKAT_TEST_DEVICE", "cpu")
TEST_DTYPE = os.environ.get("DIKKAT_TEST_DTYPE", "auto")


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory):
    """``tiny_folder(arch) -> Path`` of a saved tiny random model (see tests/tiny.py)."""
    root = tmp_path_factory.mktemp("tiny")
    made: dict[str, Path] = {}

    def make(arch: str) -> Path:
        if arch not in made:
            folder = root / arch
            folder.mkdir()
            made[arch] = build_tiny(arch, folder)
        return made[arch]

    return make


@pytest.fixture(scope="session")
def tiny(tiny_folder):
    """``tiny(arch) -> LoadedModel`` loaded on ``TEST_DEVICE`` (CPU unless set) through ``models.load(folder)``."""

    def get(arch: str) -> models.LoadedModel:
        return models.load(str(tiny_folder(arch)), device=TEST_DEVICE, dtype=TEST_DTYPE)

    return get


@pytest.fixture(scope="session")
def minilm():
    return models.load("minilm-l6", device=TEST_DEVICE, dtype=TEST_DTYPE)


@pytest.fixture(scope="session")
def smollm2():
    return models.load("smollm2-135m", device=TEST_DEVICE, dtype=TEST_DTYPE)


def press_heavy(at, key: str, timeout: float = 600):
    """Press the button ``key`` whose work runs on the heavy-work pool (models/jobs.py: pruning curve, experiments,
    Cost's Measure), wait until the pool has nothing queued or running, and run the page again (as its follow
    fragment does once the job ends). Returns ``at``."""
    from models import jobs

    at.button(key=key).click().run()
    assert jobs.pool().idle(timeout), "a heavy job still runs"
    return at.run()


def free_port() -> int:
    """A TCP port of 127.0.0.1 free just now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def redis_url():
    """``redis://127.0.0.1:PORT/0`` of a ``redis-server`` started for this test run (Debian's, `make redis`), on a
    free port, nothing written to disk; stopped at the end. Tests keep apart by key prefix or database number."""
    import redis

    exe = shutil.which("redis-server") or "/usr/bin/redis-server"
    if not Path(exe).exists():
        pytest.fail("redis-server is missing: `make redis` (Debian: apt-get install redis-server)")
    port = free_port()
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    deadline = time.time() + 15
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                pytest.fail(f"redis-server did not start on port {port}")
            time.sleep(0.05)
    try:
        yield url
    finally:
        client.close()
        proc.terminate()
        proc.wait(timeout=15)


# Tests live in one folder per tier; the folder is the marker (declared in pyproject.toml): `pytest -m engine`,
# `-m "not browser"`, or a folder. ``bundled`` is also put on any test that takes a bundled-model fixture, so
# `make check` (tiers that need no bundled model, browser or nginx) can leave those out of engine/ and viz/.
TIERS = ("house", "engine", "viz", "app", "deploy", "bundled", "browser", "sweep")
BUNDLED_FIXTURES = {"minilm", "smollm2"}


def tier_of(path: Path) -> str | None:
    """The tier of a test file: the name of its folder under tests/ (None for a file outside a tier)."""
    parts = Path(path).resolve().relative_to(ROOT / "tests").parts
    return parts[0] if len(parts) > 1 and parts[0] in TIERS else None


def pytest_collection_modifyitems(config, items):
    """Mark each test with its folder's tier, and ``bundled`` where it uses a bundled model."""
    for item in items:
        tier = tier_of(item.path)
        if tier:
            item.add_marker(tier)
        if BUNDLED_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker("bundled")
