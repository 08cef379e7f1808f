"""Every page of the app and each parameter it keeps in its link, declared once (issue 49).

A page's parameter (a widget's value that a shared link reopens: a layer, a head, a mask, an option) is one
:class:`Param`: its key (the widget's Session State key), its query-parameter name, its kind, its options or bounds
and its default. Everything else is derived from these declarations (:mod:`pagestate.declared`):

* ``app.py``'s ``st.Page`` list (:data:`PAGES`: file, title, icon);
* reading and writing the link on every page (``views/shared/urlstate.py``: ``UrlState(page)`` binds only
  declared parameters and takes their kind, options, bounds and default from here; :func:`from_link` turns a
  link's text into the value a widget holds, :func:`to_link` back);
* the heads switched off, the one parameter that is a set of heads (``off``: :func:`heads_to_link`,
  :func:`heads_from_link`);
* a lesson step's check (``live/lessons.py``: a step names a declared page, its parameters are that page's and
  their values are ones the page would take) and the TOML value a saved session writes (:func:`typed`);
* what a student following a live class resets when the teacher's page changes (:func:`keys_of`) and what is a
  viewer's own, never broadcast (:data:`OWN`).

Layering: this package sits below ``views/`` and ``live/``; it imports ``models`` (the catalog, for options that
depend on a model) and nothing of Streamlit, so a lesson file is checked without a browser.

A new page parameter is one line in :mod:`pagestate.declared` plus its widget on the page (README: "Where a page's
state lives").
"""

from __future__ import annotations

from .params import (
    MEAN, Context, Page, Param, from_link, heads_from_link, heads_to_link, link_text, model_stacks, typed,
)
from .declared import APP, FOLLOWED, OWN, PAGES, SIDEBAR, TEXT_PAGES

__all__ = ["APP", "FOLLOWED", "MEAN", "OWN", "PAGES", "SIDEBAR", "TEXT_PAGES", "Context", "Page", "Param",
           "from_link", "heads_from_link", "heads_to_link", "keys_of", "link_text", "model_stacks", "page", "param",
           "typed"]

_BY_NAME = {p.name: p for p in PAGES}


def page(name: str) -> Page:
    """The declared page ``name`` (``"explore"``, ``"flow"``, ...; ``"app"`` for the sidebar's parameters).

    Raises:
        KeyError: no such page.
    """
    return APP if name == "app" else _BY_NAME[name]


def param(name: str, key: str) -> Param:
    """The parameter ``key`` of page ``name`` (the sidebar's ``model_key`` and ``text`` belong to ``"app"``).

    Raises:
        KeyError: the page does not declare ``key`` (a widget bound without a declaration is a bug).
    """
    return page(name).by_key[key]


def keys_of(name: str) -> frozenset[str]:
    """What a page's link may hold: its own parameters and the sidebar's shared ones (:data:`SIDEBAR`)."""
    return frozenset(page(name).by_key) | frozenset(SIDEBAR)
