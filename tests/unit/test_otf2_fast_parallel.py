"""The OTF2 fast path with its locations read in worker processes (io/otf2_parallel.py)
and its Metric events decoded on columns (io/otf2_metrics.py): the tables equal the
serial fast path's and the event-object reader's (``Collector``, the oracle), and the
counter values equal the ones computed here by hand from what the test wrote."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import otf2  # type: ignore[import-untyped]
import pyarrow as pa
import pytest
from otf2.enums import Base, GroupType, Paradigm, Type  # type: ignore[import-untyped]

from traceatlas.io import otf2 as otf2_reader_module
from traceatlas.io.otf2 import Otf2Reader
from traceatlas.io.otf2_parallel import split
from traceatlas.io.reading import RankData
from traceatlas.io.sources import Source


def test_split_runs_by_event_count() -> None:
    # by hand: 100 events over 4 parts; events before each location: 0, 40, 50, 60, 90;
    # part k starts at the first location with at least k * 25 events before it
    assert split([1, 2, 3, 4, 5], [40, 10, 10, 30, 10], 4) == [[1], [2], [3, 4], [5]]
    assert split([7], [5], 4) == [[7]]
    assert split([1, 2, 3], [0, 0, 0], 2) == [[1], [2, 3]]
    runs = split(list(range(10)), [1] * 10, 3)
    assert [r for run in runs for r in run] == list(range(10))
    assert all(runs) and len(runs) == 3


def _write(root: Path) -> Path:
    """Two ranks: calls, a message, metrics of three value types (one class of two
    members), a parameter (an instant with a ProcessId attribute is not needed)."""
    with otf2.writer.open(str(root), timer_resolution=10**9) as trace:
        d = trace.definitions
        node = d.system_tree_node("node0", class_name="node")
        groups = [d.location_group(f"MPI Rank {r}", system_tree_parent=node) for r in (0, 1)]
        locs = [d.location("Master thread", group=g) for g in groups]
        d.group("", group_type=GroupType.COMM_LOCATIONS, paradigm=Paradigm.MPI, members=locs)
        world = d.comm("MPI_COMM_WORLD", group=d.group(
            "", group_type=GroupType.COMM_GROUP, paradigm=Paradigm.MPI, members=[0, 1]))
        work = d.region("work", paradigm=Paradigm.USER)
        send = d.region("MPI_Send", paradigm=Paradigm.MPI)
        ins = d.metric("ins", value_type=Type.UINT64)
        pair = d.metric_class([
            d.metric_member("offset", value_type=Type.INT64, base=Base.BINARY, exponent=3),
            d.metric_member("power", value_type=Type.DOUBLE, base=Base.DECIMAL,
                            exponent=-3)])
        param = d.parameter("iteration", parameter_type=otf2.ParameterType.INT64)
        w0 = trace.event_writer_from_location(locs[0])
        w0.enter(100, work)
        w0.metric(110, ins, 2**40 + 1)
        w0.metric(120, pair, [-5, 1.5])
        w0.enter(130, send)
        w0.mpi_send(131, 1, world, 7, 64)
        w0.leave(140, send)
        w0.leave(200, work)
        w1 = trace.event_writer_from_location(locs[1])
        w1.parameter_int(105, param, -3)
        w1.mpi_recv(150, 0, world, 7, 64)
        w1.metric(160, pair, [4, 0.0])
    return root / "traces.otf2"


def _read(anchor: Path, fast: bool, parallel: bool) -> tuple[list[RankData], list[str]]:
    reader = Otf2Reader()
    reader.isolate = False  # the spy on read_parallel is in this process
    reader.fast = fast
    reader.parallel_min_events = 0 if parallel else 1 << 62
    reader.parallel_load_check = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = reader.read(Source(str(anchor)), threads=2)
    return out, sorted(str(w.message) for w in caught)


def _canon(table: pa.Table) -> pa.Table:
    return table.sort_by([(c, "ascending") for c in table.column_names])


def test_parallel_equals_serial_and_oracle(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    anchor = _write(tmp_path / "a")
    calls: list[int] = []
    real = otf2_reader_module.read_parallel

    def spy(anchor: str, refs: list[int], sizes: list[int], threads: int) -> Any:
        parts = real(anchor, refs, sizes, threads)
        calls.append(len(parts))
        return parts

    monkeypatch.setattr(otf2_reader_module, "read_parallel", spy)
    par, par_w = _read(anchor, fast=True, parallel=True)
    assert calls == [2]  # two locations, two workers: one part each
    ser, ser_w = _read(anchor, fast=True, parallel=False)
    old, old_w = _read(anchor, fast=False, parallel=False)
    assert par_w == ser_w == old_w
    for p, s, o in zip(par, ser, old, strict=True):
        assert p.rank == s.rank == o.rank
        for name in o.tables:
            assert p.tables[name].equals(s.tables[name]), name  # same rows, same order
            assert _canon(p.tables[name]).equals(_canon(o.tables[name])), name
    # by hand from what _write wrote: value * base**exponent per member
    rows = sorted((r["ts_ns"], r["name"], r["value"])
                  for r in par[0].tables["counters"].to_pylist())
    assert [(n, v) for _, n, v in rows] == [
        ("ins", float(2**40 + 1)), ("offset", -5.0 * 8), ("power", 1.5 * 10.0**-3)]
    rows1 = sorted((r["name"], r["value"]) for r in par[1].tables["counters"].to_pylist())
    assert rows1 == [("offset", 32.0), ("power", 0.0)]
    assert par[1].tables["instants"].column("name").to_pylist() == ["ParameterInt"]
    msg = par[0].tables["messages"].to_pylist()
    assert [(m["src_rank"], m["dst_rank"], m["tag"], m["bytes"]) for m in msg] == [
        (0, 1, 7, 64)]
