"""Golden tests of ``queue``: launch queue series and summary, full-queue time, memory
bandwidth by kind, all worked out by hand.

Builder times are ns relative to BASE. ``launch(name, cpu_start, cpu_dur, gpu_start,
gpu_dur)``: +1 at cpu_start, -1 at gpu_start + gpu_dur (default ``until=end``).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

import traceatlas
from traceatlas.analysis import registry
from traceatlas.analysis.base import Result
from traceatlas.cli.main import app
from traceatlas.errors import DataQualityWarning, MissingDataError
from traceatlas.testing import TraceBuilder

BASE = 1_700_000_000_000_000_000


def _queue_builder() -> TraceBuilder:
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    b.launch("L1", 0, 500, 10_000, 10_000)        # in queue [0, 20k)
    b.launch("L2", 1_000, 500, 20_000, 10_000)    # [1k, 30k)
    b.launch("L3", 2_000, 500, 30_000, 10_000)    # [2k, 40k)
    b.launch("L4", 50_000, 500, 60_000, 10_000)   # [50k, 70k)
    # stream 9: launch stamped after the kernel started (skew): enters at its start 80k
    b.launch("L5", 90_000, 500, 80_000, 5_000, stream=9)
    return b


def _trace(tmp_path: Path, b: TraceBuilder) -> traceatlas.Trace:
    return traceatlas.open(traceatlas.ingest(b.write(tmp_path / "rank-0.json"),
                                             tmp_path / "store"))


def _series(result: Result, stream: int) -> list[tuple[int, int]]:
    frame = result.extra["series"]
    return [(r["ts_ns"] - BASE, r["queue_length"]) for r in frame.to_dicts()
            if r["stream"] == stream]


def test_queue_series_and_summary(tmp_path: Path) -> None:
    result = registry.run("queue", _trace(tmp_path, _queue_builder()), {"max_queue": "2"})
    assert result.extra["series"].columns == ["rank", "device", "stream", "ts_ns",
                                              "queue_length"]
    assert _series(result, 7) == [(0, 1), (1_000, 2), (2_000, 3), (20_000, 2), (30_000, 1),
                                  (40_000, 0), (50_000, 1), (70_000, 0)]
    assert _series(result, 9) == [(80_000, 1), (85_000, 0)]
    rows = {r["stream"]: r for r in result.table.to_dicts()}
    s7 = rows[7]
    # span 0..70k; weighted: 1*1k + 2*1k + 3*18k + 2*10k + 1*10k + 0*10k + 1*20k = 107k
    # empty [40k, 50k) = 10k; full (>= 2): [1k, 30k) = 29k -> 29/70 = 41.43 %
    assert {k: s7[k] for k in ("rank", "device", "launches", "span_ns", "max_queue_length",
                               "empty_ns", "full_ns")} == {
        "rank": 0, "device": 0, "launches": 4, "span_ns": 70_000, "max_queue_length": 3,
        "empty_ns": 10_000, "full_ns": 29_000}
    assert s7["mean_queue_length"] == pytest.approx(107_000 / 70_000)
    assert s7["full_pct"] == pytest.approx(29_000 / 70_000 * 100)
    s9 = rows[9]
    assert (s9["launches"], s9["span_ns"], s9["max_queue_length"], s9["full_ns"]) == (
        1, 5_000, 1, 0)
    assert s9["mean_queue_length"] == pytest.approx(1.0)


def test_default_max_queue_is_hta_1024(tmp_path: Path) -> None:
    result = registry.run("queue", _trace(tmp_path, _queue_builder()))
    assert result.table["full_ns"].to_list() == [0, 0]


def test_until_start_is_htas_convention(tmp_path: Path) -> None:
    result = registry.run("queue", _trace(tmp_path, _queue_builder()), {"until": "start"})
    # -1 at gpu starts 10k, 20k, 30k, 60k
    assert _series(result, 7) == [(0, 1), (1_000, 2), (2_000, 3), (10_000, 2), (20_000, 1),
                                  (30_000, 0), (50_000, 1), (60_000, 0)]
    assert _series(result, 9) == []          # enters and leaves at its start 80k


def test_memory_bandwidth_by_kind(tmp_path: Path) -> None:
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    b.launch("Memcpy HtoD (Pageable -> Device)", 0, 500, 100_000, 10_000,
             kind="memcpy", nbytes=1_000_000)             # 1e6 B / 1e4 ns = 100 GB/s
    b.launch("Memcpy HtoD (Pageable -> Device)", 1_000, 500, 105_000, 20_000, stream=8,
             kind="memcpy", nbytes=3_000_000)             # 3e6 / 2e4 = 150 GB/s
    b.launch("Memset (Device)", 2_000, 500, 130_000, 1_000, kind="memset",
             nbytes=4_096)                                # 4.096 GB/s
    b.launch("Memcpy DtoH (Device -> Pageable)", 3_000, 500, 140_000, 0,
             kind="memcpy", nbytes=500)                   # 0 ns: no rate
    b.launch("void k()", 4_000, 500, 150_000, 1_000)      # a kernel: not in bandwidth
    result = registry.run("queue", _trace(tmp_path, b))
    summary = {r["kind"]: r for r in result.extra["bandwidth"].to_dicts()}
    # HtoD: 2 copies, 4e6 B over the union [100k, 125k) = 25k ns -> 160 GB/s
    assert summary["HtoD"] == {"rank": 0, "kind": "HtoD", "count": 2, "bytes": 4_000_000,
                               "time_ns": 25_000, "gbps": pytest.approx(160.0)}
    assert summary["memset"] == {"rank": 0, "kind": "memset", "count": 1, "bytes": 4_096,
                                 "time_ns": 1_000, "gbps": pytest.approx(4.096)}
    assert summary["DtoH"] == {"rank": 0, "kind": "DtoH", "count": 1, "bytes": 500,
                               "time_ns": 0, "gbps": None}
    series = result.extra["bandwidth_series"]
    assert series.columns == ["rank", "kind", "start_ns", "end_ns", "bytes", "gbps"]
    got = [(r["kind"], r["start_ns"] - BASE, r["end_ns"] - BASE, r["gbps"])
           for r in series.to_dicts()]
    assert got == [("DtoH", 140_000, 140_000, None),
                   ("HtoD", 100_000, 110_000, pytest.approx(100.0)),
                   ("HtoD", 105_000, 125_000, pytest.approx(150.0)),
                   ("memset", 130_000, 131_000, pytest.approx(4.096))]


def test_queue_without_correlation_is_missing_data(tmp_path: Path) -> None:
    b = _queue_builder()
    doc = json.loads(b.to_json())
    doc["traceEvents"] = [e for e in doc["traceEvents"]
                          if e.get("cat") != "cuda_runtime" and e.get("ph") not in "sf"]
    path = tmp_path / "rank-0.json"
    path.write_text(json.dumps(doc))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataQualityWarning)
        store = traceatlas.ingest(path, tmp_path / "store")
    with pytest.raises(MissingDataError, match="correlation ids"):
        registry.run("queue", traceatlas.open(store))
    done = CliRunner().invoke(app, ["analyze", "queue", str(store)])
    assert done.exit_code == 2
    assert "correlation ids" in done.output
