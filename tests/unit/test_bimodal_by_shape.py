"""Bimodal by shape (issue 22): a kernel's durations are split by the input shapes of
the op that launched it before it is called bimodal. Traces built with ``TraceBuilder``
(``cpu_op`` with an ``Input Dims`` arg, kernels launched inside it); expected values
worked out by hand from the builder calls."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

import traceatlas
from traceatlas.analysis import registry
from traceatlas.analysis.base import Result
from traceatlas.analysis.kernel_modes import modes
from traceatlas.testing import TraceBuilder

BASE = 1_700_000_000_000_000_000
SMALL = [[64, 64], [64, 64]]
LARGE = [[256, 256], [256, 256]]
FAST, SLOW = 100_000, 400_000
"""Kernel durations (ns): 100 us and 400 us."""


def _trace(tmp_path: Path, shapes: list[list[list[int]]], durations: list[int]) -> Result:
    """Call i: an ``aten::mm`` op on ``shapes[i]`` launching kernel ``gemm`` that runs
    ``durations[i]`` ns; calls 1 ms apart, so kernels never overlap."""
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    for i, (dims, dur) in enumerate(zip(shapes, durations, strict=True)):
        t = i * 1_000_000
        b.cpu_op("aten::mm", t, t + 5_000, args={"Input Dims": dims})
        b.launch("gemm", t + 1_000, 2_000, t + 10_000, dur)
    store = traceatlas.ingest(b.write(tmp_path / "rank-0.json"), tmp_path / "s")
    return registry.run("kernels", traceatlas.open(store), {})


def test_two_shapes_two_speeds_is_not_bimodal(tmp_path: Path) -> None:
    """20 calls on the small shape at 100 us, 20 on the large one at 400 us."""
    result = _trace(tmp_path, [SMALL] * 20 + [LARGE] * 20, [FAST] * 20 + [SLOW] * 20)
    assert result.table["bimodal"].to_list() == [False]
    split = result.extra["modes"].sort("fast_median_ns")
    assert split["shape"].to_list() == [json.dumps(SMALL), json.dumps(LARGE)]
    # one speed per shape: both sides of each cut hold the same duration
    assert split["fast_median_ns"].to_list() == [FAST, SLOW]
    assert split["slow_median_ns"].to_list() == [FAST, SLOW]
    assert split["bimodal"].to_list() == [False, False]
    # The same 40 durations without their shapes are bimodal (what was flagged before).
    rows = pl.LazyFrame({"rank": [0] * 40, "name": ["gemm"] * 40,
                         "dur_ns": [FAST] * 20 + [SLOW] * 20},
                        schema={"rank": pl.Int32, "name": pl.String, "dur_ns": pl.Int64})
    busy = pl.LazyFrame({"rank": [0], "busy_ns": [20 * FAST + 20 * SLOW]},
                        schema={"rank": pl.Int32, "busy_ns": pl.Int64})
    assert modes(rows, ["rank", "name"], busy).collect()["bimodal"].to_list() == [True]


def test_one_shape_two_speeds_is_bimodal(tmp_path: Path) -> None:
    """40 calls on one shape, alternately 100 us and 400 us: busy = 20 * 100 + 20 * 400
    = 10 ms; the slow calls' excess = 20 * (400 - 100) us = 6 ms = 60 % of it."""
    result = _trace(tmp_path, [SMALL] * 40, [FAST, SLOW] * 20)
    assert result.table["bimodal"].to_list() == [True]
    (row,) = result.extra["modes"].iter_rows(named=True)
    assert row["shape"] == json.dumps(SMALL)
    assert (row["fast_count"], row["slow_count"]) == (20, 20)
    assert (row["fast_median_ns"], row["slow_median_ns"]) == (FAST, SLOW)
    assert row["excess_ns"] == 20 * (SLOW - FAST)
    assert abs(row["excess_pct"] - 60.0) < 1e-9


def test_mixed_shapes_with_one_bimodal_shape(tmp_path: Path) -> None:
    """The large shape steady at 400 us (20 calls), the small one alternating 100 us and
    250 us (20 calls): flagged, through the small shape only."""
    shapes = [LARGE] * 20 + [SMALL] * 20
    durations = [SLOW] * 20 + [FAST, 250_000] * 10
    result = _trace(tmp_path, shapes, durations)
    assert result.table["bimodal"].to_list() == [True]
    split = result.extra["modes"]
    flagged = split.filter(pl.col("bimodal"))
    assert flagged["shape"].to_list() == [json.dumps(SMALL)]
    # excess 10 * 150 us = 1.5 ms of busy 20 * 400 + 10 * 100 + 10 * 250 us = 11.5 ms
    assert flagged["excess_ns"].to_list() == [1_500_000]


def test_no_shapes_recorded_keeps_one_group(tmp_path: Path) -> None:
    """Kernels launched outside any op: shape null, the split as before."""
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    for i in range(40):
        t = i * 1_000_000
        b.launch("gemm", t + 1_000, 2_000, t + 10_000, FAST if i % 2 else SLOW)
    store = traceatlas.ingest(b.write(tmp_path / "rank-0.json"), tmp_path / "s")
    result = registry.run("kernels", traceatlas.open(store), {})
    assert result.table["bimodal"].to_list() == [True]
    assert result.extra["modes"]["shape"].to_list() == [None]
