"""Levels of the viewer's pyramid against the contract's definitions, checked by plain loops."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceatlas.view import levels as lv


def test_bin_widths_are_1024_times_powers_of_four() -> None:
    assert lv.bin_ns(0) == 1024
    assert lv.bin_ns(1) == 4096
    assert lv.bin_ns(10) == 1024 * 4**10
    with pytest.raises(ValueError):
        lv.bin_ns(31)
    with pytest.raises(ValueError):
        lv.bin_ns(-1)


def test_levels_cover_the_span_with_four_top_bins() -> None:
    assert lv.levels(1) == [0]
    assert lv.levels(4096) == [0]  # 4 bins of 1024 ns cover it exactly
    assert lv.levels(4097) == [0, 1]
    assert lv.levels(4 * 4096 + 1) == [0, 1, 2]


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=10**15), st.integers(min_value=1, max_value=10_000))
def test_level_for_is_the_finest_level_with_wide_enough_bins(window: int, pixels: int) -> None:
    want = next(L for L in range(31) if Fraction(1024 * 4**L) >= Fraction(window, pixels))
    assert lv.level_for(window, pixels) == want


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=10**15))
def test_top_level_is_the_smallest_covering_level(span: int) -> None:
    top = lv.levels(span)[-1]
    assert span <= 1024 * 4**top * 4
    assert top == 0 or span > 1024 * 4 ** (top - 1) * 4


def test_bin_index_and_start_round_trip() -> None:
    origin = 1_000_000
    assert lv.bin_index(origin, origin, 0) == 0
    assert lv.bin_index(origin + 1023, origin, 0) == 0
    assert lv.bin_index(origin + 1024, origin, 0) == 1
    assert lv.bin_index(origin - 1, origin, 0) == -1
    assert lv.bin_start(3, origin, 1) == origin + 3 * 4096
