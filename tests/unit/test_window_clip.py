"""``analyze --window`` cuts intervals to the window (time inside it); ``filter`` keeps them
whole. Expected values computed by hand from the trace built here."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from typer.testing import CliRunner

import traceatlas
from traceatlas.cli.main import app
from traceatlas.testing import TraceBuilder

US = 1_000


def _store(tmp_path: Path) -> tuple[Path, int]:
    """One rank: a 1,000 us kernel at 0 and a 100 us kernel at 2,000 us (relative)."""
    b = TraceBuilder(rank=0)
    base = b.base_time_ns
    b.launch("long_k", base, 5 * US, base + 0, 1000 * US)
    b.launch("short_k", base + 1900 * US, 5 * US, base + 2000 * US, 100 * US)
    src = tmp_path / "rank-0.json"
    b.write(src)
    store = tmp_path / "s.tastore"
    assert CliRunner().invoke(app, ["ingest", str(src), "-o", str(store)]).exit_code == 0
    # t0: the kernels' time origin (long_k's start), read back from the store
    t0 = (traceatlas.open(store).intervals.filter(pl.col("name").cast(pl.String) == "long_k")
          .select("start_ns").collect().item())
    return store, int(t0)


def test_clip_cuts_intervals_to_the_window(tmp_path: Path) -> None:
    store, t0 = _store(tmp_path)
    trace = traceatlas.open(store)
    # window 900 us .. 2,050 us: 100 us of long_k and 50 us of short_k inside it
    lo, hi = t0 + 900 * US, t0 + 2050 * US
    kernels = (trace.select(window=(lo, hi), clip=True).intervals
               .filter(pl.col("category").cast(pl.String) == "kernel")
               .select("name", "start_ns", "end_ns", "dur_ns").sort("start_ns").collect())
    assert kernels.rows() == [("long_k", lo, t0 + 1000 * US, 100 * US),
                              ("short_k", t0 + 2000 * US, hi, 50 * US)]
    whole = (trace.select(window=(lo, hi)).intervals
             .filter(pl.col("category").cast(pl.String) == "kernel")
             .select("dur_ns").sort("dur_ns").collect()["dur_ns"].to_list())
    assert whole == [100 * US, 1000 * US]  # without clip: kept whole


def test_analyze_window_breakdown_counts_only_the_window(tmp_path: Path) -> None:
    store, t0 = _store(tmp_path)
    window = f"@{t0 + 900 * US}:@{t0 + 2050 * US}"
    out = CliRunner().invoke(app, ["analyze", "breakdown", str(store), "--window", window,
                                   "--format", "json"])
    assert out.exit_code == 0, out.output
    row = json.loads(out.stdout)[0]
    assert row["compute_ns"] == 150 * US  # 100 us + 50 us inside the window, not 1,100 us
    assert row["busy_ns"] == 150 * US
    assert row["span_ns"] <= 1150 * US  # never more than the window


def test_filter_window_keeps_intervals_whole(tmp_path: Path) -> None:
    store, t0 = _store(tmp_path)
    out_store = tmp_path / "f.tastore"
    res = CliRunner().invoke(app, ["filter", str(store), "-o", str(out_store), "--window",
                                   f"@{t0 + 900 * US}:@{t0 + 2050 * US}"])
    assert res.exit_code == 0, res.output
    durs = sorted(traceatlas.open(out_store).intervals
                  .filter(pl.col("category").cast(pl.String) == "kernel")
                  .collect()["dur_ns"].to_list())
    assert durs == [100 * US, 1000 * US]
