"""``profile``: flat profile per function / region name, per rank or over all ranks.

Rows are intervals of the selected categories (``categories``: default every category on
host-thread tracks except Paraver ``state``; ``all``; or a comma list, e.g. ``mpi`` or
``mpi,kernel``). Exclusive time (``traceatlas.ops.exclusive``): the ns a row is the
innermost open interval of its (rank, track), over all host rows of the track (before the
category selection): inclusive time minus the direct children's for nested calls; crossing
intervals (one starts inside another and ends after it) count each ns once, for the one
that started last, with a ``DataQualityWarning``. Rows on GPU streams / devices do not
nest: exclusive = inclusive there (overlapping kernels each count in full). Paraver states
form their own stack (they tile the thread: exclusive = inclusive).

``by=rank`` columns: rank, name, category, ``calls`` (intervals), ``inclusive_ns`` (sum of
durations; a recursive call counts its nested instances again, as in Pipit),
``exclusive_ns`` (sum of exclusive times).

``by=name`` (over ranks): name, category, ``ranks`` (ranks that have it), ``calls``,
``inclusive_ns``, ``exclusive_ns`` (sums over ranks), ``inclusive_mean_ns`` and
``exclusive_mean_ns`` (mean of the per-rank sums, rounded to ns; Pipit's
``flat_profile()``), ``exclusive_min_ns``, ``exclusive_max_ns``, ``imbalance`` =
exclusive max / mean. Means are over the ranks that have the function (Pipit's
``groupby([Name, Process]).sum().groupby(Name).mean()``); ``all_ranks=true`` averages over
every rank of the selection (absent = 0).

Sorted by exclusive time descending (then name); ``top=N`` keeps N rows (per rank for
``by=rank``). Times in ns.

Differences from Pipit (``pipit/trace.py``: ``calc_exc_metrics``, ``flat_profile``): Pipit
matches Enter/Leave per (Process, Thread) and subtracts every child's inclusive time
(identical for nested calls; on crossing ones Pipit loses the overlap, or goes negative,
where we count it once). Pipit has no min/max/imbalance in the flat profile (they are
in ``load_imbalance``) and no category filter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from traceatlas.analysis.base import MAX_COUNT, Param, Result
from traceatlas.analysis.partitioned import batch_ranks, concat_counts, summed_notes
from traceatlas.ops.exclusive import exclusive_intervals, rank_stats

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

CATEGORIES_HELP = ("interval categories: empty = every host-thread category except "
                   "Paraver state; 'all'; or a comma list (e.g. mpi or mpi,kernel)")


def per_rank(trace: Trace, categories: str) -> tuple[pl.DataFrame, list[str]]:
    """rank, name, category, calls, inclusive_ns, exclusive_ns of the selected rows."""
    import polars as pl

    frame, notes = exclusive_intervals(trace, categories)
    table = (
        frame.lazy().filter(pl.col("keep"))
        .group_by("rank", "name", "category")
        .agg(calls=pl.len().cast(pl.Int64),
             inclusive_ns=(pl.col("end_ns") - pl.col("start_ns")).sum(),
             exclusive_ns=pl.col("exclusive_ns").sum())
        .collect()
    )
    return table, notes


class Profile:
    """Flat profile: calls, inclusive and exclusive time per name (per rank or over ranks)."""

    name = "profile"
    description = ("Flat profile per function/region: calls, inclusive and exclusive time, "
                   "per rank or over ranks (mean, min, max, max/mean)")
    params = (
        Param("by", str, "name", "name (over ranks) or rank (per rank and name)",
              ("name", "rank")),
        Param("categories", str, "", CATEGORIES_HELP),
        Param("top", int, 0, "keep the N names with the most exclusive time (per rank "
              "for by=rank); 0 = all", minimum=0, maximum=MAX_COUNT),
        Param("all_ranks", bool, False, "by=name: mean/min over every rank of the "
              "selection (absent = 0) instead of the ranks that have the name"),
    )
    requires = ("intervals",)
    partition = "rank"
    """Per rank (``analysis.partitioned``): ``by=rank`` tables concatenate; ``by=name``
    merges the batches' per-rank sums (``partial``, ``merge``)."""

    def partial(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """A batch's share: ``by=rank`` the result; ``by=name`` the per-rank sums (extra
        ``ranks``: the batch's ranks, for ``all_ranks``)."""
        if params["by"] == "rank":
            return self.run(trace, params)
        return per_rank_partial(trace, params)

    def merge(self, partials: Sequence[Result], params: Mapping[str, Any]) -> Result:
        """``by=rank``: ``concat_counts``; ``by=name``: the per-rank sums combined."""
        if params["by"] == "rank":
            return concat_counts(partials, params)
        import polars as pl

        table = pl.concat([p.table for p in partials], how="vertical")
        world = batch_ranks(partials) if params["all_ranks"] else None
        return Result(over_ranks(table, world, int(params["top"])),
                      notes=summed_notes(partials))

    def run(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """The flat profile, sorted by exclusive time descending."""
        import polars as pl

        table, notes = per_rank(trace, str(params["categories"]))
        top = int(params["top"])
        order = [pl.col("exclusive_ns"), pl.col("name")]
        if params["by"] == "rank":
            table = table.sort([pl.col("rank"), *order], descending=[False, True, False])
            if top > 0:
                table = table.group_by("rank", maintain_order=True).head(top)
            return Result(table, notes=notes)
        world = len(trace.ranks) if params["all_ranks"] else None
        return Result(over_ranks(table, world, top), notes=notes)


def per_rank_partial(trace: Trace, params: Mapping[str, Any]) -> Result:
    """``per_rank`` of one batch, with its ranks in the extra table ``ranks`` (the map
    step of ``profile by=name`` and ``load_imbalance``)."""
    import polars as pl

    table, notes = per_rank(trace, str(params["categories"]))
    ranks = pl.DataFrame({"rank": trace.ranks}, schema={"rank": pl.Int64})
    return Result(table, extra={"ranks": ranks}, notes=notes)


def over_ranks(table: pl.DataFrame, world: int | None, top: int) -> pl.DataFrame:
    """The ``by=name`` table from the per-rank rows (``per_rank``); ``world``: ranks to
    average over (None: the ranks that have the name)."""
    import polars as pl

    order = [pl.col("exclusive_ns"), pl.col("name")]
    table = (
        table.group_by("name", "category")
        .agg(ranks=pl.len().cast(pl.Int64), calls=pl.col("calls").sum().cast(pl.Int64),
             inclusive_ns=pl.col("inclusive_ns").sum(),
             exclusive_ns=pl.col("exclusive_ns").sum(),
             inclusive_mean_ns=rank_stats("inclusive_ns", "inclusive", world)[0],
             **{e.meta.output_name(): e
                for e in rank_stats("exclusive_ns", "exclusive", world)})
        .select("name", "category", "ranks", "calls", "inclusive_ns", "exclusive_ns",
                "inclusive_mean_ns", "exclusive_mean_ns", "exclusive_min_ns",
                "exclusive_max_ns", "imbalance")
        .sort(order, descending=[True, False])
    )
    return table.head(top) if top > 0 else table
