"""Where atlases live: one folder per (model, corpus, settings) under the cache folder, Parquet files read with
DuckDB.

Layout of ``<cache>/atlas/<model>/<corpus>-<digest>-<settings>/``:

* ``manifest.json``: the model, the corpus (name, digest, size, language), the settings, each stack's
  ``[layers, heads]``, and ``complete`` once every text is in.
* ``parts/sums-NNNNN.parquet``: a row per (text, stack, layer, head): ``model``, ``corpus``, ``grp``
  (``corpus`` or ``repeat``), ``text``, ``stack``, ``layer``, ``head`` and the sums of
  :data:`models.atlas.metrics.SUMS` (float64).
* ``parts/examples-NNNNN.parquet``: per (text, stack, layer, head) the query where the head's pattern is
  strongest: ``query``, ``strength``, ``keys`` and ``weights`` (lists).
* ``parts/texts-NNNNN.parquet``: per text ``grp``, ``text``, ``content``, ``tokens``, ``truncated``, ``seconds``.
* ``labels.parquet``: the causal tests (:mod:`models.atlas.labels`).

A part is written to a temporary name and renamed, so an interrupted build leaves whole parts only; the next
build reads which texts are in and goes on from there. The in-process build numbers its parts ``NNNNN``; a build on
Ray (:mod:`models.atlas.cluster`) names each part after its shard, ``rPPPPPPPPPxS`` (the shard's first item and
its size), so a shard run again after its worker died writes the same files again instead of a second copy.
Parquet (Apache Arrow's columnar format) keeps each column compressed and typed; DuckDB queries every part of every
atlas on disk in one SQL statement (``read_parquet`` over a glob), which is what "find heads across models" needs,
without a server.
"""

from __future__ import annotations

import json
import os
import re
import threading
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ..errors import AtlasFilesGoneError, DikkatError
from ..loading.cache import cache_root
from .metrics import SUMS

VERSION = 1
_DUCK = threading.local()


def atlas_root() -> Path:
    """``$DIKKAT_ATLAS_ROOT``, else ``<cache>/atlas`` (:func:`models.loading.cache.cache_root`); created on first
    use."""
    root = Path(os.environ["DIKKAT_ATLAS_ROOT"]) if os.environ.get("DIKKAT_ATLAS_ROOT") else cache_root() / "atlas"
    root.mkdir(parents=True, exist_ok=True)
    return root


def safe(name: str) -> str:
    """A file-name-safe form of a model or corpus name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-")[:80] or "x"


def duck():
    """This thread's DuckDB connection (in memory; it only reads Parquet files)."""
    con = getattr(_DUCK, "con", None)
    if con is None:
        import duckdb

        con = _DUCK.con = duckdb.connect(":memory:")
    return con


def glob(folder: Path, table: str) -> str:
    """The glob of a table's parts in an atlas folder (or under a root: ``*/*/parts``), quoted for SQL."""
    return str(folder / "parts" / f"{table}-*.parquet").replace("'", "''")


class PartWriter:
    """Writes an atlas's parts (see module docstring)."""

    def __init__(self, folder: Path):
        self.folder = folder
        (folder / "parts").mkdir(parents=True, exist_ok=True)
        numbers = [int(m.group(1)) for p in (folder / "parts").glob("texts-*.parquet")
                   if (m := re.match(r"texts-(\d+)\.parquet$", p.name))]
        self.next = max(numbers, default=-1) + 1

    def write(self, sums: dict[str, list], examples: dict[str, list], texts: dict[str, list]) -> None:
        """Write the next numbered part (:func:`write_part`)."""
        write_part(self.folder, f"{self.next:05d}", sums, examples, texts)
        self.next += 1


#: a part's name: the in-process build's number, or a Ray shard's ``r<first item>x<shard size>``
PART_NAME = r"(\d+|r\d+x\d+)"


def shard_part(first: int, size: int) -> str:
    """The part name of the shard of ``size`` items starting at item ``first`` (a build on Ray)."""
    return f"r{first:09d}x{size}"


