"""Cost of capturing attention weights and value of the KV cache, measured side by side in one run.

    python bench/teaching.py [model] [max_n]

Prints, for each sequence length, the forward time and peak memory of the transformer body with the
default ``sdpa`` attention and with every layer's weights captured (Dikkat's path), and their ratios;
then greedy generation with and without the KV cache on smollm2-135m. Ratios, not absolute times,
are the result: other work on the machine changes both sides of a pair alike.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import models  # noqa: E402
from models.lessons import cost, kvcache  # noqa: E402


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "minilm-l6"
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 512
    loaded = models.load(name)
    points = cost.measure_cost(loaded, cost.default_lengths(loaded, top=top), repeats=3)
    by = {(p.n, p.implementation): p for p in points}
    print(f"{name} on {loaded.device}: forward pass of the body, fastest of 3")
    print(f"{'n':>6} {'sdpa s':>9} {'capt s':>9} {'time x':>7} {'sdpa MiB':>9} {'capt MiB':>9} {'mem x':>7}")
    for n in sorted({p.n for p in points}):
        s, c = by.get((n, "sdpa")), by.get((n, "captured"))
        if not (s and c):
            continue
        print(f"{n:>6} {s.seconds:>9.4f} {c.seconds:>9.4f} {c.seconds / s.seconds:>7.2f} "
              f"{s.peak_bytes / 2**20:>9.2f} {c.peak_bytes / 2**20:>9.2f} {c.peak_bytes / max(s.peak_bytes, 1):>7.2f}")
    gen = models.load("smollm2-135m")
    with_cache, without = kvcache.compare_generation(gen, "The cat chased the mouse", max_new_tokens=32)
    print(f"smollm2-135m greedy, 32 tokens: with cache {with_cache.tokens_per_second:.2f} tok/s, without "
          f"{without.tokens_per_second:.2f} tok/s, "
          f"speed-up x{with_cache.tokens_per_second / without.tokens_per_second:.2f}, "
          f"same tokens: {with_cache.tokens == without.tokens}")


if __name__ == "__main__":
    main()
