"""``queue``: per stream launch queue length over time, time blocked on a full queue, and
memcpy/memset bandwidth by kind (HTA's queue length and memory bandwidth time series).

Queue length of a stream: device activities (kernels, communication kernels, memcpy,
memset) launched and not yet finished: +1 at the start of the launch call (runtime or
driver call with the activity's correlation id, earliest when several), -1 at the
activity's end (``until=start``: at its start, HTA's convention). A CUDA graph launch (one
launch call, several activities with its correlation id) is one entry per stream it runs
on, from the launch to the end of its last activity there (``until=start``: the start of
its first), and counts as one launch. A launch stamped after the activity's start (clock skew) is
taken at that start, so the length is never negative and an activity is in its queue at
least while it runs. Activities without a matched launch
are left out (counted in a note), as in HTA.

Extra table ``series``: ``rank, device, stream, ts_ns, queue_length``, one row per change;
the length holds until the next row of the stream and is 0 after its last row.

Main table (ns), per rank, device and stream, over the series' span (first enqueue to
last dequeue): ``launches`` activities counted; ``span_ns``; ``max_queue_length``;
``mean_queue_length`` time-weighted mean; ``empty_ns`` time with length 0; ``full_ns``
time blocked on a full queue (length >= ``max_queue``); ``full_pct`` = full_ns / span_ns
* 100.

Extra table ``bandwidth``: per rank and ``kind`` (memcpy_kind, e.g. HtoD/DtoH/DtoD,
"unknown" when the source has none, or "memset"): ``count``, ``bytes`` (sum),
``time_ns`` (union of the kind's intervals), ``gbps`` = bytes / time_ns (bytes per ns =
GB/s; the aggregate rate while such copies run). Extra table ``bandwidth_series``: one
row per event: ``rank, kind, start_ns, end_ns, bytes, gbps`` (bytes / dur; null when
dur is 0).

Differs from HTA (``hta/analyzers/trace_counters.py``):
``_get_queue_length_time_series_for_rank`` decrements at the kernel's ``ts`` (its
start), so it counts launched, not yet started work; our default counts until the end
(``until=start`` gives HTA's). HTA counts only launches named cudaLaunchKernel(ExC),
cuLaunchKernel, cudaMemcpyAsync, cudaMemsetAsync (and hip/MTIA ones); we take any
runtime/driver call with the correlation id (e.g. cudaGraphLaunch, cudaMemcpy).
``get_queue_length_summary`` is pandas ``describe`` over change points (unweighted); our
mean is time-weighted. ``get_time_spent_blocked_on_full_queue`` (default
``CUDA_MAX_LAUNCH_QUEUE_PER_STREAM = 1024``) keeps one stream per rank (a dict keyed by
rank) and divides by the trace duration; we give every stream and divide by the stream's
span. HTA's bandwidth series sums the Kineto ``memory bandwidth (GB/s)`` arg of running
copies per kind (zero-duration copies rounded to 1 us); ours is bytes / duration from the
canonical ``bytes`` column, per event, and the summary is bytes over the union time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from traceatlas.analysis.base import MAX_COUNT, Param, Result
from traceatlas.analysis.idle import launches
from traceatlas.analysis.partitioned import concat_counts
from traceatlas.analysis.requirements import DEVICE_WORK
from traceatlas.ops.unions import union_ns

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

KEYS = ["rank", "device", "stream"]
CUDA_MAX_LAUNCH_QUEUE_PER_STREAM = 1024
"""HTA's default queue capacity (hta/common/constants.py)."""


