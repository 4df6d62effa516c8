"""``idle``: idle time per rank and stream, split into host wait, kernel wait and other
(HTA's idle time breakdown), with statistics of the idle intervals.

Device activity on a stream (kernels, communication kernels, memcpy, memset) is sorted by
start. An idle interval is a gap before an activity: from the furthest end of the earlier
activities on the stream (``prev_end``) to its start, when positive. Its category, in
order (HTA's rule):

- ``host_wait``: the activity's launch (the runtime/driver call with its correlation id,
  earliest start when several) started after ``prev_end``: the host did not enqueue work
  in time.
- ``kernel_wait``: otherwise, when the gap is shorter than ``kernel_wait_ns``: the
  overhead of launching back-to-back work.
- ``other``: the rest (e.g. waiting on an event from another stream).

Main table (ns), one row per rank, device and stream: ``span_ns`` first activity start
to last end on the stream; ``busy_ns`` union of its activity; ``idle_ns`` = span - busy;
``host_wait_ns + kernel_wait_ns + other_ns`` = idle_ns. Without correlation ids on a
rank (no launch can be matched to any of its device activity) the host wait cannot be
told apart: ``host_wait_ns`` is null there and those gaps count as kernel wait or other
(HTA silently counts them so); device activity whose launch is missing while others
match is classified the same way and counted in a note.

Extra table ``causes``: what the launching threads did during the host-wait gaps
(``traceatlas.analysis.idle_causes``), per rank, device, stream, step and cause.

Extra table ``stats``: per rank, device, stream and ``category``: ``count`` of idle
intervals, ``total_ns``, ``mean_ns``, ``p50_ns``, ``p95_ns`` (linear interpolation, as
pandas ``describe``), ``max_ns``.

Differs from HTA (``hta/analyzers/breakdown_analysis.py``,
``_analyze_idle_time_for_stream``: ``idle_interval = ts - prev_end_ts`` with
``prev_end_ts = end_ts.shift(1)``; ``is_host_wait = ts_runtime > prev_end_ts``;
``is_kernel_kernel_delay = ~is_host_wait & (idle_interval < consecutive_kernel_delay)``):

- HTA's previous end is the previous activity's end, ours the furthest end so far, so
  an activity nested in a longer one on the same stream gives no negative gap; the
  categories then add up exactly to span - busy.
- HTA's statistics count every consecutive pair, zero and negative gaps included; ours
  count idle intervals (gap > 0).
- HTA's ``consecutive_kernel_delay=30`` is documented as ns but compared with its
  ``ts``, which is in us for Kineto JSON: 30 us. Our ``kernel_wait_ns`` default is
  30,000 ns, the same threshold.
- HTA analyses one rank (default 0) and stream list per call; we do every rank, device
  and stream of the (selected) trace.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from traceatlas.analysis import idle_causes
from traceatlas.analysis.base import MAX_NS, Param, Result
from traceatlas.analysis.partitioned import concat_counts
from traceatlas.analysis.requirements import DEVICE_WORK
from traceatlas.ops.key_lookup import lookup
from traceatlas.ops.unions import union_ns

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

KEYS = ["rank", "device", "stream"]
CATEGORIES = ("host_wait", "kernel_wait", "other")
LAUNCH_CATEGORIES = ("runtime", "driver")
"""Host calls that launch device work (matched by correlation id within a rank)."""


class Idle:
    """Idle time per rank and stream: host wait, kernel wait, other; interval stats."""

    name = "idle"
    description = "Idle time per rank and stream: host wait, kernel wait, other (HTA)"
    params = (Param("kernel_wait_ns", int, 30_000,
                    "gaps shorter than this (ns) not caused by the host are kernel wait "
                    "(HTA consecutive_kernel_delay; 30 us)", minimum=0, maximum=MAX_NS),)
    requires = ("device",)
    partition = "rank"
    """Per rank: results concatenate (``analysis.partitioned``)."""
    merge = staticmethod(concat_counts)

    def run(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """Per rank/device/stream: span, busy, idle, host/kernel wait, other; ``stats``."""
        import polars as pl

        threshold = int(params["kernel_wait_ns"])
        # One scan of the store, one join of device work to its launches; every query
        # below runs on that in-memory frame.
        device_df, launch_df = pl.collect_all([_device_work(trace), launches(trace)])
        looked = lookup(launch_df["rank"], launch_df["correlation"], launch_df["launch_ns"],
                        device_df["rank"], device_df["correlation"])
        linked_df = (device_df.join(launch_df, on=["rank", "correlation"], how="left")
                     if looked is None else device_df.with_columns(looked))
        device = linked_df.lazy()
        gaps = idle_gaps(trace, threshold, device=device, launch=None, linked=True)
        per_cat = [pl.col("gap_ns").filter(pl.col("category") == c).sum().alias(f"{c}_ns")
                   for c in CATEGORIES]
        # a launch matched: launch_ns not null (launches are unique per rank and
        # correlation, their start never null)
        launch_known = (device.filter(pl.col("launch_ns").is_not_null()).select("rank")
                        .unique().with_columns(matched=pl.lit(True)))
        table = (
            device.group_by(KEYS).agg(
                (pl.col("end_ns").max() - pl.col("start_ns").min()).alias("span_ns"))
            .join(union_ns(device, KEYS, "busy_ns"), on=KEYS, how="left")
            .join(gaps.group_by(KEYS).agg(*per_cat), on=KEYS, how="left")
            .join(launch_known, on="rank", how="left")
            .with_columns(pl.col("host_wait_ns", "kernel_wait_ns", "other_ns").fill_null(0))
            .with_columns(
                idle_ns=pl.col("span_ns") - pl.col("busy_ns"),
                host_wait_ns=pl.when(pl.col("matched")).then(pl.col("host_wait_ns")),
            )
            .select(*KEYS, "span_ns", "busy_ns", "idle_ns", "host_wait_ns",
                    "kernel_wait_ns", "other_ns")
            .sort(KEYS)
        )
        q = pl.col("gap_ns")
        stats = (
            gaps.group_by(*KEYS, "category").agg(
                q.len().alias("count"), q.sum().alias("total_ns"), q.mean().alias("mean_ns"),
                q.quantile(0.5, "linear").alias("p50_ns"),
                q.quantile(0.95, "linear").alias("p95_ns"), q.max().alias("max_ns"))
            .sort(*KEYS, "category")
        )
        unmatched = (device.join(launch_known, on="rank", how="semi")
                     .filter(pl.col("launch_ns").is_null()).select(pl.len()))
        host_gaps = gaps.filter(pl.col("category") == "host_wait")
        table_df, stats_df, unmatched_df, host_df = pl.collect_all(
            [table, stats, unmatched, host_gaps])
        causes = idle_causes.causes(trace, host_df, device_df)
        return Result(table_df, extra={"stats": stats_df, "causes": causes},
                      notes=_notes(table_df, int(unmatched_df.item())))


def _device_work(trace: Trace) -> pl.LazyFrame:
    import polars as pl

    return trace.intervals.filter(pl.col("category").is_in(DEVICE_WORK)).select(
        "rank", pl.col("device").fill_null(-1), pl.col("stream").fill_null(-1),
        "start_ns", "end_ns", "correlation", "step", pl.col("name").cast(pl.String))


def launches(trace: Trace) -> pl.LazyFrame:
    """Earliest start (``launch_ns``) of the host launch calls per (rank, correlation)."""
    import polars as pl

    return (
        trace.intervals.filter(pl.col("category").is_in(LAUNCH_CATEGORIES)
                               & pl.col("correlation").is_not_null())
        .group_by("rank", "correlation").agg(pl.col("start_ns").min().alias("launch_ns"))
    )


def idle_gaps(
    trace: Trace,
    kernel_wait_ns: int,
    *,
    device: pl.LazyFrame | None = None,
    launch: pl.LazyFrame | None = None,
    linked: bool = False,
) -> pl.LazyFrame:
    """One row per idle interval (gap > 0 ns) on a stream: ``rank, device, stream,
    start_ns`` (the activity after the gap), ``prev_end_ns``, ``gap_ns``, ``launch_ns``
    (null without a matched launch), ``category``, ``step`` and ``name`` (of the activity
    after).
    ``device``/``launch``: frames already read (``_device_work``, ``launches``), to avoid
    scanning the store again; ``linked``: ``device`` already has ``launch_ns`` (joined
    to ``launches``), ``launch`` is then not used."""
    import polars as pl

    work = device if device is not None else _device_work(trace)
    if not linked:
        work = work.join(launch if launch is not None else launches(trace),
                         on=["rank", "correlation"], how="left")
    ordered = (
        work
        .sort(*KEYS, "start_ns", "end_ns")
        .with_columns(prev_end_ns=pl.col("end_ns").cum_max().shift(1).over(KEYS))
        .with_columns(gap_ns=pl.col("start_ns") - pl.col("prev_end_ns"))
        .filter(pl.col("gap_ns") > 0)
    )
    category = (
        pl.when(pl.col("launch_ns") > pl.col("prev_end_ns")).then(pl.lit("host_wait"))
        .when(pl.col("gap_ns") < kernel_wait_ns).then(pl.lit("kernel_wait"))
        .otherwise(pl.lit("other"))
    )
    return ordered.select(*KEYS, "start_ns", "prev_end_ns", "gap_ns", "launch_ns",
                          category.alias("category"), "step", "name")


def _notes(table: pl.DataFrame, unmatched: int) -> list[str]:
    import polars as pl

    notes = []
    blind = table.filter(pl.col("host_wait_ns").is_null())["rank"].unique().sort().to_list()
    if blind:
        notes.append(f"rank(s) {', '.join(map(str, blind))}: no correlation ids linking "
                     "launches to device activity, host wait unknown (null); those gaps "
                     "count as kernel wait or other")
    if unmatched:
        notes.append(f"{unmatched} device activities have no matched launch; the gaps "
                     "before them count as kernel wait or other")
    return notes
