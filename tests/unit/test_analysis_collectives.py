"""Golden tests of ``collectives``: three ranks, hand-computed skew and stragglers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import traceatlas
from traceatlas import analysis
from traceatlas.cli.main import app
from traceatlas.testing import Collective, TraceBuilder, write_multi_rank

BASE = 1_700_000_000_000_000_000
AR_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
AG_KERNEL = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
AR = Collective("allreduce", 1024, 1024, "Float", (0, 1, 2))        # 1024 x 4 B = 4096 B
AG = Collective("allgather", 256, 768, "BFloat16", (0, 1, 2))       # 256 x 2 B = 512 B
SOLO = Collective("allreduce", 10, 10, "Float", (0,), pg_name="1")  # rank 0 only

# (kernel, collective, {rank: start}, end): every rank ends together (no clock alignment).
CALLS = [
    (AR_KERNEL, AR, {0: 100_000, 1: 130_000, 2: 110_000}, 200_000),  # skew 30k, last 1
    (AG_KERNEL, AG, {0: 300_000, 1: 310_000, 2: 290_000}, 350_000),  # skew 20k, last 1
    (AR_KERNEL, AR, {0: 400_000, 1: 405_000, 2: 450_000}, 500_000),  # skew 50k, last 2
    (AR_KERNEL, SOLO, {0: 600_000}, 610_000),                         # one rank
]


@pytest.fixture
def trace(tmp_path: Path) -> traceatlas.Trace:
    builders = [TraceBuilder(r, 3, base_time_ns=BASE, profiler_markers=False)
                for r in range(3)]
    for i, (kernel, coll, starts, end) in enumerate(CALLS):
        for rank, start in starts.items():
            builders[rank].launch(kernel, 10_000 * i, 1_000, start, end - start, stream=20,
                                  collective=coll)
    paths = write_multi_rank(tmp_path / "in", builders)
    return traceatlas.open(traceatlas.ingest(paths, tmp_path / "store"))


def test_instances(trace: traceatlas.Trace) -> None:
    result = analysis.run("collectives", trace)
    rows = result.table.select("instance", "op", "process_group", "occurrence", "ranks",
                               "bytes", "start_ns", "end_ns", "skew_ns", "straggler").rows()
    # Times are ns since the run start: the first event is the launch call of call 0 at
    # BASE + 0 (host time 10_000 * i), so a kernel at BASE + 100_000 shows 100_000.
    assert rows == [
        (0, "allreduce", "0", 0, 3, 4096, 100_000, 200_000, 30_000, 1),
        (1, "allgather", "0", 0, 3, 512, 290_000, 350_000, 20_000, 1),
        (2, "allreduce", "0", 1, 3, 4096, 400_000, 500_000, 50_000, 2),
        (3, "allreduce", "1", 0, 1, 40, 600_000, 610_000, 0, None),
    ]
    assert f"{BASE} ns since the epoch" in result.notes[0]


def test_per_rank_and_stragglers(trace: traceatlas.Trace) -> None:
    result = analysis.run("collectives", trace)
    first = result.extra["per_rank"].filter(instance=0).select(
        "rank", "start_ns", "dur_ns", "lag_ns").rows()
    assert first == [(0, 100_000, 100_000, 0), (1, 130_000, 70_000, 30_000),
                     (2, 110_000, 90_000, 10_000)]
    assert result.extra["per_rank"].height == 3 + 3 + 3 + 1
    # multi-rank instances 0, 1, 2: rank 1 last twice, rank 2 once, rank 0 never
    stragglers = result.extra["stragglers"].select("rank", "instances", "last", "share").rows()
    assert stragglers == [(0, 3, 0, 0.0), (1, 3, 2, pytest.approx(2 / 3)),
                          (2, 3, 1, pytest.approx(1 / 3))]


def test_cli_json_and_missing_comm(trace: traceatlas.Trace, tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["analyze", "collectives", str(trace.path), "--format", "json",
                                 "--table", "stragglers"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout.strip().splitlines()[-1])
    assert [(r["rank"], r["last"]) for r in rows] == [(0, 0), (1, 2), (2, 1)]
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    b.launch("void gemm()", 0, 1_000, 5_000, 1_000)
    store = traceatlas.ingest(b.write(tmp_path / "gemm.json"), tmp_path / "gemm")
    result = runner.invoke(app, ["analyze", "collectives", str(store)])
    assert result.exit_code == 2
    assert "communication kernels" in result.output