def write_part(folder: Path, name: str, sums: dict[str, list], examples: dict[str, list],
               texts: dict[str, list]) -> None:
    """Write one part of each table (columns: name -> values) as ``<table>-<name>.parquet``, each to a temporary
    name first and renamed; the ``texts`` table last (a text counts as done once it is there). Writing a part
    of the same name again replaces it whole."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (folder / "parts").mkdir(parents=True, exist_ok=True)
    for table, rows in (("sums", sums), ("examples", examples), ("texts", texts)):
        target = folder / "parts" / f"{table}-{name}.parquet"
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        pq.write_table(pa.Table.from_pydict(rows), tmp, compression="zstd")
        os.replace(tmp, target)


def complete_parts(folder: Path) -> list[str]:
    """The numbers (``"00003"``) of the parts whose three tables are all on disk (the ``texts`` table is written
    last; a part one of whose files has gone since is not complete: its texts are read again by the next build),
    in order."""
    names = {p.name for p in (folder / "parts").glob("*.parquet")} if (folder / "parts").is_dir() else set()
    return sorted(m.group(1) for name in names if (m := re.match(rf"texts-{PART_NAME}\.parquet$", name))
                  and f"sums-{m.group(1)}.parquet" in names and f"examples-{m.group(1)}.parquet" in names)


@contextmanager
def reading(folder: Path, what: str = "atlas"):
    """Read the atlas in ``folder`` inside this block: a file of it that is gone or cut short meanwhile (a cleaned
    cache, an upload's atlas removed, a part deleted by hand) raises :class:`AtlasFilesGoneError` (code
    ``atlas_files_gone``, naming no path: a class sees the message) instead of DuckDB's, Arrow's or the operating
    system's error. ``what`` names the atlas in the English message (``atlas``, ``atlases``)."""
    import duckdb
    import pyarrow

    try:
        yield
    except DikkatError:
        raise
    except (OSError, json.JSONDecodeError, UnicodeDecodeError, duckdb.IOException, duckdb.InvalidInputException,
            pyarrow.ArrowException) as exc:
        raise AtlasFilesGoneError(
            f"Files of the {what} on this server are gone or cannot be read any more ({type(exc).__name__}); "
            "open the page again, and build the atlas again to read the texts they held.",
            code="atlas_files_gone") from exc


def part_files(folder: Path, table: str) -> str:
    """A DuckDB list literal of a table's files of the complete parts (:func:`complete_parts`)."""
    names = [str(folder / "parts" / f"{table}-{n}.parquet").replace("'", "''") for n in complete_parts(folder)]
    return "[" + ", ".join(f"'{x}'" for x in names) + "]"


def done_texts(folder: Path) -> set[tuple[str, int]]:
    """The ``(grp, text)`` pairs already written, in the complete parts (:func:`complete_parts`)."""
    if not complete_parts(folder):
        return set()
    rows = duck().execute(f"SELECT grp, text FROM read_parquet({part_files(folder, 'texts')})").fetchall()
    return {(g, int(t)) for g, t in rows}


def per_text_sums(folder: Path, grp: str, stacks: dict[str, tuple[int, int]]) -> dict[str, np.ndarray]:
    """stack -> float64 ``(texts, layers, heads, len(SUMS))`` of one group, texts in index order."""
    out = {}
    if not complete_parts(folder):
        return {stack: np.zeros((0, layers, heads, len(SUMS))) for stack, (layers, heads) in stacks.items()}
    cols = ", ".join(f'"{c}"' for c in SUMS)
    for stack, (layers, heads) in stacks.items():
        rows = duck().execute(
            f"SELECT text, layer, head, {cols} FROM read_parquet({part_files(folder, 'sums')}) "
            "WHERE grp = ? AND stack = ? ORDER BY text, layer, head", [grp, stack]).fetchnumpy()
        texts = np.unique(rows["text"]) if len(rows["text"]) else np.zeros(0, dtype=np.int64)
        arr = np.zeros((len(texts), layers, heads, len(SUMS)))
        if len(texts):
            t = np.searchsorted(texts, rows["text"])
            for i, c in enumerate(SUMS):
                arr[t, rows["layer"], rows["head"], i] = rows[c]
        out[stack] = arr
    return out


def read_manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text(encoding="utf-8"))


def write_manifest(folder: Path, manifest: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / ".manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=1, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, folder / "manifest.json")


def atlas_folders(root: Path | None = None) -> list[Path]:
    """Every atlas folder with a manifest under ``root`` (default :func:`atlas_root`)."""
    root = atlas_root() if root is None else Path(root)
    return sorted(p.parent for p in root.glob("*/*/manifest.json"))
