"""Rule ``straggler``: one rank arrives last at most collectives, the others wait for it.

GPU (``collectives``: NCCL kernels matched across ranks, ``straggler`` = last to start)
and MPI (``mpi_collectives``: ``late_rank`` = last to enter). Only instances with two or
more ranks and a nonzero wait count (equal starts make nobody late).

Trigger: a rank is last at ``MIN_LAST`` or more instances and at a share of the instances
it joined of at least max(``MIN_SHARE``, 2 / ranks) (twice what chance gives; with two
ranks: every time).
Cost (ns): sum over the instances where it is last of the mean wait of the ranks in it:
GPU: max lag - mean lag (lag = start - first start, ``per_rank``); MPI:
``total_wait_ns`` / ranks. That is the time the ranks spend, on average, waiting for it.
Statement: "Straggler in collectives: rank R starts last in K of M NCCL collectives
(mostly OP); the other ranks wait X for it in total".

Machine-readable: ``ranks`` = [R]; ``where`` = {``op``: the collective it is mostly late
at}; ``per_step`` (with steps): ``ms`` = median over steps of the wait of the instances
where R is last (each instance in the step of R's start/enter), ``count`` = median number
of such instances per step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from traceatlas.advisor import stepwise
from traceatlas.advisor.base import Context, Finding, fmt_ns

if TYPE_CHECKING:
    import polars as pl

NAME = "straggler"
MIN_LAST = 3
MIN_SHARE = 0.5


@dataclass(frozen=True)
class _Late:
    rank: int
    last: int
    joined: int
    cost: int
    op: str
    ranks: int
    instants: tuple[tuple[int, float], ...] = ()
    """(start ns of the straggler, wait ns) of each instance where it is last."""


def check(ctx: Context) -> list[Finding]:
    """At most one GPU and one MPI straggler finding."""
    out = []
    for kind, late in (("NCCL", _gpu(ctx)), ("MPI", _mpi(ctx))):
        if late is not None:
            out.append(_finding(ctx, kind, late))
    return out


def _gpu(ctx: Context) -> _Late | None:
    import polars as pl

    result = ctx.result("collectives")
    if result is None or "per_rank" not in result.extra:
        return None
    multi = result.table.filter(pl.col("ranks") >= 2)
    waits = (result.extra["per_rank"].group_by("instance")
             .agg((pl.col("lag_ns").max() - pl.col("lag_ns").mean()).alias("wait")))
    t0 = ctx.window[0]
    starts = result.extra["per_rank"].select(
        "instance", pl.col("rank").alias("late"), (pl.col("start_ns") + t0).alias("at"))
    rows = multi.join(waits, on="instance").select(
        "instance", pl.col("straggler").alias("late"), "op", "ranks", "wait").join(
        starts, on=["instance", "late"], how="left")
    joined = _joined(result.extra["per_rank"], multi["instance"].to_list())
    return _pick(rows, joined)


def _mpi(ctx: Context) -> _Late | None:
    import polars as pl

    if not ctx.has("mpi"):
        return None
    result = ctx.result("mpi_collectives")
    if result is None or "per_rank" not in result.extra:
        return None
    multi = result.table.filter(pl.col("ranks") >= 2)
    starts = result.extra["per_rank"].select(
        "instance", pl.col("rank").alias("late"), pl.col("enter_ns").alias("at"))
    rows = multi.select("instance", pl.col("late_rank").alias("late"), "op", "ranks",
                        (pl.col("total_wait_ns") / pl.col("ranks")).alias("wait")).join(
        starts, on=["instance", "late"], how="left")
    joined = _joined(result.extra["per_rank"], multi["instance"].to_list())
    return _pick(rows, joined)


def _joined(per_rank: pl.DataFrame, instances: list[int]) -> dict[int, int]:
    """Per rank: how many of ``instances`` it joined."""
    import polars as pl

    counts = per_rank.filter(pl.col("instance").is_in(instances)).group_by("rank").len()
    return {int(r): int(n) for r, n in counts.rows()}


def _pick(rows: pl.DataFrame, joined: dict[int, int]) -> _Late | None:
    """The most frequent late rank of ``rows`` (late, op, ranks, wait) if it triggers."""
    import polars as pl

    rows = rows.filter(pl.col("late").is_not_null() & (pl.col("wait") > 0))
    if rows.height == 0:
        return None
    n_ranks = int(rows.select(pl.col("ranks").max()).item())
    per = (rows.group_by("late").agg(pl.len().alias("last"), pl.col("wait").sum(),
                                     pl.col("ranks").max(), pl.col("op").mode().first())
           .sort("last", "wait", "late", descending=[True, True, False]))
    row = per.row(0, named=True)
    rank, last = int(row["late"]), int(row["last"])
    share_needed = max(MIN_SHARE, 2 / max(n_ranks, 2))
    if last < MIN_LAST or last < share_needed * joined.get(rank, last):
        return None
    mine = rows.filter((pl.col("late") == rank) & pl.col("at").is_not_null())
    instants = tuple((int(a), float(w)) for a, w in mine.select("at", "wait").rows())
    return _Late(rank, last, joined.get(rank, last), round(row["wait"]), str(row["op"]),
                 n_ranks, instants)


def _per_step(ctx: Context, late: _Late) -> dict[str, float] | None:
    """Median per step of the straggler's wait cost (ms) and of its late instances."""
    import polars as pl

    steps = stepwise.windows(ctx)
    if steps is None or not late.instants:
        return None
    frame = pl.DataFrame({"rank": [late.rank] * len(late.instants),
                          "start_ns": [a for a, _ in late.instants],
                          "end_ns": [a for a, _ in late.instants],
                          "wait": [w for _, w in late.instants]},
                         schema={"rank": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64,
                                 "wait": pl.Float64})
    placed = stepwise.assign(frame, steps.filter(pl.col("rank") == late.rank))
    if placed.height == 0:
        return None
    per = placed.group_by("step").agg(pl.col("wait").sum(), pl.len().alias("n"))
    return stepwise.median_ms(per["wait"].to_list(), [float(n) for n in per["n"]])


def _finding(ctx: Context, kind: str, late: _Late) -> Finding:
    gpu = kind == "NCCL"
    return Finding(
        rule=NAME,
        statement=(f"Straggler in collectives: rank {late.rank} "
                   f"{'starts' if gpu else 'enters'} last in {late.last} of {late.joined} "
                   f"{kind} collectives (mostly {late.op}); the other ranks wait "
                   f"{fmt_ns(late.cost)} for it on average"),
        cost_ns=late.cost,
        evidence=(f"rank {late.rank} last at {late.last}/{late.joined} instances "
                  f"({late.last / late.joined:.0%}; chance with {late.ranks} ranks: "
                  f"{1 / late.ranks:.0%}); mean wait of the ranks summed over those "
                  f"instances {fmt_ns(late.cost)}; window {ctx.when(*ctx.window)}"),
        next_step=(f"Find what rank {late.rank} does before these collectives (compare its "
                   "steps with another rank's): extra compute, data loading, host "
                   "work, a slower GPU or link."),
        command=(ctx.command("collectives", "--table", "per_rank") if gpu
                 else ctx.command("mpi_collectives", "--table", "by_rank")),
        metric="device_load_balance" if gpu else "host_serialisation_efficiency",
        cause="straggler",
        ranks=[late.rank],
        per_step=_per_step(ctx, late),
        where={"op": late.op},
    )
