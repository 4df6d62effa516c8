"""Whole-run overview numbers computed for the report: a binned busy-fraction timeline per
rank, and per-rank useful/comm/idle times when the ``efficiency`` analysis is missing.

Busy time is always a union of intervals (``traceatlas.ops.unions``), so overlapping
kernels on several streams count once. Times in ns.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from traceatlas.analysis.requirements import DEVICE_WORK
from traceatlas.ops.unions import union_ns, union_segments

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.engine.base import Engine
    from traceatlas.model.trace import Trace
    from traceatlas.ops.select import Selection

TIMELINE_BINS = 160
"""Time bins of the timeline overview."""
MAX_TIMELINE_ROWS = 64
"""More ranks than this are grouped (consecutive ranks averaged) into this many rows."""
COMM_CATEGORIES = ("comm_kernel", "memcpy", "memset")
"""Device activity that moves data rather than computes."""


@dataclass
class Activity:
    """What "busy" means for a trace: device work, or host time outside MPI, or any host
    event; ``rows`` is the lazy frame of the intervals that make a rank busy."""

    kind: str
    label: str
    rows: pl.LazyFrame


def activity(trace: Trace) -> Activity:
    """Device activity when the trace has any; else host time outside MPI calls (MPI
    traces); else any host interval."""
    for kind in ("device", "mpi"):
        rows = activity_rows(trace, kind)
        if rows.select("rank").head(1).collect().height:
            return Activity(kind, ACTIVITY_LABELS[kind], rows)
    return Activity("host", ACTIVITY_LABELS["host"], activity_rows(trace, "host"))


ACTIVITY_LABELS = {"device": "device busy (kernels, comm kernels, memcpy, memset)",
                   "mpi": "time inside MPI calls", "host": "host busy (any event)"}
"""``Activity.kind`` -> its label."""


def activity_rows(trace: Trace, kind: str) -> pl.LazyFrame:
    """The intervals (rank, start_ns, end_ns, category) that make a rank busy for
    ``kind``: device work, MPI calls, or any host interval but steps and annotations."""
    import polars as pl

    cat = pl.col("category").cast(pl.String)
    base = trace.intervals.select("rank", "start_ns", "end_ns", cat.alias("category"))
    if kind == "device":
        return base.filter(pl.col("category").is_in(DEVICE_WORK))
    if kind == "mpi":
        return base.filter(pl.col("category") == "mpi")
    return base.filter(~pl.col("category").is_in(("step", "annotation")))


def span(trace: Trace) -> tuple[int, int]:
    """First start and last end over all intervals (ns); (0, 0) for an empty trace."""
    import polars as pl

    row = trace.intervals.select(pl.col("start_ns").min(), pl.col("end_ns").max()).collect()
    lo, hi = row.row(0)
    return (0, 0) if lo is None else (int(lo), int(hi))


@dataclass
class Timeline:
    """Busy fraction per row and time bin: ``values[row][bin]`` in [0, 1]."""

    kind: str
    """What busy means (see ``Activity.label``); for MPI traces the fraction *outside* MPI."""
    start_ns: int
    bin_ns: int
    rows: list[str]
    values: list[list[float]]


def timeline(trace: Trace, act: Activity, window: tuple[int, int],
             bins: int = TIMELINE_BINS, engine: Engine | None = None) -> Timeline:
    """Binned busy fraction of each rank over ``window`` (ns). For MPI traces the value is
    the fraction of the bin spent outside MPI calls (useful time). Each rank is read
    alone; with an ``engine``, in rank batches on its workers (``BusyTask``: only the
    rows of bins travel back), else one rank after the other here."""
    lo, hi = window
    width = max(1, -(-(hi - lo) // bins))
    ranks = sorted(trace.ranks)
    if engine is not None and len(ranks) > 1:
        from traceatlas.analysis.partitioned import DEFAULT_RANKS_PER_TASK, rank_batches

        tasks = [BusyTask(trace.location, trace.selections, batch, act.kind, lo, width, bins)
                 for batch in rank_batches(ranks, DEFAULT_RANKS_PER_TASK)]
        values = np.concatenate(engine.map(busy_fractions, tasks))
    else:
        values = _fractions(act.rows, ranks, lo, width, bins)
    if act.kind == "mpi":
        values = 1.0 - values
    labels = [f"rank {r}" for r in ranks]
    if len(ranks) > MAX_TIMELINE_ROWS:
        groups = np.array_split(np.arange(len(ranks)), MAX_TIMELINE_ROWS)
        values = np.stack([values[g].mean(axis=0) for g in groups])
        labels = [f"ranks {ranks[g[0]]}-{ranks[g[-1]]}" for g in groups]
    kind = "useful (outside MPI calls)" if act.kind == "mpi" else act.label
    return Timeline(kind, lo, width, labels,
                    [[round(float(v), 4) for v in row] for row in np.clip(values, 0, 1)])


@dataclass(frozen=True)
class BusyTask:
    """One batch of the timeline for a worker: where to read (store, the view's
    selections, its ranks), what busy means (``Activity.kind``), the bins (first edge,
    width and count, ns)."""

    store: str
    selections: tuple[Selection, ...]
    ranks: tuple[int, ...]
    kind: str
    lo: int
    width: int
    bins: int


def busy_fractions(task: BusyTask) -> np.ndarray:
    """The mapped function: busy fraction per bin of each rank of the batch (rows in
    ``task.ranks`` order), read on the worker from the batch's parts only."""
    from traceatlas.analysis.partitioned import batch_view

    view = batch_view(task.store, task.selections, task.ranks)
    return _fractions(activity_rows(view, task.kind), list(task.ranks), task.lo,
                      task.width, task.bins)


