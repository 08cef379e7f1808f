"""The speech pass keeps its contract (issue 47 point 1, with tests/engine/test_contracts.py): ``analyze_audio`` and
``analyze_wav`` on the bundled Whisper (no tiny model carries Whisper's processor and prompt tokens), each parameter
in turn replaced by an odd value. A finite result, or a coded error within a second (before the model runs)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import models  # noqa: E402
from contract import Tally, call, odd_calls  # noqa: E402
from models import speech  # noqa: E402
from models.speech.wav import read_wav  # noqa: E402

WAV = ROOT / "assets" / "audio" / "the_cat_chased_the_mouse_en.wav"
TALLY = Tally()


@pytest.fixture(scope="module")
def whisper():
    return models.load("whisper-base", device="cpu")


def test_analyze_audio_keeps_its_contract(whisper):
    audio, rate = read_wav(WAV)
    good = {"loaded": whisper, "audio": audio[:8000], "sample_rate": rate, "language": "en",
            "target": "the cat", "heads_off": [], "max_new_tokens": 4, "top_k": 3, "padding": "column",
            "word_seconds": 0.1, "keep": None}
    assert call(speech.analyze_audio, good, TALLY) is None
    faults = odd_calls("analyze_audio", speech.analyze_audio, good, TALLY)
    faults += odd_calls("analyze_audio", speech.analyze_audio, dict(good, target=None), TALLY,
                        odd=(None, -1, 10 ** 30, float("nan"), True))  # the generated transcript's own bounds
    assert not faults, "\n".join(faults)
    assert TALLY.raw == TALLY.not_finite == TALLY.slow == 0


def test_analyze_wav_keeps_its_contract(whisper, tmp_path):
    good = {"loaded": whisper, "path": str(WAV), "target": "the cat"}
    faults = odd_calls("analyze_wav", speech.analyze_wav, good, TALLY)
    for name, data in {"empty.wav": b"", "text.wav": b"not a wav file", "riff.wav": b"RIFF\x00\x00"}.items():
        (tmp_path / name).write_bytes(data)
        fault = call(speech.analyze_wav, dict(good, path=str(tmp_path / name)), TALLY)
        faults += [f"analyze_wav({name}): {fault}"] if fault else []
    assert not faults, "\n".join(faults)
    print(f"speech contracts: {TALLY.calls} calls", file=sys.stderr)
