"""``steps``: the NumPy sweep (``_sweep``) against a frozen copy of the Polars sweep it
replaced (one event frame sorted by rank and time, running counts per part, pieces joined
to windows with ``join_asof``), on random intervals and windows over several ranks, and
the whole analysis with the old breakdown on a trace built in code."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import traceatlas
from traceatlas.analysis import registry, steps
from traceatlas.testing import TraceBuilder

PARTS = steps.PARTS


def _old_inside(rows: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Frozen copy of the Polars sweep of ``steps._breakdown`` before the NumPy rewrite."""
    rows_l, win_l = rows.lazy(), windows.lazy()
    deltas = [pl.when(pl.col("k") == k).then(pl.col("d")).otherwise(0).alias(f"_d{k}")
              for k in range(len(PARTS))]
    bounds = pl.concat([win_l.select("rank", pl.col("start_ns").alias("ts")),
                        win_l.select("rank", pl.col("end_ns").alias("ts"))])
    events = pl.concat([
        rows_l.select("rank", pl.col("start_ns").alias("ts"), "k",
                      pl.lit(1, pl.Int32).alias("d")),
        rows_l.select("rank", pl.col("end_ns").alias("ts"), "k",
                      pl.lit(-1, pl.Int32).alias("d")),
        bounds.with_columns(pl.lit(None, pl.Int8).alias("k"), pl.lit(0, pl.Int32).alias("d")),
    ], how="vertical_relaxed")
    counts = [pl.col(f"_d{k}").cum_sum().alias(f"_c{k}") for k in range(len(PARTS))]
    owner = pl.coalesce(*(pl.when(pl.col(f"_c{k}") > 0).then(pl.lit(k, pl.Int8))
                          for k in range(len(PARTS))))
    pieces = (
        events.with_columns(deltas)
        .sort("rank", "ts")
        .with_columns(counts)
        .with_columns(owner.alias("k"), (pl.col("ts").shift(-1) - pl.col("ts")).alias("len"))
        .filter(pl.col("k").is_not_null() & pl.col("len").is_not_null())
        .select("rank", "ts", "k", "len")
    )
    win = win_l.select("rank", "step", pl.col("start_ns").alias("ws"),
                       pl.col("end_ns").alias("we")).sort("ws")
    inside = (pieces.sort("ts")
              .join_asof(win, left_on="ts", right_on="ws", by="rank", strategy="backward",
                         check_sortedness=False)
              .filter(pl.col("ws").is_not_null() & (pl.col("ts") < pl.col("we")))
              .group_by("rank", "step")
              .agg(pl.col("len").filter(pl.col("k") == k).sum().alias(f"{name}_ns")
                   for k, name in enumerate(PARTS)))
    return (win_l.select("rank", "step").join(inside, on=["rank", "step"], how="left")
            .with_columns(pl.col(f"{name}_ns").fill_null(0) for name in PARTS)
            .sort("rank", "step").collect())


