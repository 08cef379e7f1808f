"""A corpus read from its file as it is used, never whole: what an atlas on Ray reads (10k-1M texts).

:class:`CorpusFile` reads a ``.txt`` (one text a line), ``.jsonl``, ``.csv`` or ``.parquet`` file (a text column,
``text`` unless another is named) line by line or, for Parquet, batch by batch
(:meth:`pyarrow.parquet.ParquetFile.iter_batches`). Each text is cleaned as
:func:`models.atlas.corpus.corpus_from_texts` cleans it (stripped, empty ones left out, cut
to :data:`~models.atlas.corpus.MAX_TEXT_CHARS` characters), so the same texts give the same digest, and so the same
atlas folder, as the in-process build; unlike an in-memory :class:`~models.atlas.corpus.Corpus` it has no cap on
the file's size or the number of texts.

One pass over the file (:meth:`CorpusFile.scan`, before any work) checks it whole (UTF-8, JSON, the column) and
counts its texts, their characters and its digest; the build then streams the texts in shards.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Iterator

import numpy as np

from ..errors import InvalidCorpusError
from .corpus import MAX_TEXT_CHARS, SHIPPED, SUFFIXES, Corpus, csv_texts, jsonl_texts, no_column, shipped_corpus

#: Parquet rows read at once
BATCH_ROWS = 4096


@dataclass
class CorpusFile:
    """A corpus file read in a stream (module docstring).

    Attributes:
        path: the file. column: its text column (``.csv``/``.jsonl``/``.parquet``; default ``text``).
        name: the corpus's name (default the file's name). Like :class:`~models.atlas.corpus.Corpus`:
        ``language`` (""), ``source`` (the path), ``licence`` (""), ``audio`` (False), ``languages`` (()).

    Raises (on creation):
        InvalidCorpusError: no such file (``corpus_missing``), another suffix (``corpus_suffix``).
    """

    path: Path
    column: str | None = None
    name: str = ""
    language: str = ""
    licence: str = ""
    audio: bool = False
    languages: tuple = ()
    _scan: tuple | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        if not self.path.is_file():
            raise InvalidCorpusError(f"No corpus file at '{self.path}'.", code="corpus_missing",
                                     path=str(self.path)[-120:])
        if self.path.suffix.lower() not in SUFFIXES:
            raise InvalidCorpusError(f"'{self.path.name}': a corpus is a .txt, .csv, .jsonl or .parquet file.",
                                     code="corpus_suffix", file=self.path.name[-80:])
        self.name = self.name or self.path.name
        self.source = str(self.path)

    def _raw(self) -> Iterator[str]:
        """The column's values, in order (not cleaned)."""
        suffix, name = self.path.suffix.lower(), self.path.name
        column = self.column or "text"
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            try:
                pf = pq.ParquetFile(self.path)
            except Exception as exc:  # pyarrow raises ArrowInvalid and OSError for a file that is not Parquet
                raise InvalidCorpusError(f"'{name}' is not a Parquet file ({type(exc).__name__}).",
                                         code="corpus_binary", file=name[-80:]) from None
            if column not in pf.schema_arrow.names:
                no_column(name, column, pf.schema_arrow.names)
            for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=[column]):
                for value in batch.column(0).to_pylist():
                    yield value if isinstance(value, str) else ""
            return
        with open(self.path, "rb") as fh:
            if b"\x00" in fh.read(1 << 16):
                raise InvalidCorpusError(f"'{name}' is a binary file, not text.", code="corpus_binary",
                                         file=name[-80:])
        try:
            with open(self.path, encoding="utf-8-sig", newline="") as fh:
                if suffix == ".txt":
                    yield from fh
                elif suffix == ".csv":
                    yield from csv_texts(fh, column, name)
                else:
                    yield from jsonl_texts(fh, column, name)
        except UnicodeDecodeError as exc:
            raise InvalidCorpusError(f"'{name}' is not UTF-8 text (byte {exc.start}).", code="corpus_binary",
                                     file=name[-80:]) from None

    def texts(self) -> Iterator[str]:
        """The texts, cleaned as :func:`~models.atlas.corpus.corpus_from_texts` cleans them, in order."""
        for value in self._raw():
            value = value.strip()
            if value:
                yield value[:MAX_TEXT_CHARS]

    def scan(self) -> tuple[int, str, np.ndarray]:
        """One pass over the file: ``(texts, digest, chars)`` (``chars`` int32 ``(texts,)``, each text's length in
        characters); cached.

        Raises:
            InvalidCorpusError: not UTF-8 (``corpus_binary``), a line not JSON (``corpus_json``), no such column
                (``corpus_column``), no text at all (``corpus_empty``).
        """
        if self._scan is None:
            h = hashlib.sha256()
            chars = []
            for t in self.texts():
                h.update(t.encode("utf-8", "surrogatepass"))
                h.update(b"\x00")
                chars.append(len(t))
            if not chars:
                raise InvalidCorpusError(f"The corpus '{self.name}' has no text.", code="corpus_empty",
                                         name=self.name[-80:])
            self._scan = (len(chars), h.hexdigest()[:16], np.asarray(chars, dtype=np.int32))
        return self._scan

    @property
    def digest(self) -> str:
        """As :attr:`models.atlas.corpus.Corpus.digest` of the same texts."""
        return self.scan()[1]

    def __len__(self) -> int:
        return self.scan()[0]

    def head(self, k: int = 32) -> Corpus:
        """The first ``k`` texts as an in-memory :class:`Corpus` (what :func:`check_language` samples)."""
        texts = []
        for t in self.texts():
            texts.append(t)
            if len(texts) >= k:
                break
        return Corpus(name=self.name, texts=tuple(texts), source=self.source)


def open_corpus(source: str | Path, *, column: str | None = None, name: str | None = None) -> Corpus | CorpusFile:
    """A shipped corpus (``"en"``/``"tr"``: small, in memory) or a :class:`CorpusFile` read in a stream."""
    if isinstance(source, str) and source in SHIPPED:
        return shipped_corpus(source)
    return CorpusFile(Path(source), column=column, name=name or "")
