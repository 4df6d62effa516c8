"""Depth of intervals on a track: call-stack depth for host threads, and the lowest free
row for device streams where events overlap without nesting.

Both functions take rows sorted by ``sort_for_nesting`` and return one depth per row.
"""

from __future__ import annotations

import heapq
import itertools

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def sort_for_nesting(track: IntArray, start: IntArray, end: IntArray) -> IntArray:
    """Permutation ordering rows by track, then start ascending, then end descending.

    With this order a parent comes before the children that start with it, and
    zero-length intervals come after the longer intervals starting at the same time.
    """
    return np.lexsort((-end, start, track)).astype(np.int64)


def _segments(track: IntArray) -> list[tuple[int, int]]:
    n = len(track)
    if n == 0:
        return []
    bounds = np.flatnonzero(np.diff(track)) + 1
    edges = np.concatenate(([0], bounds, [n])).tolist()
    return list(itertools.pairwise(edges))


def stack_depth(start: IntArray, end: IntArray) -> IntArray:
    """Call-stack depth of properly nested intervals on ONE track, without a Python loop.

    depth_i = (intervals sorted before i) - (intervals sorted before i that ended at or
    before start_i). A zero-length interval ends at its own start, so it only counts as
    ended for the intervals sorted after it. Exact for properly nested intervals
    (a call stack); for crossing intervals it counts those still open at start_i.
    """
    n = len(start)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    index = np.arange(n, dtype=np.int64)
    ended = np.searchsorted(np.sort(end), start, side="right")
    zero = np.flatnonzero(end == start)
    if len(zero):
        # Zero-length intervals at start_i sorted at or after i are not ended for i.
        ended -= np.searchsorted(start[zero], start, side="right") - np.searchsorted(
            zero, index, side="left"
        )
    depth: IntArray = np.maximum(index - ended, 0)
    return depth


def free_row_depth(start: IntArray, end: IntArray) -> IntArray:
    """Lowest free row for each interval on ONE track (greedy interval colouring).

    Overlapping, non-nested intervals get distinct rows; nested ones get their stack
    depth. A Python loop with heaps: use it on device tracks, where events are few
    relative to host events.
    """
    n = len(start)
    out = np.zeros(n, dtype=np.int64)
    if n < 2 or bool(np.all(start[1:] >= np.maximum.accumulate(end)[:-1])):
        return out  # nothing overlaps (the usual GPU stream): every row is 0
    busy: list[tuple[int, int]] = []  # (end, row) of running intervals
    free: list[int] = []
    next_row = 0
    for i, (s, e) in enumerate(zip(start.tolist(), end.tolist(), strict=True)):
        while busy and busy[0][0] <= s:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            row = heapq.heappop(free)
        else:
            row, next_row = next_row, next_row + 1
        out[i] = row
        heapq.heappush(busy, (e, row))
    return out


def nesting_depth(
    track: IntArray, start: IntArray, end: IntArray, overlapping: BoolArray | None = None
) -> IntArray:
    """Depth per row for rows sorted by ``sort_for_nesting``.

    Tracks flagged in ``overlapping`` (one flag per row, constant within a track; e.g.
    device streams) get ``free_row_depth``; the others get ``stack_depth``.
    """
    depth = np.zeros(len(start), dtype=np.int64)
    for lo, hi in _segments(track):
        if overlapping is not None and bool(overlapping[lo]):
            depth[lo:hi] = free_row_depth(start[lo:hi], end[lo:hi])
        else:
            depth[lo:hi] = stack_depth(start[lo:hi], end[lo:hi])
    return depth
