"""``compare.stats`` computes Mann-Whitney's p-value, mid-ranks and Benjamini-Hochberg
with numpy alone (scipy costs ~0.6 s to import): the same numbers as scipy's own
``mannwhitneyu``, ``rankdata`` and ``false_discovery_control`` (the independent source),
on Hypothesis-drawn samples with and without ties, exact and asymptotic."""

from __future__ import annotations

import math
import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps  # type: ignore[import-untyped]

from traceatlas.compare import stats

SAMPLES = st.lists(st.integers(0, 40), min_size=3, max_size=70)


@settings(max_examples=150, deadline=None)
@given(SAMPLES, SAMPLES)
def test_p_value_is_scipy_mannwhitneyu(x: list[int], y: list[int]) -> None:
    xs, ys = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    pooled = np.concatenate([xs, ys])
    ours = stats._mann_whitney_p(xs, ys)
    if pooled.min() == pooled.max():
        assert ours == 1.0
        return
    ties = np.unique(pooled).size < pooled.size
    if ties and math.comb(xs.size + ys.size, xs.size) <= stats._EXACT_PERMUTATIONS_MAX:
        return  # the permutation test, not scipy's: tested in test_compare_stats
    method = "exact" if not ties and xs.size * ys.size <= stats._EXACT_U_MAX_PAIRS \
        else "asymptotic"
    want = sps.mannwhitneyu(ys, xs, alternative="two-sided", method=method).pvalue
    assert math.isclose(ours, min(1.0, float(want)), rel_tol=1e-9, abs_tol=1e-15)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=6, max_size=80, unique=True),
       st.integers(3, 40))
def test_exact_without_ties(values: list[int], split: int) -> None:
    split = min(split, len(values) - 3)
    xs = np.asarray(values[:split], dtype=np.float64)
    ys = np.asarray(values[split:], dtype=np.float64)
    if xs.size * ys.size > stats._EXACT_U_MAX_PAIRS:
        return
    want = sps.mannwhitneyu(ys, xs, alternative="two-sided", method="exact").pvalue
    assert math.isclose(stats._mann_whitney_p(xs, ys), min(1.0, float(want)),
                        rel_tol=1e-9, abs_tol=1e-15)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-5, 5), min_size=1, max_size=60))
def test_rankdata_is_scipy(values: list[int]) -> None:
    arr = np.asarray(values, dtype=np.float64)
    assert np.array_equal(stats.rankdata(arr), sps.rankdata(arr))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=40))
def test_bh_is_scipy(ps: list[float]) -> None:
    ours = np.asarray(stats.adjust(ps, "bh"), dtype=np.float64)
    assert np.allclose(ours, sps.false_discovery_control(np.asarray(ps), method="bh"),
                       rtol=1e-12, atol=0.0)


def test_stats_does_not_import_scipy() -> None:
    import subprocess

    code = ("import sys, traceatlas.compare.diff, traceatlas.compare.diff_format; "
            "print('scipy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"
