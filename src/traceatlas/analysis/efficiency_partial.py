"""The map step of ``efficiency``: what one batch of ranks sends for the exact merge.

Everything here is per (rank, thread) or per (rank, device), so a batch computes it from
its own ranks' rows; the global figures (means and maxima over ranks, T, the replay) are
``efficiency``'s merge. Tables (integer ns):

- ``threads``: rank, track_id, useful_ns, gpu_ns (host-thread tracks of the batch's
  ranks, sorted; ``gpu_ns`` = union of runtime/driver/sync calls in the region);
- ``ranks``: rank, useful_ns (time at least one thread is useful), mpi_ns (MPI union),
  runtime_ns (the rank's T_p) for each rank with a host thread;
- ``devices``: rank, device, useful_ns, kernels_ns, active_ns for every (rank, device)
  with device work anywhere in the selection (0 when idle in the region);
- ``mpi_calls`` / ``messages``: the ideal-network replay's inputs (the batch's MPI calls
  on host threads in the region, its messages), only when the run has MPI calls and
  one window;
- flags: ``state`` (Paraver states anywhere), ``openmp`` and ``mpi`` (intervals of those
  categories in the region).

Definitions: ``traceatlas.analysis.efficiency``'s docstring.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from traceatlas.analysis.efficiency_region import Region
from traceatlas.analysis.requirements import DEVICE_WORK
from traceatlas.ops.host_activity import HOST_COLLECTIVE
from traceatlas.ops.unions import union_segments

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

OMP_SYNC = r"(?i)(barrier|wait|lock|flush|taskgroup)"
"""OpenMP constructs counted as runtime time (not useful)."""
SYNC_CALL = r"(?i)synchronize"
"""Runtime/driver calls counted as blocking (not useful)."""
RUNNING = '"state": 1}'
"""Paraver state Running in the reader's ``args`` text (``{"cpu": c, "state": 1}``)."""
KEYS = ["rank", "track_id"]


def clip(frame: pl.LazyFrame, region: Region) -> pl.LazyFrame:
    """``frame``'s intervals (start_ns, end_ns, rank, ...) cut to the region's segments;
    empty pieces dropped."""
    import polars as pl

    if region.window is not None:
        lo, hi = region.window
        return frame.with_columns(pl.col("start_ns").clip(lo, hi),
                                  pl.col("end_ns").clip(lo, hi)).filter(
            pl.col("end_ns") > pl.col("start_ns"))
    seg = region.segments.lazy().select(
        pl.col("rank").cast(pl.Int32), pl.col("start_ns").alias("_lo"),
        pl.col("end_ns").alias("_hi"))
    return (
        frame.with_columns(pl.col("rank").cast(pl.Int32)).join(seg, on="rank")
        .filter((pl.col("start_ns") < pl.col("_hi")) & (pl.col("end_ns") > pl.col("_lo")))
        .with_columns(pl.max_horizontal("start_ns", "_lo").alias("start_ns"),
                      pl.min_horizontal("end_ns", "_hi").alias("end_ns"))
        .drop("_lo", "_hi")
    )


def lengths(frame: pl.LazyFrame, keys: list[str], region: Region, name: str
            ) -> pl.LazyFrame:
    """Union length per group of ``frame`` inside the region (union, then clip)."""
    import polars as pl

    segments = clip(union_segments(frame, keys), region)
    return segments.group_by(keys).agg((pl.col("end_ns") - pl.col("start_ns")).sum()
                                       .alias(name))


def rank_runtime(region: Region) -> dict[int, int]:
    """Rank -> the length of its segments (T_p, ns); ranks without one are absent."""
    import polars as pl

    frame = region.segments.group_by("rank").agg(
        (pl.col("end_ns") - pl.col("start_ns")).sum().alias("t"))
    return {int(r): int(t) for r, t in frame.iter_rows()}


def has_category(view: Trace, category: str) -> bool:
    """Whether ``view`` has any interval of ``category``."""
    import polars as pl

    return bool(view.intervals.filter(pl.col("category") == category)
                .select("rank").head(1).collect().height)


def host_tracks(trace: Trace) -> pl.LazyFrame:
    """(rank, track_id) of the host-thread tracks, Int32."""
    import polars as pl

    return trace.tracks.filter(pl.col("kind").cast(pl.String) == "host_thread") \
        .select(pl.col("rank").cast(pl.Int32), pl.col("track_id").cast(pl.Int32))


