"""Rule ``late_sender``: a rank blocks in receives posted before the matching send.

From ``mpi_wait`` (Scalasca's Late Sender, inferred from timing): per receiving rank,
``late_sender_ns`` is the time its blocking receive calls (``MPI_Recv``, ``MPI_Wait*``)
waited for the send to start; the ``messages`` table names the senders.

Trigger: ``late_sender_ns`` > 0 on some rank.
Cost (ns): the largest ``late_sender_ns`` over the ranks (the receiver's time lost; it
cannot be hidden as it is spent inside the blocking call).
Statement: "Late sender: rank R waits X in N receives posted before rank S sent".

Machine-readable: ``ranks`` = [R, S] (the waiting receiver and its main late sender);
``per_step`` (with steps): R's late-sender wait per step (each blocking call counted once,
its largest wait, placed by its start), ``ms`` the median over R's steps and ``count`` the
median number of such calls per step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from traceatlas.advisor import stepwise
from traceatlas.advisor.base import Context, Finding, fmt_ns

if TYPE_CHECKING:
    import polars as pl

NAME = "late_sender"


def check(ctx: Context) -> list[Finding]:
    """One finding for the rank that waits longest for late senders."""
    import polars as pl

    result = ctx.result("mpi_wait")
    if result is None or result.table.height == 0:
        return []
    row = result.table.sort("late_sender_ns", "rank", descending=[True, False]).row(
        0, named=True)
    rank, cost = int(row["rank"]), int(row["late_sender_ns"] or 0)
    if cost <= 0:
        return []
    senders: list[tuple[int, int]] = []
    messages = result.extra.get("messages")
    if messages is not None and messages.height:
        senders = [(int(s), int(v)) for s, v in (
            messages.filter((pl.col("dst_rank") == rank) & (pl.col("late_sender_ns") > 0))
            .group_by("src_rank").agg(pl.col("late_sender_ns").sum())
            .sort("late_sender_ns", "src_rank", descending=[True, False]).rows())]
    sender = f"rank {senders[0][0]}" if senders else "the sender"
    start, end = ctx.window
    share = cost / (end - start) if end > start else 0.0
    return [Finding(
        rule=NAME,
        statement=(f"Late sender: rank {rank} waits {fmt_ns(cost)} in "
                   f"{row['late_sender_count']} receives posted before {sender} sent"),
        cost_ns=cost,
        evidence=(f"rank {rank}: late-sender wait {fmt_ns(cost)} ({share:.0%} of the run) "
                  f"in {row['late_sender_count']} blocking calls; by sender: "
                  + (", ".join(f"rank {s} {fmt_ns(v)}" for s, v in senders[:3]) or "unknown")
                  + f"; window {ctx.when(start, end)}"),
        next_step=(f"Make {sender} send earlier (reorder its work so the send comes first, "
                   "balance its load) or post the receive later with MPI_Irecv and overlap "
                   "the wait with computation."),
        command=ctx.command("mpi_wait", "--table", "messages"),
        metric="host_communication_efficiency",
        efficiency=1 - share,
        cause="late_sender",
        ranks=sorted({rank, *([senders[0][0]] if senders else [])}),
        per_step=_per_step(ctx, rank, messages),
    )]


def _per_step(ctx: Context, rank: int, messages: pl.DataFrame | None
              ) -> dict[str, float] | None:
    """Median per step of ``rank``'s late-sender wait (ms) and of its late calls."""
    import polars as pl

    steps = stepwise.windows(ctx)
    if steps is None or messages is None or "recv_block_start_ns" not in messages.columns:
        return None
    steps = steps.filter(pl.col("rank") == rank)
    calls = (messages.filter((pl.col("dst_rank") == rank) & (pl.col("late_sender_ns") > 0)
                             & pl.col("recv_block_start_ns").is_not_null())
             .group_by("recv_block_start_ns").agg(pl.col("late_sender_ns").max())
             .select(pl.lit(rank).alias("rank"), pl.col("recv_block_start_ns").alias("start_ns"),
                     pl.col("recv_block_start_ns").alias("end_ns"), "late_sender_ns"))
    placed = stepwise.assign(calls, steps).group_by("step").agg(
        pl.col("late_sender_ns").sum(), pl.len().alias("n"))
    got = {int(s): (float(w), float(n)) for s, w, n in placed.rows()}
    every = [int(s) for s in steps["step"].unique().to_list()]
    return stepwise.median_ms([got.get(s, (0.0, 0.0))[0] for s in every],
                              [got.get(s, (0.0, 0.0))[1] for s in every])
