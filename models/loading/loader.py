"""Loading a model by catalog key, Hugging Face id or local folder, ready for attention capture."""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path

import torch

from .. import budget, capture, checks, memory
from . import cache, hub
from ..anatomy.decoder import decoder_call, readout_sees_target
from ..anatomy.probe import discover_sites
from ..capture import softmax as fallback_masks
from .catalog import CATALOG, ModelSpec, get_spec
from .construct import building
from .model import LoadedModel
from .families import auto_class, family_and_head, named_class
from ..errors import DikkatError, InvalidArgumentError, ModelOutOfMemoryError, NoUsableModelError, UnknownModelError
from .library_errors import load_failure
from .precision import dtype_note, forget_frames, half_precision_fault


def _pick_device(device: str) -> torch.device:
    if device != "auto":
        try:
            return torch.device(device)
        except (RuntimeError, TypeError) as exc:
            raise InvalidArgumentError(
                f"Unknown device {device!r}: use auto, cpu, cuda, cuda:N or mps.",
                code="unknown_device", value=repr(device)
            ) from exc
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def _pick_dtype(dtype: str | torch.dtype, device: torch.device) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype != "auto":
        found = getattr(torch, str(dtype), None)
        if not isinstance(found, torch.dtype):
            raise InvalidArgumentError(
                f"Unknown dtype {dtype!r}: use auto, float32, float16, bfloat16 or a torch.dtype.",
                code="unknown_dtype", value=repr(dtype)
            )
        return found
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "mps":
        return torch.float16
    return torch.float32


def _check_folder(folder: Path) -> None:
    """Raise :class:`NoUsableModelError` unless ``folder`` holds a config and safetensors weights."""
    if not (folder / "config.json").is_file():
        raise NoUsableModelError(f"Folder {folder} has no config.json: it is not a transformers model folder.",
                                 code="folder_no_config", folder=str(folder))
    if not any(folder.glob("*.safetensors")):
        pickles = [p.name for p in folder.glob("*.bin")] + [p.name for p in folder.glob("*.pt*")]
        if pickles:
            raise NoUsableModelError(
                f"Folder {folder} has only pickle weights ({', '.join(pickles)}); Dikkat loads safetensors "
                "or GGUF only, because pickle files can run code. Convert them to safetensors first.",
                code="folder_pickle_only", folder=str(folder), files=", ".join(pickles)
            )
        raise NoUsableModelError(f"Folder {folder} has no *.safetensors weights.",
                                 code="folder_no_safetensors", folder=str(folder))
    try:
        json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise NoUsableModelError(f"config.json in {folder} is not valid JSON: {exc}",
                                 code="folder_bad_config", folder=str(folder), detail=str(exc)) from exc


_LOCK = threading.Lock()  # guards _LOADING (and clear_cache); held only for a lookup, never while loading
_LOADING: dict[tuple, threading.Lock] = {}  # one lock per model being loaded
# Loaded models, least recently used dropped first when their measured parameters, buffers and tokenizer
# pass DIKKAT_MODEL_CACHE_GIB (default 6 GiB); a dropped model is loaded again when next asked for.
_LOADED = budget.ByteLRU(budget.budget_from_env("DIKKAT_MODEL_CACHE_GIB", 6), on_evict=memory.after_eviction)


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def is_hub_id(name: str) -> bool:
    """Whether :func:`load` would fetch ``name`` from the Hugging Face hub: not a catalog key, not an existing
    file or folder, and of the form ``owner/name``. Never raises."""
    return (isinstance(name, str) and name not in CATALOG and _existing_path(name) is None
            and bool(_HUB_ID.match(name)) and len(name) <= 96)


def _resolve(name: str) -> tuple[ModelSpec, Path | None, str | None]:
    """(spec, local folder or None, hub id or None) for a catalog key, folder or hub id."""
    if name in CATALOG:
        spec = get_spec(name)
        spec.check_installed()
        if spec.locate:
            return spec, spec.folder(), None
        return spec, cache.cached_folder(spec.key, spec.build_version, spec.build), None
    path = _existing_path(name)
    if path is not None:
        if not path.is_dir():
            if path.suffix == ".gguf":
                from .builders import convert_gguf

                folder = cache.cached_folder(
                    "gguf-" + re.sub(r"[^\w.-]", "_", str(path.resolve())), str(path.stat().st_mtime_ns),
                    lambda out: convert_gguf(path, out),
                )
                return _adhoc_spec(name, "folder"), folder, None
            raise NoUsableModelError(f"{_quoted(name)} is a file; give a model folder (config.json + safetensors) "
                                     "or a .gguf file.",
                                     code="model_path_is_file", name=_quoted(name))
        ggufs = sorted(path.glob("*.gguf"))
        if not (path / "config.json").exists() and len(ggufs) == 1:
            return _resolve(str(ggufs[0]))
        _check_folder(path)
        return _adhoc_spec(name, "folder"), path, None
    if name.startswith(("/", "./", "../", "~")) or name.endswith((".gguf", ".safetensors")):
        raise UnknownModelError(f"Folder or file {_quoted(name)} does not exist on this machine.",
                                code="model_path_missing", name=_quoted(name))
    if is_hub_id(name):  # owner/name, at most the hub's 96 characters
        return _adhoc_spec(name, "hub"), None, name
    raise UnknownModelError(
        f"Unknown model {_quoted(name)}: not a catalog key ({', '.join(CATALOG)}), not an existing folder, "
        "and not a Hugging Face id of the form owner/name.",
        code="unknown_model", name=_quoted(name), catalog=", ".join(CATALOG)
    )


