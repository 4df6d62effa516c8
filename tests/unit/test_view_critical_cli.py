"""``traceatlas view --critical-path [--step N]`` as a user runs it: the URL carries the
overlay state and opens on the step's path; a step the trace lacks is one line, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from test_view_cli import _start, _stop
from test_view_critical import BASE, STEP0, build_store

EXE = Path(sys.executable).parent / "traceatlas"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_store(tmp_path_factory.mktemp("vcpcli"))


def test_step_opens_on_its_path(store: Path) -> None:
    proc, url = _start(str(store), "--no-browser", "--port", "0", "--critical-path",
                       "--step", "0")
    try:
        state = parse_qs(urlsplit(url).fragment)
        assert state["cp"] == ["step:0"]
        # path [1k, 28k] (the step marker [1k, 26k] lies inside), 2% of 27k = 540 each side
        assert (int(state["start"][0]), int(state["end"][0])) == (BASE + 460, BASE + 28_540)
        parts = urlsplit(url)
        body = httpx.get(f"{parts.scheme}://{parts.netloc}/api/critical_path",
                         params={"step": 0}, timeout=30).json()
        got = {k: v for k, v in zip(body["by_bound"]["bound"], body["by_bound"]["ns"],
                                    strict=True) if v}
        assert got == STEP0
    finally:
        _stop(proc)


def test_toggle_only_and_window_kept(store: Path) -> None:
    proc, url = _start(str(store), "--no-browser", "--port", "0", "--critical-path",
                       "--window", "0us:5us")
    try:
        state = parse_qs(urlsplit(url).fragment)
        # --window is relative to the trace start: the first event, at 1k
        assert state["cp"] == ["1"] and state["end"] == [str(BASE + 6_000)]
    finally:
        _stop(proc)


def test_missing_step_is_one_line_exit_2(store: Path) -> None:
    done = subprocess.run([str(EXE), "view", str(store), "--no-browser", "--port", "0",
                           "--critical-path", "--step", "9"], capture_output=True, text=True,
                          env=os.environ.copy(), timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--step" in lines[0] and "no step 9" in lines[0]
    assert "Traceback" not in done.stderr and done.stdout == ""
