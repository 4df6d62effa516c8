"""``mpi_collectives``: MPI collective calls matched across ranks; who arrived last and how
long the others waited for it.

Source: MPI calls (category ``mpi`` intervals) that are collectives: the ``collective``
column is set (OTF2's MpiCollectiveBegin/End inside the call), or the name is an MPI
collective (``MPI_Allreduce``, ``MPI_Barrier``, ``MPI_Bcast``, ``MPI_Reduce*``,
``MPI_Allgather*``, ``MPI_Alltoall*``, ``MPI_Gather*``, ``MPI_Scatter*``, ``MPI_Scan``,
``MPI_Exscan``, ``MPI_Neighbor_*``, and their non-blocking ``MPI_I...`` forms; Paraver,
nsys). ``op`` is the ``collective`` column, else the name without ``MPI_``, lower case
(``MPI_Allreduce`` -> ``allreduce``, as OTF2's ``ALLREDUCE``). ``communicator`` is the
``process_group`` column (OTF2 communicator name, ``comm N`` when unnamed). ``bytes`` is the
call's ``bytes`` column (OTF2's size sent). Paraver traces from Extrae keep both as events
at the call's entry (type 50100001 "Send Size in MPI Global OP", 50100004 "Communicator in
MPI Global OP", stored as instants): the first of each on the call's rank within the call
fills ``bytes`` and ``communicator`` (``comm <id>``, Extrae's communicator id; used only
when every rank saw the same ids, since instances are keyed by it) where the columns are
null.

Matching: on each rank the calls of one (communicator, op) are numbered by start
(``occurrence`` 0, 1, ...); the calls with the same (communicator, op, occurrence) on
every rank that has one form one *instance*.

Main table, one row per instance (numbered by first enter): ``instance``, ``op``,
``communicator``, ``occurrence``, ``ranks`` (ranks in it), ``bytes`` (largest ``bytes``
over its ranks: OTF2's size sent; null when unknown), ``first_enter_ns``,
``last_enter_ns``, ``last_exit_ns``, ``skew_ns`` (last enter - first enter),
``late_rank`` (the rank that entered last; lowest rank on a tie; null for a one-rank
instance), ``total_wait_ns`` (sum of the ranks' ``wait_ns``).

Extra tables: ``per_rank`` (instance, rank, enter_ns, exit_ns, dur_ns, bytes, wait_ns =
min(last enter, own exit) - own enter, i.e. the time it waited for the last arriver,
never more than its own call; late: whether it is the instance's ``late_rank``);
``by_rank`` (rank, instances, wait_ns: time it waited in total, late_count: instances it
entered last, caused_wait_ns: total_wait_ns of the instances it entered last).

Differs from Scalasca (performance properties "Wait at Barrier" and "Wait at N x N",
Scalasca 2.2 help, scalasca_patterns-2.2.html): Scalasca applies "time until the last
process enters" to barriers and n-to-n collectives only and has root-aware patterns for
1-to-n ("Late Broadcast": only destinations wait for the root) and n-to-1 ("Early
Reduce": only the root waits); here every collective uses the n-to-n rule, capped at the
caller's own call. Pipit has no collective analysis.

Engines (``analysis.partitioned``): declared ``partition = "rank"`` with a ``partial``
and a ``merge``, so ``--engine local`` / ``dask`` run it in rank batches: each batch
sends only its MPI collective calls (rank, start_ns, end_ns, bytes, op, communicator,
Extrae communicator id: ``mpi_collectives_calls``) and the Extrae communicator ids each
rank saw; the merge numbers and matches the calls once, over every rank. ``run`` is the
same code on one batch holding every rank. The client holds every collective call of the
selection (7 columns, ~50 bytes a call), never the other intervals. Tie rule: on one
rank, calls of one (communicator, op) that start and end at the same time are numbered
by ``bytes`` (nulls first).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from traceatlas.analysis.base import Result
from traceatlas.analysis.mpi_collectives_calls import (
    CALL_COLUMNS,
    COLLECTIVE_NAME,
    COMMUNICATOR,
    SEND_SIZE,
    collective_calls,
    schema,
)
from traceatlas.analysis.partitioned import RANK

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

__all__ = ["COLLECTIVE_NAME", "COMMUNICATOR", "INSTANCE", "SEND_SIZE", "MpiCollectives"]

INSTANCE = ["communicator", "op", "occurrence"]


class MpiCollectives:
    """MPI collective calls matched across ranks: skew, late rank, time others waited."""

    name = "mpi_collectives"
    description = "MPI collective calls matched across ranks: late arrivers and wait time"
    params = ()
    requires = ("mpi",)
    partition = RANK
    """In rank batches (``analysis.partitioned``): ``partial`` sends the batch's
    collective calls, ``merge`` matches them across every rank (module docstring)."""

    def run(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """One row per collective instance; extra tables per_rank and by_rank."""
        return self.merge([self.partial(trace, params)], params)

    def partial(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """The batch's collective calls (table) and the Extrae communicator ids each of
        its ranks saw (extra ``comm_ids``): ``mpi_collectives_calls``."""
        calls, comm_ids = collective_calls(trace)
        return Result(calls, extra={"comm_ids": comm_ids})

    def merge(self, partials: Sequence[Result], params: Mapping[str, Any]) -> Result:
        """Every batch's calls matched into instances (exact: integer ns)."""
        import polars as pl

        calls = pl.concat([p.table for p in partials], how="vertical") if partials else (
            pl.DataFrame(schema=schema()))
        ids = pl.concat([p.extra["comm_ids"] for p in partials], how="vertical")
        per_rank = _per_rank(calls.select(*CALL_COLUMNS), ids)
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


def _per_rank(calls: pl.DataFrame, comm_ids: pl.DataFrame) -> pl.DataFrame:
    """Collective calls keyed by (communicator, op, occurrence), with wait_ns. Extrae
    communicator ids name the communicator (``comm <id>``, where the column is null)
    only when every rank that saw one saw the same ids."""
    import polars as pl

    same_ids = comm_ids.height == 0 or comm_ids["ids"].n_unique() <= 1
    communicator = pl.col("communicator")
    if same_ids:
        communicator = pl.coalesce(communicator,
                                   pl.lit("comm ") + pl.col("comm_id").cast(pl.String))
    calls = (
        calls.with_columns(communicator.fill_null(""))
        .drop("comm_id")
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