class Queue:
    """Launch queue length per stream, time blocked on a full queue, memory bandwidth."""

    name = "queue"
    description = ("Launch queue length per stream (series and summary), time on a full "
                   "queue; memcpy/memset bandwidth by kind")
    params = (
        Param("max_queue", int, CUDA_MAX_LAUNCH_QUEUE_PER_STREAM,
              "queue length counted as full (HTA: 1024, the CUDA launch queue)",
              minimum=1, maximum=MAX_COUNT),
        Param("until", str, "end", "an activity leaves the queue at its end (default) or "
              "start (HTA)", ("end", "start")),
    )
    requires = ("device", "correlation")
    partition = "rank"
    """Per rank: results concatenate (``analysis.partitioned``)."""
    merge = staticmethod(concat_counts)

    def run(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """Main: queue summary per stream; extras series, bandwidth, bandwidth_series."""
        import polars as pl

        cat = pl.col("category")  # compared as stored (Categorical): no cast per row
        device = trace.intervals.filter(cat.is_in(DEVICE_WORK)).select(
            "rank", pl.col("device").fill_null(-1), pl.col("stream").fill_null(-1),
            "start_ns", "end_ns", "correlation")
        leave = pl.col("end_ns" if params["until"] == "end" else "start_ns")
        # Activities of one launch call (a graph launch) on one stream: one queue entry.
        linked = (device.join(launches(trace), on=["rank", "correlation"], how="inner")
                  .group_by(*KEYS, "correlation")
                  .agg(pl.min_horizontal("launch_ns", "start_ns").min().alias("enter"),
                       (leave.max() if params["until"] == "end" else leave.min())
                       .alias("leave"))
                  .select(*KEYS, "enter", "leave"))
        series = queue_series(linked)
        table = queue_summary(series, linked, int(params["max_queue"]))
        unmatched = device.join(launches(trace), on=["rank", "correlation"], how="anti")
        bw_series = bandwidth_series(trace)
        bw = bandwidth_summary(bw_series)
        table_df, series_df, bw_df, bw_series_df, unmatched_df = pl.collect_all(
            [table, series, bw, bw_series, unmatched.select(pl.len())])
        notes = []
        if unmatched_df.item():
            notes.append(f"{unmatched_df.item()} device activities without a matched "
                         "launch are left out of the queue")
        return Result(table_df, extra={"series": series_df, "bandwidth": bw_df,
                                       "bandwidth_series": bw_series_df}, notes=notes)


def queue_series(linked: pl.LazyFrame) -> pl.LazyFrame:
    """Queue length per stream at each change: +1 at ``enter``, -1 at ``leave``."""
    import polars as pl

    events = pl.concat([
        linked.select(*KEYS, pl.col("enter").alias("ts_ns"), pl.lit(1, pl.Int64).alias("d")),
        linked.select(*KEYS, pl.col("leave").alias("ts_ns"), pl.lit(-1, pl.Int64).alias("d")),
    ])
    return (
        events.group_by(*KEYS, "ts_ns").agg(pl.col("d").sum())
        .filter(pl.col("d") != 0)
        .sort(*KEYS, "ts_ns")
        .select(*KEYS, "ts_ns", pl.col("d").cum_sum().over(KEYS).alias("queue_length"))
    )


def queue_summary(series: pl.LazyFrame, linked: pl.LazyFrame, max_queue: int
                  ) -> pl.LazyFrame:
    """Per stream: launches, span, max, time-weighted mean, empty and full time."""
    import polars as pl

    q = pl.col("queue_length")
    dur = pl.col("dur_ns")
    timed = series.with_columns(
        dur_ns=(pl.col("ts_ns").shift(-1).over(KEYS) - pl.col("ts_ns")).fill_null(0))
    return (
        timed.group_by(KEYS).agg(
            dur.sum().alias("span_ns"),
            q.max().alias("max_queue_length"),
            ((q * dur).sum() / dur.sum()).alias("mean_queue_length"),
            dur.filter(q == 0).sum().alias("empty_ns"),
            dur.filter(q >= max_queue).sum().alias("full_ns"))
        .join(linked.group_by(KEYS).agg(pl.len().cast(pl.Int64).alias("launches")),
              on=KEYS, how="left")
        .with_columns(full_pct=pl.when(pl.col("span_ns") > 0).then(
            pl.col("full_ns") * 100.0 / pl.col("span_ns")))
        .select(*KEYS, "launches", "span_ns", "max_queue_length", "mean_queue_length",
                "empty_ns", "full_ns", "full_pct")
        .sort(KEYS)
    )


def bandwidth_series(trace: Trace) -> pl.LazyFrame:
    """memcpy/memset events: ``rank, kind, start_ns, end_ns, bytes, gbps``."""
    import polars as pl

    cat = pl.col("category")  # compared as stored (Categorical): no cast per row
    kind = (pl.when(cat == "memset").then(pl.lit("memset"))
            .otherwise(pl.col("memcpy_kind").cast(pl.String).fill_null("unknown")))
    dur = pl.col("end_ns") - pl.col("start_ns")
    return (
        trace.intervals.filter(cat.is_in(("memcpy", "memset")))
        .select("rank", kind.alias("kind"), "start_ns", "end_ns", "bytes",
                pl.when(dur > 0).then(pl.col("bytes") / dur).alias("gbps"))
        .sort("rank", "kind", "start_ns")
    )


def bandwidth_summary(series: pl.LazyFrame) -> pl.LazyFrame:
    """Per rank and kind: count, bytes, union time (ns), bytes / union time (GB/s)."""
    import polars as pl

    keys = ["rank", "kind"]
    return (
        series.group_by(keys).agg(pl.len().cast(pl.Int64).alias("count"),
                                  pl.col("bytes").sum())
        .join(union_ns(series, keys, "time_ns"), on=keys, how="left")
        .with_columns(gbps=pl.when(pl.col("time_ns") > 0).then(
            pl.col("bytes") / pl.col("time_ns")))
        .sort(keys)
    )
