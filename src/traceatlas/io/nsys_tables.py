"""Nsight Systems export -> canonical tables (part of the nsys reader, ``nsys.py``).

Events are copied once, by SQL inside SQLite, into temporary tables (``ta_ev`` intervals,
``ta_mk`` NVTX marks, ``ta_p2p`` MPI point-to-point calls, ``ta_gm`` GPU metrics) with
the canonical columns; tracks are numbered per process by SQL; each process's rows are
then fetched sorted by track and start. Python runs only over distinct names (NCCL
collective, ProfilerStep), tracks and processes; depth and steps are numpy.

Processes are keyed by ``globalPid >> 24`` (= ``globalTid >> 24``): the OS pid in the
low 24 bits, a VM/host id above. Times stay as written here; ``base_ns`` is added on
fetch. Tables come back without the ``rank`` column.
"""

from __future__ import annotations

import re
import sqlite3
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceatlas.errors import DataQualityWarning
from traceatlas.io import nsys_schema as ns
from traceatlas.io.nsys_schema import Catalog, Columns, literal
from traceatlas.model.categories import COMM_KERNEL_RE, STEP_RE
from traceatlas.ops.nesting import nesting_depth, sort_for_nesting
from traceatlas.ops.steps import step_of_launch, step_of_time

HOST, STREAM, DEVICE, COUNTER = "host_thread", "gpu_stream", "device", "counter"
PID_MASK = 0xFFFFFF

