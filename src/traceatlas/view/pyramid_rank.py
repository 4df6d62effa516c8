"""One rank's share of the pyramid: its tracks, names and the bins of every level.

Runs in a worker process (or inline for small stores). Reads only the columns it needs
from the rank's part files (names as dictionary codes, never as strings per row), sorts
the rank's intervals once per timeline family, flattens every timeline
(``pyramid_bins.owned_pieces``), cuts the pieces at the timeline's finest level and
aggregates coarser levels from finer ones (``pyramid_bins.level_bins``). Track ids and
name indexes are LOCAL to the rank (0..); the parent shifts them (``pyramid_build``).
Memory: O(the rank's intervals); time O(N log N).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from traceatlas.model.schema import CATEGORIES
from traceatlas.store.layout import part_path
from traceatlas.view.pyramid_bins import (
    Columns,
    IntArray,
    KeyLayout,
    Packed,
    aggregate,
    level_bins,
    owned_pieces,
    shift_of,
    split_in_bins,
)
from traceatlas.view.pyramid_plan import DEVICE_KINDS, HOST_KINDS, plan_rank
from traceatlas.view.pyramid_types import TrackInfo

if TYPE_CHECKING:
    import polars as pl

_OTHER = CATEGORIES.index("other")
_CAT_CODE = {c: i for i, c in enumerate(CATEGORIES)}
key_layout = KeyLayout.make
"""The packed-key layout (a name, so tests can force the Polars path)."""
BIN_COLUMNS = ("id", "bin", "cat", "busy_ns", "count", "name")
COUNTER_COLUMNS = ("id", "bin", "series", "min", "mean", "max", "count")


@dataclass
class RankLevels:
    """A rank's pyramid rows. ``infos``: its tracks (ids 0..); ``names``: its sorted
    distinct names (local index -> text); ``bins[L]`` / ``counters[L]``: per level,
    columns sorted by (id, bin)."""

    infos: list[TrackInfo]
    names: list[str]
    bins: list[Columns]
    counters: list[dict[str, np.ndarray[Any, Any]]]


def _codes(column: pa.ChunkedArray) -> tuple[list[str], IntArray]:
    """Dictionary codes of a string column, renumbered to its SORTED distinct used values."""
    if column.num_chunks == 0 or len(column) == 0:
        return [], np.zeros(0, dtype=np.int64)
    if not pa.types.is_dictionary(column.type):
        column = column.dictionary_encode()
    merged = column.unify_dictionaries().combine_chunks()
    if isinstance(merged, pa.ChunkedArray):  # pragma: no cover - pyarrow versions differ
        merged = merged.combine_chunks()
    values = merged.dictionary.to_pylist()
    raw = merged.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    used = np.flatnonzero(np.bincount(raw, minlength=len(values)))
    order = sorted(used.tolist(), key=lambda i: values[i])
    remap = np.full(len(values), -1, dtype=np.int64)
    remap[np.asarray(order, dtype=np.int64)] = np.arange(len(order), dtype=np.int64)
    return [values[i] for i in order], remap[raw]


def _categories(column: pa.ChunkedArray) -> IntArray:
    """Index into CATEGORIES per row (unknown -> other)."""
    if len(column) == 0:
        return np.zeros(0, dtype=np.int64)
    if not pa.types.is_dictionary(column.type):
        column = column.dictionary_encode()
    merged = column.unify_dictionaries().combine_chunks()
    lut = np.array([_CAT_CODE.get(v, _OTHER) for v in merged.dictionary.to_pylist()] or [0],
                   dtype=np.int64)
    codes: IntArray = lut[merged.indices.to_numpy(zero_copy_only=False).astype(np.int64)]
    return codes


def _read_intervals(store: Path, rank: int) -> pa.Table | None:
    path = part_path(store, "intervals", rank)
    if not path.is_file():
        return None
    return pq.read_table(path, columns=["track_id", "start_ns", "end_ns", "name", "category",
                                        "depth"], read_dictionary=["name", "category"])


def _interval_stats(table: pa.Table | None) -> pl.DataFrame:
    import polars as pl

    schema = {"track_id": pl.Int32, "n": pl.UInt32, "first": pl.Int64, "last": pl.Int64,
              "depth": pl.Int32}
    if table is None or table.num_rows == 0:
        return pl.DataFrame(schema=schema)
    frame = pl.from_arrow(table.select(["track_id", "start_ns", "end_ns", "depth"]))
    assert isinstance(frame, pl.DataFrame)
    return frame.group_by("track_id").agg(
        n=pl.len(), first=pl.col("start_ns").min(), last=pl.col("end_ns").max(),
        depth=pl.col("depth").max())


def _counter_frame(store: Path, rank: int) -> pl.DataFrame | None:
    import polars as pl

    path = part_path(store, "counters", rank)
    if not path.is_file():
        return None
    frame = pl.read_parquet(path, columns=["track_id", "ts_ns", "name", "value"]).filter(
        pl.col("value").is_not_null())
    return frame.with_columns(pl.col("name").cast(pl.String)) if frame.height else None


def _counter_stats(frame: pl.DataFrame | None) -> pl.DataFrame:
    import polars as pl

    if frame is None:
        return pl.DataFrame(schema={"track_id": pl.Int32, "n": pl.UInt32, "first": pl.Int64,
                                    "last": pl.Int64, "series": pl.List(pl.String)})
    return frame.group_by("track_id").agg(
        n=pl.len(), first=pl.col("ts_ns").min(), last=pl.col("ts_ns").max() + 1,
        series=pl.col("name").unique().sort())


def _tracks(store: Path, rank: int) -> pl.DataFrame:
    import polars as pl

    path = part_path(store, "tracks", rank)
    cols = ["track_id", "kind", "name", "device", "stream"]
    if not path.is_file():
        return pl.DataFrame(schema={"track_id": pl.Int32, "kind": pl.String, "name": pl.String,
                                    "device": pl.Int32, "stream": pl.Int64})
    return pl.read_parquet(path, columns=cols).with_columns(pl.col("kind").cast(pl.String))


def _pieces(fin: int, s: IntArray, e: IntArray) -> tuple[IntArray, IntArray, IntArray]:
    """(owner of each bin piece, bin, busy ns) of one timeline sorted by (start, -end): the
    pieces of its flattened timeline cut at the bin edges of its finest level ``fin``."""
    owner, a, b = owned_pieces(s, e)
    idx, bins, busy = split_in_bins(a, b, np.full(len(a), shift_of(fin), dtype=np.int64))
    return owner[idx], bins, busy


def _timeline_packed(layout: KeyLayout, vid: int, fin: int, s: IntArray, e: IntArray,
                     cat: IntArray, name: IntArray) -> Packed:
    """Aggregated packed rows of one timeline at its finest level: busy pieces, plus one
    count per interval start."""
    owner, bins, busy = _pieces(fin, s, e)
    n = len(s)
    key = np.concatenate((layout.pack(vid, bins, cat[owner], name[owner]),
                          layout.pack(vid, s >> shift_of(fin), cat, name)))
    return aggregate(key, np.concatenate((busy, np.zeros(n, dtype=np.int64))),
                     np.concatenate((np.zeros(len(bins), dtype=np.int64),
                                     np.ones(n, dtype=np.int64))))


def _timeline_rows(vid: int, fin: int, s: IntArray, e: IntArray, cat: IntArray,
                   name: IntArray) -> Columns:
    """The same rows unpacked (id, lvl, bin, cat, name, busy, count), for Polars."""
    owner, bins, busy = _pieces(fin, s, e)
    n_busy, n_count = len(bins), len(s)
    total = n_busy + n_count
    return {
        "id": np.full(total, vid, dtype=np.int64),
        "lvl": np.full(total, fin, dtype=np.int64),
        "bin": np.concatenate((bins, s >> shift_of(fin))),
        "cat": np.concatenate((cat[owner], cat)),
        "name": np.concatenate((name[owner], name)),
        "busy": np.concatenate((busy, np.zeros(n_count, dtype=np.int64))),
        "count": np.concatenate((np.zeros(n_busy, dtype=np.int64),
                                 np.ones(n_count, dtype=np.int64))),
    }


def _timelines(tid: IntArray, start: IntArray, end: IntArray, infos: list[TrackInfo]
               ) -> list[tuple[TrackInfo, IntArray]]:
    """(track, its row indexes sorted by (start, -end)) for every real track with
    intervals, then the rank_device / rank_host unions."""
    by_tid = {t.track_id: t for t in infos if t.track_id is not None and t.events > 0}
    out: list[tuple[TrackInfo, IntArray]] = []
    order = np.lexsort((-end, start, tid))  # one sort for every real track
    stid = tid[order]
    cuts = np.flatnonzero(np.concatenate(([True], stid[1:] != stid[:-1], [True])))
    family = np.full(len(tid), 2, dtype=np.int8)  # 0 device, 1 host, 2 neither
    for lo, hi in itertools.pairwise(cuts.tolist()):
        info = by_tid.get(int(stid[lo]))
        if info is None:
            continue
        rows = order[lo:hi]
        if info.kind in DEVICE_KINDS:
            family[rows] = 0
        elif info.kind in HOST_KINDS:
            family[rows] = 1
        out.append((info, rows))
    synthetic = {t.kind: t for t in infos if t.kind in ("rank_device", "rank_host")}
    for code, kind in ((0, "rank_device"), (1, "rank_host")):
        members = np.flatnonzero(family == code)
        if kind in synthetic and len(members):
            out.append((synthetic[kind],
                        members[np.lexsort((-end[members], start[members]))]))
    return out


def _interval_bins(table: pa.Table | None, infos: list[TrackInfo], origin: int, top: int
                   ) -> tuple[list[str], list[Columns]]:
    """Local names and the per-level interval bins of the rank's timelines."""
    if table is None or table.num_rows == 0:
        empty = np.zeros(0, dtype=np.int64)
        return [], [{c: empty for c in BIN_COLUMNS} for _ in range(top + 1)]
    names, name = _codes(table.column("name"))
    cat = _categories(table.column("category"))
    start = table.column("start_ns").to_numpy().astype(np.int64) - origin
    end = table.column("end_ns").to_numpy().astype(np.int64) - origin
    lines = _timelines(table.column("track_id").to_numpy().astype(np.int64), start, end,
                       infos)
    max_bin = max((int(end[rows].max()) >> shift_of(t.finest_level) for t, rows in lines),
                  default=0)
    layout = key_layout(len(infos), max_bin, len(names))
    if layout is None:
        from traceatlas.view.pyramid_aggregate import polars_bins

        parts = [_timeline_rows(t.id, t.finest_level, start[r], end[r], cat[r], name[r])
                 for t, r in lines]
        cols = ("id", "lvl", "bin", "cat", "name", "busy", "count")
        return names, polars_bins({c: np.concatenate([p[c] for p in parts] or
                                                      [np.zeros(0, dtype=np.int64)])
                                   for c in cols}, top)
    by_level: dict[int, list[Packed]] = {}
    for t, r in lines:
        by_level.setdefault(t.finest_level, []).append(
            _timeline_packed(layout, t.id, t.finest_level, start[r], end[r], cat[r], name[r]))
    return names, level_bins(by_level, top, layout)


