"""Reading a built pyramid: memory-mapped level files and O(log N + returned) slices.

A track's rows at a level are one contiguous run of one record batch (``loc.npy``: batch,
first row, end row); a window is two binary searches on that run's ``bin`` column. Nothing
is copied: the slices returned view the memory-mapped Arrow IPC file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from traceatlas.errors import QueryError
from traceatlas.view import levels as lv

MAX_ROW_BINS = 1 << 20
"""Most bins ``rows()`` fills per rank in one request (a coarser level is needed beyond)."""


class LevelFiles:
    """The memory-mapped ``<prefix>-<L>.arrow`` files of one pyramid, opened on first use."""

    def __init__(self, directory: Path, prefix: str, locations: np.ndarray[Any, Any]) -> None:
        self.directory = directory
        self.prefix = prefix
        self.loc = locations
        self._readers: dict[int, pa.ipc.RecordBatchFileReader] = {}
        self._batches: dict[tuple[int, int], tuple[pa.RecordBatch, np.ndarray[Any, Any]]] = {}

    def _batch(self, level: int, batch: int) -> tuple[pa.RecordBatch, np.ndarray[Any, Any]]:
        got = self._batches.get((level, batch))
        if got is None:
            reader = self._readers.get(level)
            if reader is None:
                source = pa.memory_map(str(self.directory / f"{self.prefix}-{level}.arrow"))
                reader = self._readers[level] = pa.ipc.open_file(source)
            rb = reader.get_batch(batch)
            bins = rb.column(0).to_numpy(zero_copy_only=True) if rb.num_rows else \
                np.zeros(0, dtype=np.int64)
            got = self._batches[(level, batch)] = (rb, bins)
        return got

    def run(self, level: int, track: int) -> tuple[pa.RecordBatch, np.ndarray[Any, Any]]:
        """The rows of ``track`` at ``level`` (record batch slice) and their bin column."""
        batch, lo, hi = (int(x) for x in self.loc[level, track])
        rb, bins = self._batch(level, batch)
        return rb.slice(lo, hi - lo), bins[lo:hi]

    def window(self, level: int, track: int, bin_lo: int, bin_hi: int) -> pa.RecordBatch:
        """Rows of ``track`` at ``level`` whose bin lies in ``bin_lo .. bin_hi`` (inclusive)."""
        rb, bins = self.run(level, track)
        i0 = int(np.searchsorted(bins, bin_lo, side="left"))
        i1 = int(np.searchsorted(bins, bin_hi, side="right"))
        return rb.slice(i0, max(i1 - i0, 0))


def check_window(level: int, start_ns: int, end_ns: int) -> None:
    """QueryError for a level outside 0..30 or a window that ends before it starts."""
    if not isinstance(level, int) or not 0 <= level <= lv.MAX_LEVEL:
        raise QueryError(f"level must be an integer in 0..{lv.MAX_LEVEL}, not {level!r}")
    if end_ns < start_ns:
        raise QueryError(f"window ends ({end_ns}) before it starts ({start_ns})")


def bin_range(level: int, start_ns: int, end_ns: int, origin_ns: int) -> tuple[int, int]:
    """Inclusive bin indexes of ``level`` overlapping ``[start_ns, end_ns)`` (an empty window
    gives the bin holding ``start_ns``)."""
    shift = 10 + 2 * level
    lo = (start_ns - origin_ns) >> shift
    hi = (max(end_ns - 1, start_ns) - origin_ns) >> shift
    return lo, hi


def busy_matrix(files: LevelFiles, level: int, ids: list[int | None], bin_lo: int,
                bin_hi: int) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Busy ns per (row of ``ids``, bin ``bin_lo..bin_hi``), summed over categories; a None
    id (a rank without that row) stays 0."""
    n_bins = bin_hi - bin_lo + 1
    if n_bins > MAX_ROW_BINS:
        raise QueryError(f"the window holds {n_bins} bins at level {level} (at most "
                         f"{MAX_ROW_BINS}); ask a coarser level")
    out = np.zeros((len(ids), max(n_bins, 0)), dtype=np.float64)
    if n_bins <= 0:
        return out
    for row, track in enumerate(ids):
        if track is None:
            continue
        rb = files.window(level, track, bin_lo, bin_hi)
        if rb.num_rows == 0:
            continue
        bins = rb.column(0).to_numpy() - bin_lo
        busy = rb.column(2).to_numpy().astype(np.float64)
        out[row] = np.bincount(bins, weights=busy, minlength=n_bins)
    return out


def group_stats(fraction: np.ndarray[Any, np.dtype[np.float64]], groups: int
                ) -> list[tuple[int, int, np.ndarray[Any, Any], np.ndarray[Any, Any],
                                np.ndarray[Any, Any]]]:
    """Split the rows of ``fraction`` into ``groups`` consecutive groups (as equal as
    possible): per group (first row, last row, mean, min, max over its rows, per bin)."""
    n = fraction.shape[0]
    if n == 0:
        return []
    groups = max(1, min(groups, n))
    sizes = np.full(groups, n // groups, dtype=np.int64)
    sizes[: n % groups] += 1  # as numpy.array_split: the first groups hold one more
    starts = np.cumsum(sizes) - sizes
    sums = np.add.reduceat(fraction, starts, axis=0)
    low = np.minimum.reduceat(fraction, starts, axis=0)
    high = np.maximum.reduceat(fraction, starts, axis=0)
    mean = sums / sizes[:, None]
    return [(int(starts[g]), int(starts[g] + sizes[g] - 1), mean[g], low[g], high[g])
            for g in range(groups)]
