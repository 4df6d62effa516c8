"""Rule ``late_sender``: a rank blocks in receives posted before the matching send.

From ``mpi_wait`` (Scalasca's Late Sender, inferred from timing): per receiving rank,
``late_sender_ns`` is the time its blocking receive calls (``MPI_Recv``, ``MPI_Wait*``)
waited for the send to start; the ``messages`` table names the senders.

Trigger: ``late_sender_ns`` > 0 on some rank.
Cost (ns): the largest ``late_sender_ns`` over the ranks (the receiver's time lost; it
cannot be hidden as it is spent inside the blocking call).
Statement: "Late sender: rank R waits X in N receives posted before rank S sent".
"""

from __future__ import annotations

from traceatlas.advisor.base import Context, Finding, fmt_ns

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
    )]
