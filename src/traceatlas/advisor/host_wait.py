"""Rule ``host_wait``: the GPU sits idle waiting for the host to launch work.

Per rank, the *main stream* is the stream with the most compute-kernel time
(``breakdown`` by stream ``compute_ns``; then the most busy time): its ``host_wait_ns``
(``idle``) is idle time before activity whose launch call started after the stream had
run dry (HTA's host wait).

Trigger: host wait >= ``MIN_SHARE`` of the main stream's span on some rank.
Cost (ns): the largest main-stream ``host_wait_ns`` over the ranks.
Cause, named in the statement: ``steps`` ``dataloader_ns`` of that rank when it is at
least ``CAUSE_SHARE`` of the host wait (the data loader), else host synchronisation calls
(runtime/driver calls named ``*Synchronize*``, summed durations) when they are, else the
host launching work too slowly (launch-bound: Python and operator overhead).
Statement: "GPU idle waiting for the host: on rank R, stream S waits X (P % of its span)
for work to be launched; likely cause: CAUSE".
"""

from __future__ import annotations

from collections.abc import Mapping

from traceatlas.advisor.base import Context, Finding, fmt_ns, per_rank_sum

NAME = "host_wait"
MIN_SHARE = 0.05
"""Fire when host wait is at least this share of the main stream's span."""
CAUSE_SHARE = 0.25
"""A candidate cause must account for this share of the host wait to be named."""
SYNC_PATTERN = r"(?i)synchronize"

CAUSES: Mapping[str, tuple[str, str]] = {
    "dataloader": ("the data loader (enumerate(DataLoader) in the steps)",
                   "Load data ahead of the GPU: more DataLoader workers, pin_memory=True, "
                   "prefetching, lighter preprocessing."),
    "sync": ("host synchronisations (cuda*Synchronize calls)",
             "Remove synchronisations from the loop: .item(), .cpu(), print of tensors, "
             "torch.cuda.synchronize(); keep values on the GPU until needed."),
    "launch": ("the host launching work too slowly (launch-bound)",
               "Cut host overhead per step: torch.compile or CUDA graphs, larger batches, "
               "fewer small ops; profile the Python side of the step."),
}
"""Cause -> (words in the statement, next step)."""


def check(ctx: Context) -> list[Finding]:
    """One finding for the rank whose main stream waits longest for the host."""
    import polars as pl

    idle = ctx.result("idle")
    streams = ctx.result("breakdown", by="stream")
    if idle is None or streams is None:
        return []
    compute = streams.table.select("rank", "device", "stream", "compute_ns")
    main = (idle.table.filter(pl.col("host_wait_ns").is_not_null())
            .join(compute, on=["rank", "device", "stream"], how="left")
            .sort("compute_ns", "busy_ns", "stream", descending=[True, True, False],
                  nulls_last=True)
            .group_by("rank", maintain_order=True).first())
    candidates = [r for r in main.iter_rows(named=True)
                  if r["span_ns"] and r["host_wait_ns"] >= MIN_SHARE * r["span_ns"]]
    if not candidates:
        return []
    row = min(candidates, key=lambda r: (-r["host_wait_ns"], r["rank"]))
    rank, cost, span = int(row["rank"]), int(row["host_wait_ns"]), int(row["span_ns"])
    causes = {"dataloader": _dataloader(ctx).get(rank, 0), "sync": _sync(ctx).get(rank, 0)}
    cause = max(causes, key=lambda c: causes[c])
    if causes[cause] < CAUSE_SHARE * cost:
        cause = "launch"
    words, next_step = CAUSES[cause]
    share = cost / span
    command = (ctx.command("steps", "--ranks", str(rank)) if cause == "dataloader"
               else ctx.command("idle", "--ranks", str(rank)))
    return [Finding(
        rule=NAME,
        statement=(f"GPU idle waiting for the host: on rank {rank}, stream {row['stream']} "
                   f"waits {fmt_ns(cost)} ({share:.0%} of its span) for work to be "
                   f"launched; likely cause: {words}"),
        cost_ns=cost,
        evidence=(f"rank {rank} device {row['device']} stream {row['stream']}: span "
                  f"{fmt_ns(span)}, busy {fmt_ns(row['busy_ns'])}, host wait {fmt_ns(cost)}; "
                  f"data loader {fmt_ns(causes['dataloader'])}, synchronisation calls "
                  f"{fmt_ns(causes['sync'])}; window {ctx.when(*ctx.window)}"),
        next_step=next_step,
        command=command,
        metric="device_orchestration_efficiency",
        efficiency=1 - share,
    )]


def _dataloader(ctx: Context) -> dict[int, int]:
    if not ctx.has("steps"):
        return {}
    steps = ctx.result("steps")
    if steps is None or "dataloader_ns" not in steps.table.columns:
        return {}
    return per_rank_sum(steps.table, "dataloader_ns")


def _sync(ctx: Context) -> dict[int, int]:
    """Per rank: summed duration of host runtime/driver synchronisation calls (ns)."""
    import polars as pl

    frame = (ctx.trace.intervals
             .filter(pl.col("category").cast(pl.String).is_in(("runtime", "driver"))
                     & pl.col("name").cast(pl.String).str.contains(SYNC_PATTERN))
             .group_by("rank").agg(pl.col("dur_ns").sum()).collect())
    return {int(r): int(v) for r, v in frame.iter_rows()}
