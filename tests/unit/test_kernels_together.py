"""``kernels`` by rank and by name in one pass over the rank batches (the report asks for
both: ``Context.results_together``) give exactly the tables of two separate runs, and of
the whole run, with shapes (an ``aten::mm`` op's ``Input Dims`` around each launch),
memory rows on and off, on the inline and the 2-process local engine, 1 and 2 ranks a
task. And the pass reads the shapes once per batch, not once per parameter set."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import traceatlas
from traceatlas.advisor import Context
from traceatlas.analysis import kernel_shapes, registry
from traceatlas.analysis.partitioned import run_partitioned, run_partitioned_together
from traceatlas.engine import LocalEngine
from traceatlas.testing import TraceBuilder, write_multi_rank
from traceatlas.testing.results import assert_same_result

BASE = 1_700_000_000_000_000_000
SHAPES = ([[64, 64], [64, 64]], [[256, 256], [256, 256]])


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> traceatlas.Trace:
    """3 ranks; call i on rank r: ``aten::mm`` on shape i % 2 launching ``gemm``
    (``(1 + i % 3) * (r + 1)`` us), then every third call a memcpy."""
    tmp = tmp_path_factory.mktemp("together")
    builders = []
    for rank in range(3):
        b = TraceBuilder(rank, 3, base_time_ns=BASE, profiler_markers=False)
        for i in range(12):
            t = i * 100_000
            b.cpu_op("aten::mm", t, t + 5_000, args={"Input Dims": SHAPES[i % 2]})
            b.launch("gemm", t + 1_000, 2_000, t + 10_000, (1 + i % 3) * (rank + 1) * 1_000)
            if i % 3 == 0:
                b.launch("Memcpy HtoD (Pageable -> Device)", t + 6_000, 1_000, t + 40_000,
                         3_000, kind="memcpy", nbytes=4096)
        builders.append(b)
    paths = write_multi_rank(tmp / "run", builders)
    return traceatlas.open(traceatlas.ingest(paths, tmp / "store"))




SETS = [{}, {"by": "name", "top": 8}, {"memory": True}, {"by": "name", "memory": True}]


@pytest.mark.parametrize(("processes", "per_task"), [(1, 1), (1, 2), (2, 1)])
def test_together_equals_separate_runs(three: traceatlas.Trace, processes: int,
                                       per_task: int) -> None:
    analysis = registry.get_analysis("kernels")
    typed = [registry.parse_params(analysis, p) for p in SETS]
    engine = LocalEngine(processes)
    together = run_partitioned_together(analysis, three, typed, engine,
                                        ranks_per_task=per_task)
    assert len(together) == len(SETS)
    for params, got in zip(typed, together, strict=True):
        alone = run_partitioned(analysis, three, params, engine, ranks_per_task=per_task)
        assert_same_result(got, alone)
        assert_same_result(got, analysis.run(three, params))  # and the whole run
    # the shapes were there: by name, gemm's 18 calls per shape have their two-mode split
    modes = together[1].extra["modes"]
    assert modes.filter(pl.col("name") == "gemm")["shape"].n_unique() == 2


def test_the_shapes_are_read_once_per_batch(three: traceatlas.Trace,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from traceatlas.analysis import kernels

    calls: list[int] = []
    real = kernel_shapes.with_shapes

    def counting(*args: object) -> object:
        calls.append(1)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(kernels, "with_shapes", counting)
    analysis = registry.get_analysis("kernels")
    typed = [registry.parse_params(analysis, p) for p in SETS[:2]]
    run_partitioned_together(analysis, three, typed, LocalEngine(1), ranks_per_task=1)
    assert len(calls) == 3  # 3 batches of one rank, both sets from one read each
    calls.clear()
    for params in typed:
        run_partitioned(analysis, three, params, LocalEngine(1), ranks_per_task=1)
    assert len(calls) == 6  # the control: one read per set and batch


def test_the_context_caches_each_set_as_result_would(three: traceatlas.Trace) -> None:
    ctx = Context(three, engine=LocalEngine(1))
    ctx.results_together("kernels", [{}, {"by": "name", "top": 8}])
    assert ctx.cached("kernels") and ctx.cached("kernels", by="name", top=8)
    plain = Context(three, engine=LocalEngine(1))
    assert_same_result(ctx.result("kernels"), plain.result("kernels"))  # type: ignore[arg-type]
    assert_same_result(ctx.result("kernels", by="name", top=8),  # type: ignore[arg-type]
          plain.result("kernels", by="name", top=8))  # type: ignore[arg-type]


def test_a_trace_without_kernels_caches_nothing(tmp_path: Path) -> None:
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    b.cpu_op("aten::add", 0, 1_000)
    trace = traceatlas.open(traceatlas.ingest(b.write(tmp_path / "rank-0.json"),
                                              tmp_path / "s"))
    ctx = Context(trace, engine=LocalEngine(1))
    ctx.results_together("kernels", [{}, {"by": "name", "top": 8}])
    assert not ctx.cached("kernels")
    assert ctx.result("kernels") is None  # the usual note, from the call itself
    assert any(n.startswith("skipped: kernels") for n in ctx.notes)
