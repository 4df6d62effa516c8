"""critical_path in rank batches equals the whole run (the oracle: one graph over every
rank) on built multi-rank traces: NCCL all-reduces with late ranks, syncs, host ops on two
threads, durations drawn from a small set so that times tie across ranks (the tie rules
of the latest node and of the binding edges must hold across batches), and MPI programs
with messages and collectives. Every batch size from 1 rank to all but one."""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import traceatlas
from traceatlas.analysis import partitioned, registry
from traceatlas.engine import LocalEngine
from traceatlas.testing.builder import Collective, TraceBuilder, write_multi_rank
from traceatlas.testing.mpi import write_mpi_trace
from traceatlas.testing.results import assert_same_result

GLOO_TID = 77
"""gloo's runloop thread."""
DURS = (1_000, 2_000, 3_000)
"""Kernel durations (ns): few values, so ranks tie."""


def _compare(trace: traceatlas.Trace, params: dict[str, str] | None = None) -> None:
    analysis = registry.get_analysis("critical_path")
    typed = registry.parse_params(analysis, params or {})
    whole = analysis.run(trace, typed)
    for per in range(1, len(trace.ranks)):
        split = partitioned.run_partitioned(analysis, trace, typed, LocalEngine(1),
                                            ranks_per_task=per)
        assert_same_result(split, whole)


@st.composite
def gpu_runs(draw: st.DrawFn) -> list[list[tuple[int, int, bool]]]:
    """Per rank, per iteration: (compute kernel ns, host gap ns, a sync after it)."""
    ranks = draw(st.integers(2, 4))
    iters = draw(st.integers(1, 3))
    item = st.tuples(st.sampled_from(DURS), st.sampled_from((0, 500)), st.booleans())
    return [[draw(item) for _ in range(iters)] for _ in range(ranks)]


def _write_gpu(root: Path, runs: list[list[tuple[int, int, bool]]]) -> traceatlas.Trace:
    ar = Collective("allreduce", 1024, 1024, group_ranks=tuple(range(len(runs))))
    builders = []
    for r, iters in enumerate(runs):
        b = TraceBuilder(rank=r, world_size=len(runs), profiler_markers=False)
        side = b.main_tid + 1
        t_host, t_dev = 0, 1_000
        for it, (dur, gap, sync) in enumerate(iters):
            b.cpu_op(f"forward#{it}", t_host, t_host + 300)
            b.cpu_op("aten::copy_", t_host + 50, t_host + 150, tid=side)
            b.launch("gemm", t_host + 100, 100, t_dev, dur)
            t_dev += dur
            b.launch("ncclKernel_AllReduce_RING_LL_Sum_float", t_host + 200, 100, t_dev,
                     1_000, collective=ar)
            t_dev += 1_000 + gap
            t_host += 400
            if sync:
                b.sync(t_host, t_dev - t_host + 100, t_dev, 0)
                t_host = t_dev + 200
        builders.append(b)
    write_multi_rank(root / "run", builders)
    return traceatlas.open(root / "run")


@settings(max_examples=15, deadline=None)
@given(runs=gpu_runs())
def test_batched_equals_whole_on_built_gpu_runs(runs: list[list[tuple[int, int, bool]]]
                                                ) -> None:
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = _write_gpu(Path(tmp), runs)
        assert _edges(trace, "nccl_collectives") == len(runs[0])  # one per iteration
        _compare(trace)


@settings(max_examples=8, deadline=None)
@given(ranks=st.integers(2, 6), iterations=st.integers(1, 3),
       imbalance=st.sampled_from((0.0, 0.3)), heavy=st.integers(0, 5))
def test_batched_equals_whole_on_mpi_programs(ranks: int, iterations: int,
                                              imbalance: float, heavy: int) -> None:
    """Sends, receives (messages) and all-reduces (MPI collectives); with no imbalance
    every rank ties."""
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        made = write_mpi_trace(Path(tmp) / "mpi.prv", ranks=ranks, iterations=iterations,
                               imbalance=imbalance, heavy_ranks=(heavy % ranks,))
        store = traceatlas.ingest(made.path, Path(tmp) / "s", engine=LocalEngine(1))
        trace = traceatlas.Trace(store)
        assert _edges(trace, "messages") > 0 and _edges(trace, "mpi_collectives") > 0
        _compare(trace)


def _edges(trace: traceatlas.Trace, kind: str) -> int:
    deps = registry.run("critical_path", trace).extra["dependencies"]
    return int(dict(deps.iter_rows())[kind])


@settings(max_examples=10, deadline=None)
@given(work=st.lists(st.tuples(st.sampled_from((1_000, 4_000)), st.sampled_from((300, 900)),
                               st.sampled_from((200, 400))), min_size=2, max_size=4))
def test_batched_equals_whole_on_gloo_threads(work: list[tuple[int, int, int]]) -> None:
    """DDP over gloo (``test_critical_path_host_coll``'s layout): each rank computes for
    c, enqueues, and gloo's thread runs the record with a copy in (i ns) and a copy out
    (o ns): the arrival is the record's longest own stretch, so the other ranks' records
    travel with the calls inside them."""
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        builders = []
        for r, (c, i, o) in enumerate(work):
            b = TraceBuilder(rank=r, world_size=len(work), backend="gloo",
                             profiler_markers=False)
            b.cpu_op("compute", 0, c)
            b.cpu_op("c10d::allreduce_", c, c + 100)
            b.annotation("gloo:all_reduce", c + 200, 8_000, tid=GLOO_TID)
            b.cpu_op("aten::copy_", c + 200, c + 200 + i, tid=GLOO_TID)
            b.cpu_op("aten::copy_", 7_900 - o, 7_900, tid=GLOO_TID)
            b.cpu_op("consume", 8_300, 8_900 - 100 * r)
            builders.append(b)
        write_multi_rank(Path(tmp) / "run", builders)
        trace = traceatlas.open(Path(tmp) / "run")
        assert _edges(trace, "host_collectives") == 1
        _compare(trace)


def test_a_small_region_runs_whole_after_the_bounds_pass(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With the analysis' own batching, a region of at most ROWS_PER_TASK intervals
    (here: every region) runs whole once the bounds pass has counted it; with the limit
    at 0 the batches run. Both give the whole run's result."""
    from traceatlas.analysis import critical_path, critical_split

    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = _write_gpu(Path(tmp), [[(1_000, 0, False)], [(2_000, 0, True)]])
        monkeypatch.setattr(critical_path.CriticalPath, "ranks_per_task", 1)
        maps: list[str] = []
        real = critical_split.partial

        def spy(view: traceatlas.Trace, params: dict[str, object]) -> object:
            maps.append("partial")
            return real(view, params)

        monkeypatch.setattr(critical_path.CriticalPath, "partial", staticmethod(spy))
        want = registry.get_analysis("critical_path").run(
            trace, registry.parse_params(registry.get_analysis("critical_path"), {}))
        got = registry.run("critical_path", trace, {}, engine=LocalEngine(1))
        assert maps == []  # whole after the bounds pass
        assert_same_result(got, want)
        monkeypatch.setattr(partitioned, "ROWS_PER_TASK", 0)
        got = registry.run("critical_path", trace, {}, engine=LocalEngine(1))
        assert maps == ["partial", "partial"]  # one batch per rank
        assert_same_result(got, want)
