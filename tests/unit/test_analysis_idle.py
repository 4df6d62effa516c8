"""Golden tests of ``idle``: host wait / kernel wait / other per stream, by hand.

Builder times are ns relative to BASE. ``launch(name, cpu_start, cpu_dur, gpu_start,
gpu_dur)``: the launch call starts at cpu_start; the device activity runs over
[gpu_start, gpu_start + gpu_dur). Default threshold kernel_wait_ns = 30,000 ns.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import traceatlas
from traceatlas.analysis import registry
from traceatlas.cli.main import app
from traceatlas.errors import DataQualityWarning
from traceatlas.testing import TraceBuilder

BASE = 1_700_000_000_000_000_000


def _builder() -> TraceBuilder:
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    # stream 7
    b.launch("K1", 0, 500, 10_000, 10_000)          # [10k, 20k)
    b.launch("K2", 2_000, 500, 25_000, 10_000)      # gap 5k, launched before 20k -> kernel
    b.launch("K3", 50_000, 500, 60_000, 10_000)     # gap 25k, launch 50k > 35k -> host
    b.launch("K4", 55_000, 500, 170_000, 10_000)    # gap 100k, launch < 70k, >= 30k -> other
    b.launch("K5", 56_000, 500, 180_000, 10_000)    # gap 0: no idle interval
    b.launch("Memcpy DtoD (Device -> Device)", 57_000, 500, 230_000, 10_000,
             kind="memcpy", nbytes=8)               # gap 40k, launch < 190k -> other
    b.launch("K7", 58_000, 500, 240_000, 60_000)    # gap 0; [240k, 300k)
    b.launch("K8", 59_000, 500, 250_000, 10_000)    # nested in K7: no gap
    b.launch("K9", 305_000, 500, 310_000, 10_000)   # gap vs furthest end 300k = 10k,
    #                                                  launch 305k > 300k -> host
    # stream 8
    b.launch("K10", 3_000, 500, 5_000, 1_000, stream=8)    # [5k, 6k)
    b.launch("K11", 4_000, 500, 26_000, 1_000, stream=8)   # gap 20k, launched early
    return b


def _trace(tmp_path: Path, b: TraceBuilder, text: str | None = None) -> traceatlas.Trace:
    path = tmp_path / "rank-0.json"
    if text is None:
        b.write(path)
    else:
        path.write_text(text)
    return traceatlas.open(traceatlas.ingest(path, tmp_path / "store"))


def _by_stream(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {r["stream"]: r for r in rows}


def test_idle_split_per_stream(tmp_path: Path) -> None:
    result = registry.run("idle", _trace(tmp_path, _builder()))
    rows = _by_stream(result.table.to_dicts())
    # stream 7: span 10k..320k = 310k; busy K1-K5 50k + memcpy 10k + K7 60k + K9 10k =
    # 130k; idle 180k = host 25k + 10k, kernel 5k, other 100k + 40k.
    assert rows[7] == {"rank": 0, "device": 0, "stream": 7, "span_ns": 310_000,
                       "busy_ns": 130_000, "idle_ns": 180_000, "host_wait_ns": 35_000,
                       "kernel_wait_ns": 5_000, "other_ns": 140_000}
    # stream 8: span 5k..27k = 22k, busy 2k, idle 20k, all kernel wait (20k < 30k).
    assert rows[8] == {"rank": 0, "device": 0, "stream": 8, "span_ns": 22_000,
                       "busy_ns": 2_000, "idle_ns": 20_000, "host_wait_ns": 0,
                       "kernel_wait_ns": 20_000, "other_ns": 0}
    assert result.notes == []


def test_idle_interval_stats(tmp_path: Path) -> None:
    result = registry.run("idle", _trace(tmp_path, _builder()))
    stats = {(r["stream"], r["category"]): r for r in result.extra["stats"].to_dicts()}
    assert set(stats) == {(7, "host_wait"), (7, "kernel_wait"), (7, "other"),
                          (8, "kernel_wait")}
    host = stats[(7, "host_wait")]           # gaps 25k, 10k
    assert (host["count"], host["total_ns"], host["mean_ns"], host["max_ns"]) == (
        2, 35_000, 17_500.0, 25_000)
    assert host["p50_ns"] == pytest.approx(17_500.0)      # 10k + 0.5 * 15k
    assert host["p95_ns"] == pytest.approx(24_250.0)      # 10k + 0.95 * 15k
    other = stats[(7, "other")]              # gaps 40k, 100k
    assert (other["count"], other["total_ns"], other["mean_ns"], other["max_ns"]) == (
        2, 140_000, 70_000.0, 100_000)
    assert other["p50_ns"] == pytest.approx(70_000.0)
    assert other["p95_ns"] == pytest.approx(97_000.0)     # 40k + 0.95 * 60k
    kernel = stats[(7, "kernel_wait")]
    assert (kernel["count"], kernel["total_ns"], kernel["p95_ns"]) == (1, 5_000, 5_000.0)


def test_kernel_wait_threshold_param(tmp_path: Path) -> None:
    trace = _trace(tmp_path, _builder())
    rows = _by_stream(registry.run("idle", trace, {"kernel_wait_ns": "10000"}).table.to_dicts())
    # threshold 10k: stream 8's 20k gap becomes other; stream 7's 5k stays kernel wait.
    assert (rows[8]["kernel_wait_ns"], rows[8]["other_ns"]) == (0, 20_000)
    assert (rows[7]["kernel_wait_ns"], rows[7]["other_ns"]) == (5_000, 140_000)


def test_without_launch_calls_host_wait_is_null(tmp_path: Path) -> None:
    b = _builder()
    events = json.loads(b.to_json())
    events["traceEvents"] = [e for e in events["traceEvents"]
                             if e.get("cat") != "cuda_runtime" and e.get("ph") not in "sf"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataQualityWarning)
        trace = _trace(tmp_path, b, json.dumps(events))
    result = registry.run("idle", trace)
    rows = _by_stream(result.table.to_dicts())
    # No launches: the host-wait gaps of stream 7 (25k, 10k) are below 30k -> kernel wait.
    assert rows[7]["host_wait_ns"] is None
    assert (rows[7]["kernel_wait_ns"], rows[7]["other_ns"]) == (40_000, 140_000)
    assert any("no correlation ids" in n for n in result.notes)


def test_cli_json_and_stats_table(tmp_path: Path) -> None:
    src = _builder().write(tmp_path / "rank-0.json")
    runner = CliRunner()
    done = runner.invoke(app, ["analyze", "idle", str(src), "--format", "json"])
    assert done.exit_code == 0, done.output
    rows = json.loads(done.stdout)
    assert {r["stream"]: r["idle_ns"] for r in rows} == {7: 180_000, 8: 20_000}
    stats = runner.invoke(app, ["analyze", "idle", str(src), "--table", "stats",
                                "--format", "csv", "-p", "kernel_wait_ns=1"])
    assert stats.exit_code == 0, stats.output
    # threshold 1 ns: every non-host gap is other -> stream 7 host, other; stream 8 other.
    lines = stats.stdout.strip().splitlines()
    assert len(lines) == 1 + 3
