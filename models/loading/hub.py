"""Hugging Face hub ids: recognising one, and downloading its safetensors (or GGUF) files with timeouts and a
size cap. Only a hub id the user asked for ever touches the network."""

from __future__ import annotations

import os
from pathlib import Path

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

    hub_constants.HF_HUB_DOWNLOAD_TIMEOUT = hub_timeout()
    factory = _http._GLOBAL_CLIENT_FACTORY
    if factory is _http.default_client_factory or (factory is _timed_client and _timed_client.seconds != hub_timeout()):
        _timed_client.seconds = hub_timeout()
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


def download(hub_id: str) -> Path:
    """Fetch a hub repository's config, tokenizer and safetensors files (never pickle weights)."""
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
