"""Node ids of the calling-context tree do not depend on the order in which Polars first
saw the names (categorical codes follow first insertion, which varies from run to run
when threads cast in another order): the label codes follow the names' sorted order."""

from __future__ import annotations

import uuid

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from traceatlas.ops import cct


@settings(max_examples=30, deadline=None)
@given(picks=st.lists(st.integers(0, 5), min_size=1, max_size=20))
def test_codes_are_the_dense_rank_of_sorted_names(picks: list[int]) -> None:
    tag = uuid.uuid4().hex  # names never seen before in this process
    names = [f"{tag}-{9 - p}" for p in picks]  # first seen in no particular order
    labels = pl.DataFrame({"name": pl.Series(names, dtype=pl.Categorical),
                           "category": pl.Series(["cpu_op"] * len(names),
                                                 dtype=pl.Categorical)})
    codes = cct._label_codes(labels, False).tolist()
    ranks = {n: i for i, n in enumerate(sorted(set(names)))}  # independent: plain sort
    assert codes == [ranks[n] for n in names]
