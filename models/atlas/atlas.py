"""Reading an atlas: every head's metrics with their intervals, its strongest examples, related heads, and
heads found by behaviour across every atlas on disk (DuckDB over the Parquet parts)."""

from __future__ import annotations

import functools
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .. import checks
from ..errors import AtlasFilesGoneError, InvalidArgumentError, InvalidHeadError
from . import store
from .metrics import METRICS, SUMS, bootstrap, pooled
from .verdict import COLUMNS as VERDICT_COLUMNS
from .verdict import LABEL_OF, verdicts

#: metrics that need queries and keys from the same sequence (NaN for cross-attention)
POSITIONAL = ("self", "previous", "distance", "distance_var", "induction", "same_word")
#: the metrics a head's profile is made of (:meth:`Atlas.related`)
PROFILE = ("self", "previous", "entropy", "distance", "induction", "first", "special", "punctuation", "same_word")
#: columns a ranking can sort by: the metrics and the repeated-token induction score
RANKABLE = METRICS + ("induction_repeat",)


class Atlas:
    """An atlas on disk (:func:`models.atlas.build_atlas` writes it).

    Attributes:
        folder: its folder. manifest: its ``manifest.json`` (model, corpus, settings, stacks, ``complete``).
        ray_run: set only on the atlas :func:`models.atlas.cluster.build_atlas_ray` returns: how its build ran.
    """

    # declared only (an atlas built otherwise has no such attribute); a models.atlas.cluster.RayRun, not imported
    # here (cluster imports this module)
    ray_run: Any

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        if not (self.folder / "manifest.json").is_file():
            raise InvalidArgumentError(f"No atlas in '{self.folder}'.", code="atlas_missing",
                                       path=str(self.folder)[-120:])
        with store.reading(self.folder):
            self.manifest = store.read_manifest(self.folder)
        self._lock = threading.Lock()
        self._cache: dict = {}
        self._labels: tuple[int, pd.DataFrame] | None = None

    @property
    def model(self) -> str:
        return self.manifest["model"]

    @property
    def corpus(self) -> str:
        return self.manifest["corpus"]["name"]

    @property
    def stacks(self) -> dict[str, tuple[int, int]]:
        return {s: tuple(v) for s, v in self.manifest["stacks"].items()}

    @property
    def finished(self) -> bool:
        """Whether its build wrote its last part (the manifest says so), whatever has gone since (:attr:`complete`
        is False when a part went).

        Raises:
            AtlasFilesGoneError: the manifest went meanwhile.
        """
        with store.reading(self.folder):
            return bool(store.read_manifest(self.folder).get("complete"))

    @property
    def complete(self) -> bool:
        """Whether the build finished and every text is still in a complete part (a part whose files have gone
        since makes the atlas incomplete again: the next build reads those texts again).

        Raises:
            AtlasFilesGoneError: the manifest went meanwhile.
        """
        if not self.finished:
            return False
        done, total = self.done()
        return done >= total

    def done(self) -> tuple[int, int]:
        """``(texts read, texts in all)`` (corpus texts and repeated sequences).

        Raises:
            AtlasFilesGoneError: a part went while it was read.
        """
        total = sum(self.manifest["items"].values())
        with store.reading(self.folder):
            return len(store.done_texts(self.folder)), total

    def _parts(self) -> int:
        return len(store.complete_parts(self.folder))

    @property
    def version(self) -> int:
        """How many parts are written (grows as a build goes on): what a cached view of the atlas is keyed by."""
        return self._parts()

    def table(self, *, draws: int = 1000) -> pd.DataFrame:
        """One row per head: ``stack``, ``layer``, ``head``, each metric of :data:`models.atlas.metrics.METRICS`
        pooled over the corpus with ``<metric>_lo`` / ``<metric>_hi`` (95 % bootstrap interval over texts),
        ``induction_repeat`` (the induction metric on the repeated random sequences, with its interval; NaN
        without them), ``texts`` (how many were read), and each head's causal verdict with its effect interval
        (:func:`models.atlas.verdict.verdicts`: ``verdict`` proven / pattern_only / untested, ``verdict_label``,
        ``effect``, ``effect_lo``, ``effect_hi``, ``effect_quantity``). Empty before the first part is written;
        computed again only when new parts arrive or the labels change.

        Raises:
            InvalidArgumentError: ``draws`` not a whole number from 1 to 100,000 (code ``arg_whole``).
        """
        draws = checks.whole("draws", draws, 1, 100_000)
        labels = self.folder / "labels.parquet"
        key = ("table", self._parts(), draws, labels.stat().st_mtime_ns if labels.is_file() else 0)
        with self._lock:
            if key in self._cache:
                return self._cache[key]
        frames = []
        with store.reading(self.folder):
            corpus = store.per_text_sums(self.folder, "corpus", self.stacks) if key[1] else {}
            repeat = store.per_text_sums(self.folder, "repeat", self.stacks) if key[1] else {}
        for stack, (layers, heads) in self.stacks.items():
            per = corpus.get(stack)
            if per is None or not len(per):
                continue
            layer, head = np.meshgrid(np.arange(layers), np.arange(heads), indexing="ij")
            df = pd.DataFrame({"stack": stack, "layer": layer.ravel(), "head": head.ravel()})
            values = pooled(per.sum(axis=0))
            ci = bootstrap(per, draws=draws)
            for name in METRICS:
                df[name] = values[name].ravel()
                df[f"{name}_lo"], df[f"{name}_hi"] = ci[name][0].ravel(), ci[name][1].ravel()
            rep = repeat.get(stack)
            if rep is not None and len(rep):
                ind = pooled(rep.sum(axis=0))["induction"]
                lo, hi = bootstrap(rep, draws=draws)["induction"]
                df["induction_repeat"], df["induction_repeat_lo"], df["induction_repeat_hi"] = (
                    ind.ravel(), lo.ravel(), hi.ravel())
            else:
                df["induction_repeat"] = df["induction_repeat_lo"] = df["induction_repeat_hi"] = np.nan
            if stack == "cross":
                for name in POSITIONAL:
                    df[[name, f"{name}_lo", f"{name}_hi"]] = np.nan
            df["texts"] = len(per)
            frames.append(df)
        out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
            columns=["stack", "layer", "head", *METRICS, "texts"])
        out = verdicts(self.labels(), out)
        with self._lock:
            self._cache = {key: out}
        return out

    def metric(self, name: str, stack: str) -> np.ndarray:
        """float64 ``(layers, heads)`` of one metric (:data:`RANKABLE`) for one stack.

        Raises:
            InvalidArgumentError: an unknown metric (``atlas_metric``). InvalidHeadError: no such stack.
        """
        _check_metric(name)
        self._check_head(stack, 0, 0)
        df = self.table()
        df = df[df["stack"] == stack]
        layers, heads = self.stacks[stack]
        out = np.full((layers, heads), np.nan)
        out[df["layer"].to_numpy(), df["head"].to_numpy()] = df[name].to_numpy()
        return out

    def rank(self, metric: str, *, top: int | None = None, ascending: bool = False) -> pd.DataFrame:
        """The heads sorted by ``metric`` (largest first unless ``ascending``), NaN last; ``top`` rows. The
        verdict columns (:meth:`table`) are those of the label whose pattern ``metric`` is, if it is one
        (:data:`models.atlas.verdict.LABEL_OF`)."""
        _check_metric(metric)
        top = checks.whole("top", top, 1, none=True)
        df = self.table().sort_values(metric, ascending=bool(ascending), na_position="last", kind="stable")
        df = df.head(top) if top else df
        if metric in LABEL_OF:
            df = verdicts(self.labels(), df.drop(columns=VERDICT_COLUMNS), metric)
        return df

    def _check_head(self, stack: str, layer: int, head: int) -> None:
        """Raises InvalidHeadError (code ``atlas_head``) unless ``(stack, layer, head)`` is a head of the atlas."""
        ok = isinstance(stack, str) and stack in self.stacks
        for value, size in ((layer, self.stacks[stack][0] if ok else 0), (head, self.stacks[stack][1] if ok else 0)):
            ok = ok and isinstance(value, (int, np.integer)) and not isinstance(value, bool) and 0 <= value < size
        if not ok:
            raise InvalidHeadError(f"{self.model} has no head {checks.shown(stack, 20)} {checks.shown(layer, 12)}."
                                   f"{checks.shown(head, 12)}.", code="atlas_head", stack=checks.shown(stack, 20),
                                   layer=checks.shown(layer, 12), head=checks.shown(head, 12), model=self.model)

    def examples(self, stack: str, layer: int, head: int, k: int = 5) -> pd.DataFrame:
        """The ``k`` corpus texts where the head's pattern is strongest (its largest weight on a key that is
        neither the first token nor a control token), strongest first.

        Returns:
            columns ``text`` (index), ``content``, ``query`` (token index), ``strength``, ``keys`` and
            ``weights`` (the query's ``TOP_KEYS`` largest such weights), ``starts``/``ends`` (character span
            of every token), ``special``.
        """
        self._check_head(stack, layer, head)
        k = checks.whole("k", k, 1, 1000)
        if not self._parts():
            return pd.DataFrame(columns=["text", "content", "query", "strength", "keys", "weights"])
        sql = (f"SELECT e.text, t.content, e.query, e.strength, e.keys, e.weights, t.starts, t.ends, t.special "
               f"FROM read_parquet({store.part_files(self.folder, 'examples')}) e "
               f"JOIN read_parquet({store.part_files(self.folder, 'texts')}) t ON e.grp = t.grp AND e.text = t.text "
               "WHERE e.grp = 'corpus' AND e.stack = ? AND e.layer = ? AND e.head = ? "
               "ORDER BY e.strength DESC, e.text LIMIT ?")
        with store.reading(self.folder):
            return store.duck().execute(sql, [stack, int(layer), int(head), int(k)]).fetchdf()

    def profiles(self) -> tuple[pd.DataFrame, np.ndarray]:
        """The table and each head's profile: float64 ``(heads, len(PROFILE))``, every metric standardised over
        this atlas's heads (mean 0, standard deviation 1; NaN as 0), so profiles of different models and
        corpora compare by shape, not by scale."""
        df = self.table().reset_index(drop=True)
        x = df[list(PROFILE)].to_numpy(dtype=float)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a metric with no value on any head (all NaN)
            sd = np.nanstd(x, axis=0)
            z = np.nan_to_num((x - np.nanmean(x, axis=0)) / np.where(sd > 0, sd, 1))
        return df, z

    def related(self, stack: str, layer: int, head: int, k: int = 5, *, across: bool = False,
                root: Path | None = None) -> pd.DataFrame:
        """The ``k`` heads whose metric profile (:meth:`profiles`) is closest by cosine similarity, closest first,
        with a ``similarity`` column in [-1, 1]: this model's other heads, or with ``across`` every head of every
        atlas on disk (columns ``model``, ``corpus`` added; the head itself left out)."""
        self._check_head(stack, layer, head)
        k = checks.whole("k", k, 1, 100_000)
        df, z = self.profiles()
        me = df.index[(df["stack"] == stack) & (df["layer"] == layer) & (df["head"] == head)]
        if not len(me):
            return df.head(0)
        v = z[me[0]]
        frames = []
        others = [(f, open_atlas) for f in store.atlas_folders(root) if f != self.folder] if across else []
        for atlas, (table, prof) in [(self, (df, z))] + [(a, a.profiles()) for a in _still_there(others)]:
            if not len(table):
                continue
            norms = np.linalg.norm(prof, axis=1) * max(np.linalg.norm(v), 1e-12)
            table = table.assign(similarity=prof @ v / np.where(norms > 0, norms, 1), model=atlas.model,
                                 corpus=atlas.corpus)
            if atlas is self:
                table = table.drop(index=me[0])
            frames.append(table)
        return pd.concat(frames, ignore_index=True).sort_values("similarity", ascending=False).head(k)

    def texts(self, *, limit: int | None = None) -> list[tuple[int, str]]:
        """``(index, text)`` of the corpus texts read so far, in corpus order (the first ``limit``)."""
        limit = checks.whole("limit", limit, 1, none=True)
        if not self._parts():
            return []
        sql = (f"SELECT text, content FROM read_parquet({store.part_files(self.folder, 'texts')}) "
               f"WHERE grp = 'corpus' ORDER BY text" + (f" LIMIT {int(limit)}" if limit else ""))
        with store.reading(self.folder):
            return [(int(i), c) for i, c in store.duck().execute(sql).fetchall()]

    def cut_texts(self) -> pd.DataFrame:
        """The texts cut to the token limit: ``grp``, ``text`` (index), ``tokens`` (read), ``truncated`` (tokens
        left unread), ``start`` (their first 80 characters), most cut first.

        Raises:
            AtlasFilesGoneError: a part went while it was read.
        """
        if not self._parts():
            return pd.DataFrame(columns=["grp", "text", "tokens", "truncated", "start"])
        sql = (f"SELECT grp, text, tokens, truncated, left(content, 80) AS start "
               f"FROM read_parquet({store.part_files(self.folder, 'texts')}) WHERE truncated > 0 "
               f"ORDER BY truncated DESC, grp, text")
        with store.reading(self.folder):
            return store.duck().execute(sql).fetchdf()

    def labels(self) -> pd.DataFrame | None:
        """The causal tests (:func:`models.atlas.causal_labels`) stored with this atlas, or None; read again only
        when the file changes (the ranking asks for them on every rerun of the page)."""
        path = self.folder / "labels.parquet"
        with store.reading(self.folder):
            if not path.is_file():
                return None
            stamp = path.stat().st_mtime_ns
            kept = self._labels
            if kept is None or kept[0] != stamp:
                kept = self._labels = (stamp, pd.read_parquet(path))
            return kept[1]


