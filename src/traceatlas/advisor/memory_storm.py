"""Rule ``memory_storm``: many small allocations every step.

From the ``memory`` analysis' ``steps``: per (rank, device), the median number of
allocations per step is at least ``MIN_PER_STEP`` and their median size (bytes allocated
per step / allocations) is below ``SMALL_BYTES``. Each allocation is a call into the
caching allocator (and a free later); thousands per step are host time and fragment the
cache. Cost: ``cost_bytes`` = median bytes allocated per step; severity ``info``.
"""

from __future__ import annotations

from traceatlas.advisor.base import Context, Finding
from traceatlas.advisor.memory_common import fmt_bytes, memory_result

NAME = "memory_storm"
MIN_PER_STEP = 2000
SMALL_BYTES = 64 * 2**10
NEXT_STEP = ("Allocate less often: preallocate buffers and write into them (out=, in-place "
             "ops), fuse elementwise chains (torch.compile), batch small tensors into one "
             "(torch.cat / foreach ops), and keep per-step Python scalars off the GPU.")


def check(ctx: Context) -> list[Finding]:
    """One finding per (rank, device) with an allocation storm in its steps."""
    import polars as pl

    result = memory_result(ctx)
    if result is None:
        return []
    steps = result.extra["steps"]
    per = steps.group_by("rank", "device", maintain_order=True).agg(
        pl.col("allocations").median().alias("n"), pl.col("alloc_bytes").median().alias("b"),
        pl.len().alias("steps"), pl.col("start_ns").min(), pl.col("end_ns").max())
    out = []
    for row in per.iter_rows(named=True):
        n, nbytes = row["n"] or 0, row["b"] or 0
        if n < MIN_PER_STEP or nbytes / n >= SMALL_BYTES:
            continue
        statement = (f"Allocation storm on rank {row['rank']} {row['device']}: "
                     f"{n:.0f} allocations per step of {fmt_bytes(nbytes / n)} on average")
        evidence = (f"median over {row['steps']} steps: {n:.0f} allocations, "
                    f"{fmt_bytes(nbytes)} per step")
        out.append(Finding(
            rule=NAME, statement=statement, cost_ns=0, evidence=evidence, next_step=NEXT_STEP,
            command=ctx.command("memory", "--table", "by_op", "--ranks", str(row["rank"])),
            severity="info", cause="memory_storm", ranks=[int(row["rank"])],
            per_step={"count": float(n)},
            window_ns=(int(row["start_ns"]), int(row["end_ns"])), cost_bytes=int(nbytes)))
    return out
