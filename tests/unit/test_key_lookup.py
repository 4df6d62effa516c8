"""``ops.key_lookup.lookup`` equals a Polars left join on (high, low) keys."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_series_equal

from traceatlas.ops.key_lookup import LOW_BITS, lookup

small = st.integers(0, 5)
corr = st.one_of(st.none(), st.integers(0, 12), st.just((1 << LOW_BITS) - 1))


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.tuples(small, st.integers(0, 12)), st.integers(-10**18, 10**18),
                       max_size=30),
       st.lists(st.tuples(small, corr), max_size=40))
def test_lookup_equals_left_join(keys: dict[tuple[int, int], int],
                                 rows: list[tuple[int, int | None]]) -> None:
    k = pl.DataFrame({"rank": [a for a, _ in keys], "correlation": [b for _, b in keys],
                      "launch_ns": list(keys.values())},
                     schema={"rank": pl.Int32, "correlation": pl.Int64, "launch_ns": pl.Int64})
    d = pl.DataFrame({"rank": [a for a, _ in rows], "correlation": [b for _, b in rows]},
                     schema={"rank": pl.Int32, "correlation": pl.Int64})
    joined = d.join(k, on=["rank", "correlation"], how="left", maintain_order="left")
    got = lookup(k["rank"], k["correlation"], k["launch_ns"], d["rank"], d["correlation"])
    assert got is not None
    assert_series_equal(got, joined["launch_ns"])


def test_out_of_range_keys_fall_back() -> None:
    big = pl.Series([1 << LOW_BITS], dtype=pl.Int64)
    r = pl.Series([0], dtype=pl.Int32)
    assert lookup(r, big, big, r, big) is None
    neg = pl.Series([-1], dtype=pl.Int64)
    assert lookup(r, neg, neg, r, neg) is None
    assert lookup(pl.Series([-1], dtype=pl.Int32), neg.abs(), neg, r, neg.abs()) is None
    dup = pl.Series([3, 3], dtype=pl.Int64)
    assert lookup(pl.Series([0, 0], dtype=pl.Int32), dup, dup, r, dup[:1]) is None
