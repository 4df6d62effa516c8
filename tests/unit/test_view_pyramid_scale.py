"""The pyramid's scale paths against their plain references: the process-pool build
equals the inline one, the vectorised ``rows`` matrix equals the per-rank loop, and the
segment-tree owner search equals a brute-force scan on overlapping (not nested) spans."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_view_pyramid import BASE, Interval, nested_host_rows, stream_rows, write_store

from traceatlas.model.trace import Trace
from traceatlas.view import levels as lv
from traceatlas.view.pyramid import Pyramid, ensure_pyramid
from traceatlas.view.pyramid_bins import owned_pieces, paint_owners
from traceatlas.view.pyramid_build import build
from traceatlas.view.pyramid_query import busy_matrix, busy_matrix_loop


def many_ranks(path: Path, n: int) -> Trace:
    """``n`` ranks (every third without a device stream), shifted so their bins differ."""
    tracks: list[tuple[int, int, str]] = []
    rows: list[Interval] = []
    for r in range(n):
        tracks.append((r, 0, "host_thread"))
        rows += nested_host_rows(r, 0, 37 * r)
        if r % 3:
            tracks.append((r, 4, "gpu_stream"))
            rows += stream_rows(r, 4, 91 * r)
    counters = [(1, 9, t, "sm", float(t % 7)) for t in range(0, 9000, 250)]
    tracks.append((1, 9, "counter"))
    return write_store(path, tracks, rows, counters)


def _files(directory: Path) -> dict[str, object]:
    out: dict[str, object] = {}
    for f in sorted(directory.iterdir()):
        if f.suffix == ".arrow":
            out[f.name] = pa.ipc.open_file(str(f)).read_all().to_pydict()
        elif f.suffix == ".npy":
            out[f.name] = np.load(f).tolist()
        elif f.name != "header.json":
            out[f.name] = json.loads(f.read_text("utf-8"))
    return out


def test_pool_build_equals_inline_build(tmp_path: Path) -> None:
    trace = many_ranks(tmp_path / "s.tastore", 7)
    inline, pooled = tmp_path / "inline", tmp_path / "pooled"
    inline.mkdir()
    pooled.mkdir()
    calls: list[tuple[int, int]] = []
    build(trace, inline, "k", workers=1)
    build(trace, pooled, "k", progress=lambda done, total: calls.append((done, total)),
          workers=2)
    assert json.loads((pooled / "header.json").read_text())["workers"] == 2
    assert _files(pooled) == _files(inline)
    assert calls == [(i, 7) for i in range(1, 8)]  # once per rank, in order
    assert not [f for f in pooled.iterdir() if f.name.startswith(".")]  # scratch removed


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_vectorised_rows_matrix_equals_the_per_rank_loop(tmp_path_factory: pytest.TempPathFactory,
                                                         data: st.DataObject) -> None:
    trace = _shared(tmp_path_factory)
    p = ensure_pyramid(trace)
    level = data.draw(st.integers(0, p.top))
    kind = data.draw(st.sampled_from(["rank_device", "rank_host"]))
    ranks = data.draw(st.lists(st.integers(0, 14), min_size=1, max_size=20))  # 12..14: none
    ids = [p._rows.get((r, kind)) for r in ranks]
    lo = data.draw(st.integers(-5, 60))
    hi = lo + data.draw(st.integers(0, 80))
    files = p._bins
    got = busy_matrix(files, level, ids, lo, hi)
    want = busy_matrix_loop(files, level, ids, lo, hi)
    assert got.shape == want.shape == (len(ranks), hi - lo + 1)
    assert np.array_equal(got, want)


_STORE: dict[str, Trace] = {}


def _shared(factory: pytest.TempPathFactory) -> Trace:
    if "t" not in _STORE:
        _STORE["t"] = many_ranks(factory.mktemp("many") / "s.tastore", 12)
    return _STORE["t"]


def test_rows_of_many_ranks_equal_the_per_rank_tiles(tmp_path: Path) -> None:
    """Group statistics from ``rows`` against busy summed from each rank row's tiles."""
    trace = many_ranks(tmp_path / "s.tastore", 12)
    p = ensure_pyramid(trace)
    assert isinstance(p, Pyramid)
    ranks = list(range(12))
    level = 1
    groups = p.rows(level, BASE, BASE + 9000, "rank_device", ranks, 5)
    used = groups[0]["level"]
    bins = groups[0]["bin"]
    per_rank = []
    for r in ranks:
        row = p._rows.get((r, "rank_device"))
        busy = dict.fromkeys(bins, 0)
        if row is not None:
            (tile,) = p.tiles(used, BASE, BASE + 9000, [row])
            d = tile.table.to_pydict()
            for b, ns in zip(d["bin"], d["busy_ns"], strict=True):
                busy[b] += ns
        per_rank.append([busy[b] / lv.bin_ns(used) for b in bins])
    sizes = [3, 3, 2, 2, 2]  # 12 ranks in 5 groups: the first ones hold one more
    start = 0
    for g, size in zip(groups, sizes, strict=True):
        members = per_rank[start:start + size]
        assert g["ranks"] == [start, start + size - 1]
        assert g["mean"] == pytest.approx([sum(c) / size for c in zip(*members, strict=True)])
        assert g["min"] == pytest.approx([min(c) for c in zip(*members, strict=True)])
        assert g["max"] == pytest.approx([max(c) for c in zip(*members, strict=True)])
        start += size
    assert any(v == 0 for v in groups[0]["min"]) and max(groups[0]["max"]) > 0.2


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 25)), min_size=1, max_size=40))
def test_owner_search_on_overlapping_spans_equals_brute_force(
        spans: list[tuple[int, int]]) -> None:
    start = np.array([s for s, _ in spans], dtype=np.int64)
    end = start + np.array([d for _, d in spans], dtype=np.int64)
    order = np.lexsort((-end, start))
    s, e = start[order], end[order]
    owner, a, b = owned_pieces(s, e)
    got: dict[int, int] = {}
    for o, x, y in zip(owner.tolist(), a.tolist(), b.tolist(), strict=True):
        for t in range(x, y):
            got[t] = o
    want = {}
    for t in range(int(e.max(initial=0)) + 1):
        active = [i for i in range(len(s)) if s[i] <= t < e[i]]
        if active:
            want[t] = max(active)  # the last in (start, -end) order
    assert got == want


def test_paint_owners_by_hand() -> None:
    # segments 0..5; spans (index: [lo, hi)): 0: [0, 6), 1: [1, 3), 2: [2, 2), 3: [2, 5)
    lo = np.array([0, 1, 2, 2], dtype=np.int64)
    hi = np.array([6, 3, 2, 5], dtype=np.int64)
    assert paint_owners(lo, hi, 6).tolist() == [0, 1, 3, 3, 3, 0]
    assert paint_owners(lo[:0], hi[:0], 3).tolist() == [-1, -1, -1]
