"""What the Head atlas page's parts share (the page itself is ``views/atlas.py``): its state in the link
(:data:`URL`), the atlas of a folder, numbers and names as the page writes them, and picking a head on a grid or a
table."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st

from models import atlas as A
from views import hosting, shared
from viz import numbers as nb

t, tp = shared.t, shared.t_plain
URL = shared.UrlState("atlas")
VERSION_KEY = "atlas_pick_version"  # bumps after a head is picked on the grid or a table, so their selection resets


# ---------------------------------------------------------------- the atlas on disk, numbers, names


@st.cache_resource(max_entries=32, show_spinner=False)
def _atlas_object(folder: str) -> A.Atlas:
    return A.Atlas(folder)


def atlas_at(folder: Path) -> A.Atlas | None:
    """One :class:`models.atlas.Atlas` per folder for every session and run (its table is computed again only when
    new parts arrive), or None before the build has written its manifest."""
    return _atlas_object(str(folder)) if (folder / "manifest.json").is_file() else None


def atlas_object_clear() -> None:
    """Forget every atlas object :func:`atlas_at` keeps (each is made again from its folder when next asked for)."""
    _atlas_object.clear()


def atlas_still_at(folder: Path) -> A.Atlas:
    """:func:`atlas_at` for an atlas the page has shown: :class:`models.AtlasFilesGoneError` when its manifest has
    gone since."""
    found = atlas_at(folder)
    if found is None:
        with A.store.reading(folder):
            raise FileNotFoundError(folder / "manifest.json")
    return found


def files_gone() -> None:
    """Files of an atlas went while the page read them (a cleaned cache, an upload's atlas removed): say so in the
    interface language, naming no file, and forget the atlas objects read before, so that the next run reads what
    is on disk now. The page's choices (corpus, upload, settings, head) stay in the session; what is still on disk
    stays too, and the Build button reads the missing texts again."""
    atlas_object_clear()
    A.forget_open()
    st.warning(t("atlas_files_gone"))


def parts(folder: Path) -> int:
    """How many parts of the atlas are written (:func:`models.atlas.store.complete_parts`)."""
    return len(A.store.complete_parts(folder))


def corpus_name(name: str, own: bool = False) -> str:
    """A corpus as the page names it: the shipped ones by their language, a file by its name; in classroom mode a
    file that is not this session's own upload (``own``) by a short code of its name (the teacher's atlases are
    built from files of the teacher's folders: their names are not shown to a class)."""
    if name in ("en", "tr"):
        return tp(f"atlas_corpus_{name}")
    if own or not hosting.current().classroom:
        return name
    return tp("atlas_corpus_coded", code=hashlib.sha256(name.encode("utf-8", "replace")).hexdigest()[:6])


def value(x: float) -> str:
    """A metric's value as the page writes it (3 decimals, the language's decimal mark; "—" for none)."""
    return nb.num(float(x), 3, shared.lang()) if np.isfinite(x) else nb.NOT_A_NUMBER


def interval(lo: float, hi: float) -> str:
    return f"{value(lo)}–{value(hi)}" if np.isfinite(lo) and np.isfinite(hi) else nb.NOT_A_NUMBER


def duration(seconds: float) -> str:
    s = int(round(max(0.0, seconds)))
    return tp("atlas_minutes", m=s // 60, s=s % 60) if s >= 60 else tp("atlas_seconds", s=s)


def stack_name(stack: str) -> str:
    return tp(f"stack_{stack}")


# ---------------------------------------------------------------- picking a head (grid, tables)


def _bump() -> None:
    st.session_state[VERSION_KEY] = st.session_state.get(VERSION_KEY, 0) + 1


def _pick(stack: str, layer: int, head: int) -> None:
    st.session_state["atlas_stack"] = stack
    st.session_state["atlas_layer"] = int(layer)
    st.session_state["atlas_head"] = int(head)


def on_grid(stack: str, key: str, layers: int, heads: int) -> None:
    """A click on a grid cell (its x is the head, y the layer): open that head."""
    cell = shared.grid_cell(key, layers, heads)
    if cell is not None:
        _pick(stack, *cell)
    _bump()


def on_row(key: str, heads: list[tuple[str, int, int]]) -> None:
    """A row chosen in a table of heads: open that head."""
    event = st.session_state.get(key) or {}
    rows = (event.get("selection") or {}).get("rows") or []
    if rows and 0 <= int(rows[0]) < len(heads):
        _pick(*heads[int(rows[0])])
    _bump()


def heads_frame(df: pd.DataFrame, multi: bool, column: str, value_title: str) -> tuple[pd.DataFrame, list]:
    """A table of heads (stack when there are several, layer, head, a value) and the heads in its row order."""
    shown = pd.DataFrame(index=range(len(df)))
    if multi:
        shown[tp("atlas_col_stack")] = [stack_name(s) for s in df["stack"]]
    shown[tp("atlas_col_layer")] = df["layer"].to_numpy(dtype=int)
    shown[tp("atlas_col_head")] = df["head"].to_numpy(dtype=int)
    shown[value_title] = df[column].to_numpy(dtype=float)
    return shown, [(s, int(a), int(b)) for s, a, b in zip(df["stack"], df["layer"], df["head"])]


def add_verdicts(shown: pd.DataFrame, df: pd.DataFrame) -> pd.DataFrame:
    """``shown`` with one column for each head's causal test: ✓ (proven) or ✗ (pattern only) with the effect of
    switching it off and its 95 % interval, or "not tested" (``df``: rows with
    :data:`models.atlas.verdict.COLUMNS`, in ``shown``'s order)."""
    cells = []
    for verdict, e, lo, hi in zip(df["verdict"], df["effect"].to_numpy(float), df["effect_lo"].to_numpy(float),
                                  df["effect_hi"].to_numpy(float)):
        effect = nb.NOT_A_NUMBER if not np.isfinite(e) else f"{'+' if e > 0 else ''}{value(e)} [{interval(lo, hi)}]"
        cells.append(tp(f"atlas_verdict_{verdict}", effect=effect) if verdict != "untested"
                     else tp("atlas_verdict_untested"))
    shown[tp("atlas_col_causal")] = cells
    return shown
