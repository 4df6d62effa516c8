"""``idle``'s causes table equals the frozen pre-speed-work copy
(``traceatlas.testing.frozen_idle_causes``, the oracle) on random built traces, rows in the
same order (both sort every tie by explicit keys), among them traces drawn on a coarse grid
so that starts, ends, names and whole intervals tie (nested equal annotations); and the
painting with its unions cut to the gap-overlapping segments equals the frozen painting.
Run plainly and with ``CI=true`` (Hypothesis' derandomized profile)."""

from __future__ import annotations

import importlib.util
import tempfile
from collections.abc import Callable, Iterator
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
from traceatlas.ops.host_activity import (
    UNTRACED,
    Painting,
    Timeline,
    covered_sorted,
    overlapping,
    union,
)
from traceatlas.testing import frozen_idle_causes
from traceatlas.testing.builder import TraceBuilder

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
    """The causes table of ``idle`` on ``trace`` equals the frozen module's (same rows in
    the same order, same types); returns it."""
    new = registry.run("idle", trace, params).extra["causes"]
    with frozen_causes():
        old = registry.run("idle", trace, params).extra["causes"]
    assert_frame_equal(new, old)
    return new


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(event, min_size=1, max_size=30), st.lists(event, max_size=12))
def test_causes_equal_frozen_on_built_traces(tmp_path: Path, rank0: list[Any],
                                             rank1: list[Any]) -> None:
    _compare_on_ranks(tmp_path, build, rank0, rank1)


def _compare_on_ranks(tmp_path: Path, make: Callable[[list[Any], int], Any],
                      rank0: list[Any], rank1: list[Any]) -> None:
    """Rank 0 (and rank 1 when drawn) built by ``make``: causes equal the frozen copy's,
    at the default and a 2 us kernel-wait threshold; nothing to compare without device
    work."""
    d = Path(tempfile.mkdtemp(dir=tmp_path))
    make(rank0, 0).write(d / "r0.json")
    if rank1:
        make(rank1, 1).write(d / "r1.json")
    trace = traceatlas.open(d)
    try:
        registry.check_requirements(registry.get_analysis("idle"), trace)
    except MissingDataError:  # no device work drawn: nothing to compare
        return
    assert_causes_equal(trace)
    assert_causes_equal(trace, {"kernel_wait_ns": "2000"})


US = 1_000
KINDS = ("ann", "twin", "op", "data", "gloo", "kernel", "copy", "sync")
OPS = ("aten::item", "aten::add", "aten::mul")
tie_event = st.tuples(
    st.sampled_from(KINDS),
    st.integers(0, 12),          # start, in 10 us ticks (few distinct: equal starts)
    st.sampled_from((1, 2, 4)),  # duration, ticks (equal ends, equal intervals)
    st.integers(0, 2),           # name / stream choice
    st.booleans(),               # on the other thread
    st.sampled_from((0, 1, 3)),  # device delay after the call, ticks
)