def _fractions(rows: pl.LazyFrame, ranks: list[int], lo: int, width: int,
               bins: int) -> np.ndarray:
    """Busy fraction per bin of each of ``ranks`` (one rank's rows at a time: memory
    bounded by the largest rank)."""
    import polars as pl

    edges = lo + width * np.arange(bins + 1, dtype=np.int64)
    values = np.zeros((len(ranks), bins))
    for i, rank in enumerate(ranks):
        part = union_segments(rows.filter(pl.col("rank") == rank), ["rank"]) \
            .sort("start_ns").collect()
        starts = part["start_ns"].to_numpy()
        ends = part["end_ns"].to_numpy()
        values[i] = np.diff(_busy_before(starts, ends, edges)) / width
    return values


def _busy_before(starts: np.ndarray, ends: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Busy ns before each time in ``at``, for sorted disjoint segments [starts, ends)."""
    if starts.size == 0:
        return np.zeros(at.size)
    cum = np.concatenate(([0], np.cumsum(ends - starts)))
    k = np.searchsorted(starts, at, side="right")  # segments starting at or before t
    last_end = np.where(k > 0, ends[np.maximum(k - 1, 0)], 0)
    # only the last of them can contain t: drop its part after t
    busy: np.ndarray = cum[k] - np.maximum(0, last_end - at) * (k > 0)
    return busy


@dataclass
class RankTimes:
    """One rank's time split (ns): useful + comm + transfer + idle = the run's span."""

    rank: int
    useful_ns: int
    comm_ns: int
    idle_ns: int
    transfer_ns: int = 0


def rank_times(trace: Trace, act: Activity, window: tuple[int, int]) -> list[RankTimes]:
    """Per-rank useful/comm/transfer/idle without the efficiency analysis. Device traces:
    useful = union of compute kernels, comm = comm kernels not under a compute kernel
    (|kernels or comm kernels| - useful), transfer = memory activity under no kernel
    (busy - |kernels or comm kernels|), idle = span - union of all device activity (busy).
    MPI traces: comm = union of MPI calls, useful = span - comm, idle = 0. Read one
    rank's rows at a time."""
    total = window[1] - window[0]
    out = []
    for row in _rank_unions(trace, act):
        busy = int(row["busy"])
        if act.kind == "device":
            useful, kernels = int(row["compute"]), int(row["kernels"])
            out.append(RankTimes(row["rank"], useful, kernels - useful, max(0, total - busy),
                                 busy - kernels))
        elif act.kind == "mpi":
            out.append(RankTimes(row["rank"], max(0, total - busy), busy, 0))
        else:
            out.append(RankTimes(row["rank"], busy, 0, max(0, total - busy)))
    return out


def _rank_unions(trace: Trace, act: Activity) -> Iterator[dict[str, int]]:
    """Per rank (ascending), one rank's rows at a time: the union (ns) of its activity
    (``busy``) and, for device traces, of its compute kernels (``compute``) and of its
    kernels and communication kernels (``kernels``); 0 where it has none."""
    import polars as pl

    for rank in sorted(trace.ranks):
        rows = act.rows.filter(pl.col("rank") == rank)
        parts = [union_ns(rows, ["rank"], "busy")]
        if act.kind == "device":
            parts += [union_ns(rows.filter(pl.col("category") == "kernel"), ["rank"],
                               "compute"),
                      union_ns(rows.filter(pl.col("category").is_in(("kernel",
                                                                     "comm_kernel"))),
                               ["rank"], "kernels")]
        row = {"rank": rank, "busy": 0, "compute": 0, "kernels": 0}
        for frame in pl.collect_all(parts):
            for name in frame.columns[1:]:
                row[name] = int(frame[name].sum())
        yield row
