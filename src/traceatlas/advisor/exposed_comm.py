"""Rule ``exposed_comm``: communication kernels run with no compute to hide them.

Per rank, from ``overlap`` (the table ``traceatlas analyze overlap`` prints, so the
statement and the command agree): C = ``comm_ns`` (union of communication kernels),
overlapped = ``overlapped_ns`` (communication while a compute kernel runs), exposed = C -
overlapped. The part of the exposed time spent waiting for the last rank to arrive at a
collective is charged to load imbalance / stragglers, not to communication: with
``collectives``, per rank wait = sum over instances of (last start - own start), waiting
= min(wait, exposed) and exposed transfer = exposed - waiting. So, per rank:

    C = overlapped + waiting for late ranks + exposed transfer   (exactly)

Trigger: exposed transfer > 0 on some rank.
Cost (ns): the largest exposed transfer over the ranks (collectives synchronise the ranks,
so the worst rank sets the pace).
Statement: "Communication is not overlapped with compute: on rank R, communication
kernels run C: O overlapped with compute, W waiting for late ranks and X exposed
transfer (P % of its GPU time span; mostly KERNEL)".

Machine-readable: ``ranks`` = [R]; ``where`` = {``kernel``: R's costliest communication
kernel}; ``per_step.ms`` (with steps) = median over R's steps of the same split in the
step window: |C or K| - |K| (exposed) minus min(exposed, the waits of the collective
instances R starts in the step).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from traceatlas.advisor import stepwise
from traceatlas.advisor.base import Context, Finding, fmt_ns, heaviest, per_rank_sum, short_name

if TYPE_CHECKING:
    import polars as pl

NAME = "exposed_comm"


@dataclass(frozen=True)
class Split:
    """One rank's communication kernel time (ns): comm = overlapped + waiting + transfer."""

    comm: int
    overlapped: int
    waiting: int
    transfer: int


def decompose(ctx: Context) -> dict[int, Split]:
    """Per rank with communication kernels: the split of its communication time."""
    overlap = ctx.result("overlap")
    if overlap is None:
        return {}
    wait = _collective_wait(ctx)
    out: dict[int, Split] = {}
    for row in overlap.table.iter_rows(named=True):
        comm, overlapped = int(row["comm_ns"] or 0), int(row["overlapped_ns"] or 0)
        if comm <= 0:
            continue
        rank = int(row["rank"])
        exposed = comm - overlapped
        waiting = min(max(0, wait.get(rank, 0)), exposed)
        out[rank] = Split(comm, overlapped, waiting, exposed - waiting)
    return out


def check(ctx: Context) -> list[Finding]:
    """One finding for the rank with the most exposed communication."""
    if not ctx.has("comm"):
        return []
    split = decompose(ctx)
    net = {r: s.transfer for r, s in split.items()}
    if not net or max(net.values()) <= 0:
        return []
    rank, cost = heaviest(net)
    s = split[rank]
    kernel = _top_comm_kernel(ctx, rank)
    mostly = f"; mostly {short_name(kernel)}" if kernel else ""
    span = _gpu_span(ctx).get(rank) or ctx.span_ns
    share = cost / span if span else 0.0
    return [Finding(
        rule=NAME,
        statement=(f"Communication is not overlapped with compute: on rank {rank}, "
                   f"communication kernels run {fmt_ns(s.comm)}: {fmt_ns(s.overlapped)} "
                   f"overlapped with compute, {fmt_ns(s.waiting)} waiting for late ranks "
                   f"and {fmt_ns(s.transfer)} exposed transfer ({share:.0%} of its GPU "
                   f"time span{mostly})"),
        cost_ns=cost,
        evidence=(f"rank {rank}: communication kernels {fmt_ns(s.comm)} = overlapped with "
                  f"compute kernels {fmt_ns(s.overlapped)} + exposed "
                  f"{fmt_ns(s.comm - s.overlapped)}; exposed = waiting for late ranks "
                  f"{fmt_ns(s.waiting)} (charged to load imbalance) + transfer "
                  f"{fmt_ns(s.transfer)}; exposed transfer per rank: "
                  + ", ".join(f"{r}: {fmt_ns(v)}" for r, v in net.items())
                  + f"; window {ctx.when(*ctx.window)}"),
        next_step=("Overlap communication with compute: bucketed/asynchronous gradient "
                   "all-reduce (DDP buckets, FSDP prefetch), launch collectives earlier, "
                   "or shrink the messages (compression, fewer parameters synchronised)."),
        command=ctx.command("overlap", "--ranks", str(rank)),
        metric="device_communication_efficiency",
        efficiency=1 - share,
        cause="exposed_communication",
        ranks=[rank],
        per_step=_per_step(ctx, rank),
        where={"kernel": kernel} if kernel else {},
    )]


def _per_step(ctx: Context, rank: int) -> dict[str, float] | None:
    """Median over ``rank``'s steps of its exposed transfer in the step window (ms)."""
    import polars as pl

    steps = stepwise.windows(ctx)
    if steps is None:
        return None
    steps = steps.filter(pl.col("rank") == rank)
    cat = pl.col("category").cast(pl.String)
    rows = (ctx.trace.intervals
            .filter((pl.col("rank") == rank) & pl.col("category").is_in(("kernel", "comm_kernel")))
            .select("rank", cat.alias("category"), "start_ns", "end_ns").collect())
    k = stepwise.union_per_step(rows.filter(pl.col("category") == "kernel"), steps,
                                name="k")
    both = stepwise.union_per_step(rows, steps, name="ck")
    exposed = {int(s): float(ck) - float(kv or 0) for s, ck, kv in
               both.join(k, on=["rank", "step"], how="left")
               .select("step", "ck", "k").rows()}
    waits = _wait_per_step(ctx, rank, steps)
    costs = [exposed.get(s, 0.0) - min(max(waits.get(s, 0.0), 0.0), exposed.get(s, 0.0))
             for s in steps["step"].unique().to_list()]
    return stepwise.median_ms(costs)


def _wait_per_step(ctx: Context, rank: int, steps: pl.DataFrame) -> dict[int, float]:
    """{step: sum of (last start - own start) of the instances ``rank`` starts in it}."""
    import polars as pl

    collectives = ctx.result("collectives")
    if collectives is None or "per_rank" not in collectives.extra:
        return {}
    t0 = ctx.window[0]
    mine = (collectives.extra["per_rank"]
            .with_columns(wait=pl.col("start_ns").max().over("instance") - pl.col("start_ns"))
            .filter(pl.col("rank") == rank)
            .select("rank", (pl.col("start_ns") + t0).alias("start_ns"),
                    (pl.col("start_ns") + t0).alias("end_ns"), "wait"))
    placed = stepwise.assign(mine, steps)
    return {int(s): float(w) for s, w in
            placed.group_by("step").agg(pl.col("wait").sum()).rows()}


def _gpu_span(ctx: Context) -> dict[int, int]:
    """Per rank: first device activity start to last end (``breakdown``'s span_ns)."""
    breakdown = ctx.result("breakdown")
    return {} if breakdown is None else per_rank_sum(breakdown.table, "span_ns")


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
