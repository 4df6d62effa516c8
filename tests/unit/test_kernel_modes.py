"""The two-mode split behind ``kernels``' ``bimodal`` flag (``analysis/kernel_modes.py``):
synthetic samples with a known shape, and the cut checked against a plain loop."""

from __future__ import annotations

import math
import random
import statistics

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceatlas.analysis.kernel_modes import MIN_EXCESS_PCT, modes


def _run(durations: list[int], busy_ns: int | None = None) -> dict[str, object]:
    rows = pl.LazyFrame({"rank": [0] * len(durations), "name": ["k"] * len(durations),
                         "dur_ns": durations}, schema={"rank": pl.Int32, "name": pl.String,
                                                       "dur_ns": pl.Int64})
    busy = pl.LazyFrame({"rank": [0], "busy_ns": [busy_ns or sum(durations)]},
                        schema={"rank": pl.Int32, "busy_ns": pl.Int64})
    table = modes(rows, ["rank", "name"], busy).collect()
    assert table.height == 1
    return table.row(0, named=True)


def _lognormal(rng: random.Random, median_ns: float, sigma: float, n: int) -> list[int]:
    return [round(median_ns * math.exp(rng.gauss(0.0, sigma))) for _ in range(n)]


def test_two_separated_modes_are_flagged() -> None:
    rng = random.Random(1)
    fast, slow = _lognormal(rng, 100_000, 0.05, 60), _lognormal(rng, 400_000, 0.05, 40)
    row = _run(fast + slow)
    assert row["bimodal"] is True
    assert (row["fast_count"], row["slow_count"]) == (60, 40)
    assert row["fast_median_ns"] == round(statistics.median(fast))
    assert row["slow_median_ns"] == round(statistics.median(slow))
    assert (row["fast_min_ns"], row["fast_max_ns"]) == (min(fast), max(fast))
    assert (row["slow_min_ns"], row["slow_max_ns"]) == (min(slow), max(slow))
    assert row["excess_ns"] == round(sum(slow) - 40 * statistics.median(fast))
    assert row["separation"] > 0.99  # modes ln 4 apart, 0.05 wide


def test_unimodal_lognormal_is_not_flagged() -> None:
    rng = random.Random(2)
    row = _run(_lognormal(rng, 200_000, 0.3, 500))
    assert row["bimodal"] is False
    # the best cut of a normal sample explains 2/pi of its variance
    assert row["separation"] == pytest.approx(2 / math.pi, abs=0.05)


def test_small_minority_is_not_a_mode() -> None:
    rng = random.Random(3)
    row = _run(_lognormal(rng, 100_000, 0.02, 90) + _lognormal(rng, 900_000, 0.02, 10))
    assert row["bimodal"] is False  # 10 % slow calls: an outlier group, not a mode
    assert min(row["fast_count"], row["slow_count"]) >= 20  # the cut keeps 20 % a side


def test_modes_too_close_or_too_cheap_are_not_flagged() -> None:
    rng = random.Random(4)
    near = _lognormal(rng, 100_000, 0.005, 50) + _lognormal(rng, 130_000, 0.005, 50)
    row = _run(near)
    assert row["separation"] > 0.9 and row["bimodal"] is False  # 1.3x < 1.5x
    far = _lognormal(rng, 100_000, 0.02, 50) + _lognormal(rng, 300_000, 0.02, 50)
    excess = sum(sorted(far)[50:]) - 50 * statistics.median(sorted(far)[:50])
    assert _run(far)["bimodal"] is True
    # the same kernel in a run where it is a sliver of the device time
    busy = math.ceil(excess * 100 / (MIN_EXCESS_PCT / 2))
    assert _run(far, busy_ns=busy)["bimodal"] is False


def test_too_few_calls_have_no_row() -> None:
    rows = pl.LazyFrame({"rank": [0] * 9, "name": ["k"] * 9,
                         "dur_ns": [1_000] * 5 + [9_000] * 4})
    busy = pl.LazyFrame({"rank": [0], "busy_ns": [50_000]})
    assert modes(rows, ["rank", "name"], busy).collect().height == 0


def _best_within(values: list[int]) -> float:
    """Smallest within-group sum of squares of log(d) over cuts leaving ceil(n / 5)
    calls a side: a plain loop over every cut."""
    x = sorted(math.log(max(v, 1)) for v in values)
    n, least = len(x), max(1, math.ceil(len(x) * 0.2))

    def ss(part: list[float]) -> float:
        m = sum(part) / len(part)
        return sum((v - m) ** 2 for v in part)

    return min(ss(x[:k]) + ss(x[k:]) for k in range(least, n - least + 1))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 10**9), min_size=10, max_size=60))
def test_cut_is_the_plain_loop_optimum(values: list[int]) -> None:
    row = _run(values)
    x = [math.log(max(v, 1)) for v in values]
    total = sum((v - sum(x) / len(x)) ** 2 for v in x)
    expected = 0.0 if total == 0 else min(1.0, max(0.0, 1 - _best_within(values) / total))
    assert row["separation"] == pytest.approx(expected, abs=1e-6)
    assert row["fast_count"] + row["slow_count"] == len(values)
