"""Command line: ``python -m models list``, ``python -m models analyze --model KEY --text "..."`` and
``python -m models atlas --model KEY --corpus en`` (a head atlas, resumable, with its causal labels) and
``python -m models ahead`` (the bundled models' experiments and pruning curves, kept on disk: :mod:`models.ahead`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np


class _Parser(argparse.ArgumentParser):
    """argparse's parser whose usage errors print any argument, a lone surrogate included (an undecodable
    byte of a file name), as a backslash escape rather than failing with UnicodeEncodeError."""

    def _print_message(self, message, file=None):
        if message:
            super()._print_message(message.encode("utf-8", "backslashreplace").decode("utf-8"), file)


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="python -m models", description="Dikkat attention engine")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="list the model catalog")
    an = sub.add_parser("analyze", help="analyse one text and print a JSON summary")
    an.add_argument("--model", default="minilm-l6", help="catalog key, Hugging Face id or folder")
    an.add_argument("--text", required=True)
    an.add_argument("--text-pair", default=None)
    an.add_argument("--target", default=None, help="decoder text of an encoder-decoder")
    an.add_argument("--mask", default="native", help="native|bidirectional|causal|sliding_window:W|strided:S")
    an.add_argument("--head-off", action="append", default=[], metavar="STACK:LAYER:HEAD")
    an.add_argument("--device", default="auto")
    an.add_argument("--out", default=None, help="write all attentions to this .npz file")
    at = sub.add_parser("atlas", help="build (or resume) a head atlas and print its top heads as JSON")
    at.add_argument("--model", default="minilm-l6", help="catalog key, Hugging Face id or folder")
    at.add_argument("--corpus", default="en", help="en | tr | a .txt/.csv/.jsonl/.parquet file")
    at.add_argument("--column", default=None, help="text column of a .csv/.jsonl/.parquet corpus (default: text)")
    at.add_argument("--max-tokens", type=int, default=None)
    at.add_argument("--limit", type=int, default=None, help="only the first N texts")
    at.add_argument("--repeats", type=int, default=16, help="repeated random sequences (decoders)")
    at.add_argument("--labels", action="store_true", help="also run the causal tests of the labels")
    at.add_argument("--top", default="previous", help="metric to rank the heads by in the output")
    at.add_argument("--device", default="auto")
    at.add_argument("--ray", default=None, metavar="local|auto|ray://HOST:PORT",
                    help="build on Ray: actors holding the model read the corpus in a stream, in shards")
    at.add_argument("--workers", type=int, default=None, help="Ray actors (default: one per CPU, or per GPU)")
    at.add_argument("--shard-texts", type=int, default=None, help="texts per shard on Ray (default 16)")
    at.add_argument("--root", default=None, help="the atlases' folder (on a cluster: one every node can write)")
    ah = sub.add_parser("ahead", help="compute the experiments and pruning curves of the bundled models ahead")
    ah.add_argument("--model", action="append", default=[], help="only this catalog model (repeatable)")
    ah.add_argument("--force", action="store_true", help="compute again what is on disk already")
    ah.add_argument("--device", default="auto")
    args = parser.parse_args(argv)

    from . import DikkatError, analyze, list_models, load

    if args.cmd == "atlas":
        return _atlas(args)
    if args.cmd == "ahead":
        return _ahead(args)

    if args.cmd == "list":
        for spec in list_models():
            state = "installed" if spec.installed else f"not installed ({spec.install_hint})"
            print(f"{spec.key:24s} {spec.family:16s} {spec.layers:>2d}x{spec.heads:<2d} {spec.params_m:6.1f}M  "
                  f"{spec.languages}; {spec.licence}; {state}")
        return 0
    try:
        heads = []
        for item in args.head_off:
            parts = item.split(":")
            if len(parts) != 3 or not all(x.strip().lstrip("-").isdigit() for x in parts[1:]):
                raise ValueError(f"--head-off takes STACK:LAYER:HEAD, e.g. decoder:3:1; got '{item}'")
            heads.append((parts[0], int(parts[1]), int(parts[2])))
        loaded = load(args.model, device=args.device)
        # the export reads every weight: from each layer's queries, keys and log-sum-exp where the family allows it
        # (no second forward pass, models.analysis.lse_weights), else computed again by Replay
        result = analyze(loaded, args.text, text_pair=args.text_pair, target=args.target, heads_off=heads,
                         mask=args.mask, keep="lse" if args.out else None)
    except (DikkatError, ValueError) as exc:
        print(f"error: {exc}".encode("utf-8", "backslashreplace").decode("utf-8"), file=sys.stderr)
        return 2
    summary = result.summary()
    summary["device"] = str(loaded.device)
    summary["load_seconds"] = round(loaded.load_seconds, 2)
    if args.out:
        try:
            # Any: numpy's stubs check **kwds against savez_compressed's allow_pickle
            arrays: dict[str, Any] = {f"attention_{k}": np.asarray(v) for k, v in result.attentions.items()}
        except DikkatError as exc:  # a long input: every weight would not fit at once
            print(f"error: {exc}", file=sys.stderr)
            return 2
        try:
            np.savez_compressed(args.out, **arrays, tokens=np.array([t.label for t in result.tokens]))
        except (OSError, ValueError) as exc:  # a folder, a path without its folder, no permission, a NUL byte
            print(f"error: cannot write {args.out!r}: {exc}", file=sys.stderr)
            return 2
        summary["out"] = args.out
    print(json.dumps(summary, ensure_ascii=False, indent=2))
    return 0


def _atlas(args) -> int:
    """``python -m models atlas``: progress (texts, tokens per second, time left) on stderr; the top heads, the
    texts cut to the token limit and the run's figures as JSON on stdout."""
    import time

    from . import DikkatError, atlas, load

    def progress(done: int, total: int, left, run=None) -> None:
        rate = ("" if run is None or not run.eta.tokens_per_second()
                else f", {run.eta.tokens_per_second():,.0f} tokens/s")
        eta = "" if left is None else f", about {left:,.0f} s left"
        print(f"\ratlas: {done:,}/{total:,} texts{rate}{eta}   ", end="", file=sys.stderr, flush=True)

    root = Path(args.root) if args.root else None
    run = None
    if not args.ray and (args.workers is not None or args.shard_texts is not None):
        print("error: --workers and --shard-texts are for a build on Ray (--ray local|auto|ray://HOST:PORT).",
              file=sys.stderr)
        return 2
    try:
        atlas.atlas._check_metric(args.top)
        start = time.perf_counter()
        if args.ray:
            from .atlas import cluster, stream

            corpus = stream.open_corpus(args.corpus, column=args.column)
            a = cluster.build_atlas_ray(args.model, corpus, address=args.ray, workers=args.workers,
                                        max_tokens=args.max_tokens, limit=args.limit, repeats=args.repeats,
                                        shard_texts=args.shard_texts or cluster.PART_TEXTS, device=args.device,
                                        progress=progress, root=root)
            run = a.ray_run
        else:
            loaded = load(args.model, device=args.device)
            corpus = atlas.load_corpus(args.corpus, column=args.column)
            a = atlas.build_atlas(loaded, corpus, max_tokens=args.max_tokens, limit=args.limit,
                                  repeats=args.repeats, progress=progress, root=root)
        print(file=sys.stderr)
        seconds = time.perf_counter() - start
        labels = None
        if args.labels and args.ray:
            labels = cluster.causal_labels_ray(args.model, a, address=args.ray, workers=args.workers,
                                               device=args.device)
        elif args.labels:
            labels = atlas.causal_labels(loaded, a)
        top = a.rank(args.top, top=10)
        cut = a.cut_texts()
    except DikkatError as exc:
        print(f"\nerror: {exc}".encode("utf-8", "backslashreplace").decode("utf-8"), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\natlas: interrupted; what is written stays, and the same command resumes it.", file=sys.stderr)
        return 130
    shown = ["stack", "layer", "head", args.top, f"{args.top}_lo", f"{args.top}_hi", "verdict", "effect",
             "effect_lo", "effect_hi"]
    out = {"folder": str(a.folder), "model": a.model, "corpus": a.corpus, "complete": a.complete,
           "texts": a.done()[0], "seconds": round(seconds, 1),
           "top": json.loads(top[shown].to_json(orient="records")),
           "cut": {"texts": len(cut), "tokens": int(cut["truncated"].sum()),
                   "listed": json.loads(cut.head(50).to_json(orient="records"))}}
    if run is not None:
        out["ray"] = {"workers": run.workers, "startup_seconds": round(run.startup_seconds, 1),
                      "restarts": run.restarts, "tokens": run.eta.tokens,
                      "tokens_per_second": round(run.eta.tokens / max(seconds - run.startup_seconds, 1e-9), 1)}
    if cut.shape[0]:
        print(f"atlas: {len(cut):,} texts cut to the token limit ({int(cut['truncated'].sum()):,} tokens left "
              "unread); listed in the output's \"cut\"", file=sys.stderr)
    if labels is not None:
        out["labels"] = json.loads(labels.to_json(orient="records"))
    print(json.dumps(out, ensure_ascii=False, indent=1))
    return 0


def _ahead(args) -> int:
    """``python -m models ahead``: one line per result on stderr, the counts as JSON on stdout; 2 if any failed."""
    from . import ahead

    jobs = [j for j in ahead.default_jobs() if not args.model or j.model in args.model]
    counts = ahead.compute_ahead(jobs, device=args.device, force=args.force, release=True,
                                 log=lambda line: print(f"ahead: {line}", file=sys.stderr, flush=True))
    print(json.dumps({**counts, "root": str(ahead.root())}))
    return 2 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
