"""The fast OTF2 path (io/otf2_raw.py + io/otf2_fast.py) against the event-object reader
(``Collector``, kept as the oracle): identical tables (rows compared as sorted multisets,
the row order of the two paths differs on ties) and identical warnings, on random
archives written with the otf2 wheel and on the cases the fast path hands back."""

from __future__ import annotations

import types
import warnings
from pathlib import Path
from typing import Any

import otf2  # type: ignore[import-untyped]
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from otf2.enums import (  # type: ignore[import-untyped]
    Base,
    CollectiveOp,
    GroupType,
    LocationGroupType,
    LocationType,
    Paradigm,
    RegionRole,
    Type,
)

from traceatlas.io import otf2_fast
from traceatlas.io.otf2 import Otf2Reader
from traceatlas.io.reading import RankData
from traceatlas.io.sources import Source
from traceatlas.testing.otf2 import write_otf2


def _read(anchor: Path, fast: bool) -> tuple[list[RankData], list[str]]:
    reader = Otf2Reader()
    reader.fast = fast
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = reader.read(Source(str(anchor)))
    return out, sorted(str(w.message) for w in caught)


def _canon(table: pa.Table) -> pa.Table:
    return table.sort_by([(c, "ascending") for c in table.column_names])


def _assert_same(anchor: Path) -> list[RankData]:
    old, old_warnings = _read(anchor, fast=False)
    new, new_warnings = _read(anchor, fast=True)
    assert [r.rank for r in old] == [r.rank for r in new]
    for a, b in zip(old, new, strict=True):
        assert (a.clock, a.world_size, a.host) == (b.clock, b.world_size, b.host)
        assert sorted(a.tables) == sorted(b.tables)
        for name in a.tables:
            x, y = a.tables[name], b.tables[name]
            assert x.schema == y.schema, name
            assert _canon(x).equals(_canon(y)), (name, x.to_pylist()[:5], y.to_pylist()[:5])
    assert old_warnings == new_warnings
    return new


