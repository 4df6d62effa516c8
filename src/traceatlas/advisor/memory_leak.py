"""Rule ``memory_leak``: allocated memory grows step after step.

From the ``memory`` analysis' ``steps`` (allocated bytes at each step start) and
``carried`` (bytes allocated in a step still live at its end, per op): per (rank, device)
with at least ``MIN_STEPS`` steps, a leak is allocated memory that never falls from one
step start to the next and rises at ``RISE_SHARE`` of them or more, by at least
``MIN_GROWTH_BYTES`` in all (and ``MIN_GROWTH_SHARE`` of the peak). The op named is the
one that carries bytes past the end of the most steps (ties: the most bytes).
Cost: ``cost_bytes`` = growth from the first to the last step start; severity from the
share of device memory (``memory_common.severity``), cause ``memory_growth``.
"""

from __future__ import annotations

from traceatlas.advisor.base import Context, Finding
from traceatlas.advisor.memory_common import fmt_bytes, memory_result, severity

NAME = "memory_leak"
MIN_STEPS = 3
RISE_SHARE = 2 / 3
MIN_GROWTH_BYTES = 16 * 2**20
MIN_GROWTH_SHARE = 0.01
NEXT_STEP = ("Find what keeps a reference across steps: tensors appended to a list or "
             "dict (losses/logits/outputs kept for logging: store loss.item() or "
             ".detach().cpu() summaries instead), a growing cache, or a graph kept alive by "
             "an undetached tensor; torch.cuda.memory._record_memory_history() and "
             "_dump_snapshot() show the allocation's stack.")


def check(ctx: Context) -> list[Finding]:
    """One finding per (rank, device) whose allocated memory grows every step."""
    import polars as pl

    result = memory_result(ctx)
    if result is None:
        return []
    steps, carried, peaks = result.extra["steps"], result.extra["carried"], result.table
    out = []
    for (rank, device), group in steps.group_by("rank", "device", maintain_order=True):
        group = group.sort("step")
        growth = group["growth_bytes"].drop_nulls()
        if group.height < MIN_STEPS or growth.len() == 0:
            continue
        total = int(group["allocated_bytes"][-1] - group["allocated_bytes"][0])
        peak = peaks.filter((pl.col("rank") == rank) & (pl.col("device") == device))
        peak_bytes = int(peak["peak_allocated_bytes"][0]) if peak.height else 0
        dev_total = peak["device_total_bytes"][0] if peak.height else None
        rises = int((growth > 0).sum())
        if (bool((growth < 0).any()) or rises < RISE_SHARE * growth.len()
                or total < max(MIN_GROWTH_BYTES, MIN_GROWTH_SHARE * peak_bytes)):
            continue
        mine = carried.filter((pl.col("rank") == rank) & (pl.col("device") == device))
        per_op = (mine.group_by("op").agg(pl.col("step").n_unique().alias("steps"),
                                          pl.col("carried_bytes").sum())
                  .sort(["steps", "carried_bytes", "op"], descending=[True, True, False],
                        nulls_last=True))
        op = per_op["op"][0] if per_op.height else None
        op_text = (f"; {op} keeps {fmt_bytes(per_op['carried_bytes'][0] / per_op['steps'][0])}"
                   f" per step alive" if op else "")
        n_steps = group.height - 1
        statement = (f"Memory grows step after step on rank {rank} {device}: "
                     f"+{fmt_bytes(total / n_steps)} per step "
                     f"({fmt_bytes(total)} over {n_steps} steps){op_text}")
        values = ", ".join(fmt_bytes(v) for v in group["allocated_bytes"].to_list()[:8])
        evidence = (f"allocated at step starts {int(group['step'][0])}..."
                    f"{int(group['step'][-1])}: {values}"
                    f"{' ...' if group.height > 8 else ''}; rose at {rises} of "
                    f"{growth.len()} step boundaries, never fell")
        out.append(Finding(
            rule=NAME, statement=statement, cost_ns=0, evidence=evidence,
            next_step=NEXT_STEP,
            command=ctx.command("memory", "--table", "carried", "--ranks", str(rank)),
            severity=severity(total, dev_total), cause="memory_growth", ranks=[int(rank)],
            where={"op": str(op)} if op else {},
            window_ns=(int(group["start_ns"][0]), int(group["end_ns"][-1])),
            cost_bytes=total))
    return out
