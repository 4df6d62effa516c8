"""Small Nsight Systems SQLite exports for tests, with the column types of real exports
(``INTEGER``/``TEXT`` declarations, so SQLite's type affinity acts as it does there).

One process per distinct ``pid``; kernels, CUDA runtime calls and NVTX push/pop ranges.
Kernel and runtime names go through ``StringIds`` (as nsys writes them), NVTX range text
inline. Times are raw system-clock ns: on the unix epoch an event at ``t`` starts at
``t - SYSTEM_NS + UTC_NS``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SYSTEM_NS = 5_000_000_000
"""``TARGET_INFO_SESSION_START_TIME.systemClockNs``."""
UTC_NS = 1_700_000_000_000_000_000
"""``TARGET_INFO_SESSION_START_TIME.utcEpochNs``."""
VM = 1 << 48
NVTX_PUSH_POP = 59


def gpid(pid: int) -> int:
    """nsys ``globalPid`` of OS process ``pid``."""
    return VM | (pid << 24)


def gtid(pid: int, tid: int) -> int:
    """nsys ``globalTid`` of thread ``tid`` of process ``pid``."""
    return gpid(pid) | tid


def epoch(t: int) -> int:
    """A raw time written by ``write_export``, on the unix epoch (ns)."""
    return t - SYSTEM_NS + UTC_NS


@dataclass(frozen=True)
class Kernel:
    """A kernel on ``device``/``stream`` of process ``pid`` (times: raw ns)."""

    start: int
    end: int
    name: str
    device: int = 0
    stream: int = 7
    correlation: int | None = None
    pid: int = 100


@dataclass(frozen=True)
class Call:
    """A CUDA runtime call on thread ``tid`` of process ``pid`` (times: raw ns)."""

    start: int
    end: int
    name: str
    correlation: int | None = None
    pid: int = 100
    tid: int = 100


@dataclass(frozen=True)
class Range:
    """An NVTX push/pop range with inline text (times: raw ns)."""

    start: int
    end: int
    text: str
    pid: int = 100
    tid: int = 100


KERNEL_COLUMNS = ("start", "end", "deviceId", "contextId", "streamId", "correlationId",
                  "globalPid", "demangledName", "shortName", "gridX", "gridY", "gridZ",
                  "blockX", "blockY", "blockZ", "registersPerThread", "staticSharedMemory",
                  "dynamicSharedMemory")
RUNTIME_COLUMNS = ("start", "end", "eventClass", "globalTid", "correlationId", "nameId",
                   "returnValue")
NVTX_COLUMNS = ("start", "end", "eventType", "text", "globalTid", "textId", "domainId")
_TEXT = frozenset({"text", "value", "name", "utcTime", "localTime"})


def _table(con: sqlite3.Connection, name: str, cols: Sequence[str],
           rows: Iterable[Sequence[Any]]) -> None:
    decl = ", ".join(f'"{c}" {"TEXT" if c in _TEXT else "INTEGER"}' for c in cols)
    con.execute(f"CREATE TABLE {name} ({decl})")
    con.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(cols))})",
                    [tuple(r) for r in rows])


def write_export(path: Path, kernels: Sequence[Kernel] = (), calls: Sequence[Call] = (),
                 ranges: Sequence[Range] = (), *,
                 kernel_columns: Sequence[str] = KERNEL_COLUMNS) -> Path:
    """Write the export to ``path`` (replacing it); ``kernel_columns`` may leave
    columns out of the kernel table (as older or damaged exports do)."""
    path.unlink(missing_ok=True)
    strings: dict[str, int] = {}

    def sid(text: str) -> int:
        return strings.setdefault(text, len(strings) + 1)

    kernel_rows = []
    for k in kernels:
        full = dict(zip(KERNEL_COLUMNS, (
            k.start, k.end, k.device, 1, k.stream, k.correlation, gpid(k.pid), sid(k.name),
            sid(k.name.split("(")[0]), 1, 1, 1, 32, 1, 1, 16, 0, 0), strict=True))
        kernel_rows.append([full[c] for c in kernel_columns])
    call_rows = [(c.start, c.end, 0, gtid(c.pid, c.tid), c.correlation, sid(c.name), 0)
                 for c in calls]
    range_rows = [(r.start, r.end, NVTX_PUSH_POP, r.text, gtid(r.pid, r.tid), None, 0)
                  for r in ranges]
    pids = sorted({k.pid for k in kernels} | {c.pid for c in calls} | {r.pid for r in ranges})
    con = sqlite3.connect(path)
    try:
        _table(con, "META_DATA_EXPORT", ("name", "value"), [("EXPORT_SCHEMA_VERSION", "3.25.0")])
        _table(con, "TARGET_INFO_SESSION_START_TIME",
               ("utcEpochNs", "utcTime", "localTime", "systemClockNs"),
               [(UTC_NS, "2023-11-14T22:13:20", "2023-11-14T22:13:20", SYSTEM_NS)])
        _table(con, "PROCESSES", ("globalPid", "pid", "name"),
               [(gpid(p), p, f"proc{p}") for p in pids])
        _table(con, "CUPTI_ACTIVITY_KIND_KERNEL", list(kernel_columns), kernel_rows)
        _table(con, "CUPTI_ACTIVITY_KIND_RUNTIME", RUNTIME_COLUMNS, call_rows)
        _table(con, "NVTX_EVENTS", NVTX_COLUMNS, range_rows)
        _table(con, "StringIds", ("id", "value"), [(i, s) for s, i in strings.items()])
        con.commit()
    finally:
        con.close()
    return path
