"""Issue 18, section 9, Nsight Systems: damaged exports give one clear line (exit 2) or
lose only what they must, counted and reported, and a missing-data message says which
file, table and column the data was lost from.

Exports are built here (``traceatlas.testing.nsys``, typed columns as in real exports)
and then damaged with ``sqlite3``; every expected count follows from the rows written.
"""

from __future__ import annotations

import json
import sqlite3
import warnings
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from traceatlas.cli.main import app
from traceatlas.errors import CorruptTraceError, DataQualityWarning
from traceatlas.io.nsys import NsysReader
from traceatlas.io.quality import DATA_QUALITY_KEY
from traceatlas.io.reading import RankData
from traceatlas.io.sources import Source
from traceatlas.testing.nsys import (
    KERNEL_COLUMNS,
    SYSTEM_NS,
    UTC_NS,
    Call,
    Kernel,
    Range,
    epoch,
    write_export,
)

S = SYSTEM_NS
KERNELS = [Kernel(S + 1_000, S + 2_000, "gemm(float*)", correlation=1),
           Kernel(S + 3_000, S + 5_000, "relu:x:fused", correlation=2),
           Kernel(S + 6_000, S + 6_500, "attn[/]x", device=1, stream=9, correlation=3)]
CALLS = [Call(S + 500, S + 900, "cudaLaunchKernel_v7000", 1),
         Call(S + 2_500, S + 2_900, "cudaLaunchKernel_v7000", 2),
         Call(S + 5_500, S + 5_900, "cudaLaunchKernel_v7000", 3)]
RANGES = [Range(S, S + 10_000, "step"), Range(S + 100, S + 400, "fwd")]
KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"


def _export(tmp_path: Path, **kwargs: Any) -> Path:
    return write_export(tmp_path / "job.sqlite", KERNELS, CALLS, RANGES, **kwargs)


def _sql(path: Path, *statements: str) -> None:
    con = sqlite3.connect(path)
    for statement in statements:
        con.execute(statement)
    con.commit()
    con.close()


