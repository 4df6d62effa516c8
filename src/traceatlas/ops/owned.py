"""Host time that adds up on crossing intervals: each ns of a thread belongs to one interval.

Profilers do not always record call stacks: on Kineto traces ``ProfilerStep#N`` starts
inside the Python frame of ``prof.step()`` and ends inside the next one (crossing
intervals, not nested). Two rules make such a thread a tree whose times add up:

- parent: the innermost interval that ENCLOSES the row (``start <= row start`` and
  ``row end <= end``; among several, the one sorted last in ``(start, -end)`` order, i.e.
  that started last). A crossing interval therefore hangs under an interval that contains
  it, never under one it outlives. A zero-length row at another interval's end is not its
  child; a zero-length row after a zero-length one at the same instant is (as
  ``ops.nesting.stack_depth`` counts them).
- owner: each instant of the thread belongs to the innermost OPEN interval, the active
  one that started last (ties on the start: the shorter one), as the viewer's flattened
  timeline (``view.pyramid_bins.owned_pieces``). A row's ``owned_ns`` is the time it owns;
  zero-length rows own nothing.

Per thread, the owned times sum to the union of the thread's intervals, and a row's
owned time plus its descendants' is at most the row's duration. For properly nested
intervals the parent is the closest enclosing interval and the owned time is the duration
minus the direct children's durations (the ``ops.exclusive`` values). Times are int64 ns.
No Python loop per row: the parents come from previous-greater-or-equal pointer jumping,
the owners from a segment tree painted over the elementary segments.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from traceatlas.ops.nesting import IntArray

if TYPE_CHECKING:
    import polars as pl


def timeline_order(key: IntArray, start: IntArray, end: IntArray) -> IntArray:
    """Permutation sorting rows by ``(key, start, -end)`` (stable): the started-last
    order; a row's enclosing intervals come before it."""
    import polars as pl

    frame = pl.DataFrame({"k": key, "s": start, "e": end})
    order = frame.select(pl.arg_sort_by(["k", "s", "e"], descending=[False, False, True],
                                         maintain_order=True))["k"].to_numpy()
    return order.astype(np.int64)


def enclosing_parents(key: IntArray, start: IntArray, end: IntArray,
                      order: IntArray | None = None) -> IntArray:
    """Row index of each row's innermost enclosing interval on the same ``key`` (-1: none).

    In ``timeline_order`` a row's enclosing intervals all come before it, so the parent is
    the previous row whose ``end`` is >= the row's (zero-length rows compare as a half ns
    later, see the module doc): the previous-greater-or-equal element, found by jumping
    each unresolved row's candidate to its candidate's candidate (every row skipped ends
    before the row)."""
    n = len(start)
    out = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return out
    if order is None:
        order = timeline_order(key, start, end)
    ks, es = key[order], end[order]
    value = 2 * es + (start[order] == es)
    cand = np.arange(-1, n - 1, dtype=np.int64)
    if n > 1:
        cand[1:][ks[1:] != ks[:-1]] = -1
    todo = np.flatnonzero(cand >= 0)
    todo = todo[value[cand[todo]] < value[todo]]  # most rows: the previous row encloses
    while len(todo):
        c = cand[todo]
        cand[todo] = cand[c]
        todo = todo[cand[todo] >= 0]
        todo = todo[value[cand[todo]] < value[todo]]
    has = cand >= 0
    out[order[has]] = order[cand[has]]
    return out


