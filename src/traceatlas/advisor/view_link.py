"""From a finding to the map: the ``traceatlas view`` command (and viewer URL) that opens
the trace viewer where the finding's evidence points.

Window (absolute epoch ns), in order:

1. the rule's own window (``Finding.window_ns``) when it sets one;
2. with steps (``steps`` analysis): the step where the finding is worst, by the rule's
   per-step measure (``STEP_COST``) on the finding's ranks: ``load_imbalance`` max - mean
   over the ranks of the compute-kernel union in the step; ``host_wait`` the cause's idle
   time on the finding's ranks; ``straggler`` the waits of the collectives where its rank
   starts last (each in the step of its start); any other rule that points at a name
   (``where``: kernel, op or annotation) the union of that name's intervals on its ranks.
   The window is that step's window on the finding's ranks (earliest start to latest end);
   a tie goes to the earliest step;
3. else the whole run (first interval start to last end).

Ranks: the finding's ranks, as spans (``0-3,7``); no ``--ranks`` when it names none or all
of them. The command is ``shlex.join``-quoted like the other suggested commands.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from traceatlas.advisor import stepwise
from traceatlas.advisor.base import Context, Finding
from traceatlas.errors import InputError
from traceatlas.ops.select import merge_spans, parse_rank_spans

if TYPE_CHECKING:
    import polars as pl

VIEW_URL = "http://127.0.0.1:8765/"
"""The viewer's default address (``traceatlas view`` binds 127.0.0.1:8765)."""

StepCost = Callable[[Context, Finding, "pl.DataFrame"], dict[int, float]]


def rank_spec(ranks: Iterable[int]) -> str:
    """``[0, 1, 2, 3, 7]`` -> ``"0-3,7"`` (``parse_rank_spans`` syntax)."""
    spans = merge_spans((r, r) for r in ranks)
    return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in spans)


def view_ranks(ctx: Context, finding: Finding) -> list[int]:
    """The finding's ranks; empty when it names none or every rank of the trace."""
    ranks = sorted(set(finding.ranks))
    return [] if set(ranks) >= set(ctx.trace.ranks) else ranks


def view_window(ctx: Context, finding: Finding) -> tuple[int, int]:
    """(start_ns, end_ns), absolute, where the finding's evidence points (module doc)."""
    if finding.window_ns is not None:
        return finding.window_ns
    worst = _worst_step(ctx, finding)
    return worst if worst is not None else ctx.window


def view_command(path: str, window: tuple[int, int], ranks: list[int]) -> str:
    """``traceatlas view PATH --window @A:@B [--ranks R]``, quoted for a POSIX shell; a
    relative path starting with ``-`` gets ``./``."""
    path = f"./{path}" if path.startswith("-") else path
    args = ["traceatlas", "view", path, "--window", f"@{window[0]}:@{window[1]}"]
    if ranks:
        args += ["--ranks", rank_spec(ranks)]
    return shlex.join(args)


def view_url(command: str, base: str = VIEW_URL) -> str:
    """The viewer URL (``#start=A&end=B&ranks=LO-HI``: absolute ns, and the rank range
    enclosing the command's ``--ranks``, as the front-end's ``url.js`` reads it) of a
    ``view_command``; "" when ``command`` is not one."""
    try:
        args = shlex.split(command)
    except ValueError:
        return ""
    if args[:2] != ["traceatlas", "view"]:
        return ""
    options = dict(zip(args[3::2], args[4::2], strict=False))
    window = options.get("--window", "")
    start, sep, end = window.partition(":")
    if not sep or not start.startswith("@") or not end.startswith("@"):
        return ""
    state = {"start": start[1:], "end": end[1:]}
    if "--ranks" in options:
        try:
            spans = parse_rank_spans(options["--ranks"])
        except InputError:
            return ""
        state["ranks"] = f"{spans[0][0]}-{spans[-1][1]}"
    return base + "#" + urlencode(state, safe=",-")


def attach(ctx: Context, findings: Iterable[Finding]) -> None:
    """Set ``finding.view`` on each finding (an empty trace gets none)."""
    if ctx.span_ns <= 0:
        return
    for finding in findings:
        finding.view = view_command(ctx.path, view_window(ctx, finding),
                                    view_ranks(ctx, finding))


