"""Published findings reproduced on the bundled models (issue 15), asserted from what was measured here."""

from __future__ import annotations

from pathlib import Path

import models

LONG_TEXT = (Path(__file__).resolve().parent.parent / "assets" / "texts" / "long_en.txt").read_text(encoding="utf-8")


def test_attention_sinks_keep_a_windowed_model_close_to_full_attention(smollm2):
    """Xiao et al. 2023 (StreamingLLM, fig. 1 and §3.2, Llama-2-7B): a sliding window alone loses the first tokens
    and its loss jumps; the window plus 4 sink tokens stays close to full attention. Measured on smollm2-135m,
    the shipped 507-token text, next-token loss in nats (full attention 3.238):

        window w     16     32     64
        window      5.802  4.813  4.206
        + 4 sinks   3.801  3.605  3.508
    """
    full = models.analyze(smollm2, LONG_TEXT, max_tokens=512).loss
    for w in (16, 32, 64):
        window = models.analyze(smollm2, LONG_TEXT, max_tokens=512, mask=f"sliding_window:{w}").loss - full
        sinks = models.analyze(smollm2, LONG_TEXT, max_tokens=512, mask=f"sink_window:{w},4").loss - full
        assert window > 0.7 and sinks < 0.75 and sinks < 0.4 * window, (w, window, sinks)
