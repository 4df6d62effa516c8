"""Shared fixtures: keep the store cache out of the user's home directory."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point ``TRACEATLAS_CACHE_DIR`` at a fresh temporary directory for every test."""
    cache = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("TRACEATLAS_CACHE_DIR", str(cache))
    return cache
