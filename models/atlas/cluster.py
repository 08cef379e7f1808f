"""The atlas on Ray: a corpus of 10k-1M texts read by Ray actors that each hold the model, on one machine or a
cluster (issue 46).

Ray (https://docs.ray.io) is imported only here, and only when a build on Ray is asked for; without it the
in-process :func:`models.atlas.build_atlas` is the default. The same code runs on this machine
(``address="local"``: Ray starts a local instance with ``workers`` CPUs) and on a cluster (``"auto"`` on a node
of a cluster started with ``ray start --head``, or ``"ray://HOST:10001"`` through Ray Client).

How a build goes:

1. The driver opens the corpus in a stream (:class:`models.atlas.stream.CorpusFile`; one pass checks it and counts
   its texts, characters and digest before any work) and starts one actor per worker, each loading the model
   (a GPU actor where the cluster has GPUs). The first actor checks the settings and the corpus's language and
   makes the repeated random sequences, so the driver never loads the model.
2. The items (the corpus's texts, then the repeated sequences) are cut into shards of ``shard_texts``
   consecutive items; the driver keeps two shards in flight per actor and reads the file only as far as that
   needs. An actor analyses each text as the in-process build does (:func:`models.atlas.build.read_item`) and
   writes the shard's Parquet part itself, named after the shard (:func:`models.atlas.store.shard_part`), to a
   temporary name first: the store is a folder every node can write (``root``).
3. **Exactly once.** A shard whose actor dies is run again by Ray (the actor restarts and its tasks are retried:
   ``max_restarts``, ``max_task_retries``); a shard run twice writes the same part name again, so no text is
   counted twice. An interrupted build resumes: shards whose texts are all in complete parts are skipped, and the
   others are read again (only their texts not yet in).
4. **Progress** comes from the workers: each shard's texts, tokens read and tokens cut;
   :class:`models.atlas.eta.Eta` turns them into tokens per second and the time left.

The atlas written is the in-process one: same folder (model, corpus digest, settings), same parts' columns,
DuckDB queries unchanged; its values equal the in-process build's to float tolerance (tests/bundled/test_atlas_ray.py).
"""

from __future__ import annotations

import os
import resource
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from collections.abc import Callable

from .. import checks
from ..errors import DikkatError, InvalidArgumentError
from . import store
from .build import PART_TEXTS, REPEATS, Settings, finish, folder_for, new_manifest
from .corpus import Corpus
from .eta import Eta
from .stream import CorpusFile

#: the environment a worker needs from the driver (where the cache, models and atlases are; offline hub)
_ENV_PREFIXES = ("DIKKAT_", "HF_", "TRANSFORMERS_")
#: restarts of a dead actor, and retries of its tasks, before the build gives up (it resumes when run again)
RETRIES = 3


@dataclass
class RayRun:
    """A build on Ray as its progress callback sees it.

    Attributes:
        eta: texts, tokens, tokens per second and time left (:class:`models.atlas.eta.Eta`).
        workers: actors. pids: each actor's process id now. restarts: actors found restarted (a new process id).
        startup_seconds: from the call to every actor holding the model. shards: shards written this run.
        cut: ``(grp, index, tokens cut)`` of every text cut to ``max_tokens`` this run.
        peak_mib: each worker process's peak resident memory (MiB, by process id). busy_seconds: the workers'
        time analysing texts, summed (wall time of each text's analysis).
    """

    eta: Eta
    workers: int = 0
    pids: list[int] = field(default_factory=list)
    restarts: int = 0
    startup_seconds: float = 0.0
    shards: int = 0
    cut: list[tuple[str, int, int]] = field(default_factory=list)
    peak_mib: dict[int, float] = field(default_factory=dict)
    busy_seconds: float = 0.0


RayProgress = Callable[[int, int, "float | None", RayRun], None]


