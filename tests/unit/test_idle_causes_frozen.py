"""``idle``'s causes table equals the frozen pre-speed-work copy
(``traceatlas.testing.frozen_idle_causes``, the oracle) on random built traces, and the
painting with its unions cut to the gap-overlapping segments equals the frozen painting."""

from __future__ import annotations

import importlib.util
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

import traceatlas
from traceatlas.analysis import idle, registry
from traceatlas.errors import MissingDataError
from traceatlas.model.trace import Trace
from traceatlas.ops.host_activity import UNTRACED, Painting, overlapping, union
from traceatlas.testing import frozen_idle_causes

_spec = importlib.util.spec_from_file_location(
    "rank_frozen", Path(__file__).with_name("test_rank_analyses_frozen.py"))
assert _spec is not None and _spec.loader is not None
_rank_frozen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_rank_frozen)
event, build = _rank_frozen.event, _rank_frozen._build


@contextmanager
def frozen_causes() -> Iterator[None]:
    """``idle`` computing its causes table with the frozen module."""
    live = idle.idle_causes
    idle.idle_causes = frozen_idle_causes  # type: ignore[assignment]
    try:
        yield
    finally:
        idle.idle_causes = live


def _canon(df: pl.DataFrame) -> pl.DataFrame:
    return df.sort(df.columns, nulls_last=True) if df.height else df


def assert_causes_equal(trace: Trace, params: dict[str, Any] | None = None) -> pl.DataFrame:
    """The causes table of ``idle`` on ``trace`` equals the frozen module's (rows in the
    same order up to ties of the final sort, same types); returns it."""
    new = registry.run("idle", trace, params).extra["causes"]
    with frozen_causes():
        old = registry.run("idle", trace, params).extra["causes"]
    assert_frame_equal(_canon(new), _canon(old))
    assert new.select("rank", "device", "stream", "step").equals(
        old.select("rank", "device", "stream", "step"))
    return new


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(event, min_size=1, max_size=30), st.lists(event, max_size=12))
def test_causes_equal_frozen_on_built_traces(tmp_path: Path, rank0: list[Any],
                                             rank1: list[Any]) -> None:
    d = Path(tempfile.mkdtemp(dir=tmp_path))
    build(rank0, 0).write(d / "r0.json")
    if rank1:
        build(rank1, 1).write(d / "r1.json")
    trace = traceatlas.open(d)
    try:
        registry.check_requirements(registry.get_analysis("idle"), trace)
    except MissingDataError:  # no device work drawn: nothing to compare
        return
    assert_causes_equal(trace)
    assert_causes_equal(trace, {"kernel_wait_ns": "2000"})


_iv = st.tuples(st.integers(0, 120), st.integers(0, 40)).map(lambda t: (t[0], t[0] + t[1]))


def _arr(ivs: list[tuple[int, int]], i: int) -> np.ndarray:
    return np.array([x[i] for x in ivs], dtype=np.int64)


@settings(max_examples=300, deadline=None)
@given(gaps=st.lists(_iv, min_size=1, max_size=6),
       classes=st.lists(st.lists(_iv, max_size=10), min_size=5, max_size=5),
       probe=st.lists(_iv, min_size=1, max_size=6))
