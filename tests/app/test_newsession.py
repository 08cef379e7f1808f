"""Each run's new_session message with the theme read once (views/shared/newsession.py, issue 48): the bytes are
Streamlit's own, for a theme with options set in several sections and for sections left unset."""

from __future__ import annotations

from streamlit import config
from streamlit.proto.NewSession_pb2 import CustomThemeConfig, NewSession
from streamlit.runtime import app_session

from views.shared import newsession

SECTIONS = ("theme", "theme.light", "theme.dark", "theme.sidebar", "theme.light.sidebar", "theme.dark.sidebar")


def _theme(populate) -> bytes:
    """The six sections populated where Streamlit populates them, twice; the message's bytes."""
    msg = NewSession()
    theme = msg.custom_theme
    parts = {"theme": theme, "theme.light": theme.light, "theme.dark": theme.dark, "theme.sidebar": theme.sidebar,
             "theme.light.sidebar": theme.light.sidebar, "theme.dark.sidebar": theme.dark.sidebar}
    for section in SECTIONS:
        populate(parts[section], section)
        populate(parts[section], section)  # twice, as two runs' messages would: the same again
    return msg.SerializeToString()


def test_the_theme_made_once_is_the_theme_streamlit_makes():
    original = app_session._populate_theme_msg
    original = getattr(original, "original", original)  # app.py installed it in this process: Streamlit's own
    assert not getattr(original, "_made_once", False)
    empty = _theme(newsession.made_once(original))
    assert empty == _theme(original) and not NewSession.FromString(empty).HasField("custom_theme")
    options = {"theme.primaryColor": "#d62728", "theme.sidebar.backgroundColor": "#f0f0f0",
               "theme.dark.textColor": "#eeeeee", "theme.baseRadius": "small"}
    before = {name: config.get_option(name) for name in options}
    try:
        for name, value in options.items():
            config.set_option(name, value)
        theirs, ours = _theme(original), _theme(newsession.made_once(original))
    finally:
        for name, value in before.items():
            config.set_option(name, value)
    assert all(config.get_option(name) == value for name, value in before.items())
    assert ours == theirs
    made = NewSession.FromString(ours).custom_theme
    assert made.primary_color == "#d62728" and made.sidebar.background_color == "#f0f0f0"
    assert made.dark.text_color == "#eeeeee" and not made.HasField("light")
    assert isinstance(made, CustomThemeConfig)


def test_a_theme_of_default_values_only_is_still_sent_as_a_theme():
    """``base = "light"`` alone is the enum's default: the section has no bytes, but Streamlit's message holds it
    (present, empty), which the browser reads as a theme to apply. The section made once is present too."""
    original = app_session._populate_theme_msg
    original = getattr(original, "original", original)
    before = config.get_option("theme.base")
    try:
        config.set_option("theme.base", "light")
        theirs, ours = _theme(original), _theme(newsession.made_once(original))
    finally:
        config.set_option("theme.base", before)
    assert ours == theirs and NewSession.FromString(ours).HasField("custom_theme")
    assert not NewSession.FromString(ours).custom_theme.HasField("light")
