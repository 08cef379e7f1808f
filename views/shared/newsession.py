"""Each run's ``new_session`` message with the theme read once (issue 48).

Streamlit 1.67 starts every run, a fragment's too, with a ``new_session`` message that carries the app's theme: six
sections of ``[theme]`` options, each read from the config and written into the message option by option
(``app_session._populate_theme_msg``). In a class of thirty that was 3 % of the server's time under Python's lock
(py-spy, ``bench/live_class.py``). The theme is read from ``.streamlit/config.toml`` when the server starts and no
script can change it (``st.set_option`` sets ``client.*`` options only), so :func:`install` makes each section once
per process and merges the made section into every later message: the same bytes, without the reading.
"""

from __future__ import annotations

import functools


def made_once(populate):
    """``populate(msg, section)`` (Streamlit's ``_populate_theme_msg``) run once per message type and section: later
    calls merge the bytes it made. A section with no option set stays unset, as ``populate`` leaves it."""

    @functools.cache
    def made(kind: type, section: str) -> bytes:
        msg = kind()
        populate(msg, section)
        return msg.SerializeToString()

    def populate_once(msg, section: str = "theme") -> None:
        data = made(type(msg), section)
        if data:
            msg.MergeFromString(data)

    populate_once._made_once = True
    populate_once.original = populate
    return populate_once


def install() -> bool:
    """Wrap ``app_session._populate_theme_msg`` once per process (:func:`made_once`). Returns whether it is wrapped
    (False: another Streamlit, whose own function is kept)."""
    try:
        from streamlit.runtime import app_session
    except ImportError:  # pragma: no cover - another Streamlit
        return False
    original = getattr(app_session, "_populate_theme_msg", None)
    if original is None:
        return False
    if not getattr(original, "_made_once", False):
        app_session._populate_theme_msg = made_once(original)
    return True
