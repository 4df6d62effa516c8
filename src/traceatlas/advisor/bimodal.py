"""Rule ``bimodal``: a kernel whose durations fall into a fast and a slow group.

Trigger: ``kernels`` (by rank) flags the kernel ``bimodal`` (an empty stretch in its log
duration histogram with at least 10 % of the calls on each side).
Split: the durations of that kernel on that rank, sorted, are cut at the largest ratio
between neighbours that leaves at least ``MODE_MIN_FRACTION`` of the calls on each side.
Cost (ns): sum over the slow calls of (duration - median of the fast calls): the time
the slow calls take beyond a typical fast call. Per kernel name, the largest over the
ranks where it is flagged; at most ``MAX_FINDINGS`` kernels.
Statement: "Bimodal kernel durations: NAME takes either about F or about S (K of N calls
slow) on rank R".
"""

from __future__ import annotations

import math
import statistics

from traceatlas.advisor.base import Context, Finding, fmt_ns, short_name

NAME = "bimodal"
MODE_MIN_FRACTION = 0.1
MAX_FINDINGS = 3


def check(ctx: Context) -> list[Finding]:
    """One finding per bimodal kernel name (the costliest few)."""
    import polars as pl

    kernels = ctx.result("kernels")
    if kernels is None or "bimodal" not in kernels.table.columns:
        return []
    flagged = kernels.table.filter(pl.col("bimodal").fill_null(False)).select("rank", "name")
    if flagged.height == 0:
        return []
    durations = (ctx.trace.intervals
                 .filter(pl.col("category").cast(pl.String).is_in(("kernel", "comm_kernel")))
                 .select("rank", pl.col("name").cast(pl.String), "dur_ns")
                 .join(flagged.lazy(), on=["rank", "name"])
                 .group_by("rank", "name").agg(pl.col("dur_ns").sort())
                 .sort("rank", "name").collect())
    best: dict[str, tuple[int, int, list[int], list[int]]] = {}
    ranks: dict[str, list[int]] = {}
    for rank, name, values in durations.iter_rows():
        split = _split(list(values))
        if split is None:
            continue
        fast, slow = split
        cost = round(sum(slow) - len(slow) * statistics.median(fast))
        ranks.setdefault(name, []).append(int(rank))
        if name not in best or cost > best[name][0]:
            best[name] = (cost, int(rank), fast, slow)
    chosen = sorted(best.items(), key=lambda kv: (-kv[1][0], kv[0]))[:MAX_FINDINGS]
    return [_finding(ctx, name, ranks[name], *item) for name, item in chosen]


def _split(values: list[int]) -> tuple[list[int], list[int]] | None:
    """Sorted durations cut at the largest neighbour ratio with both sides big enough."""
    n = len(values)
    least = max(1, math.ceil(n * MODE_MIN_FRACTION))
    cut, ratio = None, 1.0
    for i in range(least - 1, n - least):
        low, high = values[i], values[i + 1]
        r = high / low if low > 0 else (float("inf") if high > 0 else 1.0)
        if r > ratio:
            cut, ratio = i + 1, r
    if cut is None:
        return None
    return values[:cut], values[cut:]


def _finding(ctx: Context, name: str, ranks: list[int], cost: int, rank: int,
             fast: list[int], slow: list[int]) -> Finding:
    n = len(fast) + len(slow)
    on = f"rank {rank}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"
    return Finding(
        rule=NAME,
        statement=(f"Bimodal kernel durations: {short_name(name)} takes either about "
                   f"{fmt_ns(statistics.median(fast))} or about "
                   f"{fmt_ns(statistics.median(slow))} ({len(slow)} of {n} calls slow) "
                   f"on {on}"),
        cost_ns=cost,
        evidence=(f"rank {rank}: fast calls {fmt_ns(min(fast))}-{fmt_ns(max(fast))} "
                  f"(median {fmt_ns(statistics.median(fast))}), slow calls "
                  f"{fmt_ns(min(slow))}-{fmt_ns(max(slow))} (median "
                  f"{fmt_ns(statistics.median(slow))}); slow calls beyond a fast one: "
                  f"{fmt_ns(cost)}; window {ctx.when(*ctx.window)}"),
        next_step=("Find what differs between fast and slow calls: input shapes or "
                   "dtypes, another stream running alongside, clock throttling, cache or "
                   "allocator effects; make the slow case the fast one or separate them."),
        command=ctx.command("kernels", "--ranks", str(rank), "--table", "histogram"),
    )
