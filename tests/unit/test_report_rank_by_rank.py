"""The report's and the advisor's scans read one rank at a time (bounded memory) and give
what the former all-ranks computations gave. Each oracle below is a frozen copy of the
code it replaced (every rank's rows in one frame), run on built multi-rank traces: 4
Kineto ranks with steps, short kernels, copies on the compute stream and a slow rank,
and a 5-rank synthetic MPI trace."""

from __future__ import annotations

import warnings
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import traceatlas
from traceatlas.advisor import (
    Context,
    critical_path,
    gpu_bound,
    memcpy_stream,
    per_rank,
    short_kernels,
    stepwise,
)
from traceatlas.advisor.base import per_rank_sum
from traceatlas.analysis.launch import calls
from traceatlas.engine import LocalEngine
from traceatlas.ops.unions import union_ns
from traceatlas.report import overview
from traceatlas.testing import Collective, TraceBuilder, write_multi_rank
from traceatlas.testing.mpi import write_mpi_trace

BASE = 1_700_000_000_000_000_000
AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
GROUP = Collective("allreduce", 1024, 1024, "Float", (0, 1, 2, 3))


@pytest.fixture(scope="module")
def kineto(tmp_path_factory: pytest.TempPathFactory) -> traceatlas.Trace:
    """4 ranks x 5 steps of 400 us: a gemm (rank 2 slower), 14 relu kernels of 2 us
    launched by 5 us calls (short), a copy on the compute stream, an all-reduce."""
    root = tmp_path_factory.mktemp("kineto")
    builders = []
    for rank in range(4):
        b = TraceBuilder(rank, 4, base_time_ns=BASE)
        for i in range(5):
            t = 50_000 + i * 400_000
            b.step(i, t - 40_000, t + 360_000)
            compute = 150_000 if rank == 2 else 100_000 + 5_000 * (i % 2)
            b.launch("void gemm_fwd()", t - 39_000, 2_000, t, compute)
            for k in range(14):
                b.launch("void relu_kernel()", t - 35_000 + k * 2_000, 1_500 + 100 * k,
                         t + compute + k * 3_000, 1_000 + 50 * rank)
            b.launch("Memcpy HtoD (Pageable -> Device)", t - 5_000, 500,
                     t + compute + 45_000, 20_000 + 1_000 * rank, kind="memcpy",
                     nbytes=1 << 20)
            b.launch(AR, t - 3_000, 500, t + compute + 70_000, 200_000 - compute,
                     stream=20, collective=GROUP)
        builders.append(b)
    paths = write_multi_rank(root / "in", builders)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return traceatlas.open(traceatlas.ingest(paths, root / "store",
                                                 engine=LocalEngine(1)))


