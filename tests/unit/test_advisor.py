"""Golden tests of the advisor: each rule fires on a small trace built here with the cost
worked out by hand next to the builder calls, and stays silent on a trace without the
problem; the ranking puts the right finding on top.

Builder times are ns relative to the trace start. ``launch(name, cpu_start, cpu_dur,
gpu_start, gpu_dur)``: the launch call runs over [cpu_start, cpu_start + cpu_dur), the
device activity over [gpu_start, gpu_start + gpu_dur).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import traceatlas
from traceatlas import advisor
from traceatlas.advisor import (
    Context,
    Finding,
    bimodal,
    efficiency,
    exposed_comm,
    host_wait,
    late_sender,
    load_imbalance,
    low_tensor,
    memcpy_stream,
    short_kernels,
    straggler,
)
from traceatlas.analysis import registry
from traceatlas.cli.main import app
from traceatlas.testing import Collective, TraceBuilder, write_multi_rank
from traceatlas.testing.paraver_text import MPI_P2P, message, mpi_call, mpi_events, pcf, write_prv

BASE = 1_700_000_000_000_000_000
MS = 1_000_000
AR_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
AR = Collective("allreduce", 1024, 1024, "Float", (0, 1, 2, 3))


def _open(tmp_path: Path, builders: list[TraceBuilder]) -> traceatlas.Trace:
    paths = write_multi_rank(tmp_path / "in", builders)
    return traceatlas.open(traceatlas.ingest(paths, tmp_path / "store"))


def _ranks(n: int) -> list[TraceBuilder]:
    return [TraceBuilder(r, n, base_time_ns=BASE, profiler_markers=False) for r in range(n)]


def _imbalanced(tmp_path: Path, slow_compute: int = 150_000) -> traceatlas.Trace:
    """4 ranks, 3 back-to-back iterations at t = 20k + i * 160k. Each iteration: a compute
    kernel on stream 7 [t, t + 100k) (rank 2: [t, t + slow_compute)), then an all-reduce
    on stream 20 from the end of the compute to t + 160k on every rank (they END together,
    so clock alignment leaves them). Every launch happens at the start (cpu 1k apart),
    long before its kernel: no host wait. A host op ``train_step`` [0, 500k) on each rank
    keeps the host busy, as in a real run."""
    builders = _ranks(4)
    for rank, b in enumerate(builders):
        compute = slow_compute if rank == 2 else 100_000
        b.cpu_op("train_step", 0, 500_000)
        for i in range(3):
            t = 20_000 + i * 160_000
            b.launch("void gemm_fwd()", 2_000 * i, 500, t, compute)
            b.launch(AR_KERNEL, 2_000 * i + 1_000, 500, t + compute, 160_000 - compute,
                     stream=20, collective=AR)
    return _open(tmp_path, builders)


def _host_bound(tmp_path: Path, *, early: bool = False) -> traceatlas.Trace:
    """One rank, 11 kernels of 60k on stream 7 separated by 44k gaps: kernel k runs over
    [10k + 104k k, 70k + 104k k). Each launch call (1k) starts 1k after the previous kernel
    ENDS (host-bound) unless ``early`` (all launched at the start). Span = 11 x 60k + 10 x
    44k = 1,100k; host wait = 10 x 44k = 440k = 40 % of the span."""
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    b.cpu_op("train_step", 0, 1_110_000)  # the host is busy (Python) the whole time
    for k in range(11):
        start = 10_000 + 104_000 * k
        cpu = 100 * k if early or k == 0 else start - 44_000 + 1_000
        b.launch("void relu_kernel()", cpu, 1_000, start, 60_000)
    return _open(tmp_path, [b])


# -- the two ranking scenarios of the issue ---------------------------------------------

def test_top_finding_is_load_imbalance_naming_the_rank(tmp_path: Path) -> None:
    findings = advisor.advise(_imbalanced(tmp_path))
    top = findings[0]
    assert top.rule == "load_imbalance"
    assert "rank 2" in top.statement
    # compute per rank: 3 x 100k = 300k, rank 2: 3 x 150k = 450k; mean = (3 x 300k +
    # 450k) / 4 = 337.5k; cost = max - mean = 112.5k; balance 337.5 / 450 = 0.75 < 0.8.
    assert top.cost_ns == 112_500
    assert top.severity == "high"
    assert [f.cost_ns for f in findings] == sorted((f.cost_ns for f in findings),
                                                   reverse=True)


def test_top_finding_is_host_wait_at_40_percent(tmp_path: Path) -> None:
    findings = advisor.advise(_host_bound(tmp_path))
    top = findings[0]
    assert top.rule == "host_wait"
    assert top.cost_ns == 440_000
    assert "40%" in top.statement and "rank 0" in top.statement
    assert "launch-bound" in top.statement  # no data loader, no synchronisation calls
    assert top.severity == "high"  # orchestration estimate 1 - 0.4 = 0.6


# -- one golden fire / no-fire pair per rule --------------------------------------------

def test_load_imbalance_rule(tmp_path: Path) -> None:
    [found] = load_imbalance.check(Context(_imbalanced(tmp_path / "a")))
    assert (found.cost_ns, found.efficiency) == (112_500, pytest.approx(0.75))
    assert "gemm_fwd" in found.statement and "1.33x" in found.statement  # 450 / 337.5
    # balanced: every rank 100k per iteration -> balance 1 -> nothing
    assert load_imbalance.check(Context(_imbalanced(tmp_path / "b", 100_000))) == []


def test_straggler_rule(tmp_path: Path) -> None:
    [found] = straggler.check(Context(_imbalanced(tmp_path / "a")))
    # per instance: lags 0, 0, 50k (rank 2), 0 -> mean 12.5k; mean wait = 50k - 12.5k =
    # 37.5k; rank 2 last at all 3 instances -> 112.5k.
    assert found.cost_ns == 112_500
    assert "rank 2 starts last in 3 of 3 NCCL collectives" in found.statement
    # equal starts: no wait, nobody late
    assert straggler.check(Context(_imbalanced(tmp_path / "b", 100_000))) == []


def test_exposed_comm_rule(tmp_path: Path) -> None:
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    b.launch("void gemm()", 0, 500, 10_000, 100_000)                 # [10k, 110k)
    b.launch(AR_KERNEL, 1_000, 500, 110_000, 50_000, stream=20,      # [110k, 160k): alone
             collective=Collective(group_ranks=(0,)))
    [found] = exposed_comm.check(Context(_open(tmp_path / "a", [b])))
    # exposed = |C or K| - |K| = 150k - 100k = 50k; one rank: no collective wait.
    assert found.cost_ns == 50_000 and "rank 0" in found.statement
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    b.launch("void gemm()", 0, 500, 10_000, 100_000)
    b.launch(AR_KERNEL, 1_000, 500, 20_000, 50_000, stream=20,       # inside the gemm
             collective=Collective(group_ranks=(0,)))
    assert exposed_comm.check(Context(_open(tmp_path / "b", [b]))) == []


def test_exposed_comm_excludes_waiting_for_late_ranks(tmp_path: Path) -> None:
    [found] = exposed_comm.check(Context(_imbalanced(tmp_path)))
    # rank 0: all-reduce [t + 100k, t + 160k) alone = 60k x 3 = 180k exposed, of which
    # waiting for rank 2 (last start - own start) 50k x 3 = 150k -> transfer 30k. Rank 2:
    # 10k x 3 = 30k, no wait. Ranks 0, 1, 3 tie at 30k -> rank 0.
    assert found.cost_ns == 30_000 and "rank 0" in found.statement


def test_host_wait_rule(tmp_path: Path) -> None:
    [found] = host_wait.check(Context(_host_bound(tmp_path / "a")))
    assert found.cost_ns == 440_000 and "stream 7" in found.statement
    # the same kernels all launched at the start: the gaps are not host wait
    assert host_wait.check(Context(_host_bound(tmp_path / "b", early=True))) == []


def test_host_wait_names_the_data_loader(tmp_path: Path) -> None:
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    b.step(1, 0, 1_000_000)
    b.launch("void relu_kernel()", 0, 1_000, 10_000, 60_000)        # [10k, 70k)
    # data loader [70k, 170k) on the host, then the launch at 171k, kernel at 180k:
    # gap 70k..180k = 110k, launch (171k) after 70k -> host wait 110k, of which the data
    # loader covers 100k (data_loading); launch call [171k, 172k) 1k launch-bound; the
    # 9k untraced are 3.75 % of the 240k span (< 5 %): one finding, data_loading, 100k.
    b.cpu_op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 70_000, 170_000)
    b.launch("void relu_kernel()", 171_000, 1_000, 180_000, 60_000)  # [180k, 240k)
    [found] = host_wait.check(Context(_open(tmp_path, [b])))
    assert found.cost_ns == 100_000 and found.cause == "data_loading"
    assert "DataLoader" in found.statement
    assert "--table causes" in found.command


def test_memcpy_stream_rule(tmp_path: Path) -> None:
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    b.launch("void gemm()", 0, 500, 0, 100_000)                               # [0, 100k)
    b.launch("Memcpy HtoD (Pageable -> Device)", 1_000, 500, 100_000, 30_000,
             kind="memcpy", nbytes=1 << 20)                                    # [100k, 130k)
    b.launch("void gemm()", 2_000, 500, 130_000, 70_000)                      # [130k, 200k)
    [found] = memcpy_stream.check(Context(_open(tmp_path / "a", [b])))
    # on compute stream 7: 30k of copies; device time with only memory activity: 30k.
    assert found.cost_ns == 30_000
    assert "Memcpy HtoD (Pageable -> Device) on stream 7" in found.statement
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    b.launch("void gemm()", 0, 500, 0, 100_000)
    b.launch("Memcpy HtoD (Pageable -> Device)", 1_000, 500, 200_000, 30_000,
             kind="memcpy", nbytes=1 << 20, stream=8)  # exposed, but on a copy stream
    b.launch("Memcpy HtoD (Pageable -> Device)", 2_000, 500, 10_000, 30_000,
             kind="memcpy", nbytes=1 << 20, stream=7)  # compute stream, hidden by... none
    b.launch("void gemm()", 3_000, 500, 0, 150_000, stream=9)  # ... this gemm on stream 9
    assert memcpy_stream.check(Context(_open(tmp_path / "b", [b]))) == []


def _storm(tmp_path: Path, n: int) -> traceatlas.Trace:
    """``n`` kernels of 2k, each launched by a 5k call back to back: call k over [5k k,
    5k k + 5k), kernel at 5k k + 6k. Median launch call 5k; per kernel the host time the
    device cannot cover: 5k - 2k = 3k."""
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    for k in range(n):
        b.launch("void add_kernel()", 5_000 * k, 5_000, 5_000 * k + 6_000, 2_000)
    return _open(tmp_path, [b])


def test_short_kernels_rule(tmp_path: Path) -> None:
    [found] = short_kernels.check(Context(_storm(tmp_path / "a", 60)))
    assert found.cost_ns == 60 * 3_000
    assert "launches 60 kernels" in found.statement and "add_kernel" in found.statement
    assert short_kernels.check(Context(_storm(tmp_path / "b", 40))) == []  # < 50: no storm


def _durations(tmp_path: Path, durations: list[int]) -> traceatlas.Trace:
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    for k, dur in enumerate(durations):
        b.launch("void softmax()", 100 * k, 50, 100_000 * k, dur)
    return _open(tmp_path, [b])


def test_bimodal_rule(tmp_path: Path) -> None:
    trace = _durations(tmp_path / "a", [10_000] * 10 + [30_000] * 10)
    [found] = bimodal.check(Context(trace))
    # fast median 10k; slow calls cost 10 x (30k - 10k) = 200k
    assert found.cost_ns == 200_000
    assert "10 of 20 calls slow" in found.statement and "softmax" in found.statement
    steady = _durations(tmp_path / "b", [10_000 + 50 * k for k in range(20)])
    assert bimodal.check(Context(steady)) == []


def test_late_sender_rule(tmp_path: Path) -> None:
    # rank 1 enters MPI_Recv at 10 ms; rank 0's MPI_Send starts at 13 ms -> 3 ms late.
    late = mpi_call(2, RECV, 10, 14) + mpi_call(1, SEND, 13, 13.5) + message(
        0, 1, 13, 13.2, 10, 13.8, 100)
    (tmp_path / "a").mkdir()
    trace = traceatlas.open(traceatlas.ingest(write_prv(tmp_path / "a", late, PCF, 2),
                                              tmp_path / "a" / "s"))
    [found] = late_sender.check(Context(trace))
    assert found.cost_ns == 3 * MS
    assert "rank 1 waits 3 ms in 1 receives posted before rank 0 sent" in found.statement
    # eager: the send [30, 30.5] returns before the receive [32, 33] is posted
    eager = mpi_call(1, SEND, 30, 30.5) + mpi_call(2, RECV, 32, 33) + message(
        0, 1, 30, 30.2, 32, 32.5, 8)
    (tmp_path / "b").mkdir()
    trace = traceatlas.open(traceatlas.ingest(write_prv(tmp_path / "b", eager, PCF, 2),
                                              tmp_path / "b" / "s"))
    assert late_sender.check(Context(trace)) == []


SEND, RECV = 1, 2
PCF = pcf({1: "Running"}, mpi_events(MPI_P2P, {SEND: "MPI_Send", RECV: "MPI_Recv"}))


SYS = 5_000_000_000
PID = 100
GPID = (1 << 48) | (PID << 24)


def _nsys_gemm(path: Path, tensor_pct: int) -> Path:
    """A minimal Nsight Systems export: one GEMM [1000, 3000) on device 0 and the metric
    ``Tensor Active`` = tensor_pct from t = 0 to 4000 (sample-and-hold)."""
    con = sqlite3.connect(path)

    def table(name: str, cols: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
        con.execute(f"CREATE TABLE {name} ({', '.join(cols)})")
        con.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(cols))})", rows)

    table("StringIds", ("id", "value"), [(1, "cudaLaunchKernel_v7000"),
                                         (10, "ampere_sgemm_128x64_nn")])
    table("META_DATA_EXPORT", ("name", "value"), [("EXPORT_SCHEMA_VERSION", "3.25.0")])
    table("TARGET_INFO_SESSION_START_TIME", ("utcEpochNs", "utcTime", "localTime",
                                             "systemClockNs"),
          [(BASE, "2023-11-14T22:13:20", "2023-11-14T22:13:20", SYS)])
    table("PROCESSES", ("globalPid", "pid", "name"), [(GPID, PID, "python3")])
    table("CUPTI_ACTIVITY_KIND_KERNEL",
          ("start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid",
           "demangledName", "shortName", "registersPerThread", "gridX", "gridY", "gridZ",
           "blockX", "blockY", "blockZ", "staticSharedMemory", "dynamicSharedMemory"),
          [(SYS + 1000, SYS + 3000, 0, 1, 7, 1, GPID, 10, 10, 32, 1, 1, 1, 128, 1, 1, 0, 0)])
    table("TARGET_INFO_GPU_METRICS", ("typeId", "sourceId", "typeName", "metricId",
                                      "metricName"), [(0x100, 0, "GA100", 1, "Tensor Active")])
    table("GPU_METRICS", ("timestamp", "typeId", "metricId", "value"),
          [(SYS, 0x100, 1, tensor_pct), (SYS + 4000, 0x100, 1, 0)])
    con.commit()
    con.close()
    return path


@pytest.mark.filterwarnings("ignore::traceatlas.errors.RankInferredWarning")
def test_low_tensor_rule(tmp_path: Path) -> None:
    trace = traceatlas.open(traceatlas.ingest(_nsys_gemm(tmp_path / "a.sqlite", 10),
                                              tmp_path / "a"))
    [found] = low_tensor.check(Context(trace))
    # 2000 ns of GEMM at 10 % tensor activity -> 2000 x 0.9 = 1800 ns with idle tensor cores
    assert found.cost_ns == 1_800
    assert "ampere_sgemm_128x64_nn" in found.statement and "10%" in found.statement
    trace = traceatlas.open(traceatlas.ingest(_nsys_gemm(tmp_path / "b.sqlite", 60),
                                              tmp_path / "b"))
    assert low_tensor.check(Context(trace)) == []


def test_efficiency_severity_and_unexplained_metrics(tmp_path: Path) -> None:
    ctx = Context(_storm(tmp_path, 1))  # span: kernel [6k, 8k) and call [0, 5k) -> 8k
    ctx._efficiency = {"host_parallel_efficiency": 0.6, "host_load_balance": 0.7,
                       "device_orchestration_efficiency": 0.9, "device_load_balance": 0.5}
    ctx.parents.update({"host_parallel_efficiency": None,
                        "host_load_balance": "host_parallel_efficiency",
                        "device_orchestration_efficiency": None,
                        "device_load_balance": None})
    rule = Finding("x", "s", 10, "e", "n", "c", metric="device_orchestration_efficiency",
                   efficiency=0.5)
    explained = Finding("y", "s", 10, "e", "n", "c", metric="device_load_balance")
    extra = efficiency.apply(ctx, [rule, explained])
    # the analysis' value replaces the rule's estimate: 0.9 >= 0.8 -> info
    assert (rule.severity, rule.efficiency) == ("info", 0.9)
    assert explained.severity == "high"  # 0.5
    # host_parallel_efficiency has a low child (load balance 0.7): only the child is
    # reported; device_load_balance is explained by a finding. Cost (1 - 0.7) x 8k.
    assert [(f.metric, f.cost_ns, f.severity) for f in extra] == [
        ("host_load_balance", 2_400, "high")]
    assert "Host load balance is 0.70" in extra[0].statement


def test_rules_skip_missing_data(tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    trace = traceatlas.open(traceatlas.ingest(
        write_prv(tmp_path / "p", mpi_call(1, RECV, 1, 2), PCF, 1), tmp_path / "s"))
    ctx = Context(trace)
    # no device data, no messages: every rule is silent (an efficiency below 0.8 may
    # still be reported from the efficiency analysis: the run is all MPI_Recv)
    found = advisor.advise(trace, context=ctx)
    assert [f for f in found if f.rule != "efficiency"] == []
    assert any("breakdown" in n for n in ctx.notes)


def test_cli_table_and_json(tmp_path: Path) -> None:
    trace = _imbalanced(tmp_path)
    runner = CliRunner()
    out = runner.invoke(app, ["analyze", "advisor", str(trace.path), "--format", "json",
                              "-p", f"path={trace.path}"])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.stdout)
    assert rows[0]["rank"] == 1 and rows[0]["rule"] == "load_imbalance"
    assert set(rows[0]) == {"rank", "rule", "statement", "cost_ns", "evidence", "next_step",
                            "command", "severity", "cause", "ranks", "per_step", "where",
                            "view", "cost_bytes"}
    assert rows[0]["cause"] == "load_imbalance"
    assert rows[0]["command"] == f"traceatlas analyze kernels {trace.path} --ranks 2"
    assert [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
    table = runner.invoke(app, ["analyze", "advisor", str(trace.path), "-p", "top=1"],
                          env={"COLUMNS": "400"})
    assert table.exit_code == 0, table.output
    assert "load_imbalance" in table.stdout and "straggler" not in table.stdout
    result = registry.run("advisor", trace, {"top": "0", "min_cost_pct": "0"})
    assert result.table.height >= 3