def _read(path: Path) -> tuple[RankData, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (rank,) = NsysReader().read(Source(str(path)), threads=1)
    return rank, [str(w.message) for w in caught if issubclass(w.category, DataQualityWarning)]


def _by_category(rank: RankData) -> dict[str, list[tuple[str, int, int]]]:
    out: dict[str, list[tuple[str, int, int]]] = {}
    for row in rank.tables["intervals"].to_pylist():
        out.setdefault(row["category"], []).append((row["name"], row["start_ns"], row["end_ns"]))
    return {k: sorted(v, key=lambda r: r[1]) for k, v in out.items()}


def _notes(rank: RankData) -> list[dict[str, Any]]:
    meta = dict(zip(rank.tables["metadata"]["key"].to_pylist(),
                    rank.tables["metadata"]["value"].to_pylist(), strict=True))
    notes: list[dict[str, Any]] = json.loads(meta[DATA_QUALITY_KEY])
    return notes


def _cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def test_clean_export_reads_exactly_without_warnings(tmp_path: Path) -> None:
    rank, messages = _read(_export(tmp_path))
    assert messages == []
    got = _by_category(rank)
    assert got["kernel"] == [(k.name, epoch(k.start), epoch(k.end)) for k in KERNELS]
    assert got["runtime"] == [("cudaLaunchKernel", epoch(c.start), epoch(c.end)) for c in CALLS]
    assert got["nvtx"] == [(r.text, epoch(r.start), epoch(r.end)) for r in RANGES]
    assert _notes(rank) == []


@pytest.mark.parametrize("value", ["'abc'", "'12abc'", "x'00ff'", "12.5"])
@pytest.mark.parametrize("column", ["start", "end", "deviceId", "streamId", "correlationId",
                                    "globalPid", "contextId"])
def test_wrong_type_in_a_kernel_column_drops_that_row(tmp_path: Path, column: str,
                                                      value: str) -> None:
    """Before: CAST('abc' AS INTEGER) = 0, so text in ``start`` moved the kernel to the
    session start (and text in deviceId put it on device 0)."""
    path = _export(tmp_path)
    _sql(path, f'UPDATE {KERNEL_TABLE} SET "{column}" = {value} WHERE correlationId = 2'
         if column != "correlationId" else
         f'UPDATE {KERNEL_TABLE} SET "{column}" = {value} WHERE start = {S + 3_000}')
    rank, messages = _read(path)
    kept = [k for k in KERNELS if k.correlation != 2]
    assert _by_category(rank)["kernel"] == [(k.name, epoch(k.start), epoch(k.end))
                                            for k in kept]
    (message,) = [m for m in messages if KERNEL_TABLE in m]
    assert message.startswith(f"{path}: table {KERNEL_TABLE} has 1 row(s)")
    assert f"rows per column: {column} 1)" in message and "dropped" in message
    (note,) = _notes(rank)
    assert (note["file"], note["table"], note["rows"]) == (str(path), f"table {KERNEL_TABLE}", 1)


def test_numeric_text_and_integral_reals_are_not_wrong(tmp_path: Path) -> None:
    """INTEGER affinity stores '3000' and 3000.0 as the integer 3000: nothing is lost."""
    path = _export(tmp_path)
    _sql(path, f"UPDATE {KERNEL_TABLE} SET start = '{S + 3_000}' WHERE correlationId = 2",
         f"UPDATE {KERNEL_TABLE} SET \"end\" = {S + 6_500}.0 WHERE correlationId = 3")
    rank, messages = _read(path)
    assert messages == []
    assert len(_by_category(rank)["kernel"]) == 3


@pytest.mark.parametrize(("table", "column", "where", "category"), [
    ("CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid", "correlationId = 1", "runtime"),
    ("CUPTI_ACTIVITY_KIND_RUNTIME", "correlationId", f"start = {S + 500}", "runtime"),
    ("NVTX_EVENTS", "start", "text = 'fwd'", "nvtx"),
    ("NVTX_EVENTS", "eventType", "text = 'fwd'", "nvtx"),
])
def test_wrong_type_in_host_tables(tmp_path: Path, table: str, column: str, where: str,
                                   category: str) -> None:
    path = _export(tmp_path)
    before = len(_by_category(_read(path)[0])[category])
    _sql(path, f'UPDATE {table} SET "{column}" = \'oops\' WHERE {where}')
    rank, messages = _read(path)
    assert len(_by_category(rank)[category]) == before - 1
    assert any(m.startswith(f"{path}: table {table} has 1 row(s)") and column in m
               for m in messages), messages


def test_end_before_start_is_dropped_and_counted(tmp_path: Path) -> None:
    """Before: kept with zero duration."""
    path = _export(tmp_path)
    _sql(path, f'UPDATE {KERNEL_TABLE} SET "end" = start - 1 WHERE correlationId IN (1, 3)')
    rank, messages = _read(path)
    assert _by_category(rank)["kernel"] == [(KERNELS[1].name, epoch(KERNELS[1].start),
                                             epoch(KERNELS[1].end))]
    assert f"{path}: table {KERNEL_TABLE} has 2 row(s) ending before they start; dropped" \
        in messages
    assert [n["rows"] for n in _notes(rank)] == [2]


def test_unresolved_names_are_counted(tmp_path: Path) -> None:
    """One kernel's name ids point nowhere: its name is '' and a warning says so."""
    path = _export(tmp_path)
    _sql(path, f"UPDATE {KERNEL_TABLE} SET demangledName = 999, shortName = 998 "
         "WHERE correlationId = 3")
    rank, messages = _read(path)
    assert [n for n, _s, _e in _by_category(rank)["kernel"]] == [
        "gemm(float*)", "relu:x:fused", ""]
    assert f"{path}: table {KERNEL_TABLE} has 1 row(s) whose name id is not in StringIds; " \
        "their name is ''" in messages


def test_empty_string_table_is_refused(tmp_path: Path) -> None:
    """Before: every kernel and runtime name was '' and nothing was said."""
    path = _export(tmp_path)
    _sql(path, "DELETE FROM StringIds")
    with pytest.raises(CorruptTraceError, match="none of the 6 event names can be resolved: "
                       "StringIds is empty"):
        _read(path)
    result = _cli("info", str(path))
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and str(path) in line and "StringIds is empty" in line
    assert "Traceback" not in result.output


def test_truncated_file_is_refused(tmp_path: Path) -> None:
    path = _export(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 4096 - 17])
    result = _cli("info", str(path))
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert str(path) in line and f"truncated SQLite file ({len(data) - 4096 - 17:,} bytes" in line


