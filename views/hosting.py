"""How this server is run: on one's own machine (``personal``, the default) or for a class (``classroom``).

Classroom mode (``make serve``, or ``DIKKAT_MODE=classroom`` for any other launcher) is for one server and
every student's browser:

- only catalog models and the models the teacher lists in the config file are offered; no folder path or
  hub id is taken from the browser or the URL (the free model fields are not shown, ``?model_custom=`` is
  ignored), so the server's disk is not an oracle and nothing is downloaded on a student's request;
- typed texts are cut at ``max_chars`` characters;
- messages never name a server path or a file of the teacher's folders (:func:`scrub`).

The config file is TOML, ``classroom.toml`` in the repository root or the file ``DIKKAT_CLASSROOM_CONFIG``
names (see ``classroom.example.toml``)::

    max_chars = 2000
    [models]                    # name students see = folder or hub id on the server
    "bert-turkish" = "/srv/models/bert-base-turkish-cased"

Personal mode keeps every freedom (folders, hub ids, any text length).
"""

from __future__ import annotations

import os
import re
import sys
import time
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import models

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MAX_CHARS = 2000  # characters; about 500 tokens of English on a subword tokenizer
MODES = ("personal", "classroom")


@dataclass(frozen=True)
class Hosting:
    """The server's mode and, in classroom mode, what the teacher allows.

    Attributes:
        mode: ``"personal"`` or ``"classroom"``.
        max_chars: the longest text a student may type (characters), None in personal mode.
        extra: the teacher's models, name shown -> folder or hub id on the server, in file order.
    """

    mode: str = "personal"
    max_chars: int | None = None
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def classroom(self) -> bool:
        return self.mode == "classroom"


def _read_config(path: Path) -> dict:
    """The TOML config at ``path``; ``{}`` when there is none. Raises SystemExit with the reason when the
    file is malformed (the teacher starting the server sees it, not a student)."""
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SystemExit(f"Dikkat: cannot read the classroom config {path}: {exc}") from exc
    extra = data.get("models", {})
    limit = data.get("max_chars", DEFAULT_MAX_CHARS)
    if not isinstance(extra, dict) or not all(isinstance(k, str) and isinstance(v, str) and k.strip() and v.strip()
                                              for k, v in extra.items()):
        raise SystemExit(f"Dikkat: [models] in {path} must map names to folders or hub ids (strings).")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise SystemExit(f"Dikkat: max_chars in {path} must be a whole number of characters >= 1, got {limit!r}.")
    return {"extra": {k.strip(): v.strip() for k, v in extra.items()}, "max_chars": limit}


@lru_cache(maxsize=1)
def current() -> Hosting:
    """This process's hosting, from ``DIKKAT_MODE`` (``personal`` by default; a value that is neither mode
    is taken as ``classroom``, the safe side of a typo) and the classroom config file."""
    raw = os.environ.get("DIKKAT_MODE", "").strip().lower() or "personal"
    if raw not in MODES:
        print(f"Dikkat: DIKKAT_MODE={raw!r} is not one of {MODES}; serving in classroom mode.", file=sys.stderr)
        raw = "classroom"
    if raw == "personal":
        return Hosting()
    path = Path(os.environ.get("DIKKAT_CLASSROOM_CONFIG") or ROOT / "classroom.toml")
    config = _read_config(path)
    return Hosting(mode="classroom", max_chars=config.get("max_chars", DEFAULT_MAX_CHARS),
                   extra=config.get("extra", {}))


def offered() -> list[str]:
    """The model names the picker offers: the catalog (default first), then the teacher's list."""
    keys = [s.key for s in models.list_models()]
    return keys + [name for name in current().extra if name not in keys]


def source(name: str) -> str:
    """What :func:`models.load` is given for the model the page names: the teacher's folder or hub id for a
    name in the config file, else ``name`` itself.

    Raises:
        ModelNotAllowedError: classroom mode and ``name`` is neither a catalog key nor the teacher's.
    """
    hosting = current()
    if not hosting.classroom:
        return name
    if name in models.CATALOG:
        return name
    if name in hosting.extra:
        return hosting.extra[name]
    raise models.ModelNotAllowedError(
        f"This server offers only its listed models ({', '.join(offered())}), not {_quoted(str(name))}.",
        code="model_not_offered", name=_quoted(str(name)), offered=", ".join(offered()))


