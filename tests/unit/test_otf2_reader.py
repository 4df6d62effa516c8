"""OTF2 reader on a small archive written here with ``otf2.writer``; every expected value
is computed by hand from the events written below.

Clock: 3,000,000 ticks/s, so 3 ticks = 1000 ns and ns = round((t - 100) * 1000 / 3)
(100 = the first timestamp = global offset); the writer's realtime timestamp is pinned to
1,700,000,000 s, so every time is shifted by BASE = 1.7e18 ns.
"""

from __future__ import annotations

import json
import shutil
import tarfile
import types
import warnings
from pathlib import Path
from typing import Any

import otf2  # type: ignore[import-untyped]
import pyarrow as pa
import pytest
from otf2.enums import (  # type: ignore[import-untyped]
    CollectiveOp,
    GroupType,
    LocationGroupType,
    LocationType,
    Paradigm,
    RegionRole,
    Type,
)
from typer.testing import CliRunner

import traceatlas
from traceatlas.cli.main import app
from traceatlas.errors import CorruptTraceError, DataQualityWarning, UnsupportedFormatError
from traceatlas.io.otf2 import Otf2Reader
from traceatlas.io.reading import RankData
from traceatlas.io.registry import detect
from traceatlas.io.sources import Source

BASE = 1_700_000_000 * 10**9


