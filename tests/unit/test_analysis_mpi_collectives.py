"""mpi_collectives on traces written here: an OTF2 archive (3 ranks, collective records
set the ``collective`` column; 1 tick = 1 ns) and a Paraver trace (collectives known by
name only). Expected values are worked out by hand next to the events."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import otf2  # type: ignore[import-untyped]
import pytest
from otf2.enums import (  # type: ignore[import-untyped]
    CollectiveOp,
    GroupType,
    Paradigm,
    RegionRole,
)
from typer.testing import CliRunner

import traceatlas
from traceatlas import analysis
from traceatlas.cli.main import app
from traceatlas.errors import MissingDataError
from traceatlas.testing import TraceBuilder

MS = 1_000_000

# (op, region name, bytes sent, per rank (enter ms, exit ms))
CALLS: list[tuple[Any, str, int, list[tuple[float, float]]]] = [
    # allreduce: ranks 0 and 1 enter at 10 ms, rank 2 arrives 5 ms late (15 ms); all leave
    # at 20 ms. Late rank 2; skew 5 ms; wait: 0 -> 5 ms, 1 -> 5 ms, 2 -> 0; total 10 ms.
    (CollectiveOp.ALLREDUCE, "MPI_Allreduce", 64, [(10, 20), (10, 20), (15, 20)]),
    # barrier: rank 0 late by 1 ms (31 vs 30); waits 0, 1, 1 ms; total 2 ms.
    (CollectiveOp.BARRIER, "MPI_Barrier", 0, [(31, 32), (30, 32), (30, 32)]),
    # bcast: rank 0 (root) enters at 40 and leaves at 40.5, before rank 1 (last, 41)
    # enters: its wait is capped at its own call: min(41, 40.5) - 40 = 0.5 ms; rank 2:
    # 41 - 39 = 2 ms; rank 1: 0. Total 2.5 ms.
    (CollectiveOp.BCAST, "MPI_Bcast", 4096, [(40, 40.5), (41, 42), (39, 42)]),
]


def _write_otf2(root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(otf2.writer, "time", types.SimpleNamespace(time=lambda: 1.7e9))
    with otf2.writer.open(str(root), timer_resolution=1_000_000_000) as archive:
        d = archive.definitions
        node = d.system_tree_node("node", class_name="node")
        locs = [d.location("Master thread", group=d.location_group(
            f"MPI Rank {r}", system_tree_parent=node)) for r in range(3)]
        d.group("", group_type=GroupType.COMM_LOCATIONS, paradigm=Paradigm.MPI,
                members=locs)
        world = d.comm("MPI_COMM_WORLD", group=d.group(
            "", group_type=GroupType.COMM_GROUP, paradigm=Paradigm.MPI, members=[0, 1, 2]))
        main = d.region("main", paradigm=Paradigm.USER, region_role=RegionRole.FUNCTION)
        writers = [archive.event_writer_from_location(loc) for loc in locs]
        for w in writers:
            w.enter(0, main)
        for op, name, size, times in CALLS:
            region = d.region(name, paradigm=Paradigm.MPI,
                              region_role=RegionRole.COLL_ALL2ALL)
            for w, (enter, leave) in zip(writers, times, strict=True):
                t0, t1 = int(enter * MS), int(leave * MS)
                w.enter(t0, region)
                w.mpi_collective_begin(t0 + 1)
                w.mpi_collective_end(t1 - 1, op, world, 0, size, size)
                w.leave(t1, region)
        for w in writers:
            w.leave(50 * MS, main)
    return root / "traces.otf2"


@pytest.fixture
def otf2_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> traceatlas.Trace:
    anchor = _write_otf2(tmp_path / "a", monkeypatch)
    return traceatlas.open(traceatlas.ingest(anchor, tmp_path / "s"))


def test_instances(otf2_trace: traceatlas.Trace) -> None:
    result = analysis.run("mpi_collectives", otf2_trace)
    t = result.table
    assert t.select("instance", "op", "communicator", "occurrence", "ranks", "bytes",
                    "skew_ns", "late_rank", "total_wait_ns").rows() == [
        (0, "allreduce", "MPI_COMM_WORLD", 0, 3, 64, 5 * MS, 2, 10 * MS),
        (1, "barrier", "MPI_COMM_WORLD", 0, 3, 0, 1 * MS, 0, 2 * MS),
        (2, "bcast", "MPI_COMM_WORLD", 0, 3, 4096, 2 * MS, 1, int(2.5 * MS)),
    ]
    first = t.row(0, named=True)
    assert first["last_enter_ns"] - first["first_enter_ns"] == 5 * MS
    assert first["last_exit_ns"] - first["last_enter_ns"] == 5 * MS


def test_per_rank_and_by_rank(otf2_trace: traceatlas.Trace) -> None:
    result = analysis.run("mpi_collectives", otf2_trace)
    per = result.extra["per_rank"]
    assert per.select("instance", "rank", "wait_ns", "late").rows() == [
        (0, 0, 5 * MS, False), (0, 1, 5 * MS, False), (0, 2, 0, True),
        (1, 0, 0, True), (1, 1, 1 * MS, False), (1, 2, 1 * MS, False),
        (2, 0, int(0.5 * MS), False), (2, 1, 0, True), (2, 2, 2 * MS, False),
    ]
    assert per.filter(instance=0)["dur_ns"].to_list() == [10 * MS, 10 * MS, 5 * MS]
    # by rank: own waits summed; late_count / caused_wait_ns from the instances it was late
    # rank 0: 5 + 0 + 0.5 ms, late once (barrier, 2 ms caused)
    # rank 1: 5 + 1 + 0 ms, late once (bcast, 2.5 ms)
    # rank 2: 0 + 1 + 2 ms, late once (allreduce, 10 ms)
    assert result.extra["by_rank"].rows() == [
        (0, 3, int(5.5 * MS), 1, 2 * MS),
        (1, 3, 6 * MS, 1, int(2.5 * MS)),
        (2, 3, 3 * MS, 1, 10 * MS),
    ]


PCF = """STATES
1    Running