def clip(text: str) -> str:
    """``text`` cut to the classroom's ``max_chars`` (unchanged in personal mode)."""
    limit = current().max_chars
    return text if limit is None or not isinstance(text, str) else text[:limit]


_PATH = re.compile(r"(?<![\w.~-])(?:~[\w.-]*|\.{1,2})?/(?:[^\s'\"`,;:)]+)")
# a quoted path may hold spaces: the whole quoted string goes
_QUOTED_PATH = re.compile(r"""(['"`])(?:~[^'"`/]*|\.{1,2})?/[^'"`]*\1""")
# a file of weights, pickles, arrays or archives named without its folder: never the student's business
_DATA_FILE = re.compile(r"(?<![\w.-])[\w.-]+\.(?:pt|pth|bin|ckpt|pkl|pickle|joblib|safetensors|gguf|onnx|h5|msgpack|"
                        r"npz|npy|parquet|arrow|zip|tar|gz|bz2|xz|7z)(?![\w.-])", re.IGNORECASE)
# the files every model folder has: naming them tells a class nothing about the teacher's disk
STANDARD_FILES = frozenset({"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                            "special_tokens_map.json", "vocab.txt", "vocab.json", "merges.txt", "added_tokens.json",
                            "tokenizer.model", "sentencepiece.bpe.model", "spiece.model", "preprocessor_config.json"})
LISTED_MOST = 2000  # entries of a teacher's folder looked at (the folder and its subfolders), for :func:`scrub`


@lru_cache(maxsize=8)
def _private_names(folders: tuple[str, ...], tick: int) -> re.Pattern | None:
    """A pattern of the names (with a dot: ``private_backup.pt``, ``notes.txt``) of the files and folders in the
    teacher's folders and one level below, standard model files left out; read again every 30 s (``tick``)."""
    names: set[str] = set()
    for where in folders:
        root = Path(where).expanduser()
        try:
            if not root.is_dir():
                continue
            for child in root.iterdir():
                names.add(child.name)
                if child.is_dir() and len(names) < LISTED_MOST:
                    names.update(c.name for _, c in zip(range(LISTED_MOST), child.iterdir()))
                if len(names) >= LISTED_MOST:
                    break
        except OSError:
            continue
    names = {n for n in names if "." in n.strip(".") and len(n) >= 3} - STANDARD_FILES
    if not names:
        return None
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    return re.compile(rf"(?<![\w.-])(?:{alternatives})(?![\w.-])")


def scrub(message: str) -> str:
    """In classroom mode, ``message`` with every server path and every file name replaced by ``…`` and each
    teacher's folder by its name (engine messages name the folder they read, and may list its files); unchanged in
    personal mode. A file name goes when it is one of the teacher's folders (:func:`_private_names`) or the name of a
    weights, pickle, array or archive file anywhere. A hub id (``owner/name``, no leading slash) is kept."""
    hosting = current()
    if not hosting.classroom:
        return message
    # longest first: a teacher's folder that is a prefix of another must not cut the other's name; each is held as
    # a placeholder until the file names are gone, so that a teacher's name that looks like a file name stays
    teacher = sorted(hosting.extra.items(), key=lambda kv: -len(kv[1]))
    for i, (_, where) in enumerate(teacher):
        message = message.replace(where, f"\x00{i}\x00")
    private = _private_names(tuple(where for _, where in teacher), int(time.monotonic() // 30))
    if private is not None:
        message = private.sub("…", message)
    message = _DATA_FILE.sub("…", message)
    message = _QUOTED_PATH.sub(lambda m: m.group(1) + "…" + m.group(1), message)
    message = _PATH.sub("…", message)
    for i, (name, _) in enumerate(teacher):
        message = message.replace(f"\x00{i}\x00", name)
    return message


def _quoted(name: str, limit: int = 60) -> str:
    return repr(name if len(name) <= limit else name[:limit - 1] + "…")
