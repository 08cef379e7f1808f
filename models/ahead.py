"""Results computed ahead: the slow computations of the bundled models, done once and kept on disk (issue 29 point 5,
issue 27).

A class must not wait for (or recompute, once per student or per replica) the experiments of the Experiments page or
the Head pruning page's pruning curve: ``python -m models ahead`` (``make ahead``; started in the background at the
first start of a classroom server by ``deploy/launch.py``) computes every :func:`default_jobs` entry that is not on
disk yet, and the pages read them with :func:`load` before offering to run anything. A page that does compute one
(outside classroom mode) :func:`save`\\ s it too.

What is kept, under :func:`root` (``$DIKKAT_AHEAD_ROOT``, else ``<cache>/ahead``)::

    <kind>/<model>/<digest>.json   the result's fields as JSON; numpy arrays named in it ...
    <kind>/<model>/<digest>.npz    ... are stored here (``np.savez``, read back with ``allow_pickle=False``)

``digest`` hashes the job's parameters, the device kind and dtype the model ran in, the package versions of torch and
transformers, and the source of every module of the engine (``models/**/*.py``): a result computed by other code, on
another device or in another precision is never shown as this one (:func:`engine_digest`). Nothing is unpickled: a
result is a tree of dataclasses of the ``models`` package (named in the JSON and checked to be one before it is
built), lists, tuples, dicts, numbers, strings and arrays. A field that holds a live object (a model, an
:class:`models.Analysis`, a tensor) is not kept and reads back as ``None`` (the pages do not use them; e.g.
``ClipAlignment.audio``). Each file is written to a temporary name and renamed, the ``.npz`` first, so a reader sees a
complete result or none. The ``.json`` file also names its format and lists each array's dtype and shape: a file is
read back only once its sizes, format, job, arrays and types are checked (:mod:`models.ahead_read`; a bad file is
treated as missing, with a warning, never shown).
"""

from __future__ import annotations

import dataclasses
import fcntl
import functools
import hashlib
import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast
from collections.abc import Callable, Iterator

import numpy as np

from . import ahead_read, checks
from .errors import DikkatError

__all__ = ["Job", "compute", "compute_ahead", "default_jobs", "engine_digest", "ignored", "load", "root", "save"]

ENGINE = Path(__file__).resolve().parent
KINDS = ("experiment", "pruning_curve", "atlas")
SENTENCES = ENGINE.parent / "assets" / "sentences.json"  # the Head pruning page's sentence set (its curve's texts)
RANDOM_ORDERS = 3  # the Head pruning page's random orders for its curve (views/pruning.py reads it from here)
_LOG = logging.getLogger(__name__)
_IGNORED: dict[tuple, str] = {}  # (json path, mtime_ns, size) of a file load found bad -> why


def root() -> Path:
    """``$DIKKAT_AHEAD_ROOT``, else ``<cache>/ahead`` (:func:`models.loading.cache.cache_root`); created on first
    use."""
    from .loading.cache import cache_root

    folder = Path(os.environ["DIKKAT_AHEAD_ROOT"]) if os.environ.get("DIKKAT_AHEAD_ROOT") else cache_root() / "ahead"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@functools.lru_cache(maxsize=1)
