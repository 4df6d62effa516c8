"""Is one entity slower in run NEW than in run BASE, beyond the noise across iterations?

One entity (a kernel's time per step, a step's duration, ...) gives one value per iteration
(per step, per rank) on each side, in ns. ``compare_samples`` compares the two samples with
rank statistics that assume nothing about the distribution:

- the shift is the Hodges-Lehmann estimate: the median of the ``n_base * n_new`` pairwise
  differences ``new_j - base_i`` (ns);
- the p-value is the two-sided Mann-Whitney U test (as ``scipy.stats.mannwhitneyu``
  computes it, with numpy: scipy is not imported, it costs ~0.6 s);
- the confidence interval for the shift is the Moses construction from the same pairwise
  differences: with ``k`` the largest integer such that ``P(U <= k - 1) <= (1 - confidence)
  / 2`` under the null distribution of U, the interval is ``[D_(k), D_(nm - k + 1)]``
  (``D`` the sorted differences, 1-based); it covers the true shift with probability
  ``1 - 2 P(U <= k - 1) >= confidence`` for continuous data.

``adjust`` corrects a family of p-values for the number of comparisons (Holm or
Benjamini-Hochberg). Definitions: ``docs/definitions.md``, "Comparing runs (statistics)".
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist
from typing import Literal

import numpy as np
import numpy.typing as npt

MIN_TESTABLE = 3
"""Fewer values than this on either side: the change is reported, never tested or gated."""

_EXACT_U_MAX_PAIRS = 2_500
"""No ties and ``n * m`` at most this: exact U distribution (p-value and CI critical value)."""

_EXACT_PERMUTATIONS_MAX = 20_000
"""Ties and at most this many ways to split the pooled values: exact permutation p-value."""

_MATERIALISE_MAX_PAIRS = 1_000_000
"""Pairwise differences are built in memory up to this many; above, selected by bisection."""

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Change:
    """How one entity changed from BASE to NEW (times in ns).

    ``abs_change_ns`` is the Hodges-Lehmann shift (positive: NEW slower), ``rel_change`` the
    shift over the BASE median (None when that median is 0). ``p_value`` is the two-sided
    Mann-Whitney p-value, before any correction for multiple comparisons. ``ci_low_ns`` /
    ``ci_high_ns`` bound the shift at ``ci_level`` (the confidence the interval achieves,
    at least the one asked); all three are None when the samples are too small for the
    confidence asked (3 vs 3 at 95 %). ``testable`` is False when either side has fewer
    than ``MIN_TESTABLE`` values: then ``p_value`` is None and the change is only reported.
    """

    n_base: int
    n_new: int
    base_median_ns: float
    new_median_ns: float
    abs_change_ns: float
    rel_change: float | None
    p_value: float | None
    ci_low_ns: float | None
    ci_high_ns: float | None
    ci_level: float | None
    testable: bool


def _as_sample(values: npt.ArrayLike, side: str) -> FloatArray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{side}: expected a 1-D array of values in ns, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{side}: no values (an entity absent on one side is added/removed)")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{side}: values must be finite numbers of ns")
    return np.sort(arr)


def compare_samples(base: npt.ArrayLike, new: npt.ArrayLike, *, confidence: float = 0.95) -> Change:
    """Compare one entity's per-iteration values (ns) in BASE and NEW; see the module doc.

    Raises ValueError for an empty side, non-finite values, a non 1-D input, or a
    confidence outside (0, 1) (the caller's mistake, not the user's input).
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    x = _as_sample(base, "base")
    y = _as_sample(new, "new")
    n, m = int(x.size), int(y.size)
    base_median = float(np.median(x))
    new_median = float(np.median(y))
    total = n * m
    ranks = [(total + 1) // 2, total // 2 + 1]  # the median: one or two order statistics
    testable = n >= MIN_TESTABLE and m >= MIN_TESTABLE
    k = _ci_rank(n, m, confidence) if testable else None
    if k is not None:
        ranks += [k, total - k + 1]
    values = _pairwise_order_stats(x, y, ranks)
    shift = (values[0] + values[1]) / 2.0
    ci_low = ci_high = ci_level = None
    if k is not None:
        ci_low, ci_high = values[2], values[3]
        ci_level = 1.0 - 2.0 * _u_cdf(n, m, k - 1)
    return Change(
        n_base=n,
        n_new=m,
        base_median_ns=base_median,
        new_median_ns=new_median,
        abs_change_ns=shift,
        rel_change=shift / base_median if base_median != 0.0 else None,
        p_value=_mann_whitney_p(x, y) if testable else None,
        ci_low_ns=ci_low,
        ci_high_ns=ci_high,
        ci_level=ci_level,
        testable=testable,
    )


def _mann_whitney_p(x: FloatArray, y: FloatArray) -> float:
    """Two-sided Mann-Whitney p-value: exact without ties on small samples, an exact
    permutation test with ties when the splits are few, else the normal approximation
    (tie-corrected, continuity-corrected)."""
    n, m = x.size, y.size
    pooled = np.concatenate([x, y])
    if pooled.min() == pooled.max():
        return 1.0  # every value equal: no evidence of any change
    has_ties = np.unique(pooled).size < pooled.size
    if has_ties and math.comb(n + m, n) <= _EXACT_PERMUTATIONS_MAX:
        return _permutation_p(pooled, m)
    ranks = rankdata(pooled)
    u_new = float(ranks[n:].sum()) - m * (m + 1) / 2.0  # U of NEW (scipy's first sample)
    u_big = max(u_new, n * m - u_new)
    if not has_ties and n * m <= _EXACT_U_MAX_PAIRS:
        counts = _u_counts(n, m)
        p = 2.0 * sum(counts[int(u_big):]) / math.comb(n + m, n)
    else:
        p = _normal_p(u_big, n, m, pooled)
    return float(min(1.0, max(0.0, p)))


def _normal_p(u_big: float, n: int, m: int, pooled: FloatArray) -> float:
    """Two-sided normal approximation of Mann-Whitney's U (tie and continuity corrected),
    as ``scipy.stats.mannwhitneyu(method="asymptotic")`` computes it."""
    total = n + m
    _, ties = np.unique(pooled, return_counts=True)
    tie_term = float((ties.astype(np.float64) ** 3 - ties).sum())
    sd = math.sqrt(n * m / 12.0 * ((total + 1) - tie_term / (total * (total - 1))))
    z = (u_big - n * m / 2.0 - 0.5) / sd
    return 2.0 * 0.5 * math.erfc(z / math.sqrt(2.0))


def rankdata(values: FloatArray) -> FloatArray:
    """Ranks 1..n with ties given their mean rank (``scipy.stats.rankdata``'s default)."""
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], ordered.size]
    mean_rank = (starts + 1 + ends) / 2.0  # mean of ranks starts+1 .. ends
    out = np.empty(values.size, dtype=np.float64)
    out[order] = np.repeat(mean_rank, ends - starts)
    return out


