"""``nesting_depth`` and ``step_of_time`` against plain Python reference loops."""

from __future__ import annotations

import random

import numpy as np
import pytest

from traceatlas.ops.nesting import nesting_depth, sort_for_nesting
from traceatlas.ops.steps import step_of_time

Interval = tuple[int, int, int]  # (track, start, end)


def _library_depth(intervals: list[Interval], overlapping: bool = False) -> list[int]:
    """Depth per input row, from the library (sort, then depth, then back to input order).

    ``overlapping`` selects the device-stream path (lowest free row) for every track.
    """
    track = np.array([t for t, _, _ in intervals], dtype=np.int64)
    start = np.array([s for _, s, _ in intervals], dtype=np.int64)
    end = np.array([e for _, _, e in intervals], dtype=np.int64)
    order = sort_for_nesting(track, start, end)
    flags = np.full(len(intervals), overlapping, dtype=bool)
    depth = nesting_depth(track[order], start[order], end[order], flags)
    out = [0] * len(intervals)
    for row, d in zip(order.tolist(), depth.tolist(), strict=True):
        out[row] = d
    return out


def _stack_depth(intervals: list[Interval]) -> list[int]:
    """Reference: per track, walk by (start asc, end desc) keeping a stack of open ends."""
    out = [0] * len(intervals)
    order = sorted(range(len(intervals)),
                   key=lambda i: (intervals[i][0], intervals[i][1], -intervals[i][2]))
    stack: list[int] = []
    current_track: int | None = None
    for i in order:
        track, start, end = intervals[i]
        if track != current_track:
            stack, current_track = [], track
        while stack and stack[-1] <= start:
            stack.pop()
        out[i] = len(stack)
        stack.append(end)
    return out


