"""Hosting a class (issue 12): names that cannot be paths, hub downloads with timeouts and a size cap, one
lock per model."""

from __future__ import annotations

import socket
import threading

import pytest

import models
from models.loading import hub


@pytest.mark.parametrize("name", ["~nosuchuser", "~nosuchuser/model", "a" * 300, "x/" + "b" * 300, "/tmp/\x00x",
                                  "nul\x00/name", "~" + "é" * 200])
def test_names_no_path_can_have_are_unknown_models(name):
    """``~nosuchuser`` raised RuntimeError (a traceback with server paths on every page) and a name over 255
    bytes OSError; both are now UnknownModelErrors whose message quotes at most 80 characters of it."""
    with pytest.raises(models.UnknownModelError) as info:
        models.load(name)
    assert len(str(info.value)) < 400
    assert "Traceback" not in str(info.value)


def _silent_server():
    """A TCP server on 127.0.0.1 that accepts connections and never answers (a stalled hub)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held = []

    def accept():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    return server, held


def test_a_stalled_hub_times_out(monkeypatch):
    """huggingface_hub's client has no timeout and passes ``timeout=None`` to repository lookups: a server
    that accepts and never answers held the load forever. Now every request gives up after
    DIKKAT_HUB_TIMEOUT_S and the load is a HubUnreachableError that says so."""
    import huggingface_hub.constants

    server, held = _silent_server()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # the suite runs offline
    monkeypatch.setenv("DIKKAT_HUB_TIMEOUT_S", "0.5")
    monkeypatch.setattr(hub, "HUB_ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
    outcome = []

    def load():
        try:
            models.load("someone/stalled-model")
        except Exception as exc:  # noqa: BLE001 - the test asserts which one
            outcome.append(exc)

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    worker.join(30)  # a daemon thread: a hang fails the test instead of hanging the suite
    server.close()
    assert held, "the request reached the silent server"
    assert not worker.is_alive(), "the load still waits for the silent server after 30 s"
    assert isinstance(outcome[0], models.HubUnreachableError) and "no answer within 0.5 s" in str(outcome[0])


class _Planned:
    def __init__(self, size, will_download=True):
        self.file_size, self.will_download = size, will_download


def test_a_hub_repository_over_the_size_cap_is_not_downloaded(monkeypatch):
    """Any owner/name downloaded its safetensors whatever their size. A dry run sums what would be
    downloaded (files already in the hub cache do not count); over DIKKAT_HUB_MAX_GIB nothing is fetched."""
    import huggingface_hub

    calls = []

    def fake_snapshot(repo_id, dry_run=False, **kwargs):
        calls.append(dry_run)
        if not dry_run:
            raise AssertionError("downloaded although over the cap")
        return [_Planned(3 * 2 ** 30), _Planned(2 * 2 ** 30), _Planned(50 * 2 ** 30, will_download=False)]

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot)
    monkeypatch.setenv("DIKKAT_HUB_MAX_GIB", "4")
    with pytest.raises(models.HubDownloadTooLargeError, match=r"5\.0 GiB.*4\.0 GiB"):
        models.load("someone/huge-model")
    assert calls == [True]


def test_loading_one_model_never_blocks_another(monkeypatch):
    """One global lock was held for a whole load: a stalled download blocked every other session's use of
    an already loaded model for minutes. Loads now lock per model."""
    models.load("minilm-l6")
    entered, release = threading.Event(), threading.Event()

    def slow_download(hub_id):
        entered.set()
        release.wait(60)
        raise models.HubUnreachableError("released")

    monkeypatch.setattr(hub, "download", slow_download)
    errors = []
    stalled = threading.Thread(target=lambda: errors.append(pytest.raises(models.HubUnreachableError,
                                                                          models.load, "slow/model")))
    stalled.start()
    try:
        assert entered.wait(30)
        done = threading.Event()
        threading.Thread(target=lambda: (models.load("minilm-l6"), done.set()), daemon=True).start()
        assert done.wait(30), "a loaded model waited for another model's download"
    finally:
        release.set()
        stalled.join(60)
    assert len(errors) == 1