def _worst_step(ctx: Context, finding: Finding) -> tuple[int, int] | None:
    """The window of the step where the finding is worst, or None (no steps, no measure)."""
    import polars as pl

    steps = stepwise.windows(ctx)
    ranks = finding.ranks or list(ctx.trace.ranks)
    if steps is None or not ranks:
        return None
    steps = steps.filter(pl.col("rank").is_in(ranks))
    cost = STEP_COST.get(finding.rule, _where_cost)
    per_step = {s: v for s, v in cost(ctx, finding, steps).items() if v > 0}
    if not per_step:
        return None
    step = min(per_step, key=lambda s: (-per_step[s], s))
    row = steps.filter(pl.col("step") == step).select(
        pl.col("w_start").min(), pl.col("w_end").max()).row(0)
    return (int(row[0]), int(row[1])) if row[0] is not None else None


def _load_imbalance(ctx: Context, finding: Finding, steps: pl.DataFrame) -> dict[int, float]:
    """Per step: max - mean over all ranks of the compute-kernel union (the rule's)."""
    import polars as pl

    every = stepwise.windows(ctx)
    if every is None or finding.metric == "host_load_balance":  # MPI: no kernels
        return _where_cost(ctx, finding, steps)
    per = stepwise.rank_unions(ctx, ctx.trace.ranks,
                               pl.col("category") == "kernel", every,
                               "compute")
    ranks = sorted({int(r) for r in per["rank"]})
    got = {(int(r), int(s)): float(v) for r, s, v in per.select("rank", "step", "compute").rows()}
    out = {}
    for step in {int(s) for s in steps["step"]}:
        values = [got.get((r, step), 0.0) for r in ranks]
        out[step] = max(values) - sum(values) / len(values) if values else 0.0
    return out


def _host_wait(ctx: Context, finding: Finding, steps: pl.DataFrame) -> dict[int, float]:
    """Per step: the cause's idle time (``idle`` ``causes``) on the finding's ranks."""
    import polars as pl

    idle = ctx.result("idle")
    if idle is None or "causes" not in idle.extra:
        return {}
    rows = (idle.extra["causes"]
            .filter((pl.col("cause") == finding.cause) & pl.col("rank").is_in(finding.ranks)
                    & pl.col("step").is_not_null() & (pl.col("step") >= 0))
            .group_by("step").agg(pl.col("idle_ns").sum()))
    return {int(s): float(v) for s, v in rows.rows()}


def _straggler(ctx: Context, finding: Finding, steps: pl.DataFrame) -> dict[int, float]:
    """Per step: max lag - mean lag of the NCCL collectives where the rank starts last
    (placed at its start); MPI stragglers fall back to ``_where_cost``."""
    import polars as pl

    result = ctx.result("collectives")
    if (result is None or "per_rank" not in result.extra or len(finding.ranks) != 1
            or finding.metric != "device_load_balance"):
        return _where_cost(ctx, finding, steps)
    rank = finding.ranks[0]
    t0 = ctx.window[0]
    per_rank = result.extra["per_rank"]
    waits = per_rank.group_by("instance").agg(
        (pl.col("lag_ns").max() - pl.col("lag_ns").mean()).alias("wait"))
    mine = (result.table.filter((pl.col("ranks") >= 2) & (pl.col("straggler") == rank))
            .select("instance").join(waits, on="instance")
            .join(per_rank.filter(pl.col("rank") == rank)
                  .select("instance", "rank", (pl.col("start_ns") + t0).alias("start_ns"),
                          (pl.col("start_ns") + t0).alias("end_ns")), on="instance"))
    placed = stepwise.assign(mine.select("rank", "start_ns", "end_ns", "wait"), steps)
    return {int(s): float(w) for s, w in
            placed.group_by("step").agg(pl.col("wait").sum()).rows()}


def _where_cost(ctx: Context, finding: Finding, steps: pl.DataFrame) -> dict[int, float]:
    """Per step: the union of the intervals named in ``where`` on the finding's ranks."""
    import polars as pl

    name = next((finding.where[k] for k in ("kernel", "op", "annotation")
                 if finding.where.get(k)), None)
    if name is None or not finding.ranks:
        return {}
    per = stepwise.rank_unions(ctx, finding.ranks, pl.col("name").cast(pl.String) == name,
                               steps, "busy")
    totals = per.group_by("step").agg(pl.col("busy").sum())
    return {int(s): float(v) for s, v in totals.rows()}


STEP_COST: dict[str, StepCost] = {
    "load_imbalance": _load_imbalance,
    "host_wait": _host_wait,
    "straggler": _straggler,
}
"""Rule -> its per-step measure {step: ns}; other rules use ``_where_cost``."""
