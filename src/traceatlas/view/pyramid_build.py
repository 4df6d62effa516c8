"""Build a store's level-of-detail pyramid into a directory, ranks in parallel.

Files written (see ``pyramid.py`` for the reading side):
``header.json`` (format, key, store path, origin/end ns, top level, build seconds, bytes),
``tracks.json`` (the ``TrackInfo`` list), ``names.json`` (name index -> text),
``bins-<L>.arrow`` / ``counters-<L>.arrow`` (uncompressed Arrow IPC, one record batch per
rank, rows sorted by (track id, bin)), ``loc.npy`` / ``cloc.npy`` (int64, shape
(levels, tracks, 3): batch, first row, end row of each track at each level),
``rows-<kind>-<L>.npy`` (``pyramid_dense``: dense busy matrices of the rank rows).
Level files are stored in the narrowest types their ranges allow (``stored_schema``:
bin int32, busy_ns and count uint32 where they fit); queries cast the rows they return
to the contract's types (``BINS_SCHEMA``, ``COUNTERS_SCHEMA``).

The run's extent comes from the Parquet statistics of the interval parts (no scan). Each
rank is built by ``pyramid_rank.build_rank`` (memory: that rank's intervals), in a pool of
worker processes when the store is large: a worker writes its rank's rows to a scratch
file in the destination, the parent appends them rank by rank in order (track ids
shifted, name indexes mapped to the global table), so at most a few ranks are in flight.
"""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from traceatlas import signals
from traceatlas.errors import EngineError
from traceatlas.store.layout import part_path
from traceatlas.view import levels as lv
from traceatlas.view.pyramid_dense import DenseWriter, dense_levels
from traceatlas.view.pyramid_rank import BIN_COLUMNS, COUNTER_COLUMNS, RankLevels, build_rank
from traceatlas.view.pyramid_types import TrackInfo

if TYPE_CHECKING:
    from traceatlas.model.trace import Trace

FORMAT_VERSION = 2
"""2: narrow stored types, dense rank-row matrices."""
Progress = Callable[[int, int], None]

BINS_SCHEMA = pa.schema([
    ("bin", pa.int64()), ("cat", pa.int8()), ("busy_ns", pa.int64()),
    ("count", pa.int64()), ("name", pa.int32()),
])
COUNTERS_SCHEMA = pa.schema([
    ("bin", pa.int64()), ("series", pa.int32()), ("min", pa.float64()),
    ("mean", pa.float64()), ("max", pa.float64()), ("count", pa.int64()),
])
ROW_KINDS = ("rank_device", "rank_host")


def stored_schema(schema: pa.Schema, last_bin: int, bin_width: int, max_count: int
                  ) -> pa.Schema:
    """``schema`` with narrower types where the level's ranges allow: ``bin`` int32 when
    every bin index (0 .. ``last_bin``) fits, ``busy_ns`` uint32 when a bin's width
    (``bin_width`` ns, the most a row can be busy) fits, ``count`` uint32 when
    ``max_count`` (rows in the store: no bin counts more) fits."""
    narrow = {"bin": pa.int32() if last_bin < 2**31 else None,
              "busy_ns": pa.uint32() if bin_width < 2**32 else None,
              "count": pa.uint32() if max_count < 2**32 else None}
    return pa.schema([pa.field(f.name, narrow.get(f.name) or f.type) for f in schema])


INLINE_ROWS = 200_000
"""Stores with fewer intervals are built in this process (no worker start-up cost)."""


def _stat_extent(path: Path, column: str, want_max: bool) -> int | None:
    """Min (or max) of an int64 column of a part file from its row-group statistics,
    reading the column only when a row group has none; None when the part has no rows."""
    meta = pq.ParquetFile(path).metadata
    found: list[int] = []
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        if group.num_rows == 0:
            continue
        chunk = next((group.column(j) for j in range(group.num_columns)
                      if group.column(j).path_in_schema == column), None)
        stats = chunk.statistics if chunk is not None else None
        if stats is None or not stats.has_min_max or stats.null_count:
            values = pq.read_table(path, columns=[column]).column(column)
            got = pc.max(values) if want_max else pc.min(values)
            return None if got.as_py() is None else int(got.as_py())
        found.append(int(stats.max if want_max else stats.min))
    if not found:
        return None
    return max(found) if want_max else min(found)


