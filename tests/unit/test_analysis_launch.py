"""Golden tests for the ``launch`` analysis: per-launch times and the per-rank summary
worked out by hand from the builder calls (ns after BASE)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

import traceatlas
from traceatlas.analysis import registry
from traceatlas.analysis.base import Result
from traceatlas.cli.main import app
from traceatlas.testing import TraceBuilder

BASE = 1_700_000_000_000_000_000


def _builder() -> TraceBuilder:
    return TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)


def _launches() -> tuple[TraceBuilder, dict[str, int]]:
    b = _builder()
    corr = {
        # A: call [1k, 6k), kernel [10k, 12k): delay 10k - 6k = 4k; start to start 9k;
        # 2k < 5k call (shorter than its launch) and < 10 us (short).
        "a": b.launch("kA", 1_000, 5_000, 10_000, 2_000),
        # B: call [20k, 80k) (60 us > 50 us: long launch), kernel [70k, 270k) starts
        # before the call returns: delay clipped to 0; start to start 50k.
        "b": b.launch("kB", 20_000, 60_000, 70_000, 200_000),
        # C: memcpy, call [300k, 301k), copy [500k, 520k): delay 199k > 100 us (long).
        "c": b.launch("Memcpy HtoD", 300_000, 1_000, 500_000, 20_000, kind="memcpy",
                      nbytes=64),
    }
    b.sync(600_000, 5_000, 600_000, 5_000)              # cuda_sync: not a launch row
    return b, corr


def _run(tmp_path: Path, **params: Any) -> Result:
    b, _ = _launches()
    store = traceatlas.ingest(b.write(tmp_path / "rank-0.json"), tmp_path / "s")
    return registry.run("launch", traceatlas.open(store), params)


def test_rows_by_hand(tmp_path: Path) -> None:
    _, corr = _launches()
    result = _run(tmp_path)
    rows = {r["correlation"]: r for r in result.table.to_dicts()}
    assert set(rows) == set(corr.values())
    keys = ("name", "category", "launch_name", "cpu_launch_ns", "gpu_ns", "launch_delay_ns",
            "start_to_start_ns")
    assert {n: tuple(rows[c][k] for k in keys) for n, c in corr.items()} == {
        "a": ("kA", "kernel", "cudaLaunchKernel", 5_000, 2_000, 4_000, 9_000),
        "b": ("kB", "kernel", "cudaLaunchKernel", 60_000, 200_000, 0, 50_000),
        "c": ("Memcpy HtoD", "memcpy", "cudaMemcpyAsync", 1_000, 20_000, 199_000, 200_000),
    }
    a = rows[corr["a"]]
    assert (a["rank"], a["stream"], a["cpu_start_ns"], a["gpu_start_ns"]) == (
        0, 7, BASE + 1_000, BASE + 10_000)


def test_summary_defaults(tmp_path: Path) -> None:
    summary = _run(tmp_path).extra["summary"].to_dicts()
    # short (< 10 us): A (2k); shorter than launch: A; long launch (> 50 us): B (60k);
    # long delay (> 100 us): C (199k).
    assert summary == [{
        "rank": 0, "launches": 3, "graph_launches": 0, "graph_kernels": 0,
        "short_kernels": 1, "short_kernels_gpu_ns": 2_000,
        "shorter_than_launch": 1, "long_launches": 1, "long_launches_cpu_ns": 60_000,
        "long_delays": 1, "long_delays_ns": 199_000}]


def test_summary_params_and_no_memory(tmp_path: Path) -> None:
    result = _run(tmp_path, short_kernel_ns=300_000, long_delay_ns=3_000,
                  long_launch_ns=1_000, memory=False)
    # Without memory: A and B only. short (< 300 us): both, 2k + 200k; long launch
    # (> 1 us): A 5k + B 60k; long delay (> 3 us): A (4k).
    assert result.table["name"].to_list() == ["kA", "kB"]
    (row,) = result.extra["summary"].to_dicts()
    assert (row["launches"], row["short_kernels"], row["short_kernels_gpu_ns"],
            row["long_launches"], row["long_launches_cpu_ns"], row["long_delays"],
            row["long_delays_ns"]) == (2, 2, 202_000, 2, 65_000, 1, 4_000)


def test_cli_summary_table(tmp_path: Path) -> None:
    b, _ = _launches()
    store = traceatlas.ingest(b.write(tmp_path / "rank-0.json"), tmp_path / "s")
    out = CliRunner().invoke(app, ["analyze", "launch", str(store), "--table", "summary",
                                   "--format", "json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)[0]["launches"] == 3


def _without_correlation(b: TraceBuilder, path: Path) -> Path:
    """The builder's trace with every correlation arg and ac2g flow removed."""
    data = json.loads(b.to_json())
    events = []
    for event in data["traceEvents"]:
        if event.get("ph") in ("s", "f"):
            continue
        event.get("args", {}).pop("correlation", None)
        events.append(event)
    data["traceEvents"] = events
    path.write_text(json.dumps(data))
    return path


def test_missing_correlation_via_cli(tmp_path: Path) -> None:
    b, _ = _launches()
    src = _without_correlation(b, tmp_path / "rank-0.json")
    store = traceatlas.ingest(src, tmp_path / "s")
    result = CliRunner().invoke(app, ["analyze", "launch", str(store)])
    assert result.exit_code == 2
    assert "correlation" in result.output
    assert "kernels" in result.output                   # still applies: device data is there
