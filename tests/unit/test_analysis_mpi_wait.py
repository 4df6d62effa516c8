"""mpi_wait on traces written here: a Paraver trace (3 ranks, ns) with a late sender, a late
receiver, an eager send and a wait completing two late messages, and an OTF2 archive
with a 3 ms late sender; expected values are worked out by hand next to the records."""

from __future__ import annotations

import types
from pathlib import Path

import otf2  # type: ignore[import-untyped]
import pytest
from otf2.enums import GroupType, Paradigm, RegionRole  # type: ignore[import-untyped]
from typer.testing import CliRunner

import traceatlas
from traceatlas import analysis
from traceatlas.cli.main import app
from traceatlas.errors import MissingDataError
from traceatlas.testing import TraceBuilder
from traceatlas.testing.paraver_text import MPI_P2P, message, mpi_call, mpi_events, pcf, write_prv

MS = 1_000_000
PCF = pcf({1: "Running"}, mpi_events(
    MPI_P2P, {1: "MPI_Send", 2: "MPI_Recv", 4: "MPI_Irecv", 5: "MPI_Wait"}))


SEND, RECV, IRECV, WAIT = 1, 2, 4, 5
BODY = "".join([
    # (a) late sender of 3 ms: rank 1 enters MPI_Recv at 10 ms, rank 0's MPI_Send starts
    # at 13 ms. Receiver's blocking call = the MPI_Recv holding the physical receive
    # (13.8 ms): [10, 14] -> late sender = min(13, 14) - 10 = 3 ms on rank 1.
    mpi_call(2, RECV, 10, 14), mpi_call(1, SEND, 13, 13.5),
    message(0, 1, 13, 13.2, 10, 13.8, 100),
    # (b) late receiver of 2 ms: rank 0's MPI_Send [20, 23] still runs (data leaves at
    # 22.5) when rank 1 posts MPI_Recv at 22 -> late receiver = 22 - 20 = 2 ms on rank 0.
    # Receiver side: send (20) starts before the Recv (22): no late sender.
    mpi_call(1, SEND, 20, 23), mpi_call(2, RECV, 22, 23.5),
    message(0, 1, 20, 22.5, 22, 23, 1 << 20),
    # (c) eager: MPI_Send [30, 30.5] returns before MPI_Recv [32, 33] is posted: nothing.
    mpi_call(1, SEND, 30, 30.5), mpi_call(2, RECV, 32, 33),
    message(0, 1, 30, 30.2, 32, 32.5, 8),
    # (d) rank 2 posts two MPI_Irecv (40 and 40.2 ms) then waits in MPI_Wait [41, 46];
    # rank 0 sends A at 43 ms, rank 1 sends B at 45 ms; both arrive during the wait.
    # Per message: A 43 - 41 = 2 ms, B 45 - 41 = 4 ms; one blocking call -> rank 2
    # counts once with the larger: 4 ms, count 1.
    mpi_call(3, IRECV, 40, 40.1), mpi_call(3, IRECV, 40.2, 40.3), mpi_call(3, WAIT, 41, 46),
    mpi_call(1, SEND, 43, 43.5), mpi_call(2, SEND, 45, 45.5),
    message(0, 2, 43, 43.2, 40, 43.6, 64), message(1, 2, 45, 45.2, 40.2, 45.6, 64),
])


@pytest.fixture
def trace(tmp_path: Path) -> traceatlas.Trace:
    return traceatlas.open(traceatlas.ingest(write_prv(tmp_path, BODY, PCF), tmp_path / "s"))


def test_per_rank(trace: traceatlas.Trace) -> None:
    table = analysis.run("mpi_wait", trace).table
    assert table.columns == ["rank", "late_sender_ns", "late_sender_count",
                             "late_receiver_ns", "late_receiver_count"]
    assert table.rows() == [
        (0, 0, 0, 2 * MS, 1),      # (b)
        (1, 3 * MS, 1, 0, 0),      # (a)
        (2, 4 * MS, 1, 0, 0),      # (d): one MPI_Wait, the larger of 2 and 4 ms
    ]


