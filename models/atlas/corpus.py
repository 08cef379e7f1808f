"""Corpora for a head atlas: the two shipped with Dikkat (English, Turkish) and the user's own.

Shipped corpora (``assets/corpora/<lang>.jsonl``, one JSON object a line: ``id``, ``kind``, ``topic``, ``text``)
were written for this project and are under the project's own terms (``assets/corpora/README.md``): each holds
330+ texts of three kinds, single sentences, paragraphs and long texts of several hundred words.

A user's corpus is a ``.txt`` file (one text a line), a ``.csv`` file or a ``.jsonl`` file with a text column
(``text`` unless another is named). Every reader checks what it is given before it reads it whole: its size
(:data:`MAX_FILE_BYTES`), that it is UTF-8 text and not a binary file, that the column exists, that at least one
text is left; :func:`check_language` then tells whether the model's tokenizer can represent it.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn
from collections.abc import Iterator

from .. import checks
from ..errors import InvalidArgumentError, InvalidCorpusError

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "corpora"
SHIPPED = ("en", "tr")
#: the corpus files read (``.parquet`` by :mod:`models.atlas.stream`, batch by batch)
SUFFIXES = (".txt", ".csv", ".jsonl", ".parquet")
#: the largest corpus file read (64 MiB: some 10 million words, far past what an atlas on a laptop covers)
MAX_FILE_BYTES = 64 << 20
#: the most texts one corpus holds (an atlas reads them one by one; a larger corpus is cut, and says so)
MAX_TEXTS = 100_000
#: a text longer than this many characters is cut (the model reads at most its ``max_tokens`` anyway)
MAX_TEXT_CHARS = 200_000


@dataclass(frozen=True)
class Corpus:
    """Texts to build an atlas from.

    Attributes:
        name: ``en``/``tr`` for a shipped corpus, else the file's name or the name given.
        texts: the texts, in order (each non-empty, stripped of surrounding whitespace).
        language: ISO 639-1 code when known (shipped corpora), else "".
        source: where it came from (a path, or "shipped"). licence: its terms, as far as known.
        kinds: per text ``sentence``/``paragraph``/``long`` for the shipped corpora, else empty.
        cut: how many texts past :data:`MAX_TEXTS` were left out (0 if none).
        audio: the "texts" are paths of speech clips (:func:`shipped_clips`), read by a speech model, each in
            the language of ``languages``.
    """

    name: str
    texts: tuple[str, ...]
    language: str = ""
    source: str = ""
    licence: str = ""
    kinds: tuple[str, ...] = field(default=())
    cut: int = 0
    audio: bool = False
    languages: tuple[str, ...] = field(default=())

    @property
    def digest(self) -> str:
        """sha256 over the texts (hex, 16 characters): an atlas is kept per (model, corpus digest, settings)."""
        h = hashlib.sha256()
        for t in self.texts:
            h.update(t.encode("utf-8", "surrogatepass"))
            h.update(b"\x00")
        return h.hexdigest()[:16]

    def __len__(self) -> int:
        return len(self.texts)


def shipped_corpus(language: str) -> Corpus:
    """The corpus shipped for ``language`` (``"en"`` or ``"tr"``).

    Raises:
        InvalidCorpusError: another language (code ``corpus_unknown``, params ``name``, ``known``).
    """
    if language not in SHIPPED:
        raise InvalidCorpusError(f"No shipped corpus '{language}'; shipped: {', '.join(SHIPPED)}.",
                                 code="corpus_unknown", name=str(language)[:60], known=", ".join(SHIPPED))
    rows = [json.loads(line) for line in (ASSETS / f"{language}.jsonl").read_text(encoding="utf-8").splitlines()
            if line.strip()]
    return Corpus(name=language, texts=tuple(r["text"] for r in rows), language=language, source="shipped",
                  licence="written for Dikkat; the project's own terms (assets/corpora/README.md)",
                  kinds=tuple(r.get("kind", "") for r in rows))


def shipped_clips() -> Corpus:
    """The speech clips shipped in ``assets/audio`` (English and Turkish, 16 kHz WAV), as a corpus for a speech
    model's atlas (its encoder, decoder and cross-attention heads)."""
    folder = ASSETS.parent / "audio"
    clips = sorted(folder.glob("*.wav"))
    return Corpus(name="clips", texts=tuple(str(p) for p in clips), source="shipped", audio=True,
                  languages=tuple(p.stem.rsplit("_", 1)[-1] for p in clips),
                  licence="synthetic speech made with espeak-ng for Dikkat (assets/audio/README.md)")


