"""The viewer's level-of-detail pyramid of a store: built once, cached, memory-mapped.

Where: ``cache_root() / "lod" / <key>``, key = BLAKE2b of the store's absolute path and
its ``manifest.json`` bytes (a rewritten store gets a new pyramid; nothing is ever written
inside the user's store). Built in an owner-tagged temporary sibling, renamed into place
under the cache's ``flock``; other keys of the same store path are removed then.
Levels: ``view/levels.py``; build: ``pyramid_build.py``; flattened-timeline rule:
``pyramid_bins.py``; ``rows``: ``pyramid_rows.py`` (sparse files, blocks of ranks)
and ``pyramid_dense.py`` (dense matrices of the coarse levels). Level files are
memory-mapped; past ``RESIDENT_BYTES`` of mapped pages in this process they are dropped
(``LevelFiles.trim``), so a long-running server's resident memory stays bounded. All
times are absolute ns.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from traceatlas import signals, tempfiles
from traceatlas.errors import QueryError
from traceatlas.model.schema import CATEGORIES
from traceatlas.store.cache import cache_lock, cache_root
from traceatlas.store.layout import MANIFEST
from traceatlas.view import levels as lv
from traceatlas.view.pyramid_build import (
    BINS_SCHEMA,
    COUNTERS_SCHEMA,
    FORMAT_VERSION,
    ROW_KINDS,
    Progress,
    build,
)
from traceatlas.view.pyramid_dense import DenseRows
from traceatlas.view.pyramid_query import (
    LevelFiles,
    bin_range,
    cast_batches,
    check_bins,
    check_window,
    group_sizes,
)
from traceatlas.view.pyramid_rows import answer_level
from traceatlas.view.pyramid_rows import group_stats as sparse_group_stats
from traceatlas.view.pyramid_types import TrackInfo, TrackTiles

if TYPE_CHECKING:
    from traceatlas.model.trace import Trace

__all__ = ["Pyramid", "TrackInfo", "TrackTiles", "ensure_pyramid", "pyramid_dir", "pyramid_key"]

RESIDENT_BYTES = 256 << 20
"""Mapped file pages this process may keep resident before ``LevelFiles.trim`` drops them."""


class Pyramid:
    """An opened pyramid directory (read-only; level files memory-mapped on first use)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.header: dict[str, Any] = json.loads((directory / "header.json").read_text("utf-8"))
        self.origin_ns = int(self.header["origin_ns"])
        self.end_ns = int(self.header["end_ns"])
        self.top = int(self.header["top"])
        self.tracks = [TrackInfo(**t) for t in
                       json.loads((directory / "tracks.json").read_text("utf-8"))]
        self.names: list[str] = json.loads((directory / "names.json").read_text("utf-8"))
        self.categories: list[str] = list(CATEGORIES)
        self._bins = LevelFiles(directory, "bins",
                                np.load(directory / "loc.npy", mmap_mode="r").view(np.ndarray))
        self._counters = LevelFiles(directory, "counters",
                                    np.load(directory / "cloc.npy",
                                            mmap_mode="r").view(np.ndarray))
        self._rows = {(t.rank, t.kind): t.id for t in self.tracks if t.kind in ROW_KINDS}
        self._rank_array = np.asarray(self.header["ranks"], dtype=np.int64)
        dense = self.header.get("dense") or {}
        self._dense = {k: DenseRows(directory, k, [int(L) for L in dense.get(k, [])])
                       for k in ROW_KINDS}
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

    def _bound_resident(self) -> None:
        """Trim the mapped level files when this process holds more than RESIDENT_BYTES
        of file-backed pages (``/proc/self/statm`` shared pages; Linux only)."""
        try:
            with open("/proc/self/statm", "rb") as f:
                shared = int(f.read().split()[2]) * self._page
        except (OSError, ValueError, IndexError):
            return
        if shared > RESIDENT_BYTES:
            self._bins.trim()
            self._counters.trim()

    def meta(self) -> dict[str, Any]:
        """start/end/origin ns, levels with their bin widths, ranks, categories, track
        count, build seconds and bytes on disk."""
        return {
            "start_ns": self.origin_ns, "end_ns": self.end_ns, "origin_ns": self.origin_ns,
            "levels": [{"level": L, "bin_ns": lv.bin_ns(L)} for L in range(self.top + 1)],
            "ranks": list(self.header["ranks"]), "categories": self.categories,
            "tracks": len(self.tracks), "build_s": self.header["build_s"],
            "bytes": self.header["bytes"],
        }

    def _ids(self, ids: list[int]) -> list[int]:
        bad = [i for i in ids if not isinstance(i, int) or not 0 <= i < len(self.tracks)]
        if bad:
            raise QueryError(f"unknown track id {bad[0]!r} (ids are 0..{len(self.tracks) - 1})")
        return ids

    def _tiles(self, files: LevelFiles, schema: pa.Schema, level: int, start_ns: int,
               end_ns: int, ids: list[int]) -> list[TrackTiles]:
        check_window(level, start_ns, end_ns)
        found: list[tuple[int, int, pa.RecordBatch]] = []
        for track in self._ids(ids):
            fin = self.tracks[track].finest_level
            used = min(max(level, fin), self.top)
            lo, hi = bin_range(used, start_ns, end_ns, self.origin_ns)
            found.append((track, used, files.window(used, track, lo, hi)))
        out = [TrackTiles(track, used, lv.bin_ns(used), level < self.tracks[track].finest_level,
                          pa.Table.from_batches([rb]))
               for (track, used, _), rb in zip(found, cast_batches([f[2] for f in found],
                                                                   schema), strict=True)]
        self._bound_resident()
        return out

    def tiles(self, level: int, start_ns: int, end_ns: int, ids: list[int]) -> list[TrackTiles]:
        """Interval bins (bin, cat, busy_ns, count, name) of tracks ``ids`` overlapping
        ``[start_ns, end_ns)`` at ``level`` (or the track's finest, when coarser)."""
        return self._tiles(self._bins, BINS_SCHEMA, level, start_ns, end_ns, ids)

    def counter_tiles(self, level: int, start_ns: int, end_ns: int,
                      ids: list[int]) -> list[TrackTiles]:
        """Counter bins (bin, series, min, mean, max, count) of tracks ``ids``; ``series``
        indexes the track's ``TrackInfo.series``."""
        return self._tiles(self._counters, COUNTERS_SCHEMA, level, start_ns, end_ns, ids)

    def rows(self, level: int, start_ns: int, end_ns: int, kind: str, ranks: list[int],
             groups: int) -> list[dict[str, Any]]:
        """Busy fraction (0..1) of the ``kind`` row (rank_device | rank_host) of ``ranks``,
        split into ``groups`` consecutive groups: per group ``ranks`` [first, last], ``bin``,
        ``mean``, ``min``, ``max`` per bin, plus the ``level`` and ``bin_ns`` used:
        ``level``, or the finest level at which at least half of the ranks' rows are
        stored when coarser (``pyramid_rows.answer_level``); a rank stored only coarser
        gives each finer bin the fraction of the coarse bin holding it."""
        check_window(level, start_ns, end_ns)
        if kind not in ROW_KINDS:
            raise QueryError(f"kind must be one of {', '.join(ROW_KINDS)}, not {kind!r}")
        if not isinstance(groups, int) or groups < 1:
            raise QueryError(f"groups must be a positive integer, not {groups!r}")
        if not ranks:
            return []
        ids = [self._rows.get((r, kind)) for r in ranks]
        finest = [self.tracks[i].finest_level if i is not None else level for i in ids]
        stored = [f for f, i in zip(finest, ids, strict=True) if i is not None]
        used = answer_level(level, stored, self.top)
        lo, hi = bin_range(used, start_ns, end_ns, self.origin_ns)
        last = (max(self.end_ns - 1, self.origin_ns) - self.origin_ns) >> (10 + 2 * used)
        lo, hi = max(lo, 0), min(hi, last)
        check_bins(used, lo, hi)
        width = lv.bin_ns(used)
        starts, sizes = group_sizes(len(ranks), groups)
        dense = self._dense[kind]
        if dense.has(used) and all(f <= used for f in stored):
            pos = np.searchsorted(self._rank_array, np.asarray(ranks, dtype=np.int64))
            pos = np.minimum(pos, len(self._rank_array) - 1)
            columns = np.where(self._rank_array[pos] == ranks, pos, -1)
            sums, low, high = dense.group_stats(used, lo, hi, columns, starts, width)
        else:
            sums, low, high = sparse_group_stats(self._bins, used, ids, finest, lo, hi,
                                                 starts, sizes)
            self._bound_resident()
        mean = sums / sizes[:, None]
        bins = list(range(lo, hi + 1))
        return [{"ranks": [ranks[int(a)], ranks[int(a + n - 1)]], "bin": bins,
                 "mean": mean[g].tolist(), "min": low[g].tolist(), "max": high[g].tolist(),
                 "level": used, "bin_ns": width}
                for g, (a, n) in enumerate(zip(starts, sizes, strict=True))]


