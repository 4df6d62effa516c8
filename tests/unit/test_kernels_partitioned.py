"""``kernels by=name`` partitioned (each batch sends its durations, the merge computes the
statistics) equals the whole run, on built 3-rank traces with values worked out by hand:
ties, a kernel called once, a name on one rank only, ``top`` ties, and a two-mode split
that only exists when the ranks are pooled. Engines: LocalEngine inline and with 2
processes; 1 and 2 ranks per task."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceatlas
from traceatlas.analysis import registry
from traceatlas.analysis.base import Result
from traceatlas.analysis.partitioned import is_partitioned, run_partitioned
from traceatlas.engine import LocalEngine
from traceatlas.testing import TraceBuilder, write_multi_rank
from traceatlas.testing.results import assert_same_result

BASE = 1_700_000_000_000_000_000
ENGINES = [(1, 1), (1, 2), (2, 1), (2, 2)]
"""(LocalEngine processes, ranks per task)."""


def _ranks(calls: dict[int, list[tuple[str, int]]]) -> list[TraceBuilder]:
    """One builder per rank: its kernels one after the other on one stream (no overlap:
    the rank's busy time is the sum of its durations), 100 ns apart."""
    out = []
    for rank, kernels in sorted(calls.items()):
        b = TraceBuilder(rank, len(calls), base_time_ns=BASE, profiler_markers=False)
        t = 1_000
        for name, dur in kernels:
            b.launch(name, t, 50, t + 100, dur)
            t += dur + 1_000
        out.append(b)
    return out


def _open(tmp_path: Path, calls: dict[int, list[tuple[str, int]]]) -> traceatlas.Trace:
    paths = write_multi_rank(tmp_path / "run", _ranks(calls))
    return traceatlas.open(traceatlas.ingest(paths, tmp_path / "store"))




def _all_ways(trace: traceatlas.Trace, **given: Any) -> Result:
    """The whole run, checked equal to every partitioned run; returns the whole run."""
    analysis = registry.get_analysis("kernels")
    params = registry.parse_params(analysis, {"by": "name", **given})
    assert is_partitioned(analysis, params)
    whole = analysis.run(trace, params)
    for processes, per_task in ENGINES:
        assert_same_result(run_partitioned(analysis, trace, params, LocalEngine(processes),
                              ranks_per_task=per_task), whole)
    return whole


CALLS = {
    0: [("gemm", 1_000), ("gemm", 3_000), ("relu", 500), ("gemm", 3_000), ("only0", 7_000)],
    1: [("gemm", 2_000), ("relu", 500), ("gemm", 3_000), ("relu", 1_500)],
    2: [("relu", 500), ("gemm", 4_000)],
}
"""busy: rank 0 14,500, rank 1 7,000, rank 2 4,500 ns; 26,000 in all."""


def test_three_ranks_hand_computed(tmp_path: Path) -> None:
    whole = _all_ways(_open(tmp_path, CALLS))
    rows = {r["name"]: r for r in whole.table.to_dicts()}
    # gemm: 1000 3000 3000 2000 3000 4000; sum 16000, mean 2666.7 -> 2667;
    # n sum(d^2) - sum(d)^2 = 6 * 48e6 - 256e6 = 32e6; var = 32e6 / 30; std 1032.8 -> 1033;
    # sorted 1000 2000 3000 3000 3000 4000: p50 at 2.5 -> 3000 (a tie); p95 at 4.75 ->
    # 3000 + 0.75 * 1000 = 3750.
    assert {k: rows["gemm"][k] for k in ("category", "count", "total_ns", "mean_ns",
                                         "min_ns", "max_ns", "std_ns", "p50_ns",
                                         "p95_ns", "bimodal")} == {
        "category": "kernel", "count": 6, "total_ns": 16_000, "mean_ns": 2_667,
        "min_ns": 1_000, "max_ns": 4_000, "std_ns": 1_033, "p50_ns": 3_000,
        "p95_ns": 3_750, "bimodal": False}
    assert rows["gemm"]["share_pct"] == pytest.approx(16_000 / 26_000 * 100, rel=1e-15)
    # relu: 500 500 1500 500; mean 750; 4 * 3e6 - 9e6 = 3e6, var 3e6 / 12 = 250000,
    # std exactly 500; p50 at 1.5 -> 500; p95 at 2.85 -> 500 + 0.85 * 1000 = 1350.
    assert [rows["relu"][k] for k in ("count", "total_ns", "mean_ns", "std_ns", "p50_ns",
                                      "p95_ns")] == [4, 3_000, 750, 500, 500, 1_350]
    # only0: one call on rank 0 only: std 0, both percentiles the call.
    assert [rows["only0"][k] for k in ("count", "std_ns", "p50_ns", "p95_ns",
                                       "min_ns", "max_ns")] == [1, 0, 7_000, 7_000,
                                                                 7_000, 7_000]
    assert whole.table["name"].to_list() == ["gemm", "only0", "relu"]  # total descending
    hist = whole.extra["histogram"].filter(pl.col("name") == "gemm")
    # bounds ceil(10^(b/10)): 1000 in [1000, 1259); 2000 in [1996, 2512); 3000 (3 calls)
    # in [2512, 3163); 4000 (log10 3.602) in [3982, 5012).
    assert hist.select("bin_lo_ns", "bin_hi_ns", "count").rows() == [
        (1_000, 1_259, 1), (1_996, 2_512, 1), (2_512, 3_163, 3), (3_982, 5_012, 1)]
    assert whole.extra["modes"].height == 0  # no group of 10 calls


def test_top_keeps_the_largest_and_breaks_ties_by_name(tmp_path: Path) -> None:
    calls = {0: [("zeta", 5_000), ("beta", 1_000)], 1: [("alpha", 2_500)],
             2: [("alpha", 2_500), ("gamma", 900)]}
    trace = _open(tmp_path, calls)
    # totals: alpha 5000 (ranks 1 and 2), zeta 5000 (rank 0), beta 1000, gamma 900.
    assert _all_ways(trace, top=1).table["name"].to_list() == ["alpha"]
    assert _all_ways(trace, top=3).table["name"].to_list() == ["alpha", "zeta", "beta"]
    hist = _all_ways(trace, top=2).extra["histogram"]
    assert sorted(set(hist["name"])) == ["alpha", "zeta"]  # histograms of kept names only


def test_two_modes_only_over_all_ranks(tmp_path: Path) -> None:
    """10 calls of 1 ms on rank 0, 5 of 3 ms on ranks 1 and 2: no rank has 10 calls of
    the slow side, pooled they split 10 / 10 with separation 1 (two exact values)."""
    calls = {0: [("k", 1_000_000)] * 10, 1: [("k", 3_000_000)] * 5,
             2: [("k", 3_000_000)] * 5}
    trace = _open(tmp_path, calls)
    whole = _all_ways(trace)
    modes = whole.extra["modes"].to_dicts()
    assert len(modes) == 1
    m = modes[0]
    assert (m["fast_count"], m["slow_count"], m["fast_median_ns"], m["slow_median_ns"]) == (
        10, 10, 1_000_000, 3_000_000)
    assert m["separation"] == pytest.approx(1.0, abs=1e-12)  # within-group variance 0
    # excess: 10 slow calls x (3 ms - 1 ms) = 20 ms of 40 ms busy = 50 %.
    assert m["excess_ns"] == 20_000_000
    assert m["excess_pct"] == pytest.approx(50.0)
    assert whole.table["bimodal"].to_list() == [True]
    per_rank = registry.run("kernels", trace, {"by": "rank"})
    assert per_rank.extra["modes"].height == 1  # rank 0 only (10 calls), one mode
    assert per_rank.table["bimodal"].to_list() == [False, False, False]


def test_memory_rows_and_busy(tmp_path: Path) -> None:
    """memory=true lists memcpy; the busy time counts it either way."""
    b0 = TraceBuilder(0, 2, base_time_ns=BASE, profiler_markers=False)
    b0.launch("gemm", 1_000, 50, 2_000, 3_000)
    b0.launch("Memcpy HtoD", 9_000, 50, 10_000, 1_000, kind="memcpy", nbytes=64)
    b1 = TraceBuilder(1, 2, base_time_ns=BASE, profiler_markers=False)
    b1.launch("gemm", 1_000, 50, 2_000, 1_000)
    paths = write_multi_rank(tmp_path / "run", [b0, b1])
    trace = traceatlas.open(traceatlas.ingest(paths, tmp_path / "store"))
    plain = _all_ways(trace)
    assert plain.table["name"].to_list() == ["gemm"]
    assert plain.table["share_pct"].to_list() == pytest.approx([4_000 / 5_000 * 100])
    memory = _all_ways(trace, memory=True)
    assert memory.table.select("name", "count", "total_ns").rows() == [
        ("gemm", 2, 4_000), ("Memcpy HtoD", 1, 1_000)]


def test_std_from_exact_sums_has_no_cancellation(tmp_path: Path) -> None:
    """Durations near 2^40 ns (18 minutes) that differ by 1, 2 ns: the exact integer sums
    give the sample std of (0, 1, 2) = 1, whatever the order and the partition."""
    big = 2 ** 40
    calls = {0: [("long", big + 2)], 1: [("long", big)], 2: [("long", big + 1)]}
    whole = _all_ways(_open(tmp_path, calls))
    row = whole.table.to_dicts()[0]
    assert (row["std_ns"], row["mean_ns"], row["p50_ns"]) == (1, big + 1, big + 1)
    assert math.isclose(row["share_pct"], 100.0)


def test_equal_totals_sort_by_name_as_strings(tmp_path: Path) -> None:
    """The merge codes names (Enums in sorted order): equal totals still come out in the
    strings' byte order (upper case first, non-ASCII last), whole and partitioned."""
    calls = {0: [("b", 1_000), ("é", 1_000)], 1: [("a", 1_000)], 2: [("B", 1_000)]}
    whole = _all_ways(_open(tmp_path, calls))
    assert whole.table["name"].to_list() == ["B", "a", "b", "é"]
    assert whole.table["name"].dtype == pl.String