def paint_max(lo: IntArray, hi: IntArray, m: int) -> IntArray:
    """Per elementary segment ``0 .. m-1``: the largest ``i`` with ``lo[i] <= j < hi[i]``,
    or -1: a segment tree, each ``[lo, hi)`` split into O(log m) nodes, max per node, then
    pushed down level by level."""
    if m <= 0:
        return np.zeros(0, dtype=np.int64)
    size = 1 << max(int(m - 1).bit_length(), 0)
    dtype = np.int32 if len(lo) < 2**31 - 1 else np.int64
    tree = np.full(2 * size, -1, dtype=dtype)
    idx = np.flatnonzero(lo < hi).astype(dtype)
    left, right = lo[idx] + size, hi[idx] + size
    nodes: list[IntArray] = []
    owners: list[npt.NDArray[np.integer]] = []
    while len(idx):
        odd = (left & 1).astype(bool)
        nodes.append(left[odd])
        owners.append(idx[odd])
        left += odd
        odd = (right & 1).astype(bool)
        right -= odd
        nodes.append(right[odd])
        owners.append(idx[odd])
        left >>= 1
        right >>= 1
        live = left < right
        if not live.all():
            idx, left, right = idx[live], left[live], right[live]
    if nodes:
        np.maximum.at(tree, np.concatenate(nodes), np.concatenate(owners))
    width = 2
    while width <= size:
        half = width >> 1
        np.maximum(tree[width:2 * width], np.repeat(tree[half:width], 2),
                   out=tree[width:2 * width])
        width <<= 1
    return tree[size:size + m].astype(np.int64)


def owned_ns(key: IntArray, start: IntArray, end: IntArray,
             order: IntArray | None = None) -> IntArray:
    """Per row: ns of its ``key``'s timeline it owns (innermost open interval)."""
    n = len(start)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if order is None:
        order = timeline_order(key, start, end)
    ks, ss, es = key[order], start[order], end[order]
    # one axis for all keys: each key's span shifted past the previous key's (+1 gap);
    # in timeline order a key's rows are contiguous and its first row starts first
    first = np.flatnonzero(np.concatenate(([True], ks[1:] != ks[:-1])))
    low = ss[first]
    span = np.maximum.reduceat(es, first) - low + 1
    if float(span.astype(np.float64).sum()) >= 2.0**62:
        from traceatlas.errors import QueryError

        raise QueryError("host timelines span more than 2**62 ns in all: cannot place them "
                         "on one int64 axis")
    shift = np.repeat(np.concatenate(([0], np.cumsum(span)[:-1])) - low,
                      np.diff(np.append(first, n)))
    xs, xe = ss + shift, es + shift
    points = np.sort(np.concatenate((xs, np.sort(xe, kind="stable"))), kind="stable")
    points = points[np.concatenate(([True], points[1:] != points[:-1]))]
    owner = paint_max(np.searchsorted(points, xs), np.searchsorted(points, xe),
                      len(points) - 1)
    mine = owner >= 0
    sums = np.bincount(owner[mine], weights=np.diff(points)[mine].astype(np.float64),
                       minlength=n)
    out = np.zeros(n, dtype=np.int64)
    out[order] = np.rint(sums).astype(np.int64)
    return out


def with_owned(frame: pl.DataFrame, group: tuple[str, ...] = ("rank", "track_id")
               ) -> pl.DataFrame:
    """``frame`` (``start_ns``, ``end_ns`` and the ``group`` columns: one timeline per
    group) with ``parent`` (row index, -1 none) and ``exclusive_ns`` (owned ns); row
    order kept."""
    import polars as pl

    if frame.height == 0:
        return frame.with_columns(parent=pl.lit(None, pl.Int64),
                                  exclusive_ns=pl.lit(None, pl.Int64)).clear()
    key = np.zeros(frame.height, dtype=np.int64)
    for col in group:  # mixed radix over the group columns' ranges
        values = frame[col].to_numpy().astype(np.int64)
        low = int(values.min())
        key = key * (int(values.max()) - low + 1) + (values - low)
    start = frame["start_ns"].to_numpy().astype(np.int64)
    end = frame["end_ns"].to_numpy().astype(np.int64)
    order = timeline_order(key, start, end)
    return frame.with_columns(parent=pl.Series(enclosing_parents(key, start, end, order)),
                              exclusive_ns=pl.Series(owned_ns(key, start, end, order)))
