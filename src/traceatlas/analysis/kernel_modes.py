"""The two-mode split behind the ``bimodal`` flag of ``kernels`` (table ``modes``).

Per group of durations (one kernel name on one rank, or over all ranks) with at least
``MIN_SAMPLES`` calls: the durations are sorted and cut in two where the within-group
variance of log(duration) is smallest (Otsu's method, i.e. exact 1-D two-means, over every
cut that leaves at least ``MODE_MIN_FRACTION`` of the calls on each side). Columns:

- ``fast_count``, ``slow_count``: calls below and above the cut;
- ``fast_median_ns``, ``slow_median_ns``, ``fast_min_ns``, ``fast_max_ns``,
  ``slow_min_ns``, ``slow_max_ns``: each side's durations (medians rounded to the ns);
- ``separation``: 1 - within-group / total variance of log(duration), in [0, 1]: near 1
  when the calls form two tight groups, 2/pi = 0.64 for a normal (log-normal) sample;
- ``excess_ns``: sum over the slow calls of (duration - fast median), the time the slow
  calls take beyond a typical fast one; ``excess_pct`` = excess_ns / busy * 100 with
  busy the rank's device busy time (``by=name``: the sum over ranks), as ``share_pct``;
- ``bimodal``: separation >= ``MIN_SEPARATION``, slow median >= ``MIN_RATIO`` x fast
  median and excess_pct >= ``MIN_EXCESS_PCT``.

Why these thresholds (measured on 1,130 kernel groups of 24 real traces in
``../shared/traces``): one kernel name usually serves several shapes, so durations of
real kernels are multimodal more often than not (a gap test flagged 38 % of the groups
and 7 of the top 8 kernels of one report). Requiring two *tight* groups (separation 0.9:
for two equal groups the modes are >= 6 within-group standard deviations apart), a
minority of at least 20 %, a 1.5x step and slow calls that cost at least 5 % of the
device time leaves 16 groups (1.4 %; 16 of the 259 top-8 kernels) on 9 traces, e.g.
flash attention at 155 us or 7.87 ms on ``nsys-ai/mfu_2gpu_before``, the fp32 GEMMs of
``h100-planted/regress``, NCCL kernels with small and large messages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl

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
    """The ``modes`` table (module docstring) of ``rows`` (``*keys, dur_ns``) per group;
    ``busy``: columns ``rank, busy_ns`` when ``rank`` is a key, else one ``busy_ns``."""
    import polars as pl

    logd = pl.col("dur_ns").clip(lower_bound=1).cast(pl.Float64).log()
    base = (
        rows.select(*keys, "dur_ns")
        .with_columns(n=pl.len().over(keys))
        .filter(pl.col("n") >= MIN_SAMPLES)
        .sort([*keys, "dur_ns"])
        .with_columns(k=pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over(keys), x=logd)
        .with_columns(x=pl.col("x") - pl.col("x").mean().over(keys))  # centred: exact sums
    )
    k, n = pl.col("k"), pl.col("n")
    s1, q1 = pl.col("x").cum_sum().over(keys), (pl.col("x") ** 2).cum_sum().over(keys)
    s, q = pl.col("x").sum().over(keys), (pl.col("x") ** 2).sum().over(keys)
    least = (n * MODE_MIN_FRACTION).ceil().clip(lower_bound=1)
    within = (pl.col("q1") - pl.col("s1") ** 2 / k
              + (pl.col("q") - pl.col("q1")) - (pl.col("s") - pl.col("s1")) ** 2 / (n - k))
    cuts = (
        base.with_columns(s1=s1, q1=q1, s=s, q=q)
        .filter((k >= least) & (n - k >= least))
        .with_columns(within=within)
        .group_by(keys).agg(cut=pl.col("k").sort_by("within", "k").first(),
                            within=pl.col("within").min(), total=pl.col("q").first())
        .select(*keys, "cut", separation=pl.when(pl.col("total") > 0).then(
            (1 - pl.col("within") / pl.col("total")).clip(0.0, 1.0)).otherwise(0.0))
    )
    slow = pl.col("k") > pl.col("cut")
    d = pl.col("dur_ns")

    def ns(expr: pl.Expr) -> pl.Expr:
        return expr.round(0).cast(pl.Int64)

    stats = (
        base.join(cuts, on=keys).group_by(keys).agg(
            fast_count=(~slow).sum().cast(pl.Int64), slow_count=slow.sum().cast(pl.Int64),
            fast_median_ns=ns(d.filter(~slow).median()),
            slow_median_ns=ns(d.filter(slow).median()),
            fast_min_ns=d.filter(~slow).min(), fast_max_ns=d.filter(~slow).max(),
            slow_min_ns=d.filter(slow).min(), slow_max_ns=d.filter(slow).max(),
            separation=pl.col("separation").first(),
            excess_ns=ns(d.filter(slow).sum() - slow.sum() * d.filter(~slow).median()),
        )
    )
    stats = (stats.join(busy, on="rank", how="left") if "rank" in keys
             else stats.join(busy, how="cross"))
    excess_pct = pl.when(pl.col("busy_ns") > 0).then(
        pl.col("excess_ns") / pl.col("busy_ns") * 100).otherwise(None)
    flag = ((pl.col("separation") >= MIN_SEPARATION)
            & (pl.col("slow_median_ns") >= MIN_RATIO * pl.col("fast_median_ns"))
            & (pl.col("excess_pct") >= MIN_EXCESS_PCT)).fill_null(False)
    return (
        stats.with_columns(excess_pct=excess_pct).with_columns(bimodal=flag)
        .select(*keys, "fast_count", "slow_count", "fast_median_ns", "slow_median_ns",
                "fast_min_ns", "fast_max_ns", "slow_min_ns", "slow_max_ns", "separation",
                "excess_ns", "excess_pct", "bimodal")
        .sort(keys)
    )
