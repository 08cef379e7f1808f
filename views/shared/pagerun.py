"""A page run that keeps nothing heavy of its own once it ends (issue 44: memory bounded by construction).

Streamlit runs a page file in a fresh module namespace; every function the page defines refers back to that namespace
(``function.__globals__``), so the namespace is a reference cycle. With the server's per-run garbage collection off
(``.streamlit/config.toml``: a full collection walked torch's heap under the GIL), the namespace of every run, with
every analysis, flow, figure and table the page had in its variables, stayed alive until Python's next full
collection, which the few large objects of a run hardly hasten: on Information flow about 65 MiB per distinct text
outside :data:`views.shared.cache.CACHE`, the one place that counts and bounds what a page keeps.

:func:`run_page` runs the page as ``st.Page.run`` does and, however the run ends (``st.stop``, a rerun, an exception),
drops from its namespace every value that holds :data:`HEAVY_BYTES` or more (:func:`forget_run`). What stays are the
page's definitions and its small values (labels, option names, a row of weights), which the functions it handed to
Streamlit may still read after the run: a ``format_func`` is called again when a value is set from outside the page
(a link, the live class), a callback at the start of the next run. What a page keeps from one run to the next lives in
the shared cache (bounded by bytes) or in ``st.session_state`` (per session), nowhere else.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import NoReturn

from streamlit.runtime.scriptrunner import get_script_run_ctx

from models import budget

from .cache import CACHE

HEAVY_BYTES = 64 << 10  # a value of the namespace that holds this much is dropped when the run ends
RUNS = {"own": 0, "fallback": 0}  # pages run by run_page itself, and by page.run() (another Streamlit)


def holds(value, limit: int = HEAVY_BYTES) -> bool:
    """True when ``value`` and what it reaches hold at least ``limit`` bytes (:func:`models.budget.holds_at_least`;
    a function by its closure and defaults, not its module). Streamlit's own objects (a column or container of this
    run: their tree is the session's, not the page's) and the model's parts (the model cache counts them) are not
    followed, nor is a value of the shared cache (its bytes are the ones the cache counted)."""
    return budget.holds_at_least(value, limit, skip_modules=("streamlit.", "models.loading"), counted=CACHE.counted)


def forget_run(namespace: dict) -> list[str]:
    """Drop from a page run's ``namespace`` (its module ``__dict__``) every name whose value :func:`holds`
    :data:`HEAVY_BYTES` or more; the names dropped, in order."""
    dropped = [name for name, value in list(namespace.items()) if not name.startswith("__") and holds(value)]
    for name in dropped:
        namespace.pop(name, None)
    return dropped


def supported(page) -> bool:
    """True when :func:`run_page` can run ``page`` itself (a page file of this Streamlit: its ``_page`` path, script
    hash and once-only flag as in 1.67); else it falls back to ``page.run()``, whose namespace only the garbage
    collector frees."""
    return (isinstance(getattr(page, "_page", None), Path) and not getattr(page, "is_external", True)
            and isinstance(getattr(page, "_can_be_called", None), bool) and hasattr(type(page), "_script_hash"))


def run_page(page) -> None:
    """Run ``page`` (returned by ``st.navigation``) as ``page.run()`` does, then drop what holds memory from its
    namespace (:func:`forget_run`), also when the run stops early, reruns or fails. A page that ends early with
    :func:`stop` ends here, and the app's script goes on (a live class's end of the run)."""
    ctx = get_script_run_ctx()
    try:
        if ctx is None or not supported(page) or not page._can_be_called:
            RUNS["fallback"] += 1
            page.run()
            return
        RUNS["own"] += 1
        page._can_be_called = False
        with ctx.run_with_active_hash(page._script_hash):
            code = ctx.pages_manager.get_page_script_byte_code(str(page._page))
            module = types.ModuleType("__main__")
            module.__dict__["__file__"] = str(page._page)
            try:
                exec(code, module.__dict__)  # noqa: S102  (what st.Page.run does with a page file)
            finally:
                forget_run(module.__dict__)
    except PageStop:  # the page ended early (:func:`stop`): the app's script goes on
        return


class PageStop(Exception):  # noqa: N818  (a page's end, not an error)
    """A page's run ended early by :func:`stop`; :func:`run_page` ends the page there."""


def stop() -> NoReturn:
    """End the page's run here, keeping what it drew (for pages, in place of ``st.stop``). After ``st.stop``
    Streamlit's stop request stays in force: any later read of the session's state raises its StopException again,
    so the end of a live class's run (the teacher's page sent to the room, the run's number and its marker,
    :mod:`views.live_sections.redraw`) could not be done; a page that stopped was never sent to the class, and a
    student's page that stopped was drawn again for want of its marker. This ends the page alone: the app's script
    goes on after it as after a page that returned.

    Raises:
        PageStop: always (caught by :func:`run_page`, which runs every page).
    """
    raise PageStop