_API_VERSION = re.compile(r"_v\d+$")
_DRIVER_API = re.compile(r"^cu[A-Z]")
_DRIVER_EVENT_CLASS = 1  # ENUM_NSYS_EVENT_CLASS TRACE_PROCESS_EVENT_CUDA_DRIVER
_NCCL_OP = re.compile(r"^(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)
_NCCL_DTYPES = frozenset({
    "i8", "u8", "i32", "u32", "i64", "u64", "f16", "f32", "f64", "bf16", "f8e4m3",
    "f8e5m2", "int8_t", "uint8_t", "int32_t", "uint32_t", "int64_t", "uint64_t", "half",
    "float", "double", "__nv_bfloat16", "bfloat16",
})

_EV_COLUMNS = ("proc", "tid", "kind", "device", "stream", "start", "end", "name",
               "category", "source_category", "correlation", "bytes", "gx", "gy", "gz",
               "bx", "by", "bz", "memcpy_kind", "args")


@dataclass
class Loaded:
    """What ``load`` found: NVTX domains, the earliest raw time, whether MPI P2P exists."""

    domains: list[dict[str, Any]] = field(default_factory=list)
    min_time: int | None = None
    has_p2p: bool = False


def _warn(message: str) -> None:
    warnings.warn(message, DataQualityWarning, stacklevel=3)


def _insert(con: sqlite3.Connection, select: str, params: Sequence[Any] = ()) -> None:
    cols = ", ".join(ns.quote(c) for c in _EV_COLUMNS)
    con.execute(f"INSERT INTO temp.ta_ev ({cols}) {select}", params)


def _host_keys() -> str:
    return "coalesce(a.globalTid >> 24, -1), coalesce(a.globalTid & 16777215, -1)"


def _lookup_table(con: sqlite3.Connection, name: str, rows: list[tuple[Any, ...]],
                  columns: str) -> None:
    con.execute(f"CREATE TEMP TABLE {name} ({columns})")
    marks = ", ".join("?" * len(columns.split(",")))
    con.executemany(f"INSERT INTO temp.{name} VALUES ({marks})", rows)


def load(cat: Catalog) -> Loaded:
    """Copy every event the reader understands into the temporary tables."""
    con = cat.con
    cols = ", ".join(f"{ns.quote(c)}" for c in _EV_COLUMNS)
    con.execute(f"CREATE TEMP TABLE ta_ev ({cols})")
    con.execute("CREATE TEMP TABLE ta_mk (proc, tid, ts, name, args)")
    con.execute("CREATE TEMP TABLE ta_p2p (proc, start, \"end\", name, remote, bytes, tag, "
                "comm)")
    con.execute("CREATE TEMP TABLE ta_gm (ts, device, name, value)")
    loaded = Loaded()
    _load_device(cat)
    _load_runtime(cat)
    mpi_tables = [spec for spec in ns.MPI_TABLES if cat.has(spec.name)]
    loaded.domains = _load_nvtx(cat, mpi_as_nvtx=bool(mpi_tables))
    for spec, category in ((ns.OSRT, "osrt"), *((s, "mpi") for s in ns.MPI_TABLES)):
        cols_ = cat.check(spec)
        if cols_ is not None:
            name_col = "nameId" if spec is ns.OSRT else "textId"
            _insert(con, _host_select(cols_, cols_.string(name_col), literal(category),
                                      cols_.args()))
            if spec is ns.MPI_P2P:
                _load_p2p(cols_)
                loaded.has_p2p = True
    _load_gpu_metrics(cat)
    _clip_ends(cat)
    row = con.execute(
        "SELECT min(t) FROM (SELECT min(start) AS t FROM temp.ta_ev "
        "UNION ALL SELECT min(ts) FROM temp.ta_mk UNION ALL SELECT min(ts) FROM temp.ta_gm)"
    ).fetchone()
    loaded.min_time = None if row[0] is None else int(row[0])
    return loaded


def _device_select(c: Columns, kind: str, name: str, category: str, extra: str = "",
                   memcpy_kind: str = "NULL", bytes_: str = "NULL",
                   grid: bool = False, device: str = "") -> str:
    geometry = ", ".join(c.col(g) for g in ("gridX", "gridY", "gridZ", "blockX", "blockY",
                                            "blockZ")) if grid else "NULL, " * 5 + "NULL"
    return (
        f"SELECT coalesce(a.globalPid >> 24, -1), NULL, '{kind}', "
        f"coalesce({device or c.col('deviceId')}, -1), coalesce({c.col('streamId')}, -1), "
        f"a.start, a.\"end\", {name}, '{category}', {literal(c.spec.name)}, "
        f"{c.col('correlationId')}, {bytes_}, {geometry}, {memcpy_kind}, {c.args()} "
        f"FROM {ns.quote(c.spec.name)} AS a {extra}"
    )


def _load_device(cat: Catalog) -> None:
    con = cat.con
    kernel = cat.check(ns.KERNEL)
    if kernel is not None:
        name_expr = ", ".join(
            [kernel.string(c) for c in ("demangledName", "shortName", "mangledName")]
            + (["CASE typeof(a.name) WHEN 'integer' THEN (SELECT value FROM StringIds "
                "WHERE id = a.name) ELSE a.name END"] if kernel.has("name") else [])
        )
        _insert(con, _device_select(kernel, STREAM, f"coalesce({name_expr}, '')", "kernel",
                                    grid=True))
    memcpy = cat.check(ns.MEMCPY)
    if memcpy is not None:
        kinds = ns.enum_labels(cat, "ENUM_CUDA_MEMCPY_OPER", ns.MEMCPY_LABELS)
        _lookup_table(con, "ta_copykind", [
            (code, label, ns.memcpy_short(code, name)) for code, (name, label) in kinds.items()
        ], "id, label, short")
        _insert(con, _device_select(
            memcpy, STREAM,
            "'[CUDA memcpy ' || coalesce(k.label, 'kind ' || a.copyKind, 'Unknown') || ']'",
            "memcpy", "LEFT JOIN temp.ta_copykind AS k ON k.id = " + memcpy.col("copyKind"),
            memcpy_kind="k.short", bytes_=memcpy.col("bytes"),
        ))
    memset = cat.check(ns.MEMSET)
    if memset is not None:
        _insert(con, _device_select(memset, STREAM, "'[CUDA memset]'", "memset",
                                    bytes_=memset.col("bytes")))
    sync = cat.check(ns.SYNC)
    if sync is not None:
        labels = ns.enum_labels(cat, "ENUM_CUPTI_SYNC_TYPE", ns.SYNC_LABELS)
        _lookup_table(con, "ta_synctype", [(k, v[1]) for k, v in labels.items()], "id, label")
        join = "LEFT JOIN temp.ta_synctype AS y ON y.id = " + sync.col("syncType")
        device = ""
        if sync.has("contextId") and _context_devices(cat):
            join += (" LEFT JOIN temp.ta_ctx AS x ON x.proc = a.globalPid >> 24 "
                     "AND x.ctx = a.contextId")
            device = f"coalesce(x.device, {sync.col('deviceId')})"
        _insert(con, _device_select(sync, DEVICE, "coalesce(y.label, 'Synchronization')",
                                    "sync", join, device=device))


def _context_devices(cat: Catalog) -> bool:
    """``ta_ctx``: (process, contextId) -> device, from kernel/memcpy/memset rows. The
    real exports write SYNCHRONIZATION.deviceId = 0 for every row (the default value),
    also for the process whose context and streams are on device 1."""
    parts = [f"SELECT globalPid >> 24 AS proc, contextId AS ctx, deviceId AS device FROM "
             f"{spec.name}" for spec in (ns.KERNEL, ns.MEMCPY, ns.MEMSET)
             if cat.has(spec.name)
             and {"globalPid", "contextId", "deviceId"} <= set(cat.columns(spec.name))]
    if not parts:
        return False
    cat.con.execute("CREATE TEMP TABLE ta_ctx AS SELECT proc, ctx, min(device) AS device "
                    f"FROM ({' UNION '.join(parts)}) GROUP BY 1, 2")
    return True


def _host_select(c: Columns, name: str, category: str, args: str, extra: str = "",
                 where: str = "") -> str:
    return (
        f"SELECT {_host_keys()}, '{HOST}', NULL, NULL, a.start, a.\"end\", "
        f"coalesce({name}, ''), {category}, "
        f"{literal(c.spec.name)}, {c.col('correlationId')}, NULL, NULL, NULL, NULL, NULL, "
        f"NULL, NULL, NULL, {args} FROM {ns.quote(c.spec.name)} AS a {extra} {where}"
    )


def _load_runtime(cat: Catalog) -> None:
    """CUDA runtime and driver calls; names without the ``_v<version>`` suffix (the full
    name stays in args.nameId)."""
    runtime = cat.check(ns.RUNTIME)
    if runtime is None:
        return
    con = cat.con
    rows: list[tuple[Any, ...]] = []
    if runtime.has("nameId"):
        for name_id, value in con.execute(
            "SELECT DISTINCT a.nameId, s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME AS a "
            "LEFT JOIN StringIds AS s ON s.id = a.nameId"
        ):
            text = str(value) if value is not None else ""
            rows.append((name_id, _API_VERSION.sub("", text), int(bool(_DRIVER_API.match(text)))))
    _lookup_table(con, "ta_api", rows, "id, name, driver")
    join = "LEFT JOIN temp.ta_api AS f ON f.id = " + runtime.col("nameId")
    category = (f"CASE WHEN {runtime.col('eventClass')} = {_DRIVER_EVENT_CLASS} "
                "OR f.driver = 1 THEN 'driver' ELSE 'runtime' END")
    _insert(con, _host_select(runtime, "f.name", category, runtime.args(), join))


def _load_nvtx(cat: Catalog, *, mpi_as_nvtx: bool) -> list[dict[str, Any]]:
    """NVTX ranges (intervals) and marks (instants) of every domain; returns the domains.

    A range in the domain named ``MPI`` (how nsys traced MPI before the MPI_* tables)
    is category ``mpi`` unless the file also has MPI_* tables.
    """
    nvtx = cat.check(ns.NVTX)
    if nvtx is None:
        return []
    con = cat.con
    codes = ns.nvtx_codes(cat)
    text = f"coalesce(a.text, {nvtx.string('textId')})"
    domain_create = codes["NvtxDomainCreate"]
    domains: list[dict[str, Any]] = []
    if nvtx.has("domainId"):
        con.execute(
            "CREATE TEMP TABLE ta_domain AS SELECT a.globalTid >> 24 AS proc, a.domainId, "
            f"min({text}) AS name FROM NVTX_EVENTS AS a WHERE a.eventType = {domain_create} "
            "GROUP BY 1, 2"
        )
        domains = [{"process": p, "domainId": d, "name": n}
                   for p, d, n in con.execute("SELECT * FROM temp.ta_domain ORDER BY 1, 2")]
        join = ("LEFT JOIN temp.ta_domain AS d ON d.proc = a.globalTid >> 24 "
                "AND d.domainId = a.domainId")
        domain = "d.name"
    else:
        join, domain = "", "NULL"
    args = nvtx.args([("domain", domain)])
    ranges = ", ".join(str(codes[k]) for k in ns.NVTX_RANGES)
    mpi = "0" if mpi_as_nvtx else "1"
    category = f"CASE WHEN {domain} = 'MPI' AND {mpi} THEN 'mpi' ELSE 'nvtx' END"
    _insert(con, _host_select(nvtx, text, category, args, join,
                              f"WHERE a.eventType IN ({ranges})"))
    marks = ", ".join(str(codes[k]) for k in ns.NVTX_MARKS)
    con.execute(
        f"INSERT INTO temp.ta_mk SELECT {_host_keys()}, a.start, coalesce({text}, ''), {args} "
        f"FROM NVTX_EVENTS AS a {join} WHERE a.eventType IN ({marks})"
    )
    handled = ", ".join(str(codes[k])
                        for k in (*ns.NVTX_RANGES, *ns.NVTX_MARKS, *ns.NVTX_NOT_EVENTS))
    for event_type, count in con.execute(
        f"SELECT eventType, count(*) FROM NVTX_EVENTS WHERE eventType NOT IN ({handled}) "
        "GROUP BY 1"
    ):
        _warn(f"{cat.display}: {count} NVTX_EVENTS row(s) of eventType {event_type} not read "
              "(not a range or a mark)")
    return domains


def _load_p2p(c: Columns) -> None:
    comm = next((c.col(n) for n in ("commHandle", "communicator") if c.has(n)), "NULL")
    c.catalog.con.execute(
        "INSERT INTO temp.ta_p2p SELECT coalesce(a.globalTid >> 24, -1), a.start, a.\"end\", "
        f"{c.string('textId')}, {c.col('remoteRank')}, {c.col('size')}, {c.col('tag')}, "
        f"CAST({comm} AS TEXT) FROM MPI_P2P_EVENTS AS a"
    )


def _load_gpu_metrics(cat: Catalog) -> None:
    gm = cat.check(ns.GPU_METRICS)
    if gm is None:
        return
    info = "TARGET_INFO_GPU_METRICS"
    name, join = "NULL", ""
    if cat.has(info) and {"metricId", "metricName"} <= set(cat.columns(info)):
        on = "i.metricId = a.metricId"
        if "typeId" in cat.columns(info):
            on += " AND i.typeId = a.typeId"
        join = (f"LEFT JOIN (SELECT * FROM {info} GROUP BY "
                f"{'typeId, ' if 'typeId' in cat.columns(info) else ''}metricId) AS i ON {on}")
        name = "i.metricName"
    cat.con.execute(
        "INSERT INTO temp.ta_gm SELECT a.timestamp, a.typeId & 255, "
        f"coalesce({name}, 'metric ' || a.metricId), {gm.col('value')} "
        f"FROM GPU_METRICS AS a {join}"
    )


def _clip_ends(cat: Catalog) -> None:
    """Rows without a start are skipped (with a warning); intervals without an end or
    ending before they start get zero duration (with a warning)."""
    con = cat.con
    checks = (("start IS NULL", "without a start time skipped", "DELETE FROM temp.ta_ev"),
              ("\"end\" IS NULL OR \"end\" < start",
               "without an end or ending before their start; kept with zero duration",
               "UPDATE temp.ta_ev SET \"end\" = start"))
    for where, what, fix in checks:
        for table, count in con.execute(
            f"SELECT source_category, count(*) FROM temp.ta_ev WHERE {where} GROUP BY 1"
        ).fetchall():
            _warn(f"{cat.display}: {count} {table} row(s) {what}")
        con.execute(f"{fix} WHERE {where}")


def processes(con: sqlite3.Connection) -> list[int]:
    """Process keys (``globalPid >> 24``) that have events, ascending."""
    return [int(r[0]) for r in con.execute(
        "SELECT proc FROM temp.ta_ev UNION SELECT proc FROM temp.ta_mk "
        "UNION SELECT proc FROM temp.ta_p2p ORDER BY 1"
    )]


def number_tracks(con: sqlite3.Connection) -> None:
    """``ta_trk``: one track per (process, kind, tid, device, stream), numbered within the
    process: host threads by tid, then GPU streams and sync rows by (device, stream)."""
    con.execute("""
        CREATE TEMP TABLE ta_trk AS
        SELECT proc, kind, tid, device, stream,
               row_number() OVER (PARTITION BY proc ORDER BY
                 CASE kind WHEN 'host_thread' THEN 0 WHEN 'gpu_stream' THEN 1 ELSE 2 END,
                 device, stream, tid) - 1 AS track_id
        FROM (SELECT proc, kind, coalesce(tid, -1) AS tid, coalesce(device, -1) AS device,
                     coalesce(stream, -1) AS stream FROM temp.ta_ev
              UNION SELECT proc, 'host_thread', tid, -1, -1 FROM temp.ta_mk)
    """)
    con.execute("CREATE INDEX temp.ta_trk_key ON ta_trk (proc, kind, tid, device, stream)")


@dataclass
class ProcessInfo:
    """What the tracks of one process are named after."""

    proc: int
    host: str | None
    thread_names: dict[int, str]
    metric_devices: list[int]


def build_process(con: sqlite3.Connection, info: ProcessInfo, base_ns: int) -> dict[str, pa.Table]:
    """Tracks, intervals, instants and counters of one process (times + ``base_ns``)."""
    tracks = _tracks(con, info)
    intervals = _intervals(con, info.proc, base_ns)
    instants = _instants(con, info.proc, base_ns)
    counters, counter_tracks = _counters(con, info, base_ns, tracks.num_rows)
    if counter_tracks is not None:
        tracks = pa.concat_tables([tracks, counter_tracks])
    return {"tracks": tracks, "intervals": intervals, "instants": instants,
            "counters": counters}


def _tracks(con: sqlite3.Connection, info: ProcessInfo) -> pa.Table:
    rows = con.execute(
        "SELECT track_id, kind, tid, device, stream FROM temp.ta_trk WHERE proc = ? "
        "ORDER BY track_id", (info.proc,)
    ).fetchall()
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


def _fetch(cursor: sqlite3.Cursor, names: Sequence[str]) -> dict[str, list[Any]]:
    rows = cursor.fetchall()
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(names)
    return {name: list(col) for name, col in zip(names, columns, strict=True)}


def _intervals(con: sqlite3.Connection, proc: int, base_ns: int) -> pa.Table:
    names = ("track_id", "on_device", "start_ns", "end_ns", "name", "category",
             "source_category", "correlation", "bytes", "device", "stream", "gx", "gy", "gz",
             "bx", "by", "bz", "memcpy_kind", "args")
    cols = _fetch(con.execute(f"""
        SELECT t.track_id, e.kind <> '{HOST}', e.start + ?, e."end" + ?, e.name, e.category,
               e.source_category, e.correlation, e.bytes,
               CASE WHEN e.kind = '{HOST}' THEN NULL ELSE e.device END,
               CASE WHEN e.kind = '{HOST}' THEN NULL ELSE e.stream END,
               e.gx, e.gy, e.gz, e.bx, e.by, e.bz, e.memcpy_kind, e.args
        FROM temp.ta_ev AS e JOIN temp.ta_trk AS t
          ON t.proc = e.proc AND t.kind = e.kind AND t.tid = coalesce(e.tid, -1)
         AND t.device = coalesce(e.device, -1) AND t.stream = coalesce(e.stream, -1)
        WHERE e.proc = ? ORDER BY t.track_id, e.start, e."end" DESC
    """, (base_ns, base_ns, proc)), names)
    track = np.asarray(cols["track_id"], dtype=np.int64)
    start = np.asarray(cols["start_ns"], dtype=np.int64)
    end = np.asarray(cols["end_ns"], dtype=np.int64)
    on_device = np.asarray(cols["on_device"], dtype=bool)
    name = pc.dictionary_encode(pa.array(cols["name"], pa.string()))
    category = _refine_categories(name, pa.array(cols["category"], pa.string()))
    collective = _per_name(name, lambda n: _nccl_parts(n)[0])
    dtype = _per_name(name, lambda n: _nccl_parts(n)[1])
    is_comm = pc.equal(category, "comm_kernel")
    table = pa.table({
        "track_id": pa.array(track, pa.int32()),
        "start_ns": pa.array(start, pa.int64()),
        "end_ns": pa.array(end, pa.int64()),
        "dur_ns": pa.array(end - start, pa.int64()),
        "name": name,
        "category": category,
        "source_category": pa.array(cols["source_category"], pa.string()),
        "correlation": pa.array(cols["correlation"], pa.int64()),
        "bytes": pa.array(cols["bytes"], pa.int64()),
        "device": pa.array(cols["device"], pa.int32()),
        "stream": pa.array(cols["stream"], pa.int64()),
        "collective": pc.if_else(is_comm, collective, pa.scalar(None, pa.string())),
        "dtype": pc.if_else(is_comm, dtype, pa.scalar(None, pa.string())),
        "grid": _triples(cols["gx"], cols["gy"], cols["gz"]),
        "block": _triples(cols["bx"], cols["by"], cols["bz"]),
        "memcpy_kind": pa.array(cols["memcpy_kind"], pa.string()),
        "args": pa.array(cols["args"], pa.string()),
    })
    order = sort_for_nesting(track, start, end)
    depth = np.empty(len(order), dtype=np.int64)
    depth[order] = nesting_depth(track[order], start[order], end[order], on_device[order])
    table = table.append_column("depth", pa.array(depth, pa.int32()))
    return table.append_column("step", pa.array(_steps(table, start, on_device), pa.int32()))


def _per_name(name: pa.DictionaryArray, fn: Callable[[str], Any]) -> pa.Array:
    """``fn`` once per distinct name, expanded to every row."""
    values = pa.array([fn(n) for n in name.dictionary.to_pylist()])
    if len(values) == 0:
        return pa.nulls(len(name), pa.string())
    return pc.take(values, name.indices)


def _refine_categories(name: pa.DictionaryArray, category: pa.Array) -> pa.Array:
    """``kernel`` -> ``comm_kernel`` for NCCL/RCCL names; ``nvtx`` -> ``step`` for
    ``ProfilerStep#N`` ranges (as the Kineto reader does)."""
    comm = _per_name(name, lambda n: bool(COMM_KERNEL_RE.search(n)))
    step = _per_name(name, lambda n: bool(STEP_RE.match(n)))
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


def _triples(x: list[Any], y: list[Any], z: list[Any]) -> pa.Array:
    """[x, y, z] lists; null where x is null."""
    n = len(x)
    valid = np.array([v is not None for v in x], dtype=bool)
    flat = np.column_stack([
        np.array([v if v is not None else 0 for v in c], dtype=np.int64) for c in (x, y, z)
    ]).reshape(-1) if n else np.zeros(0, dtype=np.int64)
    offsets = pa.array(np.arange(0, 3 * n + 1, 3, dtype=np.int32))
    lists = pa.ListArray.from_arrays(offsets, pa.array(flat, pa.int32()),
                                     mask=pa.array(~valid))
    return lists


def _steps(table: pa.Table, start: np.ndarray[Any, np.dtype[np.int64]],
           device: np.ndarray[Any, np.dtype[np.bool_]]) -> np.ndarray[Any, np.dtype[np.int64]]:
    """Host rows: the ProfilerStep range holding their start; device rows: the step of
    the runtime call with the same correlation id; -1 without ProfilerStep ranges."""
    is_step = pc.equal(table["category"], "step")
    if not pc.any(is_step).as_py():
        return np.full(table.num_rows, -1, dtype=np.int64)
    names = pc.filter(table["name"], is_step).to_pylist()
    numbers = np.array([int(STEP_RE.match(n).group(1)) for n in names],  # type: ignore[union-attr]
                       dtype=np.int64)
    steps = step_of_time(start, pc.filter(table["start_ns"], is_step).to_numpy(),
                         pc.filter(table["end_ns"], is_step).to_numpy(), numbers)
    has_corr = pc.is_valid(table["correlation"]).to_numpy(zero_copy_only=False)
    corr = pc.fill_null(table["correlation"], 0).to_numpy()
    launch = ~device & has_corr
    steps[device] = step_of_launch(corr[device], has_corr[device], corr[launch], steps[launch])
    return steps


def _instants(con: sqlite3.Connection, proc: int, base_ns: int) -> pa.Table:
    names = ("track_id", "ts_ns", "name", "args")
    cols = _fetch(con.execute(f"""
        SELECT t.track_id, m.ts + ?, m.name, m.args FROM temp.ta_mk AS m JOIN temp.ta_trk AS t
          ON t.proc = m.proc AND t.kind = '{HOST}' AND t.tid = m.tid
        WHERE m.proc = ? ORDER BY t.track_id, m.ts
    """, (base_ns, proc)), names)
    n = len(cols["ts_ns"])
    return pa.table({
        "track_id": pa.array(cols["track_id"], pa.int32()),
        "ts_ns": pa.array(cols["ts_ns"], pa.int64()),
        "name": pa.array(cols["name"], pa.string()),
        "category": pa.array(["nvtx"] * n, pa.string()),
        "source_category": pa.array([ns.NVTX.name] * n, pa.string()),
        "phase": pa.nulls(n, pa.string()),
        "scope": pa.array(["t"] * n, pa.string()),
        "args": pa.array(cols["args"], pa.string()),
    })


def _counters(con: sqlite3.Connection, info: ProcessInfo, base_ns: int,
              first_track: int) -> tuple[pa.Table, pa.Table | None]:
    """GPU metrics of the devices this process owns, one counter track per device."""
    ids = {device: first_track + i for i, device in enumerate(info.metric_devices)}
    empty = pa.table({"track_id": pa.array([], pa.int32()), "ts_ns": pa.array([], pa.int64()),
                      "name": pa.array([], pa.string()), "value": pa.array([], pa.float64())})
    if not ids:
        return empty, None
    marks = ", ".join("?" * len(ids))
    cols = _fetch(con.execute(
        f"SELECT device, ts + ?, name, value FROM temp.ta_gm WHERE device IN ({marks}) "
        "ORDER BY device, ts, name", (base_ns, *ids)
    ), ("device", "ts_ns", "name", "value"))
    counters = pa.table({
        "track_id": pa.array([ids[d] for d in cols["device"]], pa.int32()),
        "ts_ns": pa.array(cols["ts_ns"], pa.int64()),
        "name": pa.array(cols["name"], pa.string()),
        "value": pa.array(cols["value"], pa.float64()),
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


def messages(con: sqlite3.Connection, proc: int, rank: int | None, base_ns: int,
             display: str) -> pa.Table:
    """MPI point-to-point calls of one process as messages, local side only: a send
    fills send_start/end (dst = remoteRank), a receive recv_start/end (src = remoteRank);
    the remote side's times are null. ``MPI_Sendrecv*`` counts as a send."""
    rows = con.execute(
        "SELECT start + ?, \"end\" + ?, name, remote, bytes, tag, comm FROM temp.ta_p2p "
        "WHERE proc = ? ORDER BY start", (base_ns, base_ns, proc)
    ).fetchall()
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
