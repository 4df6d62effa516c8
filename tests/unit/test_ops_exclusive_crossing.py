"""Exclusive time (``traceatlas.ops.exclusive``) on crossing intervals: every instant of
a stack counted once, for the innermost open interval.

Oracles, all independent of the code under test: a per-nanosecond brute force on small
integer ranges (each ns owned by the open row that started last; ties: the shorter, then
the one listed last), the union length counted ns by ns, the pre-fix formula (duration
minus the direct children's overlaps) on properly nested input, and hand computation.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_tree_crossing import ENTER, EXIT, FWD, MOD, STEP1, STEP2, crossing_trace

from traceatlas import analysis
from traceatlas.errors import DataQualityWarning
from traceatlas.ops.exclusive import (
    child_overlap,
    crossed_rows,
    exclusive_segments,
    parents,
    with_exclusive,
)


def frame(rows: list[tuple[int, int, int, int]]) -> pl.DataFrame:
    """rows: (track_id, layer, start_ns, end_ns) on rank 0."""
    return pl.DataFrame(
        {"rank": [0] * len(rows), "track_id": [r[0] for r in rows],
         "layer": [r[1] for r in rows], "start_ns": [r[2] for r in rows],
         "end_ns": [r[3] for r in rows]},
        schema={"rank": pl.Int64, "track_id": pl.Int64, "layer": pl.Int64,
                "start_ns": pl.Int64, "end_ns": pl.Int64})


def exclusive(rows: list[tuple[int, int, int, int]]) -> list[int]:
    return with_exclusive(frame(rows))["exclusive_ns"].to_list()


def brute_owned(rows: list[tuple[int, int, int, int]]
                ) -> tuple[list[int], dict[tuple[int, int], int]]:
    """Per row: ns owned (nesting layers), or the duration (layer < 0); per stack
    (track, layer >= 0): the union length, counted ns by ns."""
    owned = [0] * len(rows)
    union: dict[tuple[int, int], int] = {}
    for i, (_, layer, s, e) in enumerate(rows):
        if layer < 0:
            owned[i] = e - s
    stacks = {(r[0], r[1]) for r in rows if r[1] >= 0}
    for stack in stacks:
        mine = [i for i, r in enumerate(rows) if (r[0], r[1]) == stack]
        union[stack] = 0
        for t in range(max(rows[i][3] for i in mine) + 1):
            open_ = [i for i in mine if rows[i][2] <= t < rows[i][3]]
            if open_:
                union[stack] += 1
                owned[max(open_, key=lambda i: (rows[i][2], -rows[i][3], i))] += 1
    return owned, union


def brute_crossed(rows: list[tuple[int, int, int, int]]) -> list[bool]:
    """Row u is crossed when another row v of its stack has s_u < s_v < e_u < e_v."""
    return [u[1] >= 0 and any(v[:2] == u[:2] and u[2] < v[2] < u[3] < v[3] for v in rows)
            for u in rows]


ROW = st.tuples(st.integers(0, 1), st.integers(-1, 1), st.integers(0, 30), st.integers(0, 12))


@settings(max_examples=400, deadline=None)
@given(st.lists(ROW, min_size=1, max_size=25))
def test_random_intervals_match_per_ns_ownership(raw: list[tuple[int, int, int, int]]) -> None:
    rows = [(t, layer, s, s + d) for t, layer, s, d in raw]
    owned, union = brute_owned(rows)
    result = with_exclusive(frame(rows))
    got = result["exclusive_ns"].to_list()
    assert got == owned
    for stack, length in union.items():
        assert sum(g for g, r in zip(got, rows, strict=True) if r[:2] == stack) == length
    assert result["crossed"].to_list() == brute_crossed(rows)


def brute_owner(rows: list[tuple[int, int, int, int]], t: int) -> set[int]:
    """Rows owning instant t: per stack the open row that started last; every open row
    that never nests (layer < 0)."""
    own = {i for i, r in enumerate(rows) if r[1] < 0 and r[2] <= t < r[3]}
    for stack in {(r[0], r[1]) for r in rows if r[1] >= 0}:
        open_ = [i for i, r in enumerate(rows) if r[:2] == stack and r[2] <= t < r[3]]
        if open_:
            own.add(max(open_, key=lambda i: (rows[i][2], -rows[i][3], i)))
    return own


@settings(max_examples=300, deadline=None)
@given(st.lists(ROW, min_size=1, max_size=20))
def test_segments_cover_each_instant_once(raw: list[tuple[int, int, int, int]]) -> None:
    # the time_profile path: per instant, a row's signed segments add to 1 if it owns the
    # instant, else 0 (so any window, e.g. a bin, gets the row's exclusive time in it)
    rows = [(t, layer, s, s + d) for t, layer, s, d in raw]
    segs = exclusive_segments(with_exclusive(frame(rows))).rows()
    for t in range(max(r[3] for r in rows) + 1):
        cover = [0] * len(rows)
        for row, lo, hi, sign in segs:
            if lo <= t < hi:
                cover[row] += sign
        own = brute_owner(rows, t)
        assert cover == [1 if i in own else 0 for i in range(len(rows))], t


def nested_rows(draw: st.DrawFn, lo: int, hi: int, depth: int) -> list[tuple[int, int]]:
    """Properly nested spans inside [lo, hi): disjoint siblings, each with children."""
    out: list[tuple[int, int]] = []
    t = lo
    while t < hi and draw(st.booleans()):
        s = draw(st.integers(t, hi))
        e = draw(st.integers(s, hi))
        out.append((s, e))
        if depth < 4 and e > s:
            out += nested_rows(draw, s, e, depth + 1)
        t = e if e > s else e + 1
    return out


@st.composite
def nested(draw: st.DrawFn) -> list[tuple[int, int, int, int]]:
    rows = [(0, 0, s, e) for s, e in nested_rows(draw, 0, 60, 0)]
    rows += [(1, 1, s, e) for s, e in nested_rows(draw, 0, 60, 0)]
    return draw(st.permutations(rows)) if rows else [(0, 0, 0, 1)]


@settings(max_examples=300, deadline=None)
@given(nested())
def test_nested_input_gives_the_old_result(rows: list[tuple[int, int, int, int]]) -> None:
    # the pre-fix formula: duration minus the direct children's overlap with the row
    f = frame(rows)
    key = (f["track_id"] * 2 + f["layer"]).to_numpy().astype(np.int64)
    start, end = f["start_ns"].to_numpy(), f["end_ns"].to_numpy()
    parent = parents(key, start, end, np.ones(len(rows), dtype=bool))
    overlap = child_overlap(parent, start, end)
    has = parent >= 0
    old = (end - start) - np.bincount(parent[has], weights=overlap[has],
                                      minlength=len(rows)).astype(np.int64)
    result = with_exclusive(f)
    assert result["exclusive_ns"].to_list() == old.tolist()
    assert not result["crossed"].any()


def test_crossing_by_hand() -> None:
    # A [0,10), B [5,15): A owns [0,5), B [5,15); sum 15 = union
    assert exclusive([(0, 0, 0, 10), (0, 0, 5, 15)]) == [5, 10]
    # A [0,10) > B [2,6), C [4,12) crosses both: A [0,2), B [2,4), C [4,12) -> 2, 2, 8
    # (the old rule gave A 10 - 4 = 6: [6,10) counted for A and for C, sum 16 > 12)
    assert exclusive([(0, 0, 0, 10), (0, 0, 2, 6), (0, 0, 4, 12)]) == [2, 2, 8]
    # three in a chain: [0,10), [5,20), [15,30): 5, 10, 15 (union 30)
    assert exclusive([(0, 0, 0, 10), (0, 0, 5, 20), (0, 0, 15, 30)]) == [5, 10, 15]
    # a crossing row with a child: A [0,10), B [5,15) > C [11,13): A 5, B 10 - 2, C 2
    assert exclusive([(0, 0, 0, 10), (0, 0, 5, 15), (0, 0, 11, 13)]) == [5, 8, 2]
    # same start: the shorter is inner. A [0,10), B [0,4), C [2,8) crosses B:
    # [0,2) B, [2,8) C, [8,10) A -> A 2, B 2, C 6
    assert exclusive([(0, 0, 0, 10), (0, 0, 0, 4), (0, 0, 2, 8)]) == [2, 2, 6]
    # device rows (layer -1) never nest: inclusive, even when they overlap
    assert exclusive([(0, -1, 0, 10), (0, -1, 5, 15)]) == [10, 10]
    # another layer of the same track is its own stack: no crossing across layers
    assert exclusive([(0, 0, 0, 10), (0, 1, 5, 15)]) == [10, 10]


def test_crossed_rows_by_hand() -> None:
    key = np.zeros(5, dtype=np.int64)
    # A [0,10) crossed by B [5,15); C [20,30) > D [22,25); E [25,25) zero-length at D's end
    start = np.array([0, 5, 20, 22, 25], dtype=np.int64)
    end = np.array([10, 15, 30, 25, 25], dtype=np.int64)
    assert crossed_rows(key, start, end, np.ones(5, dtype=bool)).tolist() == \
        [True, False, False, False, False]
    # a row ending where the next starts is not crossed; nor across stacks
    assert not crossed_rows(np.array([0, 0, 1], dtype=np.int64), np.array([0, 10, 5]),
                            np.array([10, 20, 15]), np.ones(3, dtype=bool)).any()


def test_profile_on_crossing_kineto_trace_warns_once(tmp_path: Path) -> None:
    # the thread of test_tree_crossing.crossing_trace: owner of each instant (ns)
    #   [0,100k) module | [100k,150k) step frame | [150k,180k) enter | [180k,300k) Step |
    #   [300k,350k) forward | [350k,360k) mm | [360k,370k) launch | [370k,450k) mm |
    #   [450k,600k) forward | [600k,700k) Step | [700k,750k) step frame 2 | [750k,850k)
    #   exit | [850k,900k) step frame 2 | [900k,1M) module
    trace = crossing_trace(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = analysis.run("profile", trace, {"by": "rank"})
    ours = [w for w in caught if issubclass(w.category, DataQualityWarning)
            and "crossed" in str(w.message)]
    # crossed rows: step frame 1 and enter (the step starts inside them, ends after
    # them), and the step (step frame 2 starts inside it and ends after it)
    assert len(ours) == 1 and str(ours[0].message).startswith("3 host interval(s)")
    assert any("crossed" in n for n in result.notes)
    got = dict(zip(result.table["name"], result.table["exclusive_ns"], strict=True))
    assert got == {MOD: 200_000, STEP1: 50_000, ENTER: 30_000, "ProfilerStep#1": 220_000,
                   FWD: 200_000, "aten::mm": 90_000, "cudaLaunchKernel": 10_000,
                   STEP2: 100_000, EXIT: 100_000}
    assert sum(got.values()) == 1_000_000  # the thread's busy time, counted once
    # time_profile: each name's bins add up to its exclusive time; the 4 bins of 250k by
    # hand from the owners above: bin 1 [250k,500k): Step 50k, forward 50k+50k, mm
    # 10k+80k, launch 10k
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tp = analysis.run("time_profile", trace, {"bins": "4"}).table
    sums = tp.group_by("name").agg(pl.col("exclusive_ns").sum())
    assert dict(zip(sums["name"], sums["exclusive_ns"], strict=True)) == got
    bin1 = tp.filter((pl.col("bin") == 1) & (pl.col("exclusive_ns") > 0))
    assert dict(zip(bin1["name"], bin1["exclusive_ns"], strict=True)) == {
        "ProfilerStep#1": 50_000, FWD: 100_000, "aten::mm": 90_000, "cudaLaunchKernel": 10_000}


def test_no_warning_on_nested_input() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = with_exclusive(frame([(0, 0, 0, 10), (0, 0, 2, 5)]))
    assert result["exclusive_ns"].to_list() == [7, 3]


@pytest.mark.parametrize("rows", [[], [(0, 0, 3, 3)]])
def test_empty_and_zero_length(rows: list[tuple[int, int, int, int]]) -> None:
    assert exclusive(rows) == [0] * len(rows)
