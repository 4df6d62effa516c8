"""Frozen copy of ``traceatlas.analysis.idle`` at commit 236d108, before its speed work:
the oracle the current analysis is tested equal to. Not used by the package;
never edit it (definitions: the module docstring of ``traceatlas.analysis.idle``)."""


from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from traceatlas.analysis import idle_causes
from traceatlas.analysis.base import MAX_NS, Param, Result
from traceatlas.analysis.partitioned import concat_counts
from traceatlas.analysis.requirements import DEVICE_WORK
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
        # One scan of the store; every query below runs on these two in-memory frames.
        device_df, launch_df = pl.collect_all([_device_work(trace), launches(trace)])
        device, launch = device_df.lazy(), launch_df.lazy()
        gaps = idle_gaps(trace, threshold, device=device, launch=launch)
        per_cat = [pl.col("gap_ns").filter(pl.col("category") == c).sum().alias(f"{c}_ns")
                   for c in CATEGORIES]
        linked = device.join(launch, on=["rank", "correlation"], how="semi")
        launch_known = linked.select("rank").unique().with_columns(matched=pl.lit(True))
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
                     .join(launch, on=["rank", "correlation"], how="anti")
                     .select(pl.len()))
        host_gaps = gaps.filter(pl.col("category") == "host_wait")
        table_df, stats_df, unmatched_df, host_df = pl.collect_all(
            [table, stats, unmatched, host_gaps])
        causes = idle_causes.causes(trace, host_df, device_df)
        return Result(table_df, extra={"stats": stats_df, "causes": causes},
                      notes=_notes(table_df, int(unmatched_df.item())))


def _device_work(trace: Trace) -> pl.LazyFrame:
    import polars as pl

    cat = pl.col("category").cast(pl.String)
    return trace.intervals.filter(cat.is_in(DEVICE_WORK)).select(
        "rank", pl.col("device").fill_null(-1), pl.col("stream").fill_null(-1),
        "start_ns", "end_ns", "correlation", "step", pl.col("name").cast(pl.String))


def launches(trace: Trace) -> pl.LazyFrame:
    """Earliest start (``launch_ns``) of the host launch calls per (rank, correlation)."""
    import polars as pl

    cat = pl.col("category").cast(pl.String)
    return (
        trace.intervals.filter(cat.is_in(LAUNCH_CATEGORIES)
                               & pl.col("correlation").is_not_null())
        .group_by("rank", "correlation").agg(pl.col("start_ns").min().alias("launch_ns"))
    )


def idle_gaps(
    trace: Trace,
    kernel_wait_ns: int,
    *,
    device: pl.LazyFrame | None = None,
    launch: pl.LazyFrame | None = None,
) -> pl.LazyFrame:
    """One row per idle interval (gap > 0 ns) on a stream: ``rank, device, stream,
    start_ns`` (the activity after the gap), ``prev_end_ns``, ``gap_ns``, ``launch_ns``
    (null without a matched launch), ``category``, ``step`` and ``name`` (of the activity
    after).
    ``device``/``launch``: frames already read (``_device_work``, ``launches``), to avoid
    scanning the store again."""
    import polars as pl

    ordered = (
        (device if device is not None else _device_work(trace))
        .join(launch if launch is not None else launches(trace),
              on=["rank", "correlation"], how="left")
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
