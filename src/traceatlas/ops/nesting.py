"""Nesting depth of intervals on a track, without a Python loop over events."""

from __future__ import annotations

import itertools

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]


def sort_for_nesting(track: IntArray, start: IntArray, end: IntArray) -> IntArray:
    """Permutation ordering rows by track, then start ascending, then end descending.

    With this order a parent comes before the children that start with it.
    """
    return np.lexsort((-end, start, track)).astype(np.int64)


def nesting_depth(track: IntArray, start: IntArray, end: IntArray) -> IntArray:
    """Depth of each interval on its track; rows must be sorted by ``sort_for_nesting``.

    depth = (intervals of the track ordered before this one)
          - (intervals of the track that ended at or before this one's start).
    For properly nested intervals this is the stack depth (0 = top level). For
    overlapping, non-nested intervals (GPU streams) it is the number still running
    when this one starts, so overlapping events get distinct rows and none is lost.
    """
    n = len(start)
    depth = np.zeros(n, dtype=np.int64)
    if n == 0:
        return depth
    bounds = np.flatnonzero(np.diff(track)) + 1
    edges = np.concatenate(([0], bounds, [n]))
    for lo, hi in itertools.pairwise(edges):
        seg_start = start[lo:hi]
        ended = np.searchsorted(np.sort(end[lo:hi]), seg_start, side="right")
        depth[lo:hi] = np.arange(hi - lo) - ended
    np.maximum(depth, 0, out=depth)
    return depth
