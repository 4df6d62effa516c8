"""The Nsight Systems export tables the nsys reader reads, declared as data, and the
run-time column check (``PRAGMA table_info``) that turns them into SQL.

The export schema changes between nsys releases and tables exist only when they hold
data, so every query is built from the columns the file really has: a missing expected
column becomes ``NULL`` (with a DataQualityWarning naming file, table and column), and
columns the reader does not map go into the ``args`` JSON text (unknown ones with a
warning), so nothing the file holds is dropped silently. Every missing column is also
kept as a ``quality.Note`` (``Catalog.notes``) for the store's metadata.

SQLite is dynamically typed: an INTEGER column may hold text. ``checked`` lists the
numeric columns whose values place an event (times, ids, sizes); ``Columns.bad_flag``
is the SQL flag of a row with a value of another type in one of them, so the reader can
drop those rows and say how many, per column (``nsys_load.py``).
"""

from __future__ import annotations

import re
import sqlite3
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from traceatlas.errors import DataQualityWarning
from traceatlas.io.quality import Note, report


@dataclass(frozen=True)
class SourceTable:
    """One nsys table: the columns the reader maps and those it knows.

    ``required`` columns are needed to place an event at all (missing: the table is not
    read, with a warning); ``expected`` ones feed canonical columns (missing: NULL, with a
    warning); ``known`` ones exist in some export version and go to ``args`` silently;
    ``consumed`` columns are not repeated in ``args``; ``strings`` hold StringIds ids
    that ``args`` resolves to text; ``enums`` map a column to an ``ENUM_*`` table whose
    label ``args`` shows instead of the code. ``checked`` numeric columns must hold
    integers (or NULL; ``REAL_OK`` ones also reals): rows with any other value are
    dropped. ``categories`` and ``tables`` are the canonical categories and tables the
    rows become (for the notes of what was lost).
    """

    name: str
    required: tuple[str, ...]
    expected: tuple[str, ...] = ()
    known: tuple[str, ...] = ()
    consumed: frozenset[str] = frozenset()
    strings: frozenset[str] = frozenset()
    enums: dict[str, str] = field(default_factory=dict)
    checked: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    tables: tuple[str, ...] = ("intervals",)


_DEVICE_COMMON = ("start", "end", "deviceId", "streamId", "correlationId", "globalPid")
_DEVICE_CONSUMED = frozenset(_DEVICE_COMMON)
_DEVICE_CHECKED = (*_DEVICE_COMMON, "contextId")
_GRID = ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")
_HOST_CHECKED = ("start", "end", "globalTid")
REAL_OK = frozenset({"value"})
"""Checked columns that may also hold reals (GPU metric values)."""
CANONICAL: dict[str, tuple[str, ...]] = {
    "start": ("start_ns",), "end": ("end_ns", "dur_ns"), "timestamp": ("ts_ns",),
    "correlationId": ("correlation",), "bytes": ("bytes",), "size": ("bytes",),
    "deviceId": ("device",), "streamId": ("stream",), "typeId": ("device",),
    "demangledName": ("name",), "shortName": ("name",), "nameId": ("name",),
    "textId": ("name",), "text": ("name",), "metricId": ("name",), "syncType": ("name",),
    "copyKind": ("name", "memcpy_kind"), "eventClass": ("category",),
    "domainId": ("category",), "value": ("value",), "remoteRank": ("src_rank", "dst_rank"),
    "tag": ("tag",), **{g: ("grid",) for g in ("gridX", "gridY", "gridZ")},
    **{b: ("block",) for b in ("blockX", "blockY", "blockZ")},
}
"""nsys column -> the canonical columns it gives (for notes about a missing column)."""

