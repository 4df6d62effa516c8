"""Build a store's level-of-detail pyramid into a directory, one rank at a time.

Files written (see ``pyramid.py`` for the reading side):
``header.json`` (format, key, store path, origin/end ns, top level, build seconds, bytes),
``tracks.json`` (the ``TrackInfo`` list), ``names.json`` (name index -> text),
``bins-<L>.arrow`` / ``counters-<L>.arrow`` (uncompressed Arrow IPC, one record batch per
rank, rows sorted by (track id, bin)), ``loc.npy`` / ``cloc.npy`` (int64, shape
(levels, tracks, 3): batch, first row, end row of each track at each level).

Per rank, memory is that rank's intervals and counters; every step is vectorised
(numpy, Polars): the flattened timelines (``pyramid_bins``), the cut at each track's finest
level, then each coarser level from the one below (bin // 4) by a group-by.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from traceatlas.model.schema import CATEGORIES
from traceatlas.model.trace import scan_parts
from traceatlas.store.layout import part_path
from traceatlas.view import levels as lv
from traceatlas.view.pyramid_bins import (
    Columns,
    finest_level,
    level_bins,
    owned_pieces,
    shift_of,
    split_in_bins,
)
from traceatlas.view.pyramid_types import TrackInfo

if TYPE_CHECKING:
    import polars as pl

    from traceatlas.model.trace import Trace

FORMAT_VERSION = 1
Progress = Callable[[int, int], None]

BINS_SCHEMA = pa.schema([
    ("bin", pa.int64()), ("cat", pa.int8()), ("busy_ns", pa.int64()),
    ("count", pa.int64()), ("name", pa.int32()),
])
COUNTERS_SCHEMA = pa.schema([
    ("bin", pa.int64()), ("series", pa.int32()), ("min", pa.float64()),
    ("mean", pa.float64()), ("max", pa.float64()), ("count", pa.int64()),
])
DEVICE_KINDS = ("gpu_stream", "device")
HOST_KINDS = ("host_thread",)
_KIND_ORDER = {"gpu_stream": 1, "device": 1, "host_thread": 3, "other": 4, "counter": 5}
_OTHER = CATEGORIES.index("other")


def _track_stats(store: Path) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Tracks table; per (rank, track_id) interval stats; per (rank, track_id) counter stats."""
    import polars as pl

    tracks = scan_parts(store, "tracks").select(
        "rank", "track_id", pl.col("kind").cast(pl.String), "name", "device", "stream",
    ).collect()
    istats = scan_parts(store, "intervals").group_by("rank", "track_id").agg(
        n=pl.len(), first=pl.col("start_ns").min(), last=pl.col("end_ns").max(),
        depth=pl.col("depth").max(),
    ).collect()
    cstats = scan_parts(store, "counters").filter(pl.col("value").is_not_null()).group_by(
        "rank", "track_id").agg(
        n=pl.len(), first=pl.col("ts_ns").min(), last=pl.col("ts_ns").max() + 1,
        series=pl.col("name").cast(pl.String).unique().sort(),
    ).collect()
    return tracks, istats, cstats


def _extent(istats: pl.DataFrame, cstats: pl.DataFrame) -> tuple[int, int]:
    firsts = [int(f["first"].min()) for f in (istats, cstats) if f.height]  # type: ignore[arg-type]
    lasts = [int(f["last"].max()) for f in (istats, cstats) if f.height]  # type: ignore[arg-type]
    if not firsts:
        return 0, 0
    return min(firsts), max(lasts)


