"""Whether a model's package is installed (models/loading/catalog.py, ``ModelSpec.installed``): asked by the sidebar's
model picker for every catalog entry on every run of every session (issue 48), so a package found once is not looked
for again and a missing one at most every ``RECHECK_S`` seconds."""

from __future__ import annotations

import dataclasses

import models
from models.loading import catalog


def test_a_package_found_once_is_not_looked_for_again_and_a_missing_one_only_after_a_while(monkeypatch):
    looks: list[str] = []
    real = catalog.importlib.util.find_spec

    def find_spec(name, *args):
        looks.append(name)
        return real(name, *args)

    now = [1000.0]
    monkeypatch.setattr(catalog.importlib.util, "find_spec", find_spec)
    monkeypatch.setattr(catalog.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(catalog, "_found", set())
    monkeypatch.setattr(catalog, "_missing", {})
    here = dataclasses.replace(models.get_spec("minilm-l6"), modules=("json",))
    gone = dataclasses.replace(models.get_spec("minilm-l6"), modules=("dikkat_no_such_package",))
    assert [here.installed for _ in range(5)] == [True] * 5
    assert [gone.installed for _ in range(5)] == [False] * 5
    assert looks == ["json", "dikkat_no_such_package"]
    now[0] += catalog.RECHECK_S + 1  # installed meanwhile? looked for again
    assert not gone.installed and here.installed
    assert looks == ["json", "dikkat_no_such_package", "dikkat_no_such_package"]
