"""Batched ablation scores vs one forward pass per head, measured side by side in one run.

For each model, on one 16-token sentence: the time of ``models.pruning.ablation_scores`` (one head mask
per batch row, several batch sizes) divided by the time of ``ablation_scores_one_at_a_time`` (one
forward pass of batch 1 per head), without and with prefix reuse (layers before a batch's first
switched-off head run once). Also prints the largest difference between the two score arrays.

    python bench/ablation.py                      # smollm2-135m (270 heads) and minilm-l6 (72 heads)
    python bench/ablation.py --models minilm-l6 --batch-sizes 32 64
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import models  # noqa: E402
from models import pruning  # noqa: E402

SENTENCE = ("The old fisherman told the children a long story about the storm that sank his first boat "
            "near the northern island")
TOKENS = 16


def timed(repeats: int, fn):
    """(result, fastest wall time in s) of ``repeats`` calls."""
    best, result = float("inf"), None
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return result, best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["smollm2-135m", "minilm-l6"])
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[32, 64])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="time each batched variant this many times and keep the fastest (the one-per-head "
                             "loop runs --single-repeats times)")
    parser.add_argument("--single-repeats", type=int, default=1)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, sentence cut to {TOKENS} tokens")
    for name in args.models:
        m = models.load(name, device=args.device)
        heads = len(pruning.head_list(m))
        prep = pruning.prepare(m, SENTENCE, max_tokens=TOKENS)
        assert prep.n_tokens == TOKENS, prep.n_tokens
        # warm up (first call allocates)
        pruning.evaluate(m, prep, np.ones((2, heads)), batch_size=2)
        single, t_single = timed(
            args.single_repeats, lambda m=m: pruning.ablation_scores_one_at_a_time(m, SENTENCE, max_tokens=TOKENS))
        print(f"\n{name}: {heads} heads, {m.device}, {m.dtype}, metric {pruning.metric_kind(m)}")
        print(f"  one forward pass per head        : {t_single:8.2f} s  ({heads + 1} passes)")
        for reuse in (False, True):
            for bs in args.batch_sizes:
                batched, t_batched = timed(args.repeats, lambda m=m, bs=bs, reuse=reuse: pruning.ablation_scores(
                    m, SENTENCE, batch_size=bs, max_tokens=TOKENS, reuse_prefix=reuse))
                diff = float(np.abs(batched.flat() - single.flat()).max())
                label = f"batched{' + prefix reuse' if reuse else ''}, batch {bs}"
                print(f"  {label:<33}: {t_batched:8.2f} s  ({batched.forward_passes} passes)  "
                      f"ratio {t_batched / t_single:.3f}  max |diff| {diff:.1e}")


if __name__ == "__main__":
    main()
