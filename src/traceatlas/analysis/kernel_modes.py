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
    """The ``modes`` table (module docstring) of ``rows`` (``*keys, dur_ns, n``: each
    distinct duration once with its number of calls ``n``; without ``n``, one row a
    call) per group, and per ``shape``
    too when ``rows`` has that column (``kernel_shapes``); ``busy``: columns ``rank,
    busy_ns`` when ``rank`` is a key, else one ``busy_ns``. Computed eagerly on the
    distinct durations (never one row a call): the cut is searched at the ends of the runs
    of equal durations and at the two fraction bounds (inside a run the within-group
    variance is concave in the cut, so its least value is at one of these)."""
    import polars as pl

    names = rows.collect_schema().names()
    if "shape" in names:
        keys = [*keys, "shape"]  # one split per input shape: shapes are not modes
    if "n" not in names:  # one row a call
        rows = rows.group_by(*keys, "dur_ns").agg(pl.len().cast(pl.Int64).alias("n"))
    groups = (rows.group_by(keys).agg(_d=pl.col("dur_ns").sort(),
                                      _w=pl.col("n").sort_by("dur_ns"),
                                      _n=pl.col("n").sum(), _m=pl.len())
              .filter(pl.col("_n") >= MIN_SAMPLES).sort(keys, nulls_last=True).collect())
    split = _split(groups["_d"].explode().to_numpy(), groups["_w"].explode().to_numpy(),
                   groups["_m"].to_numpy(), groups["_n"].to_numpy())
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


def _split(d: np.ndarray, w: np.ndarray, sizes: np.ndarray,
           counts: np.ndarray) -> dict[str, np.ndarray]:
    """Per group (``sizes[i]`` consecutive distinct durations of ``d``, sorted within the
    group, ``w`` calls each, ``counts[i]`` >= MIN_SAMPLES calls in all): the best cut of
    the log durations and each side's numbers (``COLUMNS``). Cut k = calls at or below."""
    d, w = d.astype(np.int64), w.astype(np.int64)
    sizes, counts = sizes.astype(np.int64), counts.astype(np.int64)
    if len(counts) == 0:
        return {c: np.zeros(0, np.float64 if c == "separation" else np.int64)
                for c in COLUMNS}
    n_groups = len(counts)
    starts = np.r_[0, np.cumsum(sizes)[:-1]]                 # first row of each group
    ends = starts + sizes
    call0 = np.r_[0, np.cumsum(counts)[:-1]]                 # calls before each group
    wc = np.cumsum(w)                                        # calls up to each row
    x = np.log(np.maximum(d, 1).astype(np.float64))
    x -= np.repeat(np.add.reduceat(x * w, starts) / counts, sizes)  # centred
    cx, cq, cd = _before(x * w, starts, ends), _before(x * x * w, starts, ends), \
        _before(d * w, starts, ends)

    def row_of(g: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row holding the k-th call of group g (k >= 1), calls of that row up to it)."""
        r = np.searchsorted(wc, call0[g] + k, side="left")
        return r, call0[g] + k - (wc[r] - w[r])

    def below(c: np.ndarray, v: np.ndarray, g: np.ndarray, k: np.ndarray) -> np.ndarray:
        """Sum of v over the first k calls of group g (``c``: ``_before`` of v * w)."""
        r, j = row_of(g, k)
        out: np.ndarray = c[r] + j * v[r]
        return out

    least = np.maximum(1, np.ceil(counts * MODE_MIN_FRACTION)).astype(np.int64)
    row_g = np.repeat(np.arange(n_groups), sizes)
    cand_g = np.r_[row_g, np.arange(n_groups), np.arange(n_groups)]
    cand_k = np.r_[wc - call0[row_g], least, counts - least]
    n, lo = counts[cand_g], least[cand_g]
    valid = (cand_k >= lo) & (n - cand_k >= lo)
    cand_g, cand_k, n = cand_g[valid], cand_k[valid], n[valid]
    s1, q1 = below(cx, x, cand_g, cand_k), below(cq, x * x, cand_g, cand_k)
    s = (cx[ends - 1] + x[ends - 1] * w[ends - 1])[cand_g]
    q = (cq[ends - 1] + x[ends - 1] ** 2 * w[ends - 1])[cand_g]
    within = (q1 - s1 * s1 / cand_k) + ((q - q1) - (s - s1) ** 2 / (n - cand_k))
    order = np.lexsort((cand_k, within, cand_g))             # smallest cut on a tie
    first = order[np.unique(cand_g[order], return_index=True)[1]]
    best, cut = within[first], cand_k[first]
    groups = np.arange(n_groups)
    total = cq[ends - 1] + x[ends - 1] ** 2 * w[ends - 1]
    m = counts - cut

    def at(i: np.ndarray) -> np.ndarray:
        """Duration of the call at 0-based position i of each group, sorted."""
        found: np.ndarray = d[np.searchsorted(wc, call0 + i, side="right")]
        return found

    def median(lo: np.ndarray, size: np.ndarray) -> np.ndarray:
        mid: np.ndarray = np.rint((at(lo + (size - 1) // 2) + at(lo + size // 2)) / 2)
        return mid.astype(np.int64)

    fast_mid = (at((cut - 1) // 2) + at(cut // 2)) / 2  # exact median
    slow_sum = (cd[ends - 1] + d[ends - 1] * w[ends - 1]) - below(cd, d, groups, cut)
    with np.errstate(divide="ignore", invalid="ignore"):
        separation = np.where((total > 0) & (d[starts] < d[ends - 1]),  # one value: 0
                              np.clip(1 - best / total, 0.0, 1.0), 0.0)
    zero = np.zeros(n_groups, np.int64)
    return {
        "fast_count": cut.astype(np.int64), "slow_count": m.astype(np.int64),
        "fast_median_ns": median(zero, cut), "slow_median_ns": median(cut, m),
        "fast_min_ns": at(zero), "fast_max_ns": at(cut - 1),
        "slow_min_ns": at(cut), "slow_max_ns": at(counts - 1),
        "separation": separation,
        "excess_ns": np.rint(slow_sum - m * fast_mid).astype(np.int64),
    }


def _before(values: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per row, the sum of ``values`` over the rows before it in its group (each group
    summed on its own: no offset carried over from the groups before it)."""
    out = np.zeros_like(values)
    for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True):
        out[lo + 1:hi] = np.cumsum(values[lo:hi - 1])
    return out
