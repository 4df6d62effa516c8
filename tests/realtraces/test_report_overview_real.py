"""The report's timeline, built one rank at a time, equals the whole-trace construction
(one union over every rank, then split by rank: the code before the per-rank change, kept
here as the oracle) on the 8-rank DLRM trace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

import traceatlas
from traceatlas.ops.unions import union_segments
from traceatlas.report import overview


def whole_trace_timeline(trace: traceatlas.Trace, act: overview.Activity,
                         window: tuple[int, int], bins: int) -> list[list[float]]:
    lo, hi = window
    width = max(1, -(-(hi - lo) // bins))
    edges = lo + width * np.arange(bins + 1, dtype=np.int64)
    segs = union_segments(act.rows, ["rank"]).sort("rank", "start_ns").collect()
    ranks = sorted(trace.ranks)
    values = np.zeros((len(ranks), bins))
    for i, rank in enumerate(ranks):
        part = segs.filter(pl.col("rank") == rank)
        values[i] = np.diff(overview._busy_before(part["start_ns"].to_numpy(),
                                                  part["end_ns"].to_numpy(), edges)) / width
    if act.kind == "mpi":
        values = 1.0 - values
    return [[round(float(v), 4) for v in row] for row in np.clip(values, 0, 1)]


def test_timeline_per_rank_equals_whole_trace_dlrm(traces_dir: Path) -> None:
    trace = traceatlas.open(str(traces_dir / "param-et_replay" / "dlrm_kineto.tar.gz"))
    act = overview.activity(trace)
    window = overview.span(trace)
    assert len(trace.ranks) == 8
    for bins in (160, 7):
        got = overview.timeline(trace, act, window, bins=bins)
        assert got.values == whole_trace_timeline(trace, act, window, bins)
        assert sum(map(sum, got.values)) > 0
