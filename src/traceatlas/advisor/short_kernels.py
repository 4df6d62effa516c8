"""Rule ``short_kernels``: a storm of kernels shorter than their own launch call.

From ``launch`` (one row per launched device activity): a *short* launch has ``gpu_ns <
cpu_launch_ns``: the device ran for less time than the host spent in the launch call
(the TensorBoard plugin's and HTA's short kernel), so a host launching back to back
cannot keep the device busy.

Trigger: on some rank, at least ``MIN_COUNT`` short launches making up at least
``MIN_SHARE`` of its launches.
Cost (ns): per rank, sum over its short launches of (min(cpu_launch_ns, median launch
call of the rank) - gpu_ns), clipped at 0: the host time per launch the device cannot
cover, i.e. the device idle time this launch rate forces when launches are issued back to
back. The median caps launch calls that block (full queue, implicit synchronisation),
which are not launch overhead. The largest over the ranks.
Statement: "Short-kernel storm: rank R launches N kernels that run shorter than their
launch call (P % of its launches), mostly NAME (xK)".
"""

from __future__ import annotations

from traceatlas.advisor.base import Context, Finding, fmt_ns, short_name

NAME = "short_kernels"
MIN_COUNT = 50
MIN_SHARE = 0.25


def check(ctx: Context) -> list[Finding]:
    """One finding for the rank whose short launches cost the most."""
    import polars as pl

    launch = ctx.result("launch")
    if launch is None or launch.table.height == 0:
        return []
    typical = pl.col("cpu_launch_ns").median().over("rank")
    table = launch.table.with_columns(
        short=pl.col("gpu_ns") < pl.col("cpu_launch_ns"),
        uncovered=(pl.min_horizontal("cpu_launch_ns", typical) - pl.col("gpu_ns")).clip(0))
    per_rank = (table.group_by("rank").agg(
        launches=pl.len(), short=pl.col("short").sum(),
        cost=pl.col("uncovered").filter(pl.col("short")).sum().round(),
        gpu=pl.col("gpu_ns").filter(pl.col("short")).sum(),
        cpu=pl.col("cpu_launch_ns").filter(pl.col("short")).sum())
        .filter((pl.col("short") >= MIN_COUNT)
                & (pl.col("short") >= MIN_SHARE * pl.col("launches")))
        .sort("cost", "rank", descending=[True, False]))
    if per_rank.height == 0:
        return []
    row = per_rank.row(0, named=True)
    rank, count, launches = int(row["rank"]), int(row["short"]), int(row["launches"])
    names = (table.filter((pl.col("rank") == rank) & pl.col("short"))
             .group_by("name").agg(pl.len().alias("n"))
             .sort("n", "name", descending=[True, False]).head(3).rows())
    top, top_n = str(names[0][0]), int(names[0][1])
    return [Finding(
        rule=NAME,
        statement=(f"Short-kernel storm: rank {rank} launches {count} kernels that run "
                   f"shorter than their launch call ({count / launches:.0%} of its "
                   f"launches), mostly {short_name(top)} (x{top_n})"),
        cost_ns=int(row["cost"]),
        evidence=(f"rank {rank}: {count} of {launches} launches shorter than the launch "
                  f"call; their device time {fmt_ns(row['gpu'])} vs host launch time "
                  f"{fmt_ns(row['cpu'])}; most frequent: "
                  + ", ".join(f"{short_name(str(n), 40)} x{c}" for n, c in names)
                  + f"; window {ctx.when(*ctx.window)}"),
        next_step=("Do more work per launch: fuse small ops (torch.compile), capture the "
                   "step in a CUDA graph, batch small tensors (foreach/multi-tensor ops)."),
        command=ctx.command("launch", "--ranks", str(rank), "--table", "summary"),
        metric="device_orchestration_efficiency",
    )]
