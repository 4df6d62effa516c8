"""The two-mode split behind the ``bimodal`` flag of ``kernels`` (table ``modes``).

Per group of durations (one kernel name on one rank, or over all ranks; and one input
shape of the launching op when the rows carry ``shape``, so that a kernel running on two
shapes at two speeds is two unimodal groups, not one bimodal one) with at least
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
flash attention at 155 us or 7.87 ms on ``nsys-ai/mfu_2gpu_before``, NCCL kernels with
small and large messages. Split by shape (issue 22), the fp32 GEMMs of
``h100-planted/regress`` (then flagged) are four shapes of 5 calls each, 0.7 ms for one
and 7.7 ms for the others: not modes of one kernel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

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