def test_session_start_out_of_range_is_refused(tmp_path: Path) -> None:
    """utcEpochNs near 2^63: adding it to the times would wrap around in int64."""
    path = _export(tmp_path)
    _sql(path, f"UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = {(1 << 63) - 1}")
    with pytest.raises(CorruptTraceError, match="out of range"):
        _read(path)


def test_wrong_types_in_lookup_tables_do_not_crash(tmp_path: Path) -> None:
    """PROCESSES, StringIds and ENUM rows of the wrong type are skipped, not a traceback."""
    path = _export(tmp_path)
    _sql(path, "INSERT INTO PROCESSES VALUES ('x', 'y', 'z')",
         "CREATE TABLE ThreadNames (nameId INTEGER, priority INTEGER, globalTid INTEGER)",
         "INSERT INTO ThreadNames VALUES (1, 0, 'not a tid')",
         "CREATE TABLE MPI_RANKS (globalTid INTEGER, rank INTEGER)",
         "INSERT INTO MPI_RANKS VALUES ('a', 'b')",
         "CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER, name TEXT, label TEXT)",
         "INSERT INTO ENUM_NSYS_EVENT_TYPE VALUES ('x', 'NvtxPushPopRange', 'l')")
    rank, _messages = _read(path)
    assert len(_by_category(rank)["kernel"]) == 3
    assert rank.rank is None and UTC_NS > 0


def test_missing_column_is_named_by_the_analysis(tmp_path: Path) -> None:
    """Before: the kernel table was skipped with a warning and ``analyze kernels`` said
    only "this trace has no device activity"."""
    path = _export(tmp_path, kernel_columns=tuple(c for c in KERNEL_COLUMNS if c != "start"))
    result = _cli("analyze", "kernels", str(path))
    assert result.exit_code == 2, result.output
    (line,) = [ln for ln in result.stderr.splitlines() if ln.startswith("error")]
    assert "no device activity" in line
    assert f"{path}: table {KERNEL_TABLE} lacks column(s) start, so its 3 row(s) were not " \
        "read" in line
    assert "Traceback" not in result.output


def test_missing_correlation_column_is_named(tmp_path: Path) -> None:
    """The kernels are read, their correlation ids are null: ``launch`` names the column;
    ``kernels`` (needs no correlation) runs."""
    path = _export(tmp_path, kernel_columns=tuple(c for c in KERNEL_COLUMNS
                                                  if c != "correlationId"))
    result = _cli("analyze", "launch", str(path))
    assert result.exit_code == 2, result.output
    assert f"{path}: table {KERNEL_TABLE} has no column correlationId; the values it gives " \
        "are null" in result.stderr
    assert _cli("analyze", "kernels", str(path)).exit_code == 0


def test_unrelated_note_is_not_quoted(tmp_path: Path) -> None:
    """A note about NVTX rows does not explain missing device activity."""
    path = write_export(tmp_path / "host.sqlite", [], CALLS, RANGES)
    _sql(path, "UPDATE NVTX_EVENTS SET start = 'x' WHERE text = 'fwd'")
    result = _cli("analyze", "kernels", str(path))
    assert result.exit_code == 2
    (line,) = [ln for ln in result.stderr.splitlines() if ln.startswith("error")]
    assert "no device activity (kernels, memcpy or memset). Analyses" in line


