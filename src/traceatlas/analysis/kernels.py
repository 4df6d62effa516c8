"""``kernels``: duration statistics per rank and kernel name, with a duration histogram and
a multimodality flag.

Rows: device kernels (categories ``kernel`` and ``comm_kernel``; with ``memory=true`` also
``memcpy`` and ``memset``), grouped by rank, name and category (``by=rank``) or by name and
category over all ranks (``by=name``, no rank column). Columns (ns, integers):
``count``; ``total_ns`` sum of durations; ``mean_ns``; ``min_ns``; ``max_ns``; ``std_ns``
sample standard deviation (n - 1 in the denominator, as pandas and HTA; 0 for one
sample); ``p50_ns`` and ``p95_ns`` percentiles with linear interpolation; ``share_pct``
= total_ns / busy * 100, where busy is the union of all device activity (kernels, comm
kernels, memcpy, memset) of the rank (``by=name``: the sum of every rank's union). The
shares of concurrent kernels can add up to more than 100. ``bimodal``: see below.
Mean, std and percentiles are rounded to the nearest ns; the std comes from exact integer
sums (count, sum and sum of squares in 128-bit integers), so it does not depend on the
order of the calls. ``top=N`` keeps the N names with the largest total per rank
(``by=name``: overall; ties by name, then category); 0 keeps all.

Extra table ``histogram``: per group, the non-empty bins of a fixed log-spaced grid with
``BINS_PER_DECADE`` bins per decade: bin b holds durations d with 10^(b/10) <= d <
10^((b+1)/10) ns, written as integer bounds ``bin_lo_ns`` <= d < ``bin_hi_ns``; zero
durations go to the bin [0, 1). Column ``count``.

``bimodal``: the calls of the kernel *on one input shape* form two well-separated groups
whose slow side costs time worth a look (a kernel that runs on two shapes at two speeds
is not bimodal): durations are split by the launching op's ``Input Dims``
(``kernel_shapes``; one group when the trace has no shapes), then each shape's calls go
through the two-mode split of ``traceatlas.analysis.kernel_modes`` (log
durations cut where the within-group variance is smallest; separation >= 0.9, >= 20 % of
the calls on each side, slow median >= 1.5x fast median, slow calls' excess over the fast
median >= 5 % of the device busy time; at least 10 calls of that shape). Extra table
``modes``: that split for every (group, shape) with at least 10 calls (``kernel_modes``).

Every statistic is computed from the distinct durations of each (group, shape) with
their number of calls (``dur_ns, n``), never one row a call: the whole run counts the
calls per distinct duration first. Partitioned (``analysis.partitioned``): ``by=rank``
runs per batch of ranks and the tables concatenate; ``by=name`` sends, per batch, each
(name, category, shape) group's distinct durations (sorted int64 list) with their counts
(int64 list) and the batch's device busy ns; the merge adds the counts per (group,
duration) and computes the statistics, ``top``, the histogram and the two-mode split with
the same functions as the whole run.

Differences from HTA's ``get_gpu_kernel_breakdown``: no "others" row (HTA folds kernels
past ``num_kernels`` or past the 80 % cumulative-duration quantile into "others"); memory
activity is optional as in HTA (``include_memory_kernels``, off by default); HTA's
percentage is of the summed time per kernel type, ours of the device busy time; HTA has
no percentiles, histogram or bimodality.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from traceatlas.analysis.base import MAX_COUNT, Param, Result
from traceatlas.analysis.kernel_modes import modes
from traceatlas.analysis.kernel_shapes import with_shapes
from traceatlas.analysis.partitioned import concat
from traceatlas.analysis.requirements import DEVICE_WORK
from traceatlas.ops.unions import union_ns

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

BINS_PER_DECADE = 10
"""Histogram resolution: bins per factor of 10 in duration."""
MAX_BIN = 188
"""Last histogram bin: [10^18.8, 10^18.9) ns, below the int64 limit."""

KERNEL_CATEGORIES = ("kernel", "comm_kernel")
MEMORY_CATEGORIES = ("memcpy", "memset")
GROUPINGS: Mapping[str, tuple[str, ...]] = {
    "rank": ("rank", "name", "category"),
    "name": ("name", "category"),
}


class Kernels:
    """Per rank and kernel name: count, total, mean, min, max, std, p50, p95, share."""

    name = "kernels"
    description = ("Kernel duration statistics per rank and name, share of device busy "
                   "time, log histogram and bimodality flag")
    params = (
        Param("top", int, 0, "keep the N kernels with the largest total time per rank "
              "(by=name: overall); 0 = all", minimum=0, maximum=MAX_COUNT),
        Param("by", str, "rank", "rank (per rank and name) or name (across ranks)",
              ("rank", "name")),
        Param("memory", bool, False, "also list memcpy and memset"),
    )
    requires = ("device",)
    partition = "rank"
    """Per rank (``by=rank``: results concatenate) or merged (``by=name``: ``partial``
    sends each group's durations, ``merge`` computes the statistics over all batches)."""

    def run(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """Statistics per group, the histogram and the bimodality flag."""
        device, rows = _device_rows(trace, bool(params["memory"]))
        return self._run(device, with_shapes(trace.intervals, rows), params)

    def partial(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """A batch's share: ``by=rank`` the result; ``by=name`` one row per (name,
        category, shape) with its distinct durations (``dur_ns``: sorted list of int64)
        and their calls (``n``: list of int64), and extra ``busy`` (one row: the batch's
        summed per-rank busy ns)."""
        return self.partials(trace, [params])[0]

    def partials(self, trace: Trace, params_list: Sequence[Mapping[str, Any]]
                 ) -> list[Result]:
        """``partial`` for each of ``params_list`` on one batch, reading the device
        rows and the launching ops' shapes (their ``args``) once per ``memory`` value
        (``partitioned.run_partitioned_together``: the report's ``by=rank`` and
        ``by=name`` in one pass)."""
        import polars as pl

        shared: dict[bool, tuple[pl.LazyFrame, pl.LazyFrame]] = {}
        out = []
        for params in params_list:
            memory = bool(params["memory"])
            if memory not in shared:
                device_rows, rows = _device_rows(trace, memory)
                shared[memory] = (device_rows.collect().lazy(),
                                  with_shapes(trace.intervals, rows).collect().lazy())
            device, shaped = shared[memory]
            if params["by"] == "rank":
                out.append(self._run(device, shaped, params))
                continue
            calls = (_weighted(shaped, list(GROUPINGS["name"]))
                     .group_by("name", "category", "shape")
                     .agg(pl.col("dur_ns").sort(), pl.col("n").sort_by("dur_ns")))
            table, busy = pl.collect_all([calls, _busy(device, by_rank=False)])
            out.append(Result(table, extra={"busy": busy}))
        return out

    @staticmethod
    def _run(device: pl.LazyFrame, shaped: pl.LazyFrame, params: Mapping[str, Any]
             ) -> Result:
        """``run`` on the device rows and the listed rows with their ``shape``."""
        keys = list(GROUPINGS[str(params["by"])])
        busy = _busy(device, by_rank="rank" in keys).collect().lazy()  # used twice
        return _finish(_weighted(shaped, keys), keys, busy, int(params["top"]))

    def merge(self, partials: Sequence[Result], params: Mapping[str, Any]) -> Result:
        """``by=rank``: ``concat``; ``by=name``: the calls of every batch added per
        (group, shape, duration), then the whole run's statistics over them."""
        if params["by"] == "rank":
            return concat(partials)
        import polars as pl

        calls = pl.concat([p.table for p in partials], how="vertical")
        # Keys as Enums (4 bytes a row once exploded) whose order is the strings' order,
        # so sorts and ties go as on the strings; strings again in the result.
        text = ("name", "category", "shape")
        calls = calls.with_columns(
            pl.col(c).cast(pl.Enum(sorted(calls[c].drop_nulls().unique().to_list())))
            for c in text)
        busy_ns = sum(int(p.extra["busy"]["busy_ns"].sum()) for p in partials)
        busy = pl.LazyFrame({"busy_ns": [busy_ns]}, schema={"busy_ns": pl.Int64})
        weighted = (calls.lazy().explode("dur_ns", "n")
                    .group_by(*text, "dur_ns").agg(pl.col("n").sum()))
        result = _finish(weighted, list(GROUPINGS["name"]), busy, int(params["top"]))

        def strings(frame: pl.DataFrame) -> pl.DataFrame:
            return frame.with_columns(pl.col(c).cast(pl.String) for c in text
                                      if c in frame.columns)

        return Result(strings(result.table), {k: strings(v) for k, v in result.extra.items()},
                      result.notes)


def _device_rows(trace: Trace, memory: bool) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """(all device activity, the rows this analysis lists): columns rank, name,
    category (strings), start_ns, end_ns, dur_ns, correlation, external_id."""
    import polars as pl

    cats = KERNEL_CATEGORIES + (MEMORY_CATEGORIES if memory else ())
    cat = pl.col("category").cast(pl.String)
    device = trace.intervals.filter(pl.col("category").is_in(DEVICE_WORK)).select(
        "rank", pl.col("name").cast(pl.String), cat.alias("category"),
        "start_ns", "end_ns", "dur_ns", "correlation", "external_id")
    return device, device.filter(pl.col("category").is_in(cats))


def _weighted(rows: pl.LazyFrame, keys: list[str]) -> pl.LazyFrame:
    """``rows`` (``*keys, shape, dur_ns``, one a call) as ``*keys, shape, dur_ns, n``:
    each distinct duration of a (group, shape) once, with its number of calls."""
    import polars as pl

    return rows.group_by(*keys, "shape", "dur_ns").agg(pl.len().cast(pl.Int64).alias("n"))


def _finish(calls: pl.LazyFrame, keys: list[str], busy: pl.LazyFrame, top: int) -> Result:
    """The result from ``calls`` (``*keys, shape, dur_ns, n``, one row per distinct
    (group, shape, duration), ``_weighted``) and ``busy`` (``rank, busy_ns`` per rank, or
    one ``busy_ns``): statistics, ``top``, the histogram and the two-mode split of the
    kept groups."""
    import polars as pl

    calls = calls.collect().lazy()  # used three times
    durations = calls.group_by(*keys, "dur_ns").agg(pl.col("n").sum())  # shapes pooled
    stats = _top(_stats(durations, keys, busy), top, "rank" in keys).collect()
    kept = stats.lazy().select(keys)
    hist, split = pl.collect_all([
        _histogram(durations.join(kept, on=keys, how="semi"), keys),
        modes(calls.join(kept, on=keys, how="semi"), keys, busy)])
    order = ["rank"] if "rank" in keys else []
    flag = split.group_by(keys).agg(pl.col("bimodal").any())
    table = (stats.join(flag, on=keys, how="left")
             .with_columns(pl.col("bimodal").fill_null(False))
             .sort([*order, "total_ns", "name", "category"],
                   descending=[*[False] * len(order), True, False, False]))
    return Result(table, extra={"histogram": hist.drop("_bin"), "modes": split},
                  notes=["share_pct: % of the rank's device busy time (union of all "
                         "device activity); bimodal: two-mode split of the log "
                         "durations (table modes; docs/definitions.md)"])


def _busy(device: pl.LazyFrame, by_rank: bool) -> pl.LazyFrame:
    """Union of all device activity per rank (columns rank, busy_ns), or its sum."""
    import polars as pl

    per_rank = union_ns(device, ["rank"], "busy_ns")
    return per_rank if by_rank else per_rank.select(pl.col("busy_ns").sum())


def _stats(rows: pl.LazyFrame, keys: list[str], busy: pl.LazyFrame) -> pl.LazyFrame:
    import polars as pl

    dur, n = pl.col("dur_ns"), pl.col("n")

    def rounded(expr: pl.Expr, name: str) -> pl.Expr:
        return expr.round(0).cast(pl.Int64).alias(name)

    frame = rows.group_by(keys).agg(
        n.sum().alias("count"),
        (dur * n).sum().alias("total_ns"),
        rounded((dur * n).sum() / n.sum(), "mean_ns"),
        dur.min().alias("min_ns"),
        dur.max().alias("max_ns"),
        rounded(_std(dur, n), "std_ns"),
        _quantile(dur, n, 1, 2).alias("p50_ns"),
        _quantile(dur, n, 95, 100).alias("p95_ns"),
    )
    frame = (frame.join(busy, on="rank", how="left") if "rank" in keys
             else frame.join(busy, how="cross"))
    share = pl.when(pl.col("busy_ns") > 0).then(
        pl.col("total_ns") / pl.col("busy_ns") * 100).otherwise(None)
    return frame.with_columns(share.alias("share_pct")).select(
        *keys, "count", "total_ns", "mean_ns", "min_ns", "max_ns", "std_ns", "p50_ns",
        "p95_ns", "share_pct")


def _std(dur: pl.Expr, calls: pl.Expr) -> pl.Expr:
    """Sample standard deviation (n - 1) per group of the distinct durations ``dur`` with
    ``calls`` calls each, from exact sums: sqrt((n * sum(d^2) - sum(d)^2) / (n (n - 1))),
    the numerator in 128-bit integers (exact while the sum of squares stays below 2^127
    ns^2), so any order of the calls gives the same float; 0 for one call."""
    import polars as pl

    d, w = dur.cast(pl.Int128), calls.cast(pl.Int128)
    n = w.sum()
    s = (d * w).sum()
    numerator = (n * (d * d * w).sum() - s * s).cast(pl.Float64)
    var = numerator / (n * (n - 1)).cast(pl.Float64)
    return pl.when(calls.sum() > 1).then(var.sqrt()).otherwise(0.0)


def _quantile(dur: pl.Expr, calls: pl.Expr, num: int, den: int) -> pl.Expr:
    """Percentile ``num / den`` with linear interpolation (as Polars' ``quantile(q,
    "linear")`` of the calls one a row), rounded half to even: position (n - 1) q between
    the order statistics at its floor and ceiling, found on the cumulative calls of the
    sorted distinct durations. In integers: the position's fraction is ``rem / den`` and
    the value ``(lower * den + rem * (upper - lower)) / den`` is rounded exactly (a float
    position put 917.5 ns, the p95 of 7, 175 and 1,000 ns, at 917.4999)."""
    import polars as pl

    scaled = (calls.sum() - 1).cast(pl.Int64) * num
    lo, rem = scaled // den, scaled % den
    hi = lo + (rem > 0).cast(pl.Int64)
    ordered, upto = dur.sort(), calls.sort_by(dur).cum_sum()
    lower = ordered.filter(upto > lo).first().cast(pl.Int128)
    upper = ordered.filter(upto > hi).first().cast(pl.Int128)
    value = lower * den + rem.cast(pl.Int128) * (upper - lower)
    whole, part = value // den, value % den
    up = (2 * part > den) | ((2 * part == den) & (whole % 2 == 1))
    return (whole + up.cast(pl.Int128)).cast(pl.Int64)


def _top(stats: pl.LazyFrame, top: int, by_rank: bool) -> pl.LazyFrame:
    """The ``top`` groups with the largest ``total_ns`` (per rank when ``by_rank``); ties
    by name, then category, so the choice does not depend on row order."""
    import polars as pl

    if top <= 0:
        return stats
    place = pl.int_range(pl.len())
    ordered = stats.sort(["total_ns", "name", "category"], descending=[True, False, False])
    return ordered.filter((place.over("rank") if by_rank else place) < top)


def _edges() -> pl.LazyFrame:
    """Integer bounds of the log bins: _bin, bin_lo_ns = ceil(10^(b/B)), bin_hi_ns; bin -1
    is [0, 1). Computed with Python floats, exact at powers of ten."""
    import polars as pl

    b = BINS_PER_DECADE
    bins = list(range(MAX_BIN + 1))
    return pl.LazyFrame({
        "_bin": [-1, *bins],
        "bin_lo_ns": [0, *(math.ceil(10.0 ** (i / b)) for i in bins)],
        "bin_hi_ns": [1, *(math.ceil(10.0 ** ((i + 1) / b)) for i in bins)],
    }, schema={"_bin": pl.Int64, "bin_lo_ns": pl.Int64, "bin_hi_ns": pl.Int64})


def _histogram(rows: pl.LazyFrame, keys: list[str]) -> pl.LazyFrame:
    """Non-empty log bins per group of ``rows`` (``*keys, dur_ns, n``: distinct durations
    and their calls): keys, bin_lo_ns, bin_hi_ns, count (and _bin)."""
    import polars as pl

    dur = pl.col("dur_ns")
    # Float estimate of the bin, then moved by one where it missed the integer bounds.
    guess = pl.when(dur > 0).then(
        (dur.cast(pl.Float64).log10() * BINS_PER_DECADE).floor().clip(0, MAX_BIN)
    ).otherwise(-1).cast(pl.Int64).alias("_bin")
    edges = _edges()
    fixed = (pl.col("_bin") + (dur >= pl.col("bin_hi_ns")).cast(pl.Int64)
             - (dur < pl.col("bin_lo_ns")).cast(pl.Int64)).alias("_bin")
    return (
        rows.select(*keys, "dur_ns", "n", guess).join(edges, on="_bin", how="left")
        .select(*keys, "n", fixed).group_by(*keys, "_bin")
        .agg(pl.col("n").sum().alias("count"))
        .join(edges, on="_bin", how="left")
        .sort([*keys, "_bin"])
        .select(*keys, "bin_lo_ns", "bin_hi_ns", "count", "_bin")
    )