def _still_there(folders) -> list[Atlas]:
    """The atlases of ``(folder, opener)`` pairs whose files are still there (another atlas removed while this one
    was read is left out, not an error), each with its table read once."""
    found = []
    for folder, opener in folders:
        try:
            atlas = opener(folder)
            atlas.table()
        except (AtlasFilesGoneError, InvalidArgumentError):
            forget_open()
            continue
        found.append(atlas)
    return found


@functools.lru_cache(maxsize=64)
def _open(folder: str) -> Atlas:
    return Atlas(folder)


def open_atlas(folder: str | Path) -> Atlas:
    """One :class:`Atlas` object per folder in this process (its table is computed again only when new parts are
    written), for callers that read many atlases again and again (:meth:`Atlas.related` with ``across``)."""
    return _open(str(Path(folder)))


def forget_open() -> None:
    """Forget the atlases :func:`open_atlas` keeps (after files of one went: the next call reads the disk)."""
    _open.cache_clear()


def _check_metric(name: str) -> None:
    if not isinstance(name, str) or name not in RANKABLE:
        raise InvalidArgumentError(f"Unknown metric '{name}'; one of: {', '.join(RANKABLE)}.", code="atlas_metric",
                                   name=str(name)[:40], known=", ".join(RANKABLE))


def find_heads(metric: str, *, model: str | None = None, corpus: str | None = None, top: int = 20,
               ascending: bool = False, root: Path | None = None) -> pd.DataFrame:
    """Rank the heads of every atlas on disk (or of one model / corpus) by a pooled metric, in one DuckDB query
    over all their Parquet parts (no interval: :meth:`Atlas.table` has those).

    Returns:
        columns ``model``, ``corpus``, ``stack``, ``layer``, ``head``, ``value``, ``texts``, ``atlas`` (its folder's
        name: the same model and corpus under other settings is another atlas) and each head's verdict in its
        atlas (:func:`models.atlas.verdict.verdicts`, for ``metric``'s label); ``top`` rows.

    Raises:
        InvalidArgumentError: an unknown metric (code ``atlas_metric``) or ``top`` < 1. AtlasFilesGoneError: an
        atlas's files went while they were read, twice.
    """
    from .. import checks

    _check_metric(metric)
    top = checks.whole("top", top, 1, 100_000)
    folders = store.atlas_folders(root)
    for name, value in (("model", model), ("corpus", corpus)):
        if value is not None and not isinstance(value, str):
            raise InvalidArgumentError(f"The {name} must be a string, got {type(value).__name__}.",
                                       code="arg_text", name=name, value=type(value).__name__)
    grp = "repeat" if metric == "induction_repeat" else "corpus"
    name = "induction" if metric == "induction_repeat" else metric
    for attempt in (1, 2):  # an atlas removed between listing its parts and reading them: listed again, once
        try:
            return _find(folders, name, grp, model, corpus, top, ascending)
        except AtlasFilesGoneError:
            if attempt == 2:
                raise
            folders = store.atlas_folders(root)


