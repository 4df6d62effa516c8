"""Arrow event tables -> canonical tables per process (part of the nsys reader,
``nsys.py``; ``nsys_load.py`` reads the events).

Tracks are numbered per process by DuckDB over the Arrow tables, and the rows of all
processes sorted once by process, track and start (a stable numpy sort: ties keep the
order of reading); each process's rows are then one slice. Python runs only over
distinct names (NCCL collective, ProfilerStep), tracks and processes; depth and steps
are numpy. Times get ``base_ns`` added here. Tables come back without the ``rank``
column.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceatlas.errors import DataQualityWarning
from traceatlas.io import nsys_schema as ns
from traceatlas.io.nsys_adbc import text_equals
from traceatlas.io.nsys_load import COUNTER, DEVICE, HOST, PID_MASK, STREAM, Loaded
from traceatlas.model.categories import COMM_KERNEL_RE, STEP_RE
from traceatlas.ops.nesting import nesting_depth
from traceatlas.ops.steps import step_of_launch, step_of_time

_NCCL_OP = re.compile(r"^(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)
_NCCL_DTYPES = frozenset({
    "i8", "u8", "i32", "u32", "i64", "u64", "f16", "f32", "f64", "bf16", "f8e4m3",
    "f8e5m2", "int8_t", "uint8_t", "int32_t", "uint32_t", "int64_t", "uint64_t", "half",
    "float", "double", "__nv_bfloat16", "bfloat16",
})
_TRACK_KEY = ("t.proc = e.proc AND t.kind = e.kind AND t.tid = coalesce(e.tid, -1) "
              "AND t.device = coalesce(e.device, -1) AND t.stream = coalesce(e.stream, -1)")


def _warn(message: str) -> None:
    warnings.warn(message, DataQualityWarning, stacklevel=3)


def processes(loaded: Loaded) -> list[int]:
    """Process keys (``globalPid >> 24``) that have events, ascending."""
    procs = [pc.unique(t["proc"]).to_numpy(zero_copy_only=False)
             for t in (loaded.ev, loaded.mk, loaded.p2p)]  # hashing: no sort of every row
    return [int(p) for p in np.unique(np.concatenate(procs))]


def stream_owners(loaded: Loaded) -> dict[int, int]:
    """Device -> the first process (lowest key) with GPU stream activity on it."""
    ev = loaded.ev.select(["kind", "device", "proc"])
    ev = ev.filter(text_equals(ev["kind"], STREAM))
    owners = ev.group_by("device").aggregate([("proc", "min")])
    return {int(d): int(p) for d, p in zip(owners["device"].to_pylist(),
                                           owners["proc_min"].to_pylist(), strict=True)
            if d is not None}


def metric_devices(loaded: Loaded) -> list[int]:
    """Devices with GPU metrics, ascending."""
    return sorted({int(d) for d in pc.unique(loaded.gm["device"]).to_pylist() if d is not None})


@dataclass
class Sorted:
    """The events of every process, sorted: ``tracks`` (proc, kind, tid, device, stream,
    track_id) by process and track; ``ev`` the intervals (``EV`` columns) as read, with
    ``order`` (row numbers by process, track, start and end descending: the nesting
    order) and ``track`` (track id of each row as read); ``instants`` (marks + track_id)
    by process, track and time, ``gm`` by device, time and name, ``p2p`` by process and
    start. Ties keep the order of reading."""

    tracks: pa.Table
    ev: pa.Table
    order: np.ndarray[Any, np.dtype[np.int64]]
    track: np.ndarray[Any, np.dtype[np.int64]]
    procs: np.ndarray[Any, np.dtype[np.int64]]
    """Process of each row of ``order``."""
    instants: pa.Table
    gm: pa.Table
    p2p: pa.Table

    @staticmethod
    def rows_of(table: pa.Table, proc: int) -> pa.Table:
        """The rows of process ``proc`` of a table sorted by process."""
        procs = table["proc"].to_numpy()
        lo, hi = np.searchsorted(procs, [proc, proc + 1])
        return table.slice(int(lo), int(hi - lo))

    def interval_rows(self, proc: int) -> np.ndarray[Any, np.dtype[np.int64]]:
        """Row numbers (into ``ev``) of process ``proc``'s intervals, in nesting order."""
        lo, hi = np.searchsorted(self.procs, [proc, proc + 1])
        return self.order[int(lo):int(hi)]


