"""Rule ``critical_path``: what bounds the critical path of the typical step.

Region: the typical step, the step number whose duration (longest over the ranks, from
the ``steps`` analysis) is the lower median over the steps; the whole trace when there
are no steps (up to ``MAX_WHOLE_ROWS`` intervals: bounded cost). One ``critical_path``
run over that region, every rank (cross-rank path): its memory is every rank's intervals
of that one step (it grows with the rank count, not with the number of steps).

Trigger: the bound holding the largest share of the path (``by_bound``) is a host bound
(``PROBLEM``: launch, cpu, sync, data_load), or ``gpu_compute``: then the finding
(severity info) names the top on-path kernel and suggests its what-if. A path dominated by
kernel_gap, gpu_comm, wait or comm gives no finding of its own: the exposed_comm,
load_imbalance, straggler and late_sender rules cost those (no double count); the path
still orders their findings (below).
Cost (ns): what shortening that bound can gain, per step, times the number of steps (the
run-total scale the other rules use; ``per_step.ms`` is the per-step figure), counted on
the path's part inside the step's window (the region runs on while device work launched
in the step ends):
the bound's on-path ns during which the rank's device is idle (no kernel, copy or memset
running; host time on the path while the device is busy is not what a faster host saves
first); for gpu_compute the top kernel's on-path ns (the most a faster kernel can gain).
Statement: "step N is 71% launch-bound on the critical path (cpu 20%, gpu_compute 9%)".
Command: ``traceatlas analyze critical_path PATH --step N`` (``-p speedup=^KERNEL$:2``
when gpu_compute dominates), shlex-quoted.

Ranking (``order``): once the path is known, a time finding whose ``where`` names a
kernel or op (and no annotation), none of them on the path, gets "off the critical path
of step N" in its evidence, and never ranks above this rule's finding: it moves to just
after it (the other findings keep their cost order). This rule's finding (severity info, a
summary of the step whose cost is time other findings also name) never ranks above a
high-severity time finding on the path. When the path is launch-bound and the rank already
replays CUDA graphs, the next step says so instead of suggesting graphs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from traceatlas.advisor.base import Context, Finding, fmt_ns, short_name
from traceatlas.errors import MissingDataError, TraceAtlasError

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.analysis.base import Result

NAME = "critical_path"
PROBLEM: Mapping[str, str] = {
    "launch": "Launches are late: the host issues kernels too slowly for the GPU. Fuse "
              "small kernels, use CUDA graphs (torch.compile mode='reduce-overhead') or "
              "larger batches.",
    "cpu": "Host code holds the step back: profile the on-path ops below (Python "
           "overhead, data preparation, framework work) and move work off the host.",
    "sync": "The host waits for the device: remove .item(), .cpu(), prints and "
            "synchronize calls from the step, or move them to its end.",
    "data_load": "Data loading is on the path: more DataLoader workers, pin_memory, "
                 "prefetching.",
}
"""Problem bound -> the next step."""
GRAPHED_LAUNCH = ("Launches are late, and the step already replays CUDA graphs ({graphs} "
                  "graph launches on the path's ranks): the late launches are outside "
                  "them: fuse those small ops or batch small tensors.")
_KEY = "critical_path@step"
DEVICE = ("kernel", "comm_kernel", "memcpy", "memset")
MAX_WHOLE_ROWS = 2_000_000
"""Without steps, the whole trace's path is computed only up to this many intervals."""