@lru_cache(maxsize=16)
def _splits(size: int, m: int) -> npt.NDArray[np.intp]:
    """Every choice of ``m`` positions out of ``size`` (one row each)."""
    rows = itertools.chain.from_iterable(itertools.combinations(range(size), m))
    return np.fromiter(rows, dtype=np.intp).reshape(-1, m)


def _permutation_p(pooled: FloatArray, m: int) -> float:
    """Exact two-sided permutation p-value of U with ties (midranks): over every split of
    the pooled values into sizes (n, m), ``2 min(P(U <= u), P(U >= u))``, at most 1. The
    NEW sample is the last ``m`` values of ``pooled``."""
    twice_ranks = np.rint(2.0 * rankdata(pooled)).astype(np.int64)  # midranks: exact
    sums = twice_ranks[_splits(pooled.size, m)].sum(axis=1)
    observed = int(twice_ranks[-m:].sum())
    lower = np.count_nonzero(sums <= observed) / sums.size
    upper = np.count_nonzero(sums >= observed) / sums.size
    return float(min(1.0, 2.0 * min(lower, upper)))


@lru_cache(maxsize=256)
def _u_counts(n: int, m: int) -> tuple[int, ...]:
    """Number of orderings of n + m distinct values giving each U = 0..nm (exact integers):
    the coefficients of the Gaussian binomial [n+m choose n]_q = prod (1-q^(m+i))/(1-q^i)."""
    size = n * m + 1
    poly = [0] * size
    poly[0] = 1
    for i in range(1, n + 1):
        step = m + i
        for d in range(size - 1, step - 1, -1):  # multiply by (1 - q^(m+i))
            poly[d] -= poly[d - step]
        for d in range(i, size):  # divide by (1 - q^i): running sum with stride i
            poly[d] += poly[d - i]
    return tuple(poly)


