"""Fixtures for the browser tests: Debian's ``chromium`` driven by Python Playwright.

When chromium or Playwright is missing the tests are skipped locally and FAIL in CI
(``CI=true``; ``.ci/run`` installs chromium), like the real-trace suite.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

TRACES = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces"
IMBALANCE = TRACES / "h100-planted" / "imbalance"
CLI = str(Path(sys.executable).parent / "traceatlas")

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
"""Headless, offline, no first-run chores (no ``playwright install`` needed)."""


def _missing(what: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} (CI=true: the browser tests must run in CI)")
    pytest.skip(what)


@pytest.fixture(scope="session")
def chromium_path() -> Path:
    """Debian's chromium (``/usr/bin/chromium`` or on PATH)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        _missing("chromium not found (apt-get install chromium)")
    return Path(str(found))


@pytest.fixture(scope="session")
def browser(chromium_path: Path) -> Iterator[Any]:
    """A headless chromium launched through Playwright, shared by the session."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright not installed (pip install -e '.[test]')")
    with sync_playwright() as pw:
        instance = pw.chromium.launch(executable_path=str(chromium_path), args=CHROMIUM_ARGS)
        yield instance
        instance.close()


@pytest.fixture(scope="session")
def imbalance_store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """h100-planted/imbalance (4 ranks, real H100 Kineto traces) ingested once for the
    viewer tests: ``store`` and the ``env`` (own cache folder, no colour) to serve it
    with. Skipped (FAIL in CI) when the real traces are missing."""
    if not (TRACES / "SOURCES.md").is_file():
        message = f"real traces not found at {TRACES.resolve()}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message} (CI=true: the real-trace suite must run in CI)")
        pytest.skip(message)
    root = tmp_path_factory.mktemp("view")
    env = dict(os.environ, TRACEATLAS_CACHE_DIR=str(root / "cache"), NO_COLOR="1")
    store = root / "imbalance.store"
    res = subprocess.run([CLI, "ingest", str(IMBALANCE), "-o", str(store)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    return {"store": store, "env": env}