def _extent(store: Path, ranks: list[int]) -> tuple[int, int, int]:
    """(first start, last end, interval + counter rows) over the store's intervals and
    non-null counter samples (a sample at t covers [t, t + 1))."""
    firsts: list[int] = []
    lasts: list[int] = []
    rows = 0
    for rank in ranks:
        path = part_path(store, "intervals", rank)
        if path.is_file():
            rows += pq.ParquetFile(path).metadata.num_rows
            first = _stat_extent(path, "start_ns", want_max=False)
            last = _stat_extent(path, "end_ns", want_max=True)
            if first is not None and last is not None:
                firsts.append(first)
                lasts.append(last)
        path = part_path(store, "counters", rank)
        if path.is_file() and pq.ParquetFile(path).metadata.num_rows:
            rows += pq.ParquetFile(path).metadata.num_rows
            ts = pq.read_table(path, columns=["ts_ns", "value"])
            ts = ts.filter(pc.is_valid(ts.column("value"))).column("ts_ns")
            if len(ts):
                firsts.append(int(pc.min(ts).as_py()))
                lasts.append(int(pc.max(ts).as_py()) + 1)
    if not firsts:
        return 0, 0, rows
    return min(firsts), max(lasts), rows


def _rank_job(store: Path, origin: int, top: int, scratch: Path,
              item: tuple[int, int]) -> tuple[list[dict[str, Any]], list[str], str]:
    """Worker: build one rank, write its rows to a scratch ``.npz``; return its tracks,
    names and the scratch path."""
    ordinal, rank = item
    got = build_rank(store, rank, origin, top)
    path = scratch / f".rank-{ordinal}.npz"
    arrays = {f"b{L}_{c}": cols[c] for L, cols in enumerate(got.bins) for c in BIN_COLUMNS}
    arrays |= {f"c{L}_{c}": cols[c] for L, cols in enumerate(got.counters)
               for c in COUNTER_COLUMNS}
    with open(path, "wb") as handle:
        np.savez(handle, **arrays)  # type: ignore[arg-type]
    return [asdict(t) for t in got.infos], got.names, str(path)


def _load_job(result: tuple[list[dict[str, Any]], list[str], str], top: int) -> RankLevels:
    infos, names, path = result
    with np.load(path) as data:
        bins = [{c: data[f"b{L}_{c}"] for c in BIN_COLUMNS} for L in range(top + 1)]
        counters = [{c: data[f"c{L}_{c}"] for c in COUNTER_COLUMNS} for L in range(top + 1)]
    os.unlink(path)
    return RankLevels([TrackInfo(**t) for t in infos], names, bins, counters)


def _ranks_built(store: Path, ranks: list[int], origin: int, top: int, workers: int,
                 scratch: Path) -> Iterator[RankLevels]:
    """Every rank's rows, in rank order; ``workers`` > 1 runs them in a process pool with
    at most ``2 * workers`` ranks submitted ahead of the one being assembled."""
    if workers <= 1:
        for rank in ranks:
            yield build_rank(store, rank, origin, top)
        return
    from traceatlas.engine.local import _end_workers

    job = functools.partial(signals.run_job, functools.partial(_rank_job, store, origin, top,
                                                               scratch))
    pool = None
    try:
        with signals.spawning():
            pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                       initializer=signals.init_worker,
                                       initargs=(os.getpid(),))
        queue: deque[Future[tuple[list[dict[str, Any]], list[str], str]]] = deque()
        items = iter(enumerate(ranks))
        for item in items:
            queue.append(pool.submit(job, item))
            if len(queue) >= 2 * workers:
                break
        while queue:
            result = queue.popleft().result()
            nxt = next(items, None)
            if nxt is not None:
                queue.append(pool.submit(job, nxt))
            yield _load_job(result, top)
    except BrokenProcessPool as exc:
        _end_workers(pool)
        raise EngineError("a pyramid worker process died (out of memory?)") from exc
    except BaseException:
        _end_workers(pool)
        raise
    finally:
        if pool is not None:
            pool.shutdown(wait=True)


def _one_batch(columns: dict[str, np.ndarray[Any, Any]], schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array(columns[f.name], type=f.type) for f in schema], schema=schema)


def _locations(ids: np.ndarray[Any, Any], n_tracks: int, offset: int, batch: int,
               loc: np.ndarray[Any, Any], level: int) -> None:
    """Row range of local tracks 0..n_tracks-1 in ``ids`` (sorted) -> loc[level, offset+]."""
    if n_tracks == 0:
        return
    want = np.arange(n_tracks, dtype=np.int64)
    sl = slice(offset, offset + n_tracks)
    loc[level, sl, 0] = batch
    loc[level, sl, 1] = np.searchsorted(ids, want, side="left")
    loc[level, sl, 2] = np.searchsorted(ids, want, side="right")


