"""Long contexts on smollm2-135m (or ``--model``): ``models.analyze`` vs a plain forward pass, side by side in one run.

For each length (512 and 2,048 tokens; 8,192 with ``--long``) it prints
    analyze / plain   time(models.analyze: nothing n^2 is kept at these lengths, so every layer runs the
                      fused sdpa kernel; top-k and loss at every position, logits in blocks) /
                      time(plain forward: transformers' default attention (sdpa), no weights)
    layer / plain     time(the exact weights of one head of the middle layer, a.attentions["decoder"][15, 0] of smollm2,
                      computed on demand) / time(plain forward)
    summary / plain   time(per-head statistics and pooled overview maps of every layer, computed the first
                      time they are read: one more forward pass that sees every layer's weights block by
                      block) / time(plain forward)
    peak RSS          the process's peak resident memory during analyze, above what it held just before
                      (the model, its tokenizer and the plain model are already loaded), in MiB
    held              what the analysis holds besides tokens and predictions: overview maps and masks, MiB
    GPU peak          on a CUDA device: the most GPU memory torch allocated during analyze, above what it held
                      just before, in MiB
    stats/plain       with ``--stats tile,flex_compiled``: time(models.analysis.stats_pass.head_statistics with that
                      kernel: every head's per-query first/previous/self shares, entropy, lse and the attention
                      each key receives, from the log-sum-exp, issue 45) / time(plain forward), its peak RSS, and
                      the largest difference of its middle layer's head 0 statistics from the ones read off the
                      exact weights of that head (relative to the value where it is above 1: the column sums)
Both runs alternate in the same loop (machine load hits both alike); the median of each is used. The
peak is read from the kernel's high-water mark (VmHWM), reset before each analyze (/proc/self/clear_refs).

With ``--export`` it prints instead, for each length (default 512), the all-weights export (issue 45, step 2):
    lse / eager       time(models.analyze(keep="lse") + np.asarray(a.attentions["decoder"]): one fused pass that keeps
                      each layer's queries, keys and log-sum-exp, then every weight from them,
                      models.analysis.lse_weights) / time(transformers' eager forward, output_attentions=True)
    replay / eager    the same with keep=False (today's path: the weights by a second, eager forward pass)
    analyze, weights  the lse path split: the analysis (its fused pass, top-k and loss at every position) and the
                      weights computed from q, k and lse, each / eager; plain / eager: a plain sdpa forward
    error             the largest |weight - eager weight| of each path over every layer, head, row and key
    q,k,lse MiB       what the lse analysis holds for its weights (linear in n)
All four runs alternate in one loop; medians.

    python bench/longcontext.py [--repeats 3] [--long] [--lengths 512,2048] [--device cuda] [--model KEY|FOLDER]
        [--json PATH] [--stats tile,flex,flex_compiled] [--export]

``--device`` is any device models.load takes (cpu, cuda, cuda:1, auto), in its default dtype (bfloat16 on a CUDA
GPU); times on a GPU are taken after torch.cuda.synchronize(). ``--model``: another decoder with its tokenizer,
e.g. a folder of smollm2-135m's shape with random weights (bench/device_check.py random-llama).
"""

from __future__ import annotations

import argparse
import json
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
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:  # a container that forbids it: the peak is then the process's whole high-water mark
        pass


def _sync(device: torch.device) -> None:
    """Wait for the GPU's queued work, so that a time taken next includes it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def text_of(tokenizer, n_tokens: int) -> str:
    """A text that tokenises to ``n_tokens`` tokens (the tokenizer adds none for smollm2 and its shape)."""
    ids = tokenizer(SENTENCE * (n_tokens // 10 + 10))["input_ids"][:n_tokens]
    text = tokenizer.decode(ids)
    assert len(tokenizer(text)["input_ids"]) == n_tokens, n_tokens
    return text


def _reference(w: torch.Tensor) -> dict[str, torch.Tensor]:
    """One layer's statistics read off its weights ``(heads, n, n)`` (float64)."""
    w = w.double()
    n = w.shape[-1]
    rows = torch.arange(n)
    prev = torch.zeros(w.shape[:2], dtype=torch.float64)
    prev[:, 1:] = w[:, rows[1:], rows[1:] - 1]
    logw = torch.where(w > 0, w.clamp_min(1e-300).log(), torch.zeros_like(w))
    return {"first": w[..., 0], "previous": prev, "self": w[:, rows, rows], "entropy": -(w * logw).sum(-1),
            "received": w.sum(-2)}


