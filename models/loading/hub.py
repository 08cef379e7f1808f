"""Hugging Face hub ids: recognising one, and downloading its safetensors (or GGUF) files with timeouts and a
size cap. Only a hub id the user asked for ever touches the network.

Across sessions (issue 44 point 5): one download per hub id at a time (the others wait for it and share its
result), a total deadline per request (``DIKKAT_HUB_DEADLINE_S``, default 300 s), and a failure remembered for
``DIKKAT_HUB_RETRY_S`` (default 300 s): a request meanwhile is answered at once (code ``hub_failed_recently``)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any, cast

from .. import budget
from ..errors import HubDownloadTooLargeError, HubUnreachableError


HUB_ENDPOINT: str | None = None  # None: huggingface_hub's (HF_ENDPOINT); tests point it at a local server


def hub_timeout() -> float:
    """Seconds a hub request may wait to connect or for the next bytes (``DIKKAT_HUB_TIMEOUT_S``, default 20)."""
    try:
        return max(0.1, float(os.environ.get("DIKKAT_HUB_TIMEOUT_S", "20")))
    except ValueError:
        return 20.0


def _hub_timeouts() -> None:
    """Give huggingface_hub's shared HTTP client connect/read/write timeouts (:func:`hub_timeout`): its
    default client has none, so a server that accepts the connection and never answers stalls a download
    forever. A client factory the caller set is left alone."""
    import huggingface_hub.constants as hub_constants
    from huggingface_hub.utils import _http

    cast(Any, hub_constants).HF_HUB_DOWNLOAD_TIMEOUT = hub_timeout()  # typed int there; a float works as well
    factory = _http._GLOBAL_CLIENT_FACTORY
    timed: Any = _timed_client  # the timeouts ride on the factory as its attribute ``seconds``
    if factory is _http.default_client_factory or (factory is _timed_client and timed.seconds != hub_timeout()):
        timed.seconds = hub_timeout()
        _http.set_client_factory(_timed_client)


def _timed_client():
    """huggingface_hub's default HTTP client with :func:`hub_timeout` on every phase of every request. Set
    per request (a request hook): huggingface_hub passes ``timeout=None`` (no limit) to some calls, which
    overrides a client-wide default."""
    from huggingface_hub.utils import _http

    client = _http.default_client_factory()
    limits = {phase: _timed_client.seconds for phase in ("connect", "read", "write", "pool")}

    def limit(request):
        request.extensions["timeout"] = dict(limits)

    client.event_hooks = {**client.event_hooks, "request": [*client.event_hooks.get("request", []), limit]}
    return client


def _download(hub_id: str) -> Path:
    """Fetch a hub repository's config, tokenizer and safetensors files (never pickle weights), in this thread."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError

    patterns = ["*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken", "*.jinja", "*.py.none"]
    _hub_timeouts()
    cap = budget.budget_from_env("DIKKAT_HUB_MAX_GIB", 8)
    try:
        planned = snapshot_download(hub_id, allow_patterns=patterns, dry_run=True, endpoint=HUB_ENDPOINT,
                                    etag_timeout=hub_timeout())
        size = sum(f.file_size or 0 for f in planned if f.will_download)
        if size > cap:
            raise HubDownloadTooLargeError(
                f"Hugging Face model '{hub_id}' would download {size / 2 ** 30:.1f} GiB, more than this "
                f"machine allows ({cap / 2 ** 30:.1f} GiB, DIKKAT_HUB_MAX_GIB).",
                code="hub_too_large", model=hub_id, size=round(size / 2 ** 30, 1), cap=round(cap / 2 ** 30, 1))
        folder = Path(snapshot_download(hub_id, allow_patterns=patterns, endpoint=HUB_ENDPOINT,
                                        etag_timeout=hub_timeout()))
    except HubDownloadTooLargeError:
        raise
    except RepositoryNotFoundError as exc:
        raise HubUnreachableError(f"Hugging Face model '{hub_id}' does not exist (or is private).",
                                  code="hub_missing", model=hub_id) from exc
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError) as exc:
        raise HubUnreachableError(
            f"Cannot reach the Hugging Face hub for '{hub_id}' (offline, or no answer within "
            f"{hub_timeout():g} s) and it is not in the local hub cache. Connect to the internet once, or give "
            "a local folder.",
            code="hub_unreachable", model=hub_id, seconds=hub_timeout()
        ) from exc
    except Exception as exc:  # connection errors from httpx/requests
        raise HubUnreachableError(f"Cannot download '{hub_id}' from the Hugging Face hub: {exc}",
                                  code="hub_download_failed", model=hub_id, detail=str(exc)) from exc
    return folder