def test_painting_equals_frozen(gaps: list[tuple[int, int]],
                                classes: list[list[tuple[int, int]]],
                                probe: list[tuple[int, int]]) -> None:
    """Same points, labels and times per class; the kept union segments are exactly the
    frozen unions' segments that overlap a gap, and given precomputed unions the painting
    is the same. Gaps disjoint (as a stream's are): a union of the drawn ones."""
    g = union(_arr(gaps, 0), _arr(gaps, 1))
    cls = [(_arr(c, 0), _arr(c, 1)) for c in classes]
    old = frozen_idle_causes.Painting(g[0], g[1], cls)
    for paint in (Painting(g[0], g[1], cls),
                  Painting(g[0], g[1], unions=[union(s, e) for s, e in cls])):
        assert np.array_equal(paint.points, old.points)
        assert np.array_equal(paint.label, old.label)
        assert np.array_equal(paint.cum, old.cum)
        for k in range(UNTRACED + 1):
            assert np.array_equal(paint.in_gaps(_arr(probe, 0), _arr(probe, 1), k),
                                  old.in_gaps(_arr(probe, 0), _arr(probe, 1), k))
        for mine, theirs in zip(paint.unions, old.unions, strict=True):
            hit = [i for i, (s, e) in enumerate(zip(theirs[0], theirs[1], strict=True))
                   if any(s < b and e > a for a, b in zip(g[0], g[1], strict=True))]
            for x, y in zip(mine, theirs, strict=True):
                assert x.tolist() == y[hit].tolist()


@settings(max_examples=300, deadline=None)
@given(segs=st.lists(_iv, max_size=12), gaps=st.lists(_iv, max_size=6))
def test_overlapping_equals_a_plain_loop(segs: list[tuple[int, int]],
                                         gaps: list[tuple[int, int]]) -> None:
    s = union(_arr(segs, 0), _arr(segs, 1))
    g = union(_arr(gaps, 0), _arr(gaps, 1))
    want = [any(a < gb and b > ga for ga, gb in zip(g[0], g[1], strict=True))
            for a, b in zip(s[0], s[1], strict=True)]
    assert overlapping(s[0], s[1], g[0], g[1]).tolist() == want


_NAMES = ("aten::item", "cudaStreamSynchronize", "gloo:all_reduce", "aten::add",
          "enumerate(DataLoader)#x.__next__", "ProfilerStep#3", "my_block", "MPI_Send",
          "cudaLaunchKernel", "cudaMemcpy")
_CATS = ("cpu_op", "runtime", "driver", "python", "annotation", "mpi", "user")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.sampled_from(_NAMES), st.text(max_size=6)),
                          st.sampled_from(_CATS)), min_size=0, max_size=40),
       st.integers(0, 3000))
def test_classify_equals_per_row_name_class(pairs: list[tuple[str, str]], spread: int) -> None:
    """One path for any code range: ``spread`` unused names first widen the Categorical
    codes (the former code table switched to a sort past 4 x rows + 1 M); equal to
    ``name_class`` per row and to the frozen ``classify`` / ``classify_sorted``."""
    from traceatlas.analysis.idle_causes import classify
    from traceatlas.ops.host_activity import name_class

    pl.Series([f"widen-{spread}-{i}" for i in range(spread)], dtype=pl.Categorical)
    rows = pl.DataFrame({"name": [n for n, _ in pairs], "category": [c for _, c in pairs]},
                        schema={"name": pl.Categorical, "category": pl.Categorical})
    got = classify(rows)
    assert got.tolist() == [name_class(n, c) for n, c in pairs]
    assert np.array_equal(got, frozen_idle_causes.classify_sorted(rows))
    assert np.array_equal(got, frozen_idle_causes.classify(rows))


@settings(max_examples=100, deadline=None)
@given(gaps=st.lists(_iv, min_size=1, max_size=6),
       classes=st.lists(st.lists(_iv, max_size=8), min_size=5, max_size=5),
       probe=st.lists(_iv, min_size=1, max_size=8))
def test_all_in_gaps_equals_in_gaps(gaps: list[tuple[int, int]],
                                    classes: list[list[tuple[int, int]]],
                                    probe: list[tuple[int, int]]) -> None:
    g = union(_arr(gaps, 0), _arr(gaps, 1))
    paint = Painting(g[0], g[1], [(_arr(c, 0), _arr(c, 1)) for c in classes])
    a, b = _arr(probe, 0) - 5, _arr(probe, 1)
    want = np.stack([paint.in_gaps(a, b, k) for k in range(UNTRACED + 1)])
    assert np.array_equal(paint.all_in_gaps(a, b), want)