def _stats_pass(args, loaded, plain, ids, text, a, mid: int, plain_s: float) -> dict:
    """The statistics pass with each kernel of ``--stats`` (module docstring), timed beside the plain forward."""
    from models.analysis.stats_pass import head_statistics

    out = {}
    for kernel in [k for k in args.stats.split(",") if k]:
        head_statistics(loaded, text[:200], kernel=kernel)  # warm-up (a compiled kernel compiles here)
        times, plains, peaks = [], [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            plain(input_ids=ids)
            t1 = time.perf_counter()
            base = _status("VmRSS")
            _reset_peak()
            got = head_statistics(loaded, text, kernel=kernel)
            times.append(time.perf_counter() - t1)
            plains.append(t1 - t0)
            peaks.append((_status("VmHWM") - base) / 1024)
        # head 0 of the middle layer: a whole layer's weights pass the 1 GiB asked at once from ~5,400 tokens
        want = _reference(torch.as_tensor(a.attentions["decoder"][mid, 0])[None])
        error = max(float(((torch.as_tensor(got.stats[k][mid, :1]).double() - v).abs() / v.abs().clamp_min(1.0)).max())
                    for k, v in want.items())
        ratio = statistics.median(times) / statistics.median(plains)
        print(f"   stats pass ({kernel}): {statistics.median(times):.2f} s, {ratio:.2f} x plain, peak RSS "
              f"{max(peaks):.0f} MiB, layer {mid} head 0 against its weights within {error:.1e} (relative, "
              "absolute below 1)", flush=True)
        out[kernel] = {"seconds": statistics.median(times), "plain_s": statistics.median(plains), "ratio": ratio,
                       "peak_rss_mib": max(peaks), "max_abs_error_layer": error}
    return out


def _export(args, loaded, plain, lengths: list[int]) -> list[dict]:
    """The all-weights export by the lse path and by today's replay, each beside transformers' eager forward with
    ``output_attentions`` (module docstring)."""
    import numpy as np

    dev = loaded.device
    eager = AutoModelForCausalLM.from_pretrained(str(loaded.folder), dtype=loaded.dtype,
                                                 attn_implementation="eager").to(dev).eval()
    print(f"{'tokens':>6} {'eager s':>8} {'lse/eager':>10} {'replay/eager':>13} {'analyze/eager':>14} "
          f"{'weights/eager':>14} {'plain/eager':>12} {'lse error':>10} {'replay error':>13} {'q,k,lse MiB':>12}")
    rows = []
    for n in lengths:
        text = text_of(loaded.tokenizer, n)
        ids = loaded.tokenizer(text, return_tensors="pt")["input_ids"].to(dev)
        models.analyze(loaded, text[:300], keep="lse")  # warm-up
        t = {k: [] for k in ("eager", "lse", "replay", "analyze", "weights", "plain")}
        for _ in range(args.repeats):
            _sync(dev)
            t0 = time.perf_counter()
            ref = eager(input_ids=ids, output_attentions=True).attentions
            _sync(dev)
            t1 = time.perf_counter()
            a = models.analyze(loaded, text, keep="lse")
            t2 = time.perf_counter()
            got = np.asarray(a.attentions["decoder"])
            t3 = time.perf_counter()
            b = models.analyze(loaded, text, keep=False)
            old = np.asarray(b.attentions["decoder"])
            _sync(dev)
            t4 = time.perf_counter()
            plain(input_ids=ids)
            _sync(dev)
            t5 = time.perf_counter()
            for k, v in (("eager", t1 - t0), ("lse", t3 - t1), ("analyze", t2 - t1), ("weights", t3 - t2),
                         ("replay", t4 - t3), ("plain", t5 - t4)):
                t[k].append(v)
        want = torch.stack([x[0] for x in ref]).float().cpu().numpy()
        errors = [float(np.abs(x - want).max()) for x in (got, old)]
        med = {k: statistics.median(v) for k, v in t.items()}
        held = a.attentions["decoder"].lse.nbytes / 2 ** 20 if a.attentions["decoder"].lse is not None else 0.0
        print(f"{n:>6} {med['eager']:>8.2f} {med['lse'] / med['eager']:>10.2f} {med['replay'] / med['eager']:>13.2f} "
              f"{med['analyze'] / med['eager']:>14.2f} {med['weights'] / med['eager']:>14.2f} "
              f"{med['plain'] / med['eager']:>12.2f} {errors[0]:>10.1e} {errors[1]:>13.1e} {held:>12.1f}", flush=True)
        rows.append({"tokens": n, **{f"{k}_s": v for k, v in med.items()}, "lse_error": errors[0],
                     "replay_error": errors[1], "lse_held_mib": held, "source": a.attentions["decoder"].source})
        del a, b, got, old, ref
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--long", action="store_true", help="also 8,192 tokens (minutes on 2 cores)")
    parser.add_argument("--lengths", default=None, help="comma-separated token counts (overrides the default)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, mps or auto (as models.load)")
    parser.add_argument("--model", default="smollm2-135m", help="a decoder: catalog key or folder")
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    parser.add_argument("--stats", default="",
                        help="kernels of the statistics pass to time (tile, flex, flex_compiled)")
    parser.add_argument("--export", action="store_true",
                        help="only the all-weights export: lse path and replay vs eager (default length 512)")
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    lengths = [int(x) for x in args.lengths.split(",")] if args.lengths else [512, 2048] + ([8192] if args.long else [])
    if args.export and not args.lengths:
        lengths = [512]

    loaded = models.load(args.model, device=args.device)
    dev = loaded.device
    gpu = dev.type == "cuda"
    plain = AutoModelForCausalLM.from_pretrained(str(loaded.folder), dtype=loaded.dtype).to(dev).eval()
    layers = loaded.stacks["decoder"][0]
    mid = layers // 2  # 15 of smollm2's 30
    # rows of on-demand weights sum to 1: float32 within 1e-4; bfloat16/float16 within 4e-3 (bf16 keeps 8 bits, 2^-9
    # = 2e-3 relative per value; minilm-l6 in bf16 on CPU: 2.5e-3, bench/device_check.py)
    row_tol = 1e-4 if loaded.dtype == torch.float32 else 4e-3
    print(f"model {args.model} on {dev} ({loaded.dtype}), threads={torch.get_num_threads()}, "
          f"plain attention={plain.config._attn_implementation}, max positions={loaded.max_positions}, "
          f"layers={layers}" + (f", gpu={torch.cuda.get_device_name(dev)}" if gpu else ""))
    models.analyze(loaded, SENTENCE)  # warm-up
    plain(input_ids=loaded.tokenizer(SENTENCE, return_tensors="pt")["input_ids"].to(dev))
    _sync(dev)
    if args.export:
        rows = _export(args, loaded, plain, lengths)
        if args.json:
            Path(args.json).write_text(json.dumps({"model": args.model, "device": str(dev), "dtype": str(loaded.dtype),
                                                   "export": rows}, indent=1) + "\n")
        return
    print(f"{'tokens':>6} {'analyze s':>10} {'plain s':>8} {'analyze/plain':>14} {'layer s':>8} {'layer/plain':>12} "
          f"{'summary/plain':>14} {'peak RSS MiB':>13} {'held MiB':>9}" + (f" {'GPU peak MiB':>13}" if gpu else ""))
    rows, problems = [], []
    for n in lengths:
        text = text_of(loaded.tokenizer, n)
        ids = loaded.tokenizer(text, return_tensors="pt")["input_ids"].to(loaded.device)
        t_an, t_pl, t_layer, t_sum, peaks, gpu_peaks = [], [], [], [], [], []
        a = None
        for _ in range(args.repeats):
            _sync(dev)
            t0 = time.perf_counter()
            plain(input_ids=ids)
            _sync(dev)
            t1 = time.perf_counter()
            del a
            base = _status("VmRSS")
            _reset_peak()
            if gpu:
                gpu_base = torch.cuda.memory_allocated(dev)
                torch.cuda.reset_peak_memory_stats(dev)
            a = models.analyze(loaded, text)
            _sync(dev)
            t2 = time.perf_counter()
            peaks.append((_status("VmHWM") - base) / 1024)
            if gpu:
                gpu_peaks.append((torch.cuda.max_memory_allocated(dev) - gpu_base) / 2 ** 20)
            a.attentions["decoder"]._cache.clear()
            t3 = time.perf_counter()
            w = a.attentions["decoder"][mid, 0]
            _sync(dev)
            t4 = time.perf_counter()
            a.statistics["decoder"]
            _sync(dev)
            t5 = time.perf_counter()
            t_sum.append(t5 - t4)
            t_pl.append(t1 - t0)
            t_an.append(t2 - t1)
            t_layer.append(t4 - t3)
        if not (a.truncated == 0 and len(a.tokens) == n and not a.kept):
            problems.append(f"{n} tokens: truncated {a.truncated}, {len(a.tokens)} tokens, kept {a.kept} (want 0, "
                            f"{n}, False: a shorter text's weights are all kept)")
        sums = w.sum(-1)
        row_error = float(max(abs(sums.min() - 1), abs(sums.max() - 1)))
        if not row_error < row_tol:
            problems.append(f"{n} tokens: a row of layer {mid} head 0 sums to 1 within {row_error:.2e}, "
                            f"not {row_tol:g}")
        held = sum(v.nbytes for v in a.overview.values()) + sum(m.nbytes for d in a.masks.values() for m in d.distinct)
        m_an, m_pl, m_layer, m_sum = (statistics.median(x) for x in (t_an, t_pl, t_layer, t_sum))
        print(f"{n:>6} {m_an:>10.2f} {m_pl:>8.2f} {m_an / m_pl:>14.2f} {m_layer:>8.2f} {m_layer / m_pl:>12.2f} "
              f"{m_sum / m_pl:>14.2f} {max(peaks):>13.0f} {held / 2 ** 20:>9.1f}"
              + (f" {max(gpu_peaks):>13.0f}" if gpu else ""), flush=True)
        rows.append({"tokens": n, "analyze_s": m_an, "plain_s": m_pl, "layer_s": m_layer, "summary_s": m_sum,
                     "peak_rss_mib": max(peaks), "held_mib": held / 2 ** 20,
                     "gpu_peak_mib": max(gpu_peaks) if gpu else None,
                     "row_sum_error": row_error, "stats": _stats_pass(args, loaded, plain, ids, text, a, mid, m_pl)})
        if args.json:  # after each length: a run stopped at its time limit keeps what it measured
            Path(args.json).write_text(json.dumps({"model": args.model, "device": str(dev), "dtype": str(loaded.dtype),
                                                   "rows": rows, "problems": problems}, indent=1) + "\n")
    if problems:  # after every length's times are printed
        raise SystemExit("\n".join(problems))


if __name__ == "__main__":
    main()
