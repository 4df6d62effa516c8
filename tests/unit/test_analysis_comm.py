"""comm_matrix, comm_by_rank, message_histogram, comm_over_time on a Paraver trace written
here (3 tasks = ranks 0-2, times in ns); every expected value is worked out by hand from
the type-3 records below."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import traceatlas
from traceatlas import analysis
from traceatlas.cli.main import app
from traceatlas.errors import MissingDataError
from traceatlas.testing import TraceBuilder
from traceatlas.testing.paraver_text import write_prv

PCF = """STATES
1    Running
"""

# Type 3: 3:cpu_s:appl:task_s:thread_s:logical_send:physical_send:cpu_r:appl:task_r:
#         thread_r:logical_recv:physical_recv:size:tag   (task t -> rank t - 1)
BODY = """1:1:1:1:1:0:1000:1
1:2:1:2:1:0:1000:1
1:3:1:3:1:0:1000:1
3:1:1:1:1:100:110:2:1:2:1:90:120:1000:1
3:1:1:1:1:300:310:2:1:2:1:305:330:3000:1
3:2:1:2:1:500:510:1:1:1:1:480:520:24:2
3:3:1:3:1:900:905:1:1:1:1:700:990:8000:3
3:1:1:1:1:950:955:3:1:3:1:940:960:0:4
"""
# messages (src -> dst, bytes, send start, receive end):
#   m1 0 -> 1  1000 B  send 100  recv end 120
#   m2 0 -> 1  3000 B  send 300  recv end 330
#   m3 1 -> 0    24 B  send 500  recv end 520
#   m4 2 -> 0  8000 B  send 900  recv end 990
#   m5 0 -> 2     0 B  send 950  recv end 960


@pytest.fixture
def trace(tmp_path: Path) -> traceatlas.Trace:
    prv = write_prv(tmp_path, BODY, PCF, end_ns=1000)
    return traceatlas.open(traceatlas.ingest(prv, tmp_path / "s"))


def test_comm_matrix(trace: traceatlas.Trace) -> None:
    result = analysis.run("comm_matrix", trace)
    # pairs: 0->1 m1+m2 = 2 msgs, 4000 B; 0->2 m5 = 1 msg, 0 B; 1->0 m3 = 1, 24 B;
    # 2->0 m4 = 1, 8000 B; no other pair exchanged anything (no rows)
    assert result.table.columns == ["src", "dst", "count", "bytes"]
    assert result.table.rows() == [(0, 1, 2, 4000), (0, 2, 1, 0), (1, 0, 1, 24),
                                   (2, 0, 1, 8000)]
    assert result.notes == []


def test_comm_by_rank(trace: traceatlas.Trace) -> None:
    table = analysis.run("comm_by_rank", trace).table
    # rank 0 sends m1 m2 m5 (4000 B), receives m3 m4 (24 + 8000 B)
    # rank 1 sends m3 (24 B), receives m1 m2 (4000 B)
    # rank 2 sends m4 (8000 B), receives m5 (0 B)
    assert table.columns == ["rank", "sent_count", "sent_bytes", "recv_count", "recv_bytes"]
    assert table.rows() == [(0, 3, 4000, 2, 8024), (1, 1, 24, 2, 4000), (2, 1, 8000, 1, 0)]


def test_rank_selection_keeps_messages_touching_the_ranks(trace: traceatlas.Trace) -> None:
    # rank 2 takes part in m4 (2 -> 0) and m5 (0 -> 2) only
    rows = analysis.run("comm_matrix", trace.select(ranks="2")).table.rows()
    assert rows == [(0, 2, 1, 0), (2, 0, 1, 8000)]


def test_message_histogram_linear_and_log(trace: traceatlas.Trace) -> None:
    # sizes 1000 3000 24 8000 0; 4 linear bins over [0, 8000], width 2000:
    # [0,2000): 0 24 1000 -> 3; [2000,4000): 3000 -> 1; [4000,6000): 0; [6000,8000]: 8000 -> 1
    table = analysis.run("message_histogram", trace, {"bins": "4"}).table
    assert table.columns == ["bin", "bin_lo_bytes", "bin_hi_bytes", "count"]
    assert table.rows() == [(0, 0.0, 2000.0, 3), (1, 2000.0, 4000.0, 1),
                            (2, 4000.0, 6000.0, 0), (3, 6000.0, 8000.0, 1)]
    # log, 3 bins from max(min, 1) = 1 to 8000: edges 1, 20, 400, 8000;
    # [1,20): the 0-byte message (counted in the first bin) -> 1; [20,400): 24 -> 1;
    # [400,8000]: 1000 3000 8000 -> 3
    result = analysis.run("message_histogram", trace, {"bins": "3", "scale": "log"})
    assert result.table["count"].to_list() == [1, 1, 3]
    assert result.table["bin_lo_bytes"].to_list() == pytest.approx([1.0, 20.0, 400.0])
    assert result.table["bin_hi_bytes"].to_list()[-1] == pytest.approx(8000.0)
    assert any("smaller than 1 byte" in n for n in result.notes)


def test_message_histogram_default_bins_is_pipits_20(trace: traceatlas.Trace) -> None:
    table = analysis.run("message_histogram", trace).table
    assert table.height == 20 and table["count"].sum() == 5


def test_comm_over_time(trace: traceatlas.Trace) -> None:
    # span 0..1000 ns (the states), 4 bins of 250 ns
    # by send start: 100 -> bin 0; 300 -> 1; 500 -> 2; 900 and 950 -> 3
    table = analysis.run("comm_over_time", trace, {"bins": "4"}).table
    assert table.columns == ["bin", "bin_start_ns", "bin_end_ns", "count", "bytes"]
    assert table.rows() == [(0, 0, 250, 1, 1000), (1, 250, 500, 1, 3000),
                            (2, 500, 750, 1, 24), (3, 750, 1000, 2, 8000)]
    # by receive end: 120 -> 0; 330 -> 1; 520 -> 2; 990 and 960 -> 3 (same split here)
    by_recv = analysis.run("comm_over_time", trace, {"bins": "4", "by": "recv"}).table
    assert by_recv["count"].to_list() == [1, 1, 1, 2]
    # 3 bins: width 1000/3: edges 0, 333, 666, 1000 (floor); sends 100 300 -> 0;
    # 500 -> 1; 900 950 -> 2
    three = analysis.run("comm_over_time", trace, {"bins": "3"}).table
    assert three.select("bin_start_ns", "bin_end_ns", "count", "bytes").rows() == [
        (0, 333, 2, 4000), (333, 666, 1, 24), (666, 1000, 2, 8000)]


def test_bad_bins(trace: traceatlas.Trace) -> None:
    with pytest.raises(traceatlas.errors.InputError, match=r"out of range .*1\.\.100000"):
        analysis.run("comm_over_time", trace, {"bins": "0"})


def test_gpu_only_trace_has_no_messages(tmp_path: Path) -> None:
    b = TraceBuilder(0, 1, base_time_ns=1_000_000_000, profiler_markers=False)
    b.launch("void gemm()", 0, 1_000, 5_000, 1_000)
    store = traceatlas.ingest(b.write(tmp_path / "gemm.json"), tmp_path / "gemm")
    with pytest.raises(MissingDataError, match="point-to-point messages"):
        analysis.run("comm_matrix", traceatlas.open(store))
    runner = CliRunner()
    for name in ("comm_matrix", "message_histogram", "comm_over_time", "comm_by_rank"):
        result = runner.invoke(app, ["analyze", name, str(store)])
        assert result.exit_code == 2, (name, result.output)
        assert "no point-to-point messages (MPI)" in result.output