def _with_rid(table: pa.Table, columns: tuple[str, ...]) -> pa.Table:
    return pa.table({**{c: table[c] for c in columns},
                     "rid": pa.array(np.arange(table.num_rows, dtype=np.int64))})


_TAKE_COMBINED_MAX = (1 << 31) - (1 << 24)
"""Byte size up to which a column is made one chunk before ``take`` (much faster than a
take over chunks; string offsets are 32-bit)."""


def _take(column: pa.ChunkedArray, rows: pa.Array) -> pa.ChunkedArray | pa.Array:
    """``column[rows]``, one array unless the column is too large to be one."""
    if column.num_chunks == 1:  # a chunked take of one chunk copies it whole first
        return column.chunk(0).take(rows)
    if column.nbytes < _TAKE_COMBINED_MAX:
        return column.combine_chunks().take(rows)
    return column.take(rows)


def _taken(con: duckdb.DuckDBPyConnection, table: pa.Table, sql: str) -> pa.Table:
    """``table`` in the row order of ``sql`` (rid, and track_id when selected)."""
    order = con.sql(sql).to_arrow_table()
    rows = order["rid"].combine_chunks()
    out = pa.Table.from_arrays([_take(c, rows) for c in table.columns], schema=table.schema)
    if "track_id" in order.column_names:
        out = out.append_column("track_id", order["track_id"].cast(pa.int64()))
    return out


def _interval_order(ev: pa.Table, track: np.ndarray[Any, np.dtype[np.int64]]
                    ) -> np.ndarray[Any, np.dtype[np.int64]]:
    """Rows of ``ev`` by process, track, start and end descending, ties in the order
    read (the sort is stable); ``track``: the track id of every row."""
    order = np.lexsort((-ev["end"].to_numpy(), ev["start"].to_numpy(), track,
                        ev["proc"].to_numpy()))
    return order.astype(np.int64, copy=False)


def _tracks_sql(con: duckdb.DuckDBPyConnection, ev: pa.Table) -> tuple[
        pa.Table, np.ndarray[Any, np.dtype[np.int64]]]:
    """(tracks, track id of every row of ``ev``) by DuckDB over the registered ``ev`` and
    ``mk`` (the general path, and the oracle of ``track_numbers``)."""
    con.execute(f"""
        CREATE TABLE trk AS
        SELECT proc, kind, tid, device, stream,
               row_number() OVER (PARTITION BY proc ORDER BY
                 CASE kind WHEN '{HOST}' THEN 0 WHEN '{STREAM}' THEN 1 ELSE 2 END,
                 device, stream, tid) - 1 AS track_id
        FROM (SELECT proc, kind, coalesce(tid, -1) AS tid, coalesce(device, -1) AS device,
                     coalesce(stream, -1) AS stream FROM ev
              UNION SELECT proc, '{HOST}', tid, -1, -1 FROM mk)
    """)
    pairs = con.sql(f"SELECT e.rid, t.track_id FROM ev AS e JOIN trk AS t ON {_TRACK_KEY}"
                    ).to_arrow_table()
    track = np.full(ev.num_rows, -1, dtype=np.int64)
    track[pairs["rid"].to_numpy()] = pairs["track_id"].to_numpy()
    tracks = con.sql("SELECT * FROM trk ORDER BY proc, track_id").to_arrow_table()
    return tracks, track


_KEY_LIMIT = 1 << 62


