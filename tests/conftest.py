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


# Tests grouped by layer (the markers are declared in pyproject.toml): `pytest -m engine`, `-m "not browser"`.
LAYERS = {
    "engine": ("test_budget", "test_engine", "test_error_messages", "test_fallback_masks", "test_fallback_path",
               "test_experiments", "test_flow", "test_fuzz_api", "test_masks_engine", "test_pruning", "test_store", "test_lessons", "test_typed_tokens"),
    "viz": ("test_masks_viz", "test_viz_flow", "test_transforms", "test_viz_explore", "test_viz_labels", "test_viz_prepare"),
    "app": ("test_experiments_page", "test_explore_app", "test_fuzz_app", "test_hosting", "test_hosting_app", "test_flow_page", "test_i18n", "test_masks_page",
            "test_pruning_page", "test_replicas", "test_pages_odd_inputs", "test_teaching_pages", "test_house"),
    "bundled": ("test_bundled", "test_experiments_alignment", "test_experiments_bundled", "test_experiments_clark", "test_flow_bundled", "test_e5", "test_gemma", "test_whisper", "test_notebook"),
    "browser": ("test_browser",),
    "sweep": ("test_archsweep",),
}


def pytest_collection_modifyitems(config, items):
    """Mark each test with its file's layer (:data:`LAYERS`), and ``bundled`` where it uses a bundled model."""
    for item in items:
        for marker, files in LAYERS.items():
            if item.path.stem in files:
                item.add_marker(marker)
        if {"minilm", "smollm2"} & set(getattr(item, "fixturenames", ())):
            item.add_marker("bundled")