def host(trace: Trace, view: Trace, region: Region
         ) -> tuple[pl.DataFrame, pl.DataFrame, bool]:
    """(threads, ranks, state) tables of the module docstring for ``trace``'s ranks;
    ``view`` is ``trace`` cut to the region's window (or ``trace``)."""
    import polars as pl

    h_tracks = host_tracks(trace)
    threads = (trace.intervals.select(pl.col("rank").cast(pl.Int32),
                                      pl.col("track_id").cast(pl.Int32)).unique()
               .join(h_tracks, on=KEYS, how="semi").collect())
    cat = pl.col("category").cast(pl.String)
    name = pl.col("name").cast(pl.String)
    state_ranks = set(trace.intervals.filter(pl.col("category") == "state").select("rank").unique()
                      .collect()["rank"].to_list())
    if threads.height == 0:
        return empty_threads(), empty_ranks(), bool(state_ranks)
    # args (JSON text, the widest column) is only needed to find Paraver's Running state.
    extra = [pl.col("args")] if state_ranks else []
    iv = (view.intervals.with_columns(pl.col("rank").cast(pl.Int32),
                                      pl.col("track_id").cast(pl.Int32))
          .join(h_tracks, on=KEYS, how="semi")
          .select(*KEYS, "start_ns", "end_ns", cat.alias("cat"), name.alias("name"), *extra)
          .collect().lazy())  # read once: every query below reuses it
    has_state = pl.col("rank").is_in(list(state_ranks))
    covered = iv.filter(pl.when(has_state).then(
        (pl.col("cat") == "state") & pl.col("args").str.contains(RUNNING, literal=True))
        .otherwise(pl.col("cat") != "state")) if state_ranks else iv.filter(
        pl.col("cat") != "state")
    host_comm = (pl.col("cat") == "mpi") | (
        pl.col("cat").is_in(("annotation", "cpu_op", "python", "other"))
        & pl.col("name").str.contains(HOST_COLLECTIVE))
    runtime = (host_comm | (pl.col("cat") == "sync")
               | (pl.col("cat").is_in(("runtime", "driver")) & pl.col("name").str.contains(
                   SYNC_CALL))
               | ((pl.col("cat") == "openmp") & pl.col("name").str.contains(OMP_SYNC)))
    not_useful = iv.filter(~has_state & (pl.col("cat") != "state") & runtime)
    c_seg = clip(union_segments(covered, KEYS), region)
    n_seg = clip(union_segments(not_useful, KEYS), region)
    # Threads useful at once per rank: +1/-1 over covered segments, -1/+1 over runtime
    # segments (runtime time is inside the thread's covered time).
    # A collective run by a helper thread (gloo) blocks the whole process: while it runs,
    # no thread of the rank counts as useful (b > 0), as MPI time on a one-thread rank.
    b_seg = clip(union_segments(iv.filter(host_comm & (pl.col("cat") != "mpi")), ["rank"]),
                 region)
    zero = pl.lit(0)
    events = pl.concat([
        c_seg.select("rank", pl.col("start_ns").alias("ts"), pl.lit(1).alias("d"),
                     zero.alias("b")),
        c_seg.select("rank", pl.col("end_ns").alias("ts"), pl.lit(-1).alias("d"),
                     zero.alias("b")),
        n_seg.select("rank", pl.col("start_ns").alias("ts"), pl.lit(-1).alias("d"),
                     zero.alias("b")),
        n_seg.select("rank", pl.col("end_ns").alias("ts"), pl.lit(1).alias("d"),
                     zero.alias("b")),
        b_seg.select("rank", pl.col("start_ns").alias("ts"), zero.alias("d"),
                     pl.lit(1).alias("b")),
        b_seg.select("rank", pl.col("end_ns").alias("ts"), zero.alias("d"),
                     pl.lit(-1).alias("b")),
    ])
    proc = events.map_batches(useful_by_rank,
                              schema={"rank": pl.Int32, "useful_ns": pl.Int64})

    def total(frame: pl.LazyFrame, name: str) -> pl.LazyFrame:
        return frame.group_by(KEYS).agg((pl.col("end_ns") - pl.col("start_ns")).sum()
                                        .alias(name))

    mpi_iv = iv.filter(host_comm)
    gpu_iv = iv.filter(pl.col("cat").is_in(("runtime", "driver", "sync")))
    thread = threads.lazy()
    for part in (total(c_seg, "covered_ns"), total(n_seg, "runtime_ns"),
                 lengths(mpi_iv, KEYS, region, "mpi_ns"),
                 lengths(gpu_iv, KEYS, region, "gpu_ns")):
        thread = thread.join(part, on=KEYS, how="left")
    per_t_q = (thread.with_columns(pl.exclude(KEYS).fill_null(0))
               .with_columns(useful_ns=pl.col("covered_ns") - pl.col("runtime_ns"))
               .sort(KEYS))
    # One collect_all: the segment unions are shared by the three queries (Polars'
    # common-subplan elimination) instead of being computed once per query.
    per_t, proc_df, mpi_df = pl.collect_all(
        [per_t_q, proc, lengths(mpi_iv, ["rank"], region, "m")])
    ranks = sorted(set(per_t["rank"].to_list()))
    proc_u = dict(proc_df.iter_rows())
    rank_mpi = dict(mpi_df.iter_rows())
    t_rank = rank_runtime(region)
    T = region.runtime_ns
    per_rank = pl.DataFrame({
        "rank": ranks, "useful_ns": [int(proc_u.get(r, 0)) for r in ranks],
        "mpi_ns": [int(rank_mpi.get(r, 0)) for r in ranks],
        "runtime_ns": [t_rank.get(r, T) for r in ranks]}, schema=empty_ranks().schema)
    return (per_t.select(*KEYS, pl.col("useful_ns").cast(pl.Int64),
                         pl.col("gpu_ns").cast(pl.Int64)), per_rank, bool(state_ranks))


