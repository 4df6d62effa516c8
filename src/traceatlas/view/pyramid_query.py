"""Reading a built pyramid: memory-mapped level files and O(log N + returned) slices.

A track's rows at a level are one contiguous run of one record batch (``loc.npy``: batch,
first row, end row); a window is two binary searches on that run's ``bin`` column. The
slices returned view the memory-mapped Arrow IPC file (stored in narrow types: callers
cast what they return, ``Pyramid.tiles``). ``LevelFiles.trim`` drops the mapped pages from
the process (they stay in the page cache) so resident memory stays bounded.
"""

from __future__ import annotations

import mmap
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
        self._readers: dict[int, tuple[pa.Buffer, pa.ipc.RecordBatchFileReader]] = {}
        self._batches: dict[tuple[int, int], tuple[pa.RecordBatch, np.ndarray[Any, Any]]] = {}
        self._words: dict[tuple[int, tuple[int, ...]],
                          tuple[list[np.ndarray[Any, Any]], np.ndarray[Any, Any]] | None] = {}
        self._maps: dict[int, mmap.mmap] = {}

    def _reader(self, level: int) -> tuple[pa.Buffer, pa.ipc.RecordBatchFileReader]:
        got = self._readers.get(level)
        if got is None:
            path = self.directory / f"{self.prefix}-{level}.arrow"
            with open(path, "rb") as f:
                mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            self._maps[level] = mapped
            whole = pa.py_buffer(mapped)  # zero-copy view of the file
            got = self._readers[level] = (whole, pa.ipc.open_file(whole))
        return got

    def trim(self) -> None:
        """Drop the pages of the mapped level files from this process's resident set
        (``MADV_DONTNEED``: they stay in the page cache; later reads fault them back)."""
        advice = getattr(mmap, "MADV_DONTNEED", None)
        if advice is None:  # pragma: no cover - not Linux
            return
        for mapped in self._maps.values():
            mapped.madvise(advice)

    def words(self, level: int, columns: tuple[int, ...]
              ) -> tuple[list[np.ndarray[Any, Any]], np.ndarray[Any, Any]] | None:
        """Per one of ``columns`` (fixed-width integer columns): the level file viewed as
        that column's type, and per batch the element offset of each column in its view;
        None when a buffer is not aligned to its type."""
        got = self._words.get((level, columns), False)
        if got is not False:
            return got  # type: ignore[return-value]
        whole, reader = self._reader(level)
        schema = reader.schema
        views = [np.frombuffer(whole, dtype=schema.field(c).type.to_pandas_dtype(),
                               count=whole.size // (schema.field(c).type.bit_width // 8))
                 for c in columns]
        base = np.zeros((reader.num_record_batches, len(columns)), dtype=np.int64)
        found: tuple[list[np.ndarray[Any, Any]], np.ndarray[Any, Any]] | None = (views, base)
        for b in range(reader.num_record_batches):
            rb = reader.get_batch(b)
            for j, c in enumerate(columns):
                col = rb.column(c)
                size = col.type.bit_width // 8
                byte = col.buffers()[1].address - whole.address + size * col.offset \
                    if rb.num_rows else 0
                if byte % size:
                    found = None
                    break
                base[b, j] = byte // size
        self._words[(level, columns)] = found
        return found

    def _batch(self, level: int, batch: int) -> tuple[pa.RecordBatch, np.ndarray[Any, Any]]:
        got = self._batches.get((level, batch))
        if got is None:
            rb = self._reader(level)[1].get_batch(batch)
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
        info = np.iinfo(bins.dtype)
        if bin_lo > info.max or bin_hi < info.min:  # clamping would meet a row at the edge
            return rb.slice(0, 0)
        i0 = int(np.searchsorted(bins, _as(bins, bin_lo), side="left"))
        i1 = int(np.searchsorted(bins, _as(bins, bin_hi), side="right"))
        return rb.slice(i0, max(i1 - i0, 0))


def _as(array: np.ndarray[Any, Any], value: int) -> Any:
    """``value`` clamped to ``array``'s integer type, as a scalar of it (a Python int
    makes ``searchsorted`` copy a narrower array to compare)."""
    info = np.iinfo(array.dtype)
    return array.dtype.type(min(max(value, info.min), info.max))


def cast_batches(batches: list[pa.RecordBatch], schema: pa.Schema) -> list[pa.RecordBatch]:
    """``batches`` (stored types, possibly of several levels) in ``schema``'s types: one
    copy of their rows into a single batch, one cast, then zero-copy slices."""
    if not batches:
        return []
    by_type: dict[pa.Schema, list[int]] = {}
    for i, rb in enumerate(batches):
        by_type.setdefault(rb.schema, []).append(i)
    out: list[pa.RecordBatch] = list(batches)
    for members in by_type.values():
        whole = pa.concat_batches([batches[i] for i in members]).cast(schema)
        at = 0
        for i in members:
            out[i] = whole.slice(at, batches[i].num_rows)
            at += batches[i].num_rows
    return out


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


def _lower_bound(words: np.ndarray[Any, Any], base: np.ndarray[Any, Any],
                 size: np.ndarray[Any, Any], value: int) -> np.ndarray[Any, Any]:
    """Per run r (``words[base[r] : base[r] + size[r]]``, sorted): the first index whose
    word is >= ``value``; one vectorised binary search over every run at once."""
    lo = np.zeros(len(base), dtype=np.int64)
    hi = size.astype(np.int64, copy=True)
    act = np.flatnonzero(lo < hi)
    while len(act):
        mid = (lo[act] + hi[act]) >> 1
        right = words[base[act] + mid] < value
        lo[act] = np.where(right, mid + 1, lo[act])
        hi[act] = np.where(right, hi[act], mid)
        act = act[lo[act] < hi[act]]
    return lo


def check_bins(level: int, bin_lo: int, bin_hi: int) -> None:
    """QueryError when ``bin_lo .. bin_hi`` holds more than ``MAX_ROW_BINS`` bins."""
    n_bins = bin_hi - bin_lo + 1
    if n_bins > MAX_ROW_BINS:
        raise QueryError(f"the window holds {n_bins} bins at level {level} (at most "
                         f"{MAX_ROW_BINS}); ask a coarser level")


def busy_matrix(files: LevelFiles, level: int, ids: list[int | None], bin_lo: int,
                bin_hi: int) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Busy ns per (row of ``ids``, bin ``bin_lo..bin_hi``), summed over categories; a None
    id (a rank without that row) stays 0. Vectorised across rows: a binary search of every
    row's run at once in the memory-mapped level file, then one ``bincount``."""
    check_bins(level, bin_lo, bin_hi)
    n_bins = bin_hi - bin_lo + 1
    if n_bins <= 0:
        return np.zeros((len(ids), 0), dtype=np.float64)
    words = files.words(level, (0, 2))  # bin, busy_ns
    if words is None:
        return busy_matrix_loop(files, level, ids, bin_lo, bin_hi)
    (data, busy_words), base = words
    row = np.array([i for i, t in enumerate(ids) if t is not None], dtype=np.int64)
    track = np.array([t for t in ids if t is not None], dtype=np.int64)
    loc = files.loc[level, track] if len(track) else np.zeros((0, 3), dtype=np.int64)
    b_bin = base[loc[:, 0], 0] + loc[:, 1]
    b_busy = base[loc[:, 0], 1] + loc[:, 1]
    size = loc[:, 2] - loc[:, 1]
    i0 = _lower_bound(data, b_bin, size, bin_lo)
    i1 = _lower_bound(data, b_bin, size, bin_hi + 1)
    count = i1 - i0
    total = int(count.sum())
    which = np.repeat(np.arange(len(row), dtype=np.int64), count)
    pos = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(count) - count, count) \
        + i0[which]
    bins = data[b_bin[which] + pos].astype(np.int64) - bin_lo
    busy = busy_words[b_busy[which] + pos]
    flat = np.bincount(row[which] * n_bins + bins, weights=busy.astype(np.float64),
                       minlength=len(ids) * n_bins)
    return flat.reshape(len(ids), n_bins).astype(np.float64, copy=False)


def busy_matrix_loop(files: LevelFiles, level: int, ids: list[int | None], bin_lo: int,
                     bin_hi: int) -> np.ndarray[Any, np.dtype[np.float64]]:
    """``busy_matrix`` one row at a time (the reference, and the path for unaligned
    files)."""
    n_bins = bin_hi - bin_lo + 1
    out = np.zeros((len(ids), max(n_bins, 0)), dtype=np.float64)
    if n_bins <= 0:
        return out
    for row, track in enumerate(ids):
        if track is None:
            continue
        rb = files.window(level, track, bin_lo, bin_hi)
        if rb.num_rows == 0:
            continue
        bins = rb.column(0).to_numpy().astype(np.int64) - bin_lo
        busy = rb.column(2).to_numpy().astype(np.float64)
        out[row] = np.bincount(bins, weights=busy, minlength=n_bins)
    return out


def group_sizes(n: int, groups: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """First row and size of ``groups`` consecutive groups of ``n`` rows (at most ``n``
    groups; sizes as ``numpy.array_split``: the first groups hold one more)."""
    groups = max(1, min(groups, n))
    sizes = np.full(groups, n // groups, dtype=np.int64)
    sizes[: n % groups] += 1
    return np.cumsum(sizes) - sizes, sizes