def _tie_trace(events: list[tuple[str, int, int, int, bool, int]], rank: int,
               ) -> TraceBuilder:
    """A rank drawn on a 10 us grid: annotations ``block_0..2`` (``twin``: two names over
    one interval, nested equal), ops, DataLoader and gloo ranges, launches on streams 7/8
    (kernel names shared), syncs. Steps [0, 70 us) and [70 us, 160 us)."""
    b = TraceBuilder(rank=rank, world_size=2)
    b.step(1, 0, 70 * US)
    b.step(2, 70 * US, 160 * US)
    other = b.main_tid + 1
    for kind, start, dur, pick, away, delay in events:
        s, e = start * 10 * US, (start + dur) * 10 * US
        tid = other if away else None
        if kind == "ann":
            b.annotation(f"block_{pick}", s, e, tid=tid)
        elif kind == "twin":
            b.annotation(f"block_{pick}", s, e, tid=tid)
            b.annotation(f"block_{(pick + 1) % 3}", s, e, tid=tid)
        elif kind == "op":
            b.cpu_op(OPS[pick], s, e, tid=tid)
        elif kind == "data":
            b.annotation("enumerate(DataLoader)#_Iter.__next__", s, e, tid=tid)
        elif kind == "gloo":
            b.annotation("gloo:all_reduce", s, e, tid=other if pick else None)
        elif kind in ("kernel", "copy"):
            copy = kind == "copy"
            b.launch(("Memcpy DtoH (Device -> Pageable)" if copy else f"kernel_{pick % 2}"),
                     s, 5 * US * (1 + pick % 2), e + delay * 10 * US, 10 * US * dur,
                     kind="memcpy" if copy else "kernel", nbytes=64 if copy else None,
                     stream=7 + pick % 2, tid=tid)
        else:
            b.sync(s, e - s, s, e - s, stream=7 + pick % 2, tid=tid)
    return b


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(tie_event, min_size=1, max_size=30), st.lists(tie_event, max_size=12))
def test_causes_equal_frozen_on_traces_with_ties(tmp_path: Path, rank0: list[Any],
                                                 rank1: list[Any]) -> None:
    _compare_on_ranks(tmp_path, _tie_trace, rank0, rank1)


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
    """Same time per class within the gaps and any probe interval (the probes' ends, the
    gaps' own bounds and the class bounds as instants too); the kept union segments are
    exactly the frozen unions' segments that overlap a gap; the painting is the same
    given the classes, their unions or their shared ``Timeline``. Gaps disjoint (as a
    stream's are): a union of the drawn ones."""
    g = union(_arr(gaps, 0), _arr(gaps, 1))
    cls = [(_arr(c, 0), _arr(c, 1)) for c in classes]
    old = frozen_idle_causes.Painting(g[0], g[1], cls)
    unions = [union(s, e) for s, e in cls]
    a, b = _arr(probe, 0), _arr(probe, 1)
    instants = np.concatenate([a, b, g[0], g[1], *[x for c in cls for x in c],
                               np.array([-5, 10_000], dtype=np.int64)])
    for paint in (Painting(g[0], g[1], cls), Painting(g[0], g[1], unions=unions),
                  Painting(g[0], g[1], timeline=Timeline(unions))):
        every = paint.all_in_gaps(a, b)
        every_at = paint.all_at(instants)
        for k in range(UNTRACED + 1):
            want = old.in_gaps(a, b, k)
            assert np.array_equal(paint.in_gaps(a, b, k), want)
            assert np.array_equal(every[k], want)
            assert np.array_equal(every_at[k], old.at(instants, k))
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


@settings(max_examples=300, deadline=None)
@given(segs=st.lists(_iv, max_size=12), points=st.lists(st.integers(0, 170), max_size=30))
def test_covered_sorted_equals_covered(segs: list[tuple[int, int]], points: list[int]) -> None:
    """Against the frozen per-point search (``frozen_idle_causes.covered``)."""
    s = union(_arr(segs, 0), _arr(segs, 1))
    p = np.sort(np.asarray(points, dtype=np.int64))
    assert covered_sorted(p, s[0], s[1]).tolist() == frozen_idle_causes.covered(
        p, s[0], s[1]).tolist()


@settings(max_examples=150, deadline=None)
@given(dev=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3),
                              st.one_of(st.none(), st.integers(0, 12))), max_size=30),
       calls=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 12), st.integers(1, 4)),
                      max_size=20))
def test_launching_threads_equal_an_inner_join(dev: list[tuple[int, int, int | None]],
                                               calls: list[tuple[int, int, int]]) -> None:
    """The sorted-search path (unique keys) and the join fallback (repeated keys) both
    give the inner join's distinct (rank, device, stream, track_id)."""
    from traceatlas.analysis.idle_causes import _launching_threads

    device = pl.DataFrame({"rank": [r for r, _, _ in dev], "device": [0] * len(dev),
                           "stream": [s for _, s, _ in dev],
                           "correlation": [c for _, _, c in dev]},
                          schema={"rank": pl.Int32, "device": pl.Int32, "stream": pl.Int64,
                                  "correlation": pl.Int64})
    launch = pl.DataFrame({"rank": [r for r, _, _ in calls],
                           "correlation": [c for _, c, _ in calls],
                           "track_id": [t for _, _, t in calls]},
                          schema={"rank": pl.Int32, "correlation": pl.Int64,
                                  "track_id": pl.Int32})
    want = (device.join(launch, on=["rank", "correlation"], how="inner")
            .select("rank", "device", "stream", "track_id").unique())
    assert_frame_equal(_canon(_launching_threads(device, launch)), _canon(want))