def build(trace: Trace, dest: Path, key: str, progress: Progress | None = None,
          workers: int | None = None) -> None:
    """Write the pyramid of ``trace``'s store into the (new, empty) directory ``dest``.
    ``workers``: processes (default: CPU count; small stores are built inline)."""
    t0 = time.perf_counter()
    store = trace.path
    ranks = sorted(int(r) for r in trace.manifest["ranks"])
    origin, end, n_rows = _extent(store, ranks)
    top = lv.top_level(max(end - origin, 1))
    if workers is None:
        workers = 1 if n_rows < INLINE_ROWS else (os.cpu_count() or 1)
    workers = max(1, min(workers, len(ranks)))
    n_levels = top + 1
    last = max(end - 1, origin) - origin
    n_bins = [(last >> (10 + 2 * L)) + 1 for L in range(n_levels)]
    bin_schemas = [stored_schema(BINS_SCHEMA, n_bins[L] - 1, lv.bin_ns(L), n_rows)
                   for L in range(n_levels)]
    cnt_schemas = [stored_schema(COUNTERS_SCHEMA, n_bins[L] - 1, lv.bin_ns(L), n_rows)
                   for L in range(n_levels)]
    # Every level within the cell budget; those finer than any rank row's finest level
    # stay all-zero and are removed at the end.
    dense = {k: DenseWriter(dest, k, dense_levels(0, top, n_bins, len(ranks)), n_bins,
                            len(ranks)) for k in ROW_KINDS}
    finest = {k: top + 1 for k in ROW_KINDS}
    infos: list[TrackInfo] = []
    names: list[str] = []
    name_index: dict[str, int] = {}
    locs: list[np.ndarray[Any, Any]] = []
    clocs: list[np.ndarray[Any, Any]] = []
    bin_files = [pa.OSFile(str(dest / f"bins-{L}.arrow"), "wb") for L in range(n_levels)]
    cnt_files = [pa.OSFile(str(dest / f"counters-{L}.arrow"), "wb") for L in range(n_levels)]
    try:
        bw = [pa.ipc.new_file(f, bin_schemas[L]) for L, f in enumerate(bin_files)]
        cw = [pa.ipc.new_file(f, cnt_schemas[L]) for L, f in enumerate(cnt_files)]
        for batch, got in enumerate(_ranks_built(store, ranks, origin, top, workers, dest)):
            offset, n = len(infos), len(got.infos)
            synthetic = {t.kind: t.id for t in got.infos if t.kind in ROW_KINDS}  # local
            for kind, local in synthetic.items():
                finest[kind] = min(finest[kind], got.infos[local].finest_level)
            for info in got.infos:
                info.id += offset
                infos.append(info)
            for text in got.names:  # rank order, sorted within a rank: reproducible
                if text not in name_index:
                    name_index[text] = len(names)
                    names.append(text)
            remap = np.array([name_index[t] for t in got.names] or [0], dtype=np.int64)
            loc = np.zeros((n_levels, n, 3), dtype=np.int64)
            cloc = np.zeros((n_levels, n, 3), dtype=np.int64)
            for level in range(n_levels):
                cols = dict(got.bins[level])
                _locations(cols["id"], n, 0, batch, loc, level)
                cols["name"] = remap[cols["name"]]
                for kind, local in synthetic.items():
                    mine = cols["id"] == local
                    dense[kind].add(batch, level, cols["bin"][mine], cols["busy_ns"][mine])
                bw[level].write_batch(_one_batch(cols, bin_schemas[level]))
                ccols = got.counters[level]
                _locations(ccols["id"], n, 0, batch, cloc, level)
                cw[level].write_batch(_one_batch(ccols, cnt_schemas[level]))
            locs.append(loc)
            clocs.append(cloc)
            del got
            if progress is not None:
                progress(batch + 1, len(ranks))
        for w in (*bw, *cw):
            w.close()
    finally:
        for f in (*bin_files, *cnt_files):
            f.close()
        for d in dense.values():
            d.close()
    kept = {k: dense_levels(finest[k], top, n_bins, len(ranks)) for k in ROW_KINDS}
    for kind in ROW_KINDS:
        for path in dense[kind].paths:
            if path not in {dense[kind].path(L) for L in kept[kind]}:
                path.unlink()
    none = np.zeros((n_levels, 0, 3), dtype=np.int64)
    np.save(dest / "loc.npy", np.concatenate([none, *locs], axis=1))
    np.save(dest / "cloc.npy", np.concatenate([none, *clocs], axis=1))
    (dest / "tracks.json").write_text(json.dumps([asdict(t) for t in infos]), encoding="utf-8")
    (dest / "names.json").write_text(json.dumps(names), encoding="utf-8")
    size = sum(p.stat().st_size for p in dest.iterdir())
    header = {"format": FORMAT_VERSION, "key": key, "store": str(store.resolve()),
              "origin_ns": origin, "end_ns": end, "top": top, "ranks": ranks,
              "build_s": round(time.perf_counter() - t0, 3), "bytes": size,
              "workers": workers, "dense": kept}
    (dest / "header.json").write_text(json.dumps(header), encoding="utf-8")
