"""The information flow's cost on smollm2-135m, against ``models.analyze`` side by side in one run (issue 14).

For each length (128 and 1,024 tokens) it prints
    flow / analyze    time(models.information_flow: one more forward pass, each layer decomposed as it
                      finishes + the graph of routes to the last token at threshold 0.04, its token
                      contributions computed for the rows on the route only + the logit lens of the last
                      position) / time(models.analyze of the same text)
and, beside it, the parts: the flow pass, the route (with its number of nodes), the lens, each head's direct
effect, and one whole layer's token contributions (every row: n² × d work, what the route avoids). Both runs
alternate in the same loop (machine load hits both alike); the median of each is used. Goal: flow / analyze ≤ 2.

    python bench/flow.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import models  # noqa: E402

from longcontext import text_of  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    loaded = models.load("smollm2-135m", device="cpu")
    print(f"smollm2-135m on {loaded.device}, {args.repeats} repeats (medians)")
    for n in (128, 1024):
        text = text_of(loaded.tokenizer, n)
        models.analyze(loaded, text)  # warm up
        times: dict[str, list[float]] = {k: [] for k in ("analyze", "flow", "pass", "route", "lens", "direct", "layer")}
        nodes = 0
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            analysis = models.analyze(loaded, text)
            t1 = time.perf_counter()
            flow = models.information_flow(loaded, analysis)
            t2 = time.perf_counter()
            route = flow.route(threshold=0.04)
            t3 = time.perf_counter()
            flow.logit_lens()
            t4 = time.perf_counter()
            flow.direct_effect()
            t5 = time.perf_counter()
            flow.token_shares(len(flow.layers) // 2)
            t6 = time.perf_counter()
            nodes = len(route.nodes)
            for key, value in zip(times, (t1 - t0, t4 - t1, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5)):
                times[key].append(value)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"{n:>5} tokens  flow / analyze {med['flow'] / med['analyze']:.2f}  "
              f"(analyze {med['analyze']:.2f} s; pass {med['pass']:.2f} s, route {med['route']:.2f} s "
              f"[{nodes} nodes], lens {med['lens']:.3f} s; direct effects {med['direct']:.2f} s; "
              f"one whole layer's token contributions {med['layer']:.2f} s)")


if __name__ == "__main__":
    main()
