"""Frozen copy of ``analysis/mpi_collectives.py`` as it was before it ran in rank batches
(whole trace, one process): the oracle the partitioned ``mpi_collectives`` is tested
against. Two tie rules were made explicit here and in the live code (they were the
frame's row order before): on one rank, calls of one (communicator, op) that start and end
at the same time are numbered by ``bytes`` (nulls first); Extrae global-op events at the
same time on one rank are taken smallest value first. Do not edit otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from traceatlas.analysis.base import Result

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

COLLECTIVE_NAME = (r"(?i)^MPI_I?(Allreduce|Barrier|Bcast|Reduce\w*|Allgather\w*|Alltoall\w*|"
                   r"Gather\w*|Scatter\w*|Scan|Exscan|Neighbor_\w+)$")
INSTANCE = ["communicator", "op", "occurrence"]


class FrozenMpiCollectives:
    """MPI collective calls matched across ranks: skew, late rank, time others waited."""

    name = "mpi_collectives"
    description = "MPI collective calls matched across ranks: late arrivers and wait time"
    params = ()
    requires = ("mpi",)

    def run(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """One row per collective instance; extra tables per_rank and by_rank."""
        import polars as pl

        per_rank = _per_rank(trace).collect()
        instances = _instances(per_rank)
        per_rank = (
            per_rank.join(instances.select(*INSTANCE, "instance", "late_rank"), on=INSTANCE)
            .with_columns(late=pl.col("rank") == pl.col("late_rank"))
            .select("instance", "rank", "enter_ns", "exit_ns", "dur_ns", "bytes", "wait_ns",
                    "late")
            .sort("instance", "rank")
        )
        by_rank = _by_rank(per_rank, instances)
        instances = instances.with_columns(
            communicator=pl.when(pl.col("communicator") != "").then(pl.col("communicator")))
        notes = [] if instances.height else [
            "no collective MPI calls (collective column or MPI collective name)"]
        return Result(instances, extra={"per_rank": per_rank, "by_rank": by_rank},
                      notes=notes)


def _per_rank(trace: Trace) -> pl.LazyFrame:
    """Collective calls keyed by (communicator, op, occurrence), with wait_ns."""
    import polars as pl

    name = pl.col("name").cast(pl.String)
    op = pl.coalesce(pl.col("collective").cast(pl.String).str.to_lowercase(),
                     name.str.replace(r"(?i)^MPI_", "").str.to_lowercase())
    calls = _with_global_op_events(
        trace,
        trace.intervals
        .filter((pl.col("category").cast(pl.String) == "mpi")
                & (pl.col("collective").is_not_null() | name.str.contains(COLLECTIVE_NAME)))
        .select("rank", "start_ns", "end_ns", "bytes", op.alias("op"),
                pl.col("process_group").cast(pl.String).alias("communicator")))
    calls = (
        calls.with_columns(pl.col("communicator").fill_null(""))
        .sort("rank", "start_ns", "end_ns", "bytes", nulls_last=False)
        .with_columns(occurrence=pl.int_range(pl.len(), dtype=pl.Int64)
                      .over("rank", "communicator", "op"))
    )
    last = pl.col("start_ns").max().over(INSTANCE)
    return calls.with_columns(
        enter_ns=pl.col("start_ns"), exit_ns=pl.col("end_ns"),
        dur_ns=pl.col("end_ns") - pl.col("start_ns"),
        wait_ns=pl.min_horizontal(last, pl.col("end_ns")) - pl.col("start_ns"),
    )


SEND_SIZE, COMMUNICATOR = 50100001, 50100004
"""Extrae event types: send size (bytes) and communicator id of an MPI global op."""


def _with_global_op_events(trace: Trace, calls: pl.LazyFrame) -> pl.LazyFrame:
    """``calls`` with null ``bytes`` / ``communicator`` filled from Extrae's global-op
    events (Paraver instants) on the same rank within the call (module docstring)."""
    import polars as pl

    args = pl.col("args")
    events = (
        trace.instants.filter(args.str.contains('"type": 501000', literal=True))
        .select("rank", "ts_ns",
                type=args.str.json_path_match("$.type").cast(pl.Int64, strict=False),
                value=args.str.json_path_match("$.value").cast(pl.Int64, strict=False))
        .filter(pl.col("type").is_in((SEND_SIZE, COMMUNICATOR)))
        .collect()
    )
    if events.height == 0:
        return calls
    comms = events.filter(pl.col("type") == COMMUNICATOR).group_by("rank").agg(
        pl.col("value").unique().sort())
    if comms["value"].n_unique() > 1:  # ids that differ between ranks cannot key instances
        events = events.filter(pl.col("type") != COMMUNICATOR)
    calls = calls.with_row_index("_call")
    for kind, column in ((SEND_SIZE, "_size"), (COMMUNICATOR, "_comm")):
        part = (events.lazy().filter(pl.col("type") == kind)
                .select(pl.col("rank").cast(pl.Int64), "ts_ns", pl.col("value").alias(column))
                .sort("ts_ns", column))
        found = (
            calls.select("_call", pl.col("rank").cast(pl.Int64), "start_ns", "end_ns")
            .sort("start_ns")
            .join_asof(part, left_on="start_ns", right_on="ts_ns", by="rank",
                       strategy="forward", check_sortedness=False)
            .filter(pl.col("ts_ns") <= pl.col("end_ns"))
            .select("_call", column)
        )
        calls = calls.join(found, on="_call", how="left")
    return calls.with_columns(
        bytes=pl.coalesce(pl.col("bytes"), pl.col("_size")),
        communicator=pl.coalesce(pl.col("communicator"),
                                 pl.lit("comm ") + pl.col("_comm").cast(pl.String)),
    ).drop("_call", "_size", "_comm")


def _instances(per_rank: pl.DataFrame) -> pl.DataFrame:
    import polars as pl

    return (
        per_rank.sort("start_ns", "rank")
        .group_by(INSTANCE, maintain_order=True)
        .agg(
            ranks=pl.len().cast(pl.Int64),
            bytes=pl.col("bytes").max(),
            first_enter_ns=pl.col("start_ns").min(),
            last_enter_ns=pl.col("start_ns").max(),
            last_exit_ns=pl.col("end_ns").max(),
            late_rank=pl.col("rank").filter(pl.col("start_ns") == pl.col("start_ns").max())
            .min(),
            total_wait_ns=pl.col("wait_ns").sum().cast(pl.Int64),
        )
        .sort("first_enter_ns", "op", "communicator", "occurrence")
        .with_columns(
            instance=pl.int_range(pl.len(), dtype=pl.Int64),
            skew_ns=pl.col("last_enter_ns") - pl.col("first_enter_ns"),
            late_rank=pl.when(pl.col("ranks") > 1).then(pl.col("late_rank")),
        )
        .select("instance", "op", "communicator", "occurrence", "ranks", "bytes",
                "first_enter_ns", "last_enter_ns", "last_exit_ns", "skew_ns", "late_rank",
                "total_wait_ns")
    )


def _by_rank(per_rank: pl.DataFrame, instances: pl.DataFrame) -> pl.DataFrame:
    import polars as pl

    caused = instances.filter(pl.col("late_rank").is_not_null()).group_by(
        rank="late_rank").agg(late_count=pl.len().cast(pl.Int64),
                              caused_wait_ns=pl.col("total_wait_ns").sum())
    return (
        per_rank.group_by("rank").agg(instances=pl.len().cast(pl.Int64),
                                      wait_ns=pl.col("wait_ns").sum().cast(pl.Int64))
        .join(caused.with_columns(pl.col("rank").cast(per_rank.schema["rank"])),
              on="rank", how="left")
        .with_columns(pl.col("late_count", "caused_wait_ns").fill_null(0).cast(pl.Int64))
        .sort("rank")
    )
