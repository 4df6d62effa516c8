"""Rule ``bimodal``: a kernel whose calls fall into a fast and a slow group.

Trigger: ``kernels`` (by rank) flags the kernel ``bimodal``: its log durations split into
two tight groups (separation >= 0.9), each with >= 20 % of the calls, the slow median
>= 1.5x the fast one, and the slow calls' excess >= 5 % of the rank's device busy time
(``traceatlas.analysis.kernel_modes``; the split is the ``modes`` table, not redone here).
Cost (ns): ``excess_ns``, the sum over the slow calls of (duration - median of the fast
calls): the time the slow calls take beyond a typical fast call. Per kernel name, the
largest over the ranks where it is flagged; at most ``MAX_FINDINGS`` kernels.
Statement: "Bimodal kernel durations: NAME takes either about F or about S (K of N calls
slow) on rank R".

Machine-readable: ``ranks`` = the ranks where the kernel is flagged; ``where`` =
{``kernel``}; ``per_step`` (with steps): on rank R, ``ms`` = median over steps of the sum
over its slow calls (duration >= the slow group's minimum) of (duration - fast median),
``count`` = median number of slow calls per step.
"""

from __future__ import annotations

from typing import Any

from traceatlas.advisor import stepwise
from traceatlas.advisor.base import Context, Finding, fmt_ns, short_name

NAME = "bimodal"
MAX_FINDINGS = 3


def check(ctx: Context) -> list[Finding]:
    """One finding per bimodal kernel name (the costliest few)."""
    import polars as pl

    kernels = ctx.result("kernels")
    if kernels is None or "modes" not in kernels.extra:
        return []
    flagged = kernels.extra["modes"].filter(pl.col("bimodal"))
    if flagged.height == 0:
        return []
    best: dict[str, dict[str, Any]] = {}
    ranks: dict[str, list[int]] = {}
    for row in flagged.sort("rank").iter_rows(named=True):
        name = str(row["name"])
        if int(row["rank"]) not in ranks.setdefault(name, []):  # one row per shape
            ranks[name].append(int(row["rank"]))
        if name not in best or row["excess_ns"] > best[name]["excess_ns"]:
            best[name] = row
    chosen = sorted(best.items(), key=lambda kv: (-kv[1]["excess_ns"], kv[0]))[:MAX_FINDINGS]
    return [_finding(ctx, name, ranks[name], row) for name, row in chosen]


def _finding(ctx: Context, name: str, ranks: list[int], row: dict[str, Any]) -> Finding:
    rank, cost = int(row["rank"]), int(row["excess_ns"])
    n = row["fast_count"] + row["slow_count"]
    on = f"rank {rank}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"
    fast, slow = row["fast_median_ns"], row["slow_median_ns"]
    return Finding(
        rule=NAME,
        statement=(f"Bimodal kernel durations: {short_name(name)} takes either about "
                   f"{fmt_ns(fast)} or about {fmt_ns(slow)} ({row['slow_count']} of {n} "
                   f"calls slow) on {on}"),
        cost_ns=cost,
        evidence=(f"rank {rank}: fast calls {fmt_ns(row['fast_min_ns'])}-"
                  f"{fmt_ns(row['fast_max_ns'])} (median {fmt_ns(fast)}), slow calls "
                  f"{fmt_ns(row['slow_min_ns'])}-{fmt_ns(row['slow_max_ns'])} (median "
                  f"{fmt_ns(slow)}); separation {row['separation']:.2f}; slow calls beyond "
                  f"a fast one: {fmt_ns(cost)} ({row['excess_pct']:.1f}% of the rank's "
                  f"device busy time); window {ctx.when(*ctx.window)}"),
        next_step=("Find what differs between fast and slow calls: input shapes or "
                   "dtypes, another stream running alongside, clock throttling, cache or "
                   "allocator effects; make the slow case the fast one or separate them."),
        command=ctx.command("kernels", "--ranks", str(rank), "--table", "histogram"),
        cause="bimodal_kernel",
        ranks=sorted(set(ranks)),
        per_step=_per_step(ctx, name, rank, int(row["slow_min_ns"]), float(fast)),
        where={"kernel": name},
    )


def _per_step(ctx: Context, name: str, rank: int, slow_min: int, fast: float
              ) -> dict[str, float] | None:
    """Median per step of the slow calls' excess over ``fast`` (ms) and their count."""
    import polars as pl

    steps = stepwise.windows(ctx)
    if steps is None:
        return None
    steps = steps.filter(pl.col("rank") == rank)
    calls = (ctx.trace.intervals
             .filter((pl.col("rank") == rank) & (pl.col("name").cast(pl.String) == name)
                     & pl.col("category").is_in(("kernel", "comm_kernel"))
                     & (pl.col("dur_ns") >= slow_min))
             .select("rank", "start_ns", "end_ns", "dur_ns").collect())
    placed = stepwise.assign(calls, steps).group_by("step").agg(
        (pl.col("dur_ns") - fast).sum().alias("excess"), pl.len().alias("n"))
    got = {int(s): (float(e), float(n)) for s, e, n in placed.rows()}
    every = [int(s) for s in steps["step"].unique().to_list()]
    return stepwise.median_ms([got.get(s, (0.0, 0.0))[0] for s in every],
                              [got.get(s, (0.0, 0.0))[1] for s in every])
