"""Masks per head, measured (issue 31).

``python bench/head_masks.py ratio`` — an analysis with a mask per head (DuoAttention's split: 10 % of the heads
full, the rest window 64 + 4 sinks; and every head vertical-slash 64,64) ÷ a plain analysis of the same text,
side by side in one run (median of ``--repeats``, interleaved), on smollm2-135m at ``--tokens`` (default 2,048).
Goal: ≤ 1.3.

``python bench/head_masks.py duo`` — Wu et al. 2024's test on a causal LM: needle recall and loss with every head
full, the top-k retrieval heads full and every other head a window + sinks (k = 5 % and 10 % of the heads), k
random heads full (mean and range over draws), every head a window; and the KV-cache bytes of each
(:func:`models.sparse.duo_compare`). ``--json FILE`` writes the result.

Run with ``.venv/bin/python bench/head_masks.py ...`` from the repository root; ``--device cuda`` on a GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

import models  # noqa: E402
from models import sparse  # noqa: E402
from models.analysis.head_masks import HeadMasks, full_heads  # noqa: E402


def _text(loaded, tokens: int) -> str:
    """The shipped corpus cut to ``tokens`` tokens of the model."""
    rows = [json.loads(x) for x in (Path(models.__file__).parent.parent / "assets/corpora/en.jsonl").read_text(
        encoding="utf-8").splitlines()]
    ids = loaded.tokenizer(" ".join(r["text"] for r in rows), add_special_tokens=False)["input_ids"][:tokens - 2]
    return loaded.tokenizer.decode(ids)


def ratio(args) -> None:
    loaded = models.load(args.model, device=args.device)
    text = _text(loaded, args.tokens)
    layers, heads = loaded.stacks["decoder"]
    rng = np.random.default_rng(0)
    pick = rng.choice(layers * heads, size=max(1, round(0.1 * layers * heads)), replace=False)
    duo = full_heads([divmod(int(i), heads) for i in pick], 64, 4)
    cases = {"plain": None, "duo 10 % full": duo, "vertical_slash:64,64": HeadMasks(default="vertical_slash:64,64")}
    times = {name: [] for name in cases}
    for mask in cases.values():  # warm-up
        models.analyze(loaded, text, mask=mask, keep=False, max_tokens=args.tokens)
    for _ in range(args.repeats):
        for name, mask in cases.items():
            start = time.perf_counter()
            a = models.analyze(loaded, text, mask=mask, keep=False, max_tokens=args.tokens)
            times[name].append(time.perf_counter() - start)
    n = len(a.tokens)
    base = statistics.median(times["plain"])
    print(f"{args.model} on {args.device}, {n} tokens, median of {args.repeats} (interleaved):")
    for name, t in times.items():
        print(f"  {name:24s} {statistics.median(t):7.2f} s   ratio {statistics.median(t) / base:5.2f}")


def duo(args) -> None:
    loaded = models.load(args.model, device=args.device)
    start = time.perf_counter()
    result = sparse.duo_compare(loaded, lengths=tuple(args.lengths), depths=tuple(args.depths), draws=args.draws,
                                window=args.window, sinks=args.sinks)
    took = time.perf_counter() - start
    layers, heads = loaded.stacks["decoder"]
    top = np.argsort(-result.scores.reshape(-1), kind="stable")[:10]
    print(f"{args.model} on {args.device}: {layers} × {heads} heads, lengths {result.lengths}, depths "
          f"{result.depths}, window {result.window} + {result.sinks} sinks, {took:.0f} s")
    share = float((result.scores > 0.1).mean())
    print(f"heads with retrieval score > 0.1: {share:.1%}; top 10: "
          + ", ".join(f"L{i // heads}H{i % heads} {result.scores.reshape(-1)[i]:.2f}" for i in top))
    names = [r.name for r in result.rows]
    print(f"{'configuration':28s} {'recall':>7s} {'range':>13s} {'loss':>6s} " +
          " ".join(f"{'recall@' + str(n):>11s}" for n in result.lengths) + " " +
          " ".join(f"{'KV MiB@' + str(n):>11s}" for n in result.lengths))
    for row in result.rows:
        print(f"{row.name:28s} {row.recall:7.2f} {row.recall_range[0]:6.2f}–{row.recall_range[1]:<6.2f} "
              f"{row.loss:6.2f} " + " ".join(f"{result.per_length[row.name][n]:11.2f}" for n in result.lengths)
              + " " + " ".join(f"{row.kv[n] / 2 ** 20:11.2f}" for n in result.lengths))
    if args.json:
        Path(args.json).write_text(json.dumps({
            "model": args.model, "seconds": took, "scores": result.scores.tolist(), "names": names,
            "rows": [{**r.__dict__, "kv": {str(k): v for k, v in r.kv.items()}} for r in result.rows],
            "per_length": {k: {str(n): v for n, v in d.items()} for k, d in result.per_length.items()},
        }, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("ratio", "duo"))
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048])
    parser.add_argument("--depths", type=float, nargs="+", default=list(sparse.DEPTHS))
    parser.add_argument("--draws", type=int, default=3)
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument("--sinks", type=int, default=4)
    parser.add_argument("--json")
    args = parser.parse_args()
    ratio(args) if args.what == "ratio" else duo(args)


if __name__ == "__main__":
    main()
