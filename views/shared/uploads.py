"""Uploads bounded per session (issue 44 point 5): the size of one file is Streamlit's ``maxUploadSize`` (10 MB in
classroom mode); here at most ``DIKKAT_UPLOADS_PER_SESSION`` files (default 20) and ``DIKKAT_UPLOAD_SESSION_MIB``
MiB in all (default 50) per browser session. A file past either limit is refused with a message in the interface
language and removed from the server's memory at once; the others live as long as the session (Streamlit's
uploaded-file manager drops a session's files when it ends).

Imported directly (``from views.shared import uploads``), not through ``views.shared``."""

from __future__ import annotations

import os

import streamlit as st

from viz import numbers as nb

from .strings import lang, t

SEEN_KEY = "_uploads_seen"  # file_id -> bytes kept (None: refused), in Session State


def _limit(variable: str, default: int) -> int:
    """A whole number ≥ 1 from the environment, else ``default``."""
    raw = os.environ.get(variable, "").strip()
    return int(raw) if raw.isdigit() and int(raw) >= 1 else default


def limits() -> tuple[int, int]:
    """``(files, bytes)`` one session may upload."""
    return _limit("DIKKAT_UPLOADS_PER_SESSION", 20), _limit("DIKKAT_UPLOAD_SESSION_MIB", 50) * 2 ** 20


def kept() -> tuple[int, int]:
    """``(files, bytes)`` this session has uploaded and kept."""
    sizes = [v for v in st.session_state.get(SEEN_KEY, {}).values() if v is not None]
    return len(sizes), sum(sizes)


def _drop(file) -> None:
    """Remove a refused file from the server's memory now (not at the session's end); nothing when no runtime."""
    try:
        from streamlit import runtime
        from streamlit.runtime.memory_uploaded_file_manager import MemoryUploadedFileManager
        from streamlit.runtime.scriptrunner import get_script_run_ctx
        ctx = get_script_run_ctx()
        if ctx is not None and runtime.exists():
            manager = runtime.get_instance().uploaded_file_mgr
            if isinstance(manager, MemoryUploadedFileManager):  # Streamlit's own: the one that can drop one file
                manager.remove_file(ctx.session_id, file.file_id)
    except Exception:  # noqa: BLE001 - best effort: the session's end removes it anyway
        pass


def admit(file) -> bool:
    """Whether an uploaded file may be read: within this session's count and bytes; else the reason is shown
    (``upload_too_many`` / ``upload_too_much``, EN+TR) and the file dropped. A file already admitted stays admitted.

    Args:
        file: Streamlit's ``UploadedFile`` (``file_id``, ``size`` in bytes).
    """
    seen = st.session_state.setdefault(SEEN_KEY, {})
    if file.file_id in seen:
        if seen[file.file_id] is None:
            _refuse(file, *kept())
        return seen[file.file_id] is not None
    count, total = kept()
    if count >= limits()[0] or total + int(file.size) > limits()[1]:
        seen[file.file_id] = None
        _refuse(file, count, total)
        return False
    seen[file.file_id] = int(file.size)
    return True


def _refuse(file, count: int, total: int) -> None:
    """Say why ``file`` was refused and drop it."""
    files, bytes_ = limits()
    if count >= files:
        st.error(t("upload_too_many", count=count, limit=files))
    else:
        st.error(t("upload_too_much", limit=nb.human_bytes(bytes_, lang())))
    _drop(file)
