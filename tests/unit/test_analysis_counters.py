"""Golden tests of ``counters`` on a tiny Nsight Systems export with GPU metrics.

Times below are raw session ns; the store puts them at ``t - SYS + UTC``. Every expected
mean is worked out by hand (sample-and-hold: a sample's value lasts until the next one).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

import traceatlas
from traceatlas import analysis
from traceatlas.cli.main import app
from traceatlas.testing import TraceBuilder

SYS = 5_000_000_000
UTC = 1_700_000_000_000_000_000
PID = 100
GPID = (1 << 48) | (PID << 24)
GTID = GPID | PID

# Device 0 metrics (typeId & 0xFF = device 0), values hold until the next sample:
#   SMs Active:            t=1000: 20, 2000: 80, 3000: 40, 4000: 0 (end)
#   DRAM Read Bandwidth:   t=1000: 10, 3000: 70, 4000: 0
#   DRAM Write Bandwidth:  t=1000: 5,  4000: 0
METRICS = [(1000, 1, 20), (2000, 1, 80), (3000, 1, 40), (4000, 1, 0),
           (1000, 2, 10), (3000, 2, 70), (4000, 2, 0),
           (1000, 3, 5), (4000, 3, 0)]
# Kernels on device 0 (name id, start, end):
KERNELS = [
    (10, 1500, 2500),  # gemm #1
    (10, 2500, 3500),  # gemm #2
    (11, 3500, 4500),  # copy: only [3500, 4000) lies inside the series
    (12, 1100, 1200),  # tiny
    (13, 500, 900),    # early: before the first sample -> no value
]


def _export(path: Path, *, metrics: bool = True) -> Path:
    con = sqlite3.connect(path)

    def table(name: str, cols: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
        con.execute(f"CREATE TABLE {name} ({', '.join(cols)})")
        con.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(cols))})", rows)

    table("StringIds", ("id", "value"), [(1, "cudaLaunchKernel_v7000"), (10, "gemm"),
                                         (11, "copy"), (12, "tiny"), (13, "early")])
    table("META_DATA_EXPORT", ("name", "value"), [("EXPORT_SCHEMA_VERSION", "3.25.0")])
    table("TARGET_INFO_SESSION_START_TIME", ("utcEpochNs", "utcTime", "localTime",
                                             "systemClockNs"),
          [(UTC, "2023-11-14T22:13:20", "2023-11-14T22:13:20", SYS)])
    table("PROCESSES", ("globalPid", "pid", "name"), [(GPID, PID, "python3")])
    table("CUPTI_ACTIVITY_KIND_KERNEL",
          ("start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid",
           "demangledName", "shortName", "registersPerThread", "gridX", "gridY", "gridZ",
           "blockX", "blockY", "blockZ", "staticSharedMemory", "dynamicSharedMemory"),
          [(SYS + s, SYS + e, 0, 1, 7, i + 1, GPID, n, n, 32, 1, 1, 1, 128, 1, 1, 0, 0)
           for i, (n, s, e) in enumerate(KERNELS)])
    table("CUPTI_ACTIVITY_KIND_RUNTIME",
          ("start", "end", "eventClass", "globalTid", "correlationId", "nameId",
           "returnValue"),
          [(SYS + 10 + i, SYS + 20 + i, 0, GTID, i + 1, 1, 0) for i in range(len(KERNELS))])
    table("MPI_RANKS", ("globalTid", "rank"), [(GTID, 0)])
    if metrics:
        table("TARGET_INFO_GPU_METRICS", ("typeId", "sourceId", "typeName", "metricId",
                                          "metricName"),
              [(0x100, 0, "GH100", 1, "SMs Active"), (0x100, 0, "GH100", 2,
                                                       "DRAM Read Bandwidth"),
               (0x100, 0, "GH100", 3, "DRAM Write Bandwidth")])
        table("GPU_METRICS", ("timestamp", "typeId", "metricId", "value"),
              [(SYS + t, 0x100, m, v) for t, m, v in METRICS])
    con.commit()
    con.close()
    return path


@pytest.fixture
def trace(tmp_path: Path) -> traceatlas.Trace:
    return traceatlas.open(traceatlas.ingest(_export(tmp_path / "gm.sqlite"),
                                             tmp_path / "store"))


def _means(trace: traceatlas.Trace) -> dict[tuple[str, str], tuple[Any, ...]]:
    table = analysis.run("counters", trace).table
    assert set(table["source"]) == {"gpu_metrics"}
    return {(r["kernel"], r["counter"]): (r["kernels"], r["samples"], r["mean"])
            for r in table.to_dicts()}


def test_time_weighted_means(trace: traceatlas.Trace) -> None:
    got = _means(trace)
    # gemm #1 [1500,2500): SM 500*20 + 500*80 = 50_000; gemm #2 [2500,3500): 500*80 +
    # 500*40 = 60_000 -> (50_000 + 60_000) / 2_000 = 55. Samples at 2000 and 3000.
    assert got[("gemm", "SMs Active")] == (2, 2, pytest.approx(55.0))
    # DRAM read: #1 1000*10; #2 500*10 + 500*70 = 40_000 -> 50_000 / 2_000 = 25.
    assert got[("gemm", "DRAM Read Bandwidth")] == (2, 1, pytest.approx(25.0))
    assert got[("gemm", "DRAM Write Bandwidth")] == (2, 0, pytest.approx(5.0))
    # copy [3500,4500): series end at 4000 -> [3500,4000): SM 40, read 70, write 5;
    # the sample at 4000 lies in [3500, 4500).
    assert got[("copy", "SMs Active")] == (1, 1, pytest.approx(40.0))
    assert got[("copy", "DRAM Read Bandwidth")] == (1, 1, pytest.approx(70.0))
    assert got[("tiny", "SMs Active")] == (1, 0, pytest.approx(20.0))
    assert got[("tiny", "DRAM Read Bandwidth")] == (1, 0, pytest.approx(10.0))
    assert not [k for k in got if k[0] == "early"]  # before the first sample
    assert len(got) == 9  # 3 kernel names x 3 counters


def test_bound_classification(trace: traceatlas.Trace) -> None:
    bound = analysis.run("counters", trace).extra["bound"]
    rows = {r["kernel"]: (r["compute_pct"], r["memory_pct"], r["bound"])
            for r in bound.to_dicts()}
    # gemm: compute 55 (>= 50), memory 25 + 5 = 30 -> compute.
    assert rows["gemm"] == (pytest.approx(55.0), pytest.approx(30.0), "compute")
    # copy: compute 40, memory 70 + 5 = 75 -> r_m 1.5 > r_c 0.8 -> memory.
    assert rows["copy"] == (pytest.approx(40.0), pytest.approx(75.0), "memory")
    # tiny: compute 20, memory 15 -> both below -> latency.
    assert rows["tiny"] == (pytest.approx(20.0), pytest.approx(15.0), "latency")
    # thresholds as params: compute 30% -> copy r_c 1.33 < r_m 1.5 stays memory;
    # tiny with memory_threshold 10 -> r_m 1.5 -> memory.
    other = analysis.run("counters", trace, {"compute_threshold": "30",
                                             "memory_threshold": "10"}).extra["bound"]
    assert dict(zip(other["kernel"], other["bound"], strict=True)) == {
        "copy": "memory", "gemm": "memory", "tiny": "memory"}  # gemm: 55/30 < 30/10


def test_cupti_range_counters(tmp_path: Path) -> None:
    # Kineto's CUPTI range-profiler events: one cuda_profiler_range X event per kernel.
    b = TraceBuilder(0, 1, profiler_markers=False)
    b.cpu_op("aten::mm", 0, 1_000)
    path = tmp_path / "rank-0.json"
    b.write(path)
    doc = json.loads(path.read_text())
    ranges = [("gemm", {"smsp__inst.sum": 10, "dram__bytes.sum": 4}),
              ("gemm", {"smsp__inst.sum": 30, "dram__bytes.sum": 8}),
              ("relu", {"smsp__inst.sum": 5})]
    for i, (name, args) in enumerate(ranges):
        doc["traceEvents"].append({"ph": "X", "cat": "cuda_profiler_range", "name": name,
                                   "pid": 0, "tid": 0, "ts": 10 + i, "dur": 1,
                                   "args": args})
    path.write_text(json.dumps(doc))
    trace = traceatlas.open(traceatlas.ingest(path, tmp_path / "store"))
    table = analysis.run("counters", trace).table.sort("kernel", "counter")
    assert table.select("kernel", "counter", "source", "kernels", "mean").rows() == [
        ("gemm", "dram__bytes.sum", "cupti_range", 2, 6.0),   # (4 + 8) / 2
        ("gemm", "smsp__inst.sum", "cupti_range", 2, 20.0),   # (10 + 30) / 2
        ("relu", "smsp__inst.sum", "cupti_range", 1, 5.0),
    ]


def test_missing_counters_cli_exit_2(tmp_path: Path) -> None:
    store = traceatlas.ingest(_export(tmp_path / "nogm.sqlite", metrics=False),
                              tmp_path / "store")
    result = CliRunner().invoke(app, ["analyze", "counters", str(store)])
    assert result.exit_code == 2
    assert "CUPTI range-profiler events" in result.output
    assert "counter samples" in result.output


def test_selection_by_rank_keeps_working(trace: traceatlas.Trace) -> None:
    table = analysis.run("counters", trace.select(ranks=[0])).table
    assert table.filter(pl.col("kernel") == "gemm").height == 3
