// Counts the script runs the page has seen finish (stApp's data-test-script-state turning "notRunning"), from the
// page's first script on: a run that ends between two polls is still counted. An init script of every page that
// tests/browser/test_browser.py and bench/browser.py open; tests/browser_settled.js reads the count.
window.__dikkatRuns = 0;
new MutationObserver((records) => {
  for (const r of records) {
    if (r.target.getAttribute("data-test-script-state") === "notRunning" && r.oldValue !== "notRunning") window.__dikkatRuns++;
  }
}).observe(document, {subtree: true, attributes: true, attributeOldValue: true, attributeFilter: ["data-test-script-state"]});
// The time of the last click, key or typed input: tests/browser_settled.js counts a page's idle time from it.
window.__dikkatInputAt = 0;
for (const type of ["pointerdown", "keydown", "input"]) {
  document.addEventListener(type, () => { window.__dikkatInputAt = performance.now(); }, true);
}