def _u_cdf(n: int, m: int, u: int) -> float:
    """P(U <= u) under the null (no ties): exact when ``n*m`` is small, else normal with a
    continuity correction."""
    if u < 0:
        return 0.0
    if n * m <= _EXACT_U_MAX_PAIRS:
        counts = _u_counts(n, m)
        return sum(counts[: u + 1]) / math.comb(n + m, n)
    mean = n * m / 2.0
    sd = math.sqrt(n * m * (n + m + 1) / 12.0)
    return NormalDist().cdf((u + 0.5 - mean) / sd)


@lru_cache(maxsize=1024)
def _ci_rank(n: int, m: int, confidence: float) -> int | None:
    """The largest k >= 1 with P(U <= k - 1) <= (1 - confidence) / 2; None if there is none."""
    half_alpha = (1.0 - confidence) / 2.0
    if _u_cdf(n, m, 0) > half_alpha:
        return None
    if n * m <= _EXACT_U_MAX_PAIRS:
        counts = _u_counts(n, m)
        limit = half_alpha * math.comb(n + m, n) * (1.0 + 1e-12)  # float slack at ties
        cum, k = 0, 0
        while k < len(counts) and cum + counts[k] <= limit:
            cum += counts[k]
            k += 1
        return min(k, (n * m + 1) // 2)
    mean = n * m / 2.0
    sd = math.sqrt(n * m * (n + m + 1) / 12.0)
    k = math.floor(mean - 0.5 + NormalDist().inv_cdf(half_alpha) * sd) + 1
    while k > 1 and _u_cdf(n, m, k - 1) > half_alpha:  # guard rounding at the boundary
        k -= 1
    return max(1, min(k, (n * m + 1) // 2))


def _pairwise_order_stats(x: FloatArray, y: FloatArray, ranks: Sequence[int]) -> list[float]:
    """The 1-based ``ranks``-th smallest of the differences ``y_j - x_i`` (x, y sorted)."""
    if x.size * y.size <= _MATERIALISE_MAX_PAIRS:
        diffs = np.subtract.outer(y, x).ravel()
        diffs.partition(sorted({r - 1 for r in ranks}))  # in place: no copy
        return [float(diffs[r - 1]) for r in ranks]
    found = _select_differences(x, y, ranks)
    return [found[r] for r in ranks]


def _count_le(x: FloatArray, y: FloatArray, t: float) -> npt.NDArray[np.int64]:
    """Per i, how many j have ``y_j - x_i <= t``, decided on the float differences (as the
    materialised path does): ``searchsorted`` on ``x_i + t`` (which may round), then moved
    over the few values where the two predicates disagree (rows are monotone in j)."""
    m = y.size
    idx = np.searchsorted(y, x + t, side="right").astype(np.int64)
    while True:  # y[idx] still qualifies: move past its run of equal values
        up = idx < m
        up[up] = (y[idx[up]] - x[up]) <= t
        if not up.any():
            break
        idx[up] = np.searchsorted(y, y[idx[up]], side="right")
    while True:  # y[idx - 1] does not qualify: move before its run of equal values
        down = idx > 0
        down[down] = (y[idx[down] - 1] - x[down]) > t
        if not down.any():
            return idx
        idx[down] = np.searchsorted(y, y[idx[down] - 1], side="left")


def _select_differences(x: FloatArray, y: FloatArray, ranks: Sequence[int]) -> dict[int, float]:
    """The rank-th smallest ``y_j - x_i`` for each rank without building all n*m
    differences: bisect on the value until few differences lie in the bracket, then sort
    those (a bracket also answers the other ranks it holds, e.g. the median's pair)."""
    out: dict[int, float] = {}
    budget = 4 * (x.size + y.size)
    for rank in sorted(set(ranks)):
        if rank in out:
            continue
        lo_v = float(np.nextafter(y[0] - x[-1], -np.inf))  # below every difference
        hi_v = float(y[-1] - x[0])  # the largest difference
        lo_c = np.zeros(x.size, dtype=np.int64)
        hi_c = np.full(x.size, y.size, dtype=np.int64)
        flat = False
        while int((hi_c - lo_c).sum()) > budget:
            mid = lo_v + (hi_v - lo_v) / 2.0
            if mid <= lo_v or mid >= hi_v:
                flat = True  # no float strictly between: every difference in (lo, hi] is hi
                break
            counts = _count_le(x, y, mid)
            if int(counts.sum()) >= rank:
                hi_v, hi_c = mid, counts
            else:
                lo_v, lo_c = mid, counts
        below, upto = int(lo_c.sum()), int(hi_c.sum())
        held = [r for r in ranks if below < r <= upto]
        if flat:
            out.update(dict.fromkeys(held, hi_v))
            continue
        lengths = hi_c - lo_c
        rows = np.repeat(np.arange(x.size), lengths)
        offsets = np.arange(upto - below) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        cand = np.sort(y[np.repeat(lo_c, lengths) + offsets] - x[rows])
        out.update({r: float(cand[r - below - 1]) for r in held})
    return out


def adjust(
    p_values: Sequence[float | None], method: Literal["holm", "bh"] = "holm"
) -> list[float | None]:
    """Correct p-values for multiple comparisons; None (untestable) passes through and does
    not count in the family.

    ``holm``: Holm's step-down (family-wise error rate); ``bh``: Benjamini-Hochberg (false
    discovery rate, as ``scipy.stats.false_discovery_control`` computes it).
    """
    present = [i for i, p in enumerate(p_values) if p is not None]
    ps = np.array([p_values[i] for i in present], dtype=np.float64)
    if ps.size and (not np.all(np.isfinite(ps)) or ps.min() < 0.0 or ps.max() > 1.0):
        raise ValueError("p-values must lie in [0, 1]")
    if method == "holm":
        order = np.argsort(ps, kind="stable")
        scaled = (ps.size - np.arange(ps.size)) * ps[order]
        adj_sorted = np.minimum(1.0, np.maximum.accumulate(scaled)) if ps.size else scaled
        adjusted = np.empty_like(ps)
        adjusted[order] = adj_sorted
    elif method == "bh":
        order = np.argsort(ps, kind="stable")
        scaled = ps[order] * ps.size / np.arange(1, ps.size + 1)
        adj_sorted = np.clip(np.minimum.accumulate(scaled[::-1])[::-1], 0.0, 1.0)
        adjusted = np.empty_like(ps)
        adjusted[order] = adj_sorted
    else:
        raise ValueError(f"unknown correction {method!r}: use 'holm' or 'bh'")
    out: list[float | None] = [None] * len(p_values)
    for i, p in zip(present, adjusted, strict=True):
        out[i] = float(p)
    return out
