"""Paraver reader on small .prv/.pcf/.row files written here; every expected value is
worked out by hand from the records below (times in the header's unit x ns per unit)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

import traceatlas
from traceatlas.cli.main import app
from traceatlas.errors import CorruptTraceError, DataQualityWarning, UnsupportedFormatError
from traceatlas.io.paraver import ParaverReader, pair_regions
from traceatlas.io.sources import Source
from traceatlas.testing.paraver_text import (
    MPI_COLLECTIVE,
    MPI_P2P,
    PAPI_TOT_INS_PCF,
    USER_FUNCTION,
    mpi_events,
    pcf,
    pcf_events,
)

PCF = ("DEFAULT_OPTIONS\n\nLEVEL               THREAD\nUNITS               NANOSEC\n\n"
       + pcf({1: "Running", 3: "Waiting a message"},
             mpi_events(MPI_P2P, {3: "MPI_Isend"}),
             mpi_events(MPI_COLLECTIVE, {10: "MPI_Allreduce"}),
             pcf_events(USER_FUNCTION, "User function", {0: "End", 5: "main", 6: "foo"}),
             PAPI_TOT_INS_PCF,
             "EVENT_TYPE\n6    40000018    Tracing mode:\nVALUES\n1      Detailed\n"))

ROW = """LEVEL NODE SIZE 1
node1

