"""``critical_path`` on Kineto traces built here, whose path is known by construction.

Every expected length, breakdown and what-if gain is computed by hand in the docstrings
(times in ns relative to the trace start; the builder writes them exactly)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

import traceatlas
from traceatlas import analysis
from traceatlas.errors import InputError
from traceatlas.testing.builder import Collective, TraceBuilder, write_multi_rank

BASE = 1_700_000_000_000_000_000


def _open(b: TraceBuilder, tmp_path: Path, extra: list[dict[str, object]] | None = None
          ) -> traceatlas.Trace:
    doc = json.loads(b.to_json())
    doc["traceEvents"].extend(extra or [])
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(doc))
    return traceatlas.open(path)


def _bounds(res: analysis.Result) -> dict[str, int]:
    t = res.extra["by_bound"].filter(pl.col("ns") > 0)
    return dict(zip(t["bound"].to_list(), t["ns"].to_list(), strict=True))


def _gain(trace: traceatlas.Trace, speedup: str) -> int:
    res = analysis.run("critical_path", trace, {"speedup": speedup})
    w = res.extra["whatif"]
    assert w["length_before_ns"][0] == res.table["on_path_ns"].sum()
    return int(w["gain_ns"][0])


def _cpu_loop(tmp_path: Path) -> traceatlas.Trace:
    """Three launch calls of 5 us every 10 us ([1k,6k], [11k,16k], [21k,26k]); kernels
    k0..k2 of 1 us start 6 us after their call ([7k,8k], [17k,18k], [27k,28k]). Region
    [1k, 28k] = 27k. Path: call 1 (cpu 5k), gap (cpu 5k), call 2 (cpu 5k), gap (cpu 5k),
    launch of k2 from call 3's start (launch 6k), k2 (gpu 1k)."""
    b = TraceBuilder(rank=0, profiler_markers=False)
    for i in range(3):
        b.launch(f"k{i}", 1_000 + 10_000 * i, 5_000, 7_000 + 10_000 * i, 1_000)
    return _open(b, tmp_path)


def test_cpu_bound_launch_loop(tmp_path: Path) -> None:
    trace = _cpu_loop(tmp_path)
    res = analysis.run("critical_path", trace)
    assert res.table["on_path_ns"].sum() == 27_000
    assert _bounds(res) == {"cpu": 20_000, "launch": 6_000, "gpu_compute": 1_000}
    last = res.table.row(-1, named=True)
    assert (last["name"], last["bound"], last["start_ns"]) == ("k2", "gpu_compute",
                                                               BASE + 27_000)
    # segments tile the region: each starts where the previous ended
    t = res.table
    assert (t["start_ns"][1:] == t["end_ns"][:-1]).all()
    assert t["start_ns"][0] == BASE + 1_000 and t["end_ns"][-1] == BASE + 28_000


def test_cpu_loop_whatif(tmp_path: Path) -> None:
    """k0 is off the path: nothing. k2 twice as fast: 500. Launch calls twice as fast:
    calls 1 and 2 lose 2.5 us each on the path (call 3's own time is off it): 5k."""
    trace = _cpu_loop(tmp_path)
    assert _gain(trace, "^k0$:2") == 0
    assert _gain(trace, "^k2$:2") == 500
    assert _gain(trace, "cudaLaunchKernel:2") == 5_000
    assert _gain(trace, "category:kernel:2") == 500


def _gpu_stream(tmp_path: Path) -> traceatlas.Trace:
    """Calls [0,1k], [2k,3k], [4k,5k]; kernels of 10 us back to back from 1.5 us:
    [1.5k,11.5k], [11.5k,21.5k], [21.5k,31.5k]. Path: launch of k0 (1.5k), three kernels
    (30k). Region [0, 31.5k]."""
    b = TraceBuilder(rank=0, profiler_markers=False)
    for i in range(3):
        b.launch(f"k{i}", 2_000 * i, 1_000, 1_500 + 10_000 * i, 10_000)
    return _open(b, tmp_path)


def test_gpu_bound_stream(tmp_path: Path) -> None:
    trace = _gpu_stream(tmp_path)
    res = analysis.run("critical_path", trace)
    assert _bounds(res) == {"gpu_compute": 30_000, "launch": 1_500}
    assert res.table["name"].to_list() == ["k0", "k0", "k1", "k2"]
    # host work is off the path; the middle kernel on it
    assert _gain(trace, "cudaLaunchKernel:4") == 0
    assert _gain(trace, "^k1$:2") == 5_000
    assert _gain(trace, "rank:0:2") == 15_000


def test_device_synchronize(tmp_path: Path) -> None:
    """Launch [0,1k] of k (GPU [2k,12k]); cudaDeviceSynchronize [3k,12.5k]; op [13k,14k].
    Path: launch 2k, k 10k, sync (kernel end -> call end) 500, gap 500 + op 1k (cpu).
    k twice as fast: the sync returns at 7.5k, so 5k earlier."""
    b = TraceBuilder(rank=0, profiler_markers=False)
    b.launch("k", 0, 1_000, 2_000, 10_000)
    b.sync(3_000, 9_500, 3_000, 9_400, kind="Context Sync")
    b.cpu_op("aten::after", 13_000, 14_000)
    trace = _open(b, tmp_path)
    res = analysis.run("critical_path", trace)
    assert _bounds(res) == {"gpu_compute": 10_000, "launch": 2_000, "cpu": 1_500,
                            "sync": 500}
    deps = dict(res.extra["dependencies"].iter_rows())
    assert deps["sync_context"] == 1
    assert _gain(trace, "^k$:2") == 5_000
    assert _gain(trace, "aten::after:2") == 500


