"""efficiency on traces built here; every expected value is worked out by hand in the
comments next to the records (ms; 1 ms = 1,000,000 ns)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

import traceatlas
from traceatlas import analysis
from traceatlas.cli.main import app
from traceatlas.ops.replay import ideal_replay
from traceatlas.testing import TraceBuilder, write_multi_rank
from traceatlas.testing.mpi import Messages, Regions, write_paraver

MS = 1_000_000
BASE = 1_700_000_000_000_000_000
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def _values(result: analysis.Result) -> dict[str, float]:
    return dict(zip(result.table["metric"], result.table["value"], strict=True))


# -- device model: the B.5 worked example -------------------------------------------------

def _b5(tmp_path: Path) -> traceatlas.Trace:
    """4 ranks, one GPU each, steps 0 [0, 50) and 1 [50, 100) ms on every rank: T = 100.

    GPU0: kernels [10, 50) stream 7 and [30, 70) stream 8 -> useful union [10, 70) = 60;
          memcpy [60, 90): 10 ms under the kernel, 20 exposed -> active 80.
    GPU1: kernel [5, 60) = 55; NCCL kernel [60, 83) = 23 -> active 78.
    GPU2: kernel [0, 50) = 50; memset [50, 75) = 25 -> active 75.
    GPU3: kernel [20, 55) = 35; memcpy [55, 90) = 35 -> active 70.
    """
    plan = {
        0: [("gemm_a", 10, 40, 7, "kernel"), ("gemm_b", 30, 40, 8, "kernel"),
            ("Memcpy HtoD (Pageable -> Device)", 60, 30, 7, "memcpy")],
        1: [("gemm_a", 5, 55, 7, "kernel"), (NCCL, 60, 23, 9, "kernel")],
        2: [("gemm_a", 0, 50, 7, "kernel"), ("Memset (Device)", 50, 25, 7, "memset")],
        3: [("gemm_a", 20, 35, 7, "kernel"),
            ("Memcpy DtoH (Device -> Pageable)", 55, 35, 7, "memcpy")],
    }
    builders = []
    for rank, work in plan.items():
        b = TraceBuilder(rank, 4, base_time_ns=BASE, profiler_markers=False)
        b.step(0, 0, 50 * MS)
        b.step(1, 50 * MS, 100 * MS)
        for i, (name, start, dur, stream, kind) in enumerate(work):
            b.launch(name, i * 10_000, 5_000, start * MS, dur * MS, stream=stream,
                     kind=kind, nbytes=1024 if kind != "kernel" else None)  # type: ignore[arg-type]
        builders.append(b)
    write_multi_rank(tmp_path / "b5", builders)
    return traceatlas.open(traceatlas.ingest(tmp_path / "b5", tmp_path / "s"))


@pytest.fixture
def b5(tmp_path: Path) -> traceatlas.Trace:
    return _b5(tmp_path)


def test_b5_worked_example(b5: traceatlas.Trace) -> None:
    result = analysis.run("efficiency", b5)
    v = _values(result)
    # sum U = 60+55+50+35 = 200, max U = 60, max A = 80, T = 100, N = 4
    assert v["device_runtime_ns"] == 100 * MS
    assert v["device_load_balance"] == pytest.approx(200 / 240, abs=1e-12)    # 0.833
    assert v["device_communication_efficiency"] == pytest.approx(0.75, abs=1e-12)
    assert v["device_orchestration_efficiency"] == pytest.approx(0.80, abs=1e-12)
    assert v["device_parallel_efficiency"] == pytest.approx(0.50, abs=1e-12)
    per = result.extra["per_rank"].filter(pl.col("side") == "device").sort("rank")
    assert per["useful_ns"].to_list() == [60 * MS, 55 * MS, 50 * MS, 35 * MS]
    assert per["active_ns"].to_list() == [80 * MS, 78 * MS, 75 * MS, 70 * MS]
    assert per["comm_ns"].to_list() == [20 * MS, 23 * MS, 25 * MS, 35 * MS]
    assert per["idle_ns"].to_list() == [20 * MS, 22 * MS, 25 * MS, 30 * MS]
    tree = {m: (p, lvl) for m, p, lvl in result.table.select("metric", "parent", "level")
            .iter_rows()}
    assert tree["device_parallel_efficiency"] == (None, 0)
    assert tree["device_orchestration_efficiency"] == ("device_parallel_efficiency", 1)


def test_b5_nccl_useful(b5: traceatlas.Trace) -> None:
    # TALP convention: GPU1's NCCL kernel is useful: U = 60, 78, 50, 35 -> sum 223,
    # max U = 78 = max A -> LB = 223 / (4 * 78), CommE = 78 / 80, OrchE = 0.8.
    v = _values(analysis.run("efficiency", b5, {"nccl_useful": "true"}))
    assert v["device_load_balance"] == pytest.approx(223 / 312, abs=1e-12)
    assert v["device_communication_efficiency"] == pytest.approx(78 / 80, abs=1e-12)
    assert v["device_parallel_efficiency"] == pytest.approx(223 / 400, abs=1e-12)


@pytest.mark.parametrize("region", ["step:1", "window:50ms:100ms"])
def test_b5_region_step_clips(b5: traceatlas.Trace, region: str) -> None:
    # Window [50, 100) ms, T = 50; intervals CLIPPED to it:
    # GPU0 useful [50, 70) = 20, active [50, 90) = 40; GPU1 useful [50, 60) = 10,
    # active [50, 83) = 33; GPU2 useful 0, active [50, 75) = 25; GPU3 useful [50, 55) = 5,
    # active [50, 90) = 40. sum U = 35, max U = 20, max A = 40.
    result = analysis.run("efficiency", b5, {"region": region})
    v = _values(result)
    assert v["device_runtime_ns"] == 50 * MS
    assert v["device_load_balance"] == pytest.approx(35 / 80, abs=1e-12)
    assert v["device_communication_efficiency"] == pytest.approx(0.5, abs=1e-12)
    assert v["device_orchestration_efficiency"] == pytest.approx(0.8, abs=1e-12)
    assert v["device_parallel_efficiency"] == pytest.approx(35 / 200, abs=1e-12)
    scope = "step 1" if region.startswith("step") else "window"
    assert set(result.table["scope"]) == {scope}


def test_b5_cli_json(b5: traceatlas.Trace) -> None:
    out = CliRunner().invoke(app, ["analyze", "efficiency", str(b5.path), "--format", "json"])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.stdout[out.stdout.index("["):])
    by = {r["metric"]: r for r in rows}
    assert by["device_parallel_efficiency"]["value"] == pytest.approx(0.5, abs=1e-12)
    assert by["device_parallel_efficiency"]["scope"] == "run"
    assert set(rows[0]) == {"scope", "side", "metric", "value", "parent", "level", "label"}
    assert by["device_communication_efficiency"]["label"] == (
        "communication and transfers efficiency")


# -- host model: a pure-MPI Paraver trace ---------------------------------------------------

NAMES = ["main", "MPI_Send", "MPI_Recv", "MPI_Allreduce"]


def _mpi_trace(tmp_path: Path) -> traceatlas.Trace:
    """3 ranks; ``main`` [0, 100] ms on each (T = 100); no Paraver states, so useful =
    covered time minus MPI.

    rank 0: MPI_Send [40, 45] (message to rank 1, send starts 40), MPI_Allreduce [70, 90]
            -> U0 = 100 - 5 - 20 = 75
    rank 1: MPI_Recv [20, 50] (late sender: waits for the send at 40; data in at 49),
            MPI_Allreduce [80, 90] -> U1 = 100 - 30 - 10 = 60
    rank 2: MPI_Allreduce [65, 90] -> U2 = 75
    mean U = 70, max U = 75: LB = 70/75, CommE = 0.75, PE = 0.70.
    Ideal replay (clocks advance by time outside MPI): rank 0 sends at clock 40, reaches
    the Allreduce at 40 + 25 = 65; rank 1 enters the Recv at 20, completes at the
    sender's 40, reaches the Allreduce at 40 + 30 = 70; rank 2 at 65. The Allreduce
    completes at 70; 10 ms each after -> T^ideal = 80.
    SerE = 75 / 80 = 0.9375, TE = 80 / 100 = 0.8 (0.9375 x 0.8 = 0.75 = CommE).
    """
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


def test_pure_mpi_host_model(tmp_path: Path) -> None:
    result = analysis.run("efficiency", _mpi_trace(tmp_path))
    v = _values(result)
    assert v["host_runtime_ns"] == 100 * MS
    assert v["host_load_balance"] == pytest.approx(70 / 75, abs=1e-12)
    assert v["host_communication_efficiency"] == pytest.approx(0.75, abs=1e-12)
    assert v["host_parallel_efficiency"] == pytest.approx(0.70, abs=1e-12)
    assert v["host_ideal_runtime_ns"] == 80 * MS
    assert v["host_serialisation_efficiency"] == pytest.approx(0.9375, abs=1e-12)
    assert v["host_transfer_efficiency"] == pytest.approx(0.8, abs=1e-12)
    assert v["host_serialisation_efficiency"] * v["host_transfer_efficiency"] == \
        pytest.approx(v["host_communication_efficiency"], abs=1e-12)
    per = result.extra["per_rank"].sort("rank")
    assert per["useful_ns"].to_list() == [75 * MS, 60 * MS, 75 * MS]
    assert per["comm_ns"].to_list() == [25 * MS, 40 * MS, 25 * MS]
    assert "device_parallel_efficiency" not in v


def test_pure_mpi_window_region(tmp_path: Path) -> None:
    # window [45, 95] ms, T = 50. Clipped MPI: rank 0 Allreduce [70, 90] = 20 -> U0 = 30;
    # rank 1 Recv [45, 50] = 5 + Allreduce 10 -> U1 = 35; rank 2 Allreduce 25 -> U2 = 25.
    # LB = 30/35, CommE = 35/50. Replay from 45 (clocks 0): the message's send (40) is
    # before the window: no dependency. Rank 0 enters the Allreduce at 25, rank 1 at
    # 0 + 30 = 30, rank 2 at 20 -> completes at 30, + 5 ms after 90 -> T^ideal = 35.
    # SerE = 35/35 = 1, TE = 35/50 = 0.7.
    v = _values(analysis.run("efficiency", _mpi_trace(tmp_path),
                             {"region": "window:45ms:95ms"}))
    assert v["host_runtime_ns"] == 50 * MS
    assert v["host_load_balance"] == pytest.approx(30 / 35, abs=1e-12)
    assert v["host_communication_efficiency"] == pytest.approx(0.7, abs=1e-12)
    assert v["host_ideal_runtime_ns"] == 35 * MS
    assert v["host_serialisation_efficiency"] == pytest.approx(1.0, abs=1e-12)
    assert v["host_transfer_efficiency"] == pytest.approx(0.7, abs=1e-12)


def test_annotation_region(tmp_path: Path) -> None:
    # region = the spans of "main" on each rank = [0, 100]: same numbers as the whole run,
    # but no replay (per-rank windows).
    result = analysis.run("efficiency", _mpi_trace(tmp_path), {"region": "annotation:^main$"})
    v = _values(result)
    assert v["host_load_balance"] == pytest.approx(70 / 75, abs=1e-12)
    assert "host_transfer_efficiency" not in v
    assert set(result.table["scope"]) == {"annotation ^main$"}


def test_replay_chain_and_unplaced() -> None:
    # Two ranks, window [0, 100]. Rank 0: Send [10, 11] (send at 10); Recv [50, 60]
    # receiving rank 1's reply (sent at 40 inside rank 1's Send [40, 41]).
    # Rank 1: Recv [5, 30] gets rank 0's message (sender clock 10) -> exits at clock 10;
    # bursts 30..40 -> sends at clock 20; rank 0 at Recv entry: clock 10 - 0 + ... =
    # 49 (bursts 0-10, 11-50) -> no wait. Finals: rank 0 = 100 - 11 = 89;
    # rank 1: 10 + (40-30) + (100-41) = 79. T^ideal = 89.
    mpi = pl.DataFrame({
        "rank": [0, 0, 1, 1], "start_ns": [10, 50, 5, 40], "end_ns": [11, 60, 30, 41],
        "name": ["MPI_Send", "MPI_Recv", "MPI_Recv", "MPI_Send"],
        "collective": [None] * 4, "process_group": [None] * 4,
    }, schema_overrides={"collective": pl.String, "process_group": pl.String})
    msgs = pl.DataFrame({"src_rank": [0, 1, 1], "dst_rank": [1, 0, 0],
                         "send_start_ns": [10, 40, 40], "recv_end_ns": [29, 59, 45]})
    rep = ideal_replay(mpi, msgs, [0, 1], (0, 100))
    assert rep.final_clock_ns == {0: 89, 1: 79}
    assert rep.ideal_runtime_ns == 89
    assert rep.messages == 2 and rep.messages_unplaced == 1   # recv end 45: in no call
    assert rep.messages_outside == 0
    # Two more: received after the window (150) and from rank 2 (not replayed): counted.
    more = pl.concat([msgs, pl.DataFrame({"src_rank": [0, 2], "dst_rank": [1, 0],
                                          "send_start_ns": [10, 40],
                                          "recv_end_ns": [150, 59]})])
    again = ideal_replay(mpi, more, [0, 1], (0, 100))
    assert again.final_clock_ns == {0: 89, 1: 79}
    assert again.messages_outside == 2 and again.messages == 2


def test_gpu_code_host_tree_uses_device_offload(tmp_path: Path) -> None:
    """Host side of a GPU code (TALP's hierarchy), no MPI, T = 100 ms (the steps).

    Rank 0 waits 60 ms in cudaStreamSynchronize [30, 90), rank 1 40 ms [40, 80): useful
    40 and 60 ms (step time minus synchronisation). Outside MPI = 100 ms on both ranks, so
    load balance 1, communication efficiency 1, device offload = (40 + 60) / 200 = 0.5,
    parallel efficiency = mean useful / T = 50 / 100 = 0.5.
    """
    builders = []
    for rank, (sync_start, sync_ms) in {0: (30, 60), 1: (40, 40)}.items():
        b = TraceBuilder(rank, 2, base_time_ns=BASE, profiler_markers=False)
        b.step(0, 0, 100 * MS)
        b.launch("gemm", 1 * MS, 10_000, 5 * MS, 20 * MS)
        b.sync(sync_start * MS, sync_ms * MS, 25 * MS, 1_000)
        builders.append(b)
    write_multi_rank(tmp_path / "g", builders)
    trace = traceatlas.open(traceatlas.ingest(tmp_path / "g", tmp_path / "s", align="start"))
    v = _values(analysis.run("efficiency", trace))
    assert v["host_runtime_ns"] == 100 * MS
    assert v["host_load_balance"] == pytest.approx(1.0, abs=1e-12)
    assert v["host_communication_efficiency"] == pytest.approx(1.0, abs=1e-12)
    assert v["device_offload_efficiency"] == pytest.approx(0.5, abs=1e-12)
    assert v["host_parallel_efficiency"] == pytest.approx(0.5, abs=1e-12)
    rows = analysis.run("efficiency", trace).table
    parent = dict(zip(rows["metric"], rows["parent"], strict=True))
    assert parent["device_offload_efficiency"] == "host_parallel_efficiency"


HYBRID_PCF = """STATES
0    Idle
1    Running

EVENT_TYPE
9    50000002    MPI Collective Comm
VALUES
0   Outside MPI
10  MPI_Allreduce
"""


def test_hybrid_mpi_openmp_split(tmp_path: Path) -> None:
    """2 ranks x 2 threads (Paraver states), T = 100 ns; useful = Running state.

    rank 0: thread 1 Running [0, 80), MPI_Allreduce [80, 100); thread 2 Running [0, 60)
    rank 1: thread 1 Running [0, 70), MPI_Allreduce [70, 100); thread 2 Running [0, 30)
    Threads: U = 80, 60, 70, 30 -> hybrid LB = 60/80 = 0.75, CommE = 80/100 = 0.8,
    PE = 0.6. MPI level: OutMPI = 100 - 20 = 80 and 100 - 30 = 70 -> LB = 75/80 = 0.9375,
    CommE = 0.8, PE = 0.75. OpenMP level = hybrid / MPI: LB 0.8, CommE 1.0, PE 0.8
    (0.75 x 0.8 = 0.6).
    """
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
    v = _values(analysis.run("efficiency", trace))
    expected = {
        "host_hybrid_parallel_efficiency": 0.6, "host_hybrid_load_balance": 0.75,
        "host_hybrid_communication_efficiency": 0.8,
        "host_mpi_parallel_efficiency": 0.75, "host_mpi_load_balance": 0.9375,
        "host_mpi_communication_efficiency": 0.8,
        "host_openmp_parallel_efficiency": 0.8, "host_openmp_load_balance": 0.8,
        "host_openmp_communication_efficiency": 1.0,
    }
    for metric, value in expected.items():
        assert v[metric] == pytest.approx(value, abs=1e-12), metric