def load_corpus(source: str | Path, *, column: str | None = None, name: str | None = None) -> Corpus:
    """A shipped corpus by its language code, or a corpus file by its path.

    Args:
        source: ``"en"``/``"tr"``, or the path of a ``.txt`` / ``.csv`` / ``.jsonl`` / ``.parquet`` file (a
            larger one is read in a stream by an atlas on Ray: :mod:`models.atlas.stream`).
        column: the text column of a ``.csv``/``.jsonl`` file (default ``text``).
        name: the corpus's name (default: the file name).

    Raises:
        InvalidCorpusError: a missing file (``corpus_missing``), a file over :data:`MAX_FILE_BYTES`
            (``corpus_too_large``), another suffix (``corpus_suffix``), not UTF-8 text (``corpus_binary``), a
            column that does not exist (``corpus_column``), malformed JSON (``corpus_json``), no text in it
            (``corpus_empty``).
    """
    checks.instance("source", source, (str, Path), "a language code or a file's path")
    if isinstance(source, str) and source in SHIPPED:
        return shipped_corpus(source)
    path = Path(source)
    if not path.is_file():
        raise InvalidCorpusError(f"No corpus file at '{path}'.", code="corpus_missing", path=str(path)[-120:])
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise InvalidCorpusError(
            f"'{path.name}' is {size / (1 << 20):,.0f} MiB; a corpus file may be at most {MAX_FILE_BYTES >> 20} MiB.",
            code="corpus_too_large", file=path.name[-80:], mib=round(size / (1 << 20)), limit=MAX_FILE_BYTES >> 20)
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise InvalidCorpusError(f"'{path.name}': a corpus is a .txt, .csv, .jsonl or .parquet file.",
                                 code="corpus_suffix", file=path.name[-80:])
    return corpus_from_bytes(path.read_bytes(), name=name or path.name, suffix=suffix, column=column,
                             source=str(path))


def corpus_from_bytes(data: bytes, *, name: str, suffix: str, column: str | None = None, source: str = "") -> Corpus:
    """A corpus from a file's bytes (an upload in the app): see :func:`load_corpus` for the formats and errors.

    Raises:
        InvalidArgumentError: ``data`` not bytes (code ``arg_instance``), ``name`` or ``suffix`` not a string, a
            ``column`` or ``source`` that is not a string (``arg_text``), checked before anything is read.
    """
    data = bytes(checks.instance("data", data, (bytes, bytearray, memoryview), "the bytes of a file"))
    name = checks.text(name, "name")
    for label, value in (("suffix", suffix), ("column", column), ("source", source)):
        if (value is not None or label == "suffix") and not isinstance(value, str):
            raise InvalidArgumentError(f"The {label} must be a string, got {type(value).__name__}.",
                                       code="arg_text", name=label, value=type(value).__name__)
    if len(data) > MAX_FILE_BYTES:
        raise InvalidCorpusError(
            f"'{name}' is {len(data) / (1 << 20):,.0f} MiB; a corpus file may be at most {MAX_FILE_BYTES >> 20} MiB.",
            code="corpus_too_large", file=name[-80:], mib=round(len(data) / (1 << 20)), limit=MAX_FILE_BYTES >> 20)
    if suffix.lower() == ".parquet":
        return corpus_from_texts(_parquet_column(data, column or "text", name), name=name, source=source or name)
    if b"\x00" in data[:1 << 16]:
        raise InvalidCorpusError(f"'{name}' is a binary file, not text.", code="corpus_binary", file=name[-80:])
    try:
        raw = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidCorpusError(f"'{name}' is not UTF-8 text (byte {exc.start}).", code="corpus_binary",
                                 file=name[-80:]) from None
    suffix = suffix.lower()
    if suffix == ".txt":
        texts = raw.splitlines()
    elif suffix in (".csv", ".jsonl"):
        texts = _column(raw, suffix, column or "text", name)
    else:
        raise InvalidCorpusError(f"'{name}': a corpus is a .txt, .csv, .jsonl or .parquet file.",
                                 code="corpus_suffix", file=name[-80:])
    return corpus_from_texts(texts, name=name, source=source or name)


def no_column(name: str, column: str, columns) -> NoReturn:
    """Raise the error of a corpus file without its text column (InvalidCorpusError, code ``corpus_column``);
    ``columns``: those it has."""
    listed = ", ".join(columns)
    raise InvalidCorpusError(f"'{name}' has no column '{column}'; its columns: {listed or '(none)'}.",
                              code="corpus_column", file=name[-80:], column=column[:60], columns=listed[:200] or "-")