KERNEL = SourceTable(
    "CUPTI_ACTIVITY_KIND_KERNEL",
    required=("start", "end", "globalPid"),
    expected=(*_DEVICE_COMMON, "demangledName", "shortName", *_GRID, "contextId",
              "registersPerThread", "staticSharedMemory", "dynamicSharedMemory"),
    known=("greenContextId", "mangledName", "launchType", "cacheConfig",
           "localMemoryPerThread", "localMemoryTotal", "gridId", "sharedMemoryExecuted",
           "graphNodeId", "sharedMemoryLimitConfig", "qmdBulkReleaseDone", "qmdPreexitDone",
           "qmdLastCtaDone", "graphId", "clusterX", "clusterY", "clusterZ",
           "clusterSchedulingPolicy", "maxPotentialClusterSize", "maxActiveClusters",
           "sharedMemoryRequestedPercentage", "tensorSizeMinusOneElements", "name"),
    consumed=_DEVICE_CONSUMED | {"demangledName", *_GRID},
    strings=frozenset({"shortName"}),
    enums={"launchType": "ENUM_CUDA_KERNEL_LAUNCH_TYPE",
           "cacheConfig": "ENUM_CUDA_FUNC_CACHE_CONFIG"},
    checked=(*_DEVICE_CHECKED, *_GRID), categories=("kernel", "comm_kernel"),
)

MEMCPY = SourceTable(
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    required=("start", "end", "globalPid"),
    expected=(*_DEVICE_COMMON, "bytes", "copyKind", "contextId"),
    known=("greenContextId", "deprecatedSrcId", "srcKind", "dstKind", "srcDeviceId",
           "srcContextId", "dstDeviceId", "dstContextId", "migrationCause", "graphNodeId",
           "virtualAddress", "copyCount", "name"),
    consumed=_DEVICE_CONSUMED | {"bytes"},
    enums={"copyKind": "ENUM_CUDA_MEMCPY_OPER", "srcKind": "ENUM_CUDA_MEM_KIND",
           "dstKind": "ENUM_CUDA_MEM_KIND", "migrationCause": "ENUM_CUDA_UNIF_MEM_MIGRATION"},
    checked=(*_DEVICE_CHECKED, "bytes"), categories=("memcpy",),
)

MEMSET = SourceTable(
    "CUPTI_ACTIVITY_KIND_MEMSET",
    required=("start", "end", "globalPid"),
    expected=(*_DEVICE_COMMON, "bytes", "value", "contextId"),
    known=("greenContextId", "graphNodeId", "memKind", "name"),
    consumed=_DEVICE_CONSUMED | {"bytes"},
    enums={"memKind": "ENUM_CUDA_MEM_KIND"},
    checked=(*_DEVICE_CHECKED, "bytes"), categories=("memset",),
)

SYNC = SourceTable(
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    required=("start", "end", "globalPid"),
    expected=(*_DEVICE_COMMON, "syncType", "contextId"),
    known=("greenContextId", "deprecatedSyncType", "eventId", "eventSyncId", "name"),
    consumed=_DEVICE_CONSUMED,
    enums={"syncType": "ENUM_CUPTI_SYNC_TYPE"},
    checked=_DEVICE_CHECKED, categories=("sync",),
)

RUNTIME = SourceTable(
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    required=("start", "end", "globalTid"),
    expected=("correlationId", "nameId", "eventClass"),
    known=("returnValue", "callchainId", "name"),
    consumed=frozenset({"start", "end", "globalTid", "correlationId"}),
    strings=frozenset({"nameId"}),
    checked=(*_HOST_CHECKED, "correlationId"), categories=("runtime", "driver"),
)

NVTX = SourceTable(
    "NVTX_EVENTS",
    required=("start", "globalTid", "eventType"),
    expected=("end", "text", "textId", "domainId"),
    known=("rangeId", "category", "color", "endGlobalTid", "uint64Value", "int64Value",
           "doubleValue", "uint32Value", "int32Value", "floatValue", "jsonTextId",
           "jsonText", "binaryData"),
    consumed=frozenset({"start", "end", "globalTid", "text", "textId"}),
    strings=frozenset({"jsonTextId"}),
    checked=(*_HOST_CHECKED, "eventType"), categories=("nvtx", "step", "mpi"),
    tables=("intervals", "instants"),
)

