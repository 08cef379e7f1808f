"""The Experiments page's time estimates against the measured runs, side by side in one run (issue 15).

For each experiment and bundled model it prints
    estimate / actual    models.experiments.estimate_seconds (a measured plain forward pass × the passes the
                         experiment makes, or the module's own probe of its first unit of work) ÷ the wall time of
                         models.experiments.run, measured right after it
and the experiment's headline figure, so a run of this script is also a record of what the page shows. Goal
(issue 27): every ratio within 0.7 .. 1.3 (the page says "about N s"). The estimate is taken right after the model
loads, as on a page that loads it.

On a machine shared with other work the wall times say more about the others than about the estimate: with two
cores taken, torch's two threads wait on each other and one pass can take 10-50 times its quiet time, in the
estimate's few timed units as in the run's hundreds. ``--cpu-clock`` then times both with the process's CPU time on
one torch thread (``time.perf_counter`` replaced for this process): what the others take is left out of both.

    python bench/experiments.py [--only sinks,induction] [--gemma] [--skip KEY:MODEL,...] [--cpu-clock]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import models  # noqa: E402
import models.experiments as E  # noqa: E402


def headline(key: str, r) -> str:
    if key == "sinks":
        low, high = r.share.bottom_top()
        s = r.streaming
        return (f"first-token share {low:.3f} (layers 0-1) / {high:.3f}; full {s.full:.3f} nats, window "
                f"{np.round(s.window, 3).tolist()}, +{s.sinks} sinks {np.round(s.with_sinks, 3).tolist()}")
    if key == "induction":
        return (f"best score {r.scores.max():.3f} at {r.top[0][1:]}, loss {r.loss_first:.2f} -> {r.loss_second:.2f}, "
                f"top off {r.loss_second_off:.2f}, random off {np.round(r.loss_second_random, 2).tolist()}")
    if key == "clark":
        sep = r.targets.per_layer["separator"]
        return f"[SEP] per layer {np.round(sep, 2).tolist()}, types {r.patterns.counts}"
    if key == "alignment":
        return (f"gap to transformers max {r.max_difference:.3f} s, mean {r.mean_difference:.3f} s; control mean "
                f"{r.control_mean_difference:.3f} s")
    if key == "grammar":
        return (f"best tracking head {r.best} {r.tracking.max():.0%} (chance {r.tracking_chance:.0%}); {r.metric} "
                f"{r.full:.3f} -> top off {r.off:.3f}, random off {np.round(r.random, 3).tolist()}")
    if key == "inner_language":
        stream, p = r.english_peak(0)
        return (f"{len(r.words)} pairs; English peaks at stream {stream} ({p:.3f}); correct "
                f"{np.round(r.correct, 2).tolist()}")
    if key == "prunable":
        return f"flat to {r.flat_share:.0%} by importance, {r.flat_share_random:.0%} at random"
    return ""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="", help="comma-separated experiment keys")
    parser.add_argument("--gemma", action="store_true", help="also gemma3-270m (needs make install-gemma)")
    parser.add_argument("--skip", default="", help="comma-separated KEY:MODEL pairs left out (a long run done once)")
    parser.add_argument("--cpu-clock", action="store_true",
                        help="one torch thread, process CPU time as the clock (a machine shared with other work)")
    args = parser.parse_args()
    if args.cpu_clock:
        torch.set_num_threads(1)
        time.perf_counter = time.process_time  # the estimators' and the runs' Stopwatch read it at each call
    keys = [k for k in E.EXPERIMENTS if not args.only or k in args.only.split(",")]
    skip = set(filter(None, args.skip.split(",")))
    clock = "CPU s, 1 thread" if args.cpu_clock else f"wall s, {torch.get_num_threads()} threads"
    print(f"{'experiment':<14} {'model':<22} {'estimate':>9} {'actual':>9} {'ratio':>6}  ({clock}; load average "
          f"{os.getloadavg()[0]:.1f})  headline")
    for key in keys:
        for name in E.get(key).models:
            if (name == "gemma3-270m" and not args.gemma) or f"{key}:{name}" in skip:
                continue
            loaded = models.load(name, device="cpu")
            start = time.perf_counter()
            estimate = E.estimate_seconds(key, loaded)
            took = time.perf_counter() - start
            result = E.run(key, loaded)
            print(f"{key:<14} {name:<22} {estimate:>9.1f} {result.seconds:>9.1f} {estimate / result.seconds:>6.2f}  "
                  f"(estimated in {took:.1f}) {headline(key, result)}", flush=True)


if __name__ == "__main__":
    main()
