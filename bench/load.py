"""Load time of each bundled model, in a fresh process each (the cached conversion already built), best of
``--repeat`` runs: what a user waits for after picking a model. With ``--against FOLDER`` (another checkout
of Dikkat), both are timed alternately in one run and the ratio printed (issue 26: Whisper's load-time probes).

    .venv/bin/python bench/load.py [--models whisper-base,minilm-l6] [--repeat 3] [--against /tmp/base]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHILD = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
import models
models.load(sys.argv[2], device="cpu")  # warm: conversions cached, torch and transformers imported
models.clear_cache()
start = time.perf_counter()
m = models.load(sys.argv[2], device="cpu")
print(json.dumps({"seconds": time.perf_counter() - start, "sites": len(m.sites)}))
"""


def once(root: Path, model: str) -> float:
    out = subprocess.run([sys.executable, "-c", CHILD, str(root), model], capture_output=True, text=True, check=True,
                         env={"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PATH": "/usr/bin:/bin"})
    return json.loads(out.stdout.strip().splitlines()[-1])["seconds"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="minilm-l6,smollm2-135m,multilingual-e5-small,whisper-base")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--against", type=Path, default=None)
    args = parser.parse_args()
    trees = [("this", ROOT)] + ([("other", args.against)] if args.against else [])
    print(f"{'model':24} " + " ".join(f"{name + ' (s)':>12}" for name, _ in trees)
          + ("   this/other" if args.against else ""))
    for model in args.models.split(","):
        best = {name: float("inf") for name, _ in trees}
        for _ in range(args.repeat):
            for name, root in trees:  # alternately, so both see the same load on the machine
                best[name] = min(best[name], once(root, model))
        line = f"{model:24} " + " ".join(f"{best[name]:12.2f}" for name, _ in trees)
        if args.against:
            line += f"   {best['this'] / best['other']:10.2f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
