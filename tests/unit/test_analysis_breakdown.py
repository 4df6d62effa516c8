"""``breakdown`` on traces built here: every expected value worked out by hand below.

Device rank 0 (times in us after BASE; K = kernel, C = NCCL kernel, M = memcpy):
  stream 7:  K [100, 400)   K [500, 600)   M [650, 700)
  stream 20: C [300, 550)   M [560, 580)
  stream 9:  K [350, 450)                  (overlaps the first K and C)
span = 700 - 100 = 600
busy = union of all = [100, 600) + [650, 700) = 500 + 50 = 550
compute (K) = [100, 450) + [500, 600) = 350 + 100 = 450
comm (C) = 250
K or C = [100, 600) = 500 -> exposed comm = 500 - 450 = 50 (C over [450, 500))
memory = [560, 580) + [650, 700) = 20 + 50 = 70
exposed memory = busy - (K or C) = 550 - 500 = 50 ([560, 580) lies inside C's span)
idle = 600 - 550 = 50
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

import traceatlas
from traceatlas import analysis
from traceatlas.cli.main import app
from traceatlas.errors import MissingDataError
from traceatlas.ops.unions import union_ns, union_segments
from traceatlas.testing import Collective, TraceBuilder
from traceatlas.testing.compare import plain_union_length

BASE = 1_700_000_000_000_000_000
US = 1_000
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def _rank0() -> TraceBuilder:
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    b.launch("gemm", 10 * US, 5 * US, 100 * US, 300 * US, stream=7)
    b.launch("gemm", 20 * US, 5 * US, 500 * US, 100 * US, stream=7)
    b.launch("Memcpy DtoH (Device -> Pageable)", 30 * US, 5 * US, 650 * US, 50 * US,
             stream=7, kind="memcpy", nbytes=4096)
    b.launch(NCCL, 40 * US, 5 * US, 300 * US, 250 * US, stream=20,
             collective=Collective("allreduce", 8, 8, group_ranks=(0,)))
    b.launch("Memcpy DtoD (Device -> Device)", 50 * US, 5 * US, 560 * US, 20 * US,
             stream=20, kind="memcpy", nbytes=64)
    b.launch("relu", 60 * US, 5 * US, 350 * US, 100 * US, stream=9)
    b.cpu_op("aten::mm", 0, 700 * US)
    return b


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> traceatlas.Trace:
    tmp = tmp_path_factory.mktemp("bd")
    path = _rank0().write(tmp / "rank-0.json")
    return traceatlas.open(traceatlas.ingest(path, tmp / "store"))


def test_breakdown_by_device(trace: traceatlas.Trace) -> None:
    row = analysis.run("breakdown", trace).table.row(0, named=True)
    assert row == {
        "rank": 0, "device": 0, "span_ns": 600 * US, "busy_ns": 550 * US,
        "compute_ns": 450 * US, "comm_ns": 250 * US, "exposed_comm_ns": 50 * US,
        "memory_ns": 70 * US, "exposed_memory_ns": 50 * US, "idle_ns": 50 * US,
        "host_comm_ns": 0,
    }


def test_host_collectives_are_host_communication(tmp_path: Path) -> None:
    """gloo all-reduce [200, 260) on a helper thread inside c10d::allreduce_ [190, 250) on
    the main thread, plus gloo:broadcast [400, 420): union = [190, 260) + [400, 420) = 90 us;
    the cpu_op aten::mm [0, 700) is not communication."""
    b = _rank0()
    b.cpu_op("c10d::allreduce_", 190 * US, 250 * US)
    b.annotation("gloo:all_reduce", 200 * US, 260 * US, tid=777)
    b.annotation("gloo:broadcast", 400 * US, 420 * US, tid=777)
    trace = traceatlas.open(traceatlas.ingest(b.write(tmp_path / "rank-0.json"),
                                              tmp_path / "store"))
    row = analysis.run("breakdown", trace).table.row(0, named=True)
    assert row["host_comm_ns"] == 90 * US
    assert row["comm_ns"] == 250 * US  # the device side is unchanged


def test_breakdown_by_stream(trace: traceatlas.Trace) -> None:
    table = analysis.run("breakdown", trace, {"by": "stream"}).table
    rows = {r["stream"]: r for r in table.iter_rows(named=True)}
    # stream 7: K [100,400) [500,600), M [650,700): span 600, busy 450, idle 150
    assert (rows[7]["span_ns"], rows[7]["busy_ns"], rows[7]["compute_ns"],
            rows[7]["memory_ns"], rows[7]["idle_ns"]) == (600 * US, 450 * US, 400 * US,
                                                         50 * US, 150 * US)
    # stream 20: C [300,550), M [560,580): span 280, busy 270, exposed memory 20
    assert (rows[20]["span_ns"], rows[20]["busy_ns"], rows[20]["comm_ns"],
            rows[20]["exposed_comm_ns"], rows[20]["exposed_memory_ns"]) == (
        280 * US, 270 * US, 250 * US, 250 * US, 20 * US)
    assert rows[9]["compute_ns"] == 100 * US


def test_cli_json_rows_and_bad_param(trace: traceatlas.Trace) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["analyze", "breakdown", str(trace.path), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)[0]["exposed_comm_ns"] == 50 * US
    bad = runner.invoke(app, ["analyze", "breakdown", str(trace.path), "-p", "by=rank"])
    assert bad.exit_code == 2
    assert "'rank' is not one of device, stream" in bad.output
    unknown = runner.invoke(app, ["analyze", "nosuch", str(trace.path)])
    assert unknown.exit_code == 2 and "unknown analysis" in unknown.output


def test_selection_window_restricts_the_rows(trace: traceatlas.Trace) -> None:
    """A window [0, 420) us after the first event keeps intervals overlapping it (never
    clipped): K [100,400), C [300,550), relu [350,450) and the cpu_op [0, 700)."""
    view = trace.select(window=(BASE, BASE + 420 * US))
    row = analysis.run("breakdown", view).table.row(0, named=True)
    assert row["busy_ns"] == 450 * US  # [100, 550)
    assert row["compute_ns"] == 350 * US  # [100, 450)
    assert row["memory_ns"] == 0


def test_missing_device_activity(tmp_path: Path) -> None:
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    b.cpu_op("aten::add", 0, 10 * US)
    t = traceatlas.open(traceatlas.ingest(b.write(tmp_path / "r.json"), tmp_path / "s"))
    with pytest.raises(MissingDataError, match="no device activity"):
        analysis.run("breakdown", t)
    result = CliRunner().invoke(app, ["analyze", "breakdown", str(t.path)])
    assert result.exit_code == 2
    assert "no device activity" in result.output


def test_union_primitives_against_a_plain_loop() -> None:
    import random

    rng = random.Random(7)
    rows = []
    for g in range(5):
        for _ in range(200):
            s = rng.randrange(0, 10_000)
            rows.append((g % 2, g, s, s + rng.randrange(0, 300)))
    frame = pl.LazyFrame(rows, schema=["a", "b", "start_ns", "end_ns"], orient="row")
    got = union_ns(frame, ["a", "b"]).collect()
    for a, b, total in got.iter_rows():
        spans = [(s, e) for (ra, rb, s, e) in rows if (ra, rb) == (a, b)]
        assert total == plain_union_length(spans)
    segs = union_segments(frame, ["a"]).collect()
    for _key, part in segs.group_by("a"):
        starts, ends = part["start_ns"].to_list(), part["end_ns"].to_list()
        assert all(e < s2 for e, s2 in zip(ends, starts[1:], strict=False))  # disjoint
    assert union_ns(frame, []).collect().item() == plain_union_length([(s, e) for *_, s, e in rows])