def _existing_path(name: str) -> Path | None:
    """The file or folder ``name`` names on this machine, or None when there is none, including names no
    path can have: ``~user`` of an unknown user (RuntimeError), a component over the file system's 255
    bytes (OSError ENAMETOOLONG), a NUL character (ValueError)."""
    try:
        path = Path(name).expanduser()
        return path if path.exists() else None
    except (OSError, RuntimeError, ValueError):
        return None


def _quoted(name: str, limit: int = 80) -> str:
    """``'name'`` for a message, cut to ``limit`` characters."""
    return repr(name if len(name) <= limit else name[:limit - 1] + "…")


def _adhoc_spec(name: str, source: str) -> ModelSpec:
    return ModelSpec(key=name, title=name, family="", source=source)


def load(name: str, device: str = "auto", dtype: str | torch.dtype = "auto", *, device_map: str | dict | None = None,
         max_memory: dict | None = None, offload_folder: str | os.PathLike | None = None) -> LoadedModel:
    """Load a model for attention capture; cached per process and shared between threads.

    Args:
        name: a catalog key (``minilm-l6``), a local folder (transformers files with safetensors, or a
            single ``.gguf``), a ``.gguf`` file, or a Hugging Face id (``owner/name``; the only case that
            touches the network).
        device: ``"auto"`` (cuda, then mps, then cpu) or a torch device string.
        dtype: ``"auto"`` (bfloat16 on a CUDA GPU that supports it, else float16 on GPU/mps; float32 on
            CPU) or a torch dtype (or its name, e.g. ``"float32"``).
        device_map: place a model too large for one device across GPUs, CPU and disk with accelerate's
            big-model placement (``"auto"``, ``"balanced"``, ``"sequential"`` or a dict ``module name ->
            device | "cpu" | "disk"``); ``device`` is then where the inputs go (the first module's
            device). Every feature works on a placed model: capture, heads off, masks; weights offloaded to
            disk are read back for each forward pass (slow, but exact). None: the whole model on ``device``.
        max_memory: with ``device_map``: the most each device may hold, e.g. ``{0: "20GiB", "cpu": "60GiB"}``.
        offload_folder: with ``device_map``: where weights placed on ``"disk"`` are written (default: a
            folder under Dikkat's cache).

    Returns:
        :class:`LoadedModel`. Weights are never loaded from pickle files and ``trust_remote_code`` is
        never set. Loaded models are cached per process, bounded by bytes (``DIKKAT_MODEL_CACHE_GIB``,
        default 6 GiB; least recently used dropped first, see :mod:`models.budget`).

    Raises:
        UnknownModelError: not a key, folder or hub id.
        ModelNotInstalledError: catalog model whose package is missing (message has the install command).
        HubUnreachableError: hub id while offline or not found.
        NoUsableModelError: folder without config/safetensors, corrupt files, unsupported architecture; the
            library's failure sorted by :func:`models.loading.library_errors.load_failure` (code
            ``unknown_model_type``, ``folder_bad_config``, ``safetensors_corrupt``, ``weights_shape_mismatch`` ...)
            or, for a ``.gguf`` file, by :func:`models.loading.library_errors.gguf_failure` (``gguf_not_gguf``,
            ``gguf_corrupt``, ``gguf_unsupported_arch`` ...).
        NoAttentionWeightsError: the architecture exposes no attention weights.
        ModelOutOfMemoryError: out of memory while loading, or not started above the server's memory budget (code
            ``memory_budget`` or ``memory_machine``, :func:`models.memory.admit`).
        InvalidArgumentError: a ``device`` string torch does not understand, or an unknown ``dtype`` name.
    """
    import time

    if isinstance(name, os.PathLike):
        name = os.fspath(name)
    if not isinstance(name, str) or not name.strip():
        raise UnknownModelError(
            f"A model name must be a catalog key, a folder or a Hugging Face id, got {name!r}. "
            f"Catalog keys: {', '.join(CATALOG)}.",
            code="arg_model_name", value=checks.shown(name), catalog=", ".join(CATALOG)
        )
    capture.register()
    dev = _pick_device(device)
    dt = _pick_dtype(dtype, dev)
    if device_map is not None and not isinstance(device_map, (str, dict)):
        raise InvalidArgumentError(f"device_map must be 'auto', 'balanced', 'sequential' or a dict, "
                                   f"got {device_map!r}.",
                                   code="arg_choice", name="device_map",
                                   options="'auto', 'balanced', 'sequential', dict",
                                   value=checks.shown(device_map))
    placement = None
    if device_map is not None:
        placement = {"device_map": dict(device_map) if isinstance(device_map, dict) else device_map,
                     "max_memory": dict(max_memory) if max_memory else max_memory,
                     "offload_folder": str(offload_folder or cache.cache_root() / "offload" / re.sub(r"\W", "_", name))}
    key = (name, str(dev), str(dt), repr(sorted(placement.items(), key=str)) if placement else None)
    with _LOCK:
        cached = _LOADED.get(key)
        if cached is not None:
            return cached
        key_lock = _LOADING.setdefault(key, threading.Lock())
    with key_lock:  # one load per model at a time; other models load and serve meanwhile
        cached = _LOADED.get(key)
        if cached is not None:
            return cached
        start = time.perf_counter()
        spec, folder, hub_id = _resolve(name)
        if hub_id is not None:
            folder = hub.download(hub_id)
            _check_folder(folder)
        assert folder is not None  # _resolve gives a local folder or a hub id
        rebuilt = False
        while True:
            try:
                with memory.heavy("model load"):  # waits, or refuses, above the memory budget (issue 44)
                    loaded = _load_in_float32_if_half_fails(name, spec, folder, dev, dt, placement)
                break
            except (DikkatError, MemoryError):
                raise
            except Exception as exc:
                if spec.source == "package" and spec.builder and not rebuilt:
                    # A corrupt cached conversion: rebuild once (a second failure is reported as any other)
                    cache.invalidate(spec.key)
                    folder = cache.cached_folder(spec.key, spec.build_version, spec.build)
                    rebuilt = True
                    continue
                why = load_failure(exc, folder, "load_failed")
                raise NoUsableModelError(f"Cannot load '{name}' from {folder}: {exc}",
                                         code=why.code, model=name, folder=str(folder), model_type=why.model_type,
                                         detail=str(exc)) from exc
        loaded.load_seconds = time.perf_counter() - start
        loaded.load_args = {"name": name, "device": device, "dtype": dtype, "device_map": device_map,
                            "max_memory": max_memory, "offload_folder": offload_folder}
        _LOADED.put(key, loaded)
        memory.settle()  # a server's heap: the model's objects out of the cyclic collector's walks (models/memory.py)
        return loaded