def pyramid_key(store: Path) -> str:
    """BLAKE2b (20 hex digits) of the store's absolute path and manifest bytes."""
    digest = hashlib.blake2b(digest_size=10)
    digest.update(os.path.abspath(store).encode())
    digest.update(b"\0")
    digest.update((Path(store) / MANIFEST).read_bytes())
    return digest.hexdigest()


def pyramid_dir(store: Path) -> Path:
    """Where the pyramid of ``store`` lives (``cache_root() / "lod" / key``)."""
    return cache_root() / "lod" / pyramid_key(store)


def _usable(directory: Path, key: str) -> bool:
    """The pyramid in ``directory`` is of this format and key and undamaged: every file it
    needs is there and its files (but the header) add up to the header's ``bytes`` (a
    truncated, missing or extra file is a damaged cache, rebuilt). One ``stat`` per file."""
    try:
        header = json.loads((directory / "header.json").read_text("utf-8"))
        if not (isinstance(header, dict) and header.get("format") == FORMAT_VERSION
                and header.get("key") == key):
            return False
        top = int(header["top"])
        sizes = {p.name: p.stat().st_size for p in directory.iterdir()
                 if p.name != "header.json"}
    except (OSError, ValueError, KeyError, TypeError):
        return False
    needed = {"tracks.json", "names.json", "loc.npy", "cloc.npy",
              *(f"{prefix}-{L}.arrow" for prefix in ("bins", "counters") for L in range(top + 1))}
    return needed <= sizes.keys() and sum(sizes.values()) == header.get("bytes")


