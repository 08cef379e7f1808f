"""What went wrong when a library (transformers, safetensors, gguf) could not read a model's files.

The loader wraps a library's exception in a :class:`~models.errors.NoUsableModelError`; the functions here sort
the exception into a known kind, each with its own message code (``errmsg_<code>`` in
``assets/i18n/errors.json``), so the interface can say what failed in its own language without quoting the
library's English (issue 33). The English message (``str(exc)``) still carries the library's text.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import NamedTuple

GGUF_MAGIC = b"GGUF"

# every code :func:`load_failure` returns (the first four from the exception, the rest are the callers' defaults)
LOAD_CODES = ("folder_bad_config", "safetensors_corrupt", "weights_shape_mismatch", "config_no_model_type",
              "unknown_model_type", "config_unreadable", "weights_unreadable", "tokenizer_unreadable", "load_failed")
# every code :func:`gguf_failure` returns
GGUF_CODES = ("gguf_corrupt", "gguf_unsupported_arch", "gguf_unreadable")

_SAFETENSORS = re.compile(r"deserializ\w* header|incomplete metadata|HeaderTooLarge|MetadataIncompleteBuffer|"
                          r"InvalidHeader", re.IGNORECASE)
_SHAPES = re.compile(r"ignore_mismatched_sizes|size mismatch|shape mismatch", re.IGNORECASE)


class LoadFailure(NamedTuple):
    """The kind of a loading failure: ``code`` (a ``errmsg_`` suffix) and the config's ``model_type`` ("" when
    the folder's config.json names none or cannot be read)."""

    code: str
    model_type: str


class GgufFailure(NamedTuple):
    """The kind of a GGUF conversion failure: ``code`` and the file's ``general.architecture`` ("" when
    unknown)."""

    code: str
    architecture: str


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from or during (at most 8)."""
    out: list[BaseException] = []
    link: BaseException | None = exc
    while link is not None and link not in out and len(out) < 8:
        out.append(link)
        link = link.__cause__ or link.__context__
    return out


def _config(folder: Path | None):
    """The folder's config.json as parsed JSON; None when it is missing; ``ValueError`` when it is not JSON."""
    if folder is None:
        return None
    try:
        return json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except OSError:
        return None
    except ValueError as exc:
        return exc


def _known_model_type(model_type: str) -> bool:
    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    except ImportError:  # pragma: no cover - transformers is a dependency
        return True
    return model_type in CONFIG_MAPPING_NAMES


def load_failure(exc: BaseException, folder: Path | None, default: str) -> LoadFailure:
    """Sort an exception raised while transformers loaded the model in ``folder`` into a known kind.

    Kinds (in this order): ``folder_bad_config`` (config.json is not valid JSON), ``safetensors_corrupt`` (a
    safetensors file cut short or not safetensors), ``weights_shape_mismatch`` (weights of other shapes than
    the config says), ``config_no_model_type`` (config.json names no ``model_type``), ``unknown_model_type``
    (a ``model_type`` this transformers does not know); otherwise ``default`` (the stage that failed:
    ``config_unreadable``, ``weights_unreadable``, ``tokenizer_unreadable``, ``load_failed``).

    Never raises.
    """
    chain = _chain(exc)
    texts = " ".join(str(e) for e in chain)
    names = {type(e).__name__ for e in chain}
    modules = {type(e).__module__.split(".")[0] for e in chain}
    cfg = _config(folder)
    model_type = str(cfg.get("model_type") or "") if isinstance(cfg, dict) else ""
    if any(isinstance(e, json.JSONDecodeError) for e in chain) or isinstance(cfg, ValueError):
        return LoadFailure("folder_bad_config", model_type)
    if "SafetensorError" in names or "safetensors" in modules or _SAFETENSORS.search(texts):
        return LoadFailure("safetensors_corrupt", model_type)
    if _SHAPES.search(texts):
        return LoadFailure("weights_shape_mismatch", model_type)
    if cfg is not None and not model_type and "model_type" in texts:
        return LoadFailure("config_no_model_type", model_type)
    if model_type and (not _known_model_type(model_type) or "does not recognize this architecture" in texts):
        return LoadFailure("unknown_model_type", model_type)
    return LoadFailure(default, model_type)


def is_gguf(path: Path) -> bool:
    """Whether ``path`` starts with the 4 magic bytes of a GGUF file (False for a file that cannot be read)."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == GGUF_MAGIC
    except OSError:
        return False


def gguf_failure(path: Path, exc: BaseException) -> GgufFailure:
    """Sort an exception raised while transformers read the GGUF file ``path`` (which starts with the GGUF
    magic) into a known kind: ``gguf_corrupt`` (the gguf reader cannot parse its header and tables: truncated
    or damaged), ``gguf_unsupported_arch`` (an architecture transformers cannot load from GGUF), else
    ``gguf_unreadable``. Never raises."""
    try:
        from gguf import GGUFReader

        reader = GGUFReader(str(path))
        field = reader.fields.get("general.architecture")
        architecture = bytes(field.parts[field.data[0]]).decode("utf-8") if field is not None else ""
    except Exception:
        return GgufFailure("gguf_corrupt", "")
    if not architecture:
        return GgufFailure("gguf_corrupt", "")
    try:
        from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES
    except ImportError:  # pragma: no cover - transformers is a dependency
        GGUF_SUPPORTED_ARCHITECTURES = []
    text = " ".join(str(e) for e in _chain(exc))
    if (architecture not in GGUF_SUPPORTED_ARCHITECTURES or "is not supported yet" in text
            or "Unknown gguf model_type" in text):
        return GgufFailure("gguf_unsupported_arch", architecture)
    return GgufFailure("gguf_unreadable", architecture)
