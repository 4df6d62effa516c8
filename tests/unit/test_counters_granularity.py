"""``counters -p by=...``: per instance, kernel, op, annotation and rank with variability,
and the ``gemm_tensor`` table (ranks x GEMM kernels), on small hand-built traces.

The nsys export comes from ``testing.nsys.write_export`` plus the two GPU-metrics tables
nsys writes (``TARGET_INFO_GPU_METRICS``, ``GPU_METRICS``; ``typeId & 0xFF`` = device).
Raw times below; every expected value is worked out by hand (sample-and-hold: a sample's
value lasts until the next sample of its series).
"""

from __future__ import annotations

import json
import math
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
from traceatlas.testing.nsys import SYSTEM_NS, Call, Kernel, Range, write_export

GEMM, NVJET, ELEM = "sm90_xmma_gemm_a", "nvjet_b", "elementwise"
# Device 0 (process 100, rank 0): Tensor Active 1000: 10, 2000: 50, 3000: 90, 4000: 0;
# DRAM Read Bandwidth 1000: 20, 4000: 0. Device 1 (process 200, rank 1): Tensor Active
# 1000: 40, 3000: 0.
METRICS = [(1000, 0, 1, 10), (2000, 0, 1, 50), (3000, 0, 1, 90), (4000, 0, 1, 0),
           (1000, 0, 2, 20), (4000, 0, 2, 0), (1000, 1, 1, 40), (3000, 1, 1, 0)]
S = SYSTEM_NS  # raw times below are S + t
KERNELS = [
    Kernel(S + 1000, S + 2000, GEMM, correlation=1),  # tensor 10
    Kernel(S + 1500, S + 2500, GEMM, correlation=2, stream=8),  # (500*10+500*50)/1000 = 30
    Kernel(S + 3000, S + 3250, ELEM, correlation=3),  # 90 (250 ns)
    Kernel(S + 2000, S + 4000, NVJET, correlation=4, stream=9),  # (1000*50+1000*90)/2000 = 70
    Kernel(S + 1000, S + 3000, GEMM, device=1, correlation=11, pid=200),  # 40
]
CALLS = [Call(S + 100, S + 110, "cudaLaunchKernel_v7000", correlation=1),
         Call(S + 200, S + 210, "cudaLaunchKernel_v7000", correlation=2),
         Call(S + 300, S + 310, "cudaLaunchKernel_v7000", correlation=3),
         Call(S + 400, S + 410, "cudaLaunchKernel_v7000", correlation=4),
         Call(S + 100, S + 110, "cudaLaunchKernel_v7000", correlation=11, pid=200, tid=200)]
# NVTX: fwd holds launches 1 and 2, inner (nested in fwd) holds 2, bwd holds 3; 4 in none.
RANGES = [Range(S + 50, S + 250, "fwd"), Range(S + 150, S + 240, "inner"),
          Range(S + 280, S + 350, "bwd")]


def _export(path: Path) -> Path:
    write_export(path, KERNELS, CALLS, RANGES)
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE TARGET_INFO_GPU_METRICS (typeId INTEGER, sourceId INTEGER, "
                "typeName TEXT, metricId INTEGER, metricName TEXT)")
    con.executemany("INSERT INTO TARGET_INFO_GPU_METRICS VALUES (?, ?, ?, ?, ?)",
                    [(0x100 | d, d, "GH100", 1, "Tensor Active") for d in (0, 1)]
                    + [(0x100, 0, "GH100", 2, "DRAM Read Bandwidth")])
    con.execute("CREATE TABLE GPU_METRICS (timestamp INTEGER, typeId INTEGER, "
                "metricId INTEGER, value INTEGER)")
    con.executemany("INSERT INTO GPU_METRICS VALUES (?, ?, ?, ?)",
                    [(SYSTEM_NS + t, 0x100 | d, m, v) for t, d, m, v in METRICS])
    con.commit()
    con.close()
    return path


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> traceatlas.Trace:
    tmp = tmp_path_factory.mktemp("gran")
    return traceatlas.open(traceatlas.ingest(_export(tmp / "gm.sqlite"), tmp / "store"))


def _rows(trace: traceatlas.Trace, by: str, key: str | None,
          counter: str = "Tensor Active") -> dict[Any, dict[str, Any]]:
    table = analysis.run("counters", trace, {"by": by}).table
    table = table.filter(pl.col("counter") == counter)
    return {(r["rank"], r[key] if key else None): r for r in table.to_dicts()}


def _pop_std(values: list[float]) -> float:
    m = sum(values) / len(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / len(values))


def test_by_kernel_mean_and_variability(trace: traceatlas.Trace) -> None:
    rows = _rows(trace, "kernel", "kernel")
    gemm = rows[(0, GEMM)]
    # instances 10 and 30, each 1000 ns -> time-weighted 20; std 10, cv 0.5.
    assert (gemm["kernels"], gemm["mean"], gemm["min"], gemm["max"]) == (
        2, pytest.approx(20.0), pytest.approx(10.0), pytest.approx(30.0))
    assert gemm["std"] == pytest.approx(10.0) and gemm["cv"] == pytest.approx(0.5)
    assert gemm["samples"] == 2  # t=1000 in #1, t=2000 in #2
    assert rows[(0, NVJET)]["mean"] == pytest.approx(70.0)
    assert rows[(0, NVJET)]["std"] == pytest.approx(0.0)
    assert rows[(1, GEMM)]["mean"] == pytest.approx(40.0)


