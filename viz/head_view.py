"""Head view (after BertViz's head view, Vig 2019): the tokens in two columns, queries on the left and keys
on the right, with a line from each query to each key whose opacity is the attention weight, one colour
per head.

Two renderings of the same drawing:

- :func:`head_view_html`: a self-contained HTML page (for ``st.iframe``) whose script is read from
  ``assets/headview.js`` and inlined, so nothing is fetched from outside (BertViz loads d3 and jQuery
  from a CDN and shows nothing offline). It has a checkbox per head, hover/click on a token to show only
  its lines, the sentence-pair filter (A→A, A→B, B→A, B→B) and SVG/PNG download buttons made in the
  browser from the drawing itself.
- :func:`head_view_svg`: the same drawing as a static SVG string made on the server (all given heads,
  no interaction) for a download button.
"""

from __future__ import annotations

import colorsys
import html
import json
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Sequence

import numpy as np

from .text import WIDE_W, text_width

ASSETS = Path(__file__).resolve().parent.parent / "assets"
JS_FILE = ASSETS / "headview.js"

# Layout shared by the browser drawing (headview.js reads it from the data) and the server SVG.
ROW_H = 20
COL_W = 150
GAP_W = 260
TOP = 36
FONT = "13px 'DejaVu Sans', 'Noto Sans', Arial, sans-serif"
# Lines lighter than this are not drawn (opacity below 1 % is invisible).
MIN_WEIGHT = 0.01
LINE_H = 18  # title and note lines


