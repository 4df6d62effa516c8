"""Nsight Systems reader: ``nsys export -t sqlite`` files, and ``.nsys-rep`` reports
exported with ``nsys`` when it is on PATH.

One ``RankData`` per process (``globalPid``) with events; device activity belongs to
the process in its ``globalPid``. The rank comes from ``MPI_RANKS``, else from the
``MPI Rank <n>`` thread name nsys's MPI tracing gives, else it is left to ingest.

Clock (checked on the real exports): schema 3.25 (nsys 2026.2) writes times on the
system clock and gives ``TARGET_INFO_SESSION_START_TIME.systemClockNs`` (equal to
``ANALYSIS_DETAILS.startTime``); schemas 2.9 and 3.13 have no ``systemClockNs`` and
write times relative to the session start (every event in [0, duration]). Times are
put on the unix epoch as ``t + utcEpochNs - systemClockNs`` (``systemClockNs`` = 0 when
absent). The schema and the small tables are read with the standard library's
``sqlite3``, the event tables straight into Arrow through the ADBC SQLite driver
(``nsys_load.py``), all read-only; ``nsys_tables.py`` turns them into canonical rows.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import tempfile
import warnings
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa

from traceatlas.errors import CorruptTraceError, DataQualityWarning, UnsupportedFormatError
from traceatlas.io import nsys_load as nl
from traceatlas.io import nsys_tables as nt
from traceatlas.io.nsys_adbc import DriverError, ReadError
from traceatlas.io.nsys_schema import READ_TABLES, Catalog, nvtx_codes, quote
from traceatlas.io.nsys_versioned import collapse_versioned
from traceatlas.io.quality import DATA_QUALITY_KEY, notes_json
from traceatlas.io.reading import RankData
from traceatlas.io.sources import Source
from traceatlas.model.schema import empty_table
from traceatlas.tempfiles import staging_prefix

SQLITE_MAGIC = b"SQLite format 3\x00"
REPORT_SUFFIX = ".nsys-rep"
_EXPORT_META = ("META_DATA_EXPORT", "EXPORT_META_DATA")  # new, old (schema 2.x) name
_MPI_RANK_THREAD = re.compile(r"^MPI Rank (\d+)$")
_CLOCK_SLACK_NS = 1_000_000_000
_TIME_LIMIT_NS = 1 << 62
"""Times on the epoch must lie within +-2^62 ns (~146 years), so that every duration
and shift fits in int64."""
_DRIVER_PREFIX = re.compile(r"^[A-Z_]+: Failed to [a-z ]+: ")  # ADBC's "IO: Failed to step query: "
_LOOKUP_PREFIXES = ("ENUM_", "TARGET_INFO_", "META_DATA_", "EXPORT_META_DATA", "StringIds",
                    "ThreadNames", "PROCESSES", "ANALYSIS_", "ProcessStreams", "MPI_RANKS",
                    "NVTX_PAYLOAD_", "UnwindMethodType", "sqlite_")


class NsysReader:
    """Reader for Nsight Systems SQLite exports (and ``.nsys-rep`` through ``nsys``)."""

    name = "nsys"
    description = "Nsight Systems SQLite export (.sqlite), or .nsys-rep with nsys on PATH"

    def sniff(self, head: bytes, source: Source) -> bool:
        """An SQLite database, or a file named ``*.nsys-rep``."""
        if source.member is None and source.path.endswith(REPORT_SUFFIX):
            return True
        return head.startswith(SQLITE_MAGIC)

    def read(self, source: Source, *, threads: int = 1) -> list[RankData]:
        """One ``RankData`` per process with events (times in ns on the unix epoch when
        the export gives the session start)."""
        if source.member is not None:
            raise UnsupportedFormatError(
                source.display, "an Nsight Systems file inside an archive cannot be read "
                "(SQLite needs a real file); extract it first")
        if source.path.endswith(REPORT_SUFFIX):
            return _read_report(source, threads)
        return read_export(source.path, source.display, threads=threads)


def _read_report(source: Source, threads: int) -> list[RankData]:
    """Export a ``.nsys-rep`` with ``nsys`` into a temporary directory, then read it."""
    exe = shutil.which("nsys")
    if exe is None:
        raise UnsupportedFormatError(
            source.display, "a .nsys-rep needs `nsys` on PATH to export it; run "
            f"`nsys export -t sqlite {source.path}` and pass the .sqlite")
    with tempfile.TemporaryDirectory(prefix=staging_prefix("nsys")) as tmp:
        out = os.path.join(tmp, "export.sqlite")
        done = subprocess.run(
            [exe, "export", "-t", "sqlite", "--include-json=true", "-o", out, source.path],
            capture_output=True, text=True, check=False,
        )
        if done.returncode != 0 or not os.path.isfile(out):
            lines = (done.stderr or done.stdout or "").strip().splitlines()
            detail = lines[-1].replace(tmp, "<tmp>") if lines else "no output"
            raise CorruptTraceError(
                source.display, f"`nsys export` failed (exit {done.returncode}): {detail}")
        return read_export(out, source.display, threads=threads)


def read_export(path: str, display: str, *, threads: int = 1) -> list[RankData]:
    """Read one ``nsys export -t sqlite`` file; ``display`` names it in messages;
    ``threads`` tables are read at a time."""
    with open(path, "rb") as fh:
        head = fh.read(100)
    if not head.startswith(SQLITE_MAGIC):
        raise UnsupportedFormatError(
            display, "compressed SQLite file; decompress it and pass the .sqlite")
    _check_size(head, os.path.getsize(path), display)
    uri = Path(path).absolute().as_uri() + "?mode=ro"
    try:
        con = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as exc:
        raise CorruptTraceError(display, f"cannot open SQLite file ({exc})") from exc
    text, side_text = _Text(), _Text()
    con.text_factory = text
    side = nl.Side(con, uri, threads, side_text)
    try:
        ranks = _read(con, side, uri, display, threads)
        side.close()
        bad = text.bad + side_text.bad
        if bad:
            warnings.warn(f"{display}: {bad} text value(s) of the small tables (thread "
                          "and process names, metadata) are not UTF-8; shown with U+FFFD",
                          DataQualityWarning, stacklevel=2)
        return ranks
    except (sqlite3.Error, DriverError, ReadError) as exc:
        detail = _DRIVER_PREFIX.sub("", str(exc))
        raise CorruptTraceError(display, f"SQLite error ({detail})") from exc
    finally:
        side.close()
        con.close()


class _Text:
    """sqlite3 text factory: UTF-8, with invalid bytes as U+FFFD (counted in ``bad``)."""

    def __init__(self) -> None:
        self.bad = 0

    def __call__(self, value: bytes) -> str:
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            self.bad += 1
            return value.decode("utf-8", errors="replace")


def _check_size(head: bytes, size: int, display: str) -> None:
    """A file shorter than its header's page count says is truncated (SQLite would read
    the missing pages as absent rows, or fail later with a vaguer message)."""
    if len(head) < 100:
        raise CorruptTraceError(display, f"truncated SQLite file ({size} bytes)")
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    valid = pages and head[24:28] == head[92:96]  # the count is valid only then
    if valid and size < page_size * pages:
        raise CorruptTraceError(display, f"truncated SQLite file ({size:,} bytes; its header "
                                f"says {page_size * pages:,})")


def is_export(tables: Collection[str]) -> bool:
    """True when an SQLite database's ``tables`` are an Nsight Systems export's: StringIds
    and a TARGET_INFO_* / META_DATA_* table."""
    return "StringIds" in tables and any(
        t.startswith(("TARGET_INFO_", "META_DATA_", "EXPORT_META_DATA")) for t in tables)


def _read(con: sqlite3.Connection, side: nl.Side, uri: str, display: str,
          threads: int) -> list[RankData]:
    cat = Catalog(con, display)
    if not is_export(cat.tables):
        raise UnsupportedFormatError(
            display, "SQLite database that is not an Nsight Systems export (no StringIds "
            "and TARGET_INFO_*/META_DATA_* tables)")
    meta = _export_meta(cat)
    session = _first_row(cat, "TARGET_INFO_SESSION_START_TIME")
    loaded = nl.load(cat, uri, threads, side)
    thread_rows = _thread_name_rows(cat, side)  # runs while the events are sorted
    loaded.ev = collapse_versioned(loaded.ev)  # cudaMemcpy + its cudaMemcpy_v3020: one call
    base_ns, clock, origin = _clock(session, loaded.min_time, display)
    for t in (loaded.min_time, loaded.max_time):
        if t is not None and not -_TIME_LIMIT_NS < t + base_ns < _TIME_LIMIT_NS:
            raise CorruptTraceError(display, f"event time {t} (+ {base_ns} ns to the unix "
                                    "epoch) is out of range (more than 146 years from 1970)")
    procs = nt.processes(loaded)
    owners = _metric_owners(loaded, procs)
    if not procs and owners:
        procs = [-1]
    if not procs:
        warnings.warn(f"{display}: the export holds no events the reader knows",
                      DataQualityWarning, stacklevel=3)
        procs = [-1]
    events = nt.sort_events(loaded, threads)
    loaded.ev = events.ev  # the rows as read, once (sort_events made them one chunk)
    host = _hostname(cat)
    thread_names = _thread_names(thread_rows)
    ranks = _ranks(cat, thread_names)
    names = _process_names(cat)
    shared = _shared_metadata(cat, display, meta, session, origin)
    out: list[RankData] = []
    order = sorted(procs, key=lambda p: (ranks.get(p, (None, ""))[0] is None,
                                         ranks.get(p, (0, ""))[0], p))
    infos = [nt.ProcessInfo(proc, host, thread_names.get(proc, {}),
                            sorted(d for d, o in owners.items() if o == proc))
             for proc in order]
    built = _build_processes(events, infos, base_ns, threads)
    for proc, tables in zip(order, built, strict=True):
        rank, rank_source = ranks.get(proc, (None, None))
        tables["messages"] = nt.messages(events, proc, rank, base_ns, display) \
            if loaded.has_p2p else _empty("messages")
        tables["flows"] = _empty("flows")
        process = {"globalPid": proc << 24 if proc >= 0 else None,
                   "pid": proc & nl.PID_MASK if proc >= 0 else None, "name": names.get(proc)}
        domains = [d for d in loaded.domains if d["process"] == proc]
        tables["metadata"] = _metadata([*shared, ("process", process), ("nvtx_domains", domains)])
        out.append(RankData(tables=tables, source_format="nsys", rank=rank,
                            rank_source=rank_source, clock=clock, host=host))
    return out


def _build_processes(events: nt.Sorted, infos: list[nt.ProcessInfo], base_ns: int,
                     threads: int) -> list[dict[str, pa.Table]]:
    """``nt.build_process`` of every process, ``threads`` at a time (mostly numpy and
    Arrow kernels, which release the GIL; it warns about nothing)."""
    if threads <= 1 or len(infos) <= 1:
        return [nt.build_process(events, info, base_ns) for info in infos]
    with ThreadPoolExecutor(max_workers=min(threads, len(infos))) as pool:
        return list(pool.map(lambda info: nt.build_process(events, info, base_ns), infos))


def _empty(name: str) -> pa.Table:
    return empty_table(name).drop_columns(["rank"])


def _first_row(cat: Catalog, table: str) -> dict[str, Any]:
    if not cat.has(table):
        return {}
    cursor = cat.con.execute(f"SELECT * FROM {quote(table)} LIMIT 1")
    row = cursor.fetchone()
    return {} if row is None else {d[0]: v for d, v in zip(cursor.description, row, strict=True)}


def _export_meta(cat: Catalog) -> dict[str, str]:
    for table in _EXPORT_META:
        if cat.has(table) and {"name", "value"} <= set(cat.columns(table)):
            return {str(k): str(v) for k, v in cat.con.execute(
                f"SELECT name, value FROM {table}")}
    return {}


def _clock(session: dict[str, Any], min_time: int | None,
           display: str) -> tuple[int, dict[str, object], int]:
    """(ns to add, clock record, system-clock origin subtracted)."""
    utc = session.get("utcEpochNs")
    origin = session.get("systemClockNs") or 0
    if not isinstance(origin, int):
        origin = 0
    if origin and min_time is not None and min_time < origin - _CLOCK_SLACK_NS:
        warnings.warn(
            f"{display}: events start {(origin - min_time) / 1e9:.3f} s before "
            "TARGET_INFO_SESSION_START_TIME.systemClockNs; times taken as session-relative",
            DataQualityWarning, stacklevel=3)
        origin = 0
    if not isinstance(utc, int):
        return 0, {"method": "none (no TARGET_INFO_SESSION_START_TIME.utcEpochNs; times as "
                   "written)", "base_ns": 0, "offset_ns": 0}, origin
    base = utc - origin
    return base, {"method": "TARGET_INFO_SESSION_START_TIME", "base_ns": base,
                  "offset_ns": 0}, origin


def _metric_owners(loaded: nl.Loaded, procs: list[int]) -> dict[int, int]:
    """Device -> process that gets its GPU metrics counter track: the first process
    with activity on that device, else the first process."""
    streams = nt.stream_owners(loaded)
    fallback = procs[0] if procs else -1
    return {device: streams.get(device, fallback) for device in nt.metric_devices(loaded)}


def _hostname(cat: Catalog) -> str | None:
    table = "TARGET_INFO_SYSTEM_ENV"
    if not cat.has(table) or not {"name", "value"} <= set(cat.columns(table)):
        return None
    row = cat.con.execute(f"SELECT value FROM {table} WHERE name = 'Hostname' LIMIT 1").fetchone()
    return None if row is None or row[0] is None else str(row[0])


def _thread_name_rows(cat: Catalog, side: nl.Side) -> list[Callable[[], list[Any]]]:
    """The (globalTid, name) rows of the NVTX thread names, then of ThreadNames, each
    query started on ``side``."""
    sources = []
    if cat.has("ThreadNames"):
        sources.append("SELECT t.globalTid, s.value FROM ThreadNames AS t "
                       "JOIN StringIds AS s ON s.id = t.nameId "
                       "WHERE typeof(t.globalTid) = 'integer'")
    if cat.has("NVTX_EVENTS") and "text" in cat.columns("NVTX_EVENTS"):
        code = nvtx_codes(cat)["NvtxThread"]
        sources.insert(0, f"SELECT globalTid, text FROM NVTX_EVENTS WHERE eventType = {code} "
                          "AND typeof(globalTid) = 'integer'")
    return [side.submit(sql) for sql in sources]


def _thread_names(sources: list[Callable[[], list[Any]]]) -> dict[int, dict[int, str]]:
    """process -> tid -> name, from ThreadNames (else NVTX thread names); ``sources``:
    ``_thread_name_rows``."""
    out: dict[int, dict[int, str]] = {}
    for rows in sources:  # ThreadNames last: it wins
        for gtid, name in rows():
            if gtid is not None and name:
                out.setdefault(int(gtid) >> 24, {})[int(gtid) & nl.PID_MASK] = str(name)
    return out


def _ranks(cat: Catalog, threads: dict[int, dict[int, str]]) -> dict[int, tuple[int, str]]:
    """process -> (rank, evidence): MPI_RANKS, else a thread named ``MPI Rank <n>``."""
    out: dict[int, tuple[int, str]] = {}
    if cat.has("MPI_RANKS") and {"globalTid", "rank"} <= set(cat.columns("MPI_RANKS")):
        for proc, rank in cat.con.execute(
            "SELECT globalTid >> 24, min(rank) FROM MPI_RANKS WHERE typeof(globalTid) = "
            "'integer' AND typeof(rank) = 'integer' GROUP BY 1"
        ):
            if proc is not None and rank is not None:
                out[int(proc)] = (int(rank), "MPI_RANKS")
    for proc, names in threads.items():
        for name in names.values():
            match = _MPI_RANK_THREAD.match(name)
            if match and proc not in out:
                out[proc] = (int(match.group(1)), f"thread name '{name}'")
    return out


def _process_names(cat: Catalog) -> dict[int, str]:
    if not cat.has("PROCESSES") or not {"globalPid", "name"} <= set(cat.columns("PROCESSES")):
        return {}
    return {int(g) >> 24: str(n) for g, n in cat.con.execute(
        "SELECT globalPid, name FROM PROCESSES WHERE typeof(globalPid) = 'integer'")
        if g is not None and n is not None}


def _jsonable(value: Any) -> Any:
    return value.hex() if isinstance(value, bytes) else value


def _table_rows(cat: Catalog, table: str) -> list[dict[str, Any]]:
    if not cat.has(table):
        return []
    cursor = cat.con.execute(f"SELECT * FROM {quote(table)}")
    keys = [d[0] for d in cursor.description]
    return [{k: _jsonable(v) for k, v in zip(keys, row, strict=True)} for row in cursor]


def _shared_metadata(cat: Catalog, display: str, meta: dict[str, str],
                     session: dict[str, Any], origin: int) -> list[tuple[str, Any]]:
    """Metadata every process of the file shares."""
    capture = dict(cat.con.execute("SELECT name, value FROM META_DATA_CAPTURE").fetchall()) \
        if cat.has("META_DATA_CAPTURE") else {}
    not_read = {t: cat.rows(t) for t in sorted(cat.tables)
                if t not in READ_TABLES and not t.startswith(_LOOKUP_PREFIXES)}
    return [
        ("source_file", display),
        ("source_format", "nsys-sqlite"),
        ("EXPORT_SCHEMA_VERSION", meta.get("EXPORT_SCHEMA_VERSION")),
        ("export_metadata", meta),
        ("capture_metadata", capture),
        ("session_start", {k: _jsonable(v) for k, v in session.items()}),
        ("time_origin", {
            "systemClockNs_subtracted": origin,
            "times_as_written": "system clock" if origin else "session-relative",
        }),
        ("hostname", _hostname(cat)),
        ("gpus", _table_rows(cat, "TARGET_INFO_GPU")),
        ("tables_not_read", {t: n for t, n in not_read.items() if n}),
        (DATA_QUALITY_KEY, notes_json(cat.notes)),
    ]


def _metadata(items: list[tuple[str, Any]]) -> pa.Table:
    return pa.table({
        "key": pa.array([k for k, _ in items], pa.string()),
        "value": pa.array([json.dumps(v, default=str) for _, v in items], pa.string()),
    })
