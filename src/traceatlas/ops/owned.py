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
No Python loop per row: the parents come from previous-greater-or-equal pointer jumping;
a row that no later row crosses (and none of whose direct children is crossed) owns its
duration minus its children's; only the others are painted, with a segment tree over
the elementary segments (1 GB Kineto trace: 584 crossed rows of 3.4 M).
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
    cand = _sorted_parents(key[order], start[order], end[order])
    has = cand >= 0
    out[order[has]] = order[cand[has]]
    return out


def _sorted_parents(ks: IntArray, ss: IntArray, es: IntArray) -> IntArray:
    """``enclosing_parents`` on rows already in ``timeline_order``, as positions there."""
    n = len(ss)
    value = 2 * es + (ss == es)
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
    return cand


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
    out = np.zeros(n, dtype=np.int64)
    out[order] = _sorted_owned(*timeline_axis(ks, ss, es), _sorted_parents(ks, ss, es))
    return out


def timeline_axis(ks: IntArray, ss: IntArray, es: IntArray) -> tuple[IntArray, IntArray]:
    """Rows in ``timeline_order`` placed on one axis for all keys: each key's span shifted
    past the previous key's (+1 gap); a key's rows are contiguous, its first starts first,
    so the shifted starts are sorted."""
    n = len(ss)
    first = np.flatnonzero(np.concatenate(([True], ks[1:] != ks[:-1])))
    low = ss[first]
    span = np.maximum.reduceat(es, first) - low + 1
    if float(span.astype(np.float64).sum()) >= 2.0**62:
        from traceatlas.errors import QueryError

        raise QueryError("host timelines span more than 2**62 ns in all: cannot place them "
                         "on one int64 axis")
    shift = np.repeat(np.concatenate(([0], np.cumsum(span)[:-1])) - low,
                      np.diff(np.append(first, n)))
    return ss + shift, es + shift


MAX_CHAIN = 64
"""Longest chain of crossing rows followed before painting every row instead."""


def _sorted_owned(xs: IntArray, xe: IntArray, parent: IntArray) -> IntArray:
    """Owned ns of rows in ``timeline_order`` on one axis (``timeline_axis``), ``parent`` their
    ``_sorted_parents``.

    A row u owns the instants of [xs, xe) where no LATER row is open. The later rows
    overlapping u are its descendants, covered by its direct children, and the rows that
    start inside u and end after it (u is "crossed"). So when neither u nor any of its
    direct children is crossed (its children are then disjoint), u owns its duration minus
    its children's durations. The other rows are painted (``_paint_owned``) together with
    their direct children and the rows crossing them (the chain of next-later-ending rows
    from u: every crossing row lies in time inside one of them): enough to tell, at each
    instant of such a row, whether a later row is open."""
    n = len(xs)
    dur = xe - xs
    has = parent >= 0
    child = np.zeros(n, dtype=np.int64)
    np.add.at(child, parent[has], dur[has])
    own = dur - child
    ends_at = np.searchsorted(xs, xe, side="left")  # first row starting at/after the end
    later = _next_later_end(xe, ends_at)
    crossed = later < ends_at
    if not crossed.any():
        return own
    need = crossed.copy()
    need[parent[has & crossed]] = True
    members = need.copy()
    members[has & need[np.maximum(parent, 0)]] = True  # direct children of painted rows
    limit = ends_at[crossed]
    step = later[crossed]
    for _ in range(MAX_CHAIN):
        live = step < limit
        step, limit = step[live], limit[live]
        if len(step) == 0:
            break
        members[step] = True
        step = later[step]
    else:
        return _paint_owned(xs, xe)
    sub = np.flatnonzero(members)
    painted = _paint_owned(xs[sub], xe[sub])
    mine = need[sub]
    own[sub[mine]] = painted[mine]
    return own


def _next_later_end(xe: IntArray, stop: IntArray) -> IntArray:
    """Per row i: the first row j > i with ``xe[j] > xe[i]`` when it comes before
    ``stop[i]``; otherwise some row >= ``stop[i]`` (n: none). Pointer jumping: every row
    skipped ends at or before the row's end."""
    n = len(xe)
    cand = np.arange(1, n + 1, dtype=np.int64)
    ext = np.append(xe, np.iinfo(np.int64).max)
    todo = np.flatnonzero(cand < stop)
    todo = todo[ext[cand[todo]] <= xe[todo]]
    while len(todo):
        cand[todo] = cand[cand[todo]]
        todo = todo[cand[todo] < stop[todo]]
        todo = todo[ext[cand[todo]] <= xe[todo]]
    return cand


def _paint_owned(xs: IntArray, xe: IntArray) -> IntArray:
    """Owned ns of rows sorted by start on one axis: the elementary segments between all
    starts and ends painted with the latest row open over each (``paint_max``)."""
    n = len(xs)
    points = np.sort(np.concatenate((xs, np.sort(xe, kind="stable"))), kind="stable")
    points = points[np.concatenate(([True], points[1:] != points[:-1]))]
    owner = paint_max(np.searchsorted(points, xs), np.searchsorted(points, xe),
                      len(points) - 1)
    mine = owner >= 0
    sums = np.bincount(owner[mine], weights=np.diff(points)[mine].astype(np.float64),
                       minlength=n)
    return np.rint(sums).astype(np.int64)


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
    ks, ss, es = key[order], start[order], end[order]
    sorted_parent = _sorted_parents(ks, ss, es)
    parent = np.full(frame.height, -1, dtype=np.int64)
    has = sorted_parent >= 0
    parent[order[has]] = order[sorted_parent[has]]
    owned = np.zeros(frame.height, dtype=np.int64)
    owned[order] = _sorted_owned(*timeline_axis(ks, ss, es), sorted_parent)
    return frame.with_columns(parent=pl.Series(parent), exclusive_ns=pl.Series(owned))
