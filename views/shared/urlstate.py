"""Every page's state in the link: widgets bound to the URL query string (:class:`UrlState`), junk in a link
falling back to defaults."""

from __future__ import annotations


import streamlit as st


from .. import hosting


def url_init(key: str, options=None, kind: type = str, bounds: tuple[int, int] | None = None) -> None:
    """Before the widget ``key`` is created: take its value from the URL query string, unless Session State
    already has one.

    The page state (model, sentence, view, layer, head, options) lives in the URL so that a shared link
    opens the same view; :func:`url_sync` writes it back on every run. (Streamlit's own
    ``bind="query-params"`` is not used: it writes the translated label of an option widget into the URL,
    so a link would depend on the interface language.) Reading whenever Session State has no value (not
    only on the first run) also restores a value lost when the first run is interrupted by a click.
    An unknown value is ignored.

    Args:
        key: widget key and query parameter name.
        options: the widget's options (the value must be one of them, compared as ``str``).
        kind: ``bool`` (``1``/``true``), ``int`` or ``str`` when there are no options; ``list`` for a
            multiselect: comma-separated options (unknown ones and repeats dropped).
        bounds: ``int`` only: the value must lie in ``lo..hi`` (a number input refuses anything else).
    """
    raw = st.query_params.get(key)
    if raw is None:  # not in the link: the value this session last showed (another page was opened meanwhile)
        raw = _kept().get(key)
    if raw is None or key in st.session_state:
        return
    if kind is list:
        by_text = {str(option): option for option in (options or ())}
        picked = [by_text[part] for part in dict.fromkeys(raw.split(",")) if part in by_text]
        if picked or not raw:  # "" is an emptied choice (url_sync writes it so); junk alone is ignored
            st.session_state[key] = picked
        return
    if options is not None:
        for option in options:
            if str(option) == raw:
                st.session_state[key] = option
                return
        try:  # a number written another way ("5" for the option 5.0)
            number = float(raw)
        except ValueError:
            return
        for option in options:
            if isinstance(option, (int, float)) and not isinstance(option, bool) and option == number:
                st.session_state[key] = option
                return
    elif kind is bool:
        st.session_state[key] = raw.lower() in ("1", "true", "yes", "on")
    elif kind is int:
        try:
            value = int(raw)
        except ValueError:
            return
        if bounds is None or bounds[0] <= value <= bounds[1]:
            st.session_state[key] = value
    else:
        st.session_state[key] = raw


_KEPT = "_url_kept"


def _kept() -> dict[str, str]:
    """The URL's widget values as :func:`url_sync` last wrote them, kept in Session State under a key no widget
    has: Streamlit forgets a widget's value when a run does not draw it (another page was opened), and opening a
    page from the menu starts with an empty query string. :func:`url_init` reads it after the URL, so an
    Explore → Head pruning → Explore demo comes back to the same layer, head and options (issue 33)."""
    return st.session_state.setdefault(_KEPT, {})


def url_drop(key: str) -> None:
    """Remove ``key`` from the URL (its widget is not shown in this run, so its value is gone)."""
    _kept().pop(key, None)
    if key in st.query_params:
        del st.query_params[key]


def url_sync(key: str, default=None) -> None:
    """Write the widget ``key``'s current value into the URL query string (removed when it is ``default``;
    a list as comma-separated values)."""
    value = st.session_state.get(key)
    if value is None or value == default or (isinstance(value, str) and not value.strip() and not default):
        url_drop(key)
        return
    if isinstance(value, (list, tuple)):
        text = ",".join(map(str, value))
    else:
        text = ("1" if value else "0") if isinstance(value, bool) else str(value)
    _kept()[key] = text
    if st.query_params.get(key) != text:
        st.query_params[key] = text


class UrlState:
    """A page's widgets kept in the URL (issue 13: a link reopens the page as it was shown).

    Before each widget, :meth:`bind` takes its value from the URL (:func:`url_init`; a text is cut to the
    classroom's limit) or else sets ``default``; the page's end calls :meth:`finish`, which writes every
    widget bound in this run back to the URL (:func:`url_sync`) and drops the page's other keys (their widgets
    are not on screen, so their values are gone). A widget bound here takes its default from Session State,
    not from a ``value=`` argument (Streamlit warns when both set it).

    Args:
        keys: every widget key the page may bind (its query parameters).
    """

    def __init__(self, keys: tuple[str, ...]):
        self.keys = tuple(keys)
        self._slot = "_urlstate_" + ",".join(self.keys)

    @property
    def bound(self) -> dict:
        """``key -> default`` of the widgets bound in this run of this session (kept in Session State: a page
        module imported once, e.g. the Masks page's sections, serves every session and run)."""
        return st.session_state.setdefault(self._slot, {})

    def bind(self, key: str, default=None, options=None, kind: type = str,
             bounds: tuple[int, int] | None = None) -> None:
        """Before the widget ``key``: its value from the URL, else ``default`` (arguments as :func:`url_init`)."""
        url_init(key, options, kind, bounds=bounds)
        if kind is str and options is None and isinstance(st.session_state.get(key), str):
            st.session_state[key] = hosting.clip(st.session_state[key])
        if key not in st.session_state and default is not None:
            st.session_state[key] = default
        self.bound[key] = default

    def finish(self) -> None:
        """Write the bound widgets' values to the URL; drop the page's keys not bound in this run."""
        bound = self.bound
        for key in self.keys:
            if key in bound:
                url_sync(key, bound[key])
            else:
                url_drop(key)
        del st.session_state[self._slot]  # the next run binds afresh


def clamp(key: str, n: int, default: int = 0) -> None:
    """Keep a remembered widget value (a layer, head, query, window start) inside ``range(n)``: the model
    or the text changed, or a link came from a bigger model. Digits written as text become the number; a value
    that is not a whole number or is out of range becomes ``default`` (kept inside the range); a missing one is
    left to the widget's default."""
    if key not in st.session_state:
        return
    value = st.session_state[key]
    if isinstance(value, str) and value.strip().isdecimal():  # a value a link or a test wrote as text
        value = st.session_state[key] = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < n:
        st.session_state[key] = min(max(default, 0), max(n - 1, 0))


def open_with(values: dict) -> None:
    """From a widget's callback, before another page is opened (``st.switch_page``): set the Session State values a
    link to that page would set, e.g. Explore's text, layer, head and view from the Head atlas. Each is set before
    the page draws its widget, so the widget starts from it (a callback runs before the script); the value kept for
    the link (:func:`_kept`) is dropped, so the page writes it afresh."""
    kept = _kept()
    for key, value in values.items():
        kept.pop(key, None)
        st.session_state[key] = value