def _uses_fast(anchor: Path, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Whether ``build`` returned tables (not None) for this archive."""
    taken: list[bool] = []
    real = otf2_fast.build

    def spy(*args: Any) -> Any:
        result = real(*args)
        taken.append(result is not None)
        return result

    monkeypatch.setattr("traceatlas.io.otf2.build", spy)
    reader = Otf2Reader()
    reader.isolate = False  # the spy is in this process
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reader.read(Source(str(anchor)))
    return taken == [True]


# A random trace: per rank a list of operations, written in order with growing times.
_OP = st.sampled_from(["call", "nested", "send", "recv", "coll", "bare_coll", "metric",
                       "metric2", "param", "kernel", "open", "isend", "isend_open", "irecv",
                       "irecv_open", "irecv_bare"])


@st.composite
def _traces(draw: Any) -> list[list[tuple[str, int, int]]]:
    ranks = draw(st.integers(1, 3))
    return [draw(st.lists(st.tuples(_OP, st.integers(0, 2), st.integers(0, 3)),
                          max_size=12)) for _ in range(ranks)]


def _write_random(root: Path, plan: list[list[tuple[str, int, int]]]) -> Path:
    """Every rank writes its operations; peers and tags come from the plan, so sends and
    receives match, are left over, or cross communicators at random."""
    with otf2.writer.open(str(root), timer_resolution=10**9) as trace:
        d = trace.definitions
        node = d.system_tree_node("node0", class_name="node")
        groups = [d.location_group(f"MPI Rank {r}", system_tree_parent=node)
                  for r in range(len(plan))]
        locs = [d.location("Master thread", group=g) for g in groups]
        d.group("", group_type=GroupType.COMM_LOCATIONS, paradigm=Paradigm.MPI,
                members=locs)
        world = d.comm("MPI_COMM_WORLD", group=d.group(
            "", group_type=GroupType.COMM_GROUP, paradigm=Paradigm.MPI,
            members=list(range(len(plan)))))
        ctx = d.location_group("CUDA Context 0", system_tree_parent=node,
                               location_group_type=LocationGroupType.ACCELERATOR,
                               creating_location_group=groups[0])
        gpu = trace.event_writer_from_location(
            d.location("CUDA[0:3]", group=ctx, type=LocationType.GPU))
        reg = {n: d.region(n, paradigm=p, region_role=role) for n, p, role in (
            ("work", Paradigm.USER, RegionRole.FUNCTION),
            ("inner", Paradigm.USER, RegionRole.FUNCTION),
            ("MPI_Send", Paradigm.MPI, RegionRole.POINT2POINT),
            ("MPI_Recv", Paradigm.MPI, RegionRole.POINT2POINT),
            ("MPI_Allreduce", Paradigm.MPI, RegionRole.COLL_ALL2ALL),
            ("MPI_Isend", Paradigm.MPI, RegionRole.POINT2POINT),
            ("MPI_Irecv", Paradigm.MPI, RegionRole.POINT2POINT),
            ("MPI_Wait", Paradigm.MPI, RegionRole.POINT2POINT),
            ("sgemm", Paradigm.CUDA, RegionRole.KERNEL),
            ("cudaMemcpyHtoD", Paradigm.CUDA, RegionRole.DATA_TRANSFER))}
        ins = d.metric("PAPI_TOT_INS", unit="#", value_type=Type.UINT64)
        pair = d.metric_class([  # INT64 and DOUBLE members, scaled by base**exponent
            d.metric_member("offset", value_type=Type.INT64, base=Base.BINARY, exponent=3),
            d.metric_member("power", value_type=Type.DOUBLE, base=Base.DECIMAL,
                            exponent=-3)])
        param = d.parameter("iteration", parameter_type=otf2.ParameterType.INT64)
        t_gpu = 1_000
        for r, ops in enumerate(plan):
            w = trace.event_writer_from_location(locs[r])
            t = 1_000
            n_open = 0
            for op, a, b in ops:
                peer = (r + a) % len(plan)
                if op == "call":
                    w.enter(t, reg["work"])
                    w.leave(t + 5 + a, reg["work"])
                elif op == "nested":
                    w.enter(t, reg["work"])
                    w.enter(t + 1, reg["inner"])
                    w.leave(t + 2, reg["inner"])
                    w.leave(t + 3 + b, reg["work"])
                elif op == "send":
                    w.enter(t, reg["MPI_Send"])
                    w.mpi_send(t + 1, peer, world, b, 100 + b)
                    w.leave(t + 4, reg["MPI_Send"])
                elif op == "recv":
                    w.mpi_recv(t + 1, peer, world, b, 100 + b)  # outside a region too
                    w.enter(t + 2, reg["MPI_Recv"])
                    w.mpi_recv(t + 3, peer, world, b, 200)
                    w.leave(t + 6, reg["MPI_Recv"])
                elif op == "coll":
                    w.enter(t, reg["MPI_Allreduce"])
                    w.mpi_collective_begin(t + 1)
                    w.mpi_collective_end(t + 3, CollectiveOp.ALLREDUCE, world, a, 8 * b, 8)
                    w.leave(t + 5, reg["MPI_Allreduce"])
                elif op == "bare_coll":
                    w.mpi_collective_begin(t)
                    w.mpi_collective_end(t + 2, CollectiveOp.BARRIER, world, 0, 0, 0)
                elif op == "metric":
                    w.metric(t, ins, 1000 * a + b)
                elif op == "isend":  # request id a; completed in MPI_Wait
                    w.enter(t, reg["MPI_Isend"])
                    w.mpi_isend(t + 1, peer, world, b, 100 + b, a)
                    w.leave(t + 2, reg["MPI_Isend"])
                    w.enter(t + 3, reg["MPI_Wait"])
                    w.mpi_isend_complete(t + 4, a)
                    w.leave(t + 6, reg["MPI_Wait"])
                elif op == "isend_open":  # outside a region, never completed (id reused)
                    w.mpi_isend(t + 1, peer, world, b, 100 + b, a)
                elif op == "irecv":
                    w.enter(t, reg["MPI_Irecv"])
                    w.mpi_irecv_request(t + 1, a)
                    w.leave(t + 2, reg["MPI_Irecv"])
                    w.enter(t + 3, reg["MPI_Wait"])
                    w.mpi_irecv(t + 4, peer, world, b, 100 + b, a)
                    w.leave(t + 6, reg["MPI_Wait"])
                elif op == "irecv_open":  # posted, maybe never completed, maybe overwritten
                    w.mpi_irecv_request(t + 1, a)
                elif op == "irecv_bare":  # completes whatever request a is posted, or none
                    w.mpi_irecv(t + 1, peer, world, b, 100 + b, a)
                elif op == "metric2":
                    w.metric(t, pair, [a - 2 * b, 0.25 * a + b / 3])
                elif op == "param":
                    w.parameter_int(t, param, a - b)
                elif op == "kernel":
                    kernel = reg["sgemm"] if a else reg["cudaMemcpyHtoD"]
                    gpu.enter(t_gpu, kernel)
                    gpu.leave(t_gpu + 2 + b, kernel)
                    t_gpu += 10
                elif op == "open" and n_open < 2:
                    w.enter(t, reg["work"])
                    n_open += 1
                    t += 1
                    continue  # left open: closed at the end by both paths
                t += 10
    return root / "traces.otf2"


@settings(max_examples=25, deadline=None)
@given(plan=_traces())
def test_random_archives_same_tables(tmp_path_factory: pytest.TempPathFactory,
                                     plan: list[list[tuple[str, int, int]]]) -> None:
    anchor = _write_random(tmp_path_factory.mktemp("rand") / "a", plan)
    _assert_same(anchor)


def test_random_archive_takes_the_fast_path(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    plan = [[("send", 1, 2), ("coll", 0, 1), ("metric", 1, 1), ("open", 0, 0)],
            [("recv", 1, 2), ("coll", 0, 1), ("bare_coll", 0, 0), ("param", 2, 0)]]
    anchor = _write_random(tmp_path / "a", plan)
    assert _uses_fast(anchor, monkeypatch)
    ranks = _assert_same(anchor)
    # by hand from the plan: rank 1 receives twice from rank 0 with tag 2 (once outside
    # any region, once in MPI_Recv); FIFO pairs rank 0's one send with the first, the
    # second is left without a send. Both rows belong to the sender's rank 0.
    rows = sorted(ranks[0].tables["messages"].to_pylist(), key=lambda m: m["bytes"])
    assert [(m["src_rank"], m["dst_rank"], m["tag"], m["bytes"]) for m in rows] == [
        (0, 1, 2, 102), (0, 1, 2, 200)]
    assert rows[0]["send_start_ns"] is not None and rows[0]["recv_start_ns"] is not None
    assert rows[0]["recv_start_ns"] == rows[0]["recv_end_ns"]  # outside a region
    assert rows[1]["send_start_ns"] is None
    assert ranks[1].tables["messages"].num_rows == 0
    names = ranks[1].tables["intervals"].column("name").to_pylist()
    assert sorted(names) == ["MPI_Allreduce", "MPI_Recv", "barrier"]


def test_existing_archive_shapes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    anchor = write_otf2(tmp_path / "t", {0: [("main", 0, 100), ("MPI_Barrier", 10, 20)],
                                         1: [("main", 0, 90)]},
                        gpu=[("k1", 5, 9), ("memcpyDtoH", 12, 14)])
    assert _uses_fast(anchor, monkeypatch)
    _assert_same(anchor)


def _write_bad_nesting(root: Path) -> Path:
    with otf2.writer.open(str(root), timer_resolution=10**9) as trace:
        d = trace.definitions
        g = d.location_group("MPI Rank 0", system_tree_parent=d.system_tree_node("n"))
        w = trace.event_writer_from_location(d.location("Master thread", group=g))
        a = d.region("a", paradigm=Paradigm.USER)
        b = d.region("b", paradigm=Paradigm.USER)
        w.enter(10, a)
        w.enter(11, b)
        w.leave(12, a)  # closes b as well (the Collector's rule)
        w.leave(13, b)  # a leave without enter: an instant
    return root / "traces.otf2"


def test_bad_nesting_goes_to_the_reference_path(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    anchor = _write_bad_nesting(tmp_path / "bad")
    assert not _uses_fast(anchor, monkeypatch)
    monkeypatch.undo()
    ranks = _assert_same(anchor)
    assert ranks[0].tables["instants"].column("name").to_pylist() == ["Leave b"]


def _write_nonblocking(root: Path, orphan: bool) -> Path:
    with otf2.writer.open(str(root), timer_resolution=10**9) as trace:
        d = trace.definitions
        node = d.system_tree_node("n")
        locs = [d.location("Master thread", group=d.location_group(
            f"MPI Rank {r}", system_tree_parent=node)) for r in range(2)]
        d.group("", group_type=GroupType.COMM_LOCATIONS, paradigm=Paradigm.MPI, members=locs)
        world = d.comm("MPI_COMM_WORLD", group=d.group(
            "", group_type=GroupType.COMM_GROUP, paradigm=Paradigm.MPI, members=[0, 1]))
        isend = d.region("MPI_Isend", paradigm=Paradigm.MPI)
        wait = d.region("MPI_Wait", paradigm=Paradigm.MPI)
        w0 = trace.event_writer_from_location(locs[0])
        w0.enter(8, isend)
        w0.mpi_isend(10, 1, world, 5, 64, 1)
        w0.leave(11, isend)
        w0.enter(18, wait)
        w0.mpi_isend_complete(20, 1)
        w0.leave(25, wait)
        if orphan:
            w0.mpi_isend_complete(30, 9)  # no Isend with request 9: an instant
        w1 = trace.event_writer_from_location(locs[1])
        w1.mpi_irecv_request(12, 4)
        w1.mpi_irecv(15, 0, world, 5, 64, 4)
    return root / "traces.otf2"


def test_nonblocking_takes_the_fast_path(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(otf2.writer, "time", types.SimpleNamespace(time=lambda: 1.7e9))
    anchor = _write_nonblocking(tmp_path / "nb", orphan=False)
    assert _uses_fast(anchor, monkeypatch)
    monkeypatch.undo()
    ranks = _assert_same(anchor)
    # by hand: the send spans MPI_Isend's start (8) to MPI_Wait's end (25); the receive
    # is outside any region: from its request (12) to the Irecv (15); times count from
    # the archive's global offset, its first event (8), at 1 tick = 1 ns
    (msg,) = ranks[0].tables["messages"].to_pylist()
    base = ranks[0].clock["base_ns"]
    assert [msg[k] - base for k in ("send_start_ns", "send_end_ns", "recv_start_ns",
                                    "recv_end_ns")] == [8 - 8, 25 - 8, 12 - 8, 15 - 8]


def test_orphan_completion_goes_to_the_reference_path(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    anchor = _write_nonblocking(tmp_path / "nb", orphan=True)
    assert not _uses_fast(anchor, monkeypatch)
    monkeypatch.undo()
    ranks = _assert_same(anchor)
    assert ranks[0].tables["instants"].column("name").to_pylist() == ["MpiIsendComplete"]
