"""Vectorised pieces of the pyramid build: the flattened timeline of a track and its bins.

Flattened timeline: at each instant the active interval that STARTED LAST owns it (ties on
the start: the shorter one, i.e. the last in ``(start, -end)`` order). For properly nested
intervals (host call stacks) that is the deepest active interval; on device streams,
where overlapping kernels are concurrent, the later-starting kernel owns the overlap.
Zero-length intervals own nothing (they still count as events). The owned pieces of one
timeline are disjoint and their union is the union of its intervals.

All times are int64 ns relative to the pyramid's ``origin_ns`` (>= 0); a bin of level L is
``1 << shift`` ns with ``shift = 10 + 2 L``. No Python loop runs per event or per bin:
the owner search is a binary lifting over a sparse table of maxima (O(N log N)).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]

_TABLE_LIMIT = 1 << 25
"""Keep every level of the sparse table in memory up to this many int64s (256 MiB);
beyond it each level is recomputed when needed (O(N log^2 N) time, O(N) memory)."""


def shift_of(level: int) -> int:
    """log2 of ``bin_ns(level)`` (1024 * 4**level)."""
    return 10 + 2 * level


def _max_level(end: IntArray, j: int) -> IntArray:
    """``M_j[i] = max(end[max(0, i - 2**j + 1) .. i])`` by doubling from ``end``."""
    m = end
    for k in range(j):
        step = 1 << k
        nxt = m.copy()
        np.maximum(m[step:], m[:-step], out=nxt[step:])
        m = nxt
    return m


def last_active(end: IntArray, k: IntArray, at: IntArray) -> IntArray:
    """Per query q: the largest ``i <= k[q]`` with ``end[i] > at[q]``, or -1 (none)."""
    n = len(end)
    pos = k.astype(np.int64, copy=True)
    if n == 0 or len(pos) == 0:
        return np.full(len(pos), -1, dtype=np.int64)
    top = max(int(n).bit_length() - 1, 0)
    keep = n * (top + 1) <= _TABLE_LIMIT
    tables: list[IntArray] = []
    if keep:
        tables = [end]
        for k_ in range(top):
            step = 1 << k_
            nxt = tables[-1].copy()
            np.maximum(tables[-1][step:], tables[-1][:-step], out=nxt[step:])
            tables.append(nxt)
    for j in range(top, -1, -1):
        size = 1 << j
        table = tables[j] if keep else _max_level(end, j)
        ok = pos - size + 1 >= 0
        idx = np.flatnonzero(ok)
        jump = table[pos[idx]] <= at[idx]
        pos[idx[jump]] -= size
    found = pos >= 0
    found[found] = end[pos[found]] > at[found]
    return np.where(found, pos, -1)


def owned_pieces(start: IntArray, end: IntArray) -> tuple[IntArray, IntArray, IntArray]:
    """Flattened timeline of ONE timeline's intervals, sorted by ``(start, -end)``.

    Returns ``(owner, piece_start, piece_end)``: disjoint pieces (length > 0), each owned
    by the interval of index ``owner`` (the active one that started last); adjacent
    pieces of one owner are merged.
    """
    empty = np.zeros(0, dtype=np.int64)
    if len(start) == 0:
        return empty, empty, empty
    points = np.sort(np.concatenate((start, end)))
    points = points[np.concatenate(([True], points[1:] != points[:-1]))]
    a, b = points[:-1], points[1:]
    k = np.searchsorted(start, a, side="right") - 1
    owner = last_active(end, k, a)
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
_CAT_BITS = 5  # CATEGORIES has fewer than 32 entries


def _bits(values: IntArray) -> int:
    return max(int(values.max(initial=0)).bit_length(), 1)


def level_bins(rows: Columns, top: int) -> list[Columns] | None:
    """Per level 0..top, the interval bins of one rank: ``rows`` (``id``, ``lvl``, ``bin``,
    ``cat``, ``name``, ``busy``, ``count``; each row at its track's finest level ``lvl``)
    summed per (id, bin, cat), coarser levels from the level below (bin // 4), with the
    dominant ``name`` (most busy ns, then most starts, then the lowest name index).

    Keys are packed in one int64 (sorted with numpy, summed with ``reduceat``); None when
    they do not fit in 62 bits (the caller then aggregates with Polars).
    """
    base = int(rows["id"].min(initial=0))
    lid = rows["id"] - base
    b_id, b_bin, b_name = _bits(lid), _bits(rows["bin"]), _bits(rows["name"])
    if b_id + b_bin + _CAT_BITS + b_name > 62 or (len(rows["bin"]) and rows["bin"].min() < 0):
        return None
    s_cat = b_name
    s_bin = s_cat + _CAT_BITS
    s_id = s_bin + b_bin
    mask_bin = (1 << b_bin) - 1

    def pack(sel: npt.NDArray[np.bool_]) -> IntArray:
        return ((lid[sel] << s_id) | (rows["bin"][sel] << s_bin) | (rows["cat"][sel] << s_cat)
                | rows["name"][sel])

    key = np.zeros(0, dtype=np.int64)
    busy = np.zeros(0, dtype=np.int64)
    count = np.zeros(0, dtype=np.int64)
    out: list[Columns] = []
    for level in range(top + 1):
        sel = rows["lvl"] == level
        if len(key):
            coarser = ((key >> s_bin) & mask_bin) >> 2
            key = (key & ~(mask_bin << s_bin)) | (coarser << s_bin)
        if sel.any() or len(key):
            key = np.concatenate((key, pack(sel)))
            busy = np.concatenate((busy, rows["busy"][sel]))
            count = np.concatenate((count, rows["count"][sel]))
            order = np.argsort(key, kind="stable")
            key, busy, count = key[order], busy[order], count[order]
            first = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
            key = key[first]
            busy = np.add.reduceat(busy, first) if len(first) else busy
            count = np.add.reduceat(count, first) if len(first) else count
        out.append(_dominant(key, busy, count, s_cat, s_bin, s_id, mask_bin, base))
    return out


def _dominant(key: IntArray, busy: IntArray, count: IntArray, s_cat: int, s_bin: int,
              s_id: int, mask_bin: int, base: int) -> Columns:
    """One row per (id, bin, cat) of sorted unique (id, bin, cat, name) keys."""
    if len(key) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return {c: empty for c in ("id", "bin", "cat", "busy_ns", "count", "name")}
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
    return {"id": (head >> s_id) + base, "bin": (head >> s_bin) & mask_bin,
            "cat": (head >> s_cat) & ((1 << _CAT_BITS) - 1),
            "busy_ns": np.add.reduceat(busy, starts), "count": np.add.reduceat(count, starts),
            "name": key[pick] & ((1 << s_cat) - 1)}
