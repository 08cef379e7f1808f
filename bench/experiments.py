"""The Experiments page's time estimates against the measured runs, side by side in one run (issue 15).

For each experiment and bundled model it prints
    estimate / actual    models.experiments.estimate_seconds (a measured plain forward pass × the passes the
                         experiment makes, or the module's own probe of its first unit of work) ÷ the wall time of
                         models.experiments.run, measured right after it
and the experiment's headline figure, so a run of this script is also a record of what the page shows. Goal: every
ratio within 0.5 .. 2 (the page says "about N s").

    python bench/experiments.py [--only sinks,induction] [--gemma]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

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
    return f"flat to {r.flat_share:.0%} by importance, {r.flat_share_random:.0%} at random"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="", help="comma-separated experiment keys")
    parser.add_argument("--gemma", action="store_true", help="also gemma3-270m (needs make install-gemma)")
    args = parser.parse_args()
    keys = [k for k in E.EXPERIMENTS if not args.only or k in args.only.split(",")]
    print(f"{'experiment':<10} {'model':<22} {'estimate s':>10} {'actual s':>9} {'ratio':>6}  headline")
    for key in keys:
        for name in E.get(key).models:
            if name == "gemma3-270m" and not args.gemma:
                continue
            loaded = models.load(name, device="cpu")
            estimate = E.estimate_seconds(key, loaded)
            result = E.run(key, loaded)
            print(f"{key:<10} {name:<22} {estimate:>10.1f} {result.seconds:>9.1f} {estimate / result.seconds:>6.2f}  "
                  f"{headline(key, result)}", flush=True)


if __name__ == "__main__":
    main()
