"""compare/stats.py against brute force: U by counting pairs, null distributions by
enumerating every split, Hodges-Lehmann and Moses intervals from sorted pairwise
differences, Holm/BH on hand-worked lists, and seeded simulations of noise and shifts."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from statistics import median
from unittest import mock

import numpy as np
import pytest
import scipy.stats as sps
from hypothesis import given, settings
from hypothesis import strategies as st

from traceatlas.compare import stats
from traceatlas.compare.stats import adjust, compare_samples


def count_u(base: list[float], new: list[float]) -> float:
    """Mann-Whitney U of NEW: pairs where new > base, ties counting one half."""
    return sum(1.0 if b > a else 0.5 if b == a else 0.0 for a in base for b in new)


def exact_two_sided_p(base: list[float], new: list[float]) -> float:
    """Every way to split the pooled values into sizes (n, m); p = 2 min(P(U<=u), P(U>=u))."""
    pooled = base + new
    n = len(base)
    u_obs = count_u(base, new)
    us = []
    for idx in itertools.combinations(range(len(pooled)), n):
        chosen = set(idx)
        b = [pooled[i] for i in idx]
        w = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        us.append(count_u(b, w))
    lower = Fraction(sum(u <= u_obs for u in us), len(us))
    upper = Fraction(sum(u >= u_obs for u in us), len(us))
    return float(min(Fraction(1), 2 * min(lower, upper)))


def u_null_counts(n: int, m: int) -> list[int]:
    """Null counts of U (no ties) by enumerating which ranks go to BASE."""
    counts = [0] * (n * m + 1)
    for idx in itertools.combinations(range(n + m), n):
        # U of NEW = pairs (base rank, new rank) with new rank above
        base_ranks = set(idx)
        u = sum(1 for a in idx for b in range(n + m) if b not in base_ranks and b > a)
        counts[u] += 1
    return counts


def moses_k(n: int, m: int, confidence: float) -> tuple[int, Fraction] | None:
    """Largest k >= 1 with P(U <= k-1) <= (1-confidence)/2, with that probability."""
    counts = u_null_counts(n, m)
    total = sum(counts)
    half = (1 - Fraction(str(confidence))) / 2
    k, cum = 0, 0
    while k < len(counts) and Fraction(cum + counts[k], total) <= half:
        cum += counts[k]
        k += 1
    return None if k == 0 else (k, Fraction(cum, total))


# ---- Mann-Whitney -----------------------------------------------------------------


def test_u_counted_by_hand_and_exact_p() -> None:
    base, new = [1.0, 2.0, 4.0], [3.0, 5.0, 6.0]
    # new > base: 3 beats 1, 2; 5 and 6 beat all three -> U = 8 of 9
    assert count_u(base, new) == 8
    assert sps.mannwhitneyu(new, base, method="exact").statistic == 8
    # U for 3 vs 3 has 20 equally likely splits; U >= 8 in 2 of them -> p = 2 * 2/20
    assert exact_two_sided_p(base, new) == pytest.approx(0.2)
    assert compare_samples(base, new).p_value == pytest.approx(0.2)


@pytest.mark.parametrize(
    ("base", "new"),
    [
        ([10.0, 12.0, 11.0, 15.0], [13.0, 16.0, 14.0, 17.0, 18.0]),
        ([5.0, 1.0, 9.0, 3.0, 7.0], [2.0, 8.0, 4.0, 6.0]),
        ([1.0, 2.0, 2.0, 3.0], [2.0, 3.0, 3.0, 4.0, 5.0]),  # ties: permutation test
        ([0.0, 0.0, 4.0, 5.0, 6.0], [0.0, 7.0, 8.0, 9.0, 9.0]),  # ties at zero
    ],
)
def test_p_value_matches_enumeration(base: list[float], new: list[float]) -> None:
    assert compare_samples(base, new).p_value == pytest.approx(exact_two_sided_p(base, new))


def test_all_values_equal_gives_p_one() -> None:
    assert compare_samples([7.0] * 5, [7.0] * 4).p_value == 1.0


# ---- Hodges-Lehmann shift and Moses interval -------------------------------------------


@pytest.mark.parametrize(
    ("base", "new", "confidence"),
    [
        ([100.0, 103.0, 98.0, 101.0], [110.0, 108.0, 115.0, 104.0, 109.0], 0.95),
        ([1.0, 4.0, 2.0, 8.0, 5.0, 7.0], [3.0, 9.0, 6.0, 10.0, 12.0, 11.0], 0.95),
        ([1.0, 4.0, 2.0, 8.0, 5.0, 7.0], [3.0, 9.0, 6.0, 10.0, 12.0, 11.0], 0.80),
        (
            [50.0, 51.5, 49.0, 52.0, 48.5, 50.5, 51.0, 49.5],
            [53.0, 52.5, 55.0, 51.2, 54.0, 56.0, 52.8, 53.3],
            0.95,
        ),
    ],
)
def test_shift_and_interval_by_brute_force(
    base: list[float], new: list[float], confidence: float
) -> None:
    diffs = sorted(b - a for a in base for b in new)
    n, m = len(base), len(new)
    found = moses_k(n, m, confidence)
    assert found is not None
    k, tail = found
    got = compare_samples(base, new, confidence=confidence)
    assert got.abs_change_ns == pytest.approx(median(diffs))
    assert got.rel_change == pytest.approx(median(diffs) / median(base))
    assert (got.ci_low_ns, got.ci_high_ns) == (diffs[k - 1], diffs[n * m - k])
    assert got.ci_level == pytest.approx(float(1 - 2 * tail))
    assert got.ci_level is not None and got.ci_level >= confidence
    assert (got.base_median_ns, got.new_median_ns) == (median(base), median(new))


def test_interval_unavailable_when_too_small() -> None:
    # 3 vs 3: P(U = 0) = 1/20 > 0.025, no 95 % interval exists
    assert moses_k(3, 3, 0.95) is None
    got = compare_samples([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])
    assert got.testable and got.p_value == pytest.approx(0.1)
    assert got.ci_low_ns is None and got.ci_high_ns is None and got.ci_level is None


def test_untestable_below_three_values() -> None:
    got = compare_samples([10.0, 11.0], [20.0, 21.0, 22.0, 23.0])
    assert not got.testable and got.p_value is None and got.ci_low_ns is None
    assert got.abs_change_ns == median([b - a for a in [10.0, 11.0] for b in [20, 21, 22, 23]])


def test_zero_base_median_has_no_relative_change() -> None:
    got = compare_samples([0.0, 0.0, 0.0, 5.0], [3.0, 4.0, 5.0, 6.0])
    assert got.rel_change is None and got.abs_change_ns > 0


def test_faster_is_negative() -> None:
    got = compare_samples([10.0, 11.0, 12.0, 13.0], [5.0, 6.0, 7.0, 8.0])
    assert got.abs_change_ns == -5.0 and got.rel_change == pytest.approx(-5.0 / 11.5)


@pytest.mark.parametrize(
    ("base", "new"), [([], [1.0]), ([1.0, float("nan")], [1.0]), ([[1.0]], [1.0])]
)
def test_bad_samples_raise(base: list[float], new: list[float]) -> None:
    with pytest.raises(ValueError):
        compare_samples(base, new)


samples = st.lists(
    st.one_of(
        st.integers(-(10**9), 10**9).map(float),
        st.floats(min_value=-1e9, max_value=1e9, allow_nan=False),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=80, deadline=None)
@given(samples, samples)
def test_selection_by_bisection_matches_sorting(base: list[float], new: list[float]) -> None:
    """The bisection path (large samples) picks the same order statistics as a full sort."""
    diffs = np.sort(np.subtract.outer(np.asarray(new, float), np.asarray(base, float)).ravel())
    with mock.patch.object(stats, "_MATERIALISE_MAX_PAIRS", 0):
        got = compare_samples(base, new)
    assert got.abs_change_ns == float(np.median(diffs))
    if got.ci_low_ns is not None and got.ci_high_ns is not None:
        k = stats._ci_rank(len(base), len(new), 0.95)
        assert k is not None
        assert (got.ci_low_ns, got.ci_high_ns) == (diffs[k - 1], diffs[diffs.size - k])
        assert got.ci_low_ns <= got.abs_change_ns <= got.ci_high_ns


@pytest.mark.parametrize("case", ["ties", "lognormal", "constant", "two_values"])
def test_bisection_on_larger_samples(case: str) -> None:
    """Samples large enough that the bisection runs many rounds (and ties, equal values)."""
    rng = np.random.default_rng(3)
    if case == "ties":
        base, new = rng.integers(0, 20, 400).astype(float), rng.integers(3, 25, 300).astype(float)
    elif case == "lognormal":
        base, new = rng.lognormal(10, 0.5, 400), rng.lognormal(10.1, 0.5, 300)
    elif case == "constant":
        base, new = np.full(400, 5.0), np.full(300, 7.5)
    else:
        base, new = rng.choice([1.0, 2.0], 400), rng.choice([1.0, 3.0], 300)
    diffs = np.sort(np.subtract.outer(new, base).ravel())
    with mock.patch.object(stats, "_MATERIALISE_MAX_PAIRS", 0):
        got = compare_samples(base, new)
    k = stats._ci_rank(400, 300, 0.95)
    assert k is not None
    assert got.abs_change_ns == float(np.median(diffs))
    assert (got.ci_low_ns, got.ci_high_ns) == (diffs[k - 1], diffs[diffs.size - k])


def test_large_samples_normal_interval_covers() -> None:
    rng = np.random.default_rng(7)
    base = rng.lognormal(10.0, 0.03, size=3000)
    new = rng.lognormal(10.0, 0.03, size=2000) * 1.02
    got = compare_samples(base, new)
    true_shift = float(np.median(new) - np.median(base))
    assert got.ci_level == pytest.approx(0.95, abs=0.002)
    assert got.ci_low_ns is not None and got.ci_high_ns is not None
    assert got.ci_low_ns < true_shift < got.ci_high_ns
    assert got.p_value is not None and got.p_value < 1e-6


# ---- multiple comparisons ----------------------------------------------------------


def test_holm_hand_worked() -> None:
    # sorted 0.005 0.01 0.03 0.04 scaled by 4 3 2 1: 0.02 0.03 0.06 0.04 -> running max
    assert adjust([0.01, 0.04, None, 0.03, 0.005]) == pytest.approx([0.03, 0.06, None, 0.06, 0.02])
    # 0.01*3 = 0.03; 0.2*2 = 0.4; 0.5*1 = 0.5
    assert adjust([0.5, 0.2, 0.01], "holm") == pytest.approx([0.5, 0.4, 0.03])
    # 0.3*2 = 0.6, then 0.6 stays 0.6 (running max); capped at 1 below
    assert adjust([0.6, 0.3], "holm") == pytest.approx([0.6, 0.6])
    assert adjust([0.9, 0.8], "holm") == pytest.approx([1.0, 1.0])


def test_bh_hand_worked() -> None:
    # sorted 0.005 0.01 0.03 0.04 times 4/i: 0.02 0.02 0.04 0.04 (running min from the top)
    assert adjust([0.01, 0.04, None, 0.03, 0.005], "bh") == pytest.approx(
        [0.02, 0.04, None, 0.04, 0.02]
    )
    # 0.01*3/1 = 0.03; 0.04*3/2 = 0.06; 0.045*3/3 = 0.045 -> min from top: 0.045, 0.045
    assert adjust([0.045, 0.01, 0.04], "bh") == pytest.approx([0.045, 0.03, 0.045])


def test_adjust_edges() -> None:
    assert adjust([]) == [] and adjust([None, None], "bh") == [None, None]
    with pytest.raises(ValueError):
        adjust([1.5])
    with pytest.raises(ValueError):
        adjust([0.1], "bonferroni")  # type: ignore[arg-type]


# ---- simulations: noise stays quiet, a real shift is found -------------------------------

TRIALS, ENTITIES, N, NOISE = 200, 20, 8, 0.03


def _family(rng: np.random.Generator, shift: float) -> list[float | None]:
    """Holm-adjusted p-values of ENTITIES entities; entity 0 is slower by ``shift``."""
    ps: list[float | None] = []
    for e in range(ENTITIES):
        level = rng.uniform(1e4, 1e7)
        base = level * rng.lognormal(0.0, NOISE, size=N)
        new = level * rng.lognormal(0.0, NOISE, size=N) * (1.0 + (shift if e == 0 else 0.0))
        ps.append(compare_samples(base, new).p_value)
    return adjust(ps, "holm")


def test_false_alarm_rate_on_pure_noise() -> None:
    rng = np.random.default_rng(20261124)
    alarms = sum(any(p is not None and p < 0.05 for p in _family(rng, 0.0)) for _ in range(TRIALS))
    # measured with this seed: 8/200 = 4.0 % (docs/definitions.md, "Comparing runs")
    assert alarms / TRIALS <= 0.05


def test_twenty_percent_shift_is_detected() -> None:
    rng = np.random.default_rng(11)
    hits = 0
    for _ in range(TRIALS):
        adjusted = _family(rng, 0.20)
        hits += adjusted[0] is not None and adjusted[0] < 0.05
    assert hits / TRIALS >= 0.95


def test_exact_null_counts_match_enumeration() -> None:
    for n, m in [(1, 1), (2, 3), (3, 3), (4, 5), (5, 5)]:
        assert list(stats._u_counts(n, m)) == u_null_counts(n, m)
        assert sum(stats._u_counts(n, m)) == math.comb(n + m, n)
