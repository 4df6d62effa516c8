"""Kineto events (DuckDB temp table ``ev``, one row per JSON event) -> canonical tables.

Part of the Kineto reader (``kineto.py``). Splitting by phase, category mapping, joins and
sorting run as DuckDB SQL (parallel, columnar); depth and steps are numpy. No Python loop
runs over events, only over tracks and metadata events.
Tables come back without the ``rank`` column: ingest adds it once the rank is known.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceatlas.errors import DataQualityWarning
from traceatlas.io import kineto_memory
from traceatlas.model.categories import (
    COMM_KERNEL_RE,
    KINETO_CATEGORIES,
    MTIA_DEVICE_CATEGORY,
    MTIA_DIRECTIONS,
    STEP_RE,
    category_from_process_name,
    mtia_category,
)
from traceatlas.model.schema import DEVICE_CATEGORIES, empty_table
from traceatlas.ops.nesting import nesting_depth, sort_for_nesting
from traceatlas.ops.steps import step_of_launch, step_of_time

DEVICE_SOURCE_CATEGORIES = frozenset({MTIA_DEVICE_CATEGORY})
_ACCELERATOR_LABEL = re.compile(r"^(GPU|MTIA|XPU|HPU|TPU|NPU)\b", re.IGNORECASE)
_VIRTUAL_ROW = 1_000_000
_HOST_CATEGORIES = ("cpu_op", "annotation", "runtime", "driver", "python", "step")
_ON_TRACK = "ev.pid = trk.pid AND ev.tid = trk.tid"


def build_tables(
    con: duckdb.DuckDBPyConnection, complete: pa.Table, rest: pa.Table, display: str
) -> dict[str, pa.Table]:
    """Tracks, intervals, instants, counters, flows (and empty messages); ``[memory]``
    instants also become memory counter tracks (``kineto_memory``).

    ``complete`` holds the complete events (ph X with ts and dur), ``rest`` all others.
    """
    _warn_quality(complete, rest, display)
    con.register("ev", rest)
    names = _track_names(con)
    unnamed = complete["name"].null_count
    if unnamed:
        _warn(f"{display}: {unnamed} complete event(s) without a name; kept with name ''")
    complete = complete.set_column(
        complete.schema.get_field_index("name"), "name",
        pc.dictionary_encode(pc.fill_null(complete["name"], "")),
    )
    complete = _mtia_args(con, complete)
    category = _categories(complete, names["process"])
    n_inferred = pc.sum(pc.and_(pc.is_null(complete["cat"]),
                                pc.not_equal(category, "other"))).as_py() or 0
    if n_inferred:
        _warn(f"{display}: {n_inferred} event(s) without 'cat'; category inferred from "
              "process names (rocprof style)")
    xv = complete.append_column("category", category)
    del complete
    con.register("xv", xv)
    tracks, track_map = _tracks(con, names)
    con.unregister("xv")
    con.register("trk", track_map)
    mem_tracks, mem_counters = kineto_memory.memory_counters(
        con, rest, tracks.num_rows, display)
    return {
        "tracks": pa.concat_tables([tracks, mem_tracks]),
        "intervals": _intervals(xv, track_map),
        "instants": _instants(con),
        "counters": pa.concat_tables([_counters(con, display), mem_counters]),
        "flows": _flows(con),
        "messages": empty_table("messages").drop_columns(["rank"]),
    }


def _lookup(values: Any, mapping: dict[str, str], default: str) -> Any:
    """Map string ``values`` through ``mapping`` (vectorised); unknown or null -> default."""
    keys = pa.array(list(mapping), pa.string())
    targets = pa.array([*mapping.values(), default], pa.string())
    index = pc.fill_null(pc.index_in(values, value_set=keys), len(mapping))
    return pc.take(targets, index)


def _categories(complete: pa.Table, process: dict[Any, str]) -> Any:
    """Canonical category per complete event: Kineto ``cat`` mapping, process-name
    inference for events without ``cat``, then the comm-kernel and ProfilerStep rules."""
    base = _lookup(complete["cat"], KINETO_CATEGORIES, "other")
    inferred = {pid: category_from_process_name(name) for pid, name in process.items()}
    by_pid = {pid: cat for pid, cat in inferred.items() if cat is not None and pid is not None}
    if by_pid:
        base = pc.if_else(pc.is_null(complete["cat"]),
                          _lookup(complete["pid"], by_pid, "other"), base)
    name = complete["name"]  # dictionary-encoded: regexes run once per distinct name
    comm = pc.and_(pc.equal(base, "kernel"), _per_name(
        name, lambda names: pc.match_substring_regex(
            names, COMM_KERNEL_RE.pattern, ignore_case=True)))
    step = pc.and_(pc.is_in(base, value_set=pa.array(["annotation", "cpu_op"])),
                   _per_name(name, lambda names: pc.match_substring_regex(
                       names, STEP_RE.pattern)))
    category = pc.if_else(pc.fill_null(comm, False), "comm_kernel",
                          pc.if_else(pc.fill_null(step, False), "step", base))
    if "mtia_direction" in complete.column_names:  # MTIA device events: by their fields
        mtia = pc.if_else(pc.is_valid(complete["mtia_direction"]), "memcpy", _per_name(
            name, lambda names: pa.array([mtia_category(n) for n in names.to_pylist()],
                                         pa.string())))
        category = pc.if_else(pc.fill_null(
            pc.equal(complete["cat"], MTIA_DEVICE_CATEGORY), False), mtia, category)
    return category


def _mtia_args(con: duckdb.DuckDBPyConnection, complete: pa.Table) -> pa.Table:
    """With MTIA device events present, add ``mtia_direction`` (a DMA request's
    ``args.direction``) and ``mtia_size`` (its ``args.size``, bytes) to ``complete``:
    parsed from the args text of those events only (DuckDB JSON), null elsewhere."""
    mask = pc.fill_null(pc.equal(complete["cat"], MTIA_DEVICE_CATEGORY), False)
    if not pc.any(mask).as_py():
        return complete
    mask = mask.combine_chunks() if isinstance(mask, pa.ChunkedArray) else mask
    con.register("mtia_ev", pa.table({"args": pc.filter(complete["args"], mask)}))
    got = con.sql(
        "SELECT json_extract_string(args, '$.direction') AS direction, "
        "TRY_CAST(json_extract(args, '$.size') AS BIGINT) AS size "
        "FROM (SELECT row_number() OVER () AS i, args FROM mtia_ev) ORDER BY i"
    ).to_arrow_table()
    con.unregister("mtia_ev")
    n = complete.num_rows
    for column, values, kind in (("mtia_direction", got["direction"], pa.string()),
                                 ("mtia_size", got["size"], pa.int64())):
        full = pc.replace_with_mask(pa.nulls(n, kind), mask,
                                    values.combine_chunks().cast(kind))
        complete = complete.append_column(column, full)
    return complete


def _per_name(name: Any, fn: Callable[[pa.Array], pa.Array]) -> Any:
    """Apply ``fn`` to the distinct values of a dictionary column, then expand per row."""
    return pa.chunked_array(
        [pc.take(fn(chunk.dictionary), chunk.indices) for chunk in name.chunks],
        type=fn(pa.array([], pa.string())).type,
    )


def metadata_events(con: duckdb.DuckDBPyConnection) -> str:
    """Every Chrome ``M`` event as a JSON array of {name, pid, tid, args}, so the sort
    indices and labels that tracks do not hold are still in the store. ``args`` is the
    source text as written (DuckDB's ``to_json`` would re-print its numbers)."""
    rows = con.execute("SELECT name, pid, tid, args FROM ev WHERE ph = 'M'").fetchall()
    items = (
        '{"name":' + _json(name) + ',"pid":' + _json(pid) + ',"tid":' + _json(tid)
        + ',"args":' + (args if args is not None else "null") + "}"
        for name, pid, tid, args in rows
    )
    return "[" + ",".join(items) + "]"


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def _warn(message: str) -> None:
    warnings.warn(message, DataQualityWarning, stacklevel=3)


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _warn_quality(complete: pa.Table, rest: pa.Table, display: str) -> None:
    no_phase = rest["ph"].null_count
    if no_phase:
        _warn(f"{display}: {no_phase} event(s) without 'ph' skipped "
              "(nothing to place on a timeline)")
    negative = pc.sum(pc.less(complete["dur_ns"], 0)).as_py() or 0
    if negative:
        _warn(f"{display}: {negative} event(s) with negative duration clipped to 0")


def _track_names(con: duckdb.DuckDBPyConnection) -> dict[str, dict[Any, str]]:
    """process_name / process_labels per pid and thread_name per (pid, tid)."""
    proc: dict[Any, str] = {}
    labels: dict[Any, str] = {}
    thread: dict[Any, str] = {}
    rows = con.execute(
        "SELECT name, pid, tid, a.name, a.labels FROM ev WHERE ph = 'M' "
        "AND name IN ('process_name', 'process_labels', 'thread_name')"
    ).fetchall()
    for kind, pid, tid, arg_name, arg_labels in rows:
        if kind == "process_name" and arg_name:
            proc[pid] = arg_name.strip()
        elif kind == "process_labels" and arg_labels:
            labels[pid] = arg_labels.strip()
        elif kind == "thread_name" and arg_name:
            thread[(pid, tid)] = arg_name.strip()
    # Kineto labels GPU processes ("GPU 0"); their process_name is the host program's.
    process = {pid: labels.get(pid, name) for pid, name in proc.items()}
    process.update({pid: lab for pid, lab in labels.items() if pid not in process})
    return {"process": process, "thread": thread}


def _base_category_sql() -> str:
    """SQL expression mapping an ``ev`` row's Kineto ``cat`` to a canonical category."""
    return "CASE cat " + " ".join(
        f"WHEN {_quote(src)} THEN {_quote(dst)}" for src, dst in KINETO_CATEGORIES.items()
    ) + " ELSE 'other' END"


def _tracks(
    con: duckdb.DuckDBPyConnection, names: dict[str, dict[Any, str]]
) -> tuple[pa.Table, pa.Table]:
    """One track per (pid, tid): the tracks table, and a (pid, tid) -> track_id map."""
    device_cats = ", ".join(_quote(c) for c in sorted(DEVICE_CATEGORIES))
    device_src = ", ".join(_quote(c) for c in sorted(DEVICE_SOURCE_CATEGORIES))
    host_cats = ", ".join(_quote(c) for c in _HOST_CATEGORIES)
    keys = con.sql(f"""
        WITH x AS (
          SELECT pid, tid,
                 bool_or(category IN ({device_cats}) OR cat IN ({device_src})) AS is_device,
                 bool_or(category IN ({host_cats})) AS has_host,
                 first(a.device ORDER BY a.device NULLS LAST) AS arg_device,
                 first(a.stream ORDER BY a.stream NULLS LAST) AS arg_stream
          FROM xv GROUP BY pid, tid
        ), o AS (
          SELECT pid, tid, bool_or(ph = 'C') AS is_counter FROM ev
          WHERE ph IS NOT NULL AND ph <> 'M' GROUP BY pid, tid
        )
        SELECT * FROM (
          SELECT coalesce(x.pid, o.pid) AS pid, coalesce(x.tid, o.tid) AS tid,
                 coalesce(x.is_device, false) AS is_device, arg_device, arg_stream,
                 coalesce(x.has_host, false) AS has_host,
                 coalesce(o.is_counter, false) AND x.pid IS NULL AS is_counter
          FROM x FULL OUTER JOIN o
            ON x.pid = o.pid AND x.tid = o.tid
        ) ORDER BY is_device, TRY_CAST(pid AS BIGINT) NULLS LAST, pid,
                 TRY_CAST(tid AS BIGINT) NULLS LAST, tid
    """).fetchall()
    cols: dict[str, list[Any]] = {k: [] for k in (
        "track_id", "kind", "name", "pid", "tid", "device", "stream", "source_pid", "source_tid"
    )}
    process, thread = names["process"], names["thread"]
    for track_id, (pid, tid, is_device, arg_device, arg_stream, has_host, is_counter) in enumerate(
        keys
    ):
        pid_int, label = _as_int(pid), process.get(pid, "")
        if is_device:
            kind = "gpu_stream"
            device = arg_device if arg_device is not None else pid_int
            stream = arg_stream if arg_stream is not None else _digits(tid)
        elif _ACCELERATOR_LABEL.search(label) and pid_int is not None and not has_host:
            # e.g. Kineto's "Stream Sync" rows: tid = stream + 1,000,000 on a GPU process.
            kind, device = "device", pid_int
            stream = arg_stream if arg_stream is not None else _digits(tid)
            if stream is not None and stream >= _VIRTUAL_ROW:
                stream -= _VIRTUAL_ROW
        elif is_counter:
            kind, device, stream = "counter", -1, -1
        else:
            kind, device, stream = ("host_thread" if pid_int is not None else "other"), -1, -1
        pid_src, tid_src = pid or None, tid or None
        default = f"{label} stream {stream}" if kind == "gpu_stream" and label else f"{pid}/{tid}"
        for key, value in (
            ("track_id", track_id), ("kind", kind), ("name", thread.get((pid, tid)) or default),
            ("pid", pid_int), ("tid", _as_int(tid)), ("device", -1 if device is None else device),
            ("stream", -1 if stream is None else stream),
            ("source_pid", pid_src), ("source_tid", tid_src),
        ):
            cols[key].append(value)
    tracks = pa.table({
        "track_id": pa.array(cols["track_id"], pa.int32()),
        "kind": pa.array(cols["kind"], pa.string()),
        "name": pa.array(cols["name"], pa.string()),
        "host": pa.nulls(len(cols["track_id"]), pa.string()),
        "pid": pa.array(cols["pid"], pa.int64()),
        "tid": pa.array(cols["tid"], pa.int64()),
        "device": pa.array(cols["device"], pa.int32()),
        "stream": pa.array(cols["stream"], pa.int64()),
        "source_pid": pa.array(cols["source_pid"], pa.string()),
        "source_tid": pa.array(cols["source_tid"], pa.string()),
    })
    track_map = pa.table({
        "pid": pa.array([k[0] for k in keys], pa.string()),
        "tid": pa.array([k[1] for k in keys], pa.string()),
        "track_id": tracks["track_id"],
        "is_device": pa.array([k in ("gpu_stream", "device") for k in cols["kind"]], pa.bool_()),
        "device": tracks["device"],
        "stream": tracks["stream"],
    })
    return tracks, track_map


def _as_int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        return None
    return number if -(2**63) <= number < 2**63 else None


def _digits(value: str | None) -> int | None:
    """Trailing integer of a tid like ``7`` or ``stream 7``."""
    return None if value is None else _as_int(value.rsplit(" ", 1)[-1])


def _intervals(xv: pa.Table, track_map: pa.Table) -> pa.Table:
    """Interval columns straight from ``xv`` with zero-copy Arrow compute (no wide join)."""
    key = pc.binary_join_element_wise(xv["pid"], xv["tid"], "\x00")
    known = pc.binary_join_element_wise(track_map["pid"], track_map["tid"], "\x00")
    row_track = pc.index_in(key, value_set=known)
    is_device = pc.take(track_map["is_device"], row_track)
    a = xv["a"]

    def field(name: str) -> Any:
        return pc.struct_field(a, name)

    def on_device(name: str) -> Any:
        return pc.if_else(is_device, field(name), pa.scalar(None, pa.int64()))

    dur = pc.max_element_wise(xv["dur_ns"], pa.scalar(0, pa.int64()))
    memcpy = _per_name(xv["name"], lambda names: pc.struct_field(
        pc.extract_regex(names, r"^Memcpy\s+(?P<kind>\w+)"), "kind"))
    device, stream, size = on_device("device"), on_device("stream"), field("bytes")
    if "mtia_direction" in xv.column_names:  # MTIA: direction, size; device/stream of track
        mtia = pc.fill_null(pc.equal(xv["cat"], MTIA_DEVICE_CATEGORY), False)
        direction = xv["mtia_direction"]
        kind = _lookup(direction, MTIA_DIRECTIONS, "")  # unknown ones kept as written
        memcpy = pc.if_else(mtia, pc.if_else(pc.equal(kind, ""), direction, kind), memcpy)
        size = pc.if_else(mtia, pc.coalesce(size, xv["mtia_size"]), size)
        device = pc.if_else(mtia, pc.coalesce(device, pc.take(
            track_map["device"], row_track).cast(pa.int64())), device)
        stream = pc.if_else(mtia, pc.coalesce(stream, pc.take(track_map["stream"], row_track)),
                            stream)
    table = pa.table({
        "track_id": pc.take(track_map["track_id"], row_track),
        "start_ns": xv["ts_ns"],
        "end_ns": pc.add(xv["ts_ns"], dur),
        "dur_ns": dur,
        "name": xv["name"],
        "category": xv["category"],
        "source_category": xv["cat"],
        "correlation": field("correlation"),
        "external_id": field("External id"),
        "device": device,
        "stream": stream,
        "bytes": size,
        "collective": field("Collective name"),
        "process_group": field("Process Group Name"),
        "group_ranks": field("Process Group Ranks"),
        "in_msg_nelems": field("In msg nelems"),
        "out_msg_nelems": field("Out msg nelems"),
        "dtype": field("dtype"),
        "grid": field("grid"),
        "block": field("block"),
        "memcpy_kind": pc.if_else(pc.equal(xv["category"], "memcpy"), memcpy,
                                  pa.scalar(None, pa.string())),
        "args": xv["args"],
    })
    track = table.column("track_id").to_numpy().astype(np.int64)
    start = table.column("start_ns").to_numpy()
    end = table.column("end_ns").to_numpy()
    order = sort_for_nesting(track, start, end)
    depth = np.empty(len(order), dtype=np.int64)
    device_rows = is_device.to_numpy(zero_copy_only=False).astype(bool)
    depth[order] = nesting_depth(track[order], start[order], end[order], device_rows[order])
    steps = _steps(table, start, device_rows)
    table = table.append_column("depth", pa.array(depth, pa.int32()))
    return table.append_column("step", pa.array(steps, pa.int32()))


def _steps(
    table: pa.Table,
    start: np.ndarray[Any, np.dtype[np.int64]],
    device: np.ndarray[Any, np.dtype[np.bool_]],
) -> Any:
    """HTA's rule: host events take the step whose range holds their start; device events
    take the step of the host launch with the same correlation id; else -1."""
    is_step = pc.equal(table["category"], "step")
    names = pc.filter(table["name"], is_step).to_pylist()
    numbers = np.array([int(STEP_RE.match(n).group(1)) for n in names], dtype=np.int64)  # type: ignore[union-attr]
    steps = step_of_time(
        start,
        pc.filter(table["start_ns"], is_step).to_numpy(),
        pc.filter(table["end_ns"], is_step).to_numpy(),
        numbers,
    )
    has_corr = pc.is_valid(table["correlation"]).to_numpy(zero_copy_only=False)
    corr = pc.fill_null(table["correlation"], 0).to_numpy()
    launch = ~device & has_corr
    steps[device] = step_of_launch(corr[device], has_corr[device], corr[launch], steps[launch])
    return steps


def _instants(con: duckdb.DuckDBPyConnection) -> pa.Table:
    category = _base_category_sql()
    return con.sql(f"""
        SELECT trk.track_id, ts_ns, ev.name, {category} AS category, cat AS source_category,
               ph AS phase, scope, args
        FROM ev JOIN trk ON {_ON_TRACK}
        WHERE ph IS NOT NULL AND ph NOT IN ('M', 'C', 's', 'f', 't')
        ORDER BY trk.track_id, ts_ns
    """).to_arrow_table()


def _counters(con: duckdb.DuckDBPyConnection, display: str) -> pa.Table:
    """Chrome 'C' events: every key of ``args`` is one series named ``name.key`` (with
    ``[id]`` after the name when the event has an id). Counter events are few; this loop
    runs over them only."""
    rows = con.sql(
        f"SELECT trk.track_id, ts_ns, ev.name, ev.id, args FROM ev JOIN trk ON {_ON_TRACK} "
        "WHERE ph = 'C' ORDER BY trk.track_id, ts_ns"
    ).fetchall()
    cols: dict[str, list[Any]] = {"track_id": [], "ts_ns": [], "name": [], "value": []}
    skipped = 0
    for track_id, ts_ns, name, event_id, args in rows:
        series = json.loads(args) if args else None
        if ts_ns is None or not isinstance(series, dict) or not series:
            skipped += 1
            continue
        base = f"{name}[{event_id}]" if name and event_id else name
        for key, value in series.items():
            cols["track_id"].append(track_id)
            cols["ts_ns"].append(ts_ns)
            cols["name"].append(f"{base}.{key}" if base and key != base else key)
            cols["value"].append(_as_float(value))
    if skipped:
        _warn(f"{display}: {skipped} counter event(s) without a time or without values skipped")
    return pa.table({
        "track_id": pa.array(cols["track_id"], pa.int32()),
        "ts_ns": pa.array(cols["ts_ns"], pa.int64()),
        "name": pa.array(cols["name"], pa.string()),
        "value": pa.array(cols["value"], pa.float64()),
    })


def _as_float(value: Any) -> float | None:
    """A counter value: numbers, and numbers written as strings; None otherwise."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _flows(con: duckdb.DuckDBPyConnection) -> pa.Table:
    """Flow links. Within one (category, id), endpoints ordered by time (s < t < f at equal
    times) are linked one to the next: s->f, or s->t->f for chains; a start with no
    following end keeps a null destination, an end with no preceding start or step keeps a
    null source. Repeated ids give several rows; nothing is dropped. Rows are in time
    order, ties broken by every column, so the table is the same from run to run (DuckDB's
    threads left ties in any order before)."""
    return con.sql(f"""
        WITH f AS (
          SELECT coalesce(cat, ev.name) AS flow_name, coalesce(id, '') AS id, ph,
                 trk.track_id, ts_ns,
                 CASE ph WHEN 's' THEN 0 WHEN 't' THEN 1 ELSE 2 END AS rank_ph
          FROM ev JOIN trk ON {_ON_TRACK} WHERE ph IN ('s', 'f', 't')
        ), o AS (
          SELECT *,
                 lead(ph) OVER w AS next_ph, lead(track_id) OVER w AS next_track,
                 lead(ts_ns) OVER w AS next_ts, lag(ph) OVER w AS prev_ph
          FROM f WINDOW w AS (PARTITION BY flow_name, id ORDER BY ts_ns, rank_ph)
        )
        SELECT id AS flow_id, flow_name AS name,
               track_id AS src_track_id, ts_ns AS src_ts_ns,
               CASE WHEN next_ph IN ('t', 'f') THEN next_track END AS dst_track_id,
               CASE WHEN next_ph IN ('t', 'f') THEN next_ts END AS dst_ts_ns
        FROM o WHERE ph IN ('s', 't')
        UNION ALL
        SELECT id, flow_name, NULL, NULL, track_id, ts_ns
        FROM o WHERE ph IN ('t', 'f') AND (prev_ph IS NULL OR prev_ph = 'f')
        ORDER BY coalesce(src_ts_ns, dst_ts_ns), name, flow_id, src_track_id, dst_track_id,
                 src_ts_ns, dst_ts_ns
    """).to_arrow_table()
