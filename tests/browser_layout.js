// Text that a page cuts or draws over other text, as a list of [kind, what, detail] (empty: none).
// Run in the page by tests/browser/test_browser.py (Playwright's page.evaluate). Four kinds:
//  - "cut": an element whose text is wider than its box and hidden (overflow hidden/clip or an ellipsis);
//    KaTeX's visually hidden MathML copy is not shown text and is left out;
//  - "outside"/"overlap": in a plotly chart, a title, axis title, tick label, annotation, colour-bar title or
//    legend entry outside the chart's box, or two of them intersecting;
//  - "cut input": a number box narrower than the number in it;
//  - "head view": in the head view's frame, a text of the drawing outside its viewBox, or the two download
//    buttons on different lines.
() => {
  const problems = [];
  const shown = (e) => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
  const text = (e) => (e.textContent || "").trim().slice(0, 60);
  const seen = new Set();
  document.querySelectorAll("[data-testid=stMain] *, [data-testid=stSidebar] *").forEach((e) => {
    if (!shown(e) || !text(e) || e.closest(".js-plotly-plot") || e.closest("svg") || e.closest(".katex-mathml")) return;
    const cs = getComputedStyle(e);
    const hides = (cs.overflowX !== "visible" && cs.overflowX !== "auto" && cs.overflowX !== "scroll") ||
                  cs.textOverflow === "ellipsis";
    if (hides && e.scrollWidth > e.clientWidth + 1 && !seen.has(text(e))) {
      seen.add(text(e));
      problems.push(["cut", text(e), e.scrollWidth + " > " + e.clientWidth]);
    }
  });
  // a number box too narrow for its value ("13107" shown for 131072: issue 33); a text box may scroll its text
  document.querySelectorAll("[data-testid=stMain] input[type=number], [data-testid=stSidebar] input[type=number]").forEach((e) => {
    if (shown(e) && e.scrollWidth > e.clientWidth + 1) problems.push(["cut input", e.getAttribute("aria-label") || "", e.value]);
  });
  const meet = (a, b) => a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1;
  document.querySelectorAll(".js-plotly-plot").forEach((plot, n) => {
    const outer = plot.getBoundingClientRect();
    const boxes = [];
    const add = (kind, selector) => plot.querySelectorAll(selector).forEach((t) => {
      const r = t.getBoundingClientRect();
      if ((t.textContent || "").trim() && r.width > 0) boxes.push({ kind, r, text: t.textContent.trim().slice(0, 40) });
    });
    add("title", ".gtitle, .gtitle-subtitle");
    add("axis title", "[class^=g-x] > text, [class^=g-y] > text");
    add("tick", ".xtick text, .ytick text, [class$=tick] text");
    add("annotation", ".annotation-text"); add("colour bar", ".cbtitle text"); add("legend", ".legendtext");
    const unique = boxes.filter((b, i) => boxes.findIndex((c) => c.r.left === b.r.left && c.r.top === b.r.top &&
                                                              c.text === b.text) === i);
    for (const b of unique) {
      if (b.r.left < outer.left - 1 || b.r.right > outer.right + 1 || b.r.top < outer.top - 1 || b.r.bottom > outer.bottom + 1) {
        problems.push(["outside", "chart " + n + " " + b.kind, b.text]);
      }
    }
    for (let i = 0; i < unique.length; i++) for (let j = i + 1; j < unique.length; j++) {
      const a = unique[i], b = unique[j];
      if (!(a.kind === "legend" && b.kind === "legend") && meet(a.r, b.r)) {
        problems.push(["overlap", "chart " + n, a.kind + " '" + a.text + "' × " + b.kind + " '" + b.text + "'"]);
      }
    }
  });
  document.querySelectorAll("iframe").forEach((frame) => {
    const doc = frame.contentDocument;
    const svg = doc && doc.getElementById("hv-svg");
    if (!svg) return;
    const vb = svg.viewBox.baseVal;
    svg.querySelectorAll("text").forEach((t) => {
      const b = t.getBBox();
      if (b.x < vb.x - 1 || b.x + b.width > vb.x + vb.width + 1) problems.push(["head view", "text outside the drawing", t.textContent.slice(0, 40)]);
    });
    const svgButton = doc.getElementById("hv-svg-dl"), pngButton = doc.getElementById("hv-png-dl");
    if (svgButton && pngButton && svgButton.offsetTop !== pngButton.offsetTop) problems.push(["head view", "downloads split", ""]);
  });
  return problems;
}
