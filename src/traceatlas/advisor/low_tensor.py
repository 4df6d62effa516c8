"""Rule ``low_tensor``: matrix-multiply kernels that barely use the tensor cores.

Needs device counters (``counters``): a counter matching ``TENSOR_COUNTER`` (e.g. Nsight
Systems' ``Tensor Active``, CUPTI ``...tensor...pct...``) in percent, on kernels whose
name matches ``GEMM_KERNEL``.

Trigger: the kernel's mean tensor activity < ``LOW_PCT`` percent.
Cost (ns): the kernel's total time on the rank (``kernels`` total_ns) x (1 - mean / 100):
the GEMM time with the tensor cores idle, an upper bound of what better tensor-core use
recovers. Per kernel name, the largest over the ranks; at most ``MAX_FINDINGS`` kernels.
Statement: "Low tensor-core use in GEMMs: NAME keeps the tensor cores busy only P % of
its X on rank R".

Machine-readable: ``ranks`` = [R]; ``where`` = {``kernel``}; ``per_step.ms`` (with steps)
= median over R's steps of the kernel's time in the step x (1 - mean / 100).
"""

from __future__ import annotations

from traceatlas.advisor import stepwise
from traceatlas.advisor.base import Context, Finding, fmt_ns, short_name

NAME = "low_tensor"
TENSOR_COUNTER = r"(?i)tensor"
GEMM_KERNEL = r"(?i)gemm|matmul|cutlass|xmma|cublas|wgmma|hmma|mma_"
LOW_PCT = 20.0
MAX_FINDINGS = 3


def check(ctx: Context) -> list[Finding]:
    """One finding per GEMM kernel name with low tensor activity (the costliest few)."""
    import polars as pl

    counters = ctx.result("counters")
    kernels = ctx.result("kernels")
    if counters is None or kernels is None:
        return []
    low = (counters.table
           .filter(pl.col("counter").str.contains(TENSOR_COUNTER)
                   & pl.col("kernel").str.contains(GEMM_KERNEL)
                   & (pl.col("mean") < LOW_PCT))
           .group_by("rank", "kernel").agg(pl.col("counter").first(), pl.col("mean").min())
           .join(kernels.table.select("rank", pl.col("name").alias("kernel"), "total_ns",
                                      "count"), on=["rank", "kernel"])
           .with_columns(cost=(pl.col("total_ns") * (1 - pl.col("mean") / 100)).round())
           .sort("cost", "kernel", "rank", descending=[True, False, False])
           .unique("kernel", keep="first", maintain_order=True)
           .head(MAX_FINDINGS))
    return [Finding(
        rule=NAME,
        statement=(f"Low tensor-core use in GEMMs: {short_name(row['kernel'])} keeps the "
                   f"tensor cores busy only {row['mean']:.0f}% of its "
                   f"{fmt_ns(row['total_ns'])} on rank {row['rank']}"),
        cost_ns=int(row["cost"]),
        evidence=(f"rank {row['rank']}: {row['count']} calls, {fmt_ns(row['total_ns'])}; "
                  f"{row['counter']} mean {row['mean']:.1f}% (threshold {LOW_PCT:.0f}%); "
                  f"time with tensor cores idle {fmt_ns(row['cost'])}"),
        next_step=("Use tensor-core dtypes (bf16/fp16, or TF32: "
                   "torch.backends.cuda.matmul.allow_tf32 = True) and matrix sizes that are "
                   "multiples of 8 (16 for int8); check the GEMM shapes and layouts."),
        command=ctx.command("counters", "--ranks", str(row["rank"])),
        cause="low_tensor_use",
        ranks=[int(row["rank"])],
        per_step=_per_step(ctx, str(row["kernel"]), int(row["rank"]),
                           1 - float(row["mean"]) / 100),
        where={"kernel": str(row["kernel"])},
    ) for row in low.iter_rows(named=True)]


def _per_step(ctx: Context, name: str, rank: int, idle: float) -> dict[str, float] | None:
    """Median over ``rank``'s steps of the kernel's time in the step x ``idle`` (ms)."""
    import polars as pl

    steps = stepwise.windows(ctx)
    if steps is None:
        return None
    steps = steps.filter(pl.col("rank") == rank)
    calls = (ctx.trace.intervals
             .filter((pl.col("rank") == rank) & (pl.col("name").cast(pl.String) == name))
             .select("rank", "start_ns", "end_ns").collect())
    placed = stepwise.assign(calls, steps).with_columns(
        d=pl.col("end_ns") - pl.col("start_ns"))
    got = {int(s): float(v) for s, v in placed.group_by("step").agg(pl.col("d").sum()).rows()}
    return stepwise.median_ms([got.get(int(s), 0.0) * idle
                               for s in steps["step"].unique().to_list()])
