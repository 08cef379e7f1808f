"""Long contexts on smollm2-135m: ``models.analyze`` vs a plain forward pass, side by side in one run.

For each length (512 and 2,048 tokens; 8,192 with ``--long``) it prints
    analyze / plain   time(models.analyze: nothing n^2 is kept at these lengths, so every layer runs the
                      fused sdpa kernel; top-k and loss at every position, logits in blocks) /
                      time(plain forward: transformers' default attention (sdpa), no weights)
    layer / plain     time(the exact weights of one head of the middle layer, a.attentions["decoder"][15, 0],
                      computed on demand) / time(plain forward)
    summary / plain   time(per-head statistics and pooled overview maps of every layer, computed the first
                      time they are read: one more forward pass that sees every layer's weights block by
                      block) / time(plain forward)
    peak RSS          the process's peak resident memory during analyze, above what it held just before
                      (the model, its tokenizer and the plain model are already loaded), in MiB
    held              what the analysis holds besides tokens and predictions: overview maps and masks, MiB
Both runs alternate in the same loop (machine load hits both alike); the median of each is used. The
peak is read from the kernel's high-water mark (VmHWM), reset before each analyze (/proc/self/clear_refs).

    python bench/longcontext.py [--repeats 3] [--long]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

import models  # noqa: E402

SENTENCE = "The cat chased the mouse across the old garden while the dog slept in the warm afternoon sun. "


def _status(key: str) -> int:
    """A field of /proc/self/status in KiB."""
    return int(re.search(rf"{key}:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


def text_of(tokenizer, n_tokens: int) -> str:
    """A text that tokenises to ``n_tokens`` tokens (the tokenizer adds none for smollm2)."""
    ids = tokenizer(SENTENCE * (n_tokens // 10 + 10))["input_ids"][:n_tokens]
    text = tokenizer.decode(ids)
    assert len(tokenizer(text)["input_ids"]) == n_tokens, n_tokens
    return text


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--long", action="store_true", help="also 8,192 tokens (minutes on 2 cores)")
    parser.add_argument("--lengths", default=None, help="comma-separated token counts (overrides the default)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    lengths = [int(x) for x in args.lengths.split(",")] if args.lengths else [512, 2048] + ([8192] if args.long else [])

    loaded = models.load("smollm2-135m", device=args.device)
    plain = AutoModelForCausalLM.from_pretrained(str(loaded.folder), dtype=loaded.dtype).to(loaded.device).eval()
    print(f"model smollm2-135m on {loaded.device} ({loaded.dtype}), threads={torch.get_num_threads()}, "
          f"plain attention={plain.config._attn_implementation}, max positions={loaded.max_positions}")
    models.analyze(loaded, SENTENCE)  # warm-up
    print(f"{'tokens':>6} {'analyze s':>10} {'plain s':>8} {'analyze/plain':>14} {'layer s':>8} {'layer/plain':>12} "
          f"{'summary/plain':>14} {'peak RSS MiB':>13} {'held MiB':>9}")
    for n in lengths:
        text = text_of(loaded.tokenizer, n)
        ids = loaded.tokenizer(text, return_tensors="pt")["input_ids"].to(loaded.device)
        t_an, t_pl, t_layer, t_sum, peaks = [], [], [], [], []
        a = None
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            plain(input_ids=ids)
            t1 = time.perf_counter()
            del a
            base = _status("VmRSS")
            _reset_peak()
            a = models.analyze(loaded, text)
            t2 = time.perf_counter()
            peaks.append((_status("VmHWM") - base) / 1024)
            a.attentions["decoder"]._cache.clear()
            t3 = time.perf_counter()
            w = a.attentions["decoder"][15, 0]
            t4 = time.perf_counter()
            a.statistics["decoder"]
            t5 = time.perf_counter()
            t_sum.append(t5 - t4)
            t_pl.append(t1 - t0)
            t_an.append(t2 - t1)
            t_layer.append(t4 - t3)
        assert a.truncated == 0 and len(a.tokens) == n and not a.kept
        assert abs(float(w.sum(-1).min()) - 1) < 1e-4 and abs(float(w.sum(-1).max()) - 1) < 1e-4
        held = sum(v.nbytes for v in a.overview.values()) + sum(m.nbytes for d in a.masks.values() for m in d.distinct)
        m_an, m_pl, m_layer, m_sum = (statistics.median(x) for x in (t_an, t_pl, t_layer, t_sum))
        print(f"{n:>6} {m_an:>10.2f} {m_pl:>8.2f} {m_an / m_pl:>14.2f} {m_layer:>8.2f} {m_layer / m_pl:>12.2f} "
              f"{m_sum / m_pl:>14.2f} {max(peaks):>13.0f} {held / 2 ** 20:>9.1f}")


if __name__ == "__main__":
    main()
