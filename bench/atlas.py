"""Head atlas cost and checks (issue 28), each case in a fresh process (its peak memory is its own):

* ``minilm``: minilm-l6 on 500 sentences (the shipped English corpus split into sentences) and on the whole
  shipped English corpus; ``smollm2``: smollm2-135m on 200 texts of 512 tokens (the shipped corpus
  joined and cut). Printed: seconds, seconds per text ÷ one ``models.analyze`` of the same text (median over
  the texts, analysed side by side in the same process), peak resident memory (VmHWM).
* ``induction``: on smollm2-135m, the atlas's induction score on repeated random tokens against the rise of the
  second copy's loss when each head is switched off, minus the first copy's rise (what the head does for copying
  alone; a head every prediction needs raises both): Spearman's ρ over all 270 heads, over the 10 best-scored
  heads, and against the second copy's rise alone; the top heads of both.

    python bench/atlas.py [minilm|minilm-corpus|smollm2|induction ...]   (ATLAS_TEXTS=40: fewer smollm2 texts)
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def peak_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def sentences(lang: str, count: int) -> list[str]:
    from models import atlas

    out = []
    for text in atlas.shipped_corpus(lang).texts:
        out.extend(s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if len(s.split()) >= 3)
    return out[:count]


def chunks(loaded, lang: str, count: int, tokens: int) -> list[str]:
    from models import atlas

    words = " ".join(atlas.shipped_corpus(lang).texts).split()
    out, i = [], 0
    step = int(tokens * 0.7)  # about 1.4 tokens a word in English for smollm2: a little over 512, cut by max_tokens
    while len(out) < count:
        out.append(" ".join(words[i % len(words):][:step]) or "x")
        i += step
    return out


def case(name: str) -> dict:
    import models
    from models import atlas

    if name == "induction":
        from models.pruning.importance import rank_correlation

        loaded = models.load("smollm2-135m", device="cpu")
        a = atlas.build_atlas(loaded, atlas.shipped_corpus("en"), limit=100, repeats=16)
        start = time.perf_counter()
        heads, deltas = atlas.second_copy_effects(loaded, sequences=8, length=40)
        _, first = atlas.second_copy_effects(loaded, sequences=8, length=40, copy="first")
        seconds = time.perf_counter() - start
        raw = deltas.mean(axis=0)
        effect = raw - first.mean(axis=0)  # what the head does for copying alone
        table = a.table().set_index(["stack", "layer", "head"])
        score = [table.loc[h, "induction_repeat"] for h in heads]
        rho = rank_correlation(score, effect)
        rho_raw = rank_correlation(score, raw)
        top10 = sorted(range(len(heads)), key=lambda i: -score[i])[:10]
        rho_top = rank_correlation([score[i] for i in top10], [effect[i] for i in top10])
        top_score = sorted(range(len(heads)), key=lambda i: -score[i])[:5]
        top_effect = sorted(range(len(heads)), key=lambda i: -effect[i])[:5]
        return {"case": name, "rho_specific": rho, "rho_second_copy_only": rho_raw, "rho_top10_by_score": rho_top,
                "seconds": seconds,
                "top_by_score": [(heads[i][1], heads[i][2], round(score[i], 3), round(effect[i], 3))
                                 for i in top_score],
                "top_by_effect": [(heads[i][1], heads[i][2], round(score[i], 3), round(effect[i], 3))
                                  for i in top_effect]}
    key = {"minilm": "minilm-l6", "minilm-corpus": "minilm-l6", "smollm2": "smollm2-135m"}[name]
    loaded = models.load(key, device="cpu")
    if name == "minilm":
        corpus = atlas.corpus_from_texts(sentences("en", 500), name="en-sentences")
    elif name == "minilm-corpus":
        corpus = atlas.shipped_corpus("en")
    else:
        corpus = atlas.corpus_from_texts(
            chunks(loaded, "en", int(__import__("os").environ.get("ATLAS_TEXTS", 200)), 512), name="en-512")
    before = peak_mib()
    start = time.perf_counter()
    a = atlas.build_atlas(loaded, corpus, max_tokens=512, repeats=0)
    seconds = time.perf_counter() - start
    per_text = {i: s for i, s in zip(*_texts_seconds(a))}
    ratios = []
    for i in list(per_text)[:: max(1, len(per_text) // 20)]:
        t = time.perf_counter()
        models.analyze(loaded, corpus.texts[i], max_tokens=512, top_k=1)
        ratios.append(per_text[i] / (time.perf_counter() - t))
    return {"case": name, "model": key, "texts": len(corpus), "seconds": round(seconds, 1),
            "per_text_over_analyze": round(statistics.median(ratios), 2), "peak_mib": round(peak_mib()),
            "peak_mib_before": round(before), "tokens": int(_tokens(a))}


def _texts_seconds(a):
    from models.atlas import store

    rows = store.duck().execute(
        f"SELECT text, seconds FROM read_parquet('{store.glob(a.folder, 'texts')}') WHERE grp='corpus' ORDER BY text"
    ).fetchall()
    return [r[0] for r in rows], [r[1] for r in rows]


def _tokens(a):
    from models.atlas import store

    return store.duck().execute(
        f"SELECT sum(tokens) FROM read_parquet('{store.glob(a.folder, 'texts')}')").fetchone()[0]


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--one":
        print(json.dumps(case(sys.argv[2])))
        return
    names = sys.argv[1:] or ["minilm", "minilm-corpus", "smollm2", "induction"]
    for name in names:
        with tempfile.TemporaryDirectory() as cache:  # a cold atlas store, the models' conversions shared
            env = {**__import__("os").environ, "DIKKAT_ATLAS_ROOT": cache}
            out = subprocess.run([sys.executable, __file__, "--one", name], capture_output=True, text=True, env=env)
        line = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr[-2000:]
        print(line, flush=True)


if __name__ == "__main__":
    main()