OSRT = SourceTable(
    "OSRT_API",
    required=("start", "end", "globalTid"),
    expected=("nameId",),
    known=("eventClass", "returnValue", "nestingLevel", "callchainId", "correlationId"),
    consumed=frozenset({"start", "end", "globalTid", "nameId"}),
    checked=_HOST_CHECKED, categories=("osrt",),
)

_MPI_KNOWN = ("tag", "remoteRank", "size", "recvSize", "rootRank", "commHandle",
              "collSendSize", "collRecvSize", "requestHandle", "sourceRank", "destRank")


def _mpi(name: str, checked: tuple[str, ...] = _HOST_CHECKED,
         tables: tuple[str, ...] = ("intervals",)) -> SourceTable:
    return SourceTable(
        name,
        required=("start", "end", "globalTid"),
        expected=("textId",),
        known=_MPI_KNOWN,
        consumed=frozenset({"start", "end", "globalTid", "textId"}),
        checked=checked, categories=("mpi",), tables=tables,
    )


MPI_P2P = _mpi("MPI_P2P_EVENTS", (*_HOST_CHECKED, "remoteRank", "size", "tag"),
               ("intervals", "messages"))
MPI_TABLES: tuple[SourceTable, ...] = (
    MPI_P2P, _mpi("MPI_COLLECTIVES_EVENTS"), _mpi("MPI_START_WAIT_EVENTS"),
    _mpi("MPI_OTHER_EVENTS"),
)

GPU_METRICS = SourceTable(
    "GPU_METRICS", required=("timestamp", "typeId", "metricId"), expected=("value",),
    checked=("timestamp", "typeId", "metricId", "value"), tables=("counters",),
)

READ_TABLES: frozenset[str] = frozenset(
    t.name for t in (KERNEL, MEMCPY, MEMSET, SYNC, RUNTIME, NVTX, OSRT, *MPI_TABLES,
                     GPU_METRICS)
)
"""Event tables the reader turns into canonical rows (others are listed in metadata)."""

NVTX_EVENT_TYPES: dict[str, int] = {
    "NvtxMark": 34, "NvtxThread": 39, "NvtxPushPopRange": 59, "NvtxStartEndRange": 60,
    "NvtxtMark": 65, "NvtxtPushPopRange": 70, "NvtxtStartEndRange": 71,
    "NvtxDomainCreate": 75, "NvtxCategory": 33, "NvtxtCategory": 64,
}
"""NVTX_EVENTS.eventType codes (ENUM_NSYS_EVENT_TYPE of the real exports; the file's own
enum table wins when it has one)."""
NVTX_RANGES = ("NvtxPushPopRange", "NvtxStartEndRange", "NvtxtPushPopRange",
               "NvtxtStartEndRange")
NVTX_MARKS = ("NvtxMark", "NvtxtMark")
NVTX_NOT_EVENTS = ("NvtxThread", "NvtxDomainCreate", "NvtxCategory", "NvtxtCategory")

MEMCPY_LABELS: dict[int, str] = {
    0: "Unknown", 1: "Host-to-Device", 2: "Device-to-Host", 3: "Host-to-Array",
    4: "Array-to-Host", 5: "Array-to-Array", 6: "Array-to-Device", 7: "Device-to-Array",
    8: "Device-to-Device", 9: "Host-to-Host", 10: "Peer-to-Peer",
    11: "Unified Host-to-Device", 12: "Unified Device-to-Host",
    13: "Unified Device-to-Device",
}
"""CUPTI copyKind -> label (ENUM_CUDA_MEMCPY_OPER of the real exports), when the file
has no enum table."""
SYNC_LABELS: dict[int, str] = {
    0: "Unknown sync", 1: "Event sync", 2: "Stream wait sync", 3: "Stream sync",
    4: "Context sync",
}
"""CUPTI syncType -> label (ENUM_CUPTI_SYNC_TYPE), when the file has no enum table."""

_JSON_OBJECT_PAIRS = 60  # SQLite before 3.48 caps function arguments at 127


def quote(name: str) -> str:
    """An SQL identifier in double quotes."""
    return '"' + name.replace('"', '""') + '"'


