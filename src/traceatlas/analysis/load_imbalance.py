"""``load_imbalance``: per function, how unevenly its time is spread over the ranks.

Per rank, the function's time is the sum over its calls of the ``metric`` (exclusive
time by default, as Pipit's ``load_imbalance(metric="time.exc")``; or inclusive), from
``profile`` (same ``categories`` rules). Columns: name, category, ``ranks`` (ranks that
have it), ``mean_ns`` (mean of the per-rank sums, rounded to ns), ``max_ns``, ``min_ns``,
``imbalance`` = max / mean (exact mean; null when the mean is 0), ``top_ranks`` (the
``num_ranks`` ranks with the most time, most loaded first, ties by lower rank, as a
comma string). Sorted by mean descending (Pipit's order), then name.

Means are over the ranks that have the function, as Pipit (its per-process flat profile
has no row for a process that never calls the function, so a function called by one rank
has imbalance 1); ``all_ranks=true`` counts every rank of the selection (absent = 0), so
a function called by 1 of 4 ranks has imbalance 4. Times in ns.

Differences from Pipit (``pipit/trace.py`` ``load_imbalance``): Pipit's
``num_processes`` (default 1) is our ``num_ranks``; Pipit returns the top ranks as a
list and the metric's mean and imbalance only (no max/min columns).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from traceatlas.analysis.base import MAX_COUNT, Param, Result
from traceatlas.analysis.partitioned import batch_ranks, summed_notes
from traceatlas.analysis.profile import CATEGORIES_HELP, per_rank, per_rank_partial
from traceatlas.ops.exclusive import rank_stats

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace


class LoadImbalance:
    """Per function: mean and max over ranks, max/mean, most loaded ranks."""

    name = "load_imbalance"
    description = "Per function: max/mean of its time over ranks and the most loaded ranks"
    params = (
        Param("metric", str, "exclusive", "exclusive (Pipit's default) or inclusive time",
              ("exclusive", "inclusive")),
        Param("num_ranks", int, 1, "how many of the most loaded ranks to list (Pipit's "
              "num_processes, default 1)", minimum=1, maximum=MAX_COUNT),
        Param("categories", str, "", CATEGORIES_HELP),
        Param("all_ranks", bool, False, "average over every rank of the selection "
              "(absent = 0) instead of the ranks that have the function"),
    )
    requires = ("intervals",)
    partition = "rank"
    """Per rank (``analysis.partitioned``): batches send their per-rank sums
    (``profile.per_rank_partial``), the merge takes max/mean over ranks."""
    partial = staticmethod(per_rank_partial)

    def merge(self, partials: Sequence[Result], params: Mapping[str, Any]) -> Result:
        """The batches' per-rank sums combined as ``run`` combines the whole trace's."""
        import polars as pl

        table = pl.concat([p.table for p in partials], how="vertical")
        world = batch_ranks(partials) if params["all_ranks"] else None
        return Result(imbalance(table, params, world), notes=summed_notes(partials))

    def run(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """One row per function, most time per rank first."""
        table, notes = per_rank(trace, str(params["categories"]))
        world = len(trace.ranks) if params["all_ranks"] else None
        return Result(imbalance(table, params, world), notes=notes)


def imbalance(table: pl.DataFrame, params: Mapping[str, Any], world: int | None
              ) -> pl.DataFrame:
    """The result table from the per-rank rows (``profile.per_rank``); ``world``: ranks
    to average over (None: the ranks that have the function)."""
    import polars as pl

    value = f"{params['metric']}_ns"
    k = max(int(params["num_ranks"]), 1)
    stats = {e.meta.output_name(): e for e in rank_stats(value, "m", world)}
    top = (pl.col("rank").sort_by([pl.col(value), pl.col("rank")],
                                  descending=[True, False]).head(k)
           .cast(pl.String).str.join(","))
    return (
        table.group_by("name", "category")
        .agg(ranks=pl.len().cast(pl.Int64), **stats, top_ranks=top)
        .select("name", "category", "ranks", pl.col("m_mean_ns").alias("mean_ns"),
                pl.col("m_max_ns").alias("max_ns"), pl.col("m_min_ns").alias("min_ns"),
                "imbalance", "top_ranks")
        .sort(["mean_ns", "name"], descending=[True, False])
    )
