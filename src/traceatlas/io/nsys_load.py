"""Nsight Systems export -> Arrow event tables (part of the nsys reader, ``nsys.py``).

Each event table the reader understands is read by one SELECT (a ``Read``) that SQLite
runs and the ADBC driver hands over as Arrow (``nsys_adbc.py``): StringIds names, enum
labels, categories and the ``args`` JSON text are computed by SQLite, in the same SQL for
every export version. With ``threads`` > 1 large tables are read in rowid ranges, on
parallel connections, and put back together in rowid (= scan) order. The small lookup
tables the SELECTs join (API names, NVTX domains, enum labels) are read once with
``sqlite3`` and copied to each connection. The results: ``ev`` intervals (``EV``
columns), ``mk`` NVTX marks, ``p2p`` MPI point-to-point calls, ``gm`` GPU metrics, all
processes together.

Processes are keyed by ``globalPid >> 24`` (= ``globalTid >> 24``); times stay as
written here.

Nothing is kept silently wrong: rows with a value of the wrong type in a checked column
(text in ``start``...), intervals ending before they start and names whose StringIds id
is not in StringIds are counted per table and reported (a DataQualityWarning and a
``quality.Note``); the first two are dropped. When StringIds is empty although events
name ids, the file is refused.
"""

from __future__ import annotations

import math
import re
import sqlite3
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traceatlas.errors import CorruptTraceError, DataQualityWarning
from traceatlas.io import nsys_schema as ns
from traceatlas.io.nsys_adbc import (
    DICT,
    Db,
    DriverError,
    Job,
    ReadError,
    Shape,
    fix_utf8,
    run_jobs,
)
from traceatlas.io.nsys_schema import Catalog, Columns, literal, quote
from traceatlas.io.quality import Note, report

HOST, STREAM, DEVICE, COUNTER = "host_thread", "gpu_stream", "device", "counter"
PID_MASK = 0xFFFFFF

_API_VERSION = re.compile(r"_v\d+$")
_DRIVER_API = re.compile(r"^cu[A-Z]")
_DRIVER_EVENT_CLASS = 1  # ENUM_NSYS_EVENT_CLASS TRACE_PROCESS_EVENT_CUDA_DRIVER
_GRID = ("gx", "gy", "gz", "bx", "by", "bz")
_I, _S, _F = pa.int64(), pa.string(), pa.float64()

EV = Shape(pa.schema([
    ("proc", _I), ("tid", _I), ("kind", DICT), ("device", _I), ("stream", _I), ("start", _I),
    ("end", _I), ("name", DICT), ("category", DICT), ("source_category", DICT),
    ("correlation", _I), ("bytes", _I), *((g, _I) for g in _GRID), ("memcpy_kind", DICT),
    ("args", _S),
]), frozenset({"memcpy_kind"}))
"""Intervals: process, thread (host rows) or device/stream, raw times, canonical values."""
MK = Shape(pa.schema([("proc", _I), ("tid", _I), ("ts", _I), ("name", DICT), ("args", _S)]))
"""NVTX marks."""
P2P = Shape(pa.schema([("proc", _I), ("start", _I), ("end", _I), ("name", _S),
                       ("remote", _I), ("bytes", _I), ("tag", _I), ("comm", _S)]),
            frozenset({"name", "comm"}))
"""MPI point-to-point calls."""
GM = Shape(pa.schema([("ts", _I), ("device", _I), ("name", _S), ("value", _F)]),
           frozenset({"value"}))
"""GPU metrics samples."""

NVTX_ROWS = Shape(pa.schema([*EV.schema, pa.field("eventType", _I)]), EV.nullable)
"""NVTX ranges, marks and unknown rows, told apart by eventType after reading."""
_PIECES_PER_THREAD = 3
_MIN_PIECE_ROWS = 50_000
_ROW_COST_BASE = 8
"""Cost of one row read, in units of one column of its table, beyond its columns: a
row costs ``_ROW_COST_BASE + columns``. Measured per row on the 79 MB benchmark export
(CPU us): KERNEL 40 columns 3.9, RUNTIME 8 columns 1.3, MEMCPY 21 columns 1.9."""
_ROWID_NAMES = frozenset({"rowid", "_rowid_", "oid"})
_STATS = "__stats"
"""Result name of a job's counts (rows dropped per checked column, names unresolved)."""


