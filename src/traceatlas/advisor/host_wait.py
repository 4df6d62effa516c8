"""Rule ``host_wait``: the GPU sits idle waiting for the host, and what the host was doing.

Per rank, the *main stream* is the stream with the most compute-kernel time
(``breakdown`` by stream ``compute_ns``; then the most busy time). Its host-wait gaps are
split by cause in ``idle``'s ``causes`` table (``analysis/idle_causes.py``: data loading,
host synchronisation, a collective on the host, launch-bound, untraced host time).

Trigger: one finding per cause whose time on some rank's main stream is at least
``MIN_SHARE`` of that stream's span. Cost (ns): the largest time of that cause over the
ranks. ``ranks``: the ranks where it reaches ``MIN_SHARE``; ``per_step``: median over the
steps of the costliest rank of the cause's time per step (ms) and, for ``launch_bound``,
``count`` = the median number of gaps per step where launching is the largest share (the
launches the GPU starved on); ``where``: the annotation and op of that rank's largest
share, and for ``launch_bound`` the ``kernel`` after most of those gaps. For
``host_collective`` the statement says that the
collective (e.g. DDP's gradient all-reduce over gloo) runs on the CPU and, when one rank's
main stream is busier than the median of the others by ``SLOW_RATIO`` (time-shared GPUs
differ by up to ~1.25x with nothing planted), that the other ranks wait for it there.
"""

from __future__ import annotations

from collections.abc import Mapping
from statistics import median
from typing import TYPE_CHECKING

from traceatlas.advisor.base import Context, Finding, fmt_ns

if TYPE_CHECKING:
    import polars as pl

NAME = "host_wait"
MIN_SHARE = 0.05
"""Fire for a cause taking at least this share of the main stream's span on some rank."""
SLOW_RATIO = 1.4
"""A rank whose main stream is busier than the others' median by this ratio is the slow one."""

METRIC: Mapping[str, str] = {"host_collective": "host_communication_efficiency"}
"""The POP metric a cause explains (host collectives: the host's communication efficiency,
where gloo time counts as communication); the others: device orchestration efficiency."""

ADVICE: Mapping[str, tuple[str, str]] = {
    "data_loading": (
        "loading data (DataLoader iteration on the launching thread)",
        "Load data ahead of the GPU: DataLoader num_workers > 0, prefetch_factor, "
        "pin_memory=True with non_blocking copies, lighter preprocessing in __getitem__."),
    "host_sync": (
        "host-device synchronisations (the queue drains while the host waits)",
        "Remove synchronisations from the loop: .item(), .cpu()/.to('cpu'), printing "
        "tensors, torch.cuda.synchronize(), nonzero/boolean indexing; keep values on the "
        "GPU until needed."),
    "host_collective": (
        "running a collective on the CPU",
        "Keep the collective on the GPU: the NCCL backend instead of gloo/MPI; with DDP, "
        "let gradient buckets overlap backward (bucket_cap_mb) and avoid waiting on the "
        "all-reduce; balance the slow rank's work first when one rank is slower."),
    "launch_bound": (
        "launching work too slowly (launch-bound: op dispatch and launch calls)",
        "Cut host overhead per step: torch.compile or CUDA graphs, larger batches, fewer "
        "small ops; profile the Python side of the step."),
    "untraced_host": (
        "recording nothing on the launching threads (Python or waits the profiler does "
        "not see)",
        "Record Python stacks (with_stack=True) or a py-spy profile of the step to see "
        "where the launching thread spends this time."),
}
"""Cause -> (words in the statement, next step)."""


def check(ctx: Context) -> list[Finding]:
    """One finding per host-wait cause that costs ``MIN_SHARE`` of a main stream's span."""
    import polars as pl

    idle = ctx.result("idle")
    streams = ctx.result("breakdown", by="stream")
    if idle is None or streams is None or "causes" not in idle.extra:
        return []
    compute = streams.table.select("rank", "device", "stream", "compute_ns")
    main = (idle.table.filter(pl.col("host_wait_ns").is_not_null())
            .join(compute, on=["rank", "device", "stream"], how="left")
            .sort("compute_ns", "busy_ns", "stream", descending=[True, True, False],
                  nulls_last=True)
            .group_by("rank", maintain_order=True).first())
    if main.height == 0:
        return []
    rows = idle.extra["causes"].join(main.select("rank", "device", "stream"),
                                     on=["rank", "device", "stream"], how="semi")
    per_rank = rows.group_by("rank", "cause").agg(pl.col("idle_ns").sum())
    span = dict(zip(main["rank"].to_list(), main["span_ns"].to_list(), strict=True))
    findings = []
    for cause in ADVICE:
        costs = {int(r): int(v) for r, c, v in per_rank.iter_rows() if c == cause}
        hit = sorted(r for r, v in costs.items() if span.get(r) and v >= MIN_SHARE * span[r])
        if hit:
            findings.append(_finding(ctx, cause, costs, hit, main, rows))
    return findings


