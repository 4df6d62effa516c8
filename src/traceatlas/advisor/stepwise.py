"""Per-step figures of findings (``Finding.per_step``): the time a finding costs, step by
step, from the ``steps`` analysis' windows.

An interval belongs to the step of its rank whose window contains its start (an as-of
join on the start); its end is clipped to that window's end; intervals starting outside
every window are left out. ``per_step`` = ``{"ms": median over steps of the cost in ms}``
(plus ``"count"``, the median count per step, where the cause is counted).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from traceatlas.advisor.base import Context

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace


def windows(ctx: Context) -> pl.DataFrame | None:
    """Step windows (``rank``, ``step``, ``w_start``, ``w_end``; ns), or None without steps."""
    import polars as pl

    result = ctx.result("steps")
    if result is None or result.table.height == 0:
        return None
    return (result.table.select(pl.col("rank").cast(pl.Int64), pl.col("step").cast(pl.Int64),
                                pl.col("start_ns").cast(pl.Int64).alias("w_start"),
                                pl.col("end_ns").cast(pl.Int64).alias("w_end"))
            .sort("w_start"))


def assign(frame: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """``frame`` (``rank``, ``start_ns``, ``end_ns``, ...) with a ``step`` column, ends
    clipped to the step window's end; rows starting outside every window dropped."""
    import polars as pl

    if frame.height == 0:
        return frame.with_columns(step=pl.lit(None, pl.Int64))
    left = frame.with_columns(pl.col("rank").cast(pl.Int64),
                              pl.col("start_ns").cast(pl.Int64),
                              pl.col("end_ns").cast(pl.Int64)).sort("start_ns")
    joined = left.join_asof(steps, left_on="start_ns", right_on="w_start", by="rank",
                            strategy="backward", check_sortedness=False)  # both sorted
    return (joined.filter(pl.col("w_end").is_not_null()
                          & (pl.col("start_ns") < pl.col("w_end")))
            .with_columns(end_ns=pl.min_horizontal("end_ns", "w_end"))
            .drop("w_start", "w_end"))


def union_per_step(frame: pl.DataFrame, steps: pl.DataFrame, keys: tuple[str, ...] = (),
                   name: str = "union_ns") -> pl.DataFrame:
    """Union length (ns) of ``frame``'s intervals per (``rank``, ``step``, ``*keys``)."""
    from traceatlas.ops.unions import union_ns

    placed = assign(frame.select("rank", *keys, "start_ns", "end_ns"), steps)
    return union_ns(placed.lazy(), ["rank", "step", *keys], name).collect()


def rank_unions(ctx: Context, ranks: Iterable[int], keep: pl.Expr, steps: pl.DataFrame,
                name: str) -> pl.DataFrame:
    """``union_per_step`` of the intervals matching ``keep`` on each of ``ranks``, one
    rank's part read at a time (on the engine's workers when the context has one:
    ``per_rank.map_ranks``), concatenated in rank order: the same rows as
    ``union_per_step`` over every rank at once."""
    import polars as pl

    from traceatlas.advisor import per_rank

    parts = per_rank.map_ranks(ctx, RANK_UNION, ranks, keep, steps, name)
    full = [p for p in parts if p.height]
    if not full:
        return parts[0] if parts else pl.DataFrame(
            schema={"rank": pl.Int64, "step": pl.Int64, name: pl.Int64})
    frame: pl.DataFrame = pl.concat(full)
    return frame


RANK_UNION = "traceatlas.advisor.stepwise:rank_union"


def rank_union(view: Trace, rank: int, keep: pl.Expr, steps: pl.DataFrame,
               name: str) -> pl.DataFrame:
    """The mapped per-rank step of ``rank_unions`` on ``view`` (one rank)."""
    rows = view.intervals.filter(keep).select("rank", "start_ns", "end_ns").collect()
    return union_per_step(rows, steps, name=name)


def median_ms(values: Mapping[int, float] | list[float], count: list[float] | None = None
              ) -> dict[str, float] | None:
    """``{"ms": median of ``values`` (ns) in ms}`` (and ``"count"``: median of
    ``count``), or None when there is no step."""
    data = list(values.values()) if isinstance(values, Mapping) else list(values)
    if not data:
        return None
    out = {"ms": round(statistics.median(data) / 1e6, 6)}
    if count:
        out["count"] = float(statistics.median(count))
    return out


def per_rank_step(frame: pl.DataFrame, rank: int, column: str) -> dict[int, float]:
    """{step: ``column``} for ``rank`` from a per (``rank``, ``step``) table."""
    import polars as pl

    rows = frame.filter(pl.col("rank") == rank).group_by("step").agg(pl.col(column).sum())
    return {int(s): float(v) for s, v in rows.rows()}