def _random_case(seed: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Intervals on a coarse time grid (many ties), windows non-overlapping per rank with
    gaps, shared bounds and zero-length windows; a rank with windows and no intervals."""
    rng = np.random.default_rng(seed)
    rows, wins = [], []
    for rank in (0, 3, 7):
        cuts = np.sort(rng.choice(np.arange(0, 400, 5), size=14, replace=False))
        for step, (a, b) in enumerate(zip(cuts[0::2], cuts[1::2], strict=True)):
            b = a if step == 2 else b            # one zero-length window
            wins.append((rank, step, int(a), int(b)))
        if rank == 7:
            continue
        n = int(rng.integers(50, 300))
        start = rng.integers(-20, 420, n) // 3 * 3
        dur = rng.integers(1, 60, n) // 2 * 2 + 1
        kind = rng.integers(0, len(PARTS), n)
        rows += [(rank, int(s), int(s + d), int(k))
                 for s, d, k in zip(start, dur, kind, strict=True)]
    rows_df = pl.DataFrame(rows, schema={"rank": pl.Int32, "start_ns": pl.Int64,
                                         "end_ns": pl.Int64, "k": pl.Int8}, orient="row")
    win_df = pl.DataFrame(wins, schema={"rank": pl.Int32, "step": pl.Int64,
                                        "start_ns": pl.Int64, "end_ns": pl.Int64},
                          orient="row")
    return rows_df, win_df


@pytest.mark.parametrize("seed", range(12))
def test_sweep_equals_old_polars_sweep(seed: int) -> None:
    rows, windows = _random_case(seed)
    new = steps._sweep(rows, windows).sort("rank", "step")
    assert_frame_equal(new, _old_inside(rows, windows))


def test_sweep_without_rows() -> None:
    _, windows = _random_case(0)
    empty = pl.DataFrame(schema={"rank": pl.Int32, "start_ns": pl.Int64,
                                 "end_ns": pl.Int64, "k": pl.Int8})
    new = steps._sweep(empty, windows).sort("rank", "step")
    assert_frame_equal(new, _old_inside(empty, windows))
    assert int(new.select(pl.sum_horizontal(f"{p}_ns" for p in PARTS).sum()).item()) == 0


def test_sweep_by_hand() -> None:
    # Rank 0, window [0, 100): kernel [10, 30), runtime [20, 50), cpu_op [0, 100).
    # kernel 20 (10-30), runtime 20 (30-50), cpu_exec 10 (0-10) + 50 (50-100) = 60.
    rows = pl.DataFrame({"rank": [0, 0, 0], "start_ns": [10, 20, 0], "end_ns": [30, 50, 100],
                         "k": [0, 3, 5]},
                        schema={"rank": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64,
                                "k": pl.Int8})
    windows = pl.DataFrame({"rank": [0], "step": [1], "start_ns": [0], "end_ns": [100]},
                           schema={"rank": pl.Int32, "step": pl.Int64, "start_ns": pl.Int64,
                                   "end_ns": pl.Int64})
    got = steps._sweep(rows, windows).row(0, named=True)
    assert (got["kernel_ns"], got["runtime_ns"], got["cpu_exec_ns"]) == (20, 20, 60)
    assert got["memcpy_ns"] == got["memset_ns"] == got["dataloader_ns"] == 0


def test_whole_analysis_equals_old_breakdown(tmp_path: Path) -> None:
    b = TraceBuilder(0, 1, base_time_ns=1_700_000_000_000_000_000, profiler_markers=False)
    b.step(1, 0, 100_000)
    b.step(2, 100_000, 200_000)
    b.step(3, 200_000, 260_000)
    b.cpu_op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 20_000)
    b.cpu_op("aten::mm", 25_000, 60_000)
    b.launch("gemm", 30_000, 5_000, 40_000, 50_000)
    b.launch("Memcpy HtoD", 62_000, 3_000, 92_000, 5_000, kind="memcpy", nbytes=64)
    b.cpu_op("aten::add", 120_000, 180_000)
    b.launch("late", 150_000, 4_000, 230_000, 20_000)
    b.launch("Memset", 160_000, 2_000, 170_000, 1_000, kind="memset", nbytes=8)
    b.cpu_op("aten::zero_", 256_000, 258_000)
    trace = traceatlas.open(traceatlas.ingest(b.write(tmp_path / "rank-0.json"),
                                              tmp_path / "store"))
    table = registry.run("steps", trace).table
    windows = table.select("rank", "step", "start_ns", "end_ns")
    part = pl.coalesce(*(pl.when(f).then(pl.lit(k, pl.Int8))
                         for k, f in enumerate(steps._part_filters())))
    rows = (trace.intervals.select("rank", "start_ns", "end_ns", part.alias("k"))
            .filter(pl.col("k").is_not_null() & (pl.col("end_ns") > pl.col("start_ns")))
            .collect())
    assert_frame_equal(table.select("rank", "step", *(f"{p}_ns" for p in PARTS)),
                       _old_inside(rows, windows))
