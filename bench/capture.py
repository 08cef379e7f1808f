"""Cost of capturing attention: ``models.analyze`` vs a plain forward pass, side by side in one run.

For minilm-l6 at 16, 128 and 512 tokens it prints
    ratio = time(analyze: tokens with offsets, words, pooled embedding; up to 32 MiB of weights (128
            tokens here) every layer's eager weights kept as float32 numpy, above it (512) nothing n^2
            is kept and every layer runs the fused sdpa kernel, weights computed when indexed)
          / time(plain forward: transformers' default attention implementation (sdpa), no weights)
Both runs alternate in the same loop (so machine load hits both alike); the median of each is used.

    python bench/capture.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from transformers import AutoModel  # noqa: E402

import models  # noqa: E402


def text_of(tokenizer, n_tokens: int) -> str:
    """An English text that tokenises to exactly ``n_tokens`` tokens including [CLS]/[SEP]."""
    words = ("the cat chased the mouse across the old garden while the dog slept " * 200).split()
    lo, hi = 1, len(words)
    while lo < hi:
        mid = (lo + hi) // 2
        if len(tokenizer(" ".join(words[:mid]))["input_ids"]) < n_tokens:
            lo = mid + 1
        else:
            hi = mid
    text = " ".join(words[:lo])
    assert len(tokenizer(text)["input_ids"]) == n_tokens, n_tokens
    return text


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--lengths", default="16,128,512")
    args = parser.parse_args()
    torch.set_grad_enabled(False)

    loaded = models.load("minilm-l6", device="cpu")
    plain = AutoModel.from_pretrained(str(loaded.folder), dtype=torch.float32).eval()  # default: sdpa
    print(f"model minilm-l6 on cpu, threads={torch.get_num_threads()}, "
          f"plain attention={plain.config._attn_implementation}")
    print(f"{'tokens':>6} {'analyze ms':>11} {'plain ms':>9} {'ratio':>6}")
    for n in [int(x) for x in args.lengths.split(",")]:
        text = text_of(loaded.tokenizer, n)
        ids = loaded.tokenizer(text, return_tensors="pt")
        for _ in range(2):  # warm-up
            models.analyze(loaded, text)
            plain(**ids)
        t_an, t_pl = [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            a = models.analyze(loaded, text)
            t1 = time.perf_counter()
            plain(**ids)
            t2 = time.perf_counter()
            t_an.append(t1 - t0)
            t_pl.append(t2 - t1)
        assert a.attentions["encoder"].shape == (6, 12, n, n)
        m_an, m_pl = statistics.median(t_an), statistics.median(t_pl)
        print(f"{n:>6} {m_an * 1e3:>11.2f} {m_pl * 1e3:>9.2f} {m_an / m_pl:>6.2f}")


if __name__ == "__main__":
    main()
