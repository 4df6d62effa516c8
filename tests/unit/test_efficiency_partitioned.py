"""efficiency in rank batches (``analysis.partitioned``: prepare, partial, merge) equals
the whole-trace run on built 2-3 rank traces: host-only MPI (replay in the merge), GPU
ranks with devices and a rank without device work, Paraver states with 2 threads; every
region (run, step:N, window, annotation), ``nccl_useful``, a rank selection. The oracle
is the frozen whole-trace implementation (``testing/efficiency_whole.py``, the code
before batching) and hand-computed values in the comments (ms; 1 ms = 1,000,000 ns)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import traceatlas
from traceatlas import analysis
from traceatlas.analysis import registry
from traceatlas.analysis.base import Result
from traceatlas.analysis.partitioned import run_partitioned
from traceatlas.engine import LocalEngine
from traceatlas.errors import InputError
from traceatlas.testing import TraceBuilder, write_multi_rank
from traceatlas.testing.efficiency_whole import Efficiency as Frozen
from traceatlas.testing.mpi import Messages, Regions, write_paraver

MS = 1_000_000
BASE = 1_700_000_000_000_000_000
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
NAMES = ["main", "MPI_Send", "MPI_Recv", "MPI_Allreduce"]


def assert_same(got: Result, want: Result, what: str = "") -> None:
    """Tables and extras equal in order (floats to 1e-12 relative), notes equal."""
    assert_frame_equal(got.table, want.table, rel_tol=1e-12)
    assert sorted(got.extra) == sorted(want.extra), what
    for key, frame in want.extra.items():
        assert_frame_equal(got.extra[key], frame, rel_tol=1e-12)
    assert got.notes == want.notes, what


def check(trace: traceatlas.Trace, params: dict[str, str], *,
          pool: bool = False) -> Result:
    """The partitioned runs (1 and 2 ranks a batch; a 2-process pool with ``pool``) and
    the refactored whole run all equal the frozen whole run; returns the latter."""
    eff = registry.get_analysis("efficiency")
    typed = registry.parse_params(eff, params)
    want = Frozen().run(trace, typed)
    assert_same(eff.run(trace, typed), want, "whole")
    engines = [LocalEngine(1)] + ([LocalEngine(2)] if pool else [])
    for engine in engines:
        for size in (1, 2):
            got = run_partitioned(eff, trace, typed, engine, ranks_per_task=size)
            assert_same(got, want, f"{engine} ranks_per_task={size}")
    return want


def _values(result: Result) -> dict[str, float]:
    return dict(zip(result.table["metric"], result.table["value"], strict=True))


# -- host-only MPI (Paraver, one message) --------------------------------------------------

def _mpi(tmp_path: Path) -> traceatlas.Trace:
    """3 ranks, ``main`` [0, 100] ms each (the trace of test_analysis_efficiency): rank 0
    MPI_Send [40, 45] to rank 1 and MPI_Allreduce [70, 90]; rank 1 MPI_Recv [20, 50]
    (data in at 49) and Allreduce [80, 90]; rank 2 Allreduce [65, 90].
    U = 75, 60, 75 -> LB = 70/75, CommE = 0.75; replay T^ideal = 80 ms (rank 1 waits for
    the send at clock 40, enters the Allreduce at 70; +10 ms after): SerE = 75/80,
    TE = 0.8. The replay needs rank 0's send and rank 1's receive: in different batches
    with one rank a batch."""
    regions = [(r, 0, 0, 100) for r in range(3)] + [
        (0, 1, 40, 45), (0, 3, 70, 90), (1, 2, 20, 50), (1, 3, 80, 90), (2, 3, 65, 90)]
    a = np.array(regions, dtype=np.int64)
    reg = Regions(a[:, 0], a[:, 1], a[:, 2] * MS, a[:, 3] * MS)

    def arr(*v: float) -> np.ndarray:
        return np.array([int(x * MS) for x in v], dtype=np.int64)

    msgs = Messages(src=np.array([0]), dst=np.array([1]), send_start_ns=arr(40),
                    send_end_ns=arr(40.5), recv_start_ns=arr(20), recv_end_ns=arr(49),
                    bytes=np.array([4096]), tag=np.array([1]))
    prv = write_paraver(tmp_path / "mpi.prv", 3, NAMES, reg, msgs)
    return traceatlas.open(traceatlas.ingest(prv, tmp_path / "s"))


def test_mpi_replay_across_batches(tmp_path: Path) -> None:
    trace = _mpi(tmp_path)
    want = check(trace, {}, pool=True)
    v = _values(want)
    assert v["host_load_balance"] == pytest.approx(70 / 75, abs=1e-12)
    assert v["host_ideal_runtime_ns"] == 80 * MS
    assert v["host_serialisation_efficiency"] == pytest.approx(0.9375, abs=1e-12)
    assert v["host_transfer_efficiency"] == pytest.approx(0.8, abs=1e-12)
    assert want.extra["per_thread"]["useful_ns"].to_list() == [75 * MS, 60 * MS, 75 * MS]


@pytest.mark.parametrize("region", ["window:45ms:95ms", "annotation:^main$",
                                    "window::60ms", f"window:@{30 * MS}:"])
def test_mpi_regions(tmp_path: Path, region: str) -> None:
    want = check(_mpi(tmp_path), {"region": region})
    if region == "window:45ms:95ms":  # T = 50; U = 30, 35, 25 (hand, see the efficiency tests)
        v = _values(want)
        assert v["host_load_balance"] == pytest.approx(30 / 35, abs=1e-12)
        assert v["host_ideal_runtime_ns"] == 35 * MS


def test_mpi_rank_selection(tmp_path: Path) -> None:
    """Ranks 1-2 selected: the message 0 -> 1 is stored in rank 0's part (outside the
    selection); the whole run counts it as outside the replay, so must the batches."""
    trace = _mpi(tmp_path).select(ranks="1-2")
    want = check(trace, {})
    assert any("1 messages not used by the replay" in n for n in want.notes)


def test_mpi_errors_match(tmp_path: Path) -> None:
    """No step marker and no loop (``main`` once a rank): the same error, batched or not;
    likewise an annotation that matches nothing."""
    trace = _mpi(tmp_path)
    eff = registry.get_analysis("efficiency")
    for region in ("step:1", "annotation:^nothing$"):
        typed = registry.parse_params(eff, {"region": region})
        with pytest.raises(InputError) as whole:
            Frozen().run(trace, typed)
        with pytest.raises(InputError) as parts:
            run_partitioned(eff, trace, typed, LocalEngine(1), ranks_per_task=1)
        assert str(parts.value) == str(whole.value)


# -- GPU ranks (Kineto), one rank without device work ---------------------------------------

def _gpu(tmp_path: Path) -> traceatlas.Trace:
    """3 ranks, steps 0 [0, 50) and 1 [50, 100) ms on each; annotation ``fwd``.

    rank 0 (GPU 0): kernel [12, 40) stream 7, kernel [30, 55) stream 8, memcpy [60, 80);
                    cudaStreamSynchronize [80, 90) on the host
    rank 1 (GPU 1): NCCL kernel [20, 45), kernel [50, 70)
    rank 2: host only (cpu ops on two threads), no device work anywhere.
    step:1 (T = 50): GPU 0 useful [50, 55) = 5, active 5 + 20 = 25; GPU 1 useful 20,
    active 20 -> LB = 25 / (2 x 20) = 0.625, CommE = 20 / 25 = 0.8, OE = 25 / 50 = 0.5.
    """
    builders = []
    for rank in range(3):
        b = TraceBuilder(rank, 3, base_time_ns=BASE, profiler_markers=False)
        b.step(0, 0, 50 * MS)
        b.step(1, 50 * MS, 100 * MS)
        builders.append(b)
    b0, b1, b2 = builders
    b0.annotation("fwd", 10 * MS, 40 * MS)
    b0.annotation("fwd", 60 * MS, 90 * MS)
    b0.launch("gemm_a", 11 * MS, 10_000, 12 * MS, 28 * MS, stream=7)
    b0.launch("gemm_b", 29 * MS, 10_000, 30 * MS, 25 * MS, stream=8)
    b0.launch("Memcpy HtoD (Pageable -> Device)", 59 * MS, 10_000, 60 * MS, 20 * MS,
              kind="memcpy", nbytes=1024)
    b0.sync(80 * MS, 10 * MS, 79 * MS, 1_000)
    b1.annotation("fwd", 5 * MS, 45 * MS)
    b1.launch(NCCL, 19 * MS, 10_000, 20 * MS, 25 * MS, stream=9)
    b1.launch("gemm_a", 49 * MS, 10_000, 50 * MS, 20 * MS)
    b2.annotation("fwd", 0, 20 * MS)
    b2.cpu_op("aten::mm", 1 * MS, 90 * MS)
    b2.cpu_op("aten::add", 10 * MS, 40 * MS, tid=777)
    write_multi_rank(tmp_path / "g", builders)
    return traceatlas.open(traceatlas.ingest(tmp_path / "g", tmp_path / "s"))


@pytest.fixture
def gpu(tmp_path: Path) -> traceatlas.Trace:
    return _gpu(tmp_path)


def test_gpu_whole_run(gpu: traceatlas.Trace) -> None:
    want = check(gpu, {}, pool=True)
    per = want.extra["per_rank"].filter(pl.col("side") == "device")
    assert per["rank"].to_list() == [0, 1]  # rank 2 has no device work
    assert want.extra["per_thread"].filter(pl.col("rank") == 2).height == 2


def test_gpu_step_region(gpu: traceatlas.Trace) -> None:
    want = check(gpu, {"region": "step:1"})
    v = _values(want)
    assert v["device_runtime_ns"] == 50 * MS
    assert v["device_load_balance"] == pytest.approx(0.625, abs=1e-12)
    assert v["device_communication_efficiency"] == pytest.approx(0.8, abs=1e-12)
    assert v["device_orchestration_efficiency"] == pytest.approx(0.5, abs=1e-12)


def test_gpu_step_region_idle_device(gpu: traceatlas.Trace) -> None:
    """A window with no device work on GPU 1 ([80, 100) ms): it still counts, as 0."""
    want = check(gpu, {"region": "window:80ms:100ms"})
    per = want.extra["per_rank"].filter(pl.col("side") == "device")
    assert per["rank"].to_list() == [0, 1]
    assert per["useful_ns"].to_list() == [0, 0]


@pytest.mark.parametrize("params", [{"region": "annotation:^fwd$"},
                                    {"region": "step:0", "nccl_useful": "true"},
                                    {"region": "step:7"}])
def test_gpu_other_regions(gpu: traceatlas.Trace, params: dict[str, Any]) -> None:
    if params["region"] == "step:7":
        eff = registry.get_analysis("efficiency")
        typed = registry.parse_params(eff, params)
        with pytest.raises(InputError) as whole:
            Frozen().run(gpu, typed)
        with pytest.raises(InputError) as parts:
            run_partitioned(eff, gpu, typed, LocalEngine(1), ranks_per_task=1)
        assert str(parts.value) == str(whole.value)
        return
    check(gpu, params)


def test_gpu_rank_selection(gpu: traceatlas.Trace) -> None:
    check(gpu.select(ranks="1-2"), {"region": "step:0"})


# -- Paraver states, 2 threads a rank (hybrid split) -----------------------------------------

HYBRID_PCF = """STATES
0    Idle
1    Running