_FLIGHTS: dict[str, _Flight] = {}  # hub id -> the download under way
_FAILED: dict[str, tuple[float, BaseException]] = {}  # hub id -> (time.monotonic() of the failure, the error)
_FLIGHT_LOCK = threading.Lock()


class _Flight:
    """One download of a hub id in a daemon thread; callers wait on ``done`` and read ``folder`` or ``error``."""

    def __init__(self, hub_id: str) -> None:
        self.hub_id, self.done = hub_id, threading.Event()
        self.folder: Path | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        """Download, record the outcome (a failure remembered in ``_FAILED``), and wake the waiters."""
        try:
            self.folder = _download(self.hub_id)
        except BaseException as exc:  # noqa: BLE001 - handed to every waiter
            self.error = exc
        with _FLIGHT_LOCK:
            _FLIGHTS.pop(self.hub_id, None)
            if self.error is None:
                _FAILED.pop(self.hub_id, None)
            else:
                _FAILED[self.hub_id] = (time.monotonic(), self.error)
        self.done.set()


def _seconds(variable: str, default: float) -> float:
    """A positive number of seconds from the environment, else ``default``."""
    try:
        value = float(os.environ.get(variable, "") or default)
    except ValueError:
        return default
    return value if value > 0 else default


def download(hub_id: str) -> Path:
    """The local folder of a hub repository's config, tokenizer and safetensors files (never pickle weights):
    one download per hub id across the process's sessions, at most ``DIKKAT_HUB_DEADLINE_S`` seconds of waiting,
    a failure remembered ``DIKKAT_HUB_RETRY_S`` seconds.

    Raises:
        HubUnreachableError: as the download (``hub_missing``, ``hub_unreachable``, ``hub_download_failed``,
            ``hub_too_large``); ``hub_failed_recently`` while a failure is remembered (``model``, ``seconds`` since,
            ``retry`` seconds, ``reason``); ``hub_deadline`` when the deadline passes (the download goes on and
            serves a later request; ``model``, ``seconds``).
    """
    retry, deadline = _seconds("DIKKAT_HUB_RETRY_S", 300.0), _seconds("DIKKAT_HUB_DEADLINE_S", 300.0)
    with _FLIGHT_LOCK:
        failed = _FAILED.get(hub_id)
        if failed is not None and time.monotonic() - failed[0] < retry:
            since, error = time.monotonic() - failed[0], failed[1]
            raise HubUnreachableError(
                f"Loading '{hub_id}' from the Hugging Face hub failed {since:.0f} s ago ({error}); it is tried "
                f"again after {retry:.0f} s.", code="hub_failed_recently", model=hub_id, seconds=since, retry=retry,
                reason=getattr(error, "code", None) or type(error).__name__) from error
        flight = _FLIGHTS.get(hub_id)
        if flight is None:
            flight = _FLIGHTS[hub_id] = _Flight(hub_id)
            threading.Thread(target=flight.run, name=f"hub-{hub_id}", daemon=True).start()
    if not flight.done.wait(deadline):
        raise HubUnreachableError(
            f"Loading '{hub_id}' from the Hugging Face hub took more than {deadline:.0f} s; try again later or pick "
            "another model.", code="hub_deadline", model=hub_id, seconds=deadline)
    if flight.error is not None:
        raise flight.error
    assert flight.folder is not None  # done without an error: the download's folder
    return flight.folder