def _plan_tracks(ranks: list[int], tracks: pl.DataFrame, istats: pl.DataFrame,
                 cstats: pl.DataFrame, origin: int, top: int) -> list[TrackInfo]:
    """Every viewer track, ordered rank -> rank_device, devices/streams -> rank_host,
    host threads -> other -> counters; ``id`` is the list index."""
    import polars as pl

    key = ["rank", "track_id"]
    merged = tracks.join(istats, on=key, how="full", coalesce=True).join(
        cstats.rename({"n": "cn", "first": "cfirst", "last": "clast"}), on=key, how="full",
        coalesce=True)
    merged = merged.with_columns(
        pl.col("kind").fill_null("other"), pl.col("device").fill_null(-1),
        pl.col("stream").fill_null(-1), pl.col("n").fill_null(0), pl.col("cn").fill_null(0),
        pl.col("depth").fill_null(0),
    ).with_columns(
        pl.when(pl.col("n") == 0).then(pl.col("cn") > 0).otherwise(False).alias("is_counter"),
    )
    out: list[TrackInfo] = []
    by_rank = {int(r[0]): g for r, g in merged.partition_by("rank", as_dict=True).items()}
    for rank in ranks:
        group = by_rank.get(rank)
        if group is None:
            continue
        rows = group.to_dicts()

        def order(row: dict[str, Any]) -> tuple[int, int, int, int]:
            kind = "counter" if row["is_counter"] else row["kind"]
            return (_KIND_ORDER.get(kind, 4), row["device"], row["stream"], row["track_id"])

        rows.sort(key=order)
        for synthetic, kinds, label in (("rank_device", DEVICE_KINDS, "devices"),
                                         ("rank_host", HOST_KINDS, "host")):
            members = [r for r in rows if r["kind"] in kinds and not r["is_counter"]]
            if members:
                n = sum(r["n"] for r in members)
                fin = finest_level(n, min((r["first"] or 0) for r in members) - origin,
                                   max((r["last"] or 0) for r in members) - origin, top)
                insert = next(i for i, r in enumerate(rows) if r is members[0])
                rows.insert(insert, {"synthetic": synthetic, "kind": synthetic,
                                     "is_counter": False, "n": n, "fin": fin,
                                     "label": f"rank {rank} {label}",
                                     "depth": max(r["depth"] for r in members)})
        for row in rows:
            if "synthetic" in row:
                out.append(TrackInfo(len(out), rank, None, row["label"], row["synthetic"], -1,
                                     -1, row["n"], int(row["depth"]), row["fin"], []))
                continue
            if row["n"] > 0:
                fin = finest_level(row["n"], row["first"] - origin, row["last"] - origin, top)
            elif row["cn"] > 0:
                fin = finest_level(row["cn"], row["cfirst"] - origin, row["clast"] - origin, top)
            else:
                fin = top
            name = row["name"] if row["name"] is not None else f"track {row['track_id']}"
            kind = "counter" if row["is_counter"] and row["kind"] == "other" else row["kind"]
            out.append(TrackInfo(len(out), rank, int(row["track_id"]), str(name), str(kind),
                                 int(row["device"]), int(row["stream"]), int(row["n"]),
                                 int(row["depth"]), fin, list(row["series"] or [])))
    return out


