"""Rule ``exposed_comm``: communication kernels run with no compute to hide them.

Per rank (``breakdown``): exposed = ``exposed_comm_ns`` summed over its devices (union of
communication kernels not overlapped by compute kernels). The part of it spent waiting
for the last rank to arrive at a collective is charged to load imbalance / stragglers,
not to communication: with ``collectives``, per rank wait = sum over instances of (last
start - own start), and exposed transfer = max(0, exposed - wait).

Trigger: exposed transfer > 0 on some rank.
Cost (ns): the largest exposed transfer over the ranks (collectives synchronise the ranks,
so the worst rank sets the pace).
Statement: "Communication is not overlapped with compute: on rank R, X of communication
kernels run with no compute kernel alongside (P % of its GPU time span; mostly KERNEL)".
"""

from __future__ import annotations

from traceatlas.advisor.base import Context, Finding, fmt_ns, heaviest, per_rank_sum, short_name

NAME = "exposed_comm"


def check(ctx: Context) -> list[Finding]:
    """One finding for the rank with the most exposed communication."""
    breakdown = ctx.result("breakdown")
    if breakdown is None or not ctx.has("comm"):
        return []
    exposed = per_rank_sum(breakdown.table, "exposed_comm_ns")
    span = per_rank_sum(breakdown.table, "span_ns")
    comm = per_rank_sum(breakdown.table, "comm_ns")
    wait = _collective_wait(ctx)
    net = {r: max(0, v - wait.get(r, 0)) for r, v in exposed.items()}
    if not net or max(net.values()) <= 0:
        return []
    rank, cost = heaviest(net)
    kernel = _top_comm_kernel(ctx, rank)
    mostly = f"; mostly {short_name(kernel)}" if kernel else ""
    share = cost / span[rank] if span.get(rank) else 0.0
    return [Finding(
        rule=NAME,
        statement=(f"Communication is not overlapped with compute: on rank {rank}, "
                   f"{fmt_ns(cost)} of communication kernels run with no compute kernel "
                   f"alongside ({share:.0%} of its GPU time span{mostly})"),
        cost_ns=cost,
        evidence=(f"rank {rank}: communication kernels {fmt_ns(comm.get(rank, 0))}, exposed "
                  f"{fmt_ns(exposed[rank])}, of which waiting for late ranks "
                  f"{fmt_ns(wait.get(rank, 0))}; exposed transfer per rank: "
                  + ", ".join(f"{r}: {fmt_ns(v)}" for r, v in net.items())
                  + f"; window {ctx.when(*ctx.window)}"),
        next_step=("Overlap communication with compute: bucketed/asynchronous gradient "
                   "all-reduce (DDP buckets, FSDP prefetch), launch collectives earlier, "
                   "or shrink the messages (compression, fewer parameters synchronised)."),
        command=ctx.command("overlap", "--ranks", str(rank)),
        metric="device_communication_efficiency",
        efficiency=1 - share,
    )]


def _collective_wait(ctx: Context) -> dict[int, int]:
    """Per rank: sum over collective instances of (last start - own start), ns."""
    import polars as pl

    collectives = ctx.result("collectives")
    if collectives is None or "per_rank" not in collectives.extra:
        return {}
    per_rank = collectives.extra["per_rank"]
    waits = per_rank.with_columns(
        wait=pl.col("start_ns").max().over("instance") - pl.col("start_ns"))
    return per_rank_sum(waits, "wait")


def _top_comm_kernel(ctx: Context, rank: int) -> str | None:
    kernels = ctx.result("kernels")
    if kernels is None:
        return None
    import polars as pl

    rows = (kernels.table.filter((pl.col("rank") == rank)
                                 & (pl.col("category") == "comm_kernel"))
            .sort("total_ns", "name", descending=[True, False]).head(1))
    return str(rows["name"][0]) if rows.height else None
