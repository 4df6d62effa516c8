"""Issue 18, section 9, Paraver: damaged records are counted, dropped and reported
(exit 2 only when nothing is usable); garbage ``.pcf``/``.row`` files are ignored with a
warning naming them; names are data (any Unicode, kept whole).

Traces are written here by hand (``traceatlas.testing.paraver_text``); every expected
count follows from the lines below. Times: ns (header unit ``_ns``), tasks 1-based.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from traceatlas.cli.main import app
from traceatlas.errors import CorruptTraceError, DataQualityWarning
from traceatlas.io.paraver import ParaverReader
from traceatlas.io.quality import DATA_QUALITY_KEY
from traceatlas.io.reading import RankData
from traceatlas.io.sources import Source
from traceatlas.testing.paraver_text import MPI_P2P, message, mpi_call, mpi_events, pcf, write_prv

PCF = pcf({1: "Running", 3: "Waiting a message"},
          mpi_events(MPI_P2P, {1: "MPI_Send", 2: "MPI_Recv"}))
GOOD = ("1:1:1:1:1:0:10000000:1\n1:2:1:2:1:0:10000000:1\n"
        + mpi_call(1, 1, 1, 2) + mpi_call(2, 2, 1, 3) + message(0, 1, 1, 2, 1, 3, 64))
"""Two states, two MPI calls (4 event records), one message: 7 record lines."""


def _read(prv: Path) -> tuple[list[RankData], list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ranks = ParaverReader().read(Source(str(prv)))
    return ranks, [str(w.message) for w in caught if issubclass(w.category, DataQualityWarning)]


def _count(ranks: list[RankData], table: str, category: str | None = None) -> int:
    return sum(sum(1 for c in r.tables[table].column("category").to_pylist() if c == category)
               if category else r.tables[table].num_rows for r in ranks)


def _meta(rank: RankData, key: str) -> Any:
    meta = dict(zip(rank.tables["metadata"]["key"].to_pylist(),
                    rank.tables["metadata"]["value"].to_pylist(), strict=True))
    return json.loads(meta[key])


def _cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def test_good_trace_reads_without_warnings(tmp_path: Path) -> None:
    ranks, messages = _read(write_prv(tmp_path, GOOD, PCF, tasks=2))
    assert messages == []
    assert (_count(ranks, "intervals", "state"), _count(ranks, "intervals", "mpi"),
            _count(ranks, "messages")) == (2, 2, 1)
    assert _meta(ranks[0], "paraver_records_dropped") == {}
    assert _meta(ranks[0], DATA_QUALITY_KEY) == []


def test_state_ending_before_it_begins_is_dropped(tmp_path: Path) -> None:
    """Before: kept with a negative duration and no warning."""
    body = GOOD + "1:1:1:1:1:500:400:3\n"  # line 9: ends at 400, begins at 500
    ranks, messages = _read(write_prv(tmp_path, body, PCF, tasks=2))
    assert _count(ranks, "intervals", "state") == 2
    assert all(d >= 0 for r in ranks for d in r.tables["intervals"]["dur_ns"].to_pylist())
    (line,) = [m for m in messages if "dropped" in m]
    assert "1 damaged record line(s) dropped: a state that ends before it begins: 1 " \
        "(first: line 9)" in line
    assert _meta(ranks[0], "paraver_records_dropped") == {
        "a state that ends before it begins": 1}
    (note,) = _meta(ranks[0], DATA_QUALITY_KEY)
    assert (note["rows"], note["categories"]) == (1, ["state"])


def test_message_received_before_sent_is_kept_and_counted(tmp_path: Path) -> None:
    body = GOOD + message(1, 0, 5, 6, 1, 2, 8)  # physical receive 2 ms < logical send 5 ms
    ranks, messages = _read(write_prv(tmp_path, body, PCF, tasks=2))
    assert _count(ranks, "messages") == 2
    assert any("1 received (physical receive) before they were sent" in m for m in messages)
    assert _meta(ranks[0], "paraver_messages_received_before_sent") == 1


def test_garbage_body_lines_are_counted_and_dropped(tmp_path: Path) -> None:
    """One of each kind of damage, lines 9-13 (line 1 is the header)."""
    body = GOOD + ("1:1:1:1:1:0:x:1\n"            # 9: not an integer
                   "1:1:1:1:1:0:5\n"              # 10: 7 fields
                   "1:1:1:7:1:0:5:1\n"            # 11: task 7 is not declared
                   "2:1:1:1:1:5:50000001:\xe9\n"  # 12: not ASCII
                   "1:1:1:1:1:0:99999999999999999999:1\n")  # 13: 20 digits
    ranks, messages = _read(write_prv(tmp_path, body, PCF, tasks=2))
    assert (_count(ranks, "intervals", "state"), _count(ranks, "intervals", "mpi"),
            _count(ranks, "messages")) == (2, 2, 1)
    (line,) = [m for m in messages if "dropped" in m]
    assert "5 damaged record line(s) dropped" in line
    assert _meta(ranks[0], "paraver_records_dropped") == {
        "a field is not an integer": 3, "wrong number of fields": 1,
        "an application:task:thread the header does not declare": 1}
    assert _meta(ranks[0], "paraver_record_counts_rank") == {"1": 1, "2": 2, "3": 1}


def test_time_out_of_range_is_dropped(tmp_path: Path) -> None:
    """In ms, 10^17 ms is past 2^62 ns: dropped, not wrapped around."""
    prv = tmp_path / "ms.prv"
    prv.write_text("#Paraver (01/02/2024 at 10:00):10_ms:0:1:1(1:0)\n"
                   "1:1:1:1:1:0:5:1\n1:1:1:1:1:0:100000000000000000:1\n")
    ranks, messages = _read(prv)
    assert [(r["start_ns"], r["end_ns"]) for r in ranks[0].tables["intervals"].to_pylist()] \
        == [(0, 5_000_000)]
    assert any("a time out of range: 1 (first: line 3)" in m for m in messages)


def test_truncated_last_line_is_dropped(tmp_path: Path) -> None:
    """A file cut inside its last record: the record could be whole by chance
    ("...:1" cut from "...:12"), so a last line without a line end is not kept."""
    prv = write_prv(tmp_path, GOOD + "1:2:1:2:1:20000000:30000000:1", PCF, tasks=2)
    ranks, messages = _read(prv)
    assert _count(ranks, "intervals", "state") == 2
    assert any("the last line has no line end (truncated file?): 1 (first: line 9)" in m
               for m in messages)


@pytest.mark.parametrize("body", ["\x00\x01garbage\n" * 5, "1:1:1:1:9:0:5:1\n",
                                  "1:1:1:1:1:0:5\n1:x\n"])
def test_nothing_usable_exits_2(tmp_path: Path, body: str) -> None:
    prv = write_prv(tmp_path, body, PCF, tasks=2)
    with pytest.raises(CorruptTraceError, match="no usable Paraver record"):
        ParaverReader().read(Source(str(prv)))
    result = _cli("info", str(prv))
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and str(prv) in line and "no usable" in line


@pytest.mark.parametrize("header", [
    "#Paraver (d):10_ns:0:1:1(1000000001:0)",       # a billion threads
    "#Paraver (d):" + "9" * 5000 + "_ns:0:1:1(1:0)",  # past Python's int() digit limit
    "#Paraver (d):9999999999999999999_ms:0:1:1(1:0)",  # end past 2^62 ns
    "#Paraver (d):10_ns:0:1:1(" + "9" * 5000 + ":0)",
])
def test_absurd_headers_exit_2(tmp_path: Path, header: str) -> None:
    prv = tmp_path / "h.prv"
    prv.write_text(f"{header}\n1:1:1:1:1:0:5:1\n")
    result = _cli("info", str(prv))
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert str(prv) in line and "Traceback" not in result.output


@pytest.mark.parametrize(("junk", "why"), [
    (b"\x00\x01\x02\xff" * 100, "binary data"),
    (bytes(range(128, 256)) * 10, "not text"),
    (b"hello\nthis is not a pcf\n", "no Paraver .pcf section"),
])
def test_garbage_pcf_is_ignored_with_a_warning(tmp_path: Path, junk: bytes, why: str) -> None:
    prv = write_prv(tmp_path, GOOD, PCF, tasks=2)
    (tmp_path / "t.pcf").write_bytes(junk)
    ranks, messages = _read(prv)
    assert any(m.startswith(f"{tmp_path / 't.pcf'}: ignored") and why in m for m in messages)
    names = {n for r in ranks for n in r.tables["intervals"]["name"].to_pylist()}
    assert names == {"state 1", "50000001 1", "50000001 2"}  # as without a .pcf
    assert _meta(ranks[0], "paraver_pcf").startswith("ignored")


def test_bad_pcf_lines_are_counted(tmp_path: Path) -> None:
    pcf = PCF.replace("3    Waiting a message", "3    Waiting a message\nxx yy\n\u00b2 two")
    prv = write_prv(tmp_path, GOOD, pcf, tasks=2)
    ranks, messages = _read(prv)
    assert any("2 line(s) in STATES/EVENT_TYPE blocks" in m and "first: line 4" in m
               for m in messages), messages
    assert {n for n in ranks[0].tables["intervals"]["name"].to_pylist()} >= {"Running"}


def test_garbage_row_is_ignored(tmp_path: Path) -> None:
    prv = write_prv(tmp_path, GOOD, PCF, tasks=2)
    (tmp_path / "t.row").write_bytes(b"\x00" * 64)
    ranks, messages = _read(prv)
    assert any(m.startswith(f"{tmp_path / 't.row'}: ignored") for m in messages)
    assert _meta(ranks[0], "paraver_row").startswith("ignored")


def test_row_names_are_data(tmp_path: Path) -> None:
    """A thread may be named like a LEVEL line, hold [markup], Unicode line and space
    separators; a .row with the wrong number of threads is not used for names."""
    names = ["LEVEL CPU SIZE 2", "gemm[bold]\u2028x\u0085y\u3000z"]
    prv = write_prv(tmp_path, GOOD, PCF, tasks=2)
    (tmp_path / "t.row").write_text("LEVEL THREAD SIZE 2\n" + "\n".join(names) + "\n")
    ranks, messages = _read(prv)
    assert messages == []
    assert [r.tables["tracks"]["name"][0].as_py() for r in ranks] == names
    (tmp_path / "t.row").write_text("LEVEL THREAD SIZE 3\na\nb\nc\n")
    ranks, messages = _read(prv)
    assert any("3 thread name(s) for the 2 thread(s)" in m for m in messages)


def test_pcf_labels_keep_unicode_separators(tmp_path: Path) -> None:
    label = "MPI_Send\u2028[/]\x1c:x:\u00a0$;`"
    prv = write_prv(tmp_path, GOOD, PCF.replace("1   MPI_Send", f"1   {label}"), tasks=2)
    ranks, _messages = _read(prv)
    assert label in {n for r in ranks for n in r.tables["intervals"]["name"].to_pylist()}


def test_missing_data_message_quotes_the_dropped_records(tmp_path: Path) -> None:
    """Every MPI record names an undeclared thread: ``mpi_wait`` says no MPI calls and
    quotes the file and the reason."""
    body = "1:1:1:1:1:0:10000000:1\n" + mpi_call(1, 1, 1, 2).replace(":1:1:1:", ":1:1:5:")
    prv = write_prv(tmp_path, body, PCF, tasks=1)
    result = _cli("analyze", "mpi_collectives", str(prv))
    assert result.exit_code == 2, result.output
    (line,) = [ln for ln in result.stderr.splitlines() if ln.startswith("error")]
    assert f"{prv}: records 2 line(s) dropped: an application:task:thread the header does " \
        "not declare (first: line 3)" in line
