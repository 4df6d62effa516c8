"""Vectorised pieces of the pyramid build: the flattened timeline of a track and its bins.

Flattened timeline: at each instant the active interval that STARTED LAST owns it (ties on
the start: the shorter one, i.e. the last in ``(start, -end)`` order). For properly nested
intervals (host call stacks) that is the deepest active interval; on device streams,
where overlapping kernels are concurrent, the later-starting kernel owns the overlap.
Zero-length intervals own nothing (they still count as events). The owned pieces of one
timeline are disjoint and their union is the union of its intervals.

All times are int64 ns relative to the pyramid's ``origin_ns`` (>= 0); a bin of level L is
``1 << shift`` ns with ``shift = 10 + 2 L``. No Python loop runs per event or per bin:
the owner search paints a segment tree over the elementary segments (O(N log N) time,
O(N) memory).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from traceatlas.ops.owned import paint_max

IntArray = npt.NDArray[np.int64]

def shift_of(level: int) -> int:
    """log2 of ``bin_ns(level)`` (1024 * 4**level)."""
    return 10 + 2 * level


paint_owners = paint_max
"""Per elementary segment ``0 .. m-1``: the largest ``i`` with ``lo[i] <= j < hi[i]``, or
-1 (the segment tree of ``ops.owned.paint_max``: one implementation for the viewer's
owners and the calling-context tree's owned time)."""


def owned_pieces(start: IntArray, end: IntArray) -> tuple[IntArray, IntArray, IntArray]:
    """Flattened timeline of ONE timeline's intervals, sorted by ``(start, -end)``.

    Returns ``(owner, piece_start, piece_end)``: disjoint pieces (length > 0), each owned
    by the interval of index ``owner`` (the active one that started last); adjacent
    pieces of one owner are merged.
    """
    empty = np.zeros(0, dtype=np.int64)
    if len(start) == 0:
        return empty, empty, empty
    # start is sorted and end nearly so: timsort merges the runs (np.unique is much slower)
    points = np.sort(np.concatenate((start, np.sort(end, kind="stable"))), kind="stable")
    points = points[np.concatenate(([True], points[1:] != points[:-1]))]
    a, b = points[:-1], points[1:]
    owner = paint_owners(np.searchsorted(points, start), np.searchsorted(points, end), len(a))
    keep = owner >= 0
    owner, a, b = owner[keep], a[keep], b[keep]
    if len(owner) > 1:
        new = np.ones(len(owner), dtype=bool)
        new[1:] = (owner[1:] != owner[:-1]) | (a[1:] != b[:-1])
        first = np.flatnonzero(new)
        last = np.append(first[1:], len(owner)) - 1
        owner, a, b = owner[first], a[first], b[last]
    return owner, a, b


def split_in_bins(a: IntArray, b: IntArray, shift: IntArray) -> tuple[IntArray, IntArray, IntArray]:
    """Cut pieces ``[a, b)`` (b > a) at the bin edges of their own ``shift``.

    Returns ``(piece index, bin, ns in that bin)``, one row per (piece, bin it touches).
    """
    b0 = a >> shift
    b1 = (b - 1) >> shift
    per = b1 - b0 + 1
    total = int(per.sum())
    idx = np.repeat(np.arange(len(a), dtype=np.int64), per)
    first = np.cumsum(per) - per
    bins = b0[idx] + (np.arange(total, dtype=np.int64) - first[idx])
    sh = shift[idx]
    lo = np.maximum(a[idx], bins << sh)
    hi = np.minimum(b[idx], (bins + 1) << sh)
    return idx, bins, hi - lo


def finest_level(count: int, first_ns: int, last_ns: int, top: int) -> int:
    """The finest level whose bins over ``[first_ns, last_ns)`` number at most ``count``
    (so a track's stored bins stay O(its events)); ``top`` when there is nothing."""
    if count <= 0:
        return top
    last = max(last_ns - 1, first_ns)
    for level in range(top + 1):
        shift = shift_of(level)
        if (last >> shift) - (first_ns >> shift) + 1 <= count:
            return level
    return top


Columns = dict[str, IntArray]
Packed = tuple[IntArray, IntArray, IntArray]
"""Sorted unique packed keys (id, bin, cat, name) with their busy ns and start counts."""
_CAT_BITS = 5  # CATEGORIES has fewer than 32 entries


@dataclass(frozen=True)
class KeyLayout:
    """(id, bin, cat, name) packed in one int64: ``id << s_id | bin << s_bin | cat << s_cat
    | name`` (ids, bins and names >= 0), so sorting keys sorts by (id, bin, cat, name)."""

    s_cat: int
    s_bin: int
    s_id: int

    @classmethod
    def make(cls, n_ids: int, max_bin: int, n_names: int) -> KeyLayout | None:
        """The layout for these ranges, or None when it needs more than 62 bits."""
        b_id = max(int(n_ids - 1).bit_length(), 1)
        b_bin = max(int(max_bin).bit_length(), 1)
        b_name = max(int(n_names - 1).bit_length(), 1)
        if b_id + b_bin + _CAT_BITS + b_name > 62:
            return None
        return cls(b_name, b_name + _CAT_BITS, b_name + _CAT_BITS + b_bin)

    @property
    def mask_bin(self) -> int:
        return (1 << (self.s_id - self.s_bin)) - 1

    def pack(self, vid: int, bins: IntArray, cat: IntArray, name: IntArray) -> IntArray:
        """Keys of rows of track ``vid``."""
        return (vid << self.s_id) | (bins << self.s_bin) | (cat << self.s_cat) | name


def aggregate(key: IntArray, busy: IntArray, count: IntArray) -> Packed:
    """Sort ``key`` and sum ``busy`` and ``count`` per distinct key."""
    if len(key) == 0:
        return key, busy, count
    order = np.argsort(key, kind="stable")
    key = key[order]
    first = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
    return key[first], np.add.reduceat(busy[order], first), np.add.reduceat(count[order], first)


def level_bins(by_level: dict[int, list[Packed]], top: int, layout: KeyLayout
               ) -> list[Columns]:
    """Per level 0..top, the interval bins of one rank: ``by_level[L]`` holds the packed,
    aggregated rows of the timelines whose finest level is L; each level is those plus
    the level below with ``bin // 4``, summed per (id, bin, cat), with the dominant
    ``name`` (most busy ns, then most starts, then the lowest name index)."""
    mask_bin = layout.mask_bin
    key = np.zeros(0, dtype=np.int64)
    busy = np.zeros(0, dtype=np.int64)
    count = np.zeros(0, dtype=np.int64)
    out: list[Columns] = []
    for level in range(top + 1):
        new = by_level.get(level, [])
        if len(key):  # bin // 4 keeps (id, bin) order: runs stay sorted for the merge
            coarser = ((key >> layout.s_bin) & mask_bin) >> 2
            key = (key & ~(mask_bin << layout.s_bin)) | (coarser << layout.s_bin)
        if new or len(key):
            key, busy, count = aggregate(np.concatenate([key, *(n[0] for n in new)]),
                                         np.concatenate([busy, *(n[1] for n in new)]),
                                         np.concatenate([count, *(n[2] for n in new)]))
        out.append(_dominant(key, busy, count, layout))
    return out


def _dominant(key: IntArray, busy: IntArray, count: IntArray, layout: KeyLayout) -> Columns:
    """One row per (id, bin, cat) of sorted unique (id, bin, cat, name) keys."""
    if len(key) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return {c: empty for c in ("id", "bin", "cat", "busy_ns", "count", "name")}
    s_cat, s_bin, s_id = layout.s_cat, layout.s_bin, layout.s_id
    prefix = key >> s_cat
    new = np.concatenate(([True], prefix[1:] != prefix[:-1]))
    starts = np.flatnonzero(new)
    group = np.cumsum(new) - 1
    top_busy = np.maximum.reduceat(busy, starts)
    cand = busy == top_busy[group]
    top_count = np.maximum.reduceat(np.where(cand, count, -1), starts)
    cand &= count == top_count[group]
    # Names ascend within a group: the first candidate has the lowest name index.
    pos = np.where(cand, np.arange(len(key), dtype=np.int64), len(key))
    pick = np.minimum.reduceat(pos, starts)
    head = key[starts]
    return {"id": head >> s_id, "bin": (head >> s_bin) & layout.mask_bin,
            "cat": (head >> s_cat) & ((1 << _CAT_BITS) - 1),
            "busy_ns": np.add.reduceat(busy, starts), "count": np.add.reduceat(count, starts),
            "name": key[pick] & ((1 << s_cat) - 1)}