LEVEL THREAD SIZE 3
THREAD 1.1.1
THREAD 1.1.2
THREAD 1.2.1
"""

# Task 1 has threads 1 and 2, task 2 has thread 1. Records deliberately not sorted.
BODY = """1:1:1:1:1:0:100:1
1:1:1:1:1:100:150:3
2:1:1:1:1:5:60000019:5
2:1:1:1:1:7:60000019:6
2:1:1:1:1:8:60000019:0
2:1:1:1:1:9:60000019:0
2:1:1:1:1:20:50000002:10
2:1:1:1:1:30:50000001:3
3:1:1:1:1:30:31:3:1:2:1:35:36:1024:7
2:1:1:1:1:60:50000002:0
2:1:1:1:1:40:50000001:0
2:1:1:1:1:70:42000050:1234:40000018:1
2:2:1:1:2:90:60000019:5
2:3:1:2:1:95:50000001:0
1:3:1:2:1:0:150:1
"""


def _write(tmp: Path, unit: str = "", *, pcf: bool = True, name: str = "t.prv",
           end: int = 1000, body: str = BODY) -> Path:
    prv = tmp / name
    text = f"#Paraver (01/02/2024 at 10:00):{end}{unit}:1(3):1:2(2:1,1:1)\n{body}"
    if name.endswith(".gz"):
        prv.write_bytes(gzip.compress(text.encode()))
    else:
        prv.write_text(text)
    stem = name.split(".prv")[0]
    if pcf:
        (tmp / f"{stem}.pcf").write_text(PCF)
    (tmp / f"{stem}.row").write_text(ROW)
    return prv


def _open(tmp: Path, prv: Path) -> traceatlas.Trace:
    return traceatlas.open(traceatlas.ingest(prv, tmp / "store"))


def _rows(trace: traceatlas.Trace, table: str) -> list[dict[str, Any]]:
    frame = trace.scan(table).collect()
    casts = [pl.col(c).cast(pl.String) for c, t in frame.schema.items()
             if isinstance(t, pl.Categorical)]
    return frame.with_columns(casts).sort(frame.columns[:3]).to_dicts()


def _meta(trace: traceatlas.Trace, rank: int, key: str) -> Any:
    row = trace.metadata.filter((pl.col("rank") == rank) & (pl.col("key") == key)).collect()
    return json.loads(row["value"][0])


def test_states_events_counter_message_in_us(tmp_path: Path) -> None:
    with pytest.warns(DataQualityWarning) as caught:
        trace = _open(tmp_path, _write(tmp_path))
    text = " ".join(str(w.message) for w in caught)
    assert "1 region(s) still open" in text and "1 region end event(s) without" in text
    assert trace.ranks == [0, 1]
    us = 1_000
    iv = [(r["rank"], r["track_id"], r["name"], r["category"], r["start_ns"], r["end_ns"])
          for r in _rows(trace, "intervals")]
    assert sorted(iv) == sorted([
        (0, 1, "Running", "state", 0, 100 * us),
        (0, 1, "Waiting a message", "state", 100 * us, 150 * us),
        (0, 1, "main", "region", 5 * us, 9 * us),
        (0, 1, "foo", "region", 7 * us, 8 * us),  # LIFO: the first 0 closes foo
        (0, 1, "MPI_Allreduce", "mpi", 20 * us, 60 * us),
        (0, 1, "MPI_Isend", "mpi", 30 * us, 40 * us),
        (0, 2, "main", "region", 90 * us, 1000 * us),  # open at the end: closed at 1000 us
        (1, 1, "Running", "state", 0, 150 * us),
    ])
    rows = {(r["rank"], r["track_id"], r["name"], r["start_ns"]): r
            for r in _rows(trace, "intervals")}
    main, foo = rows[(0, 1, "main", 5 * us)], rows[(0, 1, "foo", 7 * us)]
    assert foo["depth"] == main["depth"] + 1
    assert rows[(0, 1, "MPI_Isend", 30 * us)]["depth"] == rows[
        (0, 1, "MPI_Allreduce", 20 * us)]["depth"] + 1
    assert json.loads(rows[(0, 1, "Running", 0)]["args"]) == {"cpu": 1, "state": 1}
    assert json.loads(rows[(0, 2, "main", 90 * us)]["args"])["closed_at_trace_end"] is True
    assert rows[(0, 1, "MPI_Isend", 30 * us)]["source_category"] == "MPI Point-to-point"

    counters = _rows(trace, "counters")
    assert [(c["rank"], c["track_id"], c["ts_ns"], c["name"], c["value"]) for c in counters] \
        == [(0, 1, 70 * us, "PAPI_TOT_INS", 1234.0)]
    inst = {(i["rank"], i["name"]): i for i in _rows(trace, "instants")}
    assert set(inst) == {(0, "Tracing mode:"), (1, "MPI Point-to-point")}
    assert json.loads(inst[(0, "Tracing mode:")]["args"]) == {
        "type": 40000018, "value": 1, "value_label": "Detailed"}
    assert inst[(0, "Tracing mode:")]["ts_ns"] == 70 * us
    assert inst[(1, "MPI Point-to-point")]["ts_ns"] == 95 * us  # the unmatched end

    (msg,) = _rows(trace, "messages")
    assert (msg["rank"], msg["src_rank"], msg["dst_rank"]) == (0, 0, 1)
    assert (msg["send_start_ns"], msg["send_end_ns"], msg["recv_start_ns"],
            msg["recv_end_ns"], msg["bytes"], msg["tag"]) == (
        30 * us, 31 * us, 35 * us, 36 * us, 1024, 7)

    tracks = [(t["rank"], t["track_id"], t["kind"], t["name"], t["host"], t["tid"])
              for t in _rows(trace, "tracks")]
    assert tracks == [(0, 1, "host_thread", "THREAD 1.1.1", "node1", 1),
                      (0, 2, "host_thread", "THREAD 1.1.2", "node1", 2),
                      (1, 1, "host_thread", "THREAD 1.2.1", "node1", 1)]
    counts = _meta(trace, 0, "paraver_record_counts_file")
    assert {k: counts[k] for k in ("1", "2", "3", "4")} == {"1": 3, "2": 11, "3": 1, "4": 0}
    assert _meta(trace, 0, "paraver_record_counts_rank") == {"1": 2, "2": 10, "3": 1}
    assert _meta(trace, 1, "paraver_record_counts_rank") == {"1": 1, "2": 1, "3": 0}
    pairs = _meta(trace, 0, "paraver_event_pairs_file")
    assert pairs == {"total": 12, "interval_begin": 5, "interval_end": 4,
                     "unclosed_at_trace_end": 1, "unmatched_end": 1, "counters": 1,
                     "instants": 2}
    clock = trace.manifest["clock"]["0"]
    assert {k: clock[k] for k in ("method", "base_ns", "offset_ns")} == {
        "method": "Paraver (one clock for all tasks)", "base_ns": 0, "offset_ns": 0}


@pytest.mark.parametrize(("unit", "factor"), [("_ns", 1), ("_us", 1_000), ("_ms", 1_000_000)])
def test_time_units(tmp_path: Path, unit: str, factor: int) -> None:
    body = "1:1:1:1:1:3:7:1\n2:1:1:1:1:4:60000019:5\n2:1:1:1:1:6:60000019:0\n"
    trace = _open(tmp_path, _write(tmp_path, unit, body=body, end=9))
    got = {(r["name"], r["start_ns"], r["end_ns"]) for r in _rows(trace, "intervals")}
    assert got == {("Running", 3 * factor, 7 * factor), ("main", 4 * factor, 6 * factor)}
    assert _meta(trace, 0, "paraver_end_ns") == 9 * factor


def test_gzipped_prv_and_missing_pcf(tmp_path: Path) -> None:
    body = "1:1:1:1:1:0:5:1\n2:1:1:1:1:1:50000001:3\n2:1:1:1:1:2:50000001:0\n"
    prv = _write(tmp_path, "_ns", pcf=False, name="g.prv.gz", body=body)
    with pytest.warns(DataQualityWarning, match="no .pcf"):
        trace = _open(tmp_path, prv)
    got = {(r["name"], r["category"]) for r in _rows(trace, "intervals")}
    assert got == {("state 1", "state"), ("50000001 3", "mpi")}


def test_several_applications_offset_ranks(tmp_path: Path) -> None:
    prv = tmp_path / "apps.prv"
    prv.write_text("#Paraver (01/02/2024 at 10:00):10_ns:0:2:2(1:0,1:0),1(1:0)\n"
                   "1:0:2:1:1:0:10:1\n1:0:1:2:1:0:5:1\n")
    with pytest.warns(DataQualityWarning) as caught:
        trace = _open(tmp_path, prv)
    assert any("2 applications" in str(w.message) for w in caught)
    assert trace.ranks == [0, 1, 2]
    got = {(r["rank"], r["end_ns"]) for r in _rows(trace, "intervals")}
    assert got == {(2, 10), (1, 5)}  # application 2 task 1 -> rank 2; app 1 task 2 -> 1


def test_pair_regions_lifo_with_unmatched_and_unclosed() -> None:
    import numpy as np

    # One group: close(unmatched), open a, open b, close, open c, close, close, open d.
    opens = np.array([0, 1, 1, 0, 1, 0, 0, 1], dtype=bool)
    o, c, unclosed, unmatched = pair_regions(np.zeros(8, dtype=np.int64), opens)
    assert sorted(zip(o.tolist(), c.tolist(), strict=True)) == [(1, 6), (2, 3), (4, 5)]
    assert unclosed.tolist() == [7] and unmatched.tolist() == [0]


def test_tar_member_refused(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedFormatError, match="archive"):
        ParaverReader().read(Source(str(tmp_path / "a.tar"), member="t.prv"))


def test_bad_record_names_line(tmp_path: Path) -> None:
    """A damaged record is dropped with a warning naming its line (issue 18); a body
    without any usable record is refused."""
    prv = _write(tmp_path, "_ns", body="1:1:1:1:1:0:5:1\n2:1:1:1:1:x:50000001:3\n")
    with pytest.warns(DataQualityWarning, match="1 damaged record line.*line 3"):
        ParaverReader().read(Source(str(prv)))
    prv = _write(tmp_path, "_ns", body="1:1:1:1:9:0:5:1\n")
    with pytest.raises(CorruptTraceError, match="does not declare"):
        ParaverReader().read(Source(str(prv)))


def test_cli_broken_header_exits_2(tmp_path: Path, _cache_dir: Path) -> None:
    prv = tmp_path / "broken.prv"
    prv.write_text("#Paraver (01/02/2024 at 10:00):12x_ns:0:1:1(1:0)\n1:0:1:1:1:0:5:1\n")
    result = CliRunner().invoke(app, ["info", str(prv)])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error: ") and str(prv) in lines[0]
    assert "header" in lines[0]
    assert list(_cache_dir.iterdir()) == []  # no store, no temporary directory
