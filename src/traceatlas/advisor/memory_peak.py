"""Rule ``memory_peak``: the peak allocated memory is close to the device's capacity.

From the ``memory`` analysis' ``peaks``: a GPU whose ``peak_allocated_bytes`` is above
``THRESHOLD`` of its ``deviceProperties`` totalGlobalMem (no finding without it).
Cost: ``cost_bytes`` = the peak (memory, not time); severity ``high``.
Statement names the op and annotation at the peak and the top holders (``holders``).
"""

from __future__ import annotations

from traceatlas.advisor.base import Context, Finding
from traceatlas.advisor.memory_common import fmt_bytes, memory_result

NAME = "memory_peak"
THRESHOLD = 0.90
TOP = 3
NEXT_STEP = ("Lower the peak: activation checkpointing (torch.utils.checkpoint) on the "
             "largest blocks, a smaller micro-batch with gradient accumulation, bf16/fp16 "
             "activations, freeing references to large tensors before the peak; FSDP/ZeRO "
             "to shard parameters and optimizer state across ranks.")


def check(ctx: Context) -> list[Finding]:
    """One finding per (rank, GPU) whose peak exceeds ``THRESHOLD`` of its memory."""
    import polars as pl

    result = memory_result(ctx)
    if result is None:
        return []
    over = result.table.filter(pl.col("peak_share") > THRESHOLD)
    holders = result.extra["holders"]
    out = []
    for row in over.iter_rows(named=True):
        top = (holders.filter((pl.col("rank") == row["rank"])
                              & (pl.col("device") == row["device"])).head(TOP))
        named = "; ".join(f"{h['op']}" + (f" in {h['annotation']}" if h["annotation"] else "")
                          + f" {fmt_bytes(h['live_bytes'])}" for h in top.iter_rows(named=True))
        statement = (f"Peak memory {fmt_bytes(row['peak_allocated_bytes'])} on rank "
                     f"{row['rank']} {row['device']} is {row['peak_share']:.0%} of its "
                     f"{fmt_bytes(row['device_total_bytes'])}; top holders: {named}")
        evidence = (f"peak at {ctx.when(row['peak_ns'], row['peak_ns'])} (step {row['step']}, "
                    f"op {row['op']}, annotation {row['annotation']}); reserved then "
                    f"{fmt_bytes(row['reserved_at_peak_bytes'] or 0)}")
        where = {k: str(row[k]) for k in ("op", "annotation") if row[k]}
        out.append(Finding(
            rule=NAME, statement=statement, cost_ns=0, evidence=evidence,
            next_step=NEXT_STEP, command=ctx.command("memory", "--table", "holders",
                                                     "--ranks", str(row["rank"])),
            severity="high", cause="memory_peak", ranks=[int(row["rank"])], where=where,
            window_ns=(int(row["peak_ns"]), int(row["peak_ns"]) + 1),
            cost_bytes=int(row["peak_allocated_bytes"])))
    return out

