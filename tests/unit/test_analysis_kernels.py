"""Golden tests for the ``kernels`` analysis: statistics, share, histogram and the
bimodality flag worked out by hand from the builder calls (ns after BASE)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import traceatlas
from traceatlas.analysis import registry
from traceatlas.analysis.base import Result
from traceatlas.cli.main import app
from traceatlas.testing import TraceBuilder, write_multi_rank

BASE = 1_700_000_000_000_000_000


def _builder(rank: int = 0, world_size: int = 1) -> TraceBuilder:
    return TraceBuilder(rank, world_size, base_time_ns=BASE, profiler_markers=False)


def _rank0() -> TraceBuilder:
    b = _builder(0, 2)
    b.launch("gemm", 1_000, 500, 10_000, 1_000)         # [10k, 11k)
    b.launch("gemm", 2_000, 500, 20_000, 2_000)         # [20k, 22k)
    b.launch("gemm", 3_000, 500, 30_000, 3_000)         # [30k, 33k)
    b.launch("gemm", 4_000, 500, 40_000, 10_000)        # [40k, 50k)
    b.launch("relu", 5_000, 500, 45_000, 500, stream=20)  # [45k, 45.5k), under gemm 4
    b.launch("relu", 6_000, 500, 60_000, 500)           # [60k, 60.5k)
    b.launch("Memcpy HtoD", 7_000, 500, 70_000, 2_000, kind="memcpy", nbytes=1024)
    # busy (union of all device activity) = 1k + 2k + 3k + 10k + 0.5k + 2k = 18.5k
    return b


def _rank1() -> TraceBuilder:
    b = _builder(1, 2)
    b.launch("gemm", 1_000, 500, 10_000, 4_000)         # [10k, 14k); busy 4k
    return b


def _trace(tmp_path: Path) -> traceatlas.Trace:
    paths = write_multi_rank(tmp_path / "run", [_rank0(), _rank1()])
    return traceatlas.open(traceatlas.ingest(paths, tmp_path / "store"))


def _run(trace: traceatlas.Trace, **params: Any) -> Result:
    return registry.run("kernels", trace, params)


def test_per_rank_statistics(tmp_path: Path) -> None:
    result = _run(_trace(tmp_path))
    rows = {(r["rank"], r["name"]): r for r in result.table.to_dicts()}
    assert set(rows) == {(0, "gemm"), (0, "relu"), (1, "gemm")}   # memcpy: memory=false
    gemm = rows[(0, "gemm")]
    # durations 1000, 2000, 3000, 10000: mean 4000; sample std sqrt(50e6 / 3) = 4082.48;
    # p50 at position 1.5 -> 2500; p95 at 2.85 -> 3000 + 0.85 * 7000 = 8950.
    assert {k: gemm[k] for k in ("category", "count", "total_ns", "mean_ns", "min_ns",
                                 "max_ns", "std_ns", "p50_ns", "p95_ns")} == {
        "category": "kernel", "count": 4, "total_ns": 16_000, "mean_ns": 4_000,
        "min_ns": 1_000, "max_ns": 10_000, "std_ns": 4_082, "p50_ns": 2_500,
        "p95_ns": 8_950}
    assert gemm["share_pct"] == pytest.approx(16_000 / 18_500 * 100)
    relu = rows[(0, "relu")]
    assert (relu["count"], relu["total_ns"], relu["std_ns"], relu["p95_ns"]) == (
        2, 1_000, 0, 500)
    assert relu["share_pct"] == pytest.approx(1_000 / 18_500 * 100)
    one = rows[(1, "gemm")]
    assert (one["count"], one["std_ns"], one["share_pct"]) == (1, 0, 100.0)
    # Sorted by rank, then total descending.
    assert [(r["rank"], r["name"]) for r in result.table.to_dicts()] == [
        (0, "gemm"), (0, "relu"), (1, "gemm")]


def test_memory_top_and_by_name(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    with_memory = _run(trace, memory=True).table
    memcpy = with_memory.filter(with_memory["category"] == "memcpy").to_dicts()
    assert [(r["name"], r["count"], r["total_ns"], r["std_ns"]) for r in memcpy] == [
        ("Memcpy HtoD", 1, 2_000, 0)]
    top = _run(trace, top=1).table
    assert [(r["rank"], r["name"]) for r in top.to_dicts()] == [(0, "gemm"), (1, "gemm")]
    by_name = _run(trace, by="name").table
    assert "rank" not in by_name.columns
    gemm = by_name.filter(by_name["name"] == "gemm").to_dicts()[0]
    # 1000, 2000, 3000, 4000, 10000: mean 4000; std sqrt(50e6 / 4) = 3535.5 -> 3536;
    # p50 3000; p95 at 3.8 -> 4000 + 0.8 * 6000 = 8800; share 20000 / (18500 + 4000).
    assert (gemm["count"], gemm["total_ns"], gemm["mean_ns"], gemm["std_ns"],
            gemm["p50_ns"], gemm["p95_ns"]) == (5, 20_000, 4_000, 3_536, 3_000, 8_800)
    assert gemm["share_pct"] == pytest.approx(20_000 / 22_500 * 100)
    assert _run(trace, by="name", top=1).table["name"].to_list() == ["gemm"]


def test_histogram_bins(tmp_path: Path) -> None:
    hist = _run(_trace(tmp_path)).extra["histogram"]
    gemm = hist.filter((hist["rank"] == 0) & (hist["name"] == "gemm"))
    # 10 bins per decade, bounds ceil(10^(b/10)): 1000 -> [1000, 1259) (10^3.1 = 1258.9);
    # 2000 -> [1996, 2512) (10^3.3 = 1995.3, 10^3.4 = 2511.9); 3000 -> [2512, 3163);
    # 10000 -> [10000, 12590) (10^4.1 = 12589.3).
    assert gemm.select("bin_lo_ns", "bin_hi_ns", "count").rows() == [
        (1_000, 1_259, 1), (1_996, 2_512, 1), (2_512, 3_163, 1), (10_000, 12_590, 1)]


def test_bimodal_flag(tmp_path: Path) -> None:
    b = _builder()
    t = 0
    for i in range(20):                                 # half 1 ms, half 3 ms
        b.launch("bimodal", t, 100, t, 1_000_000 if i % 2 else 3_000_000)
        t += 4_000_000
    for i in range(20):                                 # 1.00 .. 1.19 ms: one bin
        b.launch("unimodal", t, 100, t, 1_000_000 + i * 10_000)
        t += 4_000_000
    for i in range(20):                                 # 19 at 1 ms, one (5 %) at 3 ms
        b.launch("outlier", t, 100, t, 3_000_000 if i == 0 else 1_000_000)
        t += 4_000_000
    for i in range(4):                                  # 1 ms and 3 ms but only 4 samples
        b.launch("few", t, 100, t, 1_000_000 if i % 2 else 3_000_000)
        t += 4_000_000
    store = traceatlas.ingest(b.write(tmp_path / "rank-0.json"), tmp_path / "s")
    result = _run(traceatlas.open(store))
    flags = dict(zip(result.table["name"], result.table["bimodal"], strict=True))
    assert flags == {"bimodal": True, "unimodal": False, "outlier": False, "few": False}
    hist = result.extra["histogram"]
    two = hist.filter(hist["name"] == "bimodal")
    # 1e6 -> bin 60 [1000000, 1258926); 3e6 -> log10 = 6.477 -> bin 64 [2511887, 3162278).
    assert two.select("bin_lo_ns", "bin_hi_ns", "count").rows() == [
        (1_000_000, 1_258_926, 10), (2_511_887, 3_162_278, 10)]


def test_missing_device_via_cli(tmp_path: Path) -> None:
    b = _builder()
    b.cpu_op("aten::add", 0, 10_000)
    store = traceatlas.ingest(b.write(tmp_path / "rank-0.json"), tmp_path / "s")
    result = CliRunner().invoke(app, ["analyze", "kernels", str(store)])
    assert result.exit_code == 2
    assert "device activity" in result.output
    table = CliRunner().invoke(app, ["analyze", "kernels", str(store), "-p", "top=x"])
    assert table.exit_code == 2