def _opened(directory: Path, key: str) -> Pyramid | None:
    """The pyramid in ``directory`` opened, or None when it is missing, stale or damaged
    (a file that does not parse, of the right size)."""
    if not _usable(directory, key):
        return None
    try:
        return Pyramid(directory)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _remove_stale(root: Path, store: str, key: str) -> None:
    """Delete other pyramids of the same store path (its earlier versions)."""
    for entry in root.iterdir():
        if entry.name == key or not entry.is_dir() or entry.name.startswith("."):
            continue
        with contextlib.suppress(OSError, ValueError):
            header = json.loads((entry / "header.json").read_text("utf-8"))
            if isinstance(header, dict) and header.get("store") == store:
                shutil.rmtree(entry, ignore_errors=True)


def ensure_pyramid(trace: Trace, progress: Progress | None = None) -> Pyramid:
    """Open the pyramid of ``trace``'s store (its whole store, selections ignored),
    building it first when missing, stale or damaged. ``progress(done, total)`` is called
    after each rank built."""
    store = Path(os.path.abspath(trace.path))
    key = pyramid_key(store)
    target = cache_root() / "lod" / key
    found = _opened(target, key)
    if found is not None:
        return found
    with cache_lock(target):
        if _opened(target, key) is None:
            tempfiles.sweep_siblings(target.parent, target.name)
            tmp = tempfiles.sibling(target, "tmp")
            tmp.mkdir()
            try:
                build(trace, tmp, key, progress)
                with signals.deferred():
                    if os.path.lexists(target):
                        shutil.rmtree(target, ignore_errors=True)
                    os.rename(tmp, target)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            _remove_stale(target.parent, str(store.resolve()), key)
    return Pyramid(target)