def test_counts_add_up_over_parallel_pieces(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Read in rowid pieces of 2 rows on 3 connections: the drops of every piece count."""
    from traceatlas.io import nsys_load

    monkeypatch.setattr(nsys_load, "_MIN_PIECE_ROWS", 2)
    kernels = [Kernel(S + 1_000 * i, S + 1_000 * i + 500, f"k{i}", correlation=i)
               for i in range(1, 10)]
    path = write_export(tmp_path / "many.sqlite", kernels)
    _sql(path, f"UPDATE {KERNEL_TABLE} SET start = 'x' WHERE correlationId IN (1, 5)",
         f"UPDATE {KERNEL_TABLE} SET streamId = x'01' WHERE correlationId = 9",
         f'UPDATE {KERNEL_TABLE} SET "end" = start - 7 WHERE correlationId = 4')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (rank,) = NsysReader().read(Source(str(path)), threads=3)
    messages = [str(w.message) for w in caught]
    assert sorted(r["name"] for r in rank.tables["intervals"].to_pylist()) == [
        "k2", "k3", "k6", "k7", "k8"]
    assert any("has 3 row(s) with text" in m and "start 2, streamId 1" in m for m in messages)
    assert any("has 1 row(s) ending before they start" in m for m in messages)


def test_text_that_is_not_utf8(tmp_path: Path) -> None:
    """SQLite stores any bytes as TEXT: a damaged name is shown with U+FFFD and counted
    (before: UnicodeDecodeError traceback from pyarrow, or an SQLite error for the whole
    file when a process name was damaged)."""
    path = _export(tmp_path)
    _sql(path, "UPDATE StringIds SET value = CAST(x'6be080a8' AS TEXT) "
         "WHERE value = 'relu:x:fused'",
         "UPDATE NVTX_EVENTS SET text = CAST(x'72ff' AS TEXT) WHERE text = 'fwd'",
         "UPDATE PROCESSES SET name = CAST(x'ff' AS TEXT)")
    rank, messages = _read(path)
    names = {n for rows in _by_category(rank).values() for n, _s, _e in rows}
    assert {"k\ufffd\ufffd\ufffd", "r\ufffd"} <= names
    assert f"{path}: table {KERNEL_TABLE} has 1 row(s) with text that is not UTF-8 (names " \
        "or args); shown with U+FFFD" in messages
    assert any("table NVTX_EVENTS has 1 row(s) with text that is not UTF-8" in m
               for m in messages)
    assert any("1 text value(s) of the small tables" in m for m in messages)


CSV_HEADER = ("Start (ns),End (ns),Duration (ns),DurChild (ns),DurNonChild (ns),Name,PID,TID,"
              "Lvl,NumChild,RangeId,ParentId,RangeStack,NameTree\n")


def test_nvtx_csv_bad_rows_dropped(tmp_path: Path) -> None:
    """``nsys stats`` CSV: a non-integer start and a range ending before it starts are
    counted and dropped (before: the first refused the whole file, the second was kept
    with zero duration)."""
    path = tmp_path / "nvtx.csv"
    path.write_text(CSV_HEADER + "100,200,100,0,100,a[/],1,1,0,0,1,,:1,a\n"
                    "x,300,0,0,0,b,1,1,0,0,2,,:2,b\n"
                    "500,400,-100,0,0,c,1,1,0,0,3,,:3,c\n"
                    "600,900,300,0,300,d,1,1,0,0,4,,:4,d\n")
    from traceatlas.io.nsys_nvtx_csv import NsysNvtxCsvReader

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (rank,) = NsysNvtxCsvReader().read(Source(str(path)))
    got = [(r["name"], r["start_ns"], r["end_ns"]) for r in rank.tables["intervals"].to_pylist()]
    assert got == [("a[/]", 100, 200), ("d", 600, 900)]
    messages = [str(w.message) for w in caught]
    assert f"{path}: 1 row(s) with a Start (ns) or End (ns) that is not an integer dropped" \
        in messages
    assert f"{path}: 1 row(s) with an end before their start dropped" in messages
    path.write_text(CSV_HEADER + "x,y,0,0,0,b,1,1,0,0,2,,:2,b\n")
    result = _cli("info", str(path))
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert str(path) in line and "none of the 1 NVTX row(s)" in line
