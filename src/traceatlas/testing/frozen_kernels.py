"""Frozen copy of ``traceatlas.analysis.kernels`` (the whole run, ``by=rank`` and ``by=name``)
and ``traceatlas.analysis.kernel_modes`` at commit f2d69a1, before the weighted (distinct
duration, count) path: the oracle the current ``kernels`` is tested equal to
(``assert_same``, at the end, is the comparison). Not used by the package; never edit the
frozen code (definitions: the module docstring of ``traceatlas.analysis.kernels``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from traceatlas.analysis.base import MAX_COUNT, Param, Result
from traceatlas.analysis.kernel_shapes import with_shapes
from traceatlas.analysis.partitioned import concat
from traceatlas.analysis.requirements import DEVICE_WORK
from traceatlas.ops.unions import union_ns

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

MIN_SAMPLES = 10
"""Groups with fewer calls are never flagged."""
MODE_MIN_FRACTION = 0.2
"""Each side of the cut holds at least this fraction of the calls."""
MIN_SEPARATION = 0.9
"""Share of the log-duration variance the two groups must explain."""
MIN_RATIO = 1.5
"""Slow median / fast median at least this."""
MIN_EXCESS_PCT = 5.0
"""The slow calls' time beyond the fast median: at least this % of device busy time."""


def modes(rows: pl.LazyFrame, keys: list[str], busy: pl.LazyFrame) -> pl.LazyFrame:
    """The ``modes`` table (module docstring) of ``rows`` (``*keys, dur_ns``) per group,
    and per ``shape`` too when ``rows`` has that column (``kernel_shapes``);
    ``busy``: columns ``rank, busy_ns`` when ``rank`` is a key, else one ``busy_ns``.
    Computed eagerly: durations sorted per group (Polars), then numpy prefix sums give
    every cut's within-group variance at once."""
    import polars as pl

    if "shape" in rows.collect_schema().names():
        keys = [*keys, "shape"]  # one split per input shape: shapes are not modes
    groups = (rows.group_by(keys).agg(_d=pl.col("dur_ns").sort(), _n=pl.len())
              .filter(pl.col("_n") >= MIN_SAMPLES).sort(keys, nulls_last=True).collect())
    split = _split(groups["_d"].explode().to_numpy(), groups["_n"].to_numpy())
    stats = pl.concat([groups.select(keys), pl.DataFrame(split)], how="horizontal").lazy()
    stats = (stats.join(busy, on="rank", how="left") if "rank" in keys
             else stats.join(busy, how="cross"))
    excess_pct = pl.when(pl.col("busy_ns") > 0).then(
        pl.col("excess_ns") / pl.col("busy_ns") * 100).otherwise(None)
    flag = ((pl.col("separation") >= MIN_SEPARATION)
            & (pl.col("slow_median_ns") >= MIN_RATIO * pl.col("fast_median_ns"))
            & (pl.col("excess_pct") >= MIN_EXCESS_PCT)).fill_null(False)
    return (
        stats.with_columns(excess_pct=excess_pct).with_columns(bimodal=flag)
        .select(*keys, *COLUMNS, "excess_pct", "bimodal")
        .sort(keys, nulls_last=True)
    )


COLUMNS = ("fast_count", "slow_count", "fast_median_ns", "slow_median_ns", "fast_min_ns",
           "fast_max_ns", "slow_min_ns", "slow_max_ns", "separation", "excess_ns")


