"""The atlas at corpus scale (issue 46): in process vs on Ray, side by side in one run, each build in a fresh
process (its peak memory its own).

The corpus: ``--texts`` texts (default 10,000) assembled from the shipped corpora: every shipped text (English
and Turkish, the long ones cut to 512 tokens and listed), every sentence of them, then consecutive pairs of
sentences, written to a .jsonl file the Ray build reads in a stream.

Runs, on minilm-l6 (``--model``):

1. ``here``: :func:`models.atlas.build_atlas` in one process (torch on every core).
2. ``ray``: :func:`models.atlas.cluster.build_atlas_ray` on ``--workers`` local actors (one core each).
3. ``ray-killed``: the same, one worker SIGKILLed once ``--kill-at`` of the texts are in; the atlas must equal
   the in-process one (same heads, values to 1e-6) with every text counted once.

Printed and written (``--out``, JSON): seconds, texts and tokens per second, peak resident memory of each process
(the driver; each Ray worker), Ray's start-up (the local instance and every actor holding the model), the honesty
of the time left (the estimate when 5 %, 10 %, 25 % and 50 % of the tokens are read ÷ the time it really took),
and a projection of the build on N machines of this kind from the measured busy time per shard and the overheads,
stated as a projection (no cluster was measured).

    python bench/atlas_scale.py [--texts 10000] [--workers 2] [--shard-texts 64] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def corpus(count: int) -> list[str]:
    """``count`` texts from the shipped corpora (module docstring)."""
    from models import atlas

    whole = [t for lang in ("en", "tr") for t in atlas.shipped_corpus(lang).texts]
    sentences = [s.strip() for t in whole for s in re.split(r"(?<=[.!?])\s+", t) if len(s.split()) >= 3]
    pairs = [f"{a} {b}" for a, b in zip(sentences, sentences[1:])]
    triples = [f"{a} {b} {c}" for a, b, c in zip(sentences, sentences[1:], sentences[2:])]
    texts = list(dict.fromkeys(whole + sentences + pairs + triples))
    if len(texts) < count:
        raise SystemExit(f"only {len(texts)} distinct texts can be assembled")
    return texts[:count]


CHILD = r'''
import json, os, signal, sys, time
sys.path.insert(0, sys.argv[1])
kind, corpus_path, root, workers, shard, kill_at, model = sys.argv[2:9]
from models.atlas.stream import CorpusFile
from models import atlas
start = time.perf_counter()
trace = []
killed = []
def progress(done, total, left, run=None):
    trace.append((time.perf_counter() - start, done, left))
    if run is not None and kind == "ray-killed" and not killed and done >= float(kill_at) * total:
        killed.append(run.pids[0])
        os.kill(run.pids[0], signal.SIGKILL)
if kind == "here":
    from models import load
    loaded = load(model)
    load_s = time.perf_counter() - start
    a = atlas.build_atlas(loaded, atlas.load_corpus(corpus_path), repeats=0, progress=progress, root=root)
    extra = {"load_seconds": load_s}
else:
    from models.atlas import cluster
    a = cluster.build_atlas_ray(model, CorpusFile(corpus_path), workers=int(workers), shard_texts=int(shard),
                                repeats=0, progress=progress, root=root)
    r = a.ray_run
    extra = {"startup_seconds": r.startup_seconds, "restarts": r.restarts, "killed": killed, "shards": r.shards,
             "worker_peak_mib": sorted(r.peak_mib.values()), "busy_seconds": r.busy_seconds,
             "tokens_per_second": r.eta.tokens_per_second()}
seconds = time.perf_counter() - start
peak = next(int(l.split()[1]) / 1024 for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"kind": kind, "seconds": seconds, "folder": str(a.folder), "complete": a.complete,
                  "texts": a.done()[0], "peak_mib": peak, "trace": trace, **extra}))
'''


def run(kind: str, path: Path, root: Path, args) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), kind, str(path), str(root), str(args.workers),
                          str(args.shard_texts), str(args.kill_at), args.model],
                         capture_output=True, text=True, timeout=7200)
    if out.returncode:
        raise SystemExit(f"{kind} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def tokens_of(folder: str) -> tuple[list[int], int, int]:
    """Tokens read per text (corpus order), and the count and tokens of the texts cut."""
    from models.atlas import store

    rows = store.duck().execute("SELECT text, tokens, truncated FROM "
                                f"read_parquet({store.part_files(Path(folder), 'texts')}) "
                                "ORDER BY text").fetchall()
    return [int(t) for _, t, _ in rows], sum(1 for *_, c in rows if c), sum(int(c) for *_, c in rows)


def honesty(result: dict, tokens: list[int]) -> dict:
    """The time-left estimate when a share of the tokens is read ÷ the time the rest really took (1.0: exact).

    In process the texts are read in corpus order; on Ray the progress is per shard in arrival order, which is
    close to corpus order (shards are given out in order): the share is taken from the texts done."""
    total = sum(tokens)
    cumulative, running = [], 0
    for t in tokens:
        running += t
        cumulative.append(running)
    end = result["seconds"]
    out = {}
    for share in (0.05, 0.10, 0.25, 0.50):
        for elapsed, done, left in result["trace"]:
            if done and cumulative[min(done, len(cumulative)) - 1] >= share * total and left is not None:
                out[f"{share:.0%}"] = round(left / max(end - elapsed, 1e-9), 3)
                break
    return out


def table_diff(a: str, b: str) -> tuple[float, set[int]]:
    import numpy as np

    from models import atlas
    from models.atlas import store

    ta = atlas.Atlas(a).table().sort_values(["stack", "layer", "head"])
    tb = atlas.Atlas(b).table().sort_values(["stack", "layer", "head"])
    cols = [c for c in ta.columns if ta[c].dtype.kind == "f"]
    diff = float(np.nanmax(np.abs(ta[cols].to_numpy() - tb[cols].to_numpy())))
    rows = {n for (n,) in store.duck().execute(
        f"SELECT count(*) FROM read_parquet({store.part_files(Path(b), 'sums')}) GROUP BY grp, text").fetchall()}
    return diff, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--texts", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--shard-texts", type=int, default=64)
    ap.add_argument("--kill-at", type=float, default=0.3)
    ap.add_argument("--model", default="minilm-l6")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="atlas-scale-"))
    texts = corpus(args.texts)
    path = work / f"scale{args.texts}.jsonl"
    path.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts), encoding="utf-8")
    print(f"corpus: {len(texts):,} texts, {sum(map(len, texts)):,} characters, {os.cpu_count()} cores", flush=True)
    results = {}
    for kind in ("here", "ray", "ray-killed"):
        results[kind] = run(kind, path, work / kind, args)
        r = results[kind]
        print(f"{kind}: {r['seconds']:.1f} s, {r['texts'] / r['seconds']:.1f} texts/s, peak {r['peak_mib']:.0f} MiB"
              + (f", workers' peaks {[round(x) for x in r['worker_peak_mib']]} MiB, "
                 f"start-up {r['startup_seconds']:.1f} s,"
                 f" restarts {r['restarts']}" if kind != "here" else ""), flush=True)
    tokens, cut, cut_tokens = tokens_of(results["here"]["folder"])
    summary = {"texts": len(texts), "tokens": sum(tokens), "cut_texts": cut, "cut_tokens": cut_tokens,
               "workers": args.workers, "shard_texts": args.shard_texts, "cores": os.cpu_count(), "runs": {}}
    for kind, r in results.items():
        summary["runs"][kind] = {
            "seconds": round(r["seconds"], 1), "texts_per_second": round(r["texts"] / r["seconds"], 1),
            "tokens_per_second": round(sum(tokens) / r["seconds"], 0), "peak_mib": round(r["peak_mib"]),
            "complete": r["complete"], "time_left_said_over_taken": honesty(r, tokens),
            **({"startup_seconds": round(r["startup_seconds"], 1), "restarts": r["restarts"],
                "worker_peak_mib": [round(x) for x in r["worker_peak_mib"]], "shards": r["shards"],
                "busy_seconds": round(r["busy_seconds"], 1)} if kind != "here" else
               {"load_seconds": round(r["load_seconds"], 1)})}
    for kind in ("ray", "ray-killed"):
        diff, rows = table_diff(results["here"]["folder"], results[kind]["folder"])
        summary["runs"][kind]["max_abs_diff_vs_here"] = diff
        summary["runs"][kind]["rows_per_text"] = sorted(rows)
    ray = results["ray"]
    per_shard = ray["busy_seconds"] / max(ray["shards"], 1)
    overhead = ray["seconds"] - ray["startup_seconds"] - ray["busy_seconds"] / args.workers
    summary["projection"] = {
        "note": "a projection from this machine's measured busy time per shard, not a measurement on a cluster: "
                "T(N) = start-up + shards x busy seconds per shard / (N x workers per machine) + one shard; the "
                "driver's own time per shard (measured overhead / shards) and a shared store that keeps up assumed",
        "busy_seconds_per_shard": round(per_shard, 3), "startup_seconds": round(ray["startup_seconds"], 1),
        "driver_overhead_seconds": round(overhead, 1),
        "texts_1m_seconds": {n: round(ray["startup_seconds"] + (1_000_000 / args.shard_texts) * per_shard
                                      / (n * args.workers) + per_shard, 0) for n in (1, 4, 16, 64)}}
    print(json.dumps(summary, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