def _codes(values: pa.Array) -> tuple[np.ndarray[Any, np.dtype[np.int64]], list[Any]]:
    """(code of every value, the distinct values by code) by hashing."""
    encoded = pc.dictionary_encode(values)
    return (encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64),
            encoded.dictionary.to_pylist())


def track_numbers(ev: pa.Table, mk: pa.Table) -> tuple[
        pa.Table, np.ndarray[Any, np.dtype[np.int64]]] | None:
    """What ``_tracks_sql`` gives (tracks by process and track id; track id of every row
    of ``ev``), by hashing the track columns in Arrow and numbering the distinct tracks
    in Python; None when a value it does not handle is there (a null process, kind or
    mark thread, a kind spelt twice in the dictionary, too many distinct values)."""
    kind = ev["kind"].combine_chunks()
    if ev["proc"].null_count or kind.null_count or mk["proc"].null_count \
            or mk["tid"].null_count:
        return None
    texts = [str(t) for t in kind.dictionary.to_pylist()] \
        if pa.types.is_dictionary(kind.type) else None
    if texts is None or len(set(texts)) != len(texts) or HOST not in texts:
        return None
    host = texts.index(HOST)
    n_ev, n_mk = ev.num_rows, mk.num_rows

    def column(name: str, marks: pa.ChunkedArray | None) -> pa.Array:
        values = pc.fill_null(ev[name], -1).combine_chunks().cast(pa.int64())
        extra = marks.combine_chunks().cast(pa.int64()) if marks is not None \
            else pa.array(np.full(n_mk, -1, dtype=np.int64))
        return pa.concat_arrays([values, extra])

    parts = [_codes(column("proc", mk["proc"])),
             (np.concatenate([kind.indices.to_numpy(zero_copy_only=False).astype(np.int64),
                              np.full(n_mk, host, dtype=np.int64)]), texts),
             _codes(column("tid", mk["tid"])), _codes(column("device", None)),
             _codes(column("stream", None))]
    size = 1
    for _codes_of, values in parts:
        size *= max(1, len(values))
    if size >= _KEY_LIMIT:
        return None
    key = np.zeros(n_ev + n_mk, dtype=np.int64)
    for codes, values in parts:
        key = key * max(1, len(values)) + codes
    row_code, distinct = _codes(pa.array(key))
    tuples = []
    for packed in distinct:
        fields = []
        for _codes_of, values in reversed(parts):
            packed, code = divmod(int(packed), max(1, len(values)))
            fields.append(values[code])
        stream, device, tid, kind_text, proc = fields
        order = 0 if kind_text == HOST else 1 if kind_text == STREAM else 2
        tuples.append((proc, order, device, stream, tid, kind_text))
    number = np.zeros(len(tuples), dtype=np.int64)
    rows: list[tuple[int, str, int, int, int, int]] = []
    last, at = None, 0
    for i in sorted(range(len(tuples)), key=lambda i: tuples[i][:5]):
        proc, _order, device, stream, tid, kind_text = tuples[i]
        at = at + 1 if proc == last else 0
        last = proc
        number[i] = at
        rows.append((proc, kind_text, tid, device, stream, at))
    columns = list(zip(*rows, strict=True)) if rows else [()] * 6
    tracks = pa.table({
        "proc": pa.array(columns[0], pa.int64()), "kind": pa.array(columns[1], pa.string()),
        "tid": pa.array(columns[2], pa.int64()), "device": pa.array(columns[3], pa.int64()),
        "stream": pa.array(columns[4], pa.int64()),
        "track_id": pa.array(columns[5], pa.int64()),
    })
    return tracks, number[row_code[:n_ev]]


