"""Streamlit's file-uploader error messages in Turkish (issue 50 point 6).

Streamlit 1.67 writes an uploaded file's error in English under the file, whatever the page's language, and has no
locale for it: "application/pdf files are not allowed.", "File must be 10.0MB or smaller." (the classroom's limit),
and four more. Its drop zone's words are replaced by CSS (:func:`views.shared.scale.uploader_style`); an error
carries the file's type or the limit, which CSS cannot rewrite. On the Turkish interface, :func:`words` draws a
``st.components.v2`` component with nothing to show whose script watches the page's uploaders and the error's
tooltip over a file's chip (:data:`WHERE`) and rewrites such a message in Turkish: each ``uploader_*`` string's
English is the message Streamlit writes (``{size}`` and ``{type}`` the parts it fills in), its Turkish what is
written instead, with the same parts. Only those exact sentences, there, are touched.
"""

from __future__ import annotations

import streamlit as st
import streamlit.components.v2 as components

from .strings import _strings, lang

KEYS = ("uploader_too_large", "uploader_type", "uploader_type_any", "uploader_too_small", "uploader_one_file",
        "uploader_unexpected")

# where Streamlit writes them: under the file in the uploader, and in the tooltip shown over the file's chip (drawn at
# the end of the page, outside the uploader)
WHERE = "[data-testid=stFileUploader], [data-testid=stTooltipErrorContent]"

_JS = r"""
export default function(component) {
  const { data } = component;
  const w = window.__dikkatUploaderWords = window.__dikkatUploaderWords || { rewritten: 0 };
  const escape = (s) => s.replace(/[.*+?^$()|[\]\\]/g, "\\$&");
  w.rules = data.pairs.map(([en, tr]) => {
    const names = [...en.matchAll(/\{(\w+)\}/g)].map((m) => m[1]);
    const pattern = new RegExp("^" + escape(en).replace(/\{\w+\}/g, "(.+)") + "$");
    return { pattern, names, tr };
  });
  const rewrite = () => {
    for (const box of document.querySelectorAll(data.where)) {
      const walker = document.createTreeWalker(box, NodeFilter.SHOW_TEXT);
      for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        const text = node.nodeValue.trim();
        for (const rule of w.rules) {
          const m = text.match(rule.pattern);
          if (!m) continue;
          node.nodeValue = rule.names.reduce((s, name, i) => s.replace("{" + name + "}", m[i + 1]), rule.tr);
          w.rewritten += 1;
          break;
        }
      }
    }
  };
  if (!w.observer) {
    w.observer = new MutationObserver(rewrite);
    w.observer.observe(document.body, { subtree: true, childList: true, characterData: true });
  }
  rewrite();
  return () => { if (w.observer) { w.observer.disconnect(); w.observer = null; } };
}
"""
_component = components.component("dikkat_uploader_words", js=_JS)


def pairs() -> list[tuple[str, str]]:
    """``(English, Turkish)`` of each error message (:data:`KEYS` in ``assets/i18n/common.json``)."""
    strings = _strings()
    return [(strings[key]["en"], strings[key]["tr"]) for key in KEYS]


def words() -> None:
    """On the Turkish interface, draw the (invisible) component that writes the uploaders' errors in Turkish; on the
    English one, nothing (a component drawn before is taken away, and its watcher stops)."""
    if lang() == "tr":
        _component(key="_uploader_words", data={"pairs": pairs(), "where": WHERE})
    else:
        st.empty()