@dataclass(frozen=True)
class Lookup:
    """A temporary table created on a reading connection before its SELECT: the first
    column is an INTEGER key (SQLite then indexes joins on it; an untyped one is
    scanned for every row)."""

    name: str
    columns: tuple[str, ...]
    rows: list[tuple[Any, ...]]

    def create(self, db: Db) -> None:
        """Create and fill the table on ``db`` (rows of a damaged file made bindable:
        keys that are not integers left out, blobs as hex, a column mixing numbers
        and text as text)."""
        db.execute(f"CREATE TEMP TABLE {self.name} "
                   f"({self.columns[0]} INTEGER, {', '.join(self.columns[1:])})")
        db.execute(f"INSERT INTO temp.{self.name} VALUES "
                   f"({', '.join('?' * len(self.columns))})", _bindable(self.rows))


def _bindable(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """``rows`` with an int (or bool) key, no bytes, and one Python type per column."""
    out = [tuple(v.hex() if isinstance(v, bytes) else v for v in r) for r in rows
           if isinstance(r[0], int)]
    if not out:
        return out
    columns = list(zip(*out, strict=True))
    for i, col in enumerate(columns):
        kinds = {type(v) for v in col if v is not None}
        if len(kinds) > 1:
            columns[i] = tuple(None if v is None else str(v) for v in col)
    return list(zip(*columns, strict=True))


@dataclass(frozen=True)
class Read:
    """One SELECT of ``shape`` over ``table`` (alias ``a``). With ``args`` set, the
    ``args`` column is that table's JSON (plus the ``extra`` members), built after
    counting the non-null values of its columns in the rows read."""

    result: str
    shape: Shape
    table: str
    exprs: dict[str, str]
    joins: str = ""
    where: str = ""
    lookups: tuple[Lookup, ...] = ()
    setup: tuple[str, ...] = ()
    args: Columns | None = None
    extra: tuple[tuple[str, str], ...] = ()
    checks: Columns | None = None
    name_ids: tuple[str, ...] = ()

    def job(self, rowids: tuple[int, int] | None) -> Job:
        """Reads the rows (those with rowid in ``rowids``, inclusive, when given) and
        their counts (result ``_STATS``): rows with a wrong-typed ``checks`` column
        (dropped), per column, and kept rows whose name is blank although one of the
        ``name_ids`` columns gives a StringIds id (unresolved)."""
        where = [self.where] if self.where else []
        if rowids is not None:
            where.append(f"a.rowid BETWEEN {rowids[0]} AND {rowids[1]}")
        condition = f" WHERE {' AND '.join(where)}" if where else ""
        tail = f"FROM {quote(self.table)} AS a {self.joins}{condition}"
        flag = self.checks.bad_flag() if self.checks is not None else None

        def job(db: Db) -> dict[str, pa.Table]:
            for lookup in self.lookups:
                lookup.create(db)
            for sql in self.setup:
                db.execute(sql)
            exprs, rows = self.exprs, None
            if self.args is not None:
                args, rows = self._args(db, self.args, condition)
                exprs = {**exprs, "args": args}
            try:
                table, bad_rows = self._fetch(db, exprs, where, flag, rows)
            except (DriverError, ReadError) as exc:
                if self.args is None or "BLOB" not in str(exc):
                    raise
                # a blob where the file declares a number or text: build args again
                # with every member turned to hex when it is a blob (slower; rare)
                args, rows = self._args(db, self.args, condition, blob_safe=True)
                exprs = {**exprs, "args": args}
                table, bad_rows = self._fetch(db, exprs, where, flag, rows)
            table, bad_text = fix_utf8(table)
            stats = {"bad_rows": [bad_rows], "bad_text": [bad_text]}
            if stats["bad_rows"][0] and self.checks is not None:  # rare: count per column
                counts = db.rows(f"SELECT {self.checks.bad_counts()} {tail}")[0]
                stats |= {f"bad:{c}": [int(n or 0)]
                          for c, n in zip(self.checks.checked(), counts, strict=True)}
            blank = _blank_names(table) if self.name_ids else 0
            unresolved = 0
            if blank:
                ids = " OR ".join(f"a.{quote(c)} IS NOT NULL" for c in self.name_ids)
                keep = [*where, f"({exprs['name']}) = ''", f"({ids})"]
                if flag is not None:
                    keep.append(f"({flag}) = 0")
                unresolved = int(db.rows(
                    f"SELECT count(*) FROM {quote(self.table)} AS a {self.joins} "
                    f"WHERE {' AND '.join(keep)}")[0][0])
            stats["unresolved"] = [unresolved]
            return {self.result: table, _STATS: pa.table(stats)}
        return job

    def _fetch(self, db: Db, exprs: dict[str, str], where: list[str], flag: str | None,
               rows: int | None) -> tuple[pa.Table, int]:
        """(rows kept, rows dropped for a wrong-typed checked column). With ``rows`` (the
        count of rows ``where`` selects) the check is a condition of the query and the
        dropped rows are counted as ``rows`` - kept (the joins are on lookups with one
        row per key: they neither add nor drop rows); else each row's flag is read."""
        tail = f"FROM {quote(self.table)} AS a {self.joins}"
        if flag is not None and rows is not None:
            where = [*where, f"({flag}) = 0"]
        if where:
            tail += f" WHERE {' AND '.join(where)}"
        if flag is None or rows is not None:
            table = db.fetch(self.shape, exprs, tail)
            return table, 0 if flag is None else int(rows or 0) - table.num_rows
        table, flags = db.fetch_checked(self.shape, exprs, tail, flag)
        return table, int(np.count_nonzero(flags))

    def _args(self, db: Db, cols: Columns, condition: str, *,
              blob_safe: bool = False) -> tuple[str, int]:
        """(SQL of the ``args`` column, the number of rows ``condition`` selects)."""
        names = cols.arg_columns()
        counts = db.rows("SELECT count(*)" + "".join(
            f", count(a.{quote(c)})" for c in names) + f" FROM {quote(self.table)} AS a"
            + condition)[0]
        return cols.args(self.extra, dict(zip(names, counts[1:], strict=True)), counts[0],
                         blob_safe=blob_safe), int(counts[0])


@dataclass
class Loaded:
    """Every event of the file the reader understands, plus what ``load`` found."""

    ev: pa.Table = field(default_factory=EV.empty)
    mk: pa.Table = field(default_factory=MK.empty)
    p2p: pa.Table = field(default_factory=P2P.empty)
    gm: pa.Table = field(default_factory=GM.empty)
    domains: list[dict[str, Any]] = field(default_factory=list)
    min_time: int | None = None
    max_time: int | None = None
    has_p2p: bool = False


def _warn(message: str) -> None:
    warnings.warn(message, DataQualityWarning, stacklevel=3)


def _blank_names(table: pa.Table) -> int:
    """Rows of ``table`` whose (dictionary) ``name`` is ''."""
    count = 0
    for chunk in table.column("name").chunks:
        hits = np.flatnonzero(pc.equal(chunk.dictionary, "").to_numpy(zero_copy_only=False))
        if hits.size:
            count += int(np.count_nonzero(np.isin(chunk.indices.to_numpy(), hits)))
    return count


class Side:
    """Small queries on a second read-only ``sqlite3`` connection, in a thread of their
    own, while the caller goes on; ``submit`` gives a function returning the rows (its
    error raised there). With ``threads`` 1 a query runs on ``con`` when its rows are
    asked for, as if it had not been submitted."""

    def __init__(self, con: sqlite3.Connection, uri: str, threads: int,
                 text_factory: Callable[[bytes], str]) -> None:
        self._con, self._uri, self._text = con, uri, text_factory
        self._own: sqlite3.Connection | None = None
        self._pool = ThreadPoolExecutor(max_workers=1) if threads > 1 else None

    def submit(self, sql: str) -> Callable[[], list[Any]]:
        """Start ``sql``; call the result for its rows."""
        if self._pool is None:
            return lambda: self._con.execute(sql).fetchall()
        return self._pool.submit(self._run, sql).result

    def _run(self, sql: str) -> list[Any]:
        if self._own is None:
            self._own = sqlite3.connect(self._uri, uri=True)
            self._own.text_factory = self._text
        return self._own.execute(sql).fetchall()

    def _close_own(self) -> None:
        if self._own is not None:
            self._own.close()

    def close(self) -> None:
        """Wait for the queries started, close the second connection."""
        if self._pool is not None:
            self._pool.submit(self._close_own)
            self._pool.shutdown(wait=True)
            self._pool = None


def load(cat: Catalog, uri: str, threads: int = 1, side: Side | None = None) -> Loaded:
    """Read every event the reader understands (``uri``: the file, read-only;
    ``threads`` connections at a time; ``side`` runs the NVTX domain query while the
    other tables are looked at)."""
    loaded = Loaded()
    side = side if side is not None else Side(cat.con, uri, 1, str)
    sql = _domains_sql(cat)
    domains = side.submit(sql) if sql is not None else None
    reads = [*_device_reads(cat), *_runtime_reads(cat)]
    mpi_tables = [spec for spec in ns.MPI_TABLES if cat.has(spec.name)]
    reads += _nvtx_reads(cat, loaded, domains, mpi_as_nvtx=bool(mpi_tables))
    for spec, category in ((ns.OSRT, "osrt"), *((s, "mpi") for s in ns.MPI_TABLES)):
        cols = cat.check(spec)
        if cols is not None:
            name_col = "nameId" if spec is ns.OSRT else "textId"
            reads.append(_host_read(cols, cols.string(name_col), literal(category),
                                    name_id=name_col))
            if spec is ns.MPI_P2P:
                reads.append(_p2p_read(cols))
                loaded.has_p2p = True
    reads += _gpu_metrics_reads(cat)
    parts, stats = _read_all(cat, uri, reads, threads)
    _report_stats(cat, reads, stats)
    for name, shape in (("ev", EV), ("mk", MK), ("p2p", P2P), ("gm", GM), ("nvtx", NVTX_ROWS)):
        parts[name] = [pa.concat_tables(parts[name]) if parts.get(name) else shape.empty()]
    ev, mk = _split_nvtx(cat, parts["nvtx"][0])
    loaded.ev = _clip_ends(pa.concat_tables([*parts["ev"], ev]), cat)
    loaded.mk = pa.concat_tables([*parts["mk"], mk])
    loaded.p2p = _drop_reversed(parts["p2p"][0], cat, ns.MPI_P2P)
    loaded.gm = parts["gm"][0]
    lows = [pc.min(t[c]).as_py() for t, c in ((loaded.ev, "start"), (loaded.mk, "ts"),
                                              (loaded.gm, "ts"), (loaded.p2p, "start"))]
    highs = [pc.max(t[c]).as_py() for t, c in ((loaded.ev, "end"), (loaded.mk, "ts"),
                                               (loaded.gm, "ts"), (loaded.p2p, "end"))]
    known = [t for t in lows if t is not None]
    loaded.min_time = min(known) if known else None
    known = [t for t in highs if t is not None]
    loaded.max_time = max(known) if known else None
    return loaded


def _report_stats(cat: Catalog, reads: list[Read], stats: list[dict[str, int]]) -> None:
    """Warn about (and note) the rows each table lost to wrong-typed values and the
    names StringIds could not resolve; refuse the file when no name resolves."""
    dropped: dict[str, tuple[Read, dict[str, int]]] = {}
    unresolved: dict[str, tuple[Read, int]] = {}
    for read, counts in zip(reads, stats, strict=True):
        # two reads of one table (MPI_P2P_EVENTS) see the same rows: keep the larger
        if counts["bad_rows"] > dropped.get(read.table, (read, {"bad_rows": 0}))[1]["bad_rows"]:
            dropped[read.table] = (read, counts)
        if counts["unresolved"]:
            unresolved[read.table] = (read, unresolved.get(read.table, (read, 0))[1]
                                      + counts["unresolved"])
    for table, (read, counts) in sorted(dropped.items()):
        spec = read.checks.spec if read.checks is not None else None
        cols = [(k[4:], v) for k, v in counts.items() if k.startswith("bad:") and v]
        report(cat.notes, Note(
            cat.display, f"table {table}",
            f"has {counts['bad_rows']} row(s) with text, a blob or a fraction where an "
            f"integer belongs (rows per column: {', '.join(f'{c} {n}' for c, n in cols)}); "
            "those rows were dropped",
            counts["bad_rows"], spec.categories if spec else (),
            tables=spec.tables if spec else ()), stacklevel=4)
    _report_text(cat, reads, stats)
    total = sum(n for _read, n in unresolved.values())
    if total and not cat.rows("StringIds"):
        raise CorruptTraceError(cat.display, f"none of the {total} event names can be "
                                "resolved: StringIds is empty; the export is damaged "
                                "(export the report again)")
    for table, (read, n) in sorted(unresolved.items()):
        spec = read.checks.spec if read.checks is not None else None
        report(cat.notes, Note(
            cat.display, f"table {table}",
            f"has {n} row(s) whose name id is not in StringIds; their name is ''", n,
            spec.categories if spec else (), ("name",),
            spec.tables if spec else ()), stacklevel=4)


def _read_all(cat: Catalog, uri: str, reads: list[Read],
              threads: int) -> tuple[dict[str, list[pa.Table]], list[dict[str, int]]]:
    """Run the reads (large tables in rowid ranges when ``threads`` > 1, the largest
    pieces first): (result name -> tables, in the order of ``reads`` and rowids; the
    counts of each read, summed over its pieces)."""
    pieces: list[tuple[int, Read, tuple[int, int] | None]] = []
    spans = {r.table: _rowid_span(cat, r.table) if threads > 1 else None for r in reads}
    row_cost = {t: _ROW_COST_BASE + len(cat.columns(t)) for t in spans}
    total = sum((hi - lo + 1) * row_cost[t] for t, (lo, hi) in
                ((t, s) for t, s in spans.items() if s is not None))
    budget = max(1, math.ceil(total / (threads * _PIECES_PER_THREAD)))
    for read in reads:
        span = spans[read.table]
        if span is None:
            pieces.append((0, read, None))
            continue
        lo, hi = span
        # pieces of about equal cost (a wide table's rows cost more), _MIN_PIECE_ROWS at least
        size = max(_MIN_PIECE_ROWS, math.ceil(budget / row_cost[read.table]))
        for start in range(lo, hi + 1, size):
            rows = min(size, hi + 1 - start)
            pieces.append((rows * row_cost[read.table], read,
                           (start, min(start + size - 1, hi))))
    order = sorted(range(len(pieces)), key=lambda i: -pieces[i][0])
    results = run_jobs(uri, {str(i): pieces[i][1].job(pieces[i][2]) for i in order}, threads)
    out: dict[str, list[pa.Table]] = {}
    stats: dict[int, dict[str, int]] = {id(r): {} for r in reads}
    for i, (_size, read, _rowids) in enumerate(pieces):
        out.setdefault(read.result, []).append(results[str(i)][read.result])
        mine = stats[id(read)]
        for key, value in results[str(i)][_STATS].to_pylist()[0].items():
            mine[key] = mine.get(key, 0) + int(value)
    return out, [stats[id(r)] for r in reads]


def _rowid_span(cat: Catalog, table: str) -> tuple[int, int] | None:
    """(min, max) rowid of a table that has rowids, None otherwise or when empty."""
    if {c.lower() for c in cat.columns(table)} & _ROWID_NAMES:
        return None
    try:
        lo, hi = cat.con.execute(  # two subqueries: each is one b-tree seek
            f"SELECT (SELECT min(rowid) FROM {quote(table)}), "
            f"(SELECT max(rowid) FROM {quote(table)})").fetchone()
    except sqlite3.Error:  # a WITHOUT ROWID table
        return None
    return (int(lo), int(hi)) if isinstance(lo, int) and isinstance(hi, int) else None


def _device_read(c: Columns, kind: str, name: str, category: str, joins: str = "",
                 memcpy_kind: str = "NULL", bytes_: str = "NULL", grid: bool = False,
                 device: str = "", lookups: tuple[Lookup, ...] = (),
                 setup: tuple[str, ...] = (), name_ids: tuple[str, ...] = ()) -> Read:
    geometry = ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")
    exprs = {
        "proc": "coalesce(a.globalPid >> 24, -1)", "tid": "NULL", "kind": f"'{kind}'",
        "device": f"coalesce({device or c.col('deviceId')}, -1)",
        "stream": f"coalesce({c.col('streamId')}, -1)", "start": "a.start",
        "end": 'a."end"', "name": name, "category": f"'{category}'",
        "source_category": literal(c.spec.name), "correlation": c.col("correlationId"),
        "bytes": bytes_, "memcpy_kind": memcpy_kind, "args": "",
    }
    for short, column in zip(_GRID, geometry, strict=True):
        exprs[short] = c.col(column) if grid else "NULL"
    return Read("ev", EV, c.spec.name, exprs, joins, lookups=lookups, setup=setup, args=c,
                checks=c, name_ids=name_ids)


def _device_reads(cat: Catalog) -> list[Read]:
    reads: list[Read] = []
    kernel = cat.check(ns.KERNEL)
    if kernel is not None:
        name_expr = ", ".join(
            [kernel.string(c) for c in ("demangledName", "shortName", "mangledName")]
            + (["CASE typeof(a.name) WHEN 'integer' THEN (SELECT value FROM StringIds "
                "WHERE id = a.name) ELSE a.name END"] if kernel.has("name") else [])
        )
        ids = tuple(c for c in ("demangledName", "shortName", "mangledName") if kernel.has(c))
        reads.append(_device_read(kernel, STREAM, f"coalesce({name_expr}, '')", "kernel",
                                  grid=True, name_ids=ids))
    memcpy = cat.check(ns.MEMCPY)
    if memcpy is not None:
        kinds = ns.enum_labels(cat, "ENUM_CUDA_MEMCPY_OPER", ns.MEMCPY_LABELS)
        rows = [(code, label, ns.memcpy_short(code, name))
                for code, (name, label) in kinds.items()]
        reads.append(_device_read(
            memcpy, STREAM,
            "'[CUDA memcpy ' || coalesce(k.label, 'kind ' || a.copyKind, 'Unknown') || ']'",
            "memcpy", "LEFT JOIN temp.ta_copykind AS k ON k.id = " + memcpy.col("copyKind"),
            memcpy_kind="k.short", bytes_=memcpy.col("bytes"),
            lookups=(Lookup("ta_copykind", ("id", "label", "short"), rows),)))
    memset = cat.check(ns.MEMSET)
    if memset is not None:
        reads.append(_device_read(memset, STREAM, "'[CUDA memset]'", "memset",
                                  bytes_=memset.col("bytes")))
    sync = cat.check(ns.SYNC)
    if sync is not None:
        reads.append(_sync_read(cat, sync))
    return reads


def _sync_read(cat: Catalog, sync: Columns) -> Read:
    labels = ns.enum_labels(cat, "ENUM_CUPTI_SYNC_TYPE", ns.SYNC_LABELS)
    types = Lookup("ta_synctype", ("id", "label"), [(k, v[1]) for k, v in labels.items()])
    join = "LEFT JOIN temp.ta_synctype AS y ON y.id = " + sync.col("syncType")
    device = ""
    contexts = _context_devices(cat) if sync.has("contextId") else None
    if contexts is not None:
        join += (" LEFT JOIN temp.ta_ctx AS x ON x.proc = a.globalPid >> 24 "
                 "AND x.ctx = a.contextId")
        device = f"coalesce(x.device, {sync.col('deviceId')})"
    return _device_read(sync, DEVICE, "coalesce(y.label, 'Synchronization')", "sync", join,
                        device=device, lookups=(types,),
                        setup=(contexts,) if contexts is not None else ())


def _context_devices(cat: Catalog) -> str | None:
    """SQL creating ``ta_ctx``: (process, contextId) -> device, from kernel/memcpy/memset
    rows. The real exports write SYNCHRONIZATION.deviceId = 0 for every row (the default
    value), also for the process whose context and streams are on device 1."""
    integers = " AND ".join(f"typeof({c}) = 'integer'"
                            for c in ("globalPid", "contextId", "deviceId"))
    parts = [f"SELECT globalPid >> 24 AS proc, contextId AS ctx, deviceId AS device FROM "
             f"{spec.name} WHERE {integers}" for spec in (ns.KERNEL, ns.MEMCPY, ns.MEMSET)
             if cat.has(spec.name)
             and {"globalPid", "contextId", "deviceId"} <= set(cat.columns(spec.name))]
    if not parts:
        return None
    return ("CREATE TEMP TABLE ta_ctx AS SELECT proc, ctx, min(device) AS device "
            f"FROM ({' UNION '.join(parts)}) GROUP BY 1, 2")


def _host_exprs(c: Columns, name: str, category: str) -> dict[str, str]:
    exprs = {
        "proc": "coalesce(a.globalTid >> 24, -1)", "tid": "coalesce(a.globalTid & 16777215, -1)",
        "kind": f"'{HOST}'", "device": "NULL", "stream": "NULL", "start": "a.start",
        "end": 'a."end"', "name": f"coalesce({name}, '')", "category": category,
        "source_category": literal(c.spec.name), "correlation": c.col("correlationId"),
        "bytes": "NULL", "memcpy_kind": "NULL", "args": "",
    }
    exprs.update({g: "NULL" for g in _GRID})
    return exprs


def _host_read(c: Columns, name: str, category: str, joins: str = "",
               lookups: tuple[Lookup, ...] = (), name_id: str = "") -> Read:
    return Read("ev", EV, c.spec.name, _host_exprs(c, name, category), joins,
                lookups=lookups, args=c, checks=c,
                name_ids=(name_id,) if name_id and c.has(name_id) else ())


def _runtime_reads(cat: Catalog) -> list[Read]:
    """CUDA runtime and driver calls; names without the ``_v<version>`` suffix (the full
    name stays in args.nameId)."""
    runtime = cat.check(ns.RUNTIME)
    if runtime is None:
        return []
    rows: list[tuple[Any, ...]] = []
    if runtime.has("nameId"):
        for name_id, value in cat.con.execute(
            "SELECT DISTINCT a.nameId, s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME AS a "
            "LEFT JOIN StringIds AS s ON s.id = a.nameId WHERE typeof(a.nameId) = 'integer'"
        ):
            text = "" if value is None else value.decode("utf-8", "replace") \
                if isinstance(value, bytes) else str(value)
            rows.append((name_id, _API_VERSION.sub("", text), int(bool(_DRIVER_API.match(text)))))
    join = "LEFT JOIN temp.ta_api AS f ON f.id = " + runtime.col("nameId")
    category = (f"CASE WHEN {runtime.col('eventClass')} = {_DRIVER_EVENT_CLASS} "
                "OR f.driver = 1 THEN 'driver' ELSE 'runtime' END")
    return [_host_read(runtime, "f.name", category, join,
                       (Lookup("ta_api", ("id", "name", "driver"), rows),), "nameId")]


def _domains_sql(cat: Catalog) -> str | None:
    """The query of the NVTX domains (process, domainId, name) when NVTX_EVENTS has a
    domainId column (read from its columns as they are, without ``Catalog.check``)."""
    if not cat.has(ns.NVTX.name):
        return None
    present = cat.columns(ns.NVTX.name)
    if "domainId" not in present:
        return None
    text_id = f"(SELECT value FROM StringIds WHERE id = a.{quote('textId')})" \
        if "textId" in present else "NULL"  # as Columns.string
    return ("SELECT a.globalTid >> 24 AS proc, a.domainId, "
            f"min(coalesce(a.text, {text_id})) AS name FROM NVTX_EVENTS AS a "
            f"WHERE a.eventType = {ns.nvtx_codes(cat)['NvtxDomainCreate']} AND "
            "typeof(a.domainId) = 'integer' GROUP BY 1, 2 ORDER BY 1, 2")


def _nvtx_reads(cat: Catalog, loaded: Loaded, domains: Callable[[], list[Any]] | None, *,
                mpi_as_nvtx: bool) -> list[Read]:
    """NVTX ranges, marks and rows of unknown type of every domain in one pass (told
    apart by ``_split_nvtx``); fills ``loaded.domains`` (``domains``: the rows of
    ``_domains_sql``).

    A range in the domain named ``MPI`` (how nsys traced MPI before the MPI_* tables)
    is category ``mpi`` unless the file also has MPI_* tables.
    """
    nvtx = cat.check(ns.NVTX)
    if nvtx is None:
        return []
    codes = ns.nvtx_codes(cat)
    text = f"coalesce(a.text, {nvtx.string('textId')})"
    lookups: tuple[Lookup, ...] = ()
    join, domain, category = "", "NULL", "'nvtx'"
    if nvtx.has("domainId"):
        assert domains is not None  # _domains_sql gave a query: the same columns
        rows = domains()
        loaded.domains = [{"process": p, "domainId": d, "name": n} for p, d, n in rows]
        if any(n is not None for _p, _d, n in rows):  # else the domain is always NULL
            lookups = (Lookup("ta_domain", ("proc", "domainId", "name"), rows),)
            join = ("LEFT JOIN temp.ta_domain AS d ON d.proc = a.globalTid >> 24 "
                    "AND d.domainId = a.domainId")
            domain = "d.name"
            if not mpi_as_nvtx and any(n == "MPI" for _p, _d, n in rows):
                category = f"CASE WHEN {domain} = 'MPI' THEN 'mpi' ELSE 'nvtx' END"
    exprs = _host_exprs(nvtx, text, category)
    not_events = ", ".join(str(codes[k]) for k in ns.NVTX_NOT_EVENTS)
    return [Read("nvtx", NVTX_ROWS, ns.NVTX.name, {**exprs, "eventType": "a.eventType"},
                 join, f"a.eventType NOT IN ({not_events})", lookups, args=nvtx,
                 extra=(("domain", domain),), checks=nvtx,
                 name_ids=("textId",) if nvtx.has("textId") else ())]


def _split_nvtx(cat: Catalog, rows: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(ranges, marks) of the NVTX rows; warns about the rows of other types."""
    codes = ns.nvtx_codes(cat)
    is_range = pc.is_in(rows["eventType"], pa.array([codes[k] for k in ns.NVTX_RANGES], _I))
    is_mark = pc.is_in(rows["eventType"], pa.array([codes[k] for k in ns.NVTX_MARKS], _I))
    other = pc.invert(pc.or_(is_range, is_mark))
    if pc.any(other).as_py():
        unread = pa.table({"eventType": rows["eventType"].filter(other)}).group_by(
            "eventType").aggregate([("eventType", "count")]).sort_by("eventType")
        for event_type, count in zip(*(c.to_pylist() for c in unread.columns), strict=True):
            _warn(f"{cat.display}: {count} NVTX_EVENTS row(s) of eventType {event_type} "
                  "not read (not a range or a mark)")
    ranges = rows if pc.all(is_range).as_py() else rows.filter(is_range)
    marks = rows.filter(is_mark)
    return (ranges.drop_columns(["eventType"]),
            pa.table({"proc": marks["proc"], "tid": marks["tid"], "ts": marks["start"],
                      "name": marks["name"], "args": marks["args"]}))


def _p2p_read(c: Columns) -> Read:
    comm = next((c.col(n) for n in ("commHandle", "communicator") if c.has(n)), "NULL")
    exprs = {"proc": "coalesce(a.globalTid >> 24, -1)", "start": "a.start", "end": 'a."end"',
             "name": c.string("textId"), "remote": c.col("remoteRank"),
             "bytes": c.col("size"), "tag": c.col("tag"), "comm": f"CAST({comm} AS TEXT)"}
    return Read("p2p", P2P, ns.MPI_P2P.name, exprs, checks=c)


def _gpu_metrics_reads(cat: Catalog) -> list[Read]:
    gm = cat.check(ns.GPU_METRICS)
    if gm is None:
        return []
    info = "TARGET_INFO_GPU_METRICS"
    name, join = "NULL", ""
    if cat.has(info) and {"metricId", "metricName"} <= set(cat.columns(info)):
        on = "i.metricId = a.metricId"
        if "typeId" in cat.columns(info):
            on += " AND i.typeId = a.typeId"
        join = (f"LEFT JOIN (SELECT * FROM {info} GROUP BY "
                f"{'typeId, ' if 'typeId' in cat.columns(info) else ''}metricId) AS i ON {on}")
        name = "i.metricName"
    exprs = {"ts": "a.timestamp", "device": "a.typeId & 255",
             "name": f"coalesce({name}, 'metric ' || a.metricId)", "value": gm.col("value")}
    return [Read("gm", GM, ns.GPU_METRICS.name, exprs, join, checks=gm)]


def _clip_ends(ev: pa.Table, cat: Catalog) -> pa.Table:
    """Rows without a start and intervals ending before they start are dropped;
    intervals without an end get zero duration (each with a warning and a note)."""
    no_start = pc.is_null(ev["start"])
    if pc.any(no_start).as_py():
        _count_report(ev, no_start, cat, "without a start time; dropped", ())
        ev = ev.filter(pc.invert(no_start))
    reversed_ = pc.fill_null(pc.less(ev["end"], ev["start"]), False)
    if pc.any(reversed_).as_py():
        _count_report(ev, reversed_, cat, "ending before they start; dropped", ())
        ev = ev.filter(pc.invert(reversed_))
    no_end = pc.is_null(ev["end"])
    if pc.any(no_end).as_py():
        _count_report(ev, no_end, cat, "without an end; kept with zero duration",
                      ("end_ns", "dur_ns"))
        index = ev.schema.get_field_index("end")
        ev = ev.set_column(index, "end", pc.coalesce(ev["end"], ev["start"]))
    return ev


def _report_text(cat: Catalog, reads: list[Read], stats: list[dict[str, int]]) -> None:
    """Warn about (and note) the rows whose text was not UTF-8, per table."""
    bad: dict[str, tuple[Read, int]] = {}
    for read, counts in zip(reads, stats, strict=True):
        if counts["bad_text"] > bad.get(read.table, (read, 0))[1]:
            bad[read.table] = (read, counts["bad_text"])
    for table, (read, n) in sorted(bad.items()):
        spec = read.checks.spec if read.checks is not None else None
        report(cat.notes, Note(
            cat.display, f"table {table}", f"has {n} row(s) with text that is not UTF-8 "
            "(names or args); shown with U+FFFD", n, spec.categories if spec else (),
            ("name", "args"), spec.tables if spec else ()), stacklevel=5)


def _drop_reversed(p2p: pa.Table, cat: Catalog, spec: ns.SourceTable) -> pa.Table:
    """MPI point-to-point calls without a start, or ending before they start, dropped."""
    bad = pc.fill_null(pc.less(p2p["end"], p2p["start"]), False)
    bad = pc.or_(bad, pc.is_null(p2p["start"]))
    n = int(pc.sum(bad).as_py() or 0)
    if n:
        report(cat.notes, Note(cat.display, f"table {spec.name}",
                               f"has {n} point-to-point call(s) without a start or ending "
                               "before they start; not turned into messages", n,
                               tables=("messages",)), stacklevel=4)
        p2p = p2p.filter(pc.invert(bad))
    return p2p


_SPECS = {spec.name: spec for spec in (ns.KERNEL, ns.MEMCPY, ns.MEMSET, ns.SYNC, ns.RUNTIME,
                                       ns.NVTX, ns.OSRT, *ns.MPI_TABLES)}


def _count_report(ev: pa.Table, mask: pa.ChunkedArray, cat: Catalog, what: str,
                  columns: tuple[str, ...]) -> None:
    """Warn and note the rows of ``mask`` per source table; ``columns``: the canonical
    columns lost when the rows are kept, () when the rows are dropped."""
    counts = pc.value_counts(pc.filter(ev["source_category"], mask).cast(_S).combine_chunks())
    for item in sorted(counts.to_pylist(), key=lambda c: str(c["values"])):
        table, n = str(item["values"]), int(item["counts"])
        spec = _SPECS.get(table)
        report(cat.notes, Note(cat.display, f"table {table}", f"has {n} row(s) {what}", n,
                               spec.categories if spec else (), columns,
                               spec.tables if spec else ("intervals",)), stacklevel=5)