def sort_events(loaded: Loaded, threads: int = 1) -> Sorted:
    """Number the tracks of every process (host threads by tid, then GPU streams and sync
    rows by device and stream) and sort every table for ``build_process``."""
    con = duckdb.connect(":memory:", config={"threads": max(1, threads)})
    ev = loaded.ev.unify_dictionaries()
    mk = loaded.mk.unify_dictionaries()
    # one chunk per column (one gather per column later): copied by Arrow without the
    # GIL, in a thread while the tracks are numbered and the rows ordered
    pool = ThreadPoolExecutor(max_workers=1) if threads > 1 else None
    combined = pool.submit(ev.combine_chunks) if pool is not None else None
    try:
        con.register("ev", _with_rid(ev, ("proc", "kind", "tid", "device", "stream", "start",
                                          "end")))
        con.register("mk", _with_rid(mk, ("proc", "tid", "ts")))
        con.register("gm", _with_rid(loaded.gm, ("ts", "device", "name")))
        con.register("p2p", _with_rid(loaded.p2p, ("proc", "start")))
        numbered = track_numbers(ev, mk)
        if numbered is None:
            tracks, track = _tracks_sql(con, ev)
        else:
            tracks, track = numbered
            con.register("trk", tracks)
        order = _interval_order(ev, track)
        procs = ev["proc"].to_numpy()[order]
        ev = combined.result() if combined is not None else ev.combine_chunks()
        return Sorted(
            tracks=tracks,
            ev=ev, order=order, track=track, procs=procs,
            instants=_taken(con, mk, f"""
                SELECT m.rid, t.track_id FROM mk AS m JOIN trk AS t
                  ON t.proc = m.proc AND t.kind = '{HOST}' AND t.tid = m.tid
                ORDER BY m.proc, t.track_id, m.ts NULLS FIRST, m.rid"""),
            gm=_taken(con, loaded.gm, "SELECT rid FROM gm ORDER BY device NULLS FIRST, "
                                      "ts NULLS FIRST, name, rid"),
            p2p=_taken(con, loaded.p2p, "SELECT rid FROM p2p ORDER BY proc, start NULLS FIRST, "
                                        "rid"),
        )
    finally:
        con.close()
        if pool is not None:
            pool.shutdown(wait=True)


@dataclass
class ProcessInfo:
    """What the tracks of one process are named after."""

    proc: int
    host: str | None
    thread_names: dict[int, str]
    metric_devices: list[int]


def build_process(events: Sorted, info: ProcessInfo, base_ns: int) -> dict[str, pa.Table]:
    """Tracks, intervals, instants and counters of one process (times + ``base_ns``)."""
    tracks = _tracks(events.rows_of(events.tracks, info.proc), info)
    intervals = _intervals(events, events.interval_rows(info.proc), base_ns)
    instants = _instants(events.rows_of(events.instants, info.proc), base_ns)
    counters, counter_tracks = _counters(events.gm, info, base_ns, tracks.num_rows)
    if counter_tracks is not None:
        tracks = pa.concat_tables([tracks, counter_tracks])
    return {"tracks": tracks, "intervals": intervals, "instants": instants,
            "counters": counters}


def _plus(values: pa.ChunkedArray, base_ns: int) -> pa.ChunkedArray:
    """``values + base_ns`` (int64 ns; nulls stay null)."""
    return pc.add(values, pa.scalar(base_ns, pa.int64()))


def _tracks(trk: pa.Table, info: ProcessInfo) -> pa.Table:
    rows = list(zip(*(trk[c].to_pylist() for c in ("track_id", "kind", "tid", "device",
                                                    "stream")), strict=True))
    pid = info.proc & PID_MASK if info.proc >= 0 else None
    names: list[str] = []
    for _track, kind, tid, device, stream in rows:
        if kind == HOST:
            names.append(info.thread_names.get(tid) or f"thread {tid}")
        else:
            names.append(f"GPU {device} stream {stream}" + (" sync" if kind == DEVICE else ""))
    n = len(rows)
    kinds = [r[1] for r in rows]
    return pa.table({
        "track_id": pa.array([r[0] for r in rows], pa.int32()),
        "kind": pa.array(kinds, pa.string()),
        "name": pa.array(names, pa.string()),
        "host": pa.array([info.host] * n, pa.string()),
        "pid": pa.array([pid] * n, pa.int64()),
        "tid": pa.array([r[2] if k == HOST else r[4] for r, k in zip(rows, kinds, strict=True)],
                        pa.int64()),
        "device": pa.array([-1 if k == HOST else r[3] for r, k in zip(rows, kinds, strict=True)],
                           pa.int32()),
        "stream": pa.array([-1 if k == HOST else r[4] for r, k in zip(rows, kinds, strict=True)],
                           pa.int64()),
        "source_pid": pa.array([str(info.proc << 24)] * n, pa.string()),
        "source_tid": pa.array([str((info.proc << 24) | r[2]) if k == HOST else None
                                for r, k in zip(rows, kinds, strict=True)], pa.string()),
    })


