"""Issue 18 section 7: concurrent first uses of one raw trace, and concurrent writers of
one ``-o``, all succeed; the cache is filled once and the others reuse it.

Processes start, import traceatlas, then wait for a start file, so that their
``traceatlas.open`` calls really race (the issue saw 2 failures in 30 trials without a
lock: "Directory not empty ... -> tastore").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import traceatlas
from traceatlas.testing.mpi import write_mpi_trace

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="fcntl locks, fork timing")

CLI = str(Path(sys.executable).with_name("traceatlas"))
PROCESSES = 3
TRIALS = 4

OPEN = """
import json, os, sys, time
import traceatlas
go = sys.argv[1]
while not os.path.exists(go):
    time.sleep(0.001)
trace = traceatlas.open(sys.argv[2])
st = os.stat(os.path.join(trace.path, "manifest.json"))
print(json.dumps({"path": str(trace.path), "ino": st.st_ino, "mtime_ns": st.st_mtime_ns,
                  "intervals": traceatlas.summarize(trace)["intervals"]}))
"""


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    d = tmp_path_factory.mktemp("src")
    mpi = write_mpi_trace(d / "run.prv", ranks=4, iterations=20)
    return Path(mpi.path), mpi.counts["intervals"]


@pytest.mark.parametrize("trial", range(TRIALS))
def test_concurrent_first_uses_share_one_cache_entry(
    trace_file: tuple[Path, int], tmp_path: Path, trial: int
) -> None:
    path, intervals = trace_file
    cache = tmp_path / "cache"
    env = {**os.environ, "TRACEATLAS_CACHE_DIR": str(cache)}
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", OPEN, str(go), str(path)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(PROCESSES)]
    time.sleep(1.5)  # let every process finish its imports
    go.touch()
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert {r["intervals"] for r in results} == {intervals}
    # One ingest: every process read the very same manifest file (same inode and mtime).
    assert len({(r["path"], r["ino"], r["mtime_ns"]) for r in results}) == 1
    assert [p.name for p in cache.iterdir()] == [Path(results[0]["path"]).name]  # no lock


def test_concurrent_cli_commands_on_one_raw_trace(
    trace_file: tuple[Path, int], tmp_path: Path
) -> None:
    path, intervals = trace_file
    env = {**os.environ, "TRACEATLAS_CACHE_DIR": str(tmp_path / "cache")}
    procs = [subprocess.Popen([CLI, "info", "-f", "json", str(path)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(PROCESSES)]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert json.loads(out.strip().splitlines()[-1])["intervals"] == intervals


def test_concurrent_ingests_into_one_output(trace_file: tuple[Path, int], tmp_path: Path) -> None:
    """Each writer swaps its store in under a lock: all succeed, the last one wins whole."""
    path, intervals = trace_file
    out = tmp_path / "st"
    procs = [subprocess.Popen([CLI, "ingest", str(path), "-o", str(out)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(PROCESSES)]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    assert traceatlas.summarize(traceatlas.Trace(out))["intervals"] == intervals
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
