"""Frozen copy of ``traceatlas.analysis.syncs`` at commit 236d108, before its speed work:
the oracle the current analysis is tested equal to. Not used by the package;
never edit it (definitions: the module docstring of ``traceatlas.analysis.syncs``).
``idle_after`` (the cost split, untouched by the speed work) is the live one, so a tie
rule is defined in one place."""


from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from traceatlas.analysis.base import Result
from traceatlas.analysis.partitioned import concat_counts
from traceatlas.analysis.requirements import DEVICE_WORK
from traceatlas.analysis.syncs import idle_after  # unchanged by the speed-up: shared
from traceatlas.ops.unions import union_segments

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

CALLS = ("runtime", "driver")
"""Categories of the host calls that can synchronise."""
SYNC_RE = r"(?i)synchronize"
"""Blocking synchronisation calls."""
MEMCPY_RE = r"(?i)^(cuda|hip|cu)memcpy"
ASYNC_RE = r"(?i)async"
PAGEABLE_RE = r"(?i)pageable"
"""A device copy to or from pageable host memory (Kineto: ``Memcpy DtoH (Device ->
Pageable)``)."""
COLLECTIVE_RE = (r"(?i)^(gloo|nccl|rccl|mpi|ucc|xccl|hccl|c10d)[:_]|^record_param_comms$"
                 r"|^ProcessGroup|^nccl(AllReduce|Broadcast|Reduce|AllGather|Send|Recv)")
"""Host ranges of a collective (PyTorch's process-group ops, NCCL's NVTX ranges)."""
FRAMEWORK_RE = (r"^(DistributedDataParallel|FullyShardedDataParallel)\.|^torch\.distributed"
                r"|^Optimizer\.|^ddp\.|^fsdp\.")
"""PyTorch machinery: a sync whose innermost enclosing op/annotation matches is its own."""
NOT_USER_ANNOTATION_RE = (r"^ProfilerStep\s*#|^enumerate\(DataLoader\)|^## .* ##$|"
                          + FRAMEWORK_RE + "|" + COLLECTIVE_RE.removeprefix("(?i)"))
"""Annotations PyTorch writes itself: never named as the user's annotation."""
WRAPPER_OPS = ("aten::to", "aten::cpu", "aten::cuda", "aten::type_as", "aten::contiguous")
"""Dispatch-only wrappers skipped when naming the op (``aten::to`` -> ``aten::_to_copy``)."""
LIBRARY_FRAME_RE = (r"(^|/)(site-packages|dist-packages)/|^(torch|torchvision|numpy)/"
                    r"|^<built-in|^<frozen|^nn\.Module:|^torch\.|/lib/python3[.\d]*/"
                    r"|^(threading|contextlib|functools|runpy|abc|typing)\.py")
"""Python frames (Kineto ``python_function`` names) that are not the user's code."""
ANCESTORS = ("cpu_op", "annotation", "python", "nvtx", "step", "region")
"""Host interval categories read as the enclosing context of a sync."""
SOURCES = ("user", "framework", "collective")

SYNC_COLUMNS = ("rank", "step", "track_id", "start_ns", "end_ns", "dur_ns", "call", "kind",
                "pageable", "source", "inside", "op", "ops", "annotation", "call_site",
                "idle_after_ns")
"""Columns of the main table (and of ``sync_events``)."""
INTERVAL_COLUMNS = ("rank", "track_id", "step", "start_ns", "end_ns", "call", "kind",
                    "pageable", "source", "inside", "op", "annotation", "call_site")
"""Columns of ``sync_intervals``."""


