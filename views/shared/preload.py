"""Plotly's code loaded while the student reads, not when they click (issue 27).

Streamlit loads the code of its plotly chart element (``static/js/PlotlyChart.<hash>.js``: plotly.js, 4.7 MB) the
first time a page of the browser tab draws a plotly chart; on Explore, whose first view (the head view) draws none,
that is the click on "Model view": measured in Chromium on this 2-core machine, 250 ms to fetch it and a 600-740 ms
task to evaluate it, 1.8-2.2 s for that first click against 0.6-0.9 s for the next ones. :func:`plotly_preload`
returns a script for a page's own iframe (the head view's: an ``st.iframe`` document, same origin as the app, whose
sandbox allows scripts) that imports that module into the app's window once per tab, 1.5 s after the page has drawn
(while the student reads; sooner, its evaluation fell inside the page's own settling: "open app" p95 2.06 s against
1.72 s) when the browser is idle. The timer lives in the app's window: one made in the iframe was never called when
the iframe was replaced before it fired (a sentence typed within 1.5 s of opening), and the first "Model view" paid
plotly's evaluation again (1.8 s against 0.63 s). The browser's module map keys it by its address, so Streamlit's
own ``import()`` of the same file later finds it evaluated. Nothing is fetched from anywhere but the app's own server.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import streamlit

STATIC_JS = Path(streamlit.__file__).resolve().parent / "static" / "static" / "js"


@functools.lru_cache(maxsize=1)
def plotly_chunk() -> str | None:
    """The file name of Streamlit's plotly chart module (``PlotlyChart.<hash>.js``), or None when this Streamlit has
    none by that name (then nothing is preloaded)."""
    found = sorted(STATIC_JS.glob("PlotlyChart.*.js"))
    return found[0].name if len(found) == 1 else None


def plotly_preload() -> str:
    """A ``<script>`` for an iframe document of the app (``st.iframe``) that imports :func:`plotly_chunk` into the
    app's window when it is idle (once per browser tab); an empty string when there is no chunk to name. The module's
    address is the app's own main script's folder (``.../static/js/``) and the chunk's name."""
    chunk = plotly_chunk()
    if chunk is None:
        return ""
    return """<script>
(function () {
  try {
    var w = window.parent;
    if (!w || w === window || w.__dikkatPlotlyPreload) return;
    w.__dikkatPlotlyPreload = true;
    var main = Array.prototype.map.call(w.document.querySelectorAll("script[src]"), function (s) { return s.src; })
      .filter(function (src) { return /\\/static\\/js\\/index\\.[^/]*\\.js(\\?|$)/.test(src); })[0];
    if (!main) return;
    var url = main.replace(/[^/]*$/, "") + CHUNK;
    // after the page has settled and the student reads (1.5 s), when the browser is idle. The timer and its callback
    // are made in the app's window (its eval), not in this frame: a callback of a frame that is gone by then (the
    // head view is drawn anew when the student types a sentence or changes the layer) is never called
    w.eval("setTimeout(function () { var go = function () { import(" + JSON.stringify(url) +
           ").catch(function () {}); };" +
           " if (window.requestIdleCallback) { requestIdleCallback(go, {timeout: 4000}); } else { go(); } }, 1500);");
  } catch (e) { /* another origin or no parent: the chart loads its code when first drawn, as without this */ }
})();
</script>""".replace("CHUNK", json.dumps(chunk))