class _Worker:
    """A Ray actor holding the model (made a Ray actor class by :func:`_actor`)."""

    def __init__(self, model: str, device: str, threads: int) -> None:
        import torch

        from ..loading.loader import load

        torch.set_num_threads(max(1, threads))
        self.loaded = load(model, device=device)

    def pid(self) -> int:
        return os.getpid()

    def plan(self, head: Corpus, max_tokens, limit, repeats, repeat_length) -> dict:
        """Settings checked, the corpus's language checked on its first texts, the repeated sequences made."""
        from .build import check_settings, model_facts, repeat_items
        from .corpus import check_language

        settings = check_settings(self.loaded, max_tokens, limit, repeats, repeat_length)
        language = check_language(self.loaded, head)
        items, why = repeat_items(self.loaded, head.audio, settings)
        return {"settings": settings, "model": model_facts(self.loaded), "language": language,
                "repeats": items, "no_repeats": why}

    def run(self, folder: str, part: str, corpus: SimpleNamespace, items: list, max_tokens: int) -> dict:
        """Read a shard's items and write its part; ``{"pid", "texts": [(grp, index, tokens, truncated, seconds)],
        "peak_mib", "seconds"}``."""
        from .build import _extend, read_item

        tables: tuple[dict, dict, dict] = ({}, {}, {})
        for grp, index, text in items:
            for into, rows in zip(tables, read_item(self.loaded, corpus, grp, index, text, max_tokens)):
                _extend(into, rows)
        store.write_part(Path(folder), part, *tables)
        t = tables[2]
        return {"pid": os.getpid(), "texts": list(zip(t["grp"], t["text"], t["tokens"], t["truncated"], t["seconds"])),
                "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "seconds": float(sum(t["seconds"]))}


    def labels(self, folder: str, heads: list, options: dict):
        """The causal tests of the candidates among ``heads`` (:func:`models.atlas.causal_labels`, not saved)."""
        from .atlas import Atlas
        from .labels import causal_labels

        return causal_labels(self.loaded, Atlas(folder), save=False, heads=heads, **options)


def _actor(ray):
    return ray.remote(max_restarts=RETRIES, max_task_retries=RETRIES)(_Worker)


def check_address(address) -> str:
    """``address`` if Ray can take it (``local``, ``auto``, ``ray://HOST:PORT``).

    Raises:
        InvalidArgumentError: another value (code ``ray_address``).
    """
    if not isinstance(address, str) or not (address in ("local", "auto") or address.startswith("ray://")):
        raise InvalidArgumentError(
            f"Ray address {checks.shown(address)}: use local, auto or ray://HOST:PORT.", code="ray_address",
            value=str(address)[:80])
    return address


#: Ray's authentication settings (environment)
_AUTH = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")
_ONE = threading.Lock()
#: the token of the local instances this process starts (one per process: Ray keeps the token it read)
_TOKEN = secrets.token_hex(32)
#: the local head's process: starts Ray, prints the address to join, and holds Ray until its stdin closes (the
#: driver ended, or died)
_HEAD = """
import sys, ray
ray.init(num_cpus=int(sys.argv[1]), include_dashboard=False, configure_logging=False, _temp_dir=sys.argv[2])
print(ray.get_runtime_context().gcs_address, flush=True)
sys.stdin.read()
ray.shutdown()
"""


@contextmanager
def session(address: str, workers: int | None):
    """Ray joined for the block: ``"local"`` starts a local instance of ``workers`` CPUs (default: this machine's)
    that ends with the block, ``"auto"`` joins the cluster this node belongs to, ``"ray://HOST:PORT"`` a cluster
    through Ray Client. Ray already joined in this process is used as it is (and left joined).

    The local instance is started by a process of its own (:data:`_HEAD`), not by ``ray.init`` here: Ray forks its
    servers with a Python ``preexec_fn``, which can crash in a process with many threads (the app's: a
    segmentation fault in the forked child, seen on the Atlas page); this process only joins it. The workers get
    the driver's ``DIKKAT_*``/``HF_*``/``TRANSFORMERS_*`` environment and this checkout on their ``PYTHONPATH``
    (on a cluster: Dikkat at the same path on every node).

    Raises:
        InvalidArgumentError: another address (code ``ray_address``). DikkatError: the local instance did not
        start (code ``ray_start``); no cluster to join at the address, or Ray Client (``ray://``) without the
        ``ray[client]`` extra (code ``ray_connect``, with Ray's first line in the English message).
    """
    check_address(address)
    import ray

    if ray.is_initialized():
        yield
        return
    root = str(Path(__file__).resolve().parents[2])
    env = {k: v for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    options: dict[str, Any] = {"runtime_env": {"env_vars": env}, "log_to_driver": False, "configure_logging": False}
    with _ONE:  # Ray is joined once per process: a second build waits for the first
        head, saved = None, {k: os.environ.get(k) for k in _AUTH}
        try:
            if address == "local":
                # token authentication (Ray's default for a local cluster since 2.52), with a token of this
                # instance's own: the head listens on the node's address, where anyone could otherwise run code
                auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": _TOKEN}
                # its own temporary folder: Ray records the machine's current cluster in its default one, where
                # another process's ``auto`` would find this private instance and try to join it
                temp = tempfile.mkdtemp(prefix="dikkat-ray-")
                head = subprocess.Popen([sys.executable, "-c", _HEAD, str(workers or os.cpu_count() or 1), temp],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                        env={**os.environ, **env, **auth}, text=True)
                address = (head.stdout.readline() if head.stdout else "").strip()
                if not address:
                    raise DikkatError("Ray did not start on this machine.", code="ray_start")
                _set_auth(auth)
            if address == "auto":
                address = _started_cluster()
            try:
                ray.init(address=address, **options)
            # what ray.init raises for a cluster it cannot join
            except (ConnectionError, RuntimeError, ValueError) as exc:
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
                raise DikkatError(f"Could not join the Ray cluster at {address}: {first}", code="ray_connect",
                                  address=address[:120]) from None
            if head is not None:  # Ray has read the token: the environment other programs inherit goes back
                _set_env(saved)
            yield
        finally:
            if ray.is_initialized():
                ray.shutdown()
            if head is not None:
                if head.stdin:
                    head.stdin.close()
                try:
                    head.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    head.kill()
                shutil.rmtree(temp, ignore_errors=True)
                _set_auth(saved)


def _set_env(values: dict) -> None:
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _started_cluster() -> str:
    """The address ``auto`` means: ``RAY_ADDRESS``, else the cluster ``ray start`` last started on this node (as
    Ray reads it), never any Ray process found running (Ray's own ``auto`` falls back to those: another build's
    private local instance among them, which it cannot join).

    Raises:
        DikkatError: neither (code ``ray_connect``).
    """
    from ray._private.utils import read_ray_address

    found = os.environ.get("RAY_ADDRESS") or read_ray_address()
    if not found:
        raise DikkatError("Could not join the Ray cluster at auto: no RAY_ADDRESS and no cluster started with "
                          "`ray start --head` on this node.", code="ray_connect", address="auto")
    return found


def _set_auth(values: dict) -> None:
    """Ray's authentication settings of this process (None: unset), read again by Ray (its configuration is
    read once, at import: ``authentication_token_setup._enable_token_auth`` reads it again the same way)."""
    # both live in the compiled module; Ray's _raylet.pyi stub lists neither
    from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]

    _set_env(values)
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def build_atlas_ray(model: str, corpus: Corpus | CorpusFile | str | Path, *, address: str = "local",
                    workers: int | None = None, max_tokens: int | None = None, limit: int | None = None,
                    repeats: int = REPEATS, repeat_length: int | None = None, shard_texts: int = PART_TEXTS,
                    device: str = "auto", progress: RayProgress | None = None, stop: Callable[[], bool] | None = None,
                    root: Path | None = None):
    """Compute (or finish) the atlas of ``model`` on ``corpus`` on Ray and return it (module docstring).

    Args:
        model: what :func:`models.load` takes (a catalog key, a folder or a hub id), loaded by every actor.
        corpus: a :class:`Corpus`, a :class:`CorpusFile`, or a path (opened as a :class:`CorpusFile`).
        address: ``"local"``, ``"auto"`` or ``"ray://HOST:PORT"`` (:func:`session`).
        workers: actors (default: one per CPU of the Ray cluster, or per GPU where it has GPUs).
        max_tokens, limit, repeats, repeat_length: as :func:`models.atlas.build_atlas`.
        shard_texts: items per shard (and per part); a dead worker loses at most one shard's work.
        progress: called after each shard with ``(done, total, seconds_left, run)`` (:class:`RayRun`).
        stop: called after each shard; True stops giving out shards (those in flight are written; resumable).
        root: the folder of atlases, one every node can write (default :func:`models.atlas.store.atlas_root`).

    Returns:
        :class:`models.atlas.Atlas` (``complete`` False when stopped); its ``ray_run`` attribute is the
        :class:`RayRun`.

    Raises:
        InvalidArgumentError: settings out of range, ``workers``/``shard_texts`` not whole numbers from 1, a bad
        address. InvalidCorpusError: as :class:`CorpusFile` and :func:`models.atlas.corpus.check_language`.
        DikkatError: what a worker raised for a text (its message), or a worker dead more than :data:`RETRIES`
        times (code ``ray_worker_died``).
    """
    from .atlas import Atlas

    check_address(address)
    workers = checks.whole("workers", workers, 1, 4096, none=True)
    shard_texts = checks.whole("shard_texts", shard_texts, 1, 100_000)
    if isinstance(corpus, (str, Path)):
        corpus = CorpusFile(Path(corpus))
    count, _, chars = corpus.scan() if isinstance(corpus, CorpusFile) else (
        len(corpus), corpus.digest, [len(t) for t in corpus.texts])
    head = corpus.head() if isinstance(corpus, CorpusFile) else Corpus(
        name=corpus.name, texts=corpus.texts[:32], audio=corpus.audio, languages=corpus.languages[:32])
    started_at = time.perf_counter()
    import ray

    with session(address, workers):
        actors = _actors(ray, model, device, workers)
        n = len(actors)
        plan = _get(ray, actors[0].plan.remote(head, max_tokens, limit, repeats, repeat_length))
        settings: Settings = plan["settings"]
        run = RayRun(eta=Eta([], settings.max_tokens), workers=n,
                     pids=_get(ray, [a.pid.remote() for a in actors]))
        run.startup_seconds = time.perf_counter() - started_at
        texts = min(count, settings.limit) if settings.limit else count
        folder = folder_for(SimpleNamespace(name=plan["model"]["model"]), corpus, settings, root)
        if (folder / "manifest.json").is_file():
            manifest = store.read_manifest(folder)
        else:
            manifest = new_manifest(plan["model"], corpus, settings,
                                    {"corpus": texts, "repeat": len(plan["repeats"])}, plan["no_repeats"],
                                    plan["language"])
            store.write_manifest(folder, manifest)
        total = texts + len(plan["repeats"])
        lengths = list(chars[:texts]) + [len(t) for *_, t in plan["repeats"]]
        run.eta = Eta(lengths, settings.max_tokens, plan["language"].get("tokens_per_char", 0.0))
        done = store.done_texts(folder)
        for position, (grp, index) in enumerate(_keys(texts, plan["repeats"])):
            if (grp, index) in done:
                run.eta.skip(position)
        meta = SimpleNamespace(name=corpus.name, audio=corpus.audio, languages=tuple(corpus.languages))
        shards = _shards(_stream(corpus, texts, plan["repeats"]), shard_texts, done)
        count_done = len(done)
        free = {i: 2 for i in range(n)}
        flying: dict = {}
        stopping = False
        while True:
            while not stopping and any(free.values()):
                shard = next(shards, None)
                if shard is None:
                    break
                i = max(free, key=free.__getitem__)
                first, placed = shard
                ref = actors[i].run.remote(str(folder), store.shard_part(first, shard_texts), meta,
                                           [item for _, item in placed], settings.max_tokens)
                flying[ref] = (i, first, placed)
                free[i] -= 1
            if not flying:
                break
            ready, _ = ray.wait(list(flying), num_returns=1)
            i, first, placed = flying.pop(ready[0])
            free[i] += 1
            result = _get(ray, ready[0])
            if result["pid"] != run.pids[i]:
                run.pids[i] = result["pid"]
                run.restarts += 1
            run.peak_mib[result["pid"]] = max(run.peak_mib.get(result["pid"], 0.0), result["peak_mib"])
            run.busy_seconds += result["seconds"]
            positions = {(item[0], item[1]): p for p, item in placed}
            for grp, index, tokens, truncated, seconds in result["texts"]:
                run.eta.add(positions[(grp, index)], tokens, truncated, seconds)
                if truncated:
                    run.cut.append((grp, index, int(truncated)))
            run.eta.tick()
            count_done += len(result["texts"])
            run.shards += 1
            if progress is not None:
                progress(count_done, total, run.eta.seconds_left(), run)
            if stop is not None and stop():
                stopping = True
        if not stopping:
            finish(folder, manifest, len(store.done_texts(folder)), total)
        atlas = Atlas(folder)
        atlas.ray_run = run
        return atlas


def _get(ray, refs):
    """``ray.get(refs)``; a worker's DikkatError raised as itself, another error of a task as a DikkatError with
    its last line (code ``ray_task``), an actor dead more than :data:`RETRIES` times as code
    ``ray_worker_died``."""
    try:
        return ray.get(refs)
    except ray.exceptions.RayActorError as exc:
        raise DikkatError(f"A Ray worker died more than {RETRIES} times; what is written stays, and running the "
                          "build again resumes it.", code="ray_worker_died", retries=RETRIES) from exc
    except ray.exceptions.RayTaskError as exc:
        cause = exc.as_instanceof_cause()
        if isinstance(cause, DikkatError):
            raise cause from None
        detail = str(exc).strip().splitlines()[-1][:300]
        raise DikkatError(f"A Ray worker failed: {detail}", code="ray_task", detail=detail) from None


def _actors(ray, model: str, device: str, workers: int | None) -> list:
    """One actor per worker (default: one per GPU of the cluster, else one per CPU), each holding the model on
    a GPU of its own where the cluster has GPUs (and ``device`` is not ``cpu``), with the cluster's CPUs shared
    out as torch threads."""
    resources = ray.cluster_resources()
    gpus = int(resources.get("GPU", 0)) if device != "cpu" else 0
    n = workers or gpus or max(1, int(resources.get("CPU", 1)))
    threads = max(1, int(resources.get("CPU", n)) // n)
    return [_actor(ray).options(num_cpus=1, num_gpus=1 if gpus else 0).remote(model, device, threads)
            for _ in range(n)]


def causal_labels_ray(model: str, atlas, *, address: str = "local", workers: int | None = None,
                      device: str = "auto", **options):
    """:func:`models.atlas.causal_labels` on Ray: the candidate heads split into one group per worker, each group
    tested by an actor holding the model (one job per head group), the rows gathered, ordered as the in-process
    run orders them (by head, label, quantity) and stored with the atlas.

    Args:
        model: as :func:`build_atlas_ray` (the atlas's model). atlas: a :class:`models.atlas.Atlas` in a folder
            the workers can read. address, workers, device: as :func:`build_atlas_ray`. options: ``texts``,
            ``sequences``, ``length``, ``k``, ``max_tokens`` of :func:`models.atlas.causal_labels`.

    Returns:
        The tests (:data:`models.atlas.labels.COLUMNS`), as :func:`models.atlas.causal_labels` returns them.

    Raises:
        What :func:`models.atlas.causal_labels` raises (from the worker that raised it); InvalidArgumentError for
        a bad address or ``workers``.
    """
    import pandas as pd

    from .labels import COLUMNS, candidates, save_labels

    check_address(address)
    workers = checks.whole("workers", workers, 1, 4096, none=True)
    heads = sorted({c[3] for c in candidates(atlas.table(), options.get("k", 3))})
    import ray

    with session(address, workers):
        actors = _actors(ray, model, device, workers)
        groups = [heads[i::len(actors)] for i in range(len(actors))]
        refs = [a.labels.remote(str(atlas.folder), g, options) for a, g in zip(actors, groups) if g]
        frames = _get(ray, refs)
    out = (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COLUMNS))
    out = out.sort_values(["stack", "layer", "head", "label", "quantity"], kind="stable", ignore_index=True)
    save_labels(atlas, out)
    return out


def _keys(texts: int, repeats: list):
    """``(grp, index)`` of every item, in order."""
    for i in range(texts):
        yield "corpus", i
    for grp, index, _ in repeats:
        yield grp, index


def _stream(corpus, texts: int, repeats: list):
    """Every item ``(grp, index, text)`` in order, the corpus's read as they are needed."""
    source = corpus.texts() if isinstance(corpus, CorpusFile) else iter(corpus.texts)
    for i, text in zip(range(texts), source):
        yield "corpus", i, text
    yield from repeats


def _shards(items, size: int, done: set):
    """``(first item's position, [(position, item)] of its items not done)`` of every shard of ``size`` items
    that has any left."""
    batch: list = []
    first = 0
    for position, item in enumerate(items):
        if position % size == 0:
            if batch:
                yield first, batch
            batch, first = [], position
        if (item[0], item[1]) not in done:
            batch.append((position, item))
    if batch:
        yield first, batch
