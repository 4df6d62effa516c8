"""Golden tests of ``overlap``: hand-computed comm/compute overlap and in-flight series.

Times in the builder are ns relative to BASE (the trace's baseTimeNanoseconds); every
expected value is worked out by hand in the comments.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

import traceatlas
from traceatlas.analysis import registry
from traceatlas.testing import TraceBuilder

BASE = 1_700_000_000_000_000_000
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def _trace(tmp_path: Path, b: TraceBuilder) -> traceatlas.Trace:
    return traceatlas.open(traceatlas.ingest(b.write(tmp_path / "rank-0.json"),
                                             tmp_path / "store"))


def _builder() -> TraceBuilder:
    return TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)


def test_comm_overlapped_by_compute_on_another_stream(tmp_path: Path) -> None:
    b = _builder()
    # comm 10 ms on stream 20: [0.1 ms, 10.1 ms)
    b.launch(NCCL, 10_000, 1_000, 100_000, 10_000_000, stream=20)
    # compute on stream 7: [6.1 ms, 11 ms) overlaps comm over [6.1, 10.1) = 4 ms
    b.launch("void gemm()", 20_000, 1_000, 6_100_000, 4_900_000, stream=7)
    b.launch("void relu()", 30_000, 1_000, 20_000_000, 1_000_000, stream=7)   # [20, 21) ms
    b.launch("void add()", 40_000, 1_000, 21_000_000, 1_000_000, stream=9)    # [21, 22) ms
    # memcpy over the comm kernel: neither compute nor counted in flight
    b.launch("Memcpy HtoD (Pageable -> Device)", 50_000, 1_000, 200_000, 2_000_000,
             stream=8, kind="memcpy", nbytes=1_000)
    result = registry.run("overlap", _trace(tmp_path, b))

    # comm = 10 ms; compute = union [6.1, 11) + [20, 22) = 4.9 + 2 = 6.9 ms;
    # overlapped = 4 ms -> 40 %.
    assert result.table.to_dicts() == [{
        "rank": 0, "comm_ns": 10_000_000, "compute_ns": 6_900_000,
        "overlapped_ns": 4_000_000, "overlap_pct": 40.0}]
    assert result.notes == []

    # Sweep over kernels only: +1@0.1, +1@6.1, -1@10.1, -1@11, +1@20, (-1,+1)@21 -> no
    # change, -1@22 (ms). In flight 0 between 11 and 20 ms is a row.
    series = result.extra["series"]
    assert series.columns == ["rank", "start_ns", "end_ns", "in_flight"]
    assert [(r["start_ns"] - BASE, r["end_ns"] - BASE, r["in_flight"])
            for r in series.to_dicts()] == [
        (100_000, 6_100_000, 1),
        (6_100_000, 10_100_000, 2),
        (10_100_000, 11_000_000, 1),
        (11_000_000, 20_000_000, 0),
        (20_000_000, 22_000_000, 1),
    ]
    # The integral of in_flight equals the summed kernel time: 10 + 4.9 + 1 + 1 ms.
    integral = ((series["end_ns"] - series["start_ns"]) * series["in_flight"]).sum()
    assert integral == 16_900_000


def test_comm_fully_hidden_and_not_hidden(tmp_path: Path) -> None:
    b = _builder()
    # two comm kernels: [1, 2) ms fully inside compute [0.5, 3) ms; [5, 6) ms alone.
    b.launch(NCCL, 1_000, 1_000, 1_000_000, 1_000_000, stream=20)
    b.launch(NCCL, 2_000, 1_000, 5_000_000, 1_000_000, stream=20)
    b.launch("void gemm()", 3_000, 1_000, 500_000, 2_500_000, stream=7)
    result = registry.run("overlap", _trace(tmp_path, b))
    # comm 2 ms, overlapped 1 ms -> 50 %
    row = result.table.row(0, named=True)
    assert (row["comm_ns"], row["compute_ns"], row["overlapped_ns"], row["overlap_pct"]) == (
        2_000_000, 2_500_000, 1_000_000, 50.0)


def test_no_comm_gives_null_pct_and_a_note(tmp_path: Path) -> None:
    b = _builder()
    b.launch("void gemm()", 1_000, 1_000, 10_000, 5_000, stream=7)    # [10, 15) us
    b.launch("void gemm()", 3_000, 1_000, 12_000, 5_000, stream=8)    # [12, 17) us
    result = registry.run("overlap", _trace(tmp_path, b))
    row = result.table.row(0, named=True)
    assert (row["comm_ns"], row["compute_ns"], row["overlapped_ns"]) == (0, 7_000, 0)
    assert row["overlap_pct"] is None
    assert any("no communication kernels on rank(s) 0" in n for n in result.notes)
    series = result.extra["series"].with_columns(pl.col("start_ns", "end_ns") - BASE)
    assert series.select("start_ns", "end_ns", "in_flight").rows() == [
        (10_000, 12_000, 1), (12_000, 15_000, 2), (15_000, 17_000, 1)]