EVENT_TYPE
9    50000002    MPI Collective Comm
VALUES
0   Outside MPI
10  MPI_Allreduce
"""


def test_hybrid_states(tmp_path: Path) -> None:
    """2 ranks x 2 threads (the hybrid example of test_analysis_efficiency): hybrid
    LB = 0.75, MPI LB = 0.9375 need every thread and rank: merged, not per batch."""
    body = [
        "1:1:1:1:1:0:80:1", "1:1:1:1:1:80:100:0", "1:1:1:1:2:0:60:1", "1:1:1:1:2:60:100:0",
        "1:1:1:2:1:0:70:1", "1:1:1:2:1:70:100:0", "1:1:1:2:2:0:30:1", "1:1:1:2:2:30:100:0",
        "2:1:1:1:1:80:50000002:10", "2:1:1:1:1:100:50000002:0",
        "2:1:1:2:1:70:50000002:10", "2:1:1:2:1:100:50000002:0",
    ]
    prv = tmp_path / "hybrid.prv"
    prv.write_text("#Paraver (01/01/25 at 00:00):100_ns:0:1:2(2:1,2:1)\n"
                   + "\n".join(body) + "\n")
    prv.with_suffix(".pcf").write_text(HYBRID_PCF)
    trace = traceatlas.open(traceatlas.ingest(prv, tmp_path / "s"))
    want = check(trace, {}, pool=True)
    v = _values(want)
    assert v["host_hybrid_load_balance"] == pytest.approx(0.75, abs=1e-12)
    assert v["host_mpi_load_balance"] == pytest.approx(0.9375, abs=1e-12)
    check(trace, {"region": "window:50ns:100ns"})


def test_registry_runs_efficiency_in_batches(gpu: traceatlas.Trace) -> None:
    """``registry.run(engine=...)`` takes the partitioned path (declared per message)."""
    from traceatlas.analysis.partitioned import is_partitioned

    eff = registry.get_analysis("efficiency")
    assert is_partitioned(eff, registry.parse_params(eff, {}))
    got = analysis.run("efficiency", gpu, {"region": "step:1"}, engine=LocalEngine(1))
    assert_same(got, Frozen().run(gpu, registry.parse_params(eff, {"region": "step:1"})))


def test_gpu_client_window_view(gpu: traceatlas.Trace) -> None:
    """A clipped window view (the client's selection, re-applied by every batch)."""
    start = int(gpu.intervals.select(pl.col("start_ns").min()).collect().item())
    view = gpu.select(window=(start + 20 * MS, start + 80 * MS), clip=True)
    check(view, {})
    check(view, {"region": "window:30ms:60ms"})