def _find(folders: list[Path], name: str, grp: str, model, corpus, top: int, ascending: bool) -> pd.DataFrame:
    """:func:`find_heads`'s query over the complete parts of ``folders``."""
    num, den = _ratio_columns(name)
    parts = {f: store.part_files(f, "sums") for f in folders}
    folders = [f for f in folders if parts[f] != "[]"]
    if not folders:
        return pd.DataFrame(columns=["model", "corpus", "stack", "layer", "head", "value", "texts", "atlas",
                                     *VERDICT_COLUMNS])
    value = (f'sum("{num}") / nullif(sum("{den}"), 0)' if name != "distance_var" else
             'sum("distance_sq") / nullif(sum("positions"), 0) - pow(sum("distance") / nullif(sum("positions"), 0), 2)')
    where = ["grp = ?"]
    params: list = [grp]
    if name in POSITIONAL:
        where.append("stack <> 'cross'")
    if model is not None:
        where.append("model = ?")
        params.append(model)
    if corpus is not None:
        where.append("corpus = ?")
        params.append(corpus)
    # one atlas per folder: the same model and corpus under other settings is another atlas, never pooled
    union = " UNION ALL ".join(
        f"SELECT *, '{str(f.name).replace(chr(39), chr(39) * 2)}' AS atlas FROM read_parquet({parts[f]})"
        for f in folders)
    sql = (f"SELECT model, corpus, stack, layer, head, {value} AS value, count(DISTINCT text) AS texts, atlas "
           f"FROM ({union}) WHERE {' AND '.join(where)} "
           f"GROUP BY model, corpus, atlas, stack, layer, head HAVING value IS NOT NULL "
           f"ORDER BY value {'ASC' if ascending else 'DESC'}, model, atlas, stack, layer, head LIMIT {top}")
    with store.reading(Path("."), "atlases"):
        found = store.duck().execute(sql, params).fetchdf()
    return _with_verdicts(found, {f.name: f for f in folders}, "induction_repeat" if grp == "repeat" else name)


def _with_verdicts(found: pd.DataFrame, folders: dict[str, Path], metric: str) -> pd.DataFrame:
    """``found`` (rows of several atlases, column ``atlas``) with each head's verdict in its own atlas."""
    out = verdicts(None, found)
    for name in found["atlas"].unique():
        path = folders[name] / "labels.parquet"
        if path.is_file():
            rows = (found["atlas"] == name).to_numpy()
            with store.reading(folders[name]):
                mine = verdicts(pd.read_parquet(path), found[rows], metric)
            out.loc[rows, VERDICT_COLUMNS] = mine[VERDICT_COLUMNS].to_numpy()
    return out


def _ratio_columns(name: str) -> tuple[str, str]:
    from .metrics import RATIOS

    num, den = RATIOS[name]
    assert num in SUMS and den in SUMS
    return num, den
