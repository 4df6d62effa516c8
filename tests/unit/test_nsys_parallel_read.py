"""The nsys reader's parallel read (tables in rowid ranges on several connections) and
the ``args`` JSON SQLite builds, on small exports written here with ``sqlite3``.

Expected JSON texts are written by hand from the rows below, following the rules the
reader documents: members in column order, null members left out, ``jsonText`` parsed
with null members of its objects dropped (``json_patch`` semantics), a JSON ``null``
left out, BLOBs as upper-case hex.
"""

from __future__ import annotations

import json
import sqlite3
import warnings
from pathlib import Path
from typing import Any

import pytest

from traceatlas.errors import DataQualityWarning
from traceatlas.io import nsys_adbc, nsys_load
from traceatlas.io.nsys import NsysReader
from traceatlas.io.reading import RankData
from traceatlas.io.sources import Source

PID = 300
GPID = PID << 24
GTID = GPID | PID
N_KERNELS = 240
N_RANGES = 180


def _export(path: Path) -> Path:
    """One process: N_KERNELS kernels on two streams, one runtime launch per kernel,
    N_RANGES nested NVTX ranges (pairs: an outer range holding an inner one)."""
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    con.executemany("INSERT INTO StringIds VALUES (?, ?)",
                    [(1, "cudaLaunchKernel_v7000"), (2, "gemm"), (3, "copy")])
    con.execute("CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT)")
    con.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.25.0')")
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, \"end\" INTEGER, "
                "deviceId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, "
                "demangledName INTEGER, gridX INTEGER, gridY INTEGER, gridZ INTEGER, "
                "blockX INTEGER, blockY INTEGER, blockZ INTEGER, registersPerThread INTEGER)")
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        [(1000 * i, 1000 * i + 500, 0, 7 + i % 2, i, GPID, 2 + i % 2, 1, 1, 1, 32, 1, 1,
          None if i % 3 else 16) for i in range(N_KERNELS)])
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, \"end\" INTEGER, "
                "eventClass INTEGER, globalTid INTEGER, correlationId INTEGER, "
                "nameId INTEGER)")
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?)",
                    [(1000 * i - 100, 1000 * i - 50, 0, GTID, i, 1) for i in range(N_KERNELS)])
    con.execute("CREATE TABLE NVTX_EVENTS (start INTEGER, \"end\" INTEGER, eventType INTEGER, "
                "text TEXT, globalTid INTEGER)")
    con.executemany("INSERT INTO NVTX_EVENTS VALUES (?,?,?,?,?)",
                    [(1000 * (i // 2) - 300 + (i % 2) * 10, 1000 * (i // 2) - 10 - (i % 2) * 10,
                      59, f"range {i}", GTID) for i in range(N_RANGES)])
    con.commit()
    con.close()
    return path


def _read(path: Path, threads: int) -> list[RankData]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataQualityWarning)  # the columns left out here
        return NsysReader().read(Source(str(path)), threads=threads)


def test_rowid_ranges_in_parallel_give_the_serial_result(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _export(tmp_path / "many.sqlite")
    (serial,) = _read(path, 1)
    jobs: list[int] = []
    run_jobs = nsys_adbc.run_jobs

    def counting(uri: str, todo: Any, threads: int) -> Any:
        jobs.append(len(todo))
        return run_jobs(uri, todo, threads)

    monkeypatch.setattr(nsys_load, "_MIN_PIECE_ROWS", 7)  # pieces of a few dozen rows
    monkeypatch.setattr(nsys_load, "run_jobs", counting)
    (parallel,) = _read(path, 3)
    assert jobs and jobs[0] > 3  # three tables, read in more pieces than that
    assert sorted(serial.tables) == sorted(parallel.tables)
    for name, table in serial.tables.items():
        assert table.equals(parallel.tables[name]), name
    iv = parallel.tables["intervals"]
    counts = {c: iv["category"].to_pylist().count(c) for c in ("kernel", "runtime", "nvtx")}
    assert counts == {"kernel": N_KERNELS, "runtime": N_KERNELS, "nvtx": N_RANGES}
    nvtx = [r for r in iv.to_pylist() if r["category"] == "nvtx"]
    assert [r["depth"] for r in nvtx[:4]] == [0, 1, 0, 1]  # outer, inner, outer, inner
    kernels = [r for r in iv.to_pylist() if r["category"] == "kernel"]
    assert [json.loads(k["args"]) for k in kernels[:2]] == [
        {"registersPerThread": 16}, {}]  # kernel 0 (stream 7) then kernel 2 (stream 7)


def _nvtx_export(path: Path, rows: list[tuple[Any, ...]]) -> Path:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    con.execute("CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT)")
    con.execute("CREATE TABLE NVTX_EVENTS (start INTEGER, \"end\" INTEGER, eventType INTEGER, "
                "text TEXT, globalTid INTEGER, doubleValue REAL, jsonText TEXT, "
                "binaryData BLOB)")
    con.executemany("INSERT INTO NVTX_EVENTS VALUES (?,?,?,?,?,?,?,?)",
                    [(10 * i, 10 * i + 5, 59, f"r{i}", GTID, *r) for i, r in enumerate(rows)])
    con.commit()
    con.close()
    return path


ARGS_CASES = [
    # (doubleValue, jsonText, binaryData) -> args text
    ((None, None, None), '{"eventType":59}'),
    ((0.25, None, None), '{"eventType":59,"doubleValue":0.25}'),
    ((None, '{"a": null, "b": {"c": null, "d": 1}, "e": [null]}', None),
     '{"eventType":59,"jsonText":{"b":{"d":1},"e":[null]}}'),
    ((None, "null", None), '{"eventType":59}'),
    ((None, "not json", b"\x0a\xff"), '{"eventType":59,"jsonText":"not json","binaryData":"0AFF"}'),
    ((1e20, "[1, 2.5]", None), '{"eventType":59,"doubleValue":1.0e+20,"jsonText":[1,2.5]}'),
]


@pytest.mark.parametrize("threads", [1, 2])
def test_args_json_text(tmp_path: Path, threads: int) -> None:
    path = _nvtx_export(tmp_path / "nvtx.sqlite", [c[0] for c in ARGS_CASES])
    (rank,) = _read(path, threads)
    got = {r["name"]: r["args"] for r in rank.tables["intervals"].to_pylist()}
    assert got == {f"r{i}": text for i, (_row, text) in enumerate(ARGS_CASES)}


def test_args_when_every_row_has_every_member(tmp_path: Path) -> None:
    """All members present in all rows: one json_object, same text."""
    rows = [(0.5, None, b"\x01"), (2.0, None, b"\x02\x03")]
    (rank,) = _read(_nvtx_export(tmp_path / "full.sqlite", rows), 1)
    assert [r["args"] for r in rank.tables["intervals"].to_pylist()] == [
        '{"eventType":59,"doubleValue":0.5,"binaryData":"01"}',
        '{"eventType":59,"doubleValue":2.0,"binaryData":"0203"}']