def empty_threads() -> pl.DataFrame:
    """The ``threads`` table with no row."""
    import polars as pl

    return pl.DataFrame(schema={"rank": pl.Int32, "track_id": pl.Int32,
                                "useful_ns": pl.Int64, "gpu_ns": pl.Int64})


def empty_ranks() -> pl.DataFrame:
    """The ``ranks`` table with no row."""
    import polars as pl

    return pl.DataFrame(schema={"rank": pl.Int32, "useful_ns": pl.Int64, "mpi_ns": pl.Int64,
                                "runtime_ns": pl.Int64})


def useful_by_rank(events: pl.DataFrame) -> pl.DataFrame:
    """Per rank (columns rank, useful_ns), the ns during which the thread level (running
    sum of ``d``) is > 0 and no helper-thread collective runs (running sum of ``b`` <= 0),
    from the +-1 events (rank, ts, d, b): one sort by (rank, ts). Each rank's ``d`` and
    ``b`` sum to 0, so one running sum over all ranks is each rank's own; events at the
    same ts add no time between them, so the level after the last of them counts."""
    import numpy as np
    import polars as pl

    rank = events["rank"].to_numpy().astype(np.int64, copy=False)
    ts = events["ts"].to_numpy().astype(np.int64, copy=False)
    order = np.lexsort((ts, rank))
    r, t = rank[order], ts[order]
    level = np.cumsum(events["d"].to_numpy()[order], dtype=np.int64)
    blocked = np.cumsum(events["b"].to_numpy()[order], dtype=np.int64)
    ok = (r[1:] == r[:-1]) & (level[:-1] > 0) & (blocked[:-1] <= 0)
    gap, rr = (t[1:] - t[:-1])[ok], r[:-1][ok]
    first = np.flatnonzero(np.r_[True, rr[1:] != rr[:-1]]) if len(rr) else np.zeros(0, int)
    return pl.DataFrame({
        "rank": pl.Series("rank", rr[first], dtype=pl.Int32),
        "useful_ns": pl.Series("useful_ns", np.add.reduceat(gap, first) if len(first)
                               else gap, dtype=pl.Int64)})


def replay_inputs(trace: Trace, view: Trace, region: Region
                  ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(mpi_calls, messages): the batch's MPI calls on host threads in ``view`` (rank,
    start_ns, end_ns, name, collective, process_group) and the messages ``trace`` reads
    (the batch's own parts under a message partition), cut to the window unless the
    region is the whole run (as ``view.messages``)."""
    import polars as pl

    from traceatlas.ops.select import Selection

    mpi = (view.intervals.filter(pl.col("category") == "mpi")
           .with_columns(pl.col("rank").cast(pl.Int32), pl.col("track_id").cast(pl.Int32))
           .join(host_tracks(trace), on=KEYS, how="semi")
           .select("rank", "start_ns", "end_ns", pl.col("name").cast(pl.String),
                   pl.col("collective").cast(pl.String),
                   pl.col("process_group").cast(pl.String))
           .collect())
    messages = trace.messages
    if region.window is not None and region.scope != "run":
        messages = Selection(window=region.window).apply(messages, "messages")
    return mpi, messages.select("src_rank", "dst_rank", "send_start_ns",
                                "recv_end_ns").collect()


def devices(trace: Trace, view: Trace, region: Region, nccl_useful: bool) -> pl.DataFrame:
    """The ``devices`` table (B.2 inputs) of ``trace``'s ranks, sorted by (rank, device)."""
    import polars as pl

    keys = ["rank", "device"]
    cat = pl.col("category").cast(pl.String)
    found = (trace.intervals.filter(pl.col("category").is_in(DEVICE_WORK))
             .select(pl.col("rank").cast(pl.Int32),
                     pl.col("device").fill_null(-1).cast(pl.Int32)).unique()
             .sort(keys).collect())
    work = view.intervals.filter(pl.col("category").is_in(DEVICE_WORK)).select(
        pl.col("rank").cast(pl.Int32), pl.col("device").fill_null(-1).cast(pl.Int32),
        cat.alias("cat"), "start_ns", "end_ns")
    useful_cats = ("kernel", "comm_kernel") if nccl_useful else ("kernel",)
    table = found.lazy()
    if found.height:
        for part in (lengths(work.filter(pl.col("cat").is_in(useful_cats)), keys, region,
                             "useful_ns"),
                     lengths(work.filter(pl.col("cat").is_in(("kernel", "comm_kernel"))),
                             keys, region, "kernels_ns"),
                     lengths(work, keys, region, "active_ns")):
            table = table.join(part, on=keys, how="left")
    else:
        table = table.with_columns(useful_ns=None, kernels_ns=None, active_ns=None)
    return table.with_columns(pl.col("useful_ns", "kernels_ns", "active_ns").fill_null(0)
                              .cast(pl.Int64)).sort(keys).collect()