def test_per_message(trace: traceatlas.Trace) -> None:
    per = analysis.run("mpi_wait", trace).extra["messages"]
    rows = per.sort("send_start_ns").select(
        "src_rank", "dst_rank", "recv_block_start_ns", "recv_block_end_ns",
        "late_sender_ns", "late_receiver_ns").rows()
    assert rows == [
        (0, 1, 10 * MS, 14 * MS, 3 * MS, 0),             # (a)
        (0, 1, 22 * MS, int(23.5 * MS), 0, 2 * MS),      # (b)
        (0, 1, 32 * MS, 33 * MS, 0, 0),                  # (c)
        (0, 2, 41 * MS, 46 * MS, 2 * MS, 0),             # (d) A
        (1, 2, 41 * MS, 46 * MS, 4 * MS, 0),             # (d) B
    ]


def test_messages_without_mpi_calls_use_their_own_times(tmp_path: Path) -> None:
    # No MPI calls: the receive (10..14 ms) is its own blocking call; send starts at
    # 13 ms -> late sender 3 ms on rank 1.
    body = message(0, 1, 13, 13.2, 10, 14, 100)
    t = traceatlas.open(traceatlas.ingest(write_prv(tmp_path, body, PCF, tasks=2),
                                          tmp_path / "s"))
    result = analysis.run("mpi_wait", t)
    assert result.table.rows() == [(0, 0, 0, 0, 0), (1, 3 * MS, 1, 0, 0)]
    assert any("no MPI calls" in n for n in result.notes)


def _otf2_late_sender(root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Rank 1 enters MPI_Recv at t = 1 ms; rank 0 enters MPI_Send at t + 3 ms (1 tick = 1
    ns). Late sender = 4 ms - 1 ms = 3 ms on rank 1; the send returns (4.5 ms) after the
    receive was posted (1 ms) but the receive was posted before the send: no late
    receiver."""
    monkeypatch.setattr(otf2.writer, "time", types.SimpleNamespace(time=lambda: 1.7e9))
    with otf2.writer.open(str(root), timer_resolution=1_000_000_000) as archive:
        d = archive.definitions
        node = d.system_tree_node("node", class_name="node")
        locs = [d.location("Master thread", group=d.location_group(
            f"MPI Rank {r}", system_tree_parent=node)) for r in (0, 1)]
        d.group("", group_type=GroupType.COMM_LOCATIONS, paradigm=Paradigm.MPI,
                members=locs)
        world = d.comm("MPI_COMM_WORLD", group=d.group(
            "", group_type=GroupType.COMM_GROUP, paradigm=Paradigm.MPI, members=[0, 1]))
        send = d.region("MPI_Send", paradigm=Paradigm.MPI, region_role=RegionRole.POINT2POINT)
        recv = d.region("MPI_Recv", paradigm=Paradigm.MPI, region_role=RegionRole.POINT2POINT)
        w0 = archive.event_writer_from_location(locs[0])
        w1 = archive.event_writer_from_location(locs[1])
        w1.enter(1 * MS, recv)
        w0.enter(4 * MS, send)
        w0.mpi_send(4 * MS + 100, 1, world, 7, 4096)
        w0.leave(int(4.5 * MS), send)
        w1.mpi_recv(5 * MS, 0, world, 7, 4096)
        w1.leave(5 * MS + 10, recv)
    return root / "traces.otf2"


def test_otf2_late_sender_of_3_ms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    anchor = _otf2_late_sender(tmp_path / "a", monkeypatch)
    t = traceatlas.open(traceatlas.ingest(anchor, tmp_path / "s"))
    table = analysis.run("mpi_wait", t).table
    assert table.rows() == [(0, 0, 0, 0, 0), (1, 3_000_000, 1, 0, 0)]


def test_gpu_only_trace_cli_exit_2(tmp_path: Path) -> None:
    b = TraceBuilder(0, 1, base_time_ns=1_000_000_000, profiler_markers=False)
    b.launch("void gemm()", 0, 1_000, 5_000, 1_000)
    store = traceatlas.ingest(b.write(tmp_path / "gemm.json"), tmp_path / "gemm")
    with pytest.raises(MissingDataError):
        analysis.run("mpi_wait", traceatlas.open(store))
    result = CliRunner().invoke(app, ["analyze", "mpi_wait", str(store)])
    assert result.exit_code == 2
    assert "no point-to-point messages (MPI)" in result.output
