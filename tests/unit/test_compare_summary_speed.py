"""The single-scan summary builder (``compare.summary_build`` with ``summary_frame``,
``summary_kinds`` and the numpy ``launchers``) against the former builder, kept frozen as
``traceatlas.testing.summary_reference``: identical summaries on Hypothesis-built runs
(steps or none, nested annotations and ops, launches in and out of ops, two threads,
template-named kernels); the numpy unions against ``ops.unions.union_ns`` and a hand
count; the launch context's fallback path; the in-memory view's selections."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import traceatlas
from traceatlas.compare import launchers, summary_kinds
from traceatlas.compare.summary import MIN_SHARE, TOP
from traceatlas.compare.summary_build import build
from traceatlas.compare.summary_frame import COLUMNS, loaded
from traceatlas.compare.summary_kinds import codes, positions, union_by_group
from traceatlas.ops.unions import union_ns
from traceatlas.testing import TraceBuilder, write_multi_rank
from traceatlas.testing import summary_reference as reference

BASE = 1_700_000_000_000_000_000
STEP = 1_000_000
ANNS = ("fwd", "mlp", "attn", "bwd")
OPS = ("aten::linear", "aten::addmm", "aten::mm", "aten::relu")
KERNELS = ("void gemm<float, 128>(float*)", "void gemm<float, 64>(float*)",
           "void relu_kernel<float>(float*)", "ncclKernel_AllReduce_RING_LL_Sum_float")
COPY = "Memcpy HtoD (Pageable -> Device)"


@st.composite
def runs(draw: st.DrawFn) -> list[TraceBuilder]:
    """1-2 ranks x 1-3 iterations (ProfilerStep markers or none): nested annotations,
    top-level ops with an optional nested op, launches inside ops (kernels or a copy, on
    two streams, overlapping), a launch in no op, an op with a launch on a second thread."""
    n_ranks = draw(st.integers(1, 2))
    steps = draw(st.integers(1, 3))
    with_steps = draw(st.booleans())
    builders = []
    for rank in range(n_ranks):
        b = TraceBuilder(rank, n_ranks, base_time_ns=BASE, profiler_markers=False)
        for n in range(steps):
            s = (n + 1) * STEP
            if with_steps:
                b.step(n, s, s + STEP - 50_000)
            for j in range(draw(st.integers(0, 2))):
                b.annotation(draw(st.sampled_from(ANNS)), s + 1_000 * (j + 1),
                             s + 600_000 - 1_000 * j)
            t = s + 10_000
            for _ in range(draw(st.integers(1, 3))):
                dur = draw(st.integers(20_000, 120_000))
                b.cpu_op(draw(st.sampled_from(OPS)), t, t + dur)
                if draw(st.booleans()):
                    b.cpu_op(draw(st.sampled_from(OPS)), t + 1_000, t + dur - 1_000)
                for _ in range(draw(st.integers(0, 3))):
                    at = t + 2_000 + draw(st.integers(0, dur - 10_000))
                    gpu = s + draw(st.integers(0, 800_000))
                    copy = draw(st.integers(0, 5)) == 0
                    b.launch(COPY if copy else draw(st.sampled_from(KERNELS)), at, 3_000, gpu,
                             draw(st.integers(0, 60_000)), stream=draw(st.sampled_from((7, 8))),
                             kind="memcpy" if copy else "kernel", nbytes=1024 if copy else None)
                t += dur + draw(st.integers(0, 20_000))
            if draw(st.booleans()):
                b.launch(KERNELS[2], s + 700_000, 3_000, s + 800_000, 10_000)
            if draw(st.booleans()):
                b.cpu_op("aten::mm", s + 650_000, s + 750_000, tid=4242)
                b.launch(KERNELS[0], s + 660_000, 3_000, s + 850_000, 20_000, tid=4242)
        builders.append(b)
    return builders


def _both(root: Path, builders: list[TraceBuilder]) -> tuple[dict[str, Any], dict[str, Any]]:
    store = traceatlas.ingest(write_multi_rank(root / "run", builders), root / "store")
    trace = traceatlas.open(store)
    return (build(trace, min_share=MIN_SHARE, top=TOP),
            reference.build(trace, min_share=MIN_SHARE, top=TOP))


@pytest.mark.filterwarnings("ignore::traceatlas.DataQualityWarning")
@settings(max_examples=4, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(builders=runs())
def test_same_summary_as_the_former_builder(tmp_path_factory: pytest.TempPathFactory,
                                            builders: list[TraceBuilder]) -> None:
    new, old = _both(tmp_path_factory.mktemp("run"), builders)
    assert new == old


def test_same_summary_on_a_hand_built_run_with_every_kind(tmp_path: Path) -> None:
    """Steps, nested annotations, an inner op launching, a launch in no op: every kind
    has entities, so the comparison above is not vacuous."""
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    for n in range(3):
        s = (n + 1) * STEP
        b.step(n, s, s + 900_000)
        b.annotation("fwd", s + 1_000, s + 500_000)
        b.annotation("mlp", s + 2_000, s + 400_000)
        b.cpu_op("aten::linear", s + 10_000, s + 300_000)
        b.cpu_op("aten::addmm", s + 20_000, s + 200_000)
        b.launch(KERNELS[0], s + 30_000, 5_000, s + 100_000, 50_000)
        b.launch(KERNELS[1], s + 40_000, 5_000, s + 120_000, 40_000, stream=8)
        b.launch(KERNELS[2], s + 450_000, 5_000, s + 600_000, 30_000)
    new, old = _both(tmp_path, [b])
    assert new == old
    for kind in ("annotation", "op", "kernel", "op_device", "annotation_device", "category"):
        assert new["entities"][kind], kind
    gemm = [e for e in new["entities"]["kernel"] if e["key"] == "gemm<float, #>"]
    # both gemm launches (<float, 128>, <float, 64>) share one key: [100k, 150k) u [120k, 160k)
    assert gemm and gemm[0]["ns"] == [[60_000] * 3] and gemm[0]["n_names"] == 2


@st.composite
def grouped(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = draw(st.integers(1, 60))
    g = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    s = draw(st.lists(st.integers(0, 200), min_size=n, max_size=n))
    # end >= start: with end < start, union_ns itself depends on the order of equal starts
    d = draw(st.lists(st.integers(0, 50), min_size=n, max_size=n))
    start = np.asarray(s, dtype=np.int64) + BASE
    return (np.asarray(g, dtype=np.int64), start, start + np.asarray(d, dtype=np.int64))


def _oracle(g: np.ndarray, s: np.ndarray, e: np.ndarray, size: int) -> tuple[list[int],
                                                                           list[int]]:
    frame = pl.DataFrame({"g": g, "start_ns": s, "end_ns": e})
    ns = dict(union_ns(frame.lazy(), ["g"], "ns").collect().iter_rows())
    counts = dict(frame.group_by("g").len().iter_rows())
    return ([int(ns.get(i, 0)) for i in range(size)],
            [int(counts.get(i, 0)) for i in range(size)])


@settings(max_examples=150, deadline=None)
@given(data=grouped())
def test_union_by_group_matches_union_ns(data: tuple[np.ndarray, np.ndarray, np.ndarray],
                                         ) -> None:
    g, s, e = data
    ns, count = union_by_group(g, s, e, 6)
    assert (ns.tolist(), count.tolist()) == _oracle(g, s, e, 6)


def test_union_by_group_by_hand_and_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    # group 0: [0,10) [5,12) [12,20) -> one segment of 20 (touching merges); group 2:
    # [3,4) and [100,100) -> 1; group 1: nothing
    g = np.array([0, 2, 0, 0, 2], dtype=np.int64)
    s = np.array([5, 3, 0, 12, 100], dtype=np.int64)
    e = np.array([12, 4, 10, 20, 100], dtype=np.int64)
    expected = ([20, 0, 1], [3, 0, 2])
    ns, count = union_by_group(g, s, e, 3)
    assert (ns.tolist(), count.tolist()) == expected
    monkeypatch.setattr(summary_kinds, "SAFE", 0)  # force the Polars path
    ns, count = union_by_group(g, s, e, 3)
    assert (ns.tolist(), count.tolist()) == expected


def test_positions_and_codes() -> None:
    assert positions(np.array([5, 7, 9, 2]), [2, 5, 9]).tolist() == [1, -1, 2, 0]
    assert positions(np.array([1]), []).tolist() == [-1]
    for series in (pl.Series(["b", "a", "b", "c"]),
                   pl.Series(["b", "a", "b", "c"]).cast(pl.Categorical)):
        code, names = codes(series)
        assert [names[c] for c in code] == ["b", "a", "b", "c"]
        assert sorted(names) == ["a", "b", "c"]


def _two_thread_run() -> TraceBuilder:
    b = TraceBuilder(0, 1, base_time_ns=BASE, profiler_markers=False)
    for n in range(2):
        s = (n + 1) * STEP
        b.step(n, s, s + 900_000)
        b.annotation("fwd", s + 1_000, s + 500_000)
        b.cpu_op("aten::linear", s + 10_000, s + 300_000)
        b.cpu_op("aten::addmm", s + 20_000, s + 200_000)
        b.launch(KERNELS[0], s + 30_000, 5_000, s + 100_000, 50_000)
        b.launch(KERNELS[2], s + 450_000, 5_000, s + 600_000, 30_000)
        b.cpu_op("aten::mm", s + 600_000, s + 700_000, tid=4242)
        b.launch(KERNELS[0], s + 610_000, 5_000, s + 750_000, 20_000, tid=4242)
    return b


def test_launch_context_fallback_and_by_hand(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    store = traceatlas.ingest(write_multi_rank(tmp_path / "run", [_two_thread_run()]),
                              tmp_path / "store")
    view = loaded(traceatlas.open(store))
    fast = launchers.launch_context(view).sort("rank", "correlation")
    # by hand: per step, gemm in addmm (inside fwd), relu in no op (inside fwd), gemm
    # in aten::mm on the second thread (no annotation)
    got = [(op, list(ann)) for op, ann in fast.select("op", "annotations").iter_rows()]
    assert got == [("aten::addmm", ["fwd"]), (None, ["fwd"]), ("aten::mm", [])] * 2
    assert fast.equals(reference.launch_context(view).sort("rank", "correlation"))
    monkeypatch.setattr(launchers, "_enclosing", lambda calls, host: None)
    slow = launchers.launch_context(view).sort("rank", "correlation")
    assert slow.equals(fast)


def test_loaded_view_reads_the_store_for_a_later_selection(tmp_path: Path) -> None:
    store = traceatlas.ingest(write_multi_rank(tmp_path / "run", [_two_thread_run()]),
                              tmp_path / "store")
    trace = traceatlas.open(store)
    view = loaded(trace)
    assert view.intervals.collect().equals(trace.intervals.select(COLUMNS).collect())
    sub = view.select(categories="kernel").intervals.collect()
    assert "args" in sub.columns  # not the loaded frame: the store, all columns
    assert sub.equals(trace.select(categories="kernel").intervals.collect())
    assert view.tracks.collect().equals(trace.tracks.collect())