class Syncs:
    """Host-device synchronisations: count per step, origin and following GPU idle."""

    name = "syncs"
    description = ("Host-device synchronisations per rank and step: the op, annotation and "
                   "call site behind each, user vs framework/collective, GPU idle after")
    params = ()
    requires = ("device",)
    partition = "rank"
    """Per rank: results concatenate (``analysis.partitioned``)."""
    merge = staticmethod(concat_counts)

    def run(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """One row per sync; ``per_step`` and ``summary`` tables."""
        table = sync_events(trace)
        per_step = _per_step(trace, table)
        summary = _summary(table, per_step)
        notes = ["idle_after_ns: GPU idle from the sync's end to the rank's next device "
                 "activity; syncs in one idle gap split it"]
        if table.height == 0:
            notes.append("no synchronisation calls (runtime/driver *Synchronize*, "
                         "synchronous or pageable copies) in this trace")
        return Result(table, extra={"per_step": per_step, "summary": summary}, notes=notes)


def sync_intervals(trace: Trace) -> pl.DataFrame:
    """The host intervals (ns) during which a thread was blocked in a sync, with their
    origin: columns ``INTERVAL_COLUMNS`` (``source`` user/framework/collective, ``kind``
    synchronize/sync_copy/pageable_copy), sorted by rank and start. Stable API: the
    ``idle`` analysis reuses it to classify idle gaps as host synchronisation."""
    return _classified(trace).select(INTERVAL_COLUMNS).sort("rank", "start_ns", "end_ns")


def sync_events(trace: Trace) -> pl.DataFrame:
    """``sync_intervals`` plus ``dur_ns``, ``ops`` and ``idle_after_ns`` (the GPU idle
    following each sync, ns): the ``syncs`` main table, columns ``SYNC_COLUMNS``."""
    import polars as pl

    events = _classified(trace)
    device = trace.intervals.filter(pl.col("category").cast(pl.String).is_in(DEVICE_WORK))
    busy = union_segments(device.select("rank", "start_ns", "end_ns"), ["rank"]).collect()
    costed = idle_after(events, busy)
    return (costed.with_columns(dur_ns=pl.col("end_ns") - pl.col("start_ns"))
            .select(SYNC_COLUMNS).sort("rank", "start_ns", "end_ns"))


def _candidates(trace: Trace) -> pl.DataFrame:
    """Sync calls before deduplication: host calls with ``kind`` and ``pageable``."""
    import polars as pl

    cat = pl.col("category").cast(pl.String)
    name = pl.col("name").cast(pl.String)
    calls = trace.intervals.filter(cat.is_in(CALLS) & (
        name.str.contains(SYNC_RE) | name.str.contains(MEMCPY_RE)))
    copies = (trace.intervals.filter((cat == "memcpy") & pl.col("correlation").is_not_null())
              .filter(name.str.contains(PAGEABLE_RE)
                      | pl.col("args").fill_null("").str.contains(PAGEABLE_RE))
              .select("rank", "correlation").unique().with_columns(pageable=pl.lit(True)))
    kind = (pl.when(name.str.contains(SYNC_RE)).then(pl.lit("synchronize"))
            .when(~name.str.contains(ASYNC_RE)).then(pl.lit("sync_copy"))
            .otherwise(pl.lit("pageable_copy")))
    return (
        calls.join(copies, on=["rank", "correlation"], how="left")
        .with_columns(pl.col("pageable").fill_null(False), kind.alias("kind"))
        .filter((pl.col("kind") != "pageable_copy") | pl.col("pageable"))
        .select("rank", "track_id", "step", "start_ns", "end_ns", "depth",
                name.alias("call"), "kind", "pageable")
        .collect()
    )


def _ancestors(trace: Trace, calls: pl.DataFrame) -> pl.DataFrame:
    """Per call (``_id``): the host intervals enclosing it on its track, ``depth`` order.

    One as-of lookup per nesting level at once: each call asks, for every depth above
    its own, for the last interval at that depth starting at or before it; those ending
    at or after the call's end enclose it."""
    import polars as pl

    cat = pl.col("category").cast(pl.String)
    tracks = calls.select("rank", "track_id").unique()
    host = (trace.intervals.filter(cat.is_in(ANCESTORS))
            .join(tracks.lazy(), on=["rank", "track_id"], how="semi")
            .select("rank", "track_id", "depth", pl.col("start_ns").alias("_as"),
                    pl.col("end_ns").alias("_ae"), pl.col("name").cast(pl.String).alias("aname"),
                    cat.alias("acat"))
            .sort("_as").collect())
    asks = (calls.select("_id", "rank", "track_id", "start_ns", "end_ns",
                         pl.int_ranges(0, pl.col("depth")).alias("depth"))
            .explode("depth").drop_nulls("depth").with_columns(pl.col("depth").cast(pl.Int32))
            .sort("start_ns"))
    if asks.height == 0 or host.height == 0:
        return pl.DataFrame(schema={"_id": pl.UInt32, "depth": pl.Int32, "aname": pl.String,
                                    "acat": pl.String, "_as": pl.Int64})
    return (asks.join_asof(host, left_on="start_ns", right_on="_as",
                           by=["rank", "track_id", "depth"], strategy="backward",
                           check_sortedness=False)
            .filter(pl.col("_ae") >= pl.col("end_ns"))
            .select("_id", "depth", "aname", "acat", "_as").sort("_id", "depth"))


def _classified(trace: Trace) -> pl.DataFrame:
    """Deduplicated sync calls with ``source``, ``op``, ``ops``, ``annotation``,
    ``call_site``; the pageable ``Async`` copy folded into a sync of the same op."""
    import polars as pl

    calls = _candidates(trace).with_row_index("_id")
    anc = _ancestors(trace, calls)
    ann_cats = ("annotation", "nvtx", "step", "region")
    boundary = (anc.filter(pl.col("acat").is_in(ann_cats)).group_by("_id")
                .agg(pl.col("depth").max().alias("_ann_depth")))
    anc = anc.join(boundary, on="_id", how="left").with_columns(
        pl.col("_ann_depth").fill_null(-1))
    is_op = (pl.col("acat") == "cpu_op") & (pl.col("depth") > pl.col("_ann_depth"))
    named_op = is_op & ~pl.col("aname").is_in(WRAPPER_OPS) & ~pl.col("aname").str.starts_with(
        "autograd::")
    not_python = pl.col("acat") != "python"
    info = anc.group_by("_id").agg(
        pl.col("aname").str.contains(COLLECTIVE_RE).any().alias("_coll"),
        pl.col("aname").filter(not_python).last().alias("_inner"),
        pl.col("_as").filter(pl.col("acat") == "cpu_op").last().alias("_op_start"),
        pl.col("aname").filter(named_op).first().alias("op"),
        pl.col("aname").filter(is_op).first().alias("_outer_op"),
        pl.col("aname").filter(is_op).str.join(" > ").alias("ops"),
        pl.col("aname").filter(pl.col("acat").is_in(("annotation", "nvtx", "region"))
                               & ~pl.col("aname").str.contains(NOT_USER_ANNOTATION_RE))
        .last().alias("annotation"),
        pl.col("aname").filter((pl.col("acat") == "python")
                               & ~pl.col("aname").str.contains(LIBRARY_FRAME_RE))
        .last().alias("call_site"),
    )
    source = (pl.when(pl.col("_coll").fill_null(False)).then(pl.lit("collective"))
              .when(pl.col("_inner").fill_null("").str.contains(FRAMEWORK_RE))
              .then(pl.lit("framework")).otherwise(pl.lit("user")))
    out = (calls.join(info, on="_id", how="left")
           .with_columns(source.alias("source"),
                         pl.coalesce("op", "_outer_op").alias("op"),
                         pl.col("_inner").alias("inside"),
                         pl.col("ops").replace("", None)))
    return _fold_pageable(out)


def _fold_pageable(calls: pl.DataFrame) -> pl.DataFrame:
    """Drop a pageable ``Async`` copy when a ``*Synchronize*`` call inside the same
    innermost op (same track, same op start) follows it, and mark that call
    ``pageable``."""
    import polars as pl

    key = ["rank", "track_id", "_op_start"]
    in_op = pl.col("_op_start").is_not_null()
    copies = calls.filter((pl.col("kind") == "pageable_copy") & in_op)
    if copies.height:
        # the next synchronize call on the same track after each copy
        syncs = (calls.filter((pl.col("kind") == "synchronize") & in_op)
                 .select(*key, pl.col("start_ns").alias("_ss"), pl.col("_id").alias("_sid"))
                 .sort("_ss"))
        pairs = (copies.select(*key, "_id", "end_ns").sort("end_ns")
                 .join_asof(syncs, left_on="end_ns", right_on="_ss", by=key,
                            strategy="forward", check_sortedness=False)
                 .drop_nulls("_sid"))
        calls = (calls.filter(~pl.col("_id").is_in(pairs["_id"].implode()))
                 .with_columns(pageable=pl.col("pageable")
                               | pl.col("_id").is_in(pairs["_sid"].implode())))
    return calls.drop("_id", "depth", "_coll", "_inner", "_op_start", "_outer_op")


def _per_step(trace: Trace, table: pl.DataFrame) -> pl.DataFrame:
    """Per rank, step (>= 0) and source: sync ``count`` and ``idle_ns``; 0 for steps of
    the rank without syncs of that source."""
    import polars as pl

    steps = (trace.intervals.filter((pl.col("category").cast(pl.String) == "step")
                                    & (pl.col("step") >= 0))
             .select("rank", "step").unique().collect())
    grid = steps.join(pl.DataFrame({"source": list(SOURCES)}), how="cross")
    counts = (table.filter(pl.col("step") >= 0).group_by("rank", "step", "source")
              .agg(pl.len().cast(pl.Int64).alias("count"),
                   pl.col("idle_after_ns").sum().alias("idle_ns")))
    return (grid.join(counts, on=["rank", "step", "source"], how="left")
            .with_columns(pl.col("count").fill_null(0), pl.col("idle_ns").fill_null(0))
            .sort("rank", "step", "source"))


def _summary(table: pl.DataFrame, per_step: pl.DataFrame) -> pl.DataFrame:
    """Per rank and source: total ``syncs`` and ``idle_ns``; over steps, ``steps`` and the
    medians ``per_step_count`` and ``per_step_idle_ns`` (null without steps)."""
    import polars as pl

    totals = table.group_by("rank", "source").agg(
        pl.len().cast(pl.Int64).alias("syncs"), pl.col("idle_after_ns").sum().alias("idle_ns"))
    medians = per_step.group_by("rank", "source").agg(
        pl.len().cast(pl.Int64).alias("steps"),
        pl.col("count").median().alias("per_step_count"),
        pl.col("idle_ns").median().alias("per_step_idle_ns"))
    return (totals.join(medians, on=["rank", "source"], how="full", coalesce=True)
            .with_columns(pl.col("syncs", "idle_ns", "steps").fill_null(0))
            .select("rank", "source", "syncs", "idle_ns", "steps", "per_step_count",
                    "per_step_idle_ns")
            .sort("rank", "source"))