class _Names:
    """Global name table: text -> index, grown rank by rank (a loop over DISTINCT names)."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.names: list[str] = []

    def codes(self, column: pl.Series) -> np.ndarray[Any, np.dtype[np.int64]]:
        import polars as pl

        uniq = column.unique().sort().to_list()  # sorted: the same indexes every build
        for text in uniq:
            if text not in self.index:
                self.index[text] = len(self.names)
                self.names.append(text)
        codes = column.replace_strict(uniq, [self.index[t] for t in uniq],
                                      return_dtype=pl.Int64)
        return codes.to_numpy()


def _interval_rows(frame: pl.DataFrame, timelines: list[tuple[int, pl.Series]],
                   fin: dict[int, int], names: _Names, origin: int) -> pl.DataFrame:
    """Rows (id, lvl, bin, cat, name, busy, count) of one rank's timelines at each one's
    finest level: busy pieces of the flattened timeline cut at bin edges, plus one count
    row per interval start."""
    import polars as pl

    start = frame["start_ns"].to_numpy().astype(np.int64) - origin
    end = frame["end_ns"].to_numpy().astype(np.int64) - origin
    cat = frame["category"].cast(pl.String).replace_strict(
        list(CATEGORIES), list(range(len(CATEGORIES))), default=_OTHER,
        return_dtype=pl.Int64).to_numpy()
    name = names.codes(frame["name"].cast(pl.String))
    pieces: list[tuple[np.ndarray[Any, Any], ...]] = []
    starts: list[tuple[np.ndarray[Any, Any], ...]] = []
    for vid, mask in timelines:
        rows = np.flatnonzero(mask.to_numpy())
        if len(rows) == 0:
            continue
        rows = rows[np.lexsort((-end[rows], start[rows]))]
        s, e = start[rows], end[rows]
        owner, a, b = owned_pieces(s, e)
        shift = shift_of(fin[vid])
        ids = np.full(len(a), vid, dtype=np.int64)
        pieces.append((ids, a, b, np.full(len(a), shift, dtype=np.int64),
                       cat[rows[owner]], name[rows[owner]]))
        starts.append((np.full(len(s), vid, dtype=np.int64), s >> shift, cat[rows], name[rows],
                       np.full(len(s), fin[vid], dtype=np.int64)))
    if not starts:
        return pl.DataFrame(schema={"id": pl.Int64, "lvl": pl.Int64, "bin": pl.Int64,
                                    "cat": pl.Int64, "name": pl.Int64, "busy": pl.Int64,
                                    "count": pl.Int64})
    ids, a, b, sh, pc, pn = (np.concatenate(x) for x in zip(*pieces, strict=True))
    idx, bins, busy = split_in_bins(a, b, sh)
    busy_rows = pl.DataFrame({"id": ids[idx], "lvl": (sh[idx] - 10) // 2, "bin": bins,
                              "cat": pc[idx], "name": pn[idx], "busy": busy,
                              "count": np.zeros(len(idx), dtype=np.int64)})
    sid, sbin, scat, sname, slvl = (np.concatenate(x) for x in zip(*starts, strict=True))
    count_rows = pl.DataFrame({"id": sid, "lvl": slvl, "bin": sbin, "cat": scat,
                               "name": sname, "busy": np.zeros(len(sid), dtype=np.int64),
                               "count": np.ones(len(sid), dtype=np.int64)})
    return pl.concat([busy_rows, count_rows])


def _level_tables(rows: pl.DataFrame, top: int, counters: bool) -> list[pl.DataFrame]:
    """Per level 0..top: the rows of the tracks whose finest level is <= L, aggregated at L
    (coarser levels from the level below: bin // 4). Sorted by (id, bin)."""
    import polars as pl

    if counters:
        keys = ["id", "bin", "series"]
        agg = [pl.col("min").min(), pl.col("max").max(), pl.col("sum").sum(),
               pl.col("count").sum()]
    else:
        keys = ["id", "bin", "cat", "name"]
        agg = [pl.col("busy").sum(), pl.col("count").sum()]
    out: list[pl.DataFrame] = []
    cur: pl.DataFrame | None = None
    for level in range(top + 1):
        new = rows.filter(pl.col("lvl") == level).drop("lvl")
        parts = [new] if cur is None else [new, cur.with_columns(pl.col("bin") // 4)]
        cur = pl.concat(parts).group_by(keys).agg(agg) if any(p.height for p in parts) \
            else new
        out.append(cur)
    return out


def _finish_bins(cur: pl.DataFrame) -> pl.DataFrame:
    import polars as pl

    return cur.sort(["id", "bin", "cat", "busy", "count", "name"],
                    descending=[False, False, False, True, True, False]).group_by(
        ["id", "bin", "cat"], maintain_order=True).agg(
        pl.col("busy").sum().alias("busy_ns"), pl.col("count").sum(), pl.col("name").first())


def _interval_levels(rows: pl.DataFrame, top: int) -> list[Columns]:
    """Per level, the finished interval bins of one rank (numpy; Polars when the packed
    keys would not fit in 62 bits)."""
    arrays = {c: rows[c].to_numpy().astype(np.int64) for c in
              ("id", "lvl", "bin", "cat", "name", "busy", "count")}
    fast = level_bins(arrays, top)
    if fast is not None:
        return fast
    return [{c: t[c].to_numpy().astype(np.int64) for c in t.columns}
            for t in map(_finish_bins, _level_tables(rows, top, counters=False))]


def _finish_counters(cur: pl.DataFrame) -> pl.DataFrame:
    import polars as pl

    return cur.sort(["id", "bin", "series"]).with_columns(
        mean=pl.col("sum") / pl.col("count"))


def _one_batch(table: pa.Table, schema: pa.Schema) -> pa.RecordBatch:
    """``table`` as exactly one record batch (empty included): batch index = rank ordinal."""
    batches = table.cast(schema).combine_chunks().to_batches()
    if not batches:
        return pa.RecordBatch.from_pylist([], schema=schema)
    if len(batches) == 1:
        return batches[0]
    return pa.concat_batches(batches)


def _locations(ids: np.ndarray[Any, Any], track_ids: list[int], batch: int,
               loc: np.ndarray[Any, Any], level: int) -> None:
    if not track_ids:
        return
    want = np.asarray(track_ids, dtype=np.int64)
    lo = np.searchsorted(ids, want, side="left")
    hi = np.searchsorted(ids, want, side="right")
    loc[level, want, 0] = batch
    loc[level, want, 1] = lo
    loc[level, want, 2] = hi


def _counter_rows(store: Path, rank: int, by_track: dict[int, TrackInfo],
                  origin: int) -> pl.DataFrame:
    import polars as pl

    schema = {"id": pl.Int64, "lvl": pl.Int64, "bin": pl.Int64, "series": pl.Int32,
              "min": pl.Float64, "max": pl.Float64, "sum": pl.Float64, "count": pl.Int64}
    path = part_path(store, "counters", rank)
    if not path.is_file() or not by_track:
        return pl.DataFrame(schema=schema)
    frame = pl.read_parquet(path, columns=["track_id", "ts_ns", "name", "value"]).filter(
        pl.col("value").is_not_null() & pl.col("track_id").is_in(list(by_track)))
    if frame.height == 0:
        return pl.DataFrame(schema=schema)
    series = pl.DataFrame(
        [(tid, s, i) for tid, t in by_track.items() for i, s in enumerate(t.series)],
        schema={"track_id": pl.Int32, "name": pl.String, "series": pl.Int32}, orient="row")
    meta = pl.DataFrame([(tid, t.id, t.finest_level) for tid, t in by_track.items()],
                        schema={"track_id": pl.Int32, "id": pl.Int64, "lvl": pl.Int64},
                        orient="row")
    frame = frame.with_columns(pl.col("name").cast(pl.String)).join(
        series, on=["track_id", "name"]).join(meta, on="track_id")
    rel = frame["ts_ns"].to_numpy().astype(np.int64) - origin
    shift = 10 + 2 * frame["lvl"].to_numpy().astype(np.int64)
    return frame.select(
        "id", "lvl", pl.Series("bin", rel >> shift), "series", pl.col("value").alias("min"),
        pl.col("value").alias("max"), pl.col("value").alias("sum"),
        pl.lit(1, pl.Int64).alias("count"),
    )


def _rank_intervals(store: Path, rank: int, infos: list[TrackInfo], names: _Names,
                    origin: int) -> pl.DataFrame:
    import polars as pl

    path = part_path(store, "intervals", rank)
    real = {t.track_id: t for t in infos if t.track_id is not None and t.events > 0}
    if not path.is_file() or not real:
        return _interval_rows(pl.DataFrame(), [], {}, names, origin)
    frame = pl.read_parquet(path, columns=["track_id", "start_ns", "end_ns", "name", "category"])
    tid = frame["track_id"]
    timelines: list[tuple[int, pl.Series]] = [(t.id, tid == t.track_id) for t in real.values()]
    fin = {t.id: t.finest_level for t in infos}
    for t in infos:
        if t.kind in ("rank_device", "rank_host"):
            kinds = DEVICE_KINDS if t.kind == "rank_device" else HOST_KINDS
            members = [r.track_id for r in infos if r.kind in kinds and r.track_id is not None]
            timelines.append((t.id, tid.is_in(members)))
    return _interval_rows(frame, timelines, fin, names, origin)


def build(trace: Trace, dest: Path, key: str, progress: Progress | None = None) -> None:
    """Write the pyramid of ``trace``'s store into the (new, empty) directory ``dest``."""
    t0 = time.perf_counter()
    store = trace.path
    ranks = sorted(int(r) for r in trace.manifest["ranks"])
    tracks, istats, cstats = _track_stats(store)
    origin, end = _extent(istats, cstats)
    top = lv.top_level(max(end - origin, 1))
    infos = _plan_tracks(ranks, tracks, istats, cstats, origin, top)
    names = _Names()
    n_levels = top + 1
    loc = np.zeros((n_levels, len(infos), 3), dtype=np.int64)
    cloc = np.zeros((n_levels, len(infos), 3), dtype=np.int64)
    bin_files = [pa.OSFile(str(dest / f"bins-{L}.arrow"), "wb") for L in range(n_levels)]
    cnt_files = [pa.OSFile(str(dest / f"counters-{L}.arrow"), "wb") for L in range(n_levels)]
    try:
        bw = [pa.ipc.new_file(f, BINS_SCHEMA) for f in bin_files]
        cw = [pa.ipc.new_file(f, COUNTERS_SCHEMA) for f in cnt_files]
        for batch, rank in enumerate(ranks):
            mine = [t for t in infos if t.rank == rank]
            rows = _rank_intervals(store, rank, mine, names, origin)
            by_track = {t.track_id: t for t in mine if t.series and t.track_id is not None}
            crows = _counter_rows(store, rank, by_track, origin)
            ids = [t.id for t in mine]
            for level, cols in enumerate(_interval_levels(rows, top)):
                _locations(cols["id"], ids, batch, loc, level)
                arrow = pa.table({c: cols[c] for c in BINS_SCHEMA.names})
                bw[level].write_batch(_one_batch(arrow, BINS_SCHEMA))
            for level, cur in enumerate(_level_tables(crows, top, counters=True)):
                table = _finish_counters(cur)
                _locations(table["id"].to_numpy(), ids, batch, cloc, level)
                arrow = table.select("bin", "series", "min", "mean", "max", "count").to_arrow()
                cw[level].write_batch(_one_batch(arrow, COUNTERS_SCHEMA))
            if progress is not None:
                progress(batch + 1, len(ranks))
        for w in (*bw, *cw):
            w.close()
    finally:
        for f in (*bin_files, *cnt_files):
            f.close()
    np.save(dest / "loc.npy", loc)
    np.save(dest / "cloc.npy", cloc)
    (dest / "tracks.json").write_text(json.dumps([asdict(t) for t in infos]), encoding="utf-8")
    (dest / "names.json").write_text(json.dumps(names.names), encoding="utf-8")
    size = sum(p.stat().st_size for p in dest.iterdir())
    header = {"format": FORMAT_VERSION, "key": key, "store": str(store.resolve()),
              "origin_ns": origin, "end_ns": end, "top": top, "ranks": ranks,
              "build_s": round(time.perf_counter() - t0, 3), "bytes": size}
    (dest / "header.json").write_text(json.dumps(header), encoding="utf-8")