def test_by_instance(trace: traceatlas.Trace) -> None:
    table = analysis.run("counters", trace, {"by": "instance"}).table.filter(
        (pl.col("counter") == "Tensor Active") & (pl.col("rank") == 0))
    got = sorted(zip(table["kernel"], table["covered_ns"], table["mean"], strict=True))
    want = sorted([(GEMM, 1000, 10.0), (GEMM, 1000, 30.0), (ELEM, 250, 90.0),
                   (NVJET, 2000, 70.0)])
    assert [(k, c) for k, c, _ in got] == [(k, c) for k, c, _ in want]
    assert [m for *_, m in got] == pytest.approx([m for *_, m in want])


def test_by_rank_weighted_mean_differs_from_plain(trace: traceatlas.Trace) -> None:
    r0 = _rows(trace, "rank", None)[(0, None)]
    values = [10.0, 30.0, 90.0, 70.0]
    weights = [1000, 1000, 250, 2000]
    weighted = sum(v * w for v, w in zip(values, weights, strict=True)) / sum(weights)
    assert weighted == pytest.approx(202_500 / 4_250)  # 47.65, not the plain 50
    assert r0["mean"] == pytest.approx(weighted)
    assert r0["kernels"] == 4
    assert r0["std"] == pytest.approx(_pop_std(values))
    assert r0["cv"] == pytest.approx(_pop_std(values) / 50.0)
    assert (r0["min"], r0["max"]) == (pytest.approx(10.0), pytest.approx(90.0))
    dram = _rows(trace, "rank", None, "DRAM Read Bandwidth")
    assert set(dram) == {(0, None)} and dram[(0, None)]["mean"] == pytest.approx(20.0)


def test_by_annotation_innermost_nvtx(trace: traceatlas.Trace) -> None:
    result = analysis.run("counters", trace, {"by": "annotation"})
    rows = {(r["rank"], r["annotation"]): r
            for r in result.table.filter(pl.col("counter") == "Tensor Active").to_dicts()}
    assert rows[(0, "fwd")]["mean"] == pytest.approx(10.0)    # launch 1 only
    assert rows[(0, "inner")]["mean"] == pytest.approx(30.0)  # launch 2: innermost
    assert rows[(0, "bwd")]["mean"] == pytest.approx(90.0)
    assert rows[(0, None)]["mean"] == pytest.approx(70.0)     # launch 4 in no range
    assert rows[(1, None)]["mean"] == pytest.approx(40.0)
    assert any("inside no annotation / nvtx span" in n for n in result.notes)


def test_gemm_tensor_table(trace: traceatlas.Trace) -> None:
    table = analysis.run("counters", trace).extra["gemm_tensor"]
    assert table.columns == ["rank", "counter", "source", NVJET, GEMM]  # elementwise: no
    assert table["rank"].to_list() == [0, 1]
    assert table[NVJET].to_list()[0] == pytest.approx(70.0)
    assert table[NVJET].to_list()[1] is None  # never ran on rank 1
    assert table[GEMM].to_list() == pytest.approx([20.0, 40.0])


def test_cli_by_param_and_bad_value(trace: traceatlas.Trace) -> None:
    runner = CliRunner()
    ok = runner.invoke(app, ["analyze", "counters", str(trace.path), "-p", "by=rank",
                             "--format", "csv"])
    assert ok.exit_code == 0, ok.output
    assert ok.output.splitlines()[0].startswith("rank,counter,source,kernels")
    bad = runner.invoke(app, ["analyze", "counters", str(trace.path), "-p", "by=warp"])
    assert bad.exit_code == 2
    assert "Traceback" not in bad.output and "warp" in bad.output


def test_by_op_cupti_ranges(tmp_path: Path) -> None:
    # CUPTI range events on the main thread: attributed to the innermost cpu_op
    # holding the range's start.
    b = TraceBuilder(0, 1, profiler_markers=False)
    b.cpu_op("aten::linear", 0, 10_000)
    b.cpu_op("aten::mm", 1_000, 5_000)
    path = b.write(tmp_path / "rank-0.json")
    doc = json.loads(path.read_text())
    t0 = min(float(e["ts"]) for e in doc["traceEvents"] if e.get("name") == "aten::linear")
    ranges = [(2.0, {"tensor": 10}), (3.0, {"tensor": 30}), (6.0, {"tensor": 5}),
              (20.0, {"tensor": 7})]  # 2, 3 us: in mm; 6 us: in linear; 20 us: none
    for at_us, args in ranges:
        doc["traceEvents"].append({"ph": "X", "cat": "cuda_profiler_range", "name": "k",
                                   "pid": b.pid, "tid": b.main_tid, "ts": t0 + at_us,
                                   "dur": 0.5, "args": args})
    path.write_text(json.dumps(doc))
    trace = traceatlas.open(traceatlas.ingest(path, tmp_path / "store"))
    table = analysis.run("counters", trace, {"by": "op"}).table
    got = {r["op"]: (r["kernels"], r["mean"], r["std"]) for r in table.to_dicts()}
    assert got["aten::mm"] == (2, pytest.approx(20.0), pytest.approx(10.0))
    assert got["aten::linear"] == (1, pytest.approx(5.0), pytest.approx(0.0))
    assert got[None] == (1, pytest.approx(7.0), pytest.approx(0.0))


def test_rank_batches_equal_whole_run(trace: traceatlas.Trace) -> None:
    # one rank per batch: rank 1 has no nvjet_b column; the merge joins by name
    from traceatlas.analysis import partitioned
    from traceatlas.engine import LocalEngine

    whole = analysis.run("counters", trace, {"by": "annotation"})
    counters = analysis.registry.get_analysis("counters")
    typed = analysis.registry.parse_params(counters, {"by": "annotation"})
    split = partitioned.run_partitioned(counters, trace, typed, LocalEngine(1),
                                        ranks_per_task=1)
    assert split.table.equals(whole.table)
    assert split.extra["gemm_tensor"].equals(whole.extra["gemm_tensor"])
    assert split.extra["bound"].equals(whole.extra["bound"])
