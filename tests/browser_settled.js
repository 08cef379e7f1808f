// Whether the app's page has settled after its `since`-th finished script run: run by tests/browser/test_browser.py
// (Playwright's page.wait_for_function, polled every animation frame) before it measures or clicks. The page's
// init script (RUN_COUNTER there) counts finished runs in window.__dikkatRuns. Settled means:
//  - Streamlit has finished a run after the `since`-th and none is running (stApp's data-test-script-state), or
//    none has run for 30 s (a run too short for the DOM to show it running);
//  - no element is still stale from the run before or waiting for its lazily loaded code (stSkeleton: the
//    plotly charts came seconds after the run had ended);
//  - the web fonts are loaded (plotly measures its text when it draws);
//  - every plotly chart is drawn, at its container's width (Streamlit redraws a figure at its column's width);
//  - every frame (head view) has loaded;
//  - and none of that has changed for QUIET ms.
// What it still waits for is left in window.__dikkatWaitingFor (the test reports it if the wait times out).
(since) => {
  const QUIET = 300;
  const MISSED_MS = 30000;
  const waiting = (why) => { window.__dikkatWaitingFor = why; window.__dikkatSettle = null; return false; };
  const app = document.querySelector("[data-testid=stApp]");
  const runs = window.__dikkatRuns || 0;
  const scriptState = app && app.getAttribute("data-test-script-state");
  if (scriptState !== "notRunning") window.__dikkatIdle = null;
  if (!app || scriptState !== "notRunning") return waiting("a script run to finish (" + scriptState + ", runs " + runs + ")");
  if (runs <= since) {
    // A run that began and ended between two of the browser's frames can leave no "running" in the DOM (React draws
    // both states at once, on a busy machine): once the page has been idle for MISSED_MS, the run is taken as done.
    // Idle counts from the last click or key (tests/browser_runs.js), so a page idle before the action waits anew.
    const now = performance.now();
    window.__dikkatIdle = window.__dikkatIdle || now;
    if (now - Math.max(window.__dikkatIdle, window.__dikkatInputAt || 0) < MISSED_MS) {
      return waiting("a script run to finish (" + scriptState + ", runs " + runs + ")");
    }
  }
  if (document.querySelector("[data-stale=true]")) return waiting("stale elements to go");
  if (document.querySelector("[data-testid=stSkeleton]")) return waiting("lazily loaded elements");
  if (document.fonts.status !== "loaded") return waiting("web fonts");
  const plots = [];
  for (const [n, chart] of [...document.querySelectorAll("[data-testid=stPlotlyChart]")].entries()) {
    const gd = chart.querySelector(".js-plotly-plot");
    if (!gd || !gd._fullLayout || !gd.querySelector(".main-svg")) return waiting("plotly chart " + n + " to be drawn");
    const fl = gd._fullLayout, width = chart.getBoundingClientRect().width;
    if (width > 0 && Math.abs(fl.width - width) > 1) {
      return waiting("plotly chart " + n + " drawn " + fl.width + " px wide in " + width + " px");
    }
    plots.push([fl.width, fl.height, fl._size && [fl._size.l, fl._size.r, fl._size.t, fl._size.b]]);
  }
  for (const frame of document.querySelectorAll("iframe")) {
    const doc = frame.contentDocument;
    if (doc && doc.readyState !== "complete") return waiting("a frame to load");
  }
  const state = JSON.stringify([runs, plots, document.querySelectorAll("[data-testid=stMain] *").length]);
  const now = performance.now(), last = window.__dikkatSettle;
  window.__dikkatWaitingFor = "the page to stay still";
  if (!last || last.state !== state) {
    window.__dikkatSettle = { state, since: now };
    return false;
  }
  return now - last.since >= QUIET;
}