def _intervals(events: Sorted, nesting: np.ndarray[Any, np.dtype[np.int64]],
               base_ns: int) -> pa.Table:
    """One process's intervals (``nesting``: its rows of ``events.ev`` in nesting order).

    Depth, steps and the order of first use of names are computed in nesting order (as
    the rows read); the rows come back by start, then track (stable: the order the store
    writes, so the writer need not sort them again), each column gathered once.
    """
    ev = events.ev
    rows = pa.array(nesting)
    track = events.track[nesting]
    start = ev["start"].to_numpy()[nesting] + base_ns
    end = ev["end"].to_numpy()[nesting] + base_ns
    device_row = pc.not_equal(_take(ev["kind"], rows), HOST)
    on_device = device_row.to_numpy(zero_copy_only=False).astype(bool)
    name = _first_seen(_one(_take(ev["name"], rows)))
    category = _refine_categories(name, _one(_take(ev["category"], rows)))
    correlation = _one(_take(ev["correlation"], rows))
    # the rows are in sort_for_nesting order (sort_events sorts them so, stably)
    depth = nesting_depth(track, start, end, on_device)
    steps = _steps(name, category, correlation, start, end, on_device)
    final = np.lexsort((track, start))  # stable: by start, then track
    out_rows = pa.array(nesting[final])
    at = pa.array(final)
    device_row = device_row.take(at)
    name = name.take(at)
    category = category.take(at)
    collective = _per_name(name, lambda n: _nccl_parts(n)[0], "ccl")
    dtype = _per_name(name, lambda n: _nccl_parts(n)[1], "ccl")
    is_comm = pc.equal(category, "comm_kernel")
    start, end = start[final], end[final]
    grid = [_take(ev[c], out_rows) for c in _GRID_COLUMNS]
    return pa.table({
        "track_id": pa.array(track[final], pa.int32()),
        "start_ns": pa.array(start, pa.int64()),
        "end_ns": pa.array(end, pa.int64()),
        "dur_ns": pa.array(end - start, pa.int64()),
        "name": name,
        "category": _encoded(category),
        "source_category": _encoded(_one(_take(ev["source_category"], out_rows))),
        "correlation": correlation.take(at),
        "bytes": _one(_take(ev["bytes"], out_rows)),
        "device": pc.if_else(device_row, _take(ev["device"], out_rows), None)
        .cast(pa.int32()),
        "stream": pc.if_else(device_row, _take(ev["stream"], out_rows), None),
        "collective": pc.if_else(is_comm, collective, pa.scalar(None, pa.string())),
        "dtype": pc.if_else(is_comm, dtype, pa.scalar(None, pa.string())),
        "grid": _triples(*grid[:3]),
        "block": _triples(*grid[3:]),
        "memcpy_kind": _text(_take(ev["memcpy_kind"], out_rows)),
        "args": _one(_take(ev["args"], out_rows)),
        "depth": pa.array(depth[final], pa.int32()),
        "step": pa.array(steps[final], pa.int32()),
    })


_GRID_COLUMNS = ("gx", "gy", "gz", "bx", "by", "bz")


def _one(values: pa.ChunkedArray | pa.Array) -> pa.Array:
    """``values`` as one array (a single chunk as it is: ``combine_chunks`` copies it)."""
    if isinstance(values, pa.ChunkedArray):
        return values.chunk(0) if values.num_chunks == 1 else values.combine_chunks()
    return values