def test_two_streams_joined_by_event_wait(tmp_path: Path) -> None:
    """Stream 7: producer p [1k,21k]; cudaEventRecord (corr 100) at [1.5k,1.6k];
    cudaStreamWaitEvent on stream 9 at [1.7k,1.8k]; consumer c launched [2k,2.5k] on
    stream 9 runs [21k,25k] (it waited for p). Path: launch of p 1k, p 20k, sync edge
    (p end -> c start) 0, c 4k. Without the wait edge c would be bound by its launch."""
    b = TraceBuilder(rank=0, profiler_markers=False)
    b.launch("p", 0, 1_000, 1_000, 20_000, stream=7)
    b.launch("c", 2_000, 500, 21_000, 4_000, stream=9)

    def rt(name: str, start: int, dur: int, corr: int) -> dict[str, object]:
        return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": b.pid,
                "tid": b.main_tid, "ts": start / 1000, "dur": dur / 1000,
                "args": {"correlation": corr, "External id": corr}}

    extra = [rt("cudaEventRecord", 1_500, 100, 100), rt("cudaStreamWaitEvent", 1_700, 100, 101),
             {"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": 0, "tid": 9,
              "ts": 1.75, "dur": 0.01,
              "args": {"cuda_sync_kind": "Stream Wait Event", "wait_on_stream": 7,
                       "wait_on_cuda_event_record_corr_id": 100, "stream": 9,
                       "correlation": 101, "device": 0}}]
    trace = _open(b, tmp_path, extra)
    res = analysis.run("critical_path", trace)
    deps = dict(res.extra["dependencies"].iter_rows())
    assert deps["stream_wait_event"] == 1
    assert _bounds(res) == {"gpu_compute": 24_000, "launch": 1_000}
    assert res.table["name"].to_list() == ["p", "p", "c"]
    assert _gain(trace, "^c$:2") == 2_000
    assert _gain(trace, "^p$:2") == 10_000


def _allreduce_pair(tmp_path: Path) -> traceatlas.Trace:
    """Two ranks, two iterations (base 0 and 10 us). Rank 0: fast_kernel [b+1k,b+3k],
    allreduce [b+3k,b+9k]; rank 1 (late): slow_kernel [b+1k,b+7k], allreduce [b+7k,b+9k];
    rank 0 ends with tail [19k,20k]. Every launch is early (host at 0..0.9 us).
    Path: launch of rank 1's first kernel 1k, slow 6k, allreduce 2k (last arrival + the
    transfer), stream gap 2k (rank 1 waits for its next kernel), slow 6k, allreduce 2k
    (owned by rank 0's kernel: the path ends on rank 0), tail 1k. Region [0, 20k]."""
    ar = Collective("allreduce", 1024, 1024, group_ranks=(0, 1))
    builders = []
    for r in range(2):
        b = TraceBuilder(rank=r, world_size=2, profiler_markers=False)
        work = "fast_kernel" if r == 0 else "slow_kernel"
        dur = 2_000 if r == 0 else 6_000
        for it in range(2):
            base = 10_000 * it
            b.launch(work, 400 * it, 100, base + 1_000, dur)
            b.launch("ncclKernel_AllReduce_RING_LL_Sum_float", 200 + 400 * it, 100,
                     base + 1_000 + dur, 8_000 - dur, collective=ar)
        if r == 0:
            b.launch("tail", 800, 100, 19_000, 1_000)
        builders.append(b)
    write_multi_rank(tmp_path / "run", builders)
    return traceatlas.open(tmp_path / "run")


def test_late_rank_at_every_allreduce(tmp_path: Path) -> None:
    trace = _allreduce_pair(tmp_path)
    res = analysis.run("critical_path", trace)
    assert res.table["on_path_ns"].sum() == 20_000
    assert _bounds(res) == {"gpu_compute": 13_000, "gpu_comm": 4_000, "kernel_gap": 2_000,
                            "launch": 1_000}
    by_rank = {r["rank"]: r for r in res.extra["by_rank"].iter_rows(named=True)}
    assert by_rank[1]["arrivals_last"] == 2 and by_rank[0]["arrivals_last"] == 0
    assert by_rank[1]["ns"] == 17_000 and by_rank[0]["ns"] == 3_000
    assert dict(res.extra["dependencies"].iter_rows())["nccl_collectives"] == 2


def test_allreduce_whatif(tmp_path: Path) -> None:
    """Rank 0's kernels are off the path (it waits anyway): 0. Rank 1's slow kernels
    twice as fast (3k each): both allreduces start 3k earlier each time: 6k."""
    trace = _allreduce_pair(tmp_path)
    assert _gain(trace, "fast_kernel:2") == 0
    assert _gain(trace, "slow_kernel:2") == 6_000


def test_bad_speedup_is_one_clear_error(tmp_path: Path) -> None:
    trace = _cpu_loop(tmp_path)
    for bad in ("k0", "k0:0", "k0:x", "rank:a:2", "([:2"):
        with pytest.raises(InputError):
            analysis.run("critical_path", trace, {"speedup": bad})
    with pytest.raises(InputError):
        analysis.run("critical_path", trace, {"region": "annotation:nope"})