EVENT_TYPE
9    50000002    MPI Collective Comm
VALUES
0   Outside MPI
8   MPI_Barrier
10  MPI_Allreduce
"""


def test_paraver_collectives_by_name(tmp_path: Path) -> None:
    # two MPI_Allreduce per rank, matched by occurrence; no communicator in Paraver.
    # 1st: enters 50 / 51 / 52 us, all leave 53 us -> late rank 2, waits 2, 1, 0 us.
    # 2nd: enters 70 / 60 / 60 us, all leave 71 us -> late rank 0, waits 0, 10, 10 us.
    # An MPI_Barrier on ranks 0 and 1 only (2 ranks): enters 80 / 82, leave 83 ->
    # late rank 1, wait 2 us.
    rows = []
    for task, (a, b) in enumerate([(50, 70), (51, 60), (52, 60)], start=1):
        rows += [f"2:{task}:1:{task}:1:{a}:50000002:10", f"2:{task}:1:{task}:1:53:50000002:0",
                 f"2:{task}:1:{task}:1:{b}:50000002:10", f"2:{task}:1:{task}:1:71:50000002:0"]
    for task, enter in ((1, 80), (2, 82)):
        rows += [f"2:{task}:1:{task}:1:{enter}:50000002:8", f"2:{task}:1:{task}:1:83:50000002:0"]
    prv = tmp_path / "t.prv"
    prv.write_text("#Paraver (01/02/2024 at 10:00):100:0:1:3(1:0,1:0,1:0)\n"
                   + "\n".join(rows) + "\n")
    (tmp_path / "t.pcf").write_text(PCF)
    t = traceatlas.open(traceatlas.ingest(prv, tmp_path / "s"))
    us = 1_000
    result = analysis.run("mpi_collectives", t)
    assert result.table.select("op", "communicator", "ranks", "late_rank", "skew_ns",
                               "total_wait_ns").rows() == [
        ("allreduce", None, 3, 2, 2 * us, 3 * us),
        ("allreduce", None, 3, 0, 10 * us, 20 * us),
        ("barrier", None, 2, 1, 2 * us, 2 * us),
    ]


def test_no_mpi_calls(tmp_path: Path) -> None:
    b = TraceBuilder(0, 1, base_time_ns=1_000_000_000, profiler_markers=False)
    b.launch("void gemm()", 0, 1_000, 5_000, 1_000)
    store = traceatlas.ingest(b.write(tmp_path / "gemm.json"), tmp_path / "gemm")
    with pytest.raises(MissingDataError, match="MPI calls"):
        analysis.run("mpi_collectives", traceatlas.open(store))
    result = CliRunner().invoke(app, ["analyze", "mpi_collectives", str(store)])
    assert result.exit_code == 2
    assert "no MPI calls (category mpi intervals)" in result.output