def _text(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """A (dictionary) text column as one plain string array."""
    return _one(column.cast(pa.string()))


def _encoded(values: pa.Array) -> pa.Array:
    """A text column as the store's ``conform`` would cast it (``dictionary_encode``:
    dictionary in order of first use), from the dictionary when ``values`` has one and
    no nulls (no text per row is made or hashed)."""
    if pa.types.is_dictionary(values.type) and not values.null_count \
            and not values.dictionary.null_count \
            and len(pc.unique(values.dictionary)) == len(values.dictionary):
        return _first_seen(values)
    return pc.dictionary_encode(_text(values))


def _first_seen(values: pa.DictionaryArray) -> pa.DictionaryArray:
    """``values`` (no nulls, a dictionary without repeats) re-encoded as
    ``pc.dictionary_encode`` of its text would: dictionary in order of first use."""
    if len(values) == 0:
        return pc.dictionary_encode(values.cast(pa.string()))
    indices = values.indices.to_numpy()
    codes = pc.unique(values.indices).to_numpy()  # in order of first use (hashing, no sort)
    remap = np.zeros(len(values.dictionary), dtype=np.int32)
    remap[codes] = np.arange(len(codes), dtype=np.int32)
    return pa.DictionaryArray.from_arrays(pa.array(remap[indices], pa.int32()),
                                          values.dictionary.take(pa.array(codes)))


def _per_name(name: pa.DictionaryArray, fn: Callable[[str], Any], needle: str,
              default: Any = None, *, ignore_case: bool = True) -> pa.Array:
    """``fn`` once per distinct name, expanded to every row. Only names holding the
    substring ``needle`` (ASCII case ignored unless told) are passed to ``fn``: the
    others get ``default``, which must be what ``fn`` gives for them."""
    texts = name.dictionary
    hits: np.ndarray[Any, np.dtype[np.intp]] = np.flatnonzero(
        pc.match_substring(texts, needle, ignore_case=ignore_case)
        .to_numpy(zero_copy_only=False)) if len(texts) else np.zeros(0, dtype=np.intp)
    found = [fn(n) for n in texts.take(pa.array(hits, pa.int64())).to_pylist()]
    listed: list[Any] = [default] * len(texts)
    for i, value in zip(hits, found, strict=True):
        listed[int(i)] = value
    values = pa.array(listed)
    if len(values) == 0:
        return pa.nulls(len(name), pa.string())
    return pc.take(values, name.indices)


def _refine_categories(name: pa.DictionaryArray, category: pa.Array) -> pa.Array:
    """``kernel`` -> ``comm_kernel`` for NCCL/RCCL names; ``nvtx`` -> ``step`` for
    ``ProfilerStep#N`` ranges (as the Kineto reader does). A dictionary ``category``
    (without nulls) comes back as one, its text per row as the string path gives."""
    # every match of COMM_KERNEL_RE (nccl|rccl, case ignored) holds "ccl", and every
    # match of STEP_RE starts with "ProfilerStep"
    comm = _per_name(name, lambda n: bool(COMM_KERNEL_RE.search(n)), "ccl", False)
    step = _per_name(name, lambda n: bool(STEP_RE.match(n)), "ProfilerStep", False,
                     ignore_case=False)
    if pa.types.is_dictionary(category.type) and not category.null_count:
        texts = [str(t) for t in category.dictionary.to_pylist()]
        if len(set(texts)) == len(texts):
            texts += [t for t in ("comm_kernel", "step") if t not in texts]
            code = {t: i for i, t in enumerate(texts)}
            idx = category.indices.to_numpy().astype(np.int32)
            comm_rows = comm.to_numpy(zero_copy_only=False).astype(bool) \
                & (idx == code.get("kernel", -1))
            step_rows = step.to_numpy(zero_copy_only=False).astype(bool) \
                & (idx == code.get("nvtx", -1))
            idx = np.where(comm_rows, code["comm_kernel"],
                           np.where(step_rows, code["step"], idx)).astype(np.int32)
            return pa.DictionaryArray.from_arrays(pa.array(idx), pa.array(texts, pa.string()))
        category = _text(category)
    comm = pc.and_(pc.equal(category, "kernel"), pc.cast(comm, pa.bool_()))
    step = pc.and_(pc.equal(category, "nvtx"), pc.cast(step, pa.bool_()))
    return pc.if_else(comm, "comm_kernel", pc.if_else(step, "step", category))


def _nccl_parts(name: str) -> tuple[str | None, str | None]:
    """(collective, dtype) of an NCCL kernel name: ``ncclDevKernel_AllReduce_Sum_f32_RING_LL``
    -> (allreduce, f32); ``ncclKernel_AllReduce_RING_LL_Sum_float`` -> (allreduce, float);
    ``ncclDevKernel_Generic`` -> (None, None)."""
    match = _NCCL_OP.match(name)
    if not match or match.group(1).lower() == "generic":
        return None, None
    tokens = re.split(r"[_(]", name.split("(", 1)[0])
    dtype = next((t for t in tokens if t in _NCCL_DTYPES), None)
    return match.group(1).lower(), dtype


def _triples(x: pa.ChunkedArray, y: pa.ChunkedArray, z: pa.ChunkedArray) -> pa.Array:
    """[x, y, z] lists; null where x is null (null y or z read 0)."""
    n = len(x)
    valid = pc.is_valid(x).to_numpy(zero_copy_only=False)
    flat = np.column_stack([
        pc.fill_null(c, 0).to_numpy().astype(np.int64) for c in (x, y, z)
    ]).reshape(-1) if n else np.zeros(0, dtype=np.int64)
    offsets = pa.array(np.arange(0, 3 * n + 1, 3, dtype=np.int32))
    lists = pa.ListArray.from_arrays(offsets, pa.array(flat, pa.int32()),
                                     mask=pa.array(~valid))
    return lists


def _steps(name: pa.DictionaryArray, category: pa.Array, correlation: pa.Array,
           start: np.ndarray[Any, np.dtype[np.int64]],
           end: np.ndarray[Any, np.dtype[np.int64]],
           device: np.ndarray[Any, np.dtype[np.bool_]]) -> np.ndarray[Any, np.dtype[np.int64]]:
    """Host rows: the ProfilerStep range holding their start; device rows: the step of
    the runtime call with the same correlation id (the first in row order when
    repeated); -1 without ProfilerStep ranges. Times in ns."""
    is_step = pc.equal(category, "step")
    if not pc.any(is_step).as_py():
        return np.full(len(start), -1, dtype=np.int64)
    names = pc.filter(name, is_step).cast(pa.string()).to_pylist()
    numbers = np.array([int(STEP_RE.match(n).group(1)) for n in names],  # type: ignore[union-attr]
                       dtype=np.int64)
    mask = is_step.to_numpy(zero_copy_only=False).astype(bool)
    steps = step_of_time(start, start[mask], end[mask], numbers)
    has_corr = pc.is_valid(correlation).to_numpy(zero_copy_only=False)
    corr = pc.fill_null(correlation, 0).to_numpy()
    launch = ~device & has_corr
    steps[device] = step_of_launch(corr[device], has_corr[device], corr[launch], steps[launch])
    return steps


def _instants(rows: pa.Table, base_ns: int) -> pa.Table:
    n = rows.num_rows
    return pa.table({
        "track_id": rows["track_id"].cast(pa.int32()).combine_chunks(),
        "ts_ns": _plus(rows["ts"], base_ns).combine_chunks(),
        "name": _text(rows["name"]),
        "category": pa.array(["nvtx"] * n, pa.string()),
        "source_category": pa.array([ns.NVTX.name] * n, pa.string()),
        "phase": pa.nulls(n, pa.string()),
        "scope": pa.array(["t"] * n, pa.string()),
        "args": rows["args"].combine_chunks(),
    })


def _counters(gm: pa.Table, info: ProcessInfo, base_ns: int,
              first_track: int) -> tuple[pa.Table, pa.Table | None]:
    """GPU metrics of the devices this process owns, one counter track per device."""
    ids = {device: first_track + i for i, device in enumerate(info.metric_devices)}
    empty = pa.table({"track_id": pa.array([], pa.int32()), "ts_ns": pa.array([], pa.int64()),
                      "name": pa.array([], pa.string()), "value": pa.array([], pa.float64())})
    if not ids:
        return empty, None
    rows = gm.filter(pc.is_in(gm["device"], pa.array(list(ids), pa.int64())))
    counters = pa.table({
        "track_id": pa.array([ids[d] for d in rows["device"].to_pylist()], pa.int32()),
        "ts_ns": _plus(rows["ts"], base_ns).combine_chunks(),
        "name": rows["name"].combine_chunks(),
        "value": rows["value"].combine_chunks(),
    })
    n = len(ids)
    pid = info.proc & PID_MASK if info.proc >= 0 else None
    tracks = pa.table({
        "track_id": pa.array(list(ids.values()), pa.int32()),
        "kind": pa.array([COUNTER] * n, pa.string()),
        "name": pa.array([f"GPU {d} metrics" for d in ids], pa.string()),
        "host": pa.array([info.host] * n, pa.string()),
        "pid": pa.array([pid] * n, pa.int64()),
        "tid": pa.nulls(n, pa.int64()),
        "device": pa.array(list(ids), pa.int32()),
        "stream": pa.array([-1] * n, pa.int64()),
        "source_pid": pa.nulls(n, pa.string()),
        "source_tid": pa.nulls(n, pa.string()),
    })
    return counters, tracks


def messages(events: Sorted, proc: int, rank: int | None, base_ns: int,
             display: str) -> pa.Table:
    """MPI point-to-point calls of one process as messages, local side only: a send
    fills send_start/end (dst = remoteRank), a receive recv_start/end (src = remoteRank);
    the remote side's times are null. ``MPI_Sendrecv*`` counts as a send."""
    p2p = events.rows_of(events.p2p, proc)
    starts, ends = (_plus(p2p[c], base_ns).to_pylist() for c in ("start", "end"))
    rows = zip(starts, ends, *(p2p[c].to_pylist() for c in ("name", "remote", "bytes", "tag",
                                                         "comm")), strict=True)
    out: dict[str, list[Any]] = {k: [] for k in (
        "src_rank", "dst_rank", "send_start_ns", "send_end_ns", "recv_start_ns",
        "recv_end_ns", "bytes", "tag", "communicator")}
    skipped = 0
    for start, end, name, remote, size, tag, comm in rows:
        lower = (name or "").lower()
        is_send, is_recv = "send" in lower, "recv" in lower and "send" not in lower
        if rank is None or remote is None or remote < 0 or not (is_send or is_recv):
            skipped += is_send or is_recv
            continue
        side = (start, end, None, None) if is_send else (None, None, start, end)
        for key, value in zip(
            ("src_rank", "dst_rank", "send_start_ns", "send_end_ns", "recv_start_ns",
             "recv_end_ns", "bytes", "tag", "communicator"),
            ((rank, remote) if is_send else (remote, rank)) + side + (size, tag, comm),
            strict=True,
        ):
            out[key].append(value)
    if skipped:
        why = "the process has no MPI rank" if rank is None else "no valid remote rank"
        _warn(f"{display}: {skipped} MPI point-to-point call(s) not turned into messages "
              f"({why}); they stay in intervals")
    types = {"src_rank": pa.int32(), "dst_rank": pa.int32(), "bytes": pa.int64(),
             "tag": pa.int64(), "communicator": pa.string()}
    return pa.table({k: pa.array(v, types.get(k, pa.int64())) for k, v in out.items()})
