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
from typing import Any


# where Streamlit puts each section in the ``new_session`` message (``AppSession._create_new_session_message``)
PLACES = {"theme": ("custom_theme",), "theme.light": ("custom_theme", "light"),
          "theme.dark": ("custom_theme", "dark"), "theme.sidebar": ("custom_theme", "sidebar"),
          "theme.light.sidebar": ("custom_theme", "light", "sidebar"),
          "theme.dark.sidebar": ("custom_theme", "dark", "sidebar")}


def made_once(populate):
    """``populate(msg, section)`` (Streamlit's ``_populate_theme_msg``) run once per section, in a message of its own
    at the section's place (:data:`PLACES`): later calls merge the bytes it made, and mark the section present when
    Streamlit's own call did (a section holding only default values, such as ``base = "light"``, has no bytes but is
    present: the browser reads it as a theme). A section of another place is populated as Streamlit does."""
    from streamlit.proto.NewSession_pb2 import NewSession

    @functools.cache
    def made(section: str) -> tuple[bytes, bool]:
        parent: Any = NewSession()
        *above, last = PLACES[section]
        for name in above:
            parent = getattr(parent, name)
        msg = getattr(parent, last)
        populate(msg, section)
        return msg.SerializeToString(), bool(parent.HasField(last))

    def populate_once(msg, section: str = "theme") -> None:
        if section not in PLACES:
            populate(msg, section)
            return
        data, present = made(section)
        if present:
            msg.SetInParent()
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
