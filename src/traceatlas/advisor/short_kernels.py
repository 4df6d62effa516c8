"""Rule ``short_kernels``: a storm of launches whose device work is shorter than the call.

From ``launch``, one row per launch *call* (``launch.calls``): a CUDA graph launch is one
launch whose device time is the sum of its kernels, so graph kernels are never compared
with a launch call of their own. A *short* launch has device time < ``cpu_launch_ns``:
the device ran for less time than the host spent in the launch call (the TensorBoard
plugin's and HTA's short kernel), so a host launching back to back cannot keep the
device busy.

Trigger: on some rank, at least ``MIN_COUNT`` short launches making up at least
``MIN_SHARE`` of its launch calls.
Computed one rank at a time (``per_rank.map_ranks``: on the engine's workers when the
report has one): ``launch`` runs on each rank alone and sends back its totals; the client
holds one rank's launch calls (the costliest rank's, for the details), never every rank's.
Cost (ns): per rank, sum over its short launches of (min(cpu_launch_ns, median launch
call of the rank) - device time), clipped at 0: the host time per launch the device
cannot cover, i.e. the device idle time this launch rate forces when launches are issued
back to back. The median caps launch calls that block (full queue, implicit
synchronisation), which are not launch overhead. The largest over the ranks.
Statement: "Short-kernel storm: rank R launches N kernels that run shorter than their
launch call (P % of its launches), mostly NAME (K per step)".
Fields: ``where.kernel`` the most frequent short kernel (raw name), ``where.op`` the
operator that launched most of them (the ``cpu_op`` with the kernel's external id),
``where.annotation`` the innermost annotation around most of their launches (when any);
``per_step``: ``ms`` the median per-step cost, ``count`` the median per-step number of
short launches of ``where.kernel``. When the rank already replays CUDA graphs, the next
step does not suggest capturing one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from traceatlas.advisor import per_rank
from traceatlas.advisor.base import Context, Finding, fmt_ns, short_name

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

NAME = "short_kernels"
MIN_COUNT = 50
MIN_SHARE = 0.25
NEXT = ("Do more work per launch: fuse small ops (torch.compile), capture the step in a "
        "CUDA graph, batch small tensors (foreach/multi-tensor ops).")
NEXT_GRAPHED = ("The rank already replays CUDA graphs ({graphs} graph launches, {kernels} "
                "kernels, counted as {graphs} launches); the short launches are outside "
                "them: fuse those small ops or batch small tensors (foreach/multi-tensor "
                "ops).")


def check(ctx: Context) -> list[Finding]:
    """One finding for the rank whose short launches cost the most."""
    import polars as pl

    answers = per_rank.map_ranks(ctx, RANK_TOTALS, ctx.trace.ranks)
    graphs_of = {rank: g for rank, (_, g) in zip(sorted(ctx.trace.ranks), answers,
                                                 strict=True)}
    vars(ctx)[GRAPHS_KEY] = graphs_of  # critical_path's graph launches per rank
    totals = [t for t, _ in answers if t is not None]
    if not totals:
        ctx.result("launch")  # the whole run's note when no rank has launch data
        return []
    table = (pl.concat(totals)
             .filter((pl.col("short") >= MIN_COUNT)
                     & (pl.col("short") >= MIN_SHARE * pl.col("launches")))
             .sort("cost", "rank", descending=[True, False]))
    if table.height == 0:
        return []
    row = table.row(0, named=True)
    rank, count, launches = int(row["rank"]), int(row["short"]), int(row["launches"])
    launch = per_rank.rank_result(ctx.trace.select(ranks=[rank]), "launch")
    if launch is None:  # the rank had launch calls a moment ago (its totals)
        return []
    mine = _calls(launch.table)
    shorts = mine.filter(pl.col("short"))
    names = (shorts.group_by("name").agg(pl.len().alias("n"))
             .sort("n", "name", descending=[True, False]).head(3).rows())
    top, top_n = str(names[0][0]), int(names[0][1])
    per_step = _per_step(mine, top)
    where = {"kernel": top, **_origin(ctx, rank, shorts.filter(pl.col("name") == top))}
    graphs = mine.filter(pl.col("graph"))
    next_step = NEXT if graphs.height == 0 else NEXT_GRAPHED.format(
        graphs=graphs.height, kernels=int(graphs["kernels"].sum()))
    often = (f"{per_step['count']:.0f} per step" if per_step is not None
             else f"x{top_n}")
    by = f" from {where['op']}" if "op" in where else ""
    return [Finding(
        rule=NAME,
        statement=(f"Short-kernel storm: rank {rank} launches {count} kernels that run "
                   f"shorter than their launch call ({count / launches:.0%} of its "
                   f"launches), mostly {short_name(top)}{by} ({often})"),
        cost_ns=int(row["cost"]),
        evidence=(f"rank {rank}: {count} of {launches} launch calls (a graph launch counts "
                  f"once) shorter than the call; their device time {fmt_ns(row['gpu'])} vs "
                  f"host launch time {fmt_ns(row['cpu'])}; most frequent: "
                  + ", ".join(f"{short_name(str(n), 40)} x{c}" for n, c in names)
                  + f"; window {ctx.when(*ctx.window)}"),
        next_step=next_step,
        command=ctx.command("launch", "--ranks", str(rank), "--table", "summary"),
        metric="device_orchestration_efficiency",
        cause="short_kernels",
        ranks=sorted(int(r) for r in table["rank"]),
        per_step=per_step,
        where=where,
    )]


RANK_TOTALS = "traceatlas.advisor.short_kernels:rank_totals"
GRAPHS_KEY = "short_kernels@graphs"
"""Context attribute: {rank: CUDA graph launch calls} found by ``rank_totals``."""


def rank_totals(view: Trace, rank: int) -> tuple[pl.DataFrame | None, int]:
    """The mapped per-rank step (``per_rank.map_ranks``), on ``view`` (one rank): its
    ``_totals`` row (None without launch data) and its graph launch calls (``launch``'s
    ``graphs`` table rows)."""
    launch = per_rank.rank_result(view, "launch")
    if launch is None:
        return None, 0
    graphs = launch.extra.get("graphs")
    count = 0 if graphs is None else int(graphs.height)
    if launch.table.height == 0:
        return None, count
    return _totals(_calls(launch.table)), count


def _calls(launches: pl.DataFrame) -> pl.DataFrame:
    """One row per launch call (``launch.calls``) with ``short`` (device time < the
    call's) and ``uncovered`` (ns: min(call, the rank's median call) - device time, >= 0)."""
    import polars as pl

    from traceatlas.analysis.launch import calls

    typical = pl.col("cpu_launch_ns").median().over("rank")
    return calls(launches.lazy()).collect().with_columns(
        short=pl.col("gpu_ns") < pl.col("cpu_launch_ns"),
        uncovered=(pl.min_horizontal("cpu_launch_ns", typical) - pl.col("gpu_ns")).clip(0))


def _totals(table: pl.DataFrame) -> pl.DataFrame:
    """Per rank of ``_calls`` rows: launches, short launches, their cost, device and
    host ns."""
    import polars as pl

    return table.group_by("rank").agg(
        launches=pl.len(), short=pl.col("short").sum(),
        cost=pl.col("uncovered").filter(pl.col("short")).sum().round(),
        gpu=pl.col("gpu_ns").filter(pl.col("short")).sum(),
        cpu=pl.col("cpu_launch_ns").filter(pl.col("short")).sum())


def _per_step(calls: pl.DataFrame, top: str) -> dict[str, float] | None:
    """Median over the rank's steps (those with launches) of the short launches' cost
    (ms) and of the number of short launches of kernel ``top``; None without steps."""
    import polars as pl

    stepped = calls.filter(pl.col("step") >= 0)
    if stepped.height == 0:
        return None
    short = pl.col("short")
    steps = stepped.group_by("step").agg(
        ms=pl.col("uncovered").filter(short).sum() / 1e6,
        count=(short & (pl.col("name") == top)).sum())
    ms, count = steps.select(pl.col("ms").median(), pl.col("count").median()).row(0)
    return {"ms": float(ms or 0.0), "count": float(count or 0.0)}


def _origin(ctx: Context, rank: int, launches: pl.DataFrame) -> dict[str, str]:
    """The most frequent launching op (``cpu_op`` with the device row's external id) and
    innermost annotation of ``launches`` (rank, correlation) on ``rank``."""
    import polars as pl

    out: dict[str, str] = {}
    corr = launches.select("correlation")
    cat = pl.col("category")  # compared as stored (Categorical): no cast per row
    rows = ctx.trace.intervals.filter((pl.col("rank") == rank)
                                      & pl.col("correlation").is_not_null())
    device = (rows.filter(cat.is_in(("kernel", "comm_kernel", "memcpy", "memset")))
              .join(corr.lazy(), on="correlation", how="semi")
              .select("external_id").filter(pl.col("external_id").is_not_null()))
    ops = (ctx.trace.intervals.filter((pl.col("rank") == rank) & (cat == "cpu_op"))
           .select("external_id", pl.col("name").cast(pl.String))
           .join(device, on="external_id", how="inner")
           .group_by("name").agg(pl.len().alias("n"))
           .sort("n", "name", descending=[True, False]).head(1).collect())
    if ops.height:
        out["op"] = str(ops["name"][0])
    ann = per_rank.rank_result(ctx.trace.select(ranks=[rank]), "annotations")
    kernels = None if ann is None else ann.extra.get("kernels")
    if kernels is not None and "innermost" in kernels.columns:
        top = (kernels.filter((pl.col("rank") == rank) & pl.col("innermost").is_not_null())
               .join(corr, on="correlation", how="semi")
               .group_by("innermost").agg(pl.len().alias("n"))
               .sort("n", "innermost", descending=[True, False]).head(1))
        if top.height:
            out["annotation"] = str(top["innermost"][0])
    return out