def _finding(ctx: Context, cause: str, costs: dict[int, int], ranks: list[int],
             main: pl.DataFrame, rows: pl.DataFrame) -> Finding:
    import polars as pl

    rank = min(ranks, key=lambda r: (-costs[r], r))
    cost = costs[rank]
    row = main.filter(pl.col("rank") == rank).row(0, named=True)
    span, stream = int(row["span_ns"]), row["stream"]
    share = cost / span
    mine = rows.filter((pl.col("rank") == rank) & (pl.col("cause") == cause))
    top = mine.sort("idle_ns", descending=True).row(0, named=True)
    where = {k: str(top[k]) for k in ("annotation", "op") if top[k] is not None}
    kernel = (mine.filter(pl.col("kernel").is_not_null()).group_by("kernel")
              .agg(pl.col("gaps").sum()).sort("gaps", "kernel", descending=[True, False]))
    if kernel.height and cause == "launch_bound":
        where["kernel"] = str(kernel["kernel"][0])
    per_step = _per_step(rows.filter(pl.col("rank") == rank), cause)
    count = _per_step(rows.filter(pl.col("rank") == rank), cause, "gaps")
    words, next_step = ADVICE[cause]
    doing = f" in {where['op']}" if "op" in where else ""
    statement = (f"GPU idle waiting for the host: on rank {rank}, stream {stream} waits "
                 f"{fmt_ns(cost)} ({share:.0%} of its span) while the host is {words}"
                 f"{doing}")
    if per_step is not None:
        statement += f"; {fmt_ns(per_step * 1e6)} per step"
    if cause == "host_collective":
        statement += _collective_words(main, ranks)
    all_causes = (rows.filter(pl.col("rank") == rank).group_by("cause")
                  .agg(pl.col("idle_ns").sum()).sort("idle_ns", descending=True))
    return Finding(
        rule=NAME,
        statement=statement,
        cost_ns=cost,
        evidence=(f"rank {rank} device {row['device']} stream {stream}: span "
                  f"{fmt_ns(span)}, busy {fmt_ns(row['busy_ns'])}, host wait "
                  f"{fmt_ns(row['host_wait_ns'])}: "
                  + ", ".join(f"{c} {fmt_ns(v)}" for c, v in all_causes.iter_rows())
                  + f"; ranks {', '.join(map(str, ranks))}; window {ctx.when(*ctx.window)}"),
        next_step=next_step,
        command=ctx.command("idle", "--ranks", str(rank), "--table", "causes"),
        metric=METRIC.get(cause, "device_orchestration_efficiency"),
        efficiency=1 - share,
        cause=cause,
        ranks=ranks,
        per_step=(None if per_step is None else {"ms": per_step} if cause != "launch_bound"
                  or count is None else {"ms": per_step, "count": count * 1e6}),
        where=where,
    )


def _per_step(rows: pl.DataFrame, cause: str, column: str = "idle_ns") -> float | None:
    """Median over the rank's steps (>= 0) of the cause's ``column`` per step, / 1e6 (ms
    for ``idle_ns``); steps without that cause count 0. None without steps."""
    steps = sorted({int(s) for s in rows["step"].to_list() if s is not None and s >= 0})
    if not steps:
        return None
    mine = {int(s): int(v) for s, c, v in rows.select("step", "cause", column).iter_rows()
            if c == cause and s is not None and s >= 0}
    totals: dict[int, int] = {}
    for s, v in mine.items():
        totals[s] = totals.get(s, 0) + v
    return float(median(totals.get(s, 0) for s in steps)) / 1e6


def _collective_words(main: pl.DataFrame, ranks: list[int]) -> str:
    """"; it runs on the CPU" and, when one rank's GPU is busier than the others' median
    by ``SLOW_RATIO``, which ranks wait for which."""
    text = "; the collective (e.g. the gradient all-reduce over gloo) runs on the CPU"
    busy = {int(r): int(b) for r, b in main.select("rank", "busy_ns").iter_rows()}
    if len(busy) < 2:
        return text
    slow = min(busy, key=lambda r: (-busy[r], r))
    others = [b for r, b in busy.items() if r != slow]
    if busy[slow] >= SLOW_RATIO * median(others):
        waiting = [r for r in ranks if r != slow]
        if waiting:
            text += (f"; rank(s) {', '.join(map(str, waiting))} wait there for rank {slow}, "
                     f"whose GPU is busy {fmt_ns(busy[slow])} against a median "
                     f"{fmt_ns(median(others))} on the others")
    return text
