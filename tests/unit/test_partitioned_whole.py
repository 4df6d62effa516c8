"""Analyses that used to run whole, now mapped over rank batches (``collectives``,
``time_profile``, ``phases``, ``memory``): on small multi-rank traces built here, the
partitioned run (one rank per batch, inline and on 2 processes) gives the hand-computed
values and every table of the whole run, in the same order."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
from polars.testing import assert_frame_equal

import traceatlas
from traceatlas.analysis import registry
from traceatlas.analysis.base import Result
from traceatlas.analysis.partitioned import is_partitioned, run_partitioned
from traceatlas.engine import Engine, LocalEngine
from traceatlas.testing import Collective, TraceBuilder, write_multi_rank

BASE = 1_700_000_000_000_000_000
AR_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
AR = Collective("allreduce", 1024, 1024, "Float", (0, 1, 2))  # 1024 x 4 B = 4096 B


def _open(tmp_path: Path, builders: list[TraceBuilder]) -> traceatlas.Trace:
    paths = write_multi_rank(tmp_path / "in", builders)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return traceatlas.open(traceatlas.ingest(paths, tmp_path / "store",
                                                 engine=LocalEngine(1)))


def _both(trace: traceatlas.Trace, name: str, params: dict[str, Any],
          engine: Engine | None = None) -> tuple[Result, Result]:
    """(partitioned one rank a batch, whole), after checking they are the same."""
    analysis = registry.get_analysis(name)
    typed = registry.parse_params(analysis, params)
    assert is_partitioned(analysis, typed)
    whole = analysis.run(trace, typed)
    parts = run_partitioned(analysis, trace, typed, engine or LocalEngine(1),
                            ranks_per_task=1)
    assert_frame_equal(parts.table, whole.table)
    assert sorted(parts.extra) == sorted(whole.extra)
    for key, frame in whole.extra.items():
        assert_frame_equal(parts.extra[key], frame)
    assert parts.notes == whole.notes
    return parts, whole


def test_collectives_matched_across_batches(tmp_path: Path) -> None:
    """Three ranks, two allreduces; rank 1 starts last in the first, rank 2 in the second:
    each rank in its own batch, the instances still span the three ranks."""
    builders = [TraceBuilder(r, 3, base_time_ns=BASE, profiler_markers=False)
                for r in range(3)]
    calls = [({0: 100_000, 1: 130_000, 2: 110_000}, 200_000),   # skew 30k, last rank 1
             ({0: 400_000, 1: 405_000, 2: 450_000}, 500_000)]   # skew 50k, last rank 2
    for i, (starts, end) in enumerate(calls):
        for rank, start in starts.items():
            builders[rank].launch(AR_KERNEL, 10_000 * i, 1_000, start, end - start,
                                  stream=20, collective=AR)
    trace = _open(tmp_path, builders)
    for engine in (LocalEngine(1), LocalEngine(2)):
        parts, _ = _both(trace, "collectives", {}, engine)
        rows = parts.table.select("instance", "occurrence", "ranks", "bytes", "start_ns",
                                  "end_ns", "skew_ns", "straggler").rows()
        # run start: the first launch call at BASE + 0
        assert rows == [(0, 0, 3, 4096, 100_000, 200_000, 30_000, 1),
                        (1, 1, 3, 4096, 400_000, 500_000, 50_000, 2)]
        assert parts.extra["stragglers"].select("rank", "instances", "last").rows() == [
            (0, 2, 0), (1, 2, 1), (2, 2, 1)]
        assert f"{BASE} ns since the epoch" in parts.notes[0]


def test_time_profile_bins_over_the_whole_span(tmp_path: Path) -> None:
    """Rank 0 runs A over [0, 100 us), rank 1 over [50, 150 us): 3 bins of 50 us over the
    whole span (each batch alone would cut its own span)."""
    builders = [TraceBuilder(r, 2, base_time_ns=BASE, profiler_markers=False)
                for r in range(2)]
    builders[0].cpu_op("A", 0, 100_000)
    builders[1].cpu_op("A", 50_000, 150_000)
    trace = _open(tmp_path, builders)
    parts, _ = _both(trace, "time_profile", {"bins": 3, "normalize": True})
    rows = parts.table.filter(name="A").select("bin", "bin_start_ns", "exclusive_ns",
                                                "fraction").rows()
    assert rows == [(0, BASE, 50_000, 0.5), (1, BASE + 50_000, 100_000, 1.0),
                    (2, BASE + 100_000, 50_000, 0.5)]
    # idle: 2 ranks x 50 us - busy
    assert parts.extra["idle"]["idle_ns"].to_list() == [50_000, 0, 50_000]
    assert parts.notes[-1].endswith("; 2 rank(s)")


def test_phases_loop_per_rank_missing_rank_noted(tmp_path: Path) -> None:
    """Rank 0 repeats (A, B) three times; rank 1 runs A, B, C once: no loop there, named
    in the notes although its batch found nothing."""
    builders = [TraceBuilder(r, 2, base_time_ns=BASE, profiler_markers=False)
                for r in range(2)]
    for i in range(3):
        builders[0].cpu_op("A", 100_000 * i, 100_000 * i + 40_000)
        builders[0].cpu_op("B", 100_000 * i + 50_000, 100_000 * i + 90_000)
    for i, name in enumerate("ABC"):
        builders[1].cpu_op(name, 100_000 * i, 100_000 * i + 40_000)
    trace = _open(tmp_path, builders)
    parts, _ = _both(trace, "phases", {})
    t0 = BASE
    assert parts.table.select("rank", "phase", "start_ns", "end_ns", "events").rows() == [
        (0, 0, t0, t0 + 100_000, 2), (0, 1, t0 + 100_000, t0 + 200_000, 2),
        (0, 2, t0 + 200_000, t0 + 290_000, 2)]
    assert parts.notes[-1] == "no repetition found on 1 rank(s): 1"
    # no rank with a loop: the same missing-data error as the whole run
    only = trace.select(ranks=[1])
    analysis = registry.get_analysis("phases")
    typed = registry.parse_params(analysis, {})
    with pytest.raises(registry.MissingDataError) as whole_err:
        analysis.run(only, typed)
    with pytest.raises(registry.MissingDataError) as part_err:
        analysis.merge([analysis.partial(only, typed)], typed)
    assert str(part_err.value) == str(whole_err.value)


def test_memory_per_rank_device(tmp_path: Path) -> None:
    """Rank r allocates (r + 1) KiB then 2 (r + 1) KiB on its GPU and frees the first:
    peak 3 (r + 1) KiB at its second event on every rank (peak_seq counted per rank)."""
    builders = [TraceBuilder(r, 3, base_time_ns=BASE, profiler_markers=False)
                for r in range(3)]
    for r, b in enumerate(builders):
        kib = 1024 * (r + 1)
        b.cpu_op("aten::empty", 0, 50_000)
        b.memory(10_000, kib, addr=1, total_allocated=kib, total_reserved=4 * kib)
        b.memory(20_000, 2 * kib, addr=2, total_allocated=3 * kib, total_reserved=4 * kib)
        b.memory(30_000, -kib, addr=1, total_allocated=2 * kib, total_reserved=4 * kib)
    trace = _open(tmp_path, builders)
    parts, _ = _both(trace, "memory", {})
    peaks = parts.table.select("rank", "device", "peak_allocated_bytes", "peak_ns",
                               "peak_seq", "fragmentation_bytes").rows()
    assert peaks == [(r, f"GPU {r}", 3072 * (r + 1), BASE + 20_000, 1, 1024 * (r + 1))
                     for r in range(3)]
    # the second allocation is never freed
    unfreed = parts.extra["unfreed"].select("rank", "bytes", "allocations").rows()
    assert unfreed == [(r, 2048 * (r + 1), 1) for r in range(3)]


def test_roofline_groups_summed_over_batches(tmp_path: Path) -> None:
    """Rank r runs one bf16 1024^3 matmul of (r + 1) x 10 us and one op without shapes
    (5 us): by=op sums the three ranks' matmuls into one group; by=rank keeps three."""
    n = 1024
    mm = {"Input Dims": [[n, n], [n, n]], "Input type": ["c10::BFloat16"] * 2,
          "Concrete Inputs": ["", ""]}
    builders = [TraceBuilder(r, 3, base_time_ns=BASE, profiler_markers=False)
                for r in range(3)]
    for r, b in enumerate(builders):
        b.cpu_op("aten::mm", 0, 50_000, args=mm)
        b.launch("sm90_gemm", 10_000, 5_000, 100_000, 10_000 * (r + 1))
        b.cpu_op("aten::weird", 60_000, 90_000)
        b.launch("weird_kernel", 70_000, 5_000, 200_000, 5_000)
    trace = _open(tmp_path, builders)
    parts, _ = _both(trace, "roofline", {})
    row = parts.table.filter(op="aten::mm").row(0, named=True)
    assert (row["count"], row["kernels"], row["device_ns"]) == (3, 3, 60_000)
    assert row["flops"] == 3 * 2 * n**3 and row["bytes"] == 3 * 3 * n * n * 2
    assert row["share_pct"] == pytest.approx(100 * 60_000 / 75_000)
    assert parts.extra["no_model"].select("op", "instances", "device_ns").rows() == [
        ("aten::weird", 3, 15_000)]
    assert parts.notes[-2].startswith("80.0% of the kernel time has a FLOP model")
    by_rank, _ = _both(trace, "roofline", {"by": "rank"})
    assert by_rank.table.filter(op="aten::mm").select("rank", "device_ns").rows() == [
        (2, 30_000), (1, 20_000), (0, 10_000)]