def _wrap(text: str, width: float) -> list[str]:
    """``text`` broken at spaces into lines of at most ``width`` px (a word longer than that is cut into
    pieces that fit)."""
    lines: list[str] = []
    line = ""
    for word in str(text).split(" "):
        candidate = f"{line} {word}" if line else word
        if text_width(candidate) <= width:
            line = candidate
            continue
        if line:
            lines.append(line)
        while text_width(word) > width:  # a word wider than the drawing: cut it
            cut = max(1, int(width // WIDE_W))
            while cut < len(word) and text_width(word[:cut + 1]) <= width:
                cut += 1
            lines.append(word[:cut])
            word = word[cut:]
        line = word
    lines.append(line)
    return lines


@dataclass(frozen=True)
class Layout:
    """Where the head view draws, in px: shared by the browser drawing and the server SVG.

    Attributes:
        col_q, col_k: widths of the query and key columns (each as wide as its longest label).
        width: the drawing's width; title_lines, note_lines: the title and notes wrapped to it.
        top: y of the first token row.
    """

    col_q: float
    col_k: float
    width: float
    title_lines: list[str]
    note_lines: list[str]
    top: float

    @property
    def text_lines(self) -> int:
        """Lines of title and notes."""
        return len(self.title_lines) + len(self.note_lines)


def head_view_layout(query_labels: Sequence[str], key_labels: Sequence[str], title: str = "",
                     notes: Sequence[str] = ()) -> Layout:
    """The columns as wide as their longest label (at least :data:`COL_W`), and the title and notes wrapped
    to the drawing's width, so no text is cut (issue 13: titles, notes and long words lost both ends at a
    fixed 560 px)."""
    col_q = max([COL_W] + [text_width(x) + 10 for x in query_labels])
    col_k = max([COL_W] + [text_width(x) + 10 for x in key_labels])
    width = col_q + GAP_W + col_k
    title_lines = _wrap(title, width - 8) if title else []
    note_lines = [line for note in notes for line in _wrap(note, width - 8)]
    top = TOP + LINE_H * (max(len(title_lines), 1) - 1 + len(note_lines))
    return Layout(col_q, col_k, width, title_lines, note_lines, top)

_PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
            "#bcbd22", "#17becf", "#393b79", "#ad494a"]


def head_colours(n: int) -> list[str]:
    """``n`` distinct colours: a 12-colour qualitative palette, evenly spaced hues beyond 12 heads."""
    if n <= len(_PALETTE):
        return _PALETTE[:n]
    out = []
    for i in range(n):
        r, g, b = colorsys.hls_to_rgb(i / n, 0.42, 0.75)
        out.append(f"#{int(r * 255):02x}{int(g * 255):02x}{int(b * 255):02x}")
    return out


def _check(weights: np.ndarray, query_labels: Sequence[str], key_labels: Sequence[str],
           head_names: Sequence[str]) -> np.ndarray:
    w = np.asarray(weights, dtype=np.float32)
    if w.ndim != 3:
        raise ValueError(f"expected (heads, query, key), got shape {w.shape}")
    h, nq, nk = w.shape
    if len(query_labels) != nq or len(key_labels) != nk or len(head_names) != h:
        raise ValueError(f"{len(head_names)} heads / {len(query_labels)} query / {len(key_labels)} key labels "
                         f"for weights of shape {w.shape}")
    return w


def head_view_data(weights: np.ndarray, query_labels: Sequence[str], key_labels: Sequence[str], *,
                   head_names: Sequence[str], query_segments: Sequence[int] | None = None,
                   key_segments: Sequence[int] | None = None, title: str = "", notes: Sequence[str] = (),
                   strings: dict | None = None, filename: str = "head_view", first_position: int = 0,
                   zoom: float = 1.0, query_hover: Sequence[str] | None = None,
                   key_hover: Sequence[str] | None = None) -> dict:
    """The JSON-ready data the browser drawing reads.

    Weights are sent as integers in thousandths (``round(1000 w)``), ``heads x query x key``.
    Arguments as for :func:`head_view_html`.

    Returns:
        dict of JSON-serialisable values (labels, segments, heads with colours, ``w``, layout).

    Raises:
        ValueError: ``weights`` not 3-D ``(heads, query, key)``, or label / head-name / hover counts that do
            not match it.
    """
    w = _check(weights, query_labels, key_labels, head_names)
    h, nq, nk = w.shape
    hover = {}
    for name, texts, n in (("qhover", query_hover, nq), ("khover", key_hover, nk)):
        if texts is not None:
            if len(texts) != n:
                raise ValueError(f"{len(texts)} {name} texts for {n} labels")
            hover[name] = [str(x) for x in texts]
    lay = head_view_layout(query_labels, key_labels, title, notes)
    qs = list(query_segments) if query_segments is not None else [0] * nq
    ks = list(key_segments) if key_segments is not None else [0] * nk
    return {
        "q": list(query_labels), "k": list(key_labels), "qseg": [int(s) for s in qs], "kseg": [int(s) for s in ks],
        "heads": [{"name": str(n), "colour": c} for n, c in zip(head_names, head_colours(h))],
        "w": np.rint(w * 1000).astype(np.int32).tolist(),
        "pair": (1 in qs) or (1 in ks),
        "title": title, "notes": list(notes), "strings": strings or {}, "filename": filename,
        "first": int(first_position), "title_lines": lay.title_lines, "note_lines": lay.note_lines,
        "layout": {"row": ROW_H, "colq": lay.col_q, "colk": lay.col_k, "gap": GAP_W, "top": lay.top,
                   "line": LINE_H, "font": FONT, "min": MIN_WEIGHT, "zoom": float(zoom)},
    } | hover


def head_view_html(weights: np.ndarray, query_labels: Sequence[str], key_labels: Sequence[str], *,
                   head_names: Sequence[str], query_segments: Sequence[int] | None = None,
                   key_segments: Sequence[int] | None = None, title: str = "", notes: Sequence[str] = (),
                   strings: dict | None = None, filename: str = "head_view", first_position: int = 0,
                   zoom: float = 1.0, query_hover: Sequence[str] | None = None,
                   key_hover: Sequence[str] | None = None) -> str:
    """Self-contained HTML of the interactive head view (script inlined from ``assets/headview.js``).

    Args:
        weights: float ``(heads, query, key)`` weights of one layer (``heads`` may be 1: an average or a
            rollout).
        query_labels, key_labels: the tokens' (or words') own text, one per row / column.
        head_names: one name per head (shown next to its checkbox).
        query_segments, key_segments: 0 (sentence A) or 1 (sentence B) per token, for the pair filter.
        title: heading drawn above the columns (say there whether rows were renormalised).
        notes: lines drawn under the title (what was hidden, merged, left out).
        strings: translated interface words: ``heads``, ``all``, ``none``, ``pair``, ``svg``, ``png``, ``hint``.
        filename: download file name without extension.
        first_position: position of the first drawn token in the whole input (long inputs are paged).
        zoom: the drawing's scale on screen (1: 13 px labels; the Explore page draws it larger, readable on a
            projector; it still shrinks to the frame's width). Downloads keep the natural size.
        query_hover, key_hover: the tooltip of each row / column label, plain text, in place of the label itself
            (the morpheme level: ``yi — accusative: definite object (-(y)I)``,
            :func:`viz.morphemes.unit_hover`); the tooltip starts with the position either way.

    Returns:
        an HTML document (str) with no external reference.

    Raises:
        ValueError: as :func:`head_view_data`. OSError: ``assets/headview.js`` cannot be read.
    """
    body = _head_view_body(weights, query_labels, key_labels, head_names=head_names, query_segments=query_segments,
                           key_segments=key_segments, title=title, notes=notes, strings=strings, filename=filename,
                           first_position=first_position, zoom=zoom, query_hover=query_hover, key_hover=key_hover)
    return (
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><style>"
        f"body{{margin:0;{_FONT}}}{_css('')}</style></head><body>{body}</body></html>"
    )


def head_view_fragment(weights: np.ndarray, query_labels: Sequence[str], key_labels: Sequence[str], *,
                       head_names: Sequence[str], query_segments: Sequence[int] | None = None,
                       key_segments: Sequence[int] | None = None, title: str = "", notes: Sequence[str] = (),
                       strings: dict | None = None, filename: str = "head_view", first_position: int = 0,
                       query_hover: Sequence[str] | None = None, key_hover: Sequence[str] | None = None) -> str:
    """The interactive head view as one ``<div>`` to put inside another page (a Jupyter notebook's output):
    its style applies only inside the div (a selector with the div's own id, new on every call), the script
    finds its data and elements within the div, and it sets no element id, so any number of head views
    live on one page. Arguments, shapes and errors as :func:`head_view_html`.

    Returns:
        ``<div class="dikkat-head-view" id="dikkat-hv-…">…</div>`` (str) with no external reference.
    """
    scope = f"dikkat-hv-{uuid.uuid4().hex}"
    body = _head_view_body(weights, query_labels, key_labels, scope=scope, head_names=head_names,
                           query_segments=query_segments, key_segments=key_segments, title=title, notes=notes,
                           strings=strings, filename=filename,
                           first_position=first_position, query_hover=query_hover, key_hover=key_hover)
    return (f'<div class="dikkat-head-view" id="{scope}"><style>#{scope}{{{_FONT}}}{_css("#" + scope + " ")}</style>'
            f"{body}</div>")


_FONT = "font:13px 'DejaVu Sans','Noto Sans',Arial,sans-serif;color:#222;background:#fff"


def _css(scope: str) -> str:
    """The head view's style, every selector under ``scope`` (``""`` for a page of its own)."""
    rules = (
        ".hv-controls{display:flex;flex-wrap:wrap;gap:6px 12px;align-items:center;margin:4px 0 6px}",
        ".hv-controls label{display:inline-flex;align-items:center;gap:3px;cursor:pointer;user-select:none}",
        ".hv-controls .sw{display:inline-block;width:12px;height:12px;border-radius:2px}",
        ".hv-controls button,{s}.hv-controls select{font:inherit;padding:1px 6px}",
        ".hv-controls .hv-actions{display:inline-flex;gap:6px;align-items:center;white-space:nowrap}",
        ".hv-svg{max-width:100%;height:auto;display:block}",
        ".hv-svg text{cursor:pointer}",
    )
    return "".join(scope + rule.replace("{s}", scope) for rule in rules)


def _head_view_body(weights, query_labels, key_labels, *, scope: str | None = None, **kwargs) -> str:
    """Controls, drawing area, data and script: what :func:`head_view_html` and :func:`head_view_fragment`
    share. A page of its own (``scope`` None) has element ids and its script starts from the script's parent
    (the body); a fragment's script starts from the element with id ``scope`` (a classic notebook runs an
    output's scripts elsewhere, so the script's own parent is not the fragment)."""
    ids = scope is None
    data = head_view_data(weights, query_labels, key_labels, **kwargs)
    # <, > and & as JSON escapes: no text (a label like "<!--<script>") can end or reshape the data block
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    payload = payload.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    script = JS_FILE.read_text(encoding="utf-8")
    if scope is not None:
        script = script.replace("})(document.currentScript.parentNode);", f'}})(document.getElementById("{scope}"));')
    def id_(name: str) -> str:
        return f' id="{name}"' if ids else ""

    return (f'<div class="hv-controls"{id_("hv-controls")}></div><div class="hv-root"{id_("hv-root")}></div>'
            f'<script type="application/json" class="hv-data"{id_("hv-data")}>{payload}</script>'
            f"<script>{script}</script>")


def html_height(n_rows: int, n_notes: int = 0, n_heads: int = 12, width_px: int = 840, zoom: float = 1.0) -> int:
    """Pixel height the iframe needs for ``n_rows`` tokens: the control rows (a checkbox per head and the
    buttons, wrapped at ``width_px``), the title and notes (``n_notes``: lines below the title's first,
    e.g. ``Layout.text_lines - 1``), the token columns (both scaled by ``zoom``), and a margin."""
    control_rows = -(-(n_heads * 52 + 330) // width_px)
    return int(12 + 32 * control_rows + zoom * (TOP + LINE_H * n_notes + ROW_H * n_rows + 10) + 30)


# characters XML 1.0 cannot hold, even as references (C0 controls but tab/newline/CR, surrogates, U+FFFE/F)
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml_text(text) -> str:
    """``text`` escaped for SVG/XML, a character XML cannot hold (a typed NUL) shown as U+FFFD."""
    return html.escape(_NOT_XML.sub("\ufffd", str(text)))


def head_view_svg(weights: np.ndarray, query_labels: Sequence[str], key_labels: Sequence[str], *,
                  head_names: Sequence[str], title: str = "", notes: Sequence[str] = (),
                  heads: Sequence[int] | None = None) -> str:
    """The head view as a static SVG document (server-side; the same layout as the browser drawing).

    Args:
        weights: float ``(heads, query, key)``; heads: which heads to draw (default all).
        Other arguments as for :func:`head_view_html`.

    Returns:
        SVG text (UTF-8 labels, the input's own characters); lines below ``MIN_WEIGHT`` are not drawn.

    Raises:
        ValueError: as :func:`head_view_data`. IndexError: a head index in ``heads`` out of range.
    """
    w = _check(weights, query_labels, key_labels, head_names)
    h, nq, nk = w.shape
    colours = head_colours(h)
    chosen = list(range(h)) if heads is None else [int(i) for i in heads]
    lay = head_view_layout(query_labels, key_labels, title, notes)
    top, width = lay.top, round(lay.width)
    height = round(top + ROW_H * max(nq, nk) + 10)
    x1, x2 = lay.col_q, lay.col_q + GAP_W
    esc = _xml_text
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Noto Sans, Arial, sans-serif" font-size="13">',
           f'<rect width="{width}" height="{height}" fill="#ffffff"/>']
    for i, line in enumerate(lay.title_lines):
        out.append(f'<text x="4" y="{16 + LINE_H * i}" font-weight="bold">{esc(line)}</text>')
    first_note = 16 + LINE_H * max(len(lay.title_lines), 1)
    for i, line in enumerate(lay.note_lines):
        out.append(f'<text x="4" y="{first_note + LINE_H * i}" fill="#555">{esc(line)}</text>')
    for head in chosen:
        for q in range(nq):
            yq = top + ROW_H * q + ROW_H / 2
            for k in np.nonzero(w[head, q] >= MIN_WEIGHT)[0]:
                yk = top + ROW_H * int(k) + ROW_H / 2
                out.append(f'<line x1="{x1 + 4}" y1="{yq:.1f}" x2="{x2 - 4}" y2="{yk:.1f}" stroke="{colours[head]}" '
                           f'stroke-width="2" stroke-opacity="{float(w[head, q, k]):.3f}"/>')
    for q, label in enumerate(query_labels):
        out.append(f'<text x="{x1 - 4}" y="{top + ROW_H * q + 14}" text-anchor="end">{esc(label)}</text>')
    for j, label in enumerate(key_labels):
        out.append(f'<text x="{x2 + 4}" y="{top + ROW_H * j + 14}">{esc(label)}</text>')
    out.append("</svg>")
    return "\n".join(out)
