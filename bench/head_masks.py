"""Masks per head, measured (issue 31).

``python bench/head_masks.py ratio`` — an analysis with a mask per head (DuoAttention's split: 10 % of the heads
full, the rest window 64 + 4 sinks; and every head vertical-slash 64,64) ÷ a plain analysis of the same text,
side by side in one run (median of ``--repeats``, interleaved), on smollm2-135m at ``--tokens`` (default 2,048).
Goal: ≤ 1.3.

``--kernel dense,flex,flex_compiled`` runs each mask under each kernel of :mod:`models.capture.flex_heads` (one sdpa
call per group of heads with dense planes; FlexAttention with a block mask, uncompiled or through torch.compile),
each printed as its ratio to the plain analysis, side by side in the same loop; ``--cases duo,w70,vslash`` picks
the masks (``w70``: 70 % of the heads window 64 + 4 sinks). The first call of each is printed apart (compiled flex:
the compile of the shape); ``--json FILE`` writes the rows.

``python bench/head_masks.py layer --tokens 8192,32768 --kernel dense,flex_compiled`` — one attention layer alone
(random q, k, v of a Llama shape, ``--share`` 0.7 of the heads window + sinks, the rest full): each kernel's time
and its speed-up over ``dense``, what the block mask changes without the rest of the model.

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
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

import models  # noqa: E402
from models import sparse  # noqa: E402
from models.analysis.head_masks import HeadMasks, full_heads  # noqa: E402
from models.capture import flex_heads  # noqa: E402


def _text(loaded, tokens: int) -> str:
    """The shipped corpus cut to ``tokens`` tokens of the model."""
    rows = [json.loads(x) for x in (Path(models.__file__).parent.parent / "assets/corpora/en.jsonl").read_text(
        encoding="utf-8").splitlines()]
    ids = loaded.tokenizer(" ".join(r["text"] for r in rows), add_special_tokens=False)["input_ids"][:tokens - 2]
    return loaded.tokenizer.decode(ids)


def _cases(loaded, names, window: int, sinks: int) -> dict:
    """The masks per head of ``ratio``: ``duo`` (DuoAttention's split, Xiao et al. 2024: 10 % of the heads full at
    random, the rest window + sinks), ``w70`` (70 % of the heads window + sinks, 30 % full), ``vslash`` (every head
    MInference's vertical-slash 64,64)."""
    stack = loaded.mask_stack
    layers, heads = loaded.stacks[stack]
    rng = np.random.default_rng(0)
    out = {}
    for name in names:
        if name == "vslash":
            out["vertical_slash:64,64"] = HeadMasks(default="vertical_slash:64,64")
            continue
        share = {"duo": 0.1, "w70": 0.3}[name]
        pick = rng.choice(layers * heads, size=max(1, round(share * layers * heads)), replace=False)
        label = "duo 10 % full" if name == "duo" else "70 % window+sinks"
        out[label] = full_heads([divmod(int(i), heads) for i in pick], window, sinks)
    return out


def ratio(args) -> None:
    """Each mask per head under each kernel ÷ a plain analysis, interleaved in one loop (median of repeats); the
    first (warm-up) call of each is printed apart: for ``flex_compiled`` it holds the compile of this shape."""
    loaded = models.load(args.model, device=args.device)
    text = _text(loaded, args.tokens)
    kernels = [k for k in args.kernel.split(",") if k]
    cases: dict = {"plain": None}
    for label, spec in _cases(loaded, [c for c in args.cases.split(",") if c], args.window, args.sinks).items():
        for kernel in kernels:
            cases[f"{label} [{kernel}]"] = replace(spec, kernel=kernel)
    times: dict = {name: [] for name in cases}
    first: dict = {}
    ran: dict = {}
    for name, mask in cases.items():  # warm-up (and compile)
        start = time.perf_counter()
        a = models.analyze(loaded, text, mask=mask, keep=False, max_tokens=args.tokens)
        first[name] = time.perf_counter() - start
        if mask is not None:
            ran[name] = sorted(set(a.head_masks[loaded.mask_stack].kernels.values()))
    for _ in range(args.repeats):
        for name, mask in cases.items():
            start = time.perf_counter()
            a = models.analyze(loaded, text, mask=mask, keep=False, max_tokens=args.tokens)
            times[name].append(time.perf_counter() - start)
    n = len(a.tokens)
    base = statistics.median(times["plain"])
    print(f"{args.model} on {args.device}, {n} tokens, median of {args.repeats} (interleaved):")
    rows = []
    for name, t in times.items():
        med = statistics.median(t)
        rows.append({"case": name, "seconds": med, "ratio": med / base, "first_s": first[name],
                     "kernels": ran.get(name)})
        print(f"  {name:42s} {med:7.2f} s   ratio {med / base:5.2f}   first call {first[name]:6.1f} s"
              + (f"   ran {', '.join(ran[name])}" if name in ran else ""))
    compiled = {str(k[0]): round(v, 1) for k, v in flex_heads.COMPILE_SECONDS.items()}
    if compiled:
        print(f"  compiled flex, first call per shape (compile included): {compiled}")
    if args.json:
        Path(args.json).write_text(json.dumps({"model": args.model, "device": args.device, "tokens": n,
                                               "repeats": args.repeats, "rows": rows, "compile_s": compiled},
                                              indent=1) + "\n")


def layer(args) -> None:
    """One attention layer with a mask per head, alone (what the block mask changes): random q, k, v of a Llama
    shape (``--heads``, ``--kv-heads``, ``--head-dim``) at each of ``--tokens``, ``--share`` of the heads window +
    sinks and the rest full (causal), run by :func:`models.capture.head_rules.fused_per_head` under each kernel,
    interleaved (median of repeats, each kernel's per-pass cache kept as a forward pass keeps it for its later
    layers: the first call builds the planes and tiles); prints each kernel's time and the speed-up of each over
    ``dense``; flex's output checked against dense's (max relative difference)."""
    import torch

    from models.analysis.head_masks import HeadRules
    from models.analysis.masks import MaskMode
    from models.capture.head_rules import fused_per_head

    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    kernels = [k for k in args.kernel.split(",") if k]
    result: dict = {"device": args.device, "dtype": args.dtype, "heads": args.heads, "kv_heads": args.kv_heads,
                    "head_dim": args.head_dim, "share": args.share, "window": args.window, "sinks": args.sinks,
                    "lengths": {}}
    if device.type == "cuda":
        result["gpu"] = torch.cuda.get_device_name(0)
    for n in [int(x) for x in str(args.tokens).split(",")]:
        gen = torch.Generator().manual_seed(0)
        q = torch.randn((1, args.heads, n, args.head_dim), generator=gen).to(device, dtype)
        k = torch.randn((1, args.kv_heads, n, args.head_dim), generator=gen).to(device, dtype)
        v = torch.randn((1, args.kv_heads, n, args.head_dim), generator=gen).to(device, dtype)
        causal = torch.ones((n, n), dtype=torch.bool, device=device).tril()
        own = torch.zeros((1, 1, n, n), dtype=dtype, device=device).masked_fill_(~causal, torch.finfo(dtype).min)
        mode = MaskMode("sink_window", args.window, sinks=args.sinks)
        plane = torch.from_numpy(mode.matrix(n)).to(device)
        windowed = round(args.share * args.heads)
        row = tuple(plane if h < windowed else None for h in range(args.heads))
        modes = {0: tuple(mode if h < windowed else None for h in range(args.heads))}
        module = SimpleNamespace(scaling=args.head_dim ** -0.5, training=False)
        times: dict = {kern: [] for kern in kernels}
        outs: dict = {}
        first: dict = {}
        caches: dict = {kern: {} for kern in kernels}  # kept: a forward pass's later layers reuse its planes
        for rep in range(args.repeats + 1):
            for kern in kernels:
                rules = HeadRules(1, args.heads, n, {0: row}, {}, modes, kern)
                cache = caches[kern]
                _sync(device)
                start = time.perf_counter()
                out = fused_per_head(rules, 0, None, module, q, k, v, own, (), {"scaling": module.scaling}, cache)
                _sync(device)
                took = time.perf_counter() - start
                if rep == 0:
                    first[kern], outs[kern] = took, out[0].float()
                    print(f"  n={n} {kern}: ran {rules.kernels[0]}")
                else:
                    times[kern].append(took)
                del out
        med = {kern: statistics.median(t) for kern, t in times.items()}
        ref = outs.get("dense")
        entry = {kern: {"seconds": med[kern], "first_s": first[kern],
                        "speedup_vs_dense": med["dense"] / med[kern] if "dense" in med else None,
                        "max_rel_diff": (float((outs[kern] - ref).abs().max() / ref.abs().max())
                                         if ref is not None else None)} for kern in kernels}
        result["lengths"][str(n)] = entry
        print(f"{n} tokens, {args.heads} heads ({windowed} window {args.window} + {args.sinks} sinks), "
              f"{args.device} {args.dtype}, median of {args.repeats}:")
        for kern, e in entry.items():
            print(f"  {kern:14s} {e['seconds'] * 1e3:9.1f} ms   first {e['first_s']:6.1f} s   speed-up vs dense "
                  f"{e['speedup_vs_dense'] or float('nan'):5.2f}   max rel diff {e['max_rel_diff'] or 0:.1e}")
        del q, k, v, own, plane, row, outs, caches
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


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
    parser.add_argument("what", choices=("ratio", "layer", "duo"))
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--tokens", default="2048", help="ratio: one length; layer: lengths, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kernel", default="dense",
                        help="kernels of the mask per head, comma-separated: dense, flex, flex_compiled, auto")
    parser.add_argument("--cases", default="duo,vslash", help="ratio: duo, w70, vslash (comma-separated)")
    parser.add_argument("--share", type=float, default=0.7, help="layer: share of the heads on window + sinks")
    parser.add_argument("--heads", type=int, default=9, help="layer: query heads (smollm2-135m: 9)")
    parser.add_argument("--kv-heads", type=int, default=3)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--dtype", default="float32", help="layer: float32, bfloat16")
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048])
    parser.add_argument("--depths", type=float, nargs="+", default=list(sparse.DEPTHS))
    parser.add_argument("--draws", type=int, default=3)
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument("--sinks", type=int, default=4)
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.what == "ratio":
        args.tokens = int(args.tokens)
    {"ratio": ratio, "layer": layer, "duo": duo}[args.what](args)


if __name__ == "__main__":
    main()
