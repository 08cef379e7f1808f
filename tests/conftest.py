"""Shared fixtures: tiny random models (built once per session) and the bundled real models."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import models  # noqa: E402
from tiny import build_tiny  # noqa: E402

_TINY: dict[str, models.LoadedModel] = {}


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory):
    """``tiny_folder(arch) -> Path`` of a saved tiny random model (see tests/tiny.py)."""
    root = tmp_path_factory.mktemp("tiny")
    made: dict[str, Path] = {}

    def make(arch: str) -> Path:
        if arch not in made:
            folder = root / arch
            folder.mkdir()
            made[arch] = build_tiny(arch, folder)
        return made[arch]

    return make


@pytest.fixture(scope="session")
def tiny(tiny_folder):
    """``tiny(arch) -> LoadedModel`` loaded on CPU through ``models.load(folder)``."""

    def get(arch: str) -> models.LoadedModel:
        return models.load(str(tiny_folder(arch)), device="cpu")

    return get


@pytest.fixture(scope="session")
def minilm():
    return models.load("minilm-l6", device="cpu")


@pytest.fixture(scope="session")
def smollm2():
    return models.load("smollm2-135m", device="cpu")


# Tests live in one folder per tier; the folder is the marker (declared in pyproject.toml): `pytest -m engine`,
# `-m "not browser"`, or a folder. ``bundled`` is also put on any test that takes a bundled-model fixture, so
# `make check` (tiers that need no bundled model, browser or nginx) can leave those out of engine/ and viz/.
TIERS = ("house", "engine", "viz", "app", "deploy", "bundled", "browser", "sweep")
BUNDLED_FIXTURES = {"minilm", "smollm2"}


def tier_of(path: Path) -> str | None:
    """The tier of a test file: the name of its folder under tests/ (None for a file outside a tier)."""
    parts = Path(path).resolve().relative_to(ROOT / "tests").parts
    return parts[0] if len(parts) > 1 and parts[0] in TIERS else None


def pytest_collection_modifyitems(config, items):
    """Mark each test with its folder's tier, and ``bundled`` where it uses a bundled model."""
    for item in items:
        tier = tier_of(item.path)
        if tier:
            item.add_marker(tier)
        if BUNDLED_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker("bundled")