def _nested(rng: random.Random, track: int, lo: int, hi: int, level: int,
            out: list[Interval]) -> None:
    """Random properly nested children of [lo, hi): siblings in sequence, may touch."""
    t = lo
    width = hi - lo
    while level < 5 and t < hi - 2 and rng.random() < 0.9:
        s = rng.randint(t, min(t + width // 8, hi - 2))      # 0: starts with the parent
        e = rng.randint(s + 1, min(hi, s + max(width // 3, 1)))
        if (s, e) == (lo, hi):        # never a copy of the parent
            e -= 1
            if e <= s:
                break
        out.append((track, s, e))
        _nested(rng, track, s, e, level + 1, out)
        t = e


@pytest.mark.parametrize("overlapping", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_nesting_depth_matches_stack_on_nested_intervals(seed: int, overlapping: bool) -> None:
    rng = random.Random(seed)
    intervals: list[Interval] = []
    for track in rng.sample(range(10), 4):          # tracks in random order
        _nested(rng, track, 0, 10_000, 0, intervals)
    rng.shuffle(intervals)
    assert len(intervals) > 100
    assert max(_stack_depth(intervals)) >= 3
    assert _library_depth(intervals, overlapping) == _stack_depth(intervals)


def test_nesting_depth_small_by_hand() -> None:
    # track 0: A [0,100) > B [10,50) > C [20,30); D [50,60) touches B's end; E [200,210).
    # track 1: X [0,10), Y [10,20) touching siblings.
    rows = [(0, 0, 100), (0, 10, 50), (0, 20, 30), (0, 50, 60), (0, 200, 210),
            (1, 0, 10), (1, 10, 20)]
    assert _library_depth(rows) == [0, 1, 2, 1, 0, 0, 0]


def test_nesting_depth_two_overlapping_intervals_get_distinct_depths() -> None:
    rows = [(0, 0, 100), (0, 50, 150)]
    assert _library_depth(rows) == [0, 1]


def test_nesting_depth_empty() -> None:
    empty = np.array([], dtype=np.int64)
    assert nesting_depth(empty, empty, empty).tolist() == []


@pytest.mark.parametrize("overlapping", [False, True])
def test_nesting_depth_zero_length_child(overlapping: bool) -> None:
    # [50, 50) lies inside [0, 100): the stack gives depth 1; [5, 10) is inside [0, 100)
    # too, also depth 1, whatever zero-length events start with it.
    assert _library_depth([(0, 0, 100), (0, 50, 50)], overlapping) == [0, 1]
    assert _library_depth([(0, 0, 100), (0, 5, 10), (0, 5, 5)], overlapping) == [0, 1, 2]


def test_device_depth_overlapping_intervals_never_share_a_depth() -> None:
    # Device streams take the lowest free row: C [12,20) reuses row 0 freed by A.
    assert _library_depth([(0, 0, 10), (0, 5, 15), (0, 12, 20)], True) == [0, 1, 0]
    rng = random.Random(0)
    rows: list[Interval] = []
    for _ in range(200):
        s = rng.randint(0, 1_000)
        rows.append((0, s, s + rng.randint(1, 100)))
    depth = _library_depth(rows, True)
    for i, (_, si, ei) in enumerate(rows):
        for j, (_, sj, ej) in enumerate(rows[:i]):
            if si < ej and sj < ei:
                assert depth[i] != depth[j], (rows[i], rows[j])


def _step_reference(ts: list[int], steps: list[tuple[int, int, int]]) -> list[int]:
    out = []
    for t in ts:
        found = -1
        for start, end, n in steps:
            if start <= t < end:
                found = n
                break
        out.append(found)
    return out


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_step_of_time_matches_loop(seed: int) -> None:
    rng = random.Random(seed)
    steps: list[tuple[int, int, int]] = []
    t = rng.randint(0, 100)
    for n in range(rng.randint(1, 12)):
        start = t + rng.choice([0, 0, rng.randint(1, 50)])    # touching or with a gap
        end = start + rng.randint(1, 200)
        steps.append((start, end, n + 7))
        t = end
    rng.shuffle(steps)                                         # input order not sorted
    edges = [x for s, e, _ in steps for x in (s - 1, s, e - 1, e)]
    ts = edges + [rng.randint(-10, t + 10) for _ in range(300)]
    got = step_of_time(
        np.array(ts, dtype=np.int64),
        np.array([s for s, _, _ in steps], dtype=np.int64),
        np.array([e for _, e, _ in steps], dtype=np.int64),
        np.array([n for _, _, n in steps], dtype=np.int64),
    )
    assert got.tolist() == _step_reference(ts, steps)


def test_step_of_time_by_hand() -> None:
    starts = np.array([200, 100], dtype=np.int64)
    ends = np.array([300, 200], dtype=np.int64)
    numbers = np.array([4, 3], dtype=np.int64)
    ts = np.array([99, 100, 199, 200, 299, 300, 1_000], dtype=np.int64)
    assert step_of_time(ts, starts, ends, numbers).tolist() == [-1, 3, 3, 4, 4, -1, -1]


def test_step_of_time_no_steps() -> None:
    empty = np.array([], dtype=np.int64)
    assert step_of_time(np.array([1, 2], dtype=np.int64), empty, empty, empty).tolist() == [
        -1, -1]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_step_of_launch_matches_a_dict_lookup(seed: int) -> None:
    from traceatlas.ops.steps import step_of_launch

    rng = random.Random(seed)
    launch_corr = [rng.randint(0, 300) for _ in range(200)]        # repeats on purpose
    launch_step = [rng.randint(-1, 9) for _ in range(200)]
    corr = [rng.randint(0, 400) for _ in range(500)]                # some never launched
    has = [rng.random() < 0.9 for _ in range(500)]
    first: dict[int, int] = {}
    for c, s in zip(launch_corr, launch_step, strict=True):
        first.setdefault(c, s)                                      # first launch wins
    expected = [first.get(c, -1) if h else -1 for c, h in zip(corr, has, strict=True)]
    got = step_of_launch(
        np.array(corr, dtype=np.int64), np.array(has), np.array(launch_corr, dtype=np.int64),
        np.array(launch_step, dtype=np.int64),
    )
    assert got.tolist() == expected