def _load_in_float32_if_half_fails(name: str, spec: ModelSpec, folder: Path, dev: torch.device, dt: torch.dtype,
                                   placement: dict | None = None) -> LoadedModel:
    """:func:`_load_folder` in ``dt``; when ``dt`` is a half dtype the model cannot run in (a dtype mismatch in its
    own code, maps that rounding keeps from summing to 1: :func:`models.loading.precision.half_precision_fault`),
    once more in float32, with a ``dtype_fallback`` note in ``notes``. A float32 load that fails too raises the
    first failure."""
    try:
        return _load_folder(name, spec, folder, dev, dt, placement)
    except Exception as exc:
        kind = half_precision_fault(exc, dt)
        if kind is None:
            raise
        first = exc
    forget_frames(first)  # the half model a failed probe holds in its frames is freed first
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    try:
        loaded = _load_folder(name, spec, folder, dev, torch.float32, placement)
    except Exception:  # noqa: BLE001 - not a fault of the half dtype after all: the first failure says what is
        loaded = None
    if loaded is None:
        raise first
    loaded.notes.append(dtype_note(dt, torch.float32, kind, first))
    return loaded


def _load_folder(name: str, spec: ModelSpec, folder: Path, dev: torch.device, dt: torch.dtype,
                 placement: dict | None = None) -> LoadedModel:
    from transformers import AutoConfig, AutoTokenizer

    try:
        config = AutoConfig.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False)
    except (ValueError, KeyError, OSError) as exc:
        why = load_failure(exc, folder, "config_unreadable")
        raise NoUsableModelError(f"Cannot read the configuration of '{name}' in {folder}: {exc}",
                                 code=why.code, model=name, folder=str(folder), model_type=why.model_type,
                                 detail=str(exc)) from exc
    family, head = family_and_head(config)
    auto = named_class(config, auto_class(family, head, config))
    kwargs = dict(local_files_only=True, trust_remote_code=False, use_safetensors=True, dtype=dt)
    if placement:
        kwargs.update({k: v for k, v in placement.items() if v is not None})
    try:
        with building():  # transformers' loading patches the library process-wide (models/loading/construct.py)
            try:
                model = auto.from_pretrained(str(folder), attn_implementation=capture.ATTN_IMPLEMENTATION, **kwargs)
            except (ValueError, KeyError) as exc:
                # Families with their own table of attention classes (GPT-Neo ...) reject custom names:
                # they take the fallback path (eager + output_attentions).
                if capture.ATTN_IMPLEMENTATION not in str(exc) and "attn_implementation" not in str(exc):
                    raise
                model = auto.from_pretrained(str(folder), attn_implementation="eager", **kwargs)
    except torch.OutOfMemoryError as exc:
        raise ModelOutOfMemoryError(f"Out of memory loading '{name}' on {dev}: {exc}",
                                    code="oom_loading", model=name, device=str(dev)) from exc
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        why = load_failure(exc, folder, "weights_unreadable")
        raise NoUsableModelError(f"Cannot load the weights of '{name}' from {folder}: {exc}",
                                 code=why.code, model=name, folder=str(folder), model_type=why.model_type,
                                 detail=str(exc)) from exc
    if placement:
        dev = _input_device(model, dev)
    else:
        try:
            model.to(dev)
        except torch.OutOfMemoryError as exc:
            raise ModelOutOfMemoryError(f"Out of memory moving '{name}' to {dev}: {exc}",
                                        code="oom_loading", model=name, device=str(dev)) from exc
    model.eval()
    processor = None
    if config.model_type == "whisper" and family == "encoder-decoder":
        from transformers import AutoProcessor

        processor = AutoProcessor.from_pretrained(str(folder), local_files_only=True)
        tokenizer = processor.tokenizer
    else:
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False)
        except Exception as exc:
            why = load_failure(exc, folder, "tokenizer_unreadable")
            raise NoUsableModelError(f"Cannot load the tokenizer of '{name}' from {folder}: {exc}",
                                     code=why.code, model=name, folder=str(folder), model_type=why.model_type,
                                     detail=str(exc)) from exc
        # Without tokenizer files, transformers builds an empty tokenizer of the config's class (only
        # [PAD]/[UNK]/... ): every word would silently become [UNK].
        special = set(tokenizer.all_special_ids)
        if not any(i not in special for i in tokenizer.get_vocab().values()):
            raise NoUsableModelError(
                f"Folder {folder} has no tokenizer files (tokenizer.json, vocab.txt, tokenizer.model ...): its "
                "tokenizer knows only special tokens, so every word would be read as unknown. Save the tokenizer "
                "next to the weights (tokenizer.save_pretrained(folder)).",
                code="folder_no_tokenizer", folder=str(folder)
            )
    if spec.source != "package":
        spec = ModelSpec(key=name, title=name, family=family, source=spec.source,
                         layers=0, heads=0, licence="see the model card")
    loaded = LoadedModel(
        name=name, spec=spec, model=model, tokenizer=tokenizer, device=dev, dtype=dt, family=family,
        head=head, capture_path="interface", sites=[], folder=folder, processor=processor,
    )
    probed = discover_sites(loaded)
    loaded.call_kwargs = decoder_call(loaded, probed)
    readout_sees_target(loaded)  # XLNet: its maps stay, its "next-token" prediction would read the next token
    if loaded.capture_path == "fallback" or loaded.fallback_stacks:
        # the mask probe registers hooks and runs the model: only here, before the model is shared between
        # sessions (a probe beside another session's forward pass saw its modules and broke its hooks)
        fallback_masks.mask_support(loaded)
    return loaded


def _input_device(model, default: torch.device) -> torch.device:
    """Where a model placed by accelerate reads its inputs: the first module's device in its
    ``hf_device_map`` that is not ``"disk"`` (an offloaded first module runs on ``default``)."""
    for where in (getattr(model, "hf_device_map", None) or {}).values():
        if where not in ("disk", "meta"):
            return torch.device(f"cuda:{where}" if isinstance(where, int) else where)
    return default


def clear_cache() -> None:
    """Forget every loaded model of this process (tests, memory pressure)."""
    with _LOCK:
        _LOADED.clear()


os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
