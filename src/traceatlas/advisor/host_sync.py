"""Rule ``host_sync``: the user's code makes the host wait for the GPU (synchronisations).

From the ``syncs`` analysis: the user's synchronisations (``source`` ``user``; those
inside collectives and PyTorch's own machinery, e.g. DDP's ``cudaEventSynchronize`` in
its forward, are left out and only counted in the evidence), inside steps when the trace
has steps.

Trigger: at least one user sync on some rank whose ``idle_after_ns`` sum is > 0.
Cost (ns): the largest, over the ranks, sum of the GPU idle that follows the rank's user
syncs (``idle_after_ns``: sync end -> next device activity of the rank).
Cause: ``pageable_copy`` when every user sync is a copy to or from pageable memory, else
``host_sync``. ``per_step`` (with steps): of the costliest rank, ``count`` the median user
syncs per step and ``ms`` the median GPU idle after them per step. ``ranks``: the ranks
with user syncs. ``where``: ``op`` the ops behind the syncs, most frequent first (the
runtime call when no op encloses it, e.g. ``cudaDeviceSynchronize``), ``annotation`` and
``call_site`` the most frequent ones when known.
Statement: "Host-device synchronisations: N per step on ranks R (OPS); the GPU idles X
per step after them, waiting for the host".
Efficiency estimate: 1 - cost / the costliest rank's step time (or trace span).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from traceatlas.advisor.base import Context, Finding, fmt_ns

if TYPE_CHECKING:
    import polars as pl

NAME = "host_sync"
TOP_NAMES = 3
"""At most this many ops, annotations or call sites named in ``where``."""

NEXT_STEP = {
    "host_sync": ("Keep values on the GPU: each .item(), .cpu()/.to('cpu'), .tolist(), "
                  "print(tensor), nonzero()/boolean-mask indexing or torch.cuda.synchronize() "
                  "in the step drains the GPU queue. Accumulate metrics on the device and read "
                  "them every N steps; copy to the host with non_blocking=True into pinned "
                  "memory and wait on a CUDA event only where the value is used."),
    "pageable_copy": ("Copy to or from pinned memory: allocate host buffers with "
                      "pin_memory=True (or tensor.pin_memory()), copy with "
                      "non_blocking=True and wait on a CUDA event only where the data is "
                      "used; for DataLoader batches set pin_memory=True."),
}
"""Cause -> next step."""


def check(ctx: Context) -> list[Finding]:
    """One finding over the ranks with user synchronisations."""
    import polars as pl

    result = ctx.result("syncs")
    if result is None or result.table.height == 0:
        return []
    per_step = result.extra["per_step"]
    has_steps = per_step.height > 0
    table = result.table
    if has_steps:
        table = table.filter(pl.col("step") >= 0)
    user = table.filter(pl.col("source") == "user")
    if user.height == 0:
        return []
    cost_by_rank = {int(r): int(c) for r, c in user.group_by("rank")
                    .agg(pl.col("idle_after_ns").sum()).iter_rows()}
    rank = min(cost_by_rank, key=lambda r: (-cost_by_rank[r], r))
    cost = cost_by_rank[rank]
    if cost <= 0:
        return []
    ranks = sorted(cost_by_rank)
    medians = _medians(per_step.filter(pl.col("source") == "user")) if has_steps else {}
    pageable = bool(user["pageable"].all())
    cause = "pageable_copy" if pageable else "host_sync"
    where = _where(user)
    count = medians.get(rank, (None, None))[0]
    per_step_fig = None
    if rank in medians:
        per_step_fig = {"ms": medians[rank][1] / 1e6, "count": float(medians[rank][0])}
    span = _rank_time(ctx, rank)
    ops_text = where.get("op", "no enclosing op")
    how_many = (f"{_num(count)} per step" if count is not None else f"{user.height}")
    on_ranks = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {_list(ranks)}"
    idle = (f"{fmt_ns(per_step_fig['ms'] * 1e6)} per step" if per_step_fig
            else fmt_ns(cost))
    what = "copies to or from pageable host memory" if pageable else "synchronisations"
    statement = (f"Host-device synchronisations: {how_many} on {on_ranks} ({ops_text}), "
                 f"{what} from the user's code; the GPU then idles {idle} on rank {rank} "
                 f"until the host launches again")
    return [Finding(
        rule=NAME, statement=statement, cost_ns=cost,
        evidence=_evidence(ctx, user, table, medians, cost_by_rank, per_step),
        next_step=NEXT_STEP[cause], command=ctx.command("syncs"),
        efficiency=max(0.0, 1 - cost / span) if span else None,
        cause=cause, ranks=ranks, per_step=per_step_fig, where=where,
    )]


def _medians(per_step: pl.DataFrame) -> dict[int, tuple[float, float]]:
    """Rank -> (median syncs per step, median idle ns per step)."""
    import polars as pl

    frame = per_step.group_by("rank").agg(pl.col("count").median(),
                                          pl.col("idle_ns").median())
    return {int(r): (float(c), float(i)) for r, c, i in frame.iter_rows()}


def _top(values: list[str | None]) -> list[tuple[str, int]]:
    """Non-null values by count (descending; ties by name)."""
    counts = Counter(v for v in values if v)
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def _where(user: pl.DataFrame) -> dict[str, str]:
    """``op`` (the op, else the runtime call), ``annotation``, ``call_site``."""
    ops = [op or call for op, call in zip(user["op"], user["call"], strict=True)]
    where: dict[str, str] = {}
    for key, values in (("op", ops), ("annotation", user["annotation"].to_list()),
                        ("call_site", user["call_site"].to_list())):
        top = _top(values)[:TOP_NAMES]
        if top:
            where[key] = ", ".join(name for name, _ in top)
    return where


def _evidence(ctx: Context, user: pl.DataFrame, table: pl.DataFrame,
              medians: dict[int, tuple[float, float]], cost_by_rank: dict[int, int],
              per_step: pl.DataFrame) -> str:
    import polars as pl

    parts = []
    for rank in sorted(cost_by_rank):
        mine = user.filter(pl.col("rank") == rank)
        text = (f"rank {rank}: {mine.height} user syncs, GPU idle after them "
                f"{fmt_ns(cost_by_rank[rank])}")
        if rank in medians:
            text += (f" ({_num(medians[rank][0])} and {fmt_ns(medians[rank][1])} per step, "
                     "medians)")
        parts.append(text)
    ops = [op or call for op, call in zip(user["op"], user["call"], strict=True)]
    parts.append("by op: " + ", ".join(f"{n} {c}" for n, c in _top(ops)))
    pageable = int(user["pageable"].sum())
    if pageable:
        parts.append(f"{pageable} of them (all ranks) copies to or from pageable memory")
    for source in ("framework", "collective"):
        other = table.filter(pl.col("source") == source)
        if other.height == 0:
            continue
        inside = ", ".join(n for n, _ in _top(other["inside"].to_list())[:TOP_NAMES])
        calls = ", ".join(n for n, _ in _top(other["call"].to_list())[:TOP_NAMES])
        rows = per_step.filter(pl.col("source") == source)
        median = rows.select(pl.col("count").median()).item() if rows.height else None
        per = f", {_num(float(median))} per step" if median is not None else ""
        parts.append(f"not counted: {other.height} {source} syncs{per} ({calls}"
                     f"{' in ' + inside if inside else ''})")
    parts.append(f"window {ctx.when(*ctx.window)}")
    return "; ".join(parts)


def _rank_time(ctx: Context, rank: int) -> int:
    """The rank's step time (sum of its step windows, ns), else the trace span."""
    import polars as pl

    steps = ctx.trace.intervals.filter((pl.col("category") == "step")
                                       & (pl.col("rank") == rank))
    total = steps.select((pl.col("end_ns") - pl.col("start_ns")).sum()).collect().item()
    return int(total) if total else ctx.span_ns


def _num(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


def _list(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks)) if len(ranks) <= 8 else (
        f"{', '.join(map(str, ranks[:8]))} and {len(ranks) - 8} more")
