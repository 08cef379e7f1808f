// Dikkat head view: queries (left) -> keys (right), one line per (head, query, key) whose opacity is the
// attention weight, one colour per head. Plain DOM + SVG, no library, nothing fetched from outside.
// Data: <script type="application/json" class="hv-data"> written by viz/head_view.py, in the same container as
// this script (the page's body, or one <div> of a notebook's output: any number per page, nothing global).
(function (root) {
  "use strict";
  var page = root === document.body;  // a whole page (Streamlit's iframe) keeps its element ids
  var D = JSON.parse(root.querySelector(".hv-data").textContent);
  var L = D.layout, S = D.strings || {};
  var NS = "http://www.w3.org/2000/svg";
  var nq = D.q.length, nk = D.k.length, nh = D.heads.length;
  var shown = D.heads.map(function () { return true; });
  var focus = null;   // {side: "q"|"k", index} while hovering
  var pinned = null;  // same, after a click
  var pairFilter = "all";

  function el(tag, attrs, text) {
    var e = document.createElementNS(NS, tag);
    for (var a in attrs) { e.setAttribute(a, attrs[a]); }
    if (text !== undefined) { e.textContent = text; }
    return e;
  }
  function h(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var a in attrs) { e.setAttribute(a, attrs[a]); }
    if (text !== undefined) { e.textContent = text; }
    return e;
  }

  // ---- controls: a checkbox per head, all/none, pair filter, downloads
  var controls = root.querySelector(".hv-controls");
  controls.appendChild(h("span", {}, (S.heads || "Heads") + ":"));
  var boxes = [];
  D.heads.forEach(function (head, i) {
    var lab = h("label", { title: head.name });
    var box = h("input", { type: "checkbox", "data-head": String(i) });
    box.checked = true;
    box.addEventListener("change", function () { shown[i] = box.checked; draw(); });
    boxes.push(box);
    var sw = h("span", { "class": "sw" });
    sw.style.background = head.colour;
    lab.appendChild(box); lab.appendChild(sw); lab.appendChild(document.createTextNode(head.name));
    controls.appendChild(lab);
  });
  function setAll(v) { boxes.forEach(function (b, i) { b.checked = v; shown[i] = v; }); draw(); }
  if (nh > 1) {
    var all = h("button", { type: "button", "class": "hv-all" }, S.all || "all");
    all.addEventListener("click", function () { setAll(true); });
    var none = h("button", { type: "button", "class": "hv-none" }, S.none || "none");
    none.addEventListener("click", function () { setAll(false); });
    controls.appendChild(all); controls.appendChild(none);
  }
  if (D.pair) {
    var sel = h("select", { "class": "hv-pair", title: S.pair || "Sentence pair" });
    ["all", "AA", "AB", "BA", "BB"].forEach(function (v) {
      var o = h("option", { value: v }, v === "all" ? (S.pair_all || "A+B") : v[0] + "\u2192" + v[1]);
      sel.appendChild(o);
    });
    sel.addEventListener("change", function () { pairFilter = sel.value; draw(); });
    controls.appendChild(h("span", {}, (S.pair || "Pair") + ":"));
    controls.appendChild(sel);
  }
  // the two downloads wrap as one group, never one button alone on a line
  var actions = h("span", { "class": "hv-actions" });
  var bSvg = h("button", { type: "button", "class": "hv-svg-dl" }, S.svg || "SVG");
  bSvg.addEventListener("click", function () { download(svgText(), "image/svg+xml", D.filename + ".svg"); });
  var bPng = h("button", { type: "button", "class": "hv-png-dl" }, S.png || "PNG");
  bPng.addEventListener("click", savePng);
  actions.appendChild(bSvg); actions.appendChild(bPng);
  controls.appendChild(actions);

  // ---- the drawing
  // columns as wide as their longest label, title and notes wrapped to the drawing (viz/head_view.py)
  var top = L.top;
  var width = Math.round(L.colq + L.gap + L.colk), height = Math.round(top + L.row * Math.max(nq, nk) + 10);
  var x1 = L.colq, x2 = L.colq + L.gap;
  var zoom = L.zoom || 1;  // drawn larger than its natural size (Explore, for a projector); downloads keep it
  var svg = el("svg", { "class": "hv-svg", xmlns: NS, width: width * zoom, height: height * zoom, viewBox: "0 0 " + width + " " + height,
    "font-family": "DejaVu Sans, Noto Sans, Arial, sans-serif", "font-size": "13" });
  svg.appendChild(el("rect", { width: width, height: height, fill: "#ffffff" }));
  D.title_lines.forEach(function (line, i) {
    svg.appendChild(el("text", { x: 4, y: 16 + L.line * i, "font-weight": "bold", "class": "hv-title" }, line));
  });
  var firstNote = 16 + L.line * Math.max(D.title_lines.length, 1);
  D.note_lines.forEach(function (line, i) {
    svg.appendChild(el("text", { x: 4, y: firstNote + L.line * i, fill: "#555", "class": "hv-note" }, line));
  });
  var lines = el("g", { "class": "hv-lines" });
  svg.appendChild(lines);
  var qText = [], kText = [];
  function tokenText(side, i, label) {
    var y = top + L.row * i + 14;
    var t = el("text", side === "q" ? { x: x1 - 4, y: y, "text-anchor": "end", "class": "hv-q" } : { x: x2 + 4, y: y, "class": "hv-k" }, label);
    t.setAttribute("data-index", String(i));
    var tips = side === "q" ? D.qhover : D.khover;  // the morpheme level: what each unit is
    var title = el("title", {}, "#" + (D.first + i) + " " + (tips ? tips[i] : label));
    t.appendChild(title);
    t.addEventListener("mouseenter", function () { if (!pinned) { focus = { side: side, index: i }; draw(); } });
    t.addEventListener("mouseleave", function () { if (!pinned) { focus = null; draw(); } });
    t.addEventListener("click", function () {
      pinned = (pinned && pinned.side === side && pinned.index === i) ? null : { side: side, index: i };
      focus = pinned; draw();
    });
    svg.appendChild(t);
    return t;
  }
  D.q.forEach(function (label, i) { qText.push(tokenText("q", i, label)); });
  D.k.forEach(function (label, i) { kText.push(tokenText("k", i, label)); });
  root.querySelector(".hv-root").appendChild(svg);
  if (page) {  // the ids the page's tests and downloads have always used
    [["hv-all", ".hv-all"], ["hv-none", ".hv-none"], ["hv-pair", ".hv-pair"], ["hv-svg-dl", ".hv-svg-dl"],
     ["hv-png-dl", ".hv-png-dl"], ["hv-svg", ".hv-svg"], ["hv-lines", ".hv-lines"]].forEach(function (p) {
      var e = root.querySelector(p[1]);
      if (e) { e.id = p[0]; }
    });
  }
  // the widths above are estimates: widen the drawing if the browser's font draws any text wider
  var box = svg.getBBox();
  var x0 = Math.min(0, Math.floor(box.x) - 2), xr = Math.max(width, Math.ceil(box.x + box.width) + 4);
  if (x0 < 0 || xr > width) {
    width = xr - x0;
    svg.setAttribute("width", width * zoom);
    svg.setAttribute("viewBox", x0 + " 0 " + width + " " + height);
    svg.firstChild.setAttribute("x", x0); svg.firstChild.setAttribute("width", width);
  }

  function pairOk(q, k) {
    if (pairFilter === "all") { return true; }
    var a = pairFilter[0] === "A" ? 0 : 1, b = pairFilter[1] === "A" ? 0 : 1;
    return D.qseg[q] === a && D.kseg[k] === b;
  }

  function draw() {
    while (lines.firstChild) { lines.removeChild(lines.firstChild); }
    var minW = Math.round(L.min * 1000);
    var frag = document.createDocumentFragment();
    for (var hd = 0; hd < nh; hd++) {
      if (!shown[hd]) { continue; }
      var colour = D.heads[hd].colour, W = D.w[hd];
      for (var q = 0; q < nq; q++) {
        if (focus && focus.side === "q" && focus.index !== q) { continue; }
        var row = W[q], yq = top + L.row * q + L.row / 2;
        for (var k = 0; k < nk; k++) {
          var v = row[k];
          if (v < minW) { continue; }
          if (focus && focus.side === "k" && focus.index !== k) { continue; }
          if (!pairOk(q, k)) { continue; }
          frag.appendChild(el("line", { x1: x1 + 4, y1: yq.toFixed(1), x2: x2 - 4, y2: (top + L.row * k + L.row / 2).toFixed(1),
            stroke: colour, "stroke-width": 2, "stroke-opacity": (v / 1000).toFixed(3) }));
        }
      }
    }
    lines.appendChild(frag);
    qText.forEach(function (t, i) { t.setAttribute("font-weight", focus && focus.side === "q" && focus.index === i ? "bold" : "normal"); });
    kText.forEach(function (t, i) { t.setAttribute("font-weight", focus && focus.side === "k" && focus.index === i ? "bold" : "normal"); });
    root.setAttribute("data-drawn", String(lines.childNodes.length));
  }

  function svgText() {
    var copy = svg.cloneNode(true);
    copy.querySelectorAll("title").forEach(function (t) { t.remove(); });
    copy.setAttribute("width", width); copy.setAttribute("height", height);  // the natural size, not the zoom
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + new XMLSerializer().serializeToString(copy);
  }
  function download(data, mime, name) {
    var blob = data instanceof Blob ? data : new Blob([data], { type: mime });
    var a = document.createElement("a");
    a.href = URL.createObjectURL(blob);
    a.download = name;
    document.body.appendChild(a); a.click();
    setTimeout(function () { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
  }
  function savePng() {
    var img = new Image();
    img.onload = function () {
      var c = document.createElement("canvas");
      c.width = width * 2; c.height = height * 2;
      var ctx = c.getContext("2d");
      ctx.scale(2, 2); ctx.drawImage(img, 0, 0);
      c.toBlob(function (b) { download(b, "image/png", D.filename + ".png"); }, "image/png");
    };
    img.src = "data:image/svg+xml;charset=utf-8," + encodeURIComponent(svgText());
  }

  draw();
})(document.currentScript.parentNode);