def _parquet_column(data: bytes, column: str, name: str) -> list[str]:
    """The text column of a Parquet file's bytes (non-strings read as "")."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(pa.BufferReader(data))
    except Exception as exc:  # pyarrow raises ArrowInvalid (and OSError) for bytes that are not Parquet
        raise InvalidCorpusError(f"'{name}' is not a Parquet file ({type(exc).__name__}).", code="corpus_binary",
                                 file=name[-80:]) from None
    if column not in pf.schema_arrow.names:
        no_column(name, column, pf.schema_arrow.names)
    return [v if isinstance(v, str) else "" for v in pf.read(columns=[column]).column(0).to_pylist()]


def _column(raw: str, suffix: str, column: str, name: str) -> list[str]:
    if suffix == ".csv":
        return list(csv_texts(io.StringIO(raw, newline=""), column, name))
    return list(jsonl_texts(raw.splitlines(), column, name))


def csv_texts(lines, column: str, name: str) -> Iterator[str]:
    """The ``column`` of a CSV file's lines (a file object or ``io.StringIO``), in order ("" where empty); a
    field may be as long as the largest file read.

    Raises:
        InvalidCorpusError: no such column (``corpus_column``), a line the CSV reader cannot read (``corpus_csv``).
    """
    csv.field_size_limit(max(csv.field_size_limit(), MAX_FILE_BYTES))
    reader = csv.DictReader(lines)
    try:
        if column not in (reader.fieldnames or []):
            no_column(name, column, reader.fieldnames or [])
        for row in reader:
            yield row.get(column) or ""
    except csv.Error as exc:
        raise InvalidCorpusError(f"'{name}' line {reader.line_num} cannot be read as CSV ({exc}).",
                                 code="corpus_csv", file=name[-80:], line=reader.line_num) from None


def jsonl_texts(lines, column: str, name: str) -> Iterator[str]:
    """The ``column`` of a JSON-lines file's lines, in order ("" where not a string; blank lines skipped).

    Raises:
        InvalidCorpusError: a line not JSON (``corpus_json``), objects but none with the column (``corpus_column``).
    """
    seen: set[str] = set()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise InvalidCorpusError(f"'{name}' line {number} is not JSON.", code="corpus_json", file=name[-80:],
                                     line=number) from None
        if isinstance(row, dict):
            if column not in seen:
                seen.update(row)
            value = row.get(column)
            yield value if isinstance(value, str) else ""
    if seen and column not in seen:  # no object at all: the caller says the file has no text
        no_column(name, column, sorted(seen))


def corpus_from_texts(texts, *, name: str = "texts", source: str = "", language: str = "") -> Corpus:
    """A corpus from a list of strings: each stripped, empty ones left out, at most :data:`MAX_TEXTS` kept and
    each cut to :data:`MAX_TEXT_CHARS` characters.

    Raises:
        InvalidCorpusError: ``texts`` is a single string or not a list of strings (``corpus_texts``), or no text
            is left (``corpus_empty``).
    """
    if isinstance(texts, (str, bytes)) or not hasattr(texts, "__iter__"):
        raise InvalidCorpusError("A corpus is a list of texts, not one string.", code="corpus_texts")
    kept = []
    for t in texts:
        if not isinstance(t, str):
            raise InvalidCorpusError(f"A corpus holds strings; got {type(t).__name__}.", code="corpus_texts")
        t = t.strip()
        if t:
            kept.append(t[:MAX_TEXT_CHARS])
    if not kept:
        raise InvalidCorpusError(f"The corpus '{name}' has no text.", code="corpus_empty", name=name[-80:])
    return Corpus(name=name, texts=tuple(kept[:MAX_TEXTS]), language=language, source=source,
                  cut=max(0, len(kept) - MAX_TEXTS))


def check_language(loaded, corpus: Corpus, *, sample: int = 32) -> dict:
    """Whether the model's tokenizer can represent the corpus, from its first ``sample`` texts.

    Signs that it cannot: more than a quarter of the tokens are the unknown token (a WordPiece or SentencePiece
    vocabulary without the script); more than 0.8 tokens per non-space character (a vocabulary spelling each
    character alone, or in bytes: English reads about 0.25, Turkish 0.5 on the bundled models); or both some
    unknown tokens (over 10 %) and over 0.5 tokens per character. Under 20 characters, only the unknown share counts.

    Returns:
        ``{"unknown_share": float, "tokens_per_char": float}``.

    Raises:
        InvalidCorpusError: code ``corpus_language`` (params ``name``, ``model``, ``unknown``, ``per_char``).
        InvalidArgumentError: not a loaded model or a :class:`Corpus`, or ``sample`` not in 1 .. 10,000.
    """
    checks.loaded_model(loaded)
    if not (hasattr(corpus, "texts") and hasattr(corpus, "audio")):  # a Corpus, or a streamed file's head
        checks.instance("corpus", corpus, Corpus, "a Corpus (atlas.load_corpus)")
    sample = checks.whole("sample", sample, 1, 10_000)
    tok = loaded.tokenizer
    if tok is None or corpus.audio:
        return {"unknown_share": 0.0, "tokens_per_char": 0.0}
    unk = getattr(tok, "unk_token_id", None)
    tokens = unknown = chars = 0
    for text in corpus.texts[:sample]:
        ids = tok(text[:2000], add_special_tokens=False)["input_ids"]
        tokens += len(ids)
        unknown += sum(1 for i in ids if unk is not None and i == unk)
        chars += sum(1 for c in text[:2000] if not c.isspace())
    share = unknown / max(tokens, 1)
    per_char = tokens / max(chars, 1)
    if chars < 20:  # too little text to tell a spelled-out script from short words
        per_char = 0.0
    if share > 0.25 or per_char > 0.8 or (share > 0.1 and per_char > 0.5):
        raise InvalidCorpusError(
            f"'{loaded.name}''s tokenizer does not know the language of '{corpus.name}': {share:.0%} of its tokens "
            f"are unknown, {per_char:.2f} tokens per character. Pick a model for that language.",
            code="corpus_language", name=corpus.name[-80:], model=loaded.name, unknown=round(share, 3),
            per_char=round(per_char, 2))
    return {"unknown_share": share, "tokens_per_char": per_char}
