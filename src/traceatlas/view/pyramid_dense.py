"""Dense busy matrices of the synthetic rank rows, for ``Pyramid.rows`` over many ranks.

For each kind (``rank_device``, ``rank_host``) and each level L from the coarsest down to
the finest level of any of that kind's rows, while ``bins(L) * ranks <= DENSE_CELLS``:
``rows-<kind>-<L>.npy``, shape ``(bins(L), ranks)`` (BIN-major, so a window is one
contiguous run of the file), cell = busy ns of that rank's row in that bin, summed over
categories and capped at the bin's width (``uint32`` while ``bin_ns(L) < 2**32``, else
``int64``). Column ``j`` is the j-th rank of the pyramid's sorted rank list; a
rank without that row is a zero column. The cells equal what the sparse level files give
(``pyramid_query.busy_matrix``); a window is read with one ``pread`` (no mapping, so the
server's resident memory does not grow with the pages queries touched).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from traceatlas.view import levels as lv

DENSE_CELLS = 64 << 20
"""Most cells (bins x ranks) of one dense matrix; finer levels use the sparse files."""
CHUNK_CELLS = 4 << 20
"""Cells read and reduced at a time by ``DenseRows.group_stats`` (bounds its memory)."""


def dense_dtype(level: int) -> np.dtype[Any]:
    """``uint32`` when a bin's busy ns fits (``bin_ns(level) < 2**32``), else ``int64``."""
    return np.dtype(np.uint32) if lv.bin_ns(level) < 2**32 else np.dtype(np.int64)


def dense_levels(finest: int, top: int, n_bins: list[int], n_ranks: int) -> list[int]:
    """Levels ``finest .. top`` whose matrix stays within ``DENSE_CELLS`` (coarse ones)."""
    return [L for L in range(max(finest, 0), top + 1) if n_bins[L] * n_ranks <= DENSE_CELLS]


def dense_name(kind: str, level: int) -> str:
    return f"rows-{kind}-{level}.npy"


class DenseWriter:
    """Fills the dense matrices of one kind during the build, one rank column at a time."""

    def __init__(self, dest: Path, kind: str, levels: list[int], n_bins: list[int],
                 n_ranks: int) -> None:
        self.mats = {L: np.lib.format.open_memmap(dest / dense_name(kind, L), mode="w+",
                                                  dtype=dense_dtype(L),
                                                  shape=(n_bins[L], n_ranks))
                     for L in levels}
        self.dest, self.kind = dest, kind
        self.paths = [self.path(L) for L in levels]

    def path(self, level: int) -> Path:
        return self.dest / dense_name(self.kind, level)

    def add(self, column: int, level: int, bins: np.ndarray[Any, Any],
            busy: np.ndarray[Any, Any]) -> None:
        """Busy ns of rows (bin, busy ns; several categories per bin) of rank ``column``."""
        mat = self.mats.get(level)
        if mat is None or len(bins) == 0:
            return
        total = np.minimum(np.bincount(bins, weights=busy, minlength=mat.shape[0]),
                           lv.bin_ns(level))  # as the sparse path: at most the whole bin
        nz = np.flatnonzero(total)
        mat[nz, column] = total[nz].astype(mat.dtype)

    def close(self) -> None:
        for mat in self.mats.values():
            mat.flush()
        self.mats.clear()


class DenseRows:
    """One kind's dense matrices of an opened pyramid (read with ``pread``)."""

    def __init__(self, directory: Path, kind: str, levels: list[int]) -> None:
        self.paths = {L: directory / dense_name(kind, L) for L in levels}
        self._meta: dict[int, tuple[int, tuple[int, int], np.dtype[Any]]] = {}

    def has(self, level: int) -> bool:
        return level in self.paths

    def _header(self, level: int) -> tuple[int, tuple[int, int], np.dtype[Any]]:
        got = self._meta.get(level)
        if got is None:
            mat = np.load(self.paths[level], mmap_mode="r")  # header only: nothing read
            assert isinstance(mat, np.memmap) and mat.ndim == 2 and mat.flags.c_contiguous
            got = self._meta[level] = (int(mat.offset), (int(mat.shape[0]), int(mat.shape[1])),
                                       mat.dtype)
            del mat
        return got

    def read(self, level: int, bin_lo: int, bin_hi: int) -> np.ndarray[Any, Any]:
        """Rows ``bin_lo .. bin_hi`` (inclusive, within the matrix) of all ranks."""
        offset, (n_bins, n_ranks), dtype = self._header(level)
        lo, hi = max(bin_lo, 0), min(bin_hi, n_bins - 1)
        if hi < lo:
            return np.zeros((0, n_ranks), dtype=dtype)
        size = (hi - lo + 1) * n_ranks * dtype.itemsize
        fd = os.open(self.paths[level], os.O_RDONLY)
        try:
            data = os.pread(fd, size, offset + lo * n_ranks * dtype.itemsize)
        finally:
            os.close(fd)
        return np.frombuffer(data, dtype=dtype).reshape(hi - lo + 1, n_ranks)

    def group_stats(self, level: int, bin_lo: int, bin_hi: int, columns: np.ndarray[Any, Any],
                    starts: np.ndarray[Any, Any], width: int
                    ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """Sum, min and max of the busy fraction (busy / ``width``, at most 1) over the
        rank groups starting at ``starts`` (positions in ``columns``: matrix columns, -1
        for a rank without a column = 0 busy), per bin ``bin_lo .. bin_hi``: three
        ``(groups, bins)`` arrays. Read in chunks of bins of at most ``CHUNK_CELLS``."""
        n_bins = bin_hi - bin_lo + 1
        shape = (len(starts), max(n_bins, 0))
        sums, low, high = np.zeros(shape), np.zeros(shape), np.zeros(shape)
        if n_bins <= 0 or len(columns) == 0:
            return sums, low, high
        _, (_, n_ranks), _ = self._header(level)
        step = max(1, CHUNK_CELLS // max(n_ranks, 1))
        missing = columns < 0
        contiguous = not missing.any() and bool(np.all(np.diff(columns) == 1))
        for a in range(bin_lo, bin_hi + 1, step):
            b = min(a + step - 1, bin_hi)
            got = self.read(level, a, b)
            first = max(a, 0)
            if len(got) != b - a + 1:  # bins outside the run: zeros
                block = np.zeros((b - a + 1, n_ranks), dtype=got.dtype)
                block[first - a:first - a + len(got)] = got
                got = block
            if contiguous:
                cols = got[:, int(columns[0]):int(columns[-1]) + 1]
            else:
                cols = got[:, np.maximum(columns, 0)]
                cols[:, missing] = 0
            sl = slice(a - bin_lo, b - bin_lo + 1)
            sums[:, sl] = np.add.reduceat(cols, starts, axis=1, dtype=np.int64).T / width
            low[:, sl] = np.minimum.reduceat(cols, starts, axis=1).T / width
            high[:, sl] = np.maximum.reduceat(cols, starts, axis=1).T / width
        return sums, low, high