@pytest.fixture(scope="module")
def mpi(tmp_path_factory: pytest.TempPathFactory) -> traceatlas.Trace:
    root = tmp_path_factory.mktemp("mpi")
    made = write_mpi_trace(root / "mpi.prv", ranks=5, iterations=3, imbalance=0.4,
                           heavy_ranks=(3,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return traceatlas.Trace(traceatlas.ingest(made.path, root / "store",
                                                  engine=LocalEngine(1)))


# -- frozen copies of the former all-ranks computations (the oracles) ----------------------

def _old_short_totals(launch: pl.DataFrame) -> pl.DataFrame:
    typical = pl.col("cpu_launch_ns").median().over("rank")
    table = calls(launch.lazy()).collect().with_columns(
        short=pl.col("gpu_ns") < pl.col("cpu_launch_ns"),
        uncovered=(pl.min_horizontal("cpu_launch_ns", typical) - pl.col("gpu_ns")).clip(0))
    return table.group_by("rank").agg(
        launches=pl.len(), short=pl.col("short").sum(),
        cost=pl.col("uncovered").filter(pl.col("short")).sum().round(),
        gpu=pl.col("gpu_ns").filter(pl.col("short")).sum(),
        cpu=pl.col("cpu_launch_ns").filter(pl.col("short")).sum())


def _old_busy_per_window(ctx: Context) -> pl.DataFrame:
    windows = gpu_bound._windows(ctx).filter(pl.col("dur_ns") > 0)
    busy = union_ns(gpu_bound._clipped(ctx.trace, windows), ["rank", "step"], "busy_ns")
    return (windows.lazy().join(busy, on=["rank", "step"], how="inner")
            .select("rank", "step", "dur_ns", "busy_ns").collect())


def _old_memcpy_cost(ctx: Context, streams: pl.DataFrame) -> dict[int, int]:
    cat = pl.col("category").cast(pl.String)
    rows = ctx.trace.intervals.filter(cat.is_in(("kernel", "comm_kernel", "memcpy",
                                                 "memset"))).select(
        "rank", pl.col("device").fill_null(-1).cast(pl.Int64),
        pl.col("stream").fill_null(-1).cast(pl.Int64), cat.alias("category"), "start_ns",
        "end_ns")
    kernels = rows.filter(pl.col("category").is_in(("kernel", "comm_kernel")))
    memory = rows.filter(pl.col("category").is_in(("memcpy", "memset"))).join(
        streams.lazy().with_columns(pl.col("device").cast(pl.Int64),
                                    pl.col("stream").cast(pl.Int64)),
        on=["rank", "device", "stream"], how="semi")
    keys = ["rank", "device"]
    both = union_ns(pl.concat([kernels, memory]), keys, "mk")
    only_k = union_ns(kernels, keys, "k")
    frame = (both.join(only_k, on=keys, how="left")
             .with_columns(exposed=pl.col("mk") - pl.col("k").fill_null(0)).collect())
    return per_rank_sum(frame, "exposed")


def _old_rank_times(trace: traceatlas.Trace, act: overview.Activity,
                    window: tuple[int, int]) -> list[overview.RankTimes]:
    total = window[1] - window[0]
    ranks = pl.DataFrame({"rank": sorted(trace.ranks)}, schema={"rank": pl.Int64}).lazy()
    if act.kind == "device":
        compute = act.rows.filter(pl.col("category") == "kernel")
        any_kernel = act.rows.filter(pl.col("category").is_in(("kernel", "comm_kernel")))
        parts = [union_ns(compute, ["rank"], "compute"),
                 union_ns(any_kernel, ["rank"], "kernels"),
                 union_ns(act.rows, ["rank"], "busy")]
    else:
        parts = [union_ns(act.rows, ["rank"], "busy")]
    frame = ranks
    for part in parts:
        frame = frame.join(part.with_columns(pl.col("rank").cast(pl.Int64)), on="rank",
                           how="left")
    out = []
    for row in frame.fill_null(0).sort("rank").collect().iter_rows(named=True):
        busy = int(row["busy"])
        if act.kind == "device":
            useful, kernels = int(row["compute"]), int(row["kernels"])
            out.append(overview.RankTimes(row["rank"], useful, kernels - useful,
                                          max(0, total - busy), busy - kernels))
        elif act.kind == "mpi":
            out.append(overview.RankTimes(row["rank"], max(0, total - busy), busy, 0))
        else:
            out.append(overview.RankTimes(row["rank"], busy, 0, max(0, total - busy)))
    return out


def _sorted(frame: pl.DataFrame, *keys: str) -> pl.DataFrame:
    return frame.sort(*keys).select(sorted(frame.columns))


# -- the tests ------------------------------------------------------------------------------

def test_short_kernels_per_rank_totals_equal_all_ranks(kineto: traceatlas.Trace) -> None:
    ctx = Context(kineto)
    launch = ctx.result("launch")
    assert launch is not None and launch.table["rank"].n_unique() == 4
    want = _old_short_totals(launch.table)
    answers = per_rank.map_ranks(ctx, short_kernels.RANK_TOTALS, kineto.ranks)
    got = pl.concat([t for t, _ in answers])
    assert_frame_equal(_sorted(got, "rank"), _sorted(want, "rank"))
    on_engine = Context(kineto, engine=LocalEngine(1))  # the batch path (RankCall)
    again = per_rank.map_ranks(on_engine, short_kernels.RANK_TOTALS, kineto.ranks)
    assert_frame_equal(pl.concat([t for t, _ in again]), got)
    assert [g for _, g in answers] == [0, 0, 0, 0]  # no CUDA graphs
    # 14 short launches per step and rank (device 1.0-1.15 us < call 1.5-2.8 us) x 5 steps
    assert set(want["short"].to_list()) == {70}


def test_short_kernels_finding_names_the_costliest_rank(kineto: traceatlas.Trace) -> None:
    [found] = short_kernels.check(Context(kineto))
    # uncovered per short launch = min(call, median call) - device: rank 0's kernels are
    # the shortest (1.0 us), so its cost is the largest.
    totals = _old_short_totals(Context(kineto).result("launch").table)  # type: ignore[union-attr]
    best = totals.sort("cost", "rank", descending=[True, False]).row(0, named=True)
    assert found.ranks == [0, 1, 2, 3] and f"rank {best['rank']} " in found.statement
    assert found.cost_ns == int(best["cost"]) and best["rank"] == 0


def test_gpu_bound_busy_per_window_equals_all_ranks(kineto: traceatlas.Trace,
                                                    mpi: traceatlas.Trace) -> None:
    for trace in (kineto, mpi):
        ctx = Context(trace)
        want = _old_busy_per_window(ctx)
        got = gpu_bound._busy_per_window(ctx)
        assert_frame_equal(_sorted(got, "rank", "step"), _sorted(want, "rank", "step"))
        for engine in (LocalEngine(1), LocalEngine(2)):  # batches inline, in a pool
            mapped = gpu_bound._busy_per_window(Context(trace, engine=engine))
            assert_frame_equal(_sorted(mapped, "rank", "step"), _sorted(got, "rank", "step"))
    assert Context(kineto).result("steps") is not None
    assert gpu_bound._busy_per_window(Context(kineto)).height == 20  # 4 ranks x 5 steps


def test_memcpy_stream_cost_per_rank_equals_all_ranks(kineto: traceatlas.Trace) -> None:
    ctx = Context(kineto)
    by_stream = ctx.result("breakdown", by="stream")
    assert by_stream is not None
    streams = by_stream.table.filter((pl.col("compute_ns") > 0) & (pl.col("memory_ns") > 0))
    want = {r: v for r, v in _old_memcpy_cost(ctx, streams.select(
        "rank", "device", "stream")).items()}
    assert max(want.values()) > 0
    [found] = memcpy_stream.check(ctx)
    rank = min(want, key=lambda r: (-want[r], r))
    assert (found.ranks, found.cost_ns) == ([rank], want[rank])
    assert memcpy_stream.check(Context(kineto, engine=LocalEngine(1))) == [found]
    # copies [t + compute + 45k, + 20k + 1k x rank) with the relu kernels ending at
    # t + compute + 40.x k and the all-reduce from t + compute + 70k: all exposed
    assert want == {r: 5 * (20_000 + 1_000 * r) for r in range(4)}


def test_rank_unions_equal_union_per_step(kineto: traceatlas.Trace,
                                          mpi: traceatlas.Trace) -> None:
    ctx = Context(kineto)
    steps = stepwise.windows(ctx)
    assert steps is not None
    keep = pl.col("category").cast(pl.String) == "kernel"
    rows = ctx.trace.intervals.filter(keep).select("rank", "start_ns", "end_ns").collect()
    want = stepwise.union_per_step(rows, steps, name="compute")
    got = stepwise.rank_unions(ctx, kineto.ranks, keep, steps, "compute")
    assert_frame_equal(_sorted(got, "rank", "step"), _sorted(want, "rank", "step"))
    for engine in (LocalEngine(1), LocalEngine(2)):  # batches inline
        mapped = stepwise.rank_unions(Context(kineto, engine=engine), kineto.ranks, keep,
                                      steps, "compute")
        assert_frame_equal(mapped, got)
    lo, hi = overview.span(mpi)  # 5 ranks: 2 batches in a pool, the Expr pickled
    halves = pl.DataFrame({"rank": [r for r in mpi.ranks for _ in (0, 1)],
                           "step": [0, 1] * len(mpi.ranks),
                           "w_start": [lo, (lo + hi) // 2] * len(mpi.ranks),
                           "w_end": [(lo + hi) // 2, hi] * len(mpi.ranks)}).sort("w_start")
    is_mpi = pl.col("category").cast(pl.String) == "mpi"
    rows = mpi.intervals.filter(is_mpi).select("rank", "start_ns", "end_ns").collect()
    want = stepwise.union_per_step(rows, halves, name="busy")
    pooled = stepwise.rank_unions(Context(mpi, engine=LocalEngine(2)), mpi.ranks, is_mpi,
                                  halves, "busy")
    assert_frame_equal(_sorted(pooled, "rank", "step"), _sorted(want, "rank", "step"))
    assert want.height == 10
    none = stepwise.rank_unions(ctx, [1], pl.col("name") == "absent", steps, "compute")
    assert none.height == 0 and "compute" in none.columns


def test_rank_times_one_rank_at_a_time_equal_all_ranks(kineto: traceatlas.Trace,
                                                       mpi: traceatlas.Trace) -> None:
    for trace, kind in ((kineto, "device"), (mpi, "mpi")):
        act = overview.activity(trace)
        assert act.kind == kind
        window = overview.span(trace)
        assert overview.rank_times(trace, act, window) == _old_rank_times(trace, act, window)
    host = overview.Activity("host", "host", mpi.intervals.select(
        "rank", "start_ns", "end_ns", pl.col("category").cast(pl.String)))
    window = overview.span(mpi)
    assert overview.rank_times(mpi, host, window) == _old_rank_times(mpi, host, window)


def test_rank_times_of_a_rank_selection(kineto: traceatlas.Trace) -> None:
    view = kineto.select(ranks=[1, 3])
    act = overview.activity(view)
    window = overview.span(view)
    got = overview.rank_times(view, act, window)
    assert [t.rank for t in got] == [1, 3]
    assert got == _old_rank_times(view, act, window)



def test_timeline_on_workers_equals_here(kineto: traceatlas.Trace,
                                         mpi: traceatlas.Trace) -> None:
    for trace in (kineto, mpi, kineto.select(ranks=[0, 2, 3])):
        act = overview.activity(trace)
        window = overview.span(trace)
        here = overview.timeline(trace, act, window, bins=40)
        assert overview.timeline(trace, act, window, bins=40, engine=LocalEngine(1)) == here
        assert len(here.rows) == len(trace.ranks)
    act = overview.activity(mpi)  # 2 batches (4 + 1 ranks) in a process pool: the
    window = overview.span(mpi)   # task and the result travel
    assert (overview.timeline(mpi, act, window, engine=LocalEngine(2))
            == overview.timeline(mpi, act, window))
    # rank 2's gemm [t, t + 150k) from t = 50k: the first bin starts with it busy
    first = overview.timeline(kineto, act, window, bins=40)
    assert first.values[2][0] > 0 and first.start_ns == window[0]


def test_graph_launches_counted_per_rank(tmp_path: Path) -> None:
    """critical_path's graph launch count, per rank, equals the whole ``launch`` result's
    ``graphs`` rows on those ranks: rank r replays r + 1 graphs (3 ranks)."""
    builders = []
    for rank in range(3):
        b = TraceBuilder(rank, 3, base_time_ns=BASE)
        for g in range(rank + 1):
            t = 10_000 + g * 100_000
            b.graph_launch([("void a()", t + 5_000, 10_000), ("void b()", t + 20_000, 5_000)],
                           t, 2_000)
        b.launch("void c()", 400_000, 1_000, 410_000, 5_000)
        builders.append(b)
    paths = write_multi_rank(tmp_path / "in", builders)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = traceatlas.open(traceatlas.ingest(paths, tmp_path / "store",
                                                  engine=LocalEngine(1)))
    whole = Context(trace).result("launch")
    assert whole is not None
    graphs = whole.extra["graphs"]
    for ranks in ([0, 1, 2], [2], [0, 2]):
        want = graphs.filter(pl.col("rank").is_in(ranks)).height
        assert critical_path._graph_launches(Context(trace), ranks) == want
        assert want == sum(r + 1 for r in ranks)
    ctx = Context(trace)
    assert short_kernels.check(ctx) == []  # too few launches; it counts the graphs
    assert vars(ctx)[short_kernels.GRAPHS_KEY] == {0: 1, 1: 2, 2: 3}
    assert critical_path._graph_launches(ctx, [1, 2]) == 5


def test_step_view_rows_equal_the_exact_step_condition(tmp_path: Path) -> None:
    """``select(step=N)`` adds a coarse bound Parquet statistics can prune with (the
    union of the ranks' spans, or the ``step`` column): the rows are those of the exact
    per-rank condition alone (the oracle below), zero-length intervals at a span start
    and device work running past the span included."""
    from traceatlas.ops import select as sel_ops

    builders = []
    for rank in range(3):
        b = TraceBuilder(rank, 3, base_time_ns=BASE)
        for i in range(3):
            t = 100_000 + i * 300_000 + rank * 7_000
            b.step(i, t, t + 200_000)
            b.cpu_op("aten::zero", t, t)  # zero-length, at the span start
            b.launch("void late()", t + 190_000, 5_000, t + 260_000, 30_000)  # past it
            b.cpu_op("aten::between", t + 210_000, t + 220_000)  # between two steps
        builders.append(b)
    paths = write_multi_rank(tmp_path / "in", builders)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = traceatlas.open(traceatlas.ingest(paths, tmp_path / "store",
                                                  engine=LocalEngine(1)))
    for step in range(3):
        view = trace.select(step=step)
        sel = view.selections[-1]
        lo, hi = pl.col("start_ns"), pl.col("end_ns")
        exact = sel_ops._step_span(sel, lo, hi) | (pl.col("step") == step)
        want = trace.intervals.filter(exact).collect()
        got = view.intervals.collect()
        assert_frame_equal(got, want)
        names = set(got["name"].cast(pl.String).to_list())
        assert {"aten::zero", "void late()"} <= names
        assert got.filter(pl.col("name").cast(pl.String) == "aten::zero").height == 3


def test_report_span_is_the_advisor_window(kineto: traceatlas.Trace,
                                           mpi: traceatlas.Trace) -> None:
    """The report takes its span from the advisor context's window (one scan shared):
    the same numbers as ``overview.span``."""
    for trace in (kineto, mpi, kineto.select(ranks=[3])):
        assert Context(trace).window == overview.span(trace)
