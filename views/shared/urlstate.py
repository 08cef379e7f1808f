"""Every page's state in the link, one mechanism for all (issue 49): a page's :class:`UrlState` binds the widgets
its declaration lists (:mod:`pagestate`), taking each one's kind, options, bounds and default from there; junk in a
link falls back to defaults."""

from __future__ import annotations


import streamlit as st

import pagestate

from .. import hosting

_KEPT = "_url_kept"


def _kept() -> dict[str, str]:
    """The URL's widget values as :meth:`UrlState.sync` last wrote them, kept in Session State under a key no widget
    has: Streamlit forgets a widget's value when a run does not draw it (another page was opened), and opening a
    page from the menu starts with an empty query string. :meth:`UrlState.bind` reads it after the URL, so an
    Explore → Head pruning → Explore demo comes back to the same layer, head and options (issue 33)."""
    return st.session_state.setdefault(_KEPT, {})


def url_drop(key: str) -> None:
    """Remove ``key`` from the URL (its widget is not shown in this run, so its value is gone)."""
    _kept().pop(key, None)
    if key in st.query_params:
        del st.query_params[key]


class UrlState:
    """A page's widgets kept in the URL (issue 13: a link reopens the page as it was shown), as the page's
    declaration says (:func:`pagestate.page`: each parameter's key, link name, kind, options, bounds, default).

    Before each widget, :meth:`bind` takes its value from the URL (a value this session showed before when the link
    has none; a text cut to the classroom's limit), else the default; :meth:`sync` writes one widget's value back at
    once, :meth:`finish` (the page's end) every widget bound in this run, and drops the page's other parameters
    (their widgets are not on screen, so their values are gone). Reading whenever Session State has no value (not
    only on the first run) also restores a value lost when the first run is interrupted by a click. A widget bound
    here takes its default from Session State, not from a ``value=`` argument (Streamlit warns when both set it).
    Streamlit's own ``bind="query-params"`` is not used: it writes the translated label of an option widget into the
    URL, so a link would depend on the interface language.

    Args:
        page: the declared page (``"flow"``; ``"app"`` for the sidebar).
    """

    def __init__(self, page: str):
        self.page = pagestate.page(page)
        self.keys = self.page.keys
        self._slot = "_urlstate_" + page

    @property
    def bound(self) -> dict:
        """``key -> default`` of the widgets bound in this run of this session (kept in Session State: a page
        module imported once, e.g. the Masks page's sections, serves every session and run)."""
        return st.session_state.setdefault(self._slot, {})

    def param(self, key: str) -> pagestate.Param:
        """The declaration of ``key``. Raises KeyError for a key the page does not declare."""
        return self.page.by_key[key]

    def options(self, key: str) -> tuple:
        """The declared options of ``key`` (fixed ones only)."""
        return self.param(key).static_options() or ()

    def bounds(self, key: str) -> tuple[int, int]:
        """The declared ``(lowest, highest)`` of a number ``key`` (fixed ones only): a number input's range."""
        bounds = self.param(key).static_bounds()
        assert bounds is not None, f"{key}: no fixed bounds"  # a page asks only for the bounds it declared
        return bounds

    def bind(self, key: str, default=None, options=None, bounds: tuple[int, int] | None = None) -> None:
        """Before the widget ``key``: its value from the URL, else ``default`` (the declared one unless given);
        ``options`` and ``bounds`` are the page's where the declaration leaves them to it (a model's layers, a
        text's length)."""
        spec = self.param(key)
        default = spec.default if default is None else default
        self.read(key, options, bounds)
        if key not in st.session_state and default is not None:
            st.session_state[key] = default
        self.bound[key] = default

    def read(self, key: str, options=None, bounds: tuple[int, int] | None = None) -> None:
        """Before the widget ``key``: its value from the link (or the value this session showed last), unless
        Session State has one; a text is cut to the classroom's limit. An unknown value is ignored."""
        spec = self.param(key)
        if key not in st.session_state:
            raw = st.query_params.get(spec.name)
            if raw is None:  # not in the link: the value this session last showed (another page was opened)
                raw = _kept().get(spec.name)
            value = None if raw is None else pagestate.from_link(spec, raw, options, bounds)
            if value is not None:
                st.session_state[key] = value
        if spec.kind == "text" and isinstance(st.session_state.get(key), str):
            st.session_state[key] = hosting.clip(st.session_state[key])

    def sync(self, key: str, default=None) -> None:
        """Write the widget ``key``'s current value into the URL now (removed when it is the default, the declared
        one unless given; a list as comma-separated values)."""
        spec = self.param(key)
        default = spec.default if default is None else default
        value = st.session_state.get(key)
        if value is None or value == default or (isinstance(value, str) and not value.strip() and not default):
            url_drop(spec.name)
            return
        text = pagestate.link_text(value)
        _kept()[spec.name] = text
        if st.query_params.get(spec.name) != text:
            st.query_params[spec.name] = text

    def linked(self, key: str) -> str | None:
        """The text the link itself holds for ``key`` (not a value kept from an earlier visit), or None."""
        return st.query_params.get(self.param(key).name)

    def drop(self, key: str) -> None:
        """The widget ``key`` is not shown in this run: its parameter leaves the link."""
        url_drop(self.param(key).name)

    def sync_bound(self) -> None:
        """Write the values of the widgets bound so far in this run to the URL now (the page's other parameters are
        left as they are: a page that stops early, or whose other parameters have their own writer)."""
        bound = self.bound
        for key, default in list(bound.items()):
            self.sync(key, default)
            del bound[key]

    def finish(self) -> None:
        """Write the bound widgets' values to the URL; drop the page's keys not bound in this run."""
        bound = self.bound
        for key in self.keys:
            if key in bound:
                self.sync(key, bound[key])
            else:
                self.drop(key)
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
