"""Rule ``load_imbalance``: one rank computes more than the others, who wait for it.

Device side (``breakdown``): compute per rank = the sum over its devices of the union of
compute kernels (``compute_ns``). Host side, MPI traces only (``profile`` by rank): useful
time per rank = exclusive time of every host function outside MPI and OpenMP.

Trigger: at least two ranks and balance = mean / max < ``BALANCE_TRIGGER``.
Cost (ns): max - mean = sum over ranks of (max - own) / ranks: the time every rank, on
average, would wait for the most loaded one at a synchronisation.
Statement: "GPU load imbalance: rank R computes X.XXx the mean of the N ranks; the others
wait for it (mostly in KERNEL)" (host: "... outside MPI ... (mostly in REGION)").
The kernels (``kernels`` by rank) or regions (``load_imbalance``) named are those whose
time on rank R most exceeds their mean over the ranks.

Machine-readable: ``ranks`` = [R]; ``where`` = the kernel (device) or the region
(host: ``annotation`` for annotations/NVTX/user regions, else ``op``) carrying the most
excess; ``per_step.ms`` (device, with steps) = median over steps of (max - mean) over
the ranks of the compute-kernel union in the step window (a rank without compute in a
step counts 0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from traceatlas.advisor import stepwise
from traceatlas.advisor.base import Context, Finding, fmt_ns, heaviest, per_rank_sum, short_name

if TYPE_CHECKING:
    import polars as pl

NAME = "load_imbalance"
BALANCE_TRIGGER = 0.95
"""Fire when mean / max of the per-rank compute is below this (5 % imbalance)."""
RUNTIME_CATEGORIES = ("mpi", "openmp")
"""Host categories that are parallel-runtime time, not useful work."""
ANNOTATION_CATEGORIES = ("annotation", "gpu_annotation", "nvtx", "region", "python")
"""Host categories named in ``where`` as an ``annotation`` (the rest as an ``op``)."""


def check(ctx: Context) -> list[Finding]:
    """Device imbalance (GPU compute kernels) and host imbalance (MPI traces)."""
    return [f for f in (_device(ctx), _host(ctx)) if f is not None]


def _device(ctx: Context) -> Finding | None:
    breakdown = ctx.result("breakdown")
    if breakdown is None:
        return None
    compute = {r: v for r, v in per_rank_sum(breakdown.table, "compute_ns").items() if v > 0}
    found = _imbalance(compute)
    if found is None:
        return None
    rank, mean, balance = found
    kernels = ctx.result("kernels")
    excess = _excess(kernels.table.filter(kernels.table["category"] == "kernel"), rank,
                     len(compute)) if kernels is not None else []
    finding = _finding(ctx, "GPU load imbalance", "computes", rank, compute, mean, balance,
                       excess, "device_load_balance",
                    "GPU compute per rank (union of compute kernels)",
                    "Give rank {r} less work (data sharding, sequence lengths, pipeline "
                    "stage sizes) or find why its kernels take longer; compare its kernels "
                    "with another rank's.",
                       ctx.command("kernels", "--ranks", str(rank)))
    if excess:
        finding.where = {"kernel": excess[0][0]}
    finding.per_step = _device_per_step(ctx, sorted(compute))
    return finding


def _device_per_step(ctx: Context, ranks: list[int]) -> dict[str, float] | None:
    """Median over steps of max - mean of the per-rank compute-kernel union (ns -> ms)."""
    import polars as pl

    steps = stepwise.windows(ctx)
    if steps is None:
        return None
    per = stepwise.rank_unions(ctx, sorted(set(ranks)),
                               pl.col("category") == "kernel", steps,
                               "compute")
    got = {(int(r), int(s)): float(v) for r, s, v in per.select("rank", "step", "compute").rows()}
    costs = []
    for step in steps["step"].unique().to_list():
        values = [got.get((r, int(step)), 0.0) for r in ranks]
        costs.append(max(values) - sum(values) / len(values))
    return stepwise.median_ms(costs)


def _host(ctx: Context) -> Finding | None:
    if not ctx.has("mpi"):
        return None
    profile = ctx.result("profile", by="rank")
    if profile is None:
        return None
    table = profile.table.filter(~profile.table["category"].is_in(RUNTIME_CATEGORIES))
    useful = {r: v for r, v in per_rank_sum(table, "exclusive_ns").items() if v > 0}
    model = _model_useful(ctx)
    if model:  # the efficiency model's useful time (Paraver: the Running state)
        useful = model
    found = _imbalance(useful)
    if found is None:
        return None
    rank, mean, balance = found
    excess = _excess(table.rename({"exclusive_ns": "total_ns"}), rank, len(useful))
    finding = _finding(ctx, "Load imbalance", "computes outside MPI", rank, useful, mean,
                    balance, excess, "host_load_balance",
                    "useful time per rank (the efficiency model's; without it, exclusive "
                    "time outside MPI/OpenMP)",
                    "Rebalance the domain decomposition or work distribution so rank {r} "
                    "gets less; the other ranks wait for it in MPI.",
                    ctx.command("load_imbalance", "-p", "num_ranks=3"))
    if excess:
        kinds = dict(table.select("name", "category").unique("name").rows())
        kind = ("annotation" if str(kinds.get(excess[0][0])) in ANNOTATION_CATEGORIES
                else "op")
        finding.where = {kind: excess[0][0]}
    return finding


def _model_useful(ctx: Context) -> dict[int, int]:
    """Host useful time per rank from the efficiency model (whole run), when it ran."""
    result = ctx.result("efficiency")
    if result is None or "per_rank" not in result.extra:
        return {}
    rows = result.extra["per_rank"]
    rows = rows.filter((rows["side"] == "host") & (rows["scope"] == "run"))
    return {r: v for r, v in per_rank_sum(rows, "useful_ns").items() if v > 0}


def _imbalance(values: dict[int, int]) -> tuple[int, float, float] | None:
    """(most loaded rank, mean, mean / max) when the trigger holds."""
    if len(values) < 2:
        return None
    rank, top = heaviest(values)
    mean = sum(values.values()) / len(values)
    balance = mean / top
    if balance >= BALANCE_TRIGGER:
        return None
    return rank, mean, balance


def _excess(table: pl.DataFrame, rank: int, ranks: int) -> list[tuple[str, float]]:
    """Names whose total on ``rank`` most exceeds their mean over ``ranks`` (absent = 0):
    up to two, positive excess only, largest first."""
    import polars as pl

    sums = table.group_by("rank", "name").agg(pl.col("total_ns").sum())
    mean = sums.group_by("name").agg((pl.col("total_ns").sum() / ranks).alias("mean"))
    own = sums.filter(pl.col("rank") == rank).join(mean, on="name")
    rows = (own.with_columns(excess=pl.col("total_ns") - pl.col("mean"))
            .filter(pl.col("excess") > 0).sort("excess", "name", descending=[True, False])
            .head(2).select("name", "excess").rows())
    return [(str(n), float(e)) for n, e in rows]


def _finding(ctx: Context, title: str, verb: str, rank: int, values: dict[int, int],
             mean: float, balance: float, excess: list[tuple[str, float]], metric: str,
             what: str, next_step: str, command: str) -> Finding:
    low = min(values, key=lambda r: (values[r], r))
    top = values[rank]
    where = f" (mostly in {short_name(excess[0][0])})" if excess else ""
    named = "; ".join(f"{short_name(n)} +{fmt_ns(e)} over its mean" for n, e in excess)
    start, end = ctx.window
    return Finding(
        rule=NAME,
        statement=(f"{title}: rank {rank} {verb} {top / mean:.2f}x the mean of the "
                   f"{len(values)} ranks; the others wait for it{where}"),
        cost_ns=round(top - mean),
        evidence=(f"{what}: max {fmt_ns(top)} (rank {rank}), mean {fmt_ns(mean)}, min "
                  f"{fmt_ns(values[low])} (rank {low}); balance mean/max {balance:.2f}"
                  + (f"; {named}" if named else "") + f"; window {ctx.when(start, end)}"),
        next_step=next_step.format(r=rank),
        command=command,
        metric=metric,
        efficiency=balance,
        cause="load_imbalance",
        ranks=[rank],
    )
