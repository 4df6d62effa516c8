"""The baseline summary built in rank batches (``compare.summary_partial`` mapped,
``compare.summary_build`` merging) gives byte-identical summaries whatever the batches:
the whole run as one batch, one rank a batch, two ranks a batch, and the frozen former
builder (``traceatlas.testing.summary_reference``), on Hypothesis-built runs whose ties
matter (raw names of one key with equal counts, launchers with equal device time, ranks
without step markers); a hand-built run where the merge must add up what the batches
saw (raw-name order, the launching op) with the values computed by hand; a 2-worker Dask
LocalCluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import traceatlas
from traceatlas.compare.summary import MIN_SHARE, TOP
from traceatlas.compare.summary_build import build
from traceatlas.testing import TraceBuilder, write_multi_rank
from traceatlas.testing import summary_reference as reference

pytestmark = pytest.mark.filterwarnings("ignore::traceatlas.DataQualityWarning")

BASE = 1_700_000_000_000_000_000
STEP = 1_000_000
ANNS = ("fwd", "fwd_1", "fwd_2", "bwd")  # fwd_1 / fwd_2: one key (fwd_#)
OPS = ("aten::mm", "aten::addmm")
G128 = "void gemm<float, 128>(float*)"
G64 = "void gemm<float, 64>(float*)"  # G128 and G64: one key, gemm<float, #>
KERNELS = (G128, G64, "void relu_kernel<float>(float*)")


@st.composite
def runs(draw: st.DrawFn) -> list[TraceBuilder]:
    """2-4 ranks x 1-2 iterations, step markers on some ranks, on none, or on all:
    annotations and ops drawn from names sharing keys, kernels of few durations (equal
    device times per launcher: the launched_by ties) on two streams, launches in and out
    of ops."""
    n_ranks = draw(st.integers(2, 4))
    steps = draw(st.integers(1, 2))
    marked = draw(st.sampled_from(("all", "none", "some")))
    builders = []
    for rank in range(n_ranks):
        b = TraceBuilder(rank, n_ranks, base_time_ns=BASE, profiler_markers=False)
        with_steps = marked == "all" or (marked == "some" and draw(st.booleans()))
        for n in range(steps):
            s = (n + 1) * STEP
            if with_steps:
                b.step(n, s, s + STEP - 50_000)
            if draw(st.booleans()):
                b.annotation(draw(st.sampled_from(ANNS)), s + 1_000, s + 600_000)
            t = s + 10_000
            for _ in range(draw(st.integers(1, 3))):
                dur = draw(st.sampled_from((40_000, 80_000)))
                b.cpu_op(draw(st.sampled_from(OPS)), t, t + dur)
                for j in range(draw(st.integers(0, 2))):
                    at = t + 2_000 + 10_000 * j
                    gpu = s + draw(st.sampled_from((0, 100_000, 400_000)))
                    b.launch(draw(st.sampled_from(KERNELS)), at, 3_000, gpu,
                             draw(st.sampled_from((10_000, 20_000))),
                             stream=draw(st.sampled_from((7, 8))))
                t += dur + 5_000
            if draw(st.booleans()):
                b.launch(KERNELS[2], s + 700_000, 3_000, s + 800_000, 10_000)
        builders.append(b)
    return builders


def _encoded(summary: dict[str, Any]) -> bytes:
    return msgspec.json.encode(summary)  # what write_summary writes (less the newline)


def _store(root: Path, builders: list[TraceBuilder]) -> traceatlas.Trace:
    return traceatlas.open(traceatlas.ingest(write_multi_rank(root / "run", builders),
                                             root / "store"))


def _all_equal(trace: traceatlas.Trace) -> dict[str, Any]:
    """The summary, asserted identical (bytes) over every batching and the oracle."""
    n = len(trace.ranks)
    whole = build(trace, min_share=MIN_SHARE, top=TOP, ranks_per_task=n)
    expected = _encoded(reference.build(trace, min_share=MIN_SHARE, top=TOP))
    assert _encoded(whole) == expected
    for size in (1, 2):
        assert _encoded(build(trace, min_share=MIN_SHARE, top=TOP,
                              ranks_per_task=size)) == expected
    assert _encoded(build(trace, min_share=MIN_SHARE, top=TOP)) == expected  # default
    return whole


@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(builders=runs())
def test_batches_give_the_whole_run_summary(tmp_path_factory: pytest.TempPathFactory,
                                            builders: list[TraceBuilder]) -> None:
    _all_equal(_store(tmp_path_factory.mktemp("run"), builders))


def _hand_run(world: int = 2) -> list[TraceBuilder]:
    """Rank 0: 2 x G128 (10 us each) launched in aten::mm; rank 1: 3 x G64 (10 us
    each) in aten::addmm; one step each; no annotation."""
    out = []
    for rank, (op, kernel, n) in enumerate((("aten::mm", G128, 2), ("aten::addmm", G64, 3))):
        b = TraceBuilder(rank, world, base_time_ns=BASE, profiler_markers=False)
        b.step(0, STEP, 2 * STEP)
        b.cpu_op(op, STEP + 10_000, STEP + 200_000)
        for j in range(n):
            b.launch(kernel, STEP + 20_000 + 30_000 * j, 3_000,
                     STEP + 300_000 + 100_000 * j, 10_000)
        out.append(b)
    return out


def test_merge_adds_up_what_each_batch_saw(tmp_path: Path) -> None:
    """One rank a batch: rank 0 alone would list G128 first and say aten::mm launched
    the kernel; over both ranks G64 has more rows (3 > 2) and aten::addmm launched 30 of
    the 50 us (0.6)."""
    summary = _all_equal(_store(tmp_path, _hand_run()))
    assert summary["iterations"] == {"source": "steps", "labels": [0]}
    (gemm,) = [e for e in summary["entities"]["kernel"] if e["key"] == "gemm<float, #>"]
    assert gemm["names"] == [G64, G128]
    assert gemm["n_names"] == 2
    assert gemm["ns"] == [[20_000], [30_000]]
    assert gemm["count"] == [[2], [3]]
    assert gemm["launched_by"] == ["aten::addmm", 0.6, None, 0.0]
    assert ("device time launched inside an op: 100.0%, inside an annotation: 0.0% "
            "(summed durations; the rest is unattributed in op_device / "
            "annotation_device)") in summary["notes"]


def test_rank_without_steps_in_a_batch_of_its_own(tmp_path: Path) -> None:
    """Rank 1 has no step marker: its batch has no window; the summary keeps -1 for it
    and the note names it, as for the whole run."""
    builders = _hand_run()
    bare = TraceBuilder(1, 2, base_time_ns=BASE, profiler_markers=False)
    bare.cpu_op("aten::addmm", STEP + 10_000, STEP + 200_000)
    bare.launch(G64, STEP + 20_000, 3_000, STEP + 300_000, 10_000)
    summary = _all_equal(_store(tmp_path, [builders[0], bare]))
    assert summary["entities"]["step"][0]["ns"] == [[STEP], [-1]]
    assert "ranks without every iteration (-1 where absent): 1" in summary["notes"]


@pytest.mark.dask
def test_dask_two_workers_give_the_same_summary(tmp_path: Path) -> None:
    """A LocalCluster of 2 worker processes, one rank a batch: the same bytes."""
    pytest.importorskip("distributed")
    from traceatlas.engine.dask import DaskEngine

    builders = _hand_run(3)
    third = TraceBuilder(2, 3, base_time_ns=BASE, profiler_markers=False)
    third.step(0, STEP, 2 * STEP)
    third.annotation("fwd", STEP + 5_000, STEP + 250_000)
    third.cpu_op("aten::mm", STEP + 10_000, STEP + 200_000)
    third.launch(G128, STEP + 20_000, 3_000, STEP + 300_000, 20_000)
    trace = _store(tmp_path, [*builders, third])
    expected = _encoded(reference.build(trace, min_share=MIN_SHARE, top=TOP))
    engine = DaskEngine(n_workers=2)
    try:
        got = build(trace, min_share=MIN_SHARE, top=TOP, engine=engine, ranks_per_task=1)
    finally:
        engine.close()
    assert _encoded(got) == expected
