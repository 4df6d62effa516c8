"""The numpy unions (``ops.unions``) and the numpy host sweep (``efficiency._useful_by_rank``)
against the Polars plans they replace, kept as the oracle: ``unions._union_segments_polars``
/ ``_union_ns_polars`` (the former implementation, still the fallback) and, below, a frozen
copy of the former Polars sweep. Plus small cases worked by hand and a plain loop.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceatlas.analysis.efficiency import _useful_by_rank
from traceatlas.ops import unions
from traceatlas.ops.unions import union_ns, union_segments
from traceatlas.testing.compare import plain_union_length, useful_ns_polars

I64_MAX = 2 ** 63 - 1
I64_MIN = -(2 ** 63)


def _frame(rows: Sequence[tuple[int, ...]], keys: list[str], dtypes: dict[str, pl.DataType]
           ) -> pl.DataFrame:
    names = [*keys, "start_ns", "end_ns"]
    return pl.DataFrame(rows, schema={c: dtypes.get(c, pl.Int64) for c in names},
                        orient="row")


@st.composite
def interval_sets(draw: st.DrawFn, extreme: bool = False) -> tuple[pl.DataFrame, list[str]]:
    """0-2 integer keys, intervals that nest, overlap, touch, have zero length and equal
    starts (times from a small grid); ``extreme``: times and keys near the int64 limits."""
    n_keys = draw(st.integers(0, 2))
    keys = ["a", "b"][:n_keys]
    dtypes: dict[str, pl.DataType] = {
        k: draw(st.sampled_from([pl.Int32(), pl.Int64(), pl.UInt8(), pl.Int16()]))
        for k in keys}
    if extreme:
        dtypes = dict.fromkeys(keys, pl.Int64())
    n = draw(st.integers(0, 40))
    base = draw(st.sampled_from([0, 1_700_000_000_000_000_000, -5_000]))
    rows = []
    for _ in range(n):
        key = [draw(st.integers(0, 3)) for _ in keys]
        if extreme:
            key = [draw(st.sampled_from([I64_MIN, -1, 0, 2 ** 62, I64_MAX])) for _ in keys]
            s = draw(st.sampled_from([I64_MIN, -(2 ** 62), -1, 0, 5, 2 ** 61, 2 ** 62]))
            e = min(I64_MAX, s + draw(st.sampled_from([0, 1, 10, 2 ** 62, I64_MAX])))
        else:
            s = base + draw(st.integers(0, 60)) * 5
            e = s + draw(st.sampled_from([0, 0, 5, 10, 25, 100, 300]))
        rows.append((*key, s, e))
    return _frame(rows, keys, dtypes), keys


def _check_same(frame: pl.DataFrame, keys: list[str]) -> None:
    lazy = frame.lazy()
    got = union_segments(lazy, keys).collect()
    want = unions._union_segments_polars(lazy, keys).collect()
    assert got.schema == want.schema
    assert got.rows() == want.rows()  # same segments in the same (keys, start) order
    got_ns = union_ns(lazy, keys, "u").collect()
    want_ns = unions._union_ns_polars(lazy, keys, "u").collect()
    assert got_ns.schema == want_ns.schema
    # Polars' group order is free (repr: null keys sort too)
    assert sorted(got_ns.rows(), key=repr) == sorted(want_ns.rows(), key=repr)
    if keys and unions._segments(frame, tuple(keys)) is not None:  # numpy: in key order
        assert got_ns.rows() == sorted(got_ns.rows())


@settings(max_examples=300, deadline=None)
@given(data=interval_sets())
def test_numpy_unions_equal_the_polars_plans(data: tuple[pl.DataFrame, list[str]]) -> None:
    frame, keys = data
    _check_same(frame, keys)
    if keys:  # and against a plain loop per group
        lengths = dict(((r[:-1]), r[-1]) for r in union_ns(frame.lazy(), keys).collect()
                       .iter_rows())
        for key, part in frame.group_by(keys):
            spans = list(zip(part["start_ns"], part["end_ns"], strict=True))
            assert lengths[tuple(key)] == plain_union_length(spans)


@settings(max_examples=150, deadline=None)
@given(data=interval_sets(extreme=True))
def test_int64_extremes_fall_back_and_still_equal(data: tuple[pl.DataFrame, list[str]],
                                                   ) -> None:
    frame, keys = data
    _check_same(frame, keys)
    s, e = frame["start_ns"], frame["end_ns"]
    if frame.height and (s.min() <= -unions.LIMIT or e.max() >= unions.LIMIT):  # type: ignore[operator]
        assert unions._segments(frame, tuple(keys)) is None


def test_by_hand() -> None:
    # group (0, 1): [0,10) [5,12) [12,20) -> [0,20) (touching merges); [30,30) zero length
    # stays a segment of 0; group (0, 2): [3,4) nested twice in [1,9); group (1, 0): [7,7)
    rows = [(0, 1, 5, 12), (0, 2, 3, 4), (0, 1, 0, 10), (1, 0, 7, 7), (0, 1, 12, 20),
            (0, 2, 1, 9), (0, 1, 30, 30), (0, 2, 3, 4)]
    frame = _frame(rows, ["a", "b"], {"a": pl.Int32(), "b": pl.Int32()}).lazy()
    assert union_segments(frame, ["a", "b"]).collect().rows() == [
        (0, 1, 0, 20), (0, 1, 30, 30), (0, 2, 1, 9), (1, 0, 7, 7)]
    assert union_ns(frame, ["a", "b"]).collect().rows() == [(0, 1, 20), (0, 2, 8), (1, 0, 0)]
    # all groups together: [1,9), [3,4), [7,7) lie inside [0,20); [30,30) adds 0
    assert union_ns(frame, []).collect().rows() == [(20,)]
    assert union_segments(frame, []).collect().rows() == [(0, 20), (30, 30)]
    empty = frame.filter(pl.col("a") > 5)
    assert union_ns(empty, []).collect().rows() == [(0,)]
    assert union_ns(empty, ["a"]).collect().height == 0
    assert union_segments(empty, ["a"]).collect().schema == unions._union_segments_polars(
        empty, ["a"]).collect().schema


def test_large_key_ranges_and_time_ranges_take_the_dense_and_lexsort_paths() -> None:
    # key values 2**61 apart: (key range x key range) overflows, codes are densified;
    # groups at -2**61 and at +2**61: (groups x time range) overflows, np.lexsort instead
    # of one int64 sort key (each group's own span is small: no fallback)
    big = 2 ** 61
    rows = []
    for i, (k1, k2) in enumerate((k1, k2) for k1 in (big, 0, -big) for k2 in (big, 3, -big)):
        base = -big if i % 2 else big - 1_000
        rows += [(k1, k2, base + s, base + e) for s, e in ((5, 7), (0, 10), (20, 20),
                                                             (10, 15))]
    frame = _frame(rows, ["a", "b"], {})
    _check_same(frame, ["a", "b"])
    assert unions._segments(frame, ("a", "b")) is not None  # the numpy path ran
    # each group: [0,10) holding [5,7), touching [10,15) -> 15; [20,20) -> 0
    got = union_ns(frame.lazy(), ["a", "b"]).collect()
    assert got["union_ns"].to_list() == [15] * 9
    assert got.select("a", "b").rows() == sorted({(r[0], r[1]) for r in rows})


def test_fallbacks_nulls_strings_inverted() -> None:
    nulls = pl.DataFrame({"a": [1, None, 1], "start_ns": [0, 5, 3], "end_ns": [4, 9, 8]})
    assert unions._segments(nulls, ("a",)) is None
    _check_same(nulls, ["a"])
    inverted = pl.DataFrame({"a": [1, 1], "start_ns": [5, 5], "end_ns": [3, 10]})
    assert unions._segments(inverted, ("a",)) is None
    names = pl.DataFrame({"a": ["y", "x", "y"], "start_ns": [0, 5, 3], "end_ns": [4, 9, 8]})
    _check_same(names, ["a"])
    assert union_ns(names.lazy(), ["a"]).collect().sort("a").rows() == [("x", 4), ("y", 8)]
    with pytest.raises(pl.exceptions.ColumnNotFoundError):  # raised at collect, as before
        union_segments(names.lazy(), ["nope"]).collect()


# -- the host sweep -------------------------------------------------------------------------

def _events(covered: list[tuple[int, int, int]], runtime: list[tuple[int, int, int]],
            blocked: list[tuple[int, int, int]]) -> pl.DataFrame:
    """Sweep events from (rank, start, end) segments, as ``efficiency._host`` builds them."""
    parts = []
    for segs, d, b in ((covered, 1, 0), (runtime, -1, 0), (blocked, 0, 1)):
        for r, s, e in segs:
            parts += [(r, s, d, b), (r, e, -d, -b)]
    return pl.DataFrame(parts, schema={"rank": pl.Int32, "ts": pl.Int64, "d": pl.Int32,
                                       "b": pl.Int32}, orient="row")


def _useful_dict(frame: pl.DataFrame) -> dict[int, int]:
    return {int(r): int(u) for r, u in frame.iter_rows() if u}


segs = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 50), st.integers(0, 20))
                .map(lambda t: (t[0], t[1] * 10, t[1] * 10 + t[2] * 5)), max_size=25)


@settings(max_examples=300, deadline=None)
@given(covered=segs, runtime=segs, blocked=segs)
def test_sweep_equals_the_polars_sweep(covered: list[tuple[int, int, int]],
                                       runtime: list[tuple[int, int, int]],
                                       blocked: list[tuple[int, int, int]]) -> None:
    events = _events(covered, runtime, blocked)
    got = _useful_by_rank(events)
    assert got.schema == pl.Schema({"rank": pl.Int32, "useful_ns": pl.Int64})
    assert _useful_dict(got) == _useful_dict(useful_ns_polars(events.lazy()))


def test_sweep_by_hand() -> None:
    # rank 0: threads covered [0,100) and [50,150), runtime [20,60) on the first thread:
    # useful threads 1 on [0,20), 0 on [20,50), 1 on [50,60), 2 on [60,100), 1 on
    # [100,150): 20 + 100 = 120; a helper collective blocks [140,200): -10 -> 110.
    # rank 3: covered [0,10), all of it runtime -> 0.
    events = _events([(0, 0, 100), (0, 50, 150), (3, 0, 10)], [(0, 20, 60), (3, 0, 10)],
                     [(0, 140, 200)])
    assert _useful_dict(_useful_by_rank(events)) == {0: 110}
    assert _useful_by_rank(events.clear()).height == 0
