"""The map step of ``mpi_collectives``: one batch of ranks' MPI collective calls, the
columns the cross-rank matching needs and nothing else.

Per call (one row; integer ns): ``rank``, ``start_ns``, ``end_ns``, ``bytes`` (the
``bytes`` column, else the size of the first Extrae send-size event on the call's rank
within the call), ``op``, ``communicator`` (the ``process_group`` column as stored, null
when unset) and ``comm_id`` (the first Extrae communicator event's id within the call,
null when none). Extra table ``comm_ids``: rank, ids (the sorted distinct Extrae
communicator ids the rank saw), so that the merge can check that every rank saw the same
ids before it keys instances by them (``mpi_collectives``' docstring). Everything here is
per rank: a batch computes it from its own ranks' rows, and the whole trace is the same
code on one batch holding every rank.

Tie rule (explicit, the frozen oracle's too): Extrae events at the same time on one rank
are taken smallest value first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

COLLECTIVE_NAME = (r"(?i)^MPI_I?(Allreduce|Barrier|Bcast|Reduce\w*|Allgather\w*|Alltoall\w*|"
                   r"Gather\w*|Scatter\w*|Scan|Exscan|Neighbor_\w+)$")
"""MPI collective call names (when the source does not set the ``collective`` column)."""
SEND_SIZE, COMMUNICATOR = 50100001, 50100004
"""Extrae event types: send size (bytes) and communicator id of an MPI global op."""
CALL_COLUMNS = ("rank", "start_ns", "end_ns", "bytes", "op", "communicator", "comm_id")
"""Columns of the calls table, in order."""


def schema() -> dict[str, pl.DataType]:
    """The calls table's column types (every batch sends these, even when empty)."""
    import polars as pl

    return {"rank": pl.Int32(), "start_ns": pl.Int64(), "end_ns": pl.Int64(),
            "bytes": pl.Int64(), "op": pl.String(), "communicator": pl.String(),
            "comm_id": pl.Int64()}


def collective_calls(trace: Trace) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(calls, comm_ids) of ``trace``'s ranks (module docstring)."""
    import polars as pl

    name = pl.col("name").cast(pl.String)
    op = pl.coalesce(pl.col("collective").cast(pl.String).str.to_lowercase(),
                     name.str.replace(r"(?i)^MPI_", "").str.to_lowercase())
    calls = (
        trace.intervals
        .filter((pl.col("category") == "mpi")
                & (pl.col("collective").is_not_null() | name.str.contains(COLLECTIVE_NAME)))
        .select("rank", "start_ns", "end_ns", "bytes", op.alias("op"),
                pl.col("process_group").cast(pl.String).alias("communicator"))
    )
    events = _global_op_events(trace)
    comm_ids = (events.filter(pl.col("type") == COMMUNICATOR).group_by("rank")
                .agg(ids=pl.col("value").unique().sort()).sort("rank")
                .with_columns(pl.col("rank").cast(pl.Int32)))
    if events.height == 0:
        calls = calls.with_columns(comm_id=pl.lit(None, pl.Int64))
    else:
        calls = _with_events(calls, events)
    types = schema()
    frame = calls.select(pl.col(c).cast(types[c]) for c in CALL_COLUMNS).collect()
    return frame, comm_ids.select("rank", pl.col("ids").cast(pl.List(pl.Int64)))


def _global_op_events(trace: Trace) -> pl.DataFrame:
    """Extrae's send-size and communicator events (Paraver instants): rank, ts_ns, type,
    value."""
    import polars as pl

    args = pl.col("args")
    return (
        trace.instants.filter(args.str.contains('"type": 501000', literal=True))
        .select("rank", "ts_ns",
                type=args.str.json_path_match("$.type").cast(pl.Int64, strict=False),
                value=args.str.json_path_match("$.value").cast(pl.Int64, strict=False))
        .filter(pl.col("type").is_in((SEND_SIZE, COMMUNICATOR)))
        .collect()
    )


def _with_events(calls: pl.LazyFrame, events: pl.DataFrame) -> pl.LazyFrame:
    """``calls`` with null ``bytes`` filled from the first send-size event on the same
    rank within the call, and ``comm_id`` from the first communicator event there."""
    import polars as pl

    calls = calls.with_row_index("_call")
    for kind, column in ((SEND_SIZE, "_size"), (COMMUNICATOR, "comm_id")):
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
    return calls.with_columns(bytes=pl.coalesce(pl.col("bytes"), pl.col("_size"))
                              ).drop("_call", "_size")
