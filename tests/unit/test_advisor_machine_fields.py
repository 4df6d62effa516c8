"""``cause``, ``ranks``, ``per_step`` and ``where`` of the load_imbalance, straggler,
exposed_comm, memcpy_stream and bimodal rules on small traces built here, with expected
values computed by hand from the construction (issue 22)."""

from __future__ import annotations

from pathlib import Path

import pytest

import traceatlas
from traceatlas.advisor import (
    Context,
    bimodal,
    exposed_comm,
    load_imbalance,
    memcpy_stream,
    straggler,
)
from traceatlas.testing import Collective, TraceBuilder, write_multi_rank

BASE = 1_700_000_000_000_000_000
AR_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
AR = Collective("allreduce", 1024, 1024, "Float", (0, 1, 2, 3))
SLOW = (150_000, 130_000, 170_000)
"""Rank 2's compute per step (ns); the other ranks compute 100k every step."""


def _open(tmp_path: Path, builders: list[TraceBuilder]) -> traceatlas.Trace:
    paths = write_multi_rank(tmp_path / "in", builders)
    return traceatlas.open(traceatlas.ingest(paths, tmp_path / "store"))


def _stepped(tmp_path: Path) -> traceatlas.Trace:
    """4 ranks, steps i = 0..2 with marker [200k i, 200k i + 150k). In step i, at
    t = 200k i + 10k: a compute kernel [t, t + c) (c = 100k; rank 2: SLOW[i]), then an
    all-reduce from t + c to t + 180k (ends together on every rank). Launches at
    200k i + 1k and + 2k, inside the marker, so the step window is [200k i, t + 180k)."""
    builders = [TraceBuilder(r, 4, base_time_ns=BASE, profiler_markers=False)
                for r in range(4)]
    for rank, b in enumerate(builders):
        for i in range(3):
            s = 200_000 * i
            t = s + 10_000
            c = SLOW[i] if rank == 2 else 100_000
            b.step(i, s, s + 150_000)
            b.launch("void gemm_fwd()", s + 1_000, 500, t, c)
            b.launch(AR_KERNEL, s + 2_000, 500, t + c, 180_000 - c, stream=20, collective=AR)
    return _open(tmp_path, builders)


@pytest.fixture(scope="module")
def stepped(tmp_path_factory: pytest.TempPathFactory) -> traceatlas.Trace:
    return _stepped(tmp_path_factory.mktemp("stepped"))


def test_load_imbalance_per_step(stepped: traceatlas.Trace) -> None:
    [found] = load_imbalance.check(Context(stepped))
    # per step max - mean over 4 ranks: 150 - 112.5, 130 - 107.5, 170 - 117.5 (k ns)
    per_step = sorted([150_000 - 112_500, 130_000 - 107_500, 170_000 - 117_500])
    assert found.cause == "load_imbalance" and found.ranks == [2]
    assert found.per_step == {"ms": per_step[1] / 1e6}
    assert found.where == {"kernel": "void gemm_fwd()"}
    # the whole-run cost is unchanged: 450k - mean(300k, 300k, 450k, 300k)
    assert found.cost_ns == 450_000 - 337_500


def test_straggler_per_step(stepped: traceatlas.Trace) -> None:
    [found] = straggler.check(Context(stepped))
    # rank 2 starts c2 - 100k after the others; wait = max lag - mean lag = 3/4 of it
    waits = sorted(0.75 * (c - 100_000) for c in SLOW)
    assert found.cause == "straggler" and found.ranks == [2]
    assert found.per_step == {"ms": waits[1] / 1e6, "count": 1.0}
    assert found.where == {"op": "allreduce"}
    assert found.cost_ns == round(sum(waits))


def test_exposed_comm_per_step(stepped: traceatlas.Trace) -> None:
    [found] = exposed_comm.check(Context(stepped))
    # rank 0: all-reduce [t + 100k, t + 180k) alone = 80k per step, of which waiting for
    # rank 2's start c2 - 100k: transfer 80k - (c2 - 100k) = 30k, 50k, 10k (rank 2 alone:
    # 180k - c2, the same numbers; every rank ties at 90k, the lowest rank is named)
    transfer = sorted(80_000 - (c - 100_000) for c in SLOW)
    assert found.cause == "exposed_communication" and found.ranks == [0]
    assert found.cost_ns == sum(transfer)
    assert found.per_step == {"ms": transfer[1] / 1e6}
    assert found.where == {"kernel": AR_KERNEL}


def test_memcpy_stream_per_step_and_op(tmp_path: Path) -> None:
    """One rank, 3 steps of 100k: a gemm [s, s + 50k), then a copy issued by
    ``aten::copy_`` on the compute stream with nothing else running, of 30k, 10k, 20k."""
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    copies = (30_000, 10_000, 20_000)
    for i, d in enumerate(copies):
        s = 100_000 * i
        b.step(i, s, s + 90_000)
        b.launch("void gemm()", s + 1_000, 500, s + 2_000, 50_000)
        b.cpu_op("aten::copy_", s + 3_000, s + 5_000)
        b.launch("Memcpy DtoD (Device -> Device)", s + 4_000, 500, s + 60_000, d,
                 kind="memcpy", nbytes=1 << 20)
    [found] = memcpy_stream.check(Context(_open(tmp_path, [b])))
    assert found.cause == "copy_on_compute_stream" and found.ranks == [0]
    assert found.cost_ns == sum(copies)
    assert found.per_step == {"ms": sorted(copies)[1] / 1e6, "count": 1.0}
    assert found.where == {"op": "aten::copy_"}


def test_bimodal_per_step(tmp_path: Path) -> None:
    """One rank, 4 steps, 10 calls of one kernel each: 100 us fast calls, and 400 us slow
    calls, 0, 2, 3, 5 of them per step (10 of 40 slow, 25 %)."""
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    slow_per_step = (0, 2, 3, 5)
    for i, slow in enumerate(slow_per_step):
        s = 10_000_000 * i
        b.step(i, s, s + 9_000_000)
        for k in range(10):
            dur = 400_000 if k < slow else 100_000
            b.launch("void conv()", s + 1_000 * k, 500, s + 100_000 + 500_000 * k, dur)
    findings = bimodal.check(Context(_open(tmp_path, [b])))
    assert len(findings) == 1, [f.statement for f in findings]
    found = findings[0]
    # excess per step = slow calls x (400k - 100k); median of 0, 600k, 900k, 1.5M
    assert found.cause == "bimodal_kernel" and found.ranks == [0]
    assert found.per_step == {"ms": (600_000 + 900_000) / 2 / 1e6, "count": 2.5}
    assert found.where == {"kernel": "void conv()"}
