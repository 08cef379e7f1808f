"""Why a head attends here (issue 30) on smollm2-135m: what one full row's decomposition costs against
``models.analyze``, side by side in one run, and two findings measured with it.

For each length (128 and 1,024 tokens) it prints
    row / analyze     time(models.why.explain of the last layer: one more forward pass up to that layer's attention
                      call, the stream split into its parts, the query and key chains proven + row_terms of the last
                      query: every key's score split into query-side and key-side terms, all checked) / time(
                      models.analyze of the same text)
and the parts (the pass with its proofs, the terms). Both alternate in the same loop; medians are used.

Then, on repeated random tokens (``models.experiments.induction.repeated_text``: 50 random whole-word tokens written
twice, the text the induction experiment reads) it prints:

* the top induction heads (the experiment's score: mean weight from each query of the second copy to the token after
  its first occurrence) and the previous-token heads (mean weight on ``i − 1``);
* for each top induction head, the share of its raw score at the induction target that comes through the key side
  from earlier previous-token heads (``Σ_{prev heads} key_side / raw``, signed; and the same heads' share of
  ``Σ |key_side|``), against all earlier heads' together (Elhage et al. 2021 / Olsson et al. 2022: an induction head's
  key reads what a previous-token head wrote: K-composition), and beside it the K-composition scores of the same
  pairs from the weights alone (``models.why.composition``);
* the RoPE split of the top previous-token head at ``j = i − 1`` (share of the score that is positional) and the
  distance at which its curve peaks.

    python bench/why.py [--repeats 3] [--queries 16]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import models  # noqa: E402
from models import why  # noqa: E402
from models.experiments import induction  # noqa: E402

from longcontext import text_of  # noqa: E402

LENGTH = 50
TOP = 4


def cost(loaded, repeats: int) -> None:
    layers, heads = loaded.stacks["decoder"]
    for n in (128, 1024):
        text = text_of(loaded.tokenizer, n)
        models.analyze(loaded, text)  # warm up
        times: dict[str, list[float]] = {"analyze": [], "row": [], "pass": [], "terms": []}
        comps = 0
        for _ in range(repeats):
            t0 = time.perf_counter()
            analysis = models.analyze(loaded, text)
            t1 = time.perf_counter()
            explained = why.explain(loaded, analysis, "decoder", layers - 1)
            t2 = time.perf_counter()
            row = explained.row_terms(heads // 2, n - 1)
            t3 = time.perf_counter()
            comps = len(row.key_components)
            for key, value in zip(times, (t1 - t0, t3 - t1, t2 - t1, t3 - t2)):
                times[key].append(value)
            del analysis, explained, row
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"{n:>5} tokens  row / analyze {med['row'] / med['analyze']:.2f}  (analyze {med['analyze']:.2f} s; "
              f"row {med['row']:.2f} s = pass and proofs {med['pass']:.2f} s + terms {med['terms']:.2f} s; "
              f"layer {layers - 1}, {comps} parts a side)", flush=True)


def findings(loaded, queries: int) -> None:
    layers, heads = loaded.stacks["decoder"]
    text, one = induction.repeated_text(loaded, LENGTH, seed=0)
    analysis = models.analyze(loaded, text, keep=True)
    ids = [t.id for t in analysis.tokens]
    start = len(ids) - 2 * LENGTH
    weights = np.asarray(analysis.attentions["decoder"][:])
    ind = induction.induction_scores(weights, start, LENGTH)
    n = weights.shape[-1]
    prev = weights[..., np.arange(1, n), np.arange(0, n - 1)].mean(-1)
    top_ind = [divmod(int(k), heads) for k in np.argsort(-ind, axis=None)[:TOP]]
    top_prev = [divmod(int(k), heads) for k in np.argsort(-prev, axis=None)[:TOP]]
    print(f"\nrepeated random tokens: {LENGTH} x 2 (+{start} before), {n} tokens")
    print("  induction heads:     " + ", ".join(f"{lay}.{h} ({ind[lay, h]:.2f})" for lay, h in top_ind))
    print("  previous-token heads: " + ", ".join(f"{lay}.{h} ({prev[lay, h]:.2f})" for lay, h in top_prev))
    prev_set = {(lay, h) for lay, h in top_prev}
    t0 = time.perf_counter()
    comp = why.composition(loaded, "decoder")
    print(f"  composition scores of every pair of heads: {time.perf_counter() - t0:.1f} s")
    q_rows = np.linspace(start + LENGTH + 1, start + 2 * LENGTH - 1, queries).astype(int)
    for layer, head in top_ind:
        explained = why.explain(loaded, analysis, "decoder", layer)
        signed, absolute, every, weight = [], [], [], []
        for i in q_rows:
            j = int(i) - LENGTH + 1
            row = explained.row_terms(head, int(i))
            grid = row.by_head("key", j)  # (layer, heads)
            mine = sum(grid[lay, h] for lay, h in prev_set if lay < layer)
            total_abs = float(np.abs(row.key_side[j]).sum())
            signed.append(mine / float(row.raw[j]))
            absolute.append(sum(abs(grid[lay, h]) for lay, h in prev_set if lay < layer) / total_abs)
            every.append(float(grid.sum()) / float(row.raw[j]))
            weight.append(float(row.weights[j]))
        earlier = [f"{lay}.{h}" for lay, h in sorted(prev_set) if lay < layer] or ["none"]
        print(f"  induction head {layer}.{head} at its target (weight {np.mean(weight):.2f}): key side from the "
              f"previous-token heads {', '.join(earlier)}: {np.mean(signed):+.2f} of the raw score "
              f"({np.mean(absolute):.2f} of Σ|key terms|); from all earlier heads: {np.mean(every):+.2f}")
        k_comp = comp.for_head(layer, head)[1]
        print("      K-composition (weights) with them: " + ", ".join(
            f"{lay}.{h} {k_comp[lay, h]:.3f}" for lay, h in sorted(prev_set) if lay < layer)
            + f"; mean over every earlier head {np.nanmean(k_comp):.3f}")
    layer, head = top_prev[0]
    explained = why.explain(loaded, analysis, "decoder", layer)
    shares, peaks, weighted = [], [], []
    for i in q_rows:
        split = explained.rope_split(head, int(i), int(i) - 1, max_distance=32)
        shares.append(float(split.share[int(i) - 1]))
        weighted.append(split.weighted_share)
        peaks.append(int(split.distances[np.argmax(split.curve)]))
    print(f"  RoPE split of previous-token head {layer}.{head} at j = i - 1: positional share {np.mean(shares):.2f} "
          f"(weighted over the row {np.mean(weighted):.2f}); its curve peaks at distance "
          f"{statistics.mode(peaks)} in {peaks.count(statistics.mode(peaks))}/{len(peaks)} queries")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--queries", type=int, default=16)
    parser.add_argument("--skip-cost", action="store_true")
    args = parser.parse_args()
    loaded = models.load("smollm2-135m", device="cpu")
    print(f"smollm2-135m on {loaded.device}, {args.repeats} repeats (medians)")
    if not args.skip_cost:
        cost(loaded, args.repeats)
    findings(loaded, args.queries)


if __name__ == "__main__":
    main()