def _write_archive(root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two MPI ranks (+ one CUDA stream of rank 0); returns the anchor path."""
    monkeypatch.setattr(otf2.writer, "time", types.SimpleNamespace(time=lambda: 1.7e9))
    with otf2.writer.open(str(root), timer_resolution=3_000_000) as trace:
        d = trace.definitions
        machine = d.system_tree_node("Linux", class_name="machine")
        node = d.system_tree_node("node7", class_name="node", parent=machine)
        gpu_node = d.system_tree_node("0", class_name="CUDA device", parent=node)
        g0 = d.location_group("MPI Rank 0", system_tree_parent=node)
        g1 = d.location_group("MPI Rank 1", system_tree_parent=node)
        ctx = d.location_group("CUDA Context 0", system_tree_parent=gpu_node,
                               location_group_type=LocationGroupType.ACCELERATOR,
                               creating_location_group=g0)
        l0 = d.location("Master thread", group=g0)
        l1 = d.location("Master thread", group=g1)
        lg = d.location("CUDA[0:7]", group=ctx, type=LocationType.GPU)
        d.group("", group_type=GroupType.COMM_LOCATIONS, paradigm=Paradigm.MPI,
                members=[l0, l1])
        world = d.comm("MPI_COMM_WORLD", group=d.group(
            "", group_type=GroupType.COMM_GROUP, paradigm=Paradigm.MPI, members=[0, 1]))
        # SUB_COMM lists the world ranks reversed: local 0 is world 1, local 1 is world 0.
        sub = d.comm("SUB_COMM", group=d.group(
            "sub", group_type=GroupType.COMM_GROUP, paradigm=Paradigm.MPI, members=[1, 0]))

        def region(name: str, paradigm: Any, role: Any = RegionRole.FUNCTION,
                   **kw: Any) -> Any:
            return d.region(name, paradigm=paradigm, region_role=role, **kw)

        main = region("main", Paradigm.COMPILER, source_file="a.c", begin_line_number=5)
        compute = region("compute", Paradigm.USER)
        leaky = region("leaky", Paradigm.USER)
        send = region("MPI_Send", Paradigm.MPI, RegionRole.POINT2POINT)
        recv = region("MPI_Recv", Paradigm.MPI, RegionRole.POINT2POINT)
        allreduce = region("MPI_Allreduce", Paradigm.MPI, RegionRole.COLL_ALL2ALL)
        sgemm = region("sgemm", Paradigm.CUDA, RegionRole.KERNEL)
        nccl = region("ncclAllReduceKernel", Paradigm.CUDA, RegionRole.KERNEL)
        memcpy = region("cudaMemcpyDtoH", Paradigm.CUDA, RegionRole.DATA_TRANSFER)
        memset = region("memset32", Paradigm.CUDA, RegionRole.KERNEL)
        ins = d.metric("PAPI_TOT_INS", unit="#", value_type=Type.UINT64)

        w0 = trace.event_writer_from_location(l0)
        w0.enter(100, main)
        w0.enter(103, compute)
        w0.leave(109, compute)
        w0.enter(112, send)
        w0.mpi_send(113, 0, sub, 42, 4096)  # local 0 of SUB_COMM = world rank 1
        w0.leave(118, send)
        w0.enter(121, allreduce)
        w0.mpi_collective_begin(122)
        w0.mpi_collective_end(127, CollectiveOp.ALLREDUCE, world, 0, 64, 64)
        w0.leave(130, allreduce)
        w0.metric(131, ins, 1234)
        w0.mpi_collective_begin(133)  # no MPI region around it: an interval of its own
        w0.mpi_collective_end(136, CollectiveOp.BARRIER, world, 0, 0, 0)
        w0.leave(160, main)

        wg = trace.event_writer_from_location(lg)
        for start, end, reg in ((104, 110, sgemm), (111, 120, nccl), (121, 124, memcpy),
                                (125, 126, memset)):
            wg.enter(start, reg)
            wg.leave(end, reg)

        w1 = trace.event_writer_from_location(l1)
        w1.enter(101, main)
        w1.enter(115, recv)
        w1.mpi_recv(117, 1, sub, 42, 4096)  # local 1 of SUB_COMM = world rank 0
        w1.leave(119, recv)
        w1.enter(121, allreduce)
        w1.mpi_collective_begin(123)
        w1.mpi_collective_end(128, CollectiveOp.ALLREDUCE, world, 0, 64, 64)
        w1.leave(131, allreduce)
        w1.enter(132, send)
        w1.mpi_send(133, 0, world, 99, 8)  # never received
        w1.leave(134, send)
        w1.enter(140, leaky)  # leaky and main are never left
        w1.metric(145, ins, 77)
    return root / "traces.otf2"


@pytest.fixture
def anchor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return _write_archive(tmp_path / "archive", monkeypatch)


@pytest.fixture
def ranks(anchor: Path) -> list[RankData]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = Otf2Reader().read(Source(str(anchor)), threads=1)
    texts = [str(w.message) for w in caught if issubclass(w.category, DataQualityWarning)]
    assert any("2 Enter event(s) without a Leave on 1 location(s)" in t for t in texts), texts
    assert any("1 MPI send(s) without a matching receive and 0 receive(s)" in t
               for t in texts), texts
    return result


def _rows(table: pa.Table, *columns: str) -> list[tuple[Any, ...]]:
    data = table.sort_by([("track_id", "ascending"), ("start_ns", "ascending")]) \
        if "start_ns" in table.column_names else table
    return list(zip(*(data.column(c).to_pylist() for c in columns), strict=True))


def test_detect_picks_otf2(anchor: Path) -> None:
    assert detect(Source(str(anchor))).name == "otf2"


def test_ranks_clock_and_metadata(ranks: list[RankData]) -> None:
    assert [r.rank for r in ranks] == [0, 1]
    for r in ranks:
        assert r.world_size == 2
        assert r.host == "node7"
        assert r.rank_source == "OTF2 location group"
        assert r.source_format == "otf2"
        assert r.clock == {"method": "OTF2 ClockProperties realtime_timestamp",
                           "base_ns": BASE, "offset_ns": 0}
        meta = dict(zip(r.tables["metadata"]["key"].to_pylist(),
                        r.tables["metadata"]["value"].to_pylist(), strict=True))
        clock = json.loads(meta["otf2_clock"])
        assert clock["timer_resolution"] == 3_000_000
        assert clock["global_offset"] == 100
        assert clock["realtime_timestamp"] == BASE


def test_tracks(ranks: list[RankData]) -> None:
    t0 = ranks[0].tables["tracks"]
    assert _rows(t0, "track_id", "kind", "name", "device", "stream") == [
        (0, "host_thread", "Master thread", -1, -1),
        (1, "gpu_stream", "CUDA[0:7]", 0, 7),
        (2, "counter", "Master thread metrics", -1, -1),
    ]
    t1 = ranks[1].tables["tracks"]
    assert _rows(t1, "track_id", "kind", "name") == [
        (0, "host_thread", "Master thread"), (1, "counter", "Master thread metrics")]


def test_intervals_rank0(ranks: list[RankData]) -> None:
    iv = ranks[0].tables["intervals"]
    got = _rows(iv, "track_id", "name", "category", "start_ns", "end_ns", "depth")
    assert [(t, n, c, s - BASE, e - BASE, d) for t, n, c, s, e, d in got] == [
        (0, "main", "region", 0, 20000, 0),
        (0, "compute", "region", 1000, 3000, 1),
        (0, "MPI_Send", "mpi", 4000, 6000, 1),
        (0, "MPI_Allreduce", "mpi", 7000, 10000, 1),
        (0, "barrier", "mpi", 11000, 12000, 1),
        (1, "sgemm", "kernel", 1333, 3333, 0),          # ticks 104..110
        (1, "ncclAllReduceKernel", "comm_kernel", 3667, 6667, 0),  # 111..120
        (1, "cudaMemcpyDtoH", "memcpy", 7000, 8000, 0),
        (1, "memset32", "memset", 8333, 8667, 0),       # 125..126
    ]
    assert all(d == e - s for s, e, d in _rows(iv, "start_ns", "end_ns", "dur_ns"))
    assert set(iv["step"].to_pylist()) == {-1}
    by_name = {row["name"]: row for row in iv.to_pylist()}
    allreduce = by_name["MPI_Allreduce"]
    assert (allreduce["collective"], allreduce["bytes"], allreduce["process_group"],
            json.loads(allreduce["group_ranks"])) == ("allreduce", 64, "MPI_COMM_WORLD", [0, 1])
    assert by_name["barrier"]["collective"] == "barrier"
    assert by_name["MPI_Send"]["collective"] is None
    assert (by_name["sgemm"]["device"], by_name["sgemm"]["stream"]) == (0, 7)
    assert by_name["main"]["device"] is None
    assert by_name["cudaMemcpyDtoH"]["memcpy_kind"] == "DtoH"
    args = json.loads(by_name["main"]["args"])
    assert (args["canonical_name"], args["paradigm"], args["source_file"],
            args["begin_line"]) == ("main", "COMPILER", "a.c", 5)
    assert by_name["main"]["source_category"] == "COMPILER"


def test_intervals_rank1_unclosed_enters(ranks: list[RankData]) -> None:
    got = _rows(ranks[1].tables["intervals"], "name", "category", "start_ns", "end_ns",
                "depth", "collective")
    # main and leaky have no Leave: closed at the rank's last event (the metric, t=145).
    assert [(n, c, s - BASE, e - BASE, d, k) for n, c, s, e, d, k in got] == [
        ("main", "region", 333, 15000, 0, None),
        ("MPI_Recv", "mpi", 5000, 6333, 1, None),
        ("MPI_Allreduce", "mpi", 7000, 10333, 1, "allreduce"),
        ("MPI_Send", "mpi", 10667, 11333, 1, None),
        ("leaky", "region", 13333, 15000, 1, None),
    ]


def test_messages(ranks: list[RankData]) -> None:
    cols = ("src_rank", "dst_rank", "send_start_ns", "send_end_ns", "recv_start_ns",
            "recv_end_ns", "bytes", "tag", "communicator")
    m0 = ranks[0].tables["messages"].to_pylist()
    assert [tuple(r[c] for c in cols) for r in m0] == [
        (0, 1, BASE + 4000, BASE + 6000, BASE + 5000, BASE + 6333, 4096, 42, "SUB_COMM")]
    m1 = ranks[1].tables["messages"].to_pylist()
    assert [tuple(r[c] for c in cols) for r in m1] == [
        (1, 0, BASE + 10667, BASE + 11333, None, None, 8, 99, "MPI_COMM_WORLD")]


def test_counters_and_instants(ranks: list[RankData]) -> None:
    c0 = ranks[0].tables["counters"].to_pylist()
    assert c0 == [{"track_id": 2, "ts_ns": BASE + 10333, "name": "PAPI_TOT_INS",
                   "value": 1234.0}]
    c1 = ranks[1].tables["counters"].to_pylist()
    assert c1 == [{"track_id": 1, "ts_ns": BASE + 15000, "name": "PAPI_TOT_INS",
                   "value": 77.0}]
    assert ranks[0].tables["instants"].num_rows == 0


def test_ingest_store(anchor: Path, tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = traceatlas.open(str(anchor))
    msgs = trace.sql("SELECT rank, src_rank, dst_rank, bytes FROM messages ORDER BY rank")
    assert msgs.rows() == [(0, 0, 1, 4096), (1, 1, 0, 8)]
    cats = trace.sql("SELECT category, count(*) FROM intervals GROUP BY 1 ORDER BY 1").rows()
    assert cats == [("comm_kernel", 1), ("kernel", 1), ("memcpy", 1), ("memset", 1),
                    ("mpi", 6), ("region", 4)]


def _cli_info(path: Path) -> Any:
    return CliRunner().invoke(app, ["info", str(path)])


def test_missing_event_folder(anchor: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(anchor, bare / "traces.otf2")
    shutil.copy(anchor.with_suffix(".def"), bare / "traces.def")
    result = _cli_info(bare / "traces.otf2")
    assert result.exit_code == 2
    assert "traces.otf2" in result.output and "event folder traces/ is missing" in result.output
    with pytest.raises(CorruptTraceError, match="event folder traces/ is missing"):
        traceatlas.ingest([str(bare / "traces.otf2")], tmp_path / "store")
    assert not (tmp_path / "store").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["archive", "bare"]


def test_missing_event_file(anchor: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(anchor.parent, copy)
    (copy / "traces" / "1.evt").unlink()
    with pytest.raises(CorruptTraceError, match=r"event file traces/1\.evt .* missing"):
        Otf2Reader().read(Source(str(copy / "traces.otf2")))


def test_garbage_and_truncated(anchor: Path, tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.otf2"
    garbage.write_bytes(b"hello, not a trace\n" * 10)
    result = _cli_info(garbage)
    assert result.exit_code == 2
    assert "not an OTF2 anchor file" in result.output
    copy = tmp_path / "copy"
    shutil.copytree(anchor.parent, copy)
    data = (copy / "traces.otf2").read_bytes()
    (copy / "traces.otf2").write_bytes(data[: len(data) // 2])
    result = _cli_info(copy / "traces.otf2")
    assert result.exit_code == 2
    assert "the OTF2 library could not read the archive" in result.output
    evt = copy / "traces" / "0.evt"
    shutil.copy(anchor.parent / "traces.otf2", copy / "traces.otf2")
    evt.write_bytes(evt.read_bytes()[:10])
    with pytest.raises(CorruptTraceError, match="the OTF2 library could not read"):
        Otf2Reader().read(Source(str(copy / "traces.otf2")))


def test_tar_member_refused(anchor: Path, tmp_path: Path) -> None:
    tar_path = tmp_path / "a.tar"
    with tarfile.open(tar_path, "w") as tar:
        tar.add(anchor, arcname="traces.otf2")
    source = Source(str(tar_path), "traces.otf2")
    assert Otf2Reader().sniff(source.head(), source)
    with pytest.raises(UnsupportedFormatError, match="extract the archive first"):
        Otf2Reader().read(source)


def test_nonblocking_messages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MPI_Isend/MPI_Irecv completed in MPI_Wait: the send spans MPI_Isend's start to the
    end of the MPI_Wait holding MpiIsendComplete; the receive spans MPI_Irecv's start to
    the end of the MPI_Wait holding MpiIrecv. 1 tick = 1 ns, offset 1000."""
    monkeypatch.setattr(otf2.writer, "time", types.SimpleNamespace(time=lambda: 1.7e9))
    with otf2.writer.open(str(tmp_path / "nb"), timer_resolution=10**9) as trace:
        d = trace.definitions
        node = d.system_tree_node("n1", class_name="node")
        locs = [d.location("Master thread", group=d.location_group(f"MPI Rank {i}",
                                                                    system_tree_parent=node))
                for i in range(2)]
        d.group("", group_type=GroupType.COMM_LOCATIONS, paradigm=Paradigm.MPI, members=locs)
        world = d.comm("MPI_COMM_WORLD", group=d.group(
            "", group_type=GroupType.COMM_GROUP, paradigm=Paradigm.MPI, members=[0, 1]))
        main = d.region("main", paradigm=Paradigm.USER)
        isend, irecv, wait = (d.region(n, paradigm=Paradigm.MPI)
                              for n in ("MPI_Isend", "MPI_Irecv", "MPI_Wait"))
        w0 = trace.event_writer_from_location(locs[0])
        w0.enter(1000, main)
        w0.enter(1010, isend)
        w0.mpi_isend(1012, 1, world, 5, 256, 77)
        w0.leave(1015, isend)
        w0.enter(1050, wait)
        w0.mpi_isend_complete(1055, 77)
        w0.leave(1060, wait)
        w0.leave(1100, main)
        w1 = trace.event_writer_from_location(locs[1])
        w1.enter(1001, main)
        w1.enter(1020, irecv)
        w1.mpi_irecv_request(1021, 88)
        w1.leave(1022, irecv)
        w1.enter(1070, wait)
        w1.mpi_irecv(1075, 0, world, 5, 256, 88)
        w1.leave(1080, wait)
        w1.leave(1090, main)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataQualityWarning)  # nothing unmatched here
        ranks = Otf2Reader().read(Source(str(tmp_path / "nb" / "traces.otf2")))
    assert ranks[1].tables["messages"].num_rows == 0
    (msg,) = ranks[0].tables["messages"].to_pylist()
    assert msg == {"src_rank": 0, "dst_rank": 1, "send_start_ns": BASE + 10,
                   "send_end_ns": BASE + 60, "recv_start_ns": BASE + 20,
                   "recv_end_ns": BASE + 80, "bytes": 256, "tag": 5,
                   "communicator": "MPI_COMM_WORLD"}