def literal(value: str) -> str:
    """An SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


class Catalog:
    """Tables and columns of one export, checked against the declarations above."""

    def __init__(self, con: sqlite3.Connection, display: str) -> None:
        self.con = con
        self.display = display
        rows = con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        self.tables: frozenset[str] = frozenset(str(r[0]) for r in rows)
        self._columns: dict[str, dict[str, str]] = {}
        self.notes: list[Note] = []
        """What was lost reading this file (kept in the store's metadata)."""

    def has(self, table: str) -> bool:
        """True when the export has the table (tables are created lazily)."""
        return table in self.tables

    def columns(self, table: str) -> dict[str, str]:
        """Column name -> declared type (upper case) of ``table``; empty if absent."""
        if table not in self._columns:
            info = self.con.execute(f"PRAGMA table_info({quote(table)})").fetchall()
            self._columns[table] = {str(r[1]): str(r[2] or "").upper() for r in info}
        return self._columns[table]

    def rows(self, table: str) -> int:
        """Row count of ``table`` (0 when absent)."""
        if not self.has(table):
            return 0
        return int(self.con.execute(f"SELECT count(*) FROM {quote(table)}").fetchone()[0])

    def check(self, spec: SourceTable) -> Columns | None:
        """The columns of ``spec`` in this file, warning about missing and unknown ones;
        None when the table is absent or lacks a required column (then it is not read)."""
        if not self.has(spec.name):
            return None
        present = self.columns(spec.name)
        missing = [c for c in spec.required if c not in present]
        if missing:
            rows = self.rows(spec.name)
            if rows:
                report(self.notes, Note(
                    self.display, f"table {spec.name}",
                    f"lacks column(s) {', '.join(missing)}, so its {rows} row(s) were not "
                    "read", rows, spec.categories, tables=spec.tables), stacklevel=4)
            return None
        for col in spec.expected:
            if col not in present:
                report(self.notes, Note(
                    self.display, f"table {spec.name}",
                    f"has no column {col}; the values it gives are null",
                    self.rows(spec.name), spec.categories, CANONICAL.get(col, ()),
                    spec.tables), stacklevel=4)
        known = {*spec.required, *spec.expected, *spec.known}
        unknown = [c for c in present if c not in known]
        if unknown:
            _warn(f"{self.display}: table {spec.name} has unknown column(s) "
                  f"{', '.join(unknown)}; kept as-is in args")
        return Columns(spec, present, self)


class Columns:
    """SQL expressions over one checked table (alias ``a``)."""

    def __init__(self, spec: SourceTable, present: dict[str, str], catalog: Catalog) -> None:
        self.spec = spec
        self.present = present
        self.catalog = catalog
        # built here, with the catalog's connection: ``args`` may run in other threads
        self._members = {c: self._arg_value(c) for c in self.arg_columns()}
        self._blob_safe = {c: (_no_blob(v, f"a.{quote(c)}"), absent)
                           for c, (v, absent) in self._members.items()}

    def has(self, col: str) -> bool:
        """True when the file has the column."""
        return col in self.present

    def checked(self) -> list[str]:
        """The ``checked`` columns of the spec that the file has."""
        return [c for c in self.spec.checked if c in self.present]

    def _wrong(self, col: str) -> str:
        """SQL true when ``col`` holds a value of the wrong type, NULL when it is NULL.

        ``x = CAST(x AS INTEGER)`` holds for integers and numeric text only (text such
        as ``'12abc'``, blobs and reals with a fraction fail it); it costs SQLite less
        than ``typeof`` (measured: 0.15 s instead of 0.23 s for 671 k NVTX rows).
        """
        ref = f"a.{quote(col)}"
        return f"(({ref} = CAST({ref} AS {'REAL' if col in REAL_OK else 'INTEGER'})) IS 0)"

    def bad_flag(self) -> str | None:
        """SQL: 1 when a checked column holds a value of the wrong type (text, a blob,
        or a real where an integer belongs), else 0; None when nothing is checked."""
        cols = self.checked()
        if not cols:
            return None
        good = " AND ".join(f"a.{quote(c)} = CAST(a.{quote(c)} AS "
                            f"{'REAL' if c in REAL_OK else 'INTEGER'})" for c in cols)
        return f"(({good}) IS 0)"

    def bad_counts(self) -> str:
        """SQL select list: per checked column, the rows holding a wrong-typed value."""
        return ", ".join(f"sum({self._wrong(c)})" for c in self.checked())

    def col(self, col: str) -> str:
        """``a."col"``, or ``NULL`` when the file lacks it (already warned about)."""
        return f"a.{quote(col)}" if col in self.present else "NULL"

    def string(self, col: str) -> str:
        """The StringIds text of id column ``col`` (NULL when absent)."""
        if col not in self.present:
            return "NULL"
        return f"(SELECT value FROM StringIds WHERE id = a.{quote(col)})"

    def _arg_value(self, col: str) -> tuple[str, str]:
        """(SQL value, SQL condition under which the member is left out)."""
        ref = f"a.{quote(col)}"
        absent = f"{ref} IS NULL"
        if col in self.spec.strings:
            return f"coalesce({self.string(col)}, {ref})", absent
        enum = self.spec.enums.get(col)
        if enum and self.catalog.has(enum) and {"id", "label"} <= set(
            self.catalog.columns(enum)
        ):
            # inline only for an INTEGER column: comparing a column without affinity
            # to the enum's id converts text such as '2'; a literal would not
            labels = _enum_case(self.catalog, enum) if self.present[col] == "INTEGER" else None
            if labels is not None:
                return (f"CASE {ref} {labels}ELSE {ref} END" if labels else ref), absent
            return f"coalesce((SELECT label FROM {quote(enum)} WHERE id = {ref}), {ref})", absent
        if col == "jsonText":
            # as json_patch('{}', ...) merges it: null members of objects dropped, a JSON
            # null left out
            return (f"CASE WHEN json_valid({ref}) THEN json_patch('{{}}', json({ref})) "
                    f"ELSE {ref} END",
                    f"{ref} IS NULL OR CASE WHEN json_valid({ref}) THEN json_type({ref}) = 'null' "
                    "ELSE 0 END")
        if self.present[col] in ("INTEGER", "TEXT", "REAL"):
            return ref, absent
        return f"CASE typeof({ref}) WHEN 'blob' THEN hex({ref}) ELSE {ref} END", absent

    def arg_columns(self) -> list[str]:
        """The columns that go into ``args``."""
        return [c for c in self.present if c not in self.spec.consumed]

    def args(self, extra: Iterable[tuple[str, str]] = (),
             non_null: Mapping[str, int] | None = None, rows: int = 0, *,
             blob_safe: bool = False) -> str:
        """JSON object text of every column not mapped to a canonical column, plus
        ``extra`` (key, SQL expression) pairs; null members are left out.

        The text is what ``json_patch('{}', json_object(...))`` gives; SQLite builds it
        faster by concatenating ``json_quote`` of each value present. ``non_null``
        (column -> count of non-null values among the ``rows`` rows read) lets it skip
        the columns null in every row and use one ``json_object`` when every member is
        present in every row.
        """
        members: list[tuple[str, str, str | None]] = []  # key, value, "left out" test
        for col in self.arg_columns():
            value, null_test = (self._blob_safe if blob_safe else self._members)[col]
            count = None if non_null is None else non_null.get(col)
            if count == 0:
                continue
            always = count is not None and count == rows and col != "jsonText"
            members.append((col, value, None if always else null_test))
        members += [(k, f"CASE typeof({v}) WHEN 'blob' THEN hex({v}) ELSE {v} END"
                     if blob_safe else v, f"({v}) IS NULL") for k, v in extra if v != "NULL"]
        if not members:
            return "'{}'"
        if all(a is None for _k, _v, a in members) and len(members) <= _JSON_OBJECT_PAIRS:
            return f"json_object({', '.join(f'{literal(k)}, {v}' for k, v, _a in members)})"
        parts = []
        for key, value, absent in members:
            member = f"',' || json_quote({literal(key)}) || ':' || json_quote({value})"
            parts.append(member if absent is None else
                         f"CASE WHEN {absent} THEN '' ELSE {member} END")
        return f"('{{' || substr({' || '.join(parts)}, 2) || '}}')"


_ENUM_CASE_ROWS = 64
"""Largest ENUM_* table whose labels ``Columns.args`` writes inline as a CASE."""


def _enum_case(cat: Catalog, enum: str) -> str | None:
    """``WHEN id THEN 'label' ...`` for every row of ``enum`` with a label: the same
    value as ``coalesce((SELECT label FROM enum WHERE id = ref), ref)`` without a
    look-up per row. None (use the look-up) unless the table is small, its ``id`` is
    declared INTEGER and holds distinct integers, and every label is NULL or UTF-8 text
    without NUL."""
    if cat.columns(enum).get("id") != "INTEGER":
        return None
    rows = cat.con.execute(
        f"SELECT id, typeof(id), hex(label), typeof(label) FROM {quote(enum)} "
        f"LIMIT {_ENUM_CASE_ROWS + 1}").fetchall()
    if len(rows) > _ENUM_CASE_ROWS or len({r[0] for r in rows}) != len(rows):
        return None
    parts = []
    for code, code_type, label_hex, label_type in rows:
        if code_type != "integer" or label_type not in ("text", "null"):
            return None
        if label_type == "null":
            continue  # coalesce falls back to the code, as the ELSE does
        try:
            label = bytes.fromhex(str(label_hex)).decode("utf-8")
        except (UnicodeDecodeError, ValueError):
            return None
        if "\x00" in label:
            return None
        parts.append(f"WHEN {int(code)} THEN {literal(label)} ")
    return "".join(parts)


def _no_blob(value: str, ref: str) -> str:
    """``value`` (SQL over column ``ref``) with blobs, in the column or in the value, as
    hex text: JSON cannot hold a blob, and a damaged file may have one anywhere."""
    return (f"CASE WHEN typeof({ref}) = 'blob' THEN hex({ref}) ELSE (CASE typeof({value}) "
            f"WHEN 'blob' THEN hex({value}) ELSE {value} END) END")


def enum_labels(cat: Catalog, table: str,
                defaults: dict[int, str]) -> dict[int, tuple[str, str]]:
    """code -> (enum name, label) from an ENUM_* table, else ("", default label)."""
    out = {code: ("", label) for code, label in defaults.items()}
    if cat.has(table) and {"id", "name", "label"} <= set(cat.columns(table)):
        for code, name, label in cat.con.execute(
            f"SELECT id, name, label FROM {quote(table)} WHERE typeof(id) = 'integer'"
        ):
            out[int(code)] = (str(name or ""), str(label or name or code))
    return out


def memcpy_short(code: int, enum_name: str) -> str:
    """``HtoD``-style kind from the enum name (``CUDA_MEMCPY_KIND_HTOD``) or the code."""
    token = (enum_name.rsplit("_", 1)[-1] if enum_name else "") or {
        1: "HTOD", 2: "DTOH", 3: "HTOA", 4: "ATOH", 5: "ATOA", 6: "ATOD", 7: "DTOA",
        8: "DTOD", 9: "HTOH", 10: "PTOP", 11: "HTOD", 12: "DTOH", 13: "DTOD",
    }.get(code, "")
    match = re.fullmatch(r"([A-Z])TO([A-Z])", token)
    return f"{match.group(1)}to{match.group(2)}" if match else (token.title() or "Unknown")


def nvtx_codes(cat: Catalog) -> dict[str, int]:
    """NVTX eventType codes by name, from the file's ENUM_NSYS_EVENT_TYPE if present."""
    codes = dict(NVTX_EVENT_TYPES)
    table = "ENUM_NSYS_EVENT_TYPE"
    if cat.has(table) and {"id", "name"} <= set(cat.columns(table)):
        for code, name in cat.con.execute(
            f"SELECT id, name FROM {table} WHERE typeof(id) = 'integer'"
        ):
            if name in codes:
                codes[str(name)] = int(code)
    return codes


def _warn(message: str) -> None:
    warnings.warn(message, DataQualityWarning, stacklevel=4)