def engine_digest() -> str:
    """A hash of what a result depends on besides its parameters: every ``models/**/*.py`` source file (path and
    bytes) and the versions of torch and transformers. 16 hex digits."""
    import torch
    import transformers

    h = hashlib.sha256(f"torch={torch.__version__};transformers={transformers.__version__}".encode())
    for path in sorted(ENGINE.rglob("*.py")):
        h.update(str(path.relative_to(ENGINE)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


# ------------------------------------------------------------------------------------------------ the jobs


@dataclass(frozen=True)
class Job:
    """One result to compute ahead.

    Attributes:
        kind: ``experiment`` (``params``: ``{"key": <experiment key>}``), ``pruning_curve`` (``params``:
            ``{"texts": [...], "random_orders": int}``: the Head pruning page's curve, importance by gradient) or
            ``atlas`` (``params``: ``{"corpus": "en" | "tr"}``: the head atlas of a shipped corpus with the default
            settings and its causal labels, as ``make atlases`` builds it; kept in the atlas store,
            :mod:`models.atlas.store`, not in :func:`root`).
        model: the catalog model it runs on.
        params: what else the result depends on (JSON data).
    """

    kind: str
    model: str
    params: dict = field(default_factory=dict)

    def label(self) -> str:
        """``kind model key`` for progress lines."""
        return " ".join(str(x) for x in (self.kind, self.model, self.params.get("key", "")) if x)


def curve_texts() -> list[str]:
    """The texts of the Head pruning page's curve: every sentence of ``assets/sentences.json``."""
    return [s["text"] for s in json.loads(SENTENCES.read_text(encoding="utf-8"))["sentences"]]


def curve_job(model: str, texts: list[str] | None = None, random_orders: int = RANDOM_ORDERS) -> Job:
    """The :class:`Job` of a pruning curve on ``model`` over ``texts`` (default :func:`curve_texts`)."""
    return Job("pruning_curve", model, {"texts": list(curve_texts() if texts is None else texts),
                                        "random_orders": int(random_orders)})


def experiment_job(key: str, model: str) -> Job:
    """The :class:`Job` of experiment ``key`` (:data:`models.experiments.EXPERIMENTS`) on ``model``."""
    return Job("experiment", model, {"key": key})


def atlas_job(model: str, corpus: str) -> Job:
    """The :class:`Job` of the head atlas of ``model`` on the shipped corpus ``corpus`` (``en``, ``tr``)."""
    return Job("atlas", model, {"corpus": corpus})


def default_jobs(installed_only: bool = True) -> list[Job]:
    """What ``python -m models ahead`` computes: every experiment on each of its bundled models, then the pruning
    curve of each bundled model the Head pruning page offers first (the decoder and the encoder), then the head
    atlases of those two on both shipped corpora (the longest; ``make atlases``). Models not installed are left out
    when ``installed_only``."""
    from . import get_spec
    from .experiments import EXPERIMENTS

    jobs = [experiment_job(e.key, m) for e in EXPERIMENTS.values() for m in e.models]
    jobs += [curve_job(m) for m in ("smollm2-135m", "minilm-l6")]
    jobs += [atlas_job(m, c) for m in ("minilm-l6", "smollm2-135m") for c in ("en", "tr")]
    return [j for j in jobs if not installed_only or get_spec(j.model).installed]


def compute(job: Job, loaded, progress: Callable[[float], None] | None = None):
    """Run ``job`` on ``loaded`` (the model ``job.model``) and return its result (not saved).

    Raises:
        InvalidArgumentError: an unknown kind or experiment. And what the computation raises.
    """
    kind = checks.choice("kind", job.kind, KINDS)
    if kind == "experiment":
        from . import experiments

        return experiments.run(job.params["key"], loaded, progress=progress)
    if kind == "atlas":
        from . import atlas

        built = atlas.build_atlas(loaded, atlas.shipped_corpus(job.params["corpus"]))  # resumes; at once when complete
        if built.labels() is None:
            atlas.causal_labels(loaded, built)  # kept with the atlas
        return built
    from . import pruning

    texts, orders = list(job.params["texts"]), int(job.params["random_orders"])
    importance = pruning.gradient_importance(loaded, texts)
    curve = pruning.pruning_curve(loaded, texts, importance, random_orders=orders, progress=progress)
    # the whole run's time (importance + curve), as the page's estimate counts it
    return dataclasses.replace(curve, seconds=importance.seconds + curve.seconds)


# ------------------------------------------------------------------------------------------------ the files


def _where(job: Job, device: str, dtype: str) -> Path:
    checks.choice("kind", job.kind, KINDS)
    what = json.dumps({"kind": job.kind, "model": job.model, "params": job.params, "device": device,
                       "dtype": dtype, "engine": engine_digest()}, sort_keys=True, ensure_ascii=True)
    digest = hashlib.sha256(what.encode()).hexdigest()[:24]
    model = "".join(c if c.isalnum() or c in "-_." else "_" for c in job.model)
    return root() / job.kind / model / digest


def _device_dtype(loaded) -> tuple[str, str]:
    """The device kind (``cpu``, ``cuda``) and dtype (``float32``) a result of ``loaded`` was computed in."""
    import torch

    device = torch.device(loaded.device).type
    dtype = str(getattr(loaded, "dtype", None) or next(loaded.model.parameters()).dtype).replace("torch.", "")
    return device, dtype


class _Writer:
    """Turns a result into JSON data, moving its arrays aside (:meth:`encode`)."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}

    def encode(self, value: Any) -> Any:
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, (int, float)):
            return value if isinstance(value, int) or np.isfinite(value) else {"__float__": repr(float(value))}
        if isinstance(value, np.generic):
            return self.encode(value.item())
        if isinstance(value, np.ndarray):
            if value.dtype.hasobject:
                return {"__list__": self.encode(value.tolist())}
            name = f"a{len(self.arrays)}"
            self.arrays[name] = value
            return {"__array__": name}
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            cls = type(value)
            if not cls.__module__.startswith("models.") or isinstance(value, ahead_read.live_types()):
                return {"__dropped__": cls.__qualname__}
            return {"__dataclass__": f"{cls.__module__}:{cls.__qualname__}",
                    "fields": {f.name: self.encode(getattr(value, f.name)) for f in dataclasses.fields(value)}}
        if isinstance(value, tuple):
            return {"__tuple__": [self.encode(v) for v in value]}
        if isinstance(value, list):
            return [self.encode(v) for v in value]
        if isinstance(value, dict):
            return {"__dict__": [[self.encode(k), self.encode(v)] for k, v in value.items()]}
        return {"__dropped__": type(value).__qualname__}  # a live object: a model, an analysis, a tensor


def _replace(path: Path, write: Callable[[Path], object]) -> None:
    """Write ``path`` through a temporary file in its folder, renamed into place when complete."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def save(job: Job, loaded, result) -> Path:
    """Keep ``result`` of ``job`` (computed on ``loaded``) on disk; returns the ``.json`` file's path.

    Raises:
        InvalidArgumentError: an unknown kind.
    """
    where = _where(job, *_device_dtype(loaded))
    writer = _Writer()
    encoded = writer.encode(result)
    data = {"format": ahead_read.FORMAT, "job": {"kind": job.kind, "model": job.model, "params": job.params},
            "saved": time.time(), "arrays": ahead_read.manifest(writer.arrays), "result": encoded}

    def write_npz(tmp: Path) -> None:
        with open(tmp, "wb") as fh:
            np.savez(fh, **cast("dict[str, Any]", writer.arrays))  # numpy's stubs check **kwds against allow_pickle

    _replace(where.with_suffix(".npz"), write_npz)
    _replace(where.with_suffix(".json"), lambda tmp: tmp.write_text(json.dumps(data), encoding="utf-8"))
    return where.with_suffix(".json")


def load(job: Job, loaded) -> Any | None:
    """The result of ``job`` kept on disk for ``loaded``'s device and dtype and this engine, or None when there is
    none, or when what is there is not a result :func:`save` wrote for this job: every size is checked before
    anything is read or inflated, then the format, the job, the arrays and the result's types
    (:func:`models.ahead_read.read`). A bad file is then treated as missing (computed again, and replaced, when
    asked), with a warning on the ``models.ahead`` logger and its reason kept for :func:`ignored`.

    Returns:
        the result as :func:`compute` returned it, fields that held live objects set to None.

    Raises:
        InvalidArgumentError: an unknown kind.
    """
    where = _where(job, *_device_dtype(loaded))
    path = where.with_suffix(".json")
    try:
        stat = path.stat()
    except OSError:
        return None  # not computed
    stamp = (str(path), stat.st_mtime_ns, stat.st_size)
    if stamp in _IGNORED:
        return None  # found bad before: not read again until it changes
    try:
        return ahead_read.read(path, where.with_suffix(".npz"), job, loaded)
    except FileNotFoundError:
        return None  # removed meanwhile
    except Exception as exc:  # noqa: BLE001 - a file on disk is input: whatever is wrong with it, it is no result
        reason = str(exc) if isinstance(exc, ahead_read.BadResultFile) else f"{type(exc).__name__}: {exc}"
        _IGNORED[stamp] = reason[:300]
        while len(_IGNORED) > 256:
            _IGNORED.pop(next(iter(_IGNORED)))
        _LOG.warning("ignored the result computed ahead in %s: %s", path, reason[:300])
        return None


def ignored(job: Job, loaded) -> str | None:
    """Why the file kept for ``job`` on ``loaded`` was ignored by :func:`load` (in English, for a log), or None when
    there is none or it was not found bad."""
    path = _where(job, *_device_dtype(loaded)).with_suffix(".json")
    try:
        stat = path.stat()
    except OSError:
        return None
    return _IGNORED.get((str(path), stat.st_mtime_ns, stat.st_size))


def saved_at(job: Job, loaded) -> float | None:
    """When ``job``'s result for ``loaded`` was kept (seconds since the epoch), or None."""
    try:
        return _where(job, *_device_dtype(loaded)).with_suffix(".json").stat().st_mtime
    except OSError:
        return None


# ------------------------------------------------------------------------------------------------ the run


def _lock() -> Iterator[bool]:
    """Hold ``<root>/.lock`` (one computing process per machine; replicas and a ``make ahead`` share it)."""
    fh = open(root() / ".lock", "w")  # noqa: SIM115  (closed in the finally below, after the unlock)
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.close()
        yield False
        return
    try:
        yield True
    finally:
        fcntl.flock(fh, fcntl.LOCK_UN)
        fh.close()


def _kept(job: Job, loaded) -> bool:
    """Whether ``job``'s result for ``loaded`` is on disk, complete (an atlas: every text read, labels tested)."""
    if job.kind != "atlas":
        return saved_at(job, loaded) is not None and load(job, loaded) is not None
    from . import atlas
    from .atlas.atlas import Atlas
    from .atlas.build import REPEATS, check_settings

    settings = check_settings(loaded, None, None, REPEATS, None)  # what build_atlas's defaults make
    folder = atlas.folder_for(loaded, atlas.shipped_corpus(job.params["corpus"]), settings)
    if not (folder / "manifest.json").is_file():
        return False
    built = Atlas(folder)
    return built.complete and built.labels() is not None


def compute_ahead(jobs: list[Job] | None = None, *, device: str = "auto", force: bool = False,
                  log: Callable[[str], None] | None = None, release: bool = False) -> dict[str, int]:
    """Compute and :func:`save` every job of ``jobs`` (default :func:`default_jobs`) not on disk yet (all of them
    when ``force``), one model loaded at a time (``release``: the process's model cache is emptied after each, as the
    command line does). Only one process of the machine computes at once: another call while one runs returns at
    once (``{"busy": 1}``). A job that fails is reported through ``log`` and skipped.

    Returns:
        counts: ``done`` (computed now), ``kept`` (already on disk), ``failed``, ``busy``.
    """
    from .loading.loader import clear_cache, load as load_model

    jobs = default_jobs() if jobs is None else list(jobs)
    say = log or (lambda line: None)
    counts = {"done": 0, "kept": 0, "failed": 0, "busy": 0}
    lock = _lock()
    if not next(lock):
        counts["busy"] = 1
        say("another process is computing ahead; nothing to do here")
        return counts
    try:
        by_model: dict[tuple[bool, str], list[Job]] = {}
        for job in jobs:  # the atlases last: the longest, and no lesson step waits for them
            by_model.setdefault((job.kind == "atlas", job.model), []).append(job)
        for (_, model), todo in by_model.items():
            try:
                loaded = load_model(model, device=device)
            except DikkatError as exc:
                counts["failed"] += len(todo)
                say(f"{model}: not loaded: {exc}")
                continue
            for job in todo:
                if not force and _kept(job, loaded):
                    counts["kept"] += 1
                    continue
                start = time.perf_counter()
                try:
                    result = compute(job, loaded)
                    if job.kind != "atlas":  # an atlas is kept by its own store as it is built
                        save(job, loaded, result)
                except DikkatError as exc:
                    counts["failed"] += 1
                    say(f"{job.label()}: failed: {exc}")
                    continue
                counts["done"] += 1
                say(f"{job.label()}: {time.perf_counter() - start:.1f} s")
            del loaded
            if release:
                clear_cache()
    finally:
        next(lock, None)
    return counts
