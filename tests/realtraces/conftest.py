"""Fixtures for the tests over the real traces in ``../shared/traces``.

The folder sits next to the repository (``<repo>/../shared/traces``), in CI as well as
in a checkout. When it is missing the real-trace tests are skipped locally and FAIL in
CI (``CI=true``), so a CI run can never pass without them by accident.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

TRACES_DIR = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces"
"""``<repo root>/../shared/traces``."""


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    """The real-trace folder; skip (or fail when ``CI=true``) if it is missing."""
    if not (TRACES_DIR / "SOURCES.md").is_file():
        message = f"real traces not found at {TRACES_DIR.resolve()}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message} (CI=true: the real-trace suite must run in CI)")
        pytest.skip(message)
    return TRACES_DIR
