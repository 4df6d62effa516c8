"""``Pyramid.rows`` from the sparse level files: the level answered, and group statistics
computed a block of ranks at a time.

Level: ``answer_level`` = the requested level, or the finest level at which at least half
of the ranks' rows are stored when that is coarser (one sparse rank no longer coarsens
every rank). A rank whose row is coarser than the level answered is read at its own
finest level; its busy fraction per coarse bin is given to each finer bin the coarse bin
covers. Memory: at most ``BLOCK_CELLS`` cells (ranks x bins, float64) are held at a time;
per-group sums, minima and maxima are merged across blocks. Bin widths are ns.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from traceatlas.view import levels as lv
from traceatlas.view.pyramid_query import LevelFiles, busy_matrix

BLOCK_CELLS = 1 << 20
"""Most cells (ranks x bins) of busy fractions computed at a time: 8 MB of float64, plus
the stored rows of those cells (about one to three per busy cell) in ``busy_matrix``."""

Stats = tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]


def answer_level(level: int, finest: list[int], top: int) -> int:
    """``max(level, median finest)`` clamped to ``top``: the median is the lower one of
    ``finest`` (the finest levels of the ranks' rows; empty: ``level``), i.e. the finest
    level at which at least half of the rows are stored."""
    if finest:
        level = max(level, sorted(finest)[(len(finest) - 1) // 2])
    return min(level, top)


def fractions(files: LevelFiles, level: int, ids: list[int | None], finest: list[int],
              bin_lo: int, bin_hi: int) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Busy fraction (0..1) per (row of ``ids``, bin ``bin_lo..bin_hi`` of ``level``); a
    row whose ``finest`` level is coarser is read at that level and each coarse bin's
    fraction is repeated over the bins of ``level`` it covers; a None id stays 0."""
    n_bins = max(bin_hi - bin_lo + 1, 0)
    out = np.zeros((len(ids), n_bins), dtype=np.float64)
    if n_bins == 0:
        return out
    read = np.array([max(level, f) for f in finest], dtype=np.int64)
    present = np.array([i is not None for i in ids], dtype=bool)
    for at in np.unique(read[present]).tolist():
        rows = np.flatnonzero(present & (read == at))
        shift = 2 * (at - level)
        lo, hi = bin_lo >> shift, bin_hi >> shift
        busy = busy_matrix(files, at, [ids[r] for r in rows], lo, hi)
        np.divide(busy, lv.bin_ns(at), out=busy)
        np.minimum(busy, 1.0, out=busy)
        if shift:
            busy = busy[:, (np.arange(bin_lo, bin_hi + 1, dtype=np.int64) >> shift) - lo]
        out[rows] = busy
    return out


def group_stats(files: LevelFiles, level: int, ids: list[int | None], finest: list[int],
                bin_lo: int, bin_hi: int, starts: np.ndarray[Any, Any],
                sizes: np.ndarray[Any, Any]) -> Stats:
    """Sum, min and max of ``fractions`` over the rank groups (first row ``starts``, row
    count ``sizes``): three ``(groups, bins)`` arrays, computed over blocks of at most
    ``BLOCK_CELLS`` cells of rows."""
    n_bins = max(bin_hi - bin_lo + 1, 0)
    shape = (len(starts), n_bins)
    sums = np.zeros(shape)
    low = np.full(shape, np.inf)
    high = np.full(shape, -np.inf)
    if n_bins == 0 or not ids:
        return sums, np.zeros(shape), np.zeros(shape)
    group = np.repeat(np.arange(len(starts), dtype=np.int64), sizes)
    step = max(1, BLOCK_CELLS // n_bins)
    for a in range(0, len(ids), step):
        b = min(a + step, len(ids))
        frac = fractions(files, level, ids[a:b], finest[a:b], bin_lo, bin_hi)
        mine = group[a:b]
        cuts = np.flatnonzero(np.diff(mine)) + 1
        cuts = np.concatenate([[0], cuts]).astype(np.int64)
        here = mine[cuts]
        sums[here] += np.add.reduceat(frac, cuts, axis=0)
        low[here] = np.minimum(low[here], np.minimum.reduceat(frac, cuts, axis=0))
        high[here] = np.maximum(high[here], np.maximum.reduceat(frac, cuts, axis=0))
    return sums, low, high