def build_rank(store: Path, rank: int, origin: int, top: int) -> RankLevels:
    """Tracks, names and per-level bins of ``rank`` (ids and names local to the rank)."""
    table = _read_intervals(store, rank)
    cframe = _counter_frame(store, rank)
    infos = plan_rank(rank, _tracks(store, rank), _interval_stats(table),
                      _counter_stats(cframe), origin, top)
    names, bins = _interval_bins(table, infos, origin, top)
    del table
    counters = _counter_levels(cframe, infos, origin, top)
    return RankLevels(infos, names, bins, counters)


def _counter_levels(frame: pl.DataFrame | None, infos: list[TrackInfo], origin: int,
                    top: int) -> list[dict[str, np.ndarray[Any, Any]]]:
    """Per level: (id, bin, series, min, mean, max, count) of the rank's counter tracks."""
    import polars as pl

    from traceatlas.view.pyramid_aggregate import counter_tables

    by_track = {t.track_id: t for t in infos if t.series and t.track_id is not None}
    schema = {"id": pl.Int64, "lvl": pl.Int64, "bin": pl.Int64, "series": pl.Int32,
              "min": pl.Float64, "max": pl.Float64, "sum": pl.Float64, "count": pl.Int64}
    if frame is None or not by_track:
        rows = pl.DataFrame(schema=schema)
    else:
        series = pl.DataFrame(
            [(tid, s, i) for tid, t in by_track.items() for i, s in enumerate(t.series)],
            schema={"track_id": pl.Int32, "name": pl.String, "series": pl.Int32},
            orient="row")
        meta = pl.DataFrame([(tid, t.id, t.finest_level) for tid, t in by_track.items()],
                            schema={"track_id": pl.Int32, "id": pl.Int64, "lvl": pl.Int64},
                            orient="row")
        joined = frame.join(series, on=["track_id", "name"]).join(meta, on="track_id")
        rel = joined["ts_ns"].to_numpy().astype(np.int64) - origin
        shift = 10 + 2 * joined["lvl"].to_numpy().astype(np.int64)
        rows = joined.select(
            "id", "lvl", pl.Series("bin", rel >> shift), "series",
            pl.col("value").alias("min"), pl.col("value").alias("max"),
            pl.col("value").alias("sum"), pl.lit(1, pl.Int64).alias("count"))
    return [{c: t[c].to_numpy() for c in COUNTER_COLUMNS} for t in counter_tables(rows, top)]