def _split(d: np.ndarray, counts: np.ndarray) -> dict[str, np.ndarray]:
    """Per group (``counts[i]`` consecutive durations of ``d``, sorted within the group,
    each group >= MIN_SAMPLES): the best cut of the log durations and each side's
    numbers (``COLUMNS``)."""
    d, counts = d.astype(np.int64), counts.astype(np.int64)
    if len(counts) == 0:
        return {c: np.zeros(0, np.float64 if c == "separation" else np.int64)
                for c in COLUMNS}
    n_rows = len(d)
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    g = np.repeat(np.arange(len(counts)), counts)
    x = np.log(np.maximum(d, 1).astype(np.float64))
    x -= np.repeat(np.add.reduceat(x, starts) / counts, counts)  # centred: exact sums
    start_of = np.repeat(starts, counts)
    k = np.arange(n_rows) - start_of + 1                    # calls at or below the cut
    n = np.repeat(counts, counts)

    def within_group(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(prefix sum inside the group, group total), per row."""
        cum = np.cumsum(values)
        before = np.r_[0.0, cum][start_of]
        return cum - before, np.repeat(np.add.reduceat(values, starts), counts)

    (s1, s), (q1, q) = within_group(x), within_group(x * x)
    least = np.maximum(1, np.ceil(n * MODE_MIN_FRACTION))
    valid = (k >= least) & (n - k >= least)
    with np.errstate(divide="ignore", invalid="ignore"):
        within = (q1 - s1 * s1 / k) + ((q - q1) - (s - s1) ** 2 / (n - k))
    within = np.where(valid, within, np.inf)
    best = np.minimum.reduceat(within, starts)
    hit = np.flatnonzero(within == np.repeat(best, counts))
    first = hit[np.unique(g[hit], return_index=True)[1]]   # smallest cut on a tie
    cut = k[first]
    total = q[starts]
    m = counts - cut

    def median(lo: np.ndarray, size: np.ndarray) -> np.ndarray:
        mid: np.ndarray = np.rint((d[lo + (size - 1) // 2] + d[lo + size // 2]) / 2)
        return mid.astype(np.int64)

    fast_mid = (d[starts + (cut - 1) // 2] + d[starts + cut // 2]) / 2  # exact median
    cum_d = np.r_[0, np.cumsum(d)]
    slow_sum = cum_d[starts + counts] - cum_d[starts + cut]
    with np.errstate(divide="ignore", invalid="ignore"):
        separation = np.where(total > 0, np.clip(1 - best / total, 0.0, 1.0), 0.0)
    return {
        "fast_count": cut.astype(np.int64), "slow_count": m.astype(np.int64),
        "fast_median_ns": median(starts, cut), "slow_median_ns": median(starts + cut, m),
        "fast_min_ns": d[starts], "fast_max_ns": d[starts + cut - 1],
        "slow_min_ns": d[starts + cut], "slow_max_ns": d[starts + counts - 1],
        "separation": separation,
        "excess_ns": np.rint(slow_sum - m * fast_mid).astype(np.int64),
    }


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
        keys = list(GROUPINGS[str(params["by"])])
        device, rows = _device_rows(trace, bool(params["memory"]))
        busy = _busy(device, by_rank="rank" in keys).collect().lazy()  # used twice
        return _finish(rows, keys, busy, int(params["top"]),
                       lambda kept: with_shapes(trace.intervals, kept))

    def partial(self, trace: Trace, params: Mapping[str, Any]) -> Result:
        """A batch's share: ``by=rank`` the result; ``by=name`` one row per (name,
        category, shape) with its durations (``dur_ns``: list of int64, the batch's row
        order) and extra ``busy`` (one row: the batch's summed per-rank busy ns)."""
        if params["by"] == "rank":
            return self.run(trace, params)
        import polars as pl

        device, rows = _device_rows(trace, bool(params["memory"]))
        calls = (with_shapes(trace.intervals, rows)
                 .group_by("name", "category", "shape", maintain_order=True)
                 .agg(pl.col("dur_ns")))
        table, busy = pl.collect_all([calls, _busy(device, by_rank=False)])
        return Result(table, extra={"busy": busy})

    def merge(self, partials: Sequence[Result], params: Mapping[str, Any]) -> Result:
        """``by=rank``: ``concat``; ``by=name``: every batch's durations back as rows (in
        batch order), then the whole run's statistics over them."""
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
        result = _finish(calls.lazy().explode("dur_ns"), list(GROUPINGS["name"]), busy,
                         int(params["top"]), lambda kept: kept)

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
    device = trace.intervals.filter(cat.is_in(DEVICE_WORK)).select(
        "rank", pl.col("name").cast(pl.String), cat.alias("category"),
        "start_ns", "end_ns", "dur_ns", "correlation", "external_id")
    return device, device.filter(pl.col("category").is_in(cats))


def _finish(rows: pl.LazyFrame, keys: list[str], busy: pl.LazyFrame, top: int,
            shapes: Callable[[pl.LazyFrame], pl.LazyFrame]) -> Result:
    """The result from the listed ``rows`` (``*keys, dur_ns``, more columns allowed) and
    ``busy`` (``rank, busy_ns`` per rank, or one ``busy_ns``): statistics, ``top``, the
    histogram and the two-mode split of the kept rows (``shapes`` adds their ``shape``)."""
    import polars as pl

    stats = _top(_stats(rows, keys, busy), top, "rank" in keys).collect()
    kept = rows.join(stats.lazy().select(keys), on=keys, how="semi")
    hist, split = pl.collect_all([_histogram(kept, keys), modes(shapes(kept), keys, busy)])
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

    dur = pl.col("dur_ns")

    def rounded(expr: pl.Expr, name: str) -> pl.Expr:
        return expr.round(0).cast(pl.Int64).alias(name)

    frame = rows.group_by(keys).agg(
        pl.len().cast(pl.Int64).alias("count"),
        dur.sum().alias("total_ns"),
        rounded(dur.sum() / pl.len(), "mean_ns"),
        dur.min().alias("min_ns"),
        dur.max().alias("max_ns"),
        rounded(_std(dur), "std_ns"),
        rounded(dur.quantile(0.5, "linear"), "p50_ns"),
        rounded(dur.quantile(0.95, "linear"), "p95_ns"),
    )
    frame = (frame.join(busy, on="rank", how="left") if "rank" in keys
             else frame.join(busy, how="cross"))
    share = pl.when(pl.col("busy_ns") > 0).then(
        pl.col("total_ns") / pl.col("busy_ns") * 100).otherwise(None)
    return frame.with_columns(share.alias("share_pct")).select(
        *keys, "count", "total_ns", "mean_ns", "min_ns", "max_ns", "std_ns", "p50_ns",
        "p95_ns", "share_pct")


def _std(dur: pl.Expr) -> pl.Expr:
    """Sample standard deviation (n - 1) of ``dur`` per group from exact sums:
    sqrt((n * sum(d^2) - sum(d)^2) / (n (n - 1))), the numerator in 128-bit integers (exact
    while the sum of squares stays below 2^127 ns^2), so any order of the calls gives the
    same float; 0 for one call."""
    import polars as pl

    d = dur.cast(pl.Int128)
    n = pl.len().cast(pl.Int128)
    s = d.sum()
    numerator = (n * (d * d).sum() - s * s).cast(pl.Float64)
    var = numerator / (n * (n - 1)).cast(pl.Float64)
    return pl.when(pl.len() > 1).then(var.sqrt()).otherwise(0.0)


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
    """Non-empty log bins per group: keys, bin_lo_ns, bin_hi_ns, count (and _bin)."""
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
        rows.select(*keys, "dur_ns", guess).join(edges, on="_bin", how="left")
        .select(*keys, fixed).group_by(*keys, "_bin")
        .agg(pl.len().cast(pl.Int64).alias("count"))
        .join(edges, on="_bin", how="left")
        .sort([*keys, "_bin"])
        .select(*keys, "bin_lo_ns", "bin_hi_ns", "count", "_bin")
    )


# --- the comparison (not frozen) ---------------------------------------------------------


def assert_same(got: Result, want: Result) -> None:
    """``got`` (the current ``kernels``) equals ``want`` (this frozen copy): every column
    exactly, but ``modes.separation``: for a group of one duration the frozen split's
    separation is rounding noise (0 or 1: its centred logs are not exactly 0), the
    current one 0; otherwise equal to 1e-12 (the same sums in another order)."""
    import pytest
    from polars.testing import assert_frame_equal

    assert_frame_equal(got.table, want.table, check_exact=True)
    assert sorted(got.extra) == sorted(want.extra)
    for key, frame in want.extra.items():
        mine = got.extra[key]
        if key == "modes":
            one = (frame["fast_min_ns"] == frame["slow_max_ns"]).to_list()
            for g, w, single in zip(mine["separation"], frame["separation"], one,
                                    strict=True):
                assert g == (0.0 if single else pytest.approx(w, rel=1e-12, abs=1e-12))
            mine, frame = mine.drop("separation"), frame.drop("separation")
        assert_frame_equal(mine, frame, check_exact=True)
    assert got.notes == want.notes