def typical_step(ctx: Context) -> tuple[int | None, int]:
    """(step number or None for the whole trace, number of steps) of the region."""
    import polars as pl

    steps = ctx.result("steps") if ctx.has("steps") else None
    if steps is None or steps.table.height == 0:
        return None, 1
    per = (steps.table.group_by("step").agg(pl.col("dur_ns").max())
           .sort("dur_ns", "step"))
    return int(per["step"][(per.height - 1) // 2]), per.height


def step_path(ctx: Context) -> tuple[int | None, int, Result] | None:
    """(step, steps, the ``critical_path`` result of the typical step), computed once per
    context; None when it cannot run or the path is empty."""
    cache = vars(ctx).setdefault(_KEY, {})
    if "result" not in cache:
        import polars as pl

        step, count = typical_step(ctx)
        rows = (0 if step is not None else
                int(ctx.trace.intervals.select(pl.len()).collect().item()))
        try:
            if rows > MAX_WHOLE_ROWS:
                raise MissingDataError(NAME, f"no steps and {rows:,} intervals: the "
                                       "whole-trace path is left to traceatlas analyze "
                                       "critical_path --window")
            region = ctx.trace.select(step=step) if step is not None else ctx.trace
            cache["result"] = ctx.on_view(region, NAME)  # shared with its command's check
        except TraceAtlasError as err:
            ctx.notes.append(f"skipped: critical_path: {err}")
            cache["result"] = None
        cache["step"], cache["count"] = step, count
    result: Result | None = cache["result"]
    if result is None or result.table.height == 0:
        return None
    return cache["step"], int(cache["count"]), result


def check(ctx: Context) -> list[Finding]:
    """One finding on the typical step's critical path (module doc)."""
    import polars as pl

    found = step_path(ctx)
    if found is None:
        return []
    step, count, result = found
    by = result.extra["by_bound"].filter(pl.col("ns") > 0)
    if by.height == 0:
        return []
    bound, ns, share = by.row(0)
    where_words = f"step {step}" if step is not None else "the run"
    others = ", ".join(f"{b} {s:.0%}" for b, _, s in by.slice(1, 3).iter_rows()
                       if s >= 0.005)
    statement = (f"{where_words} is {share:.0%} {bound}-bound on the critical path"
                 + (f" ({others})" if others else ""))
    path = result.table
    options = ["--step", str(step)] if step is not None else []
    top = _top_events(path, bound)
    inside = _clip_to_step(ctx, path, step)  # costs: the part of the path in the step
    where: dict[str, str] = {}
    severity = "info"
    if bound in PROBLEM:
        per = _exposed(ctx, inside, bound)
        next_step = PROBLEM[bound]
        graphs = _graph_launches(ctx, sorted({int(r) for r in path["rank"].unique()}))
        if bound == "launch" and graphs:
            next_step = GRAPHED_LAUNCH.format(graphs=graphs)
        command = ctx.command(NAME, *options)
    elif bound == "gpu_compute":
        kernels = _top_events(path, "gpu_compute")
        if kernels.height == 0:
            return []
        kernel, k_ns = str(kernels["name"][0]), int(kernels["on_path_ns"][0])
        where["kernel"] = kernel
        clipped = _top_events(inside, "gpu_compute").filter(pl.col("name") == kernel)
        per = int(clipped["on_path_ns"].sum())
        statement += (f"; the top kernel on it is {short_name(kernel)} "
                      f"({k_ns / max(int(ns), 1):.0%} of the path's GPU time)")
        next_step = ("The GPU work is the path: speed up the kernels on it. Ask the "
                     "what-if first: its command says how much the step shortens "
                     "if that kernel runs twice as fast.")
        command = ctx.command(NAME, *options, "-p",
                              f"speedup=^{re.escape(kernel)}$:2")
    else:
        return []
    ranks = sorted({int(r) for r in path["rank"].unique()})
    evidence = (f"critical path of {where_words}: {fmt_ns(int(path['on_path_ns'].sum()))} "
                f"in {path.height} segments; by bound: "
                + ", ".join(f"{b} {fmt_ns(n)} ({s:.0%})" for b, n, s in by.iter_rows())
                + "; top on-path events ("
                + bound + "): " + ", ".join(f"{short_name(str(n), 40)} {fmt_ns(v)}"
                                            for n, v in top.head(3).iter_rows()))
    lo, hi = int(path["start_ns"].min()), int(path["end_ns"].max())  # type: ignore[arg-type]
    return [Finding(
        rule=NAME, statement=statement, cost_ns=per * count, evidence=evidence,
        next_step=next_step, command=command, severity=severity,
        cause=_CAUSE.get(bound, "critical_path"), ranks=ranks,
        per_step={"ms": per / 1e6} if step is not None else None, where=where,
        window_ns=(lo, hi))]


_CAUSE: Mapping[str, str] = {"launch": "launch_bound", "sync": "host_sync",
                             "data_load": "data_loading", "wait": "load_imbalance",
                             "gpu_comm": "exposed_communication", "gpu_compute": "gpu_bound"}
"""Bound -> the ``causes.CAUSES`` word; other bounds: ``critical_path``."""


def _clip_to_step(ctx: Context, path: pl.DataFrame, step: int | None) -> pl.DataFrame:
    """The path's segments cut to the step's window (earliest start to latest end over
    the ranks; the region runs on past it while device work launched in the step ends)."""
    import polars as pl

    steps = ctx.result("steps") if step is not None else None
    if steps is None:
        return path
    rows = steps.table.filter(pl.col("step") == step)
    if rows.height == 0:
        return path
    lo, hi = int(rows["start_ns"].min()), int(rows["end_ns"].max())  # type: ignore[arg-type]
    return (path.with_columns(start_ns=pl.max_horizontal("start_ns", pl.lit(lo)),
                              end_ns=pl.min_horizontal("end_ns", pl.lit(hi)))
            .filter(pl.col("end_ns") > pl.col("start_ns"))
            .with_columns(on_path_ns=pl.col("end_ns") - pl.col("start_ns")))


def _exposed(ctx: Context, path: pl.DataFrame, bound: str) -> int:
    """On-path ns of ``bound`` while the segment's rank has no device activity running."""
    import numpy as np
    import polars as pl

    from traceatlas.ops.unions import union_segments

    seg = path.filter(pl.col("bound") == bound)
    if seg.height == 0:
        return 0
    lo, hi = int(seg["start_ns"].min()), int(seg["end_ns"].max())  # type: ignore[arg-type]
    busy = union_segments(ctx.trace.intervals.filter(
        pl.col("category").is_in(DEVICE) & (pl.col("end_ns") > lo)
        & (pl.col("start_ns") < hi)).select("rank", "start_ns", "end_ns"), ["rank"]
    ).collect()
    total = 0
    for (rank,), part in seg.group_by("rank"):
        b = busy.filter(pl.col("rank") == rank).sort("start_ns")
        s0, s1 = part["start_ns"].to_numpy(), part["end_ns"].to_numpy()
        total += int((s1 - s0).sum()) - _overlap(s0, s1, b["start_ns"].to_numpy(),
                                                  b["end_ns"].to_numpy(), np)
    return max(total, 0)


def _overlap(s0: Any, s1: Any, b0: Any, b1: Any, np: Any) -> int:
    """Sum over segments [s0, s1) of their overlap with disjoint sorted [b0, b1)."""
    if len(b0) == 0:
        return 0
    cum = np.concatenate([[0], np.cumsum(b1 - b0)])

    def covered(t: Any) -> Any:  # busy ns in (-inf, t)
        k = np.searchsorted(b0, t, side="right")  # segments starting at or before t
        last = np.maximum(k - 1, 0)
        part = np.where(k > 0, np.clip(t - b0[last], 0, b1[last] - b0[last]), 0)
        return cum[last] * (k > 0) + part

    return int((covered(s1) - covered(s0)).sum())


def _top_events(path: pl.DataFrame, bound: str) -> pl.DataFrame:
    """``name, on_path_ns`` of the path's events with that bound, largest first."""
    import polars as pl

    return (path.filter((pl.col("bound") == bound) & pl.col("event_start_ns").is_not_null())
            .group_by("name").agg(pl.col("on_path_ns").sum())
            .sort("on_path_ns", "name", descending=[True, False]))


def order(ctx: Context, ranked: list[Finding]) -> list[Finding]:
    """Time findings about work off the path after the others (module doc); unchanged
    when the path was not computed (the rule did not run)."""
    found = step_path(ctx) if _KEY in vars(ctx) else None
    if found is None:
        return ranked
    step, _, result = found
    names = set(result.table["name"].to_list())
    region = f"step {step}" if step is not None else "the run"
    off = []
    for f in ranked:
        named = [f.where[k] for k in ("kernel", "op") if k in f.where]
        if (f.rule != NAME and f.cost_bytes is None and named and "annotation" not in f.where
                and not names.intersection(named)):
            f.evidence += (f"; off the critical path of {region}: shortening it does not "
                           "shorten the step")
            off.append(id(f))
    mine = next((i for i, f in enumerate(ranked) if f.rule == NAME), None)
    if mine is None:
        return ranked
    path_finding = ranked[mine]
    # The path finding summarises the step (its cost is time other findings also name):
    # it goes at its own cost position, or after the last high-severity time finding on
    # the path if that is later; work off the path comes after it; the rest keeps its
    # cost order.
    on = [f for i, f in enumerate(ranked) if i != mine and id(f) not in off]
    high = [i for i, f in enumerate(on) if f.severity == "high" and f.cost_bytes is None]
    own = sum(1 for i, f in enumerate(ranked) if i < mine and id(f) not in off)
    cut = max(own, high[-1] + 1 if high else 0)
    # memory findings (bytes) stay after every time finding
    cut = min(cut, next((i for i, f in enumerate(on) if f.cost_bytes is not None), len(on)))
    return (on[:cut] + [path_finding] + [f for f in ranked if id(f) in off] + on[cut:])


def _graph_launches(ctx: Context, ranks: list[int]) -> int:
    """CUDA graph launch calls on ``ranks`` (``launch``'s ``graphs`` table), 0 when the
    launch analysis does not apply. Counted per rank (``launch`` on each rank alone; the
    counts the ``short_kernels`` rule already took when it ran)."""
    from traceatlas.advisor import per_rank
    from traceatlas.advisor.short_kernels import GRAPHS_KEY, RANK_TOTALS

    known: dict[int, int] = vars(ctx).get(GRAPHS_KEY, {})
    missing = [r for r in ranks if r not in known]
    counts = [known[r] for r in ranks if r in known]
    counts += [g for _, g in per_rank.map_ranks(ctx, RANK_TOTALS, missing)] if missing else []
    return sum(counts)
