"""The viewer's pyramid against plain-loop references on small stores written in the test.

References: per nanosecond, the owner is the active interval with the latest start (ties:
the shorter), i.e. the deepest one for nested intervals; bins, counts, dominant names,
unions and counter statistics are then tallied with dictionaries.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traceatlas.errors import QueryError
from traceatlas.model.trace import Trace
from traceatlas.store.layout import SCHEMA_VERSION
from traceatlas.store.manifest import write_manifest
from traceatlas.store.writer import write_part
from traceatlas.testing.compare import plain_union_length
from traceatlas.view import levels as lv
from traceatlas.view.pyramid import ensure_pyramid, pyramid_dir
from traceatlas.view.pyramid_bins import owned_pieces

BASE = 1_700_000_000_000_000_000
Interval = tuple[int, int, int, int, str, str]  # rank, track_id, start, end, name, category


def write_store(path: Path, tracks: list[tuple[int, int, str]], intervals: list[Interval],
                counters: list[tuple[int, int, int, str, float]] = ()) -> Trace:  # type: ignore[assignment]
    """A store holding exactly these rows (times relative to BASE)."""
    path.mkdir(parents=True)
    ranks = sorted({t[0] for t in tracks})
    for rank in ranks:
        tr = [t for t in tracks if t[0] == rank]
        write_part(path, "tracks", rank, pa.table({
            "track_id": pa.array([t[1] for t in tr], pa.int32()),
            "kind": [t[2] for t in tr], "name": [f"{t[2]} {t[1]}" for t in tr],
            "device": pa.array([0 if t[2] != "host_thread" else -1 for t in tr], pa.int32()),
            "stream": pa.array([t[1] if t[2] != "host_thread" else -1 for t in tr], pa.int64()),
        }))
        iv = [i for i in intervals if i[0] == rank]
        write_part(path, "intervals", rank, pa.table({
            "track_id": pa.array([i[1] for i in iv], pa.int32()),
            "start_ns": pa.array([BASE + i[2] for i in iv], pa.int64()),
            "end_ns": pa.array([BASE + i[3] for i in iv], pa.int64()),
            "dur_ns": pa.array([i[3] - i[2] for i in iv], pa.int64()),
            "name": pa.array([i[4] for i in iv], pa.string()),
            "category": pa.array([i[5] for i in iv], pa.string()),
            "depth": pa.array([0] * len(iv), pa.int32()),
            "step": pa.array([-1] * len(iv), pa.int32()),
        }))
        cv = [c for c in counters if c[0] == rank]
        write_part(path, "counters", rank, pa.table({
            "track_id": pa.array([c[1] for c in cv], pa.int32()),
            "ts_ns": pa.array([BASE + c[2] for c in cv], pa.int64()),
            "name": pa.array([c[3] for c in cv], pa.string()),
            "value": pa.array([c[4] for c in cv], pa.float64()),
        }))
    write_manifest(path, {"schema_version": SCHEMA_VERSION, "producer": {"traceatlas": "test"},
                          "ranks": ranks, "source_format": "test",
                          "tables": ["counters", "intervals", "tracks"]})
    return Trace(path)


@functools.cache
def owner_per_ns(spans: tuple[tuple[int, int], ...]) -> dict[int, int]:
    """ns -> index of the owning span (latest start, then shorter), by brute force."""
    out: dict[int, int] = {}
    for t in range(min(s for s, _ in spans), max(e for _, e in spans)):
        active = [(s, -e, i) for i, (s, e) in enumerate(spans) if s <= t < e]
        if active:
            out[t] = max(active)[2]
    return out


def reference_bins(rows: list[Interval], level: int, origin: int, names: list[str]
                   ) -> dict[tuple[int, str], tuple[int, int, str]]:
    """(bin, category) -> (busy ns, count, dominant name) of one timeline, by plain loops."""
    spans = tuple((r[2], r[3]) for r in rows)
    width = lv.bin_ns(level)
    busy: dict[tuple[int, str], int] = defaultdict(int)
    count: dict[tuple[int, str], int] = defaultdict(int)
    by_name: dict[tuple[int, str, str], list[int]] = defaultdict(lambda: [0, 0])
    for t, i in owner_per_ns(spans).items():
        b = (t - origin) // width
        busy[(b, rows[i][5])] += 1
        by_name[(b, rows[i][5], rows[i][4])][0] += 1
    for r in rows:
        b = (r[2] - origin) // width
        count[(b, r[5])] += 1
        by_name[(b, r[5], r[4])][1] += 1
    out = {}
    for key in set(busy) | set(count):
        cands = [(-v[0], -v[1], names.index(n)) for (b, c, n), v in by_name.items()
                 if (b, c) == key]
        out[key] = (busy[key], count[key], names[min(cands)[2]])
    return out


def tiles_dict(p: Any, level: int, track: int, start: int = -10**6, end: int = 10**6
               ) -> dict[tuple[int, str], tuple[int, int, str]]:
    (got,) = p.tiles(level, BASE + start, BASE + end, [track])
    d = got.table.to_pydict()
    return {(b, p.categories[c]): (busy, n, p.names[nm]) for b, c, busy, n, nm in
            zip(d["bin"], d["cat"], d["busy_ns"], d["count"], d["name"], strict=True)}


def nested_host_rows(rank: int, track: int, offset: int) -> list[Interval]:
    """A call stack: step > op > (kernel launch, two small ops), repeated, plus a gap."""
    rows: list[Interval] = []
    for k in range(40):
        s = offset + k * 700
        rows.append((rank, track, s, s + 650, "step", "step"))
        rows.append((rank, track, s + 10, s + 400, f"op{k % 3}", "cpu_op"))
        rows.append((rank, track, s + 20, s + 60, "cudaLaunchKernel", "runtime"))
        rows.append((rank, track, s + 100, s + 100, "marker", "cpu_op"))  # zero length
        rows.append((rank, track, s + 200, s + 390, "aten::mm", "cpu_op"))
    return rows


def stream_rows(rank: int, track: int, offset: int) -> list[Interval]:
    """Kernels, two of them overlapping (not nested), and a memcpy."""
    rows: list[Interval] = [(rank, track, offset + k * 900, offset + k * 900 + 500 + 37 * k,
                             f"kern{k % 4}", "kernel") for k in range(30)]
    rows.append((rank, track, offset + 450, offset + 1300, "Memcpy HtoD", "memcpy"))
    return rows


@pytest.fixture
def small(tmp_path: Path) -> tuple[Trace, list[Interval]]:
    tracks = [(0, 0, "host_thread"), (0, 1, "gpu_stream"), (0, 2, "gpu_stream"),
              (1, 0, "host_thread"), (1, 5, "gpu_stream"), (1, 9, "counter")]
    rows = (nested_host_rows(0, 0, 0) + stream_rows(0, 1, 50) + stream_rows(0, 2, 3000)
            + nested_host_rows(1, 0, 123) + stream_rows(1, 5, 7))
    counters = [(1, 9, t, "sm_active", float(t % 97)) for t in range(0, 28000, 333)]
    counters += [(1, 9, t, "dram", float(t // 1000)) for t in range(5, 28000, 2900)]
    return write_store(tmp_path / "s.tastore", tracks, rows, counters), rows


def test_tracks_are_ordered_rank_devices_hosts_counters(small: tuple[Trace, list[Interval]]
                                                        ) -> None:
    p = ensure_pyramid(small[0])
    got = [(t.rank, t.kind, t.track_id) for t in p.tracks]
    assert got == [(0, "rank_device", None), (0, "gpu_stream", 1), (0, "gpu_stream", 2),
                   (0, "rank_host", None), (0, "host_thread", 0),
                   # a device's counter (device 0 here: sm_active, dram) follows its streams
                   (1, "rank_device", None), (1, "gpu_stream", 5), (1, "counter", 9),
                   (1, "rank_host", None), (1, "host_thread", 0)]
    assert [t.id for t in p.tracks] == list(range(len(p.tracks)))
    assert p.tracks[1].events == 31 and p.tracks[0].events == 62
    assert p.tracks[7].series == ["dram", "sm_active"]
    meta = p.meta()
    assert meta["start_ns"] == BASE and meta["ranks"] == [0, 1]
    assert meta["end_ns"] == BASE + max(r[3] for r in small[1])
    assert [x["bin_ns"] for x in meta["levels"]] == [lv.bin_ns(L) for L in
                                                     lv.levels(meta["end_ns"] - BASE)]


@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_tiles_equal_the_plain_loop_reference(small: tuple[Trace, list[Interval]],
                                              level: int) -> None:
    trace, rows = small
    p = ensure_pyramid(trace)
    for info in p.tracks:
        if info.kind == "counter":
            continue
        if info.track_id is None:
            kinds = ("gpu_stream",) if info.kind == "rank_device" else ("host_thread",)
            ids = {t.track_id for t in p.tracks if t.rank == info.rank and t.kind in kinds}
            mine = [r for r in rows if r[0] == info.rank and r[1] in ids]
        else:
            mine = [r for r in rows if r[0] == info.rank and r[1] == info.track_id]
        used = min(max(level, info.finest_level), p.top)  # above the top: the top
        want = reference_bins(mine, used, 0, p.names)
        (tile,) = p.tiles(level, BASE - 10**6, BASE + 10**6, [info.id])
        assert tile.level == used and tile.raw == (level < info.finest_level)
        assert tile.bin_ns == lv.bin_ns(used)
        assert tiles_dict(p, level, info.id) == want, (info, level)


def test_window_returns_only_overlapping_bins(small: tuple[Trace, list[Interval]]) -> None:
    trace, _ = small
    p = ensure_pyramid(trace)
    track = next(t for t in p.tracks if t.kind == "rank_host" and t.rank == 0)
    level = track.finest_level
    width = lv.bin_ns(level)
    full = tiles_dict(p, level, track.id)
    # window [3.5 bins, 6 bins): bins 3, 4, 5
    part = tiles_dict(p, level, track.id, width * 7 // 2, width * 6)
    assert part == {k: v for k, v in full.items() if 3 <= k[0] <= 5}
    assert part


def test_finest_level_keeps_bins_within_event_count(small: tuple[Trace, list[Interval]]
                                                    ) -> None:
    trace, rows = small
    p = ensure_pyramid(trace)
    for info in p.tracks:
        if info.kind != "gpu_stream":
            continue
        mine = [r for r in rows if r[0] == info.rank and r[1] == info.track_id]
        first, last = min(r[2] for r in mine), max(r[3] for r in mine)

        def n_bins(level: int, first: int = first, last: int = last) -> int:
            return (last - 1) // lv.bin_ns(level) - first // lv.bin_ns(level) + 1

        assert n_bins(info.finest_level) <= len(mine)
        assert info.finest_level == 0 or n_bins(info.finest_level - 1) > len(mine)
        (finest,) = p.tiles(info.finest_level, BASE, BASE + 10**6, [info.id])
        assert finest.table.num_rows > 0


def test_counters_min_mean_max_by_hand(small: tuple[Trace, list[Interval]]) -> None:
    trace, _ = small
    p = ensure_pyramid(trace)
    info = next(t for t in p.tracks if t.kind == "counter")
    samples = [(t, "sm_active", float(t % 97)) for t in range(0, 28000, 333)]
    samples += [(t, "dram", float(t // 1000)) for t in range(5, 28000, 2900)]
    for level in (info.finest_level, info.finest_level + 1):
        (tile,) = p.counter_tiles(level, BASE, BASE + 10**6, [info.id])
        d = tile.table.to_pydict()
        width = lv.bin_ns(tile.level)
        want: dict[tuple[int, str], list[float]] = defaultdict(list)
        for t, name, v in samples:
            want[(t // width, name)].append(v)
        got = {(b, info.series[s]): (lo, mean, hi, n) for b, s, lo, mean, hi, n in
               zip(d["bin"], d["series"], d["min"], d["mean"], d["max"], d["count"],
                   strict=True)}
        assert set(got) == set(want)
        for key, vals in want.items():
            lo, mean, hi, n = got[key]
            assert (lo, hi, n) == (min(vals), max(vals), len(vals))
            assert mean == pytest.approx(sum(vals) / len(vals))


def test_rows_group_busy_fractions(small: tuple[Trace, list[Interval]]) -> None:
    trace, rows = small
    p = ensure_pyramid(trace)
    level = 2
    groups = p.rows(level, BASE, BASE + 40_000, "rank_device", [0, 1, 7], 2)
    assert [g["ranks"] for g in groups] == [[0, 1], [7, 7]]  # 3 ranks: 2 + 1
    used = groups[0]["level"]
    width = lv.bin_ns(used)
    per_rank = {}
    for rank in (0, 1):
        mine = [(r[2], r[3]) for r in rows if r[0] == rank and r[1] != 0]
        per_rank[rank] = [plain_union_length(
            [(max(s, b * width), min(e, (b + 1) * width)) for s, e in mine
             if s < (b + 1) * width and e > b * width]) / width for b in groups[0]["bin"]]
    assert groups[0]["mean"] == pytest.approx(
        [(a + b) / 2 for a, b in zip(per_rank[0], per_rank[1], strict=True)])
    assert groups[0]["max"] == pytest.approx(
        [max(a, b) for a, b in zip(per_rank[0], per_rank[1], strict=True)])
    assert groups[0]["min"] == pytest.approx(
        [min(a, b) for a, b in zip(per_rank[0], per_rank[1], strict=True)])
    assert max(groups[0]["max"]) > 0.3
    # rank 7 has no row: 0 busy
    assert groups[1]["mean"] == groups[1]["max"] == [0.0] * len(groups[0]["bin"])
    # one group per rank when groups >= ranks
    singles = p.rows(level, BASE, BASE + 40_000, "rank_device", [1], 5)
    assert singles[0]["ranks"] == [1, 1] and singles[0]["mean"] == pytest.approx(per_rank[1])


def test_bad_queries_raise_query_error(small: tuple[Trace, list[Interval]]) -> None:
    p = ensure_pyramid(small[0])
    with pytest.raises(QueryError):
        p.tiles(31, BASE, BASE + 1, [0])
    with pytest.raises(QueryError):
        p.tiles(0, BASE + 5, BASE, [0])
    with pytest.raises(QueryError):
        p.tiles(0, BASE, BASE + 5, [len(p.tracks)])
    with pytest.raises(QueryError):
        p.rows(0, BASE, BASE + 5, "gpu_stream", [0], 1)


def test_cache_reused_then_rebuilt_when_the_store_is_rewritten(tmp_path: Path) -> None:
    tracks = [(0, 0, "host_thread")]
    rows: list[Interval] = [(0, 0, 0, 5000, "a", "cpu_op")]
    trace = write_store(tmp_path / "s.tastore", tracks, rows)
    first = ensure_pyramid(trace)
    assert first.directory == pyramid_dir(trace.path)
    again = ensure_pyramid(Trace(trace.path))
    assert again.directory == first.directory
    assert again.header["build_s"] == first.header["build_s"]
    # Rewrite the store: new manifest bytes -> new key, old pyramid removed.
    import shutil
    shutil.rmtree(trace.path)
    trace2 = write_store(tmp_path / "s.tastore", tracks, [(0, 0, 0, 9000, "b", "kernel")])
    rebuilt = ensure_pyramid(trace2)
    assert rebuilt.directory != first.directory
    assert not first.directory.exists()
    (tile,) = rebuilt.tiles(rebuilt.top, BASE, BASE + 10**6, [1])
    assert rebuilt.names[tile.table["name"][0].as_py()] == "b"
    # Nothing was written inside the store.
    Trace(trace2.path)  # verification passes: no added file


@st.composite
def nested_sets(draw: st.DrawFn) -> list[tuple[int, int]]:
    """Properly nested intervals: recursive children inside [lo, hi)."""
    out: list[tuple[int, int]] = []

    def fill(lo: int, hi: int, depth: int) -> None:
        cursor = lo
        for _ in range(draw(st.integers(0, 3 if depth < 3 else 0))):
            if cursor >= hi:
                return
            s = draw(st.integers(cursor, hi))
            e = draw(st.integers(s, hi))
            out.append((s, e))
            fill(s, e, depth + 1)
            cursor = e
    fill(0, draw(st.integers(1, 20_000)), 0)
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nested_sets())
def test_property_flattened_busy_sums_to_the_union(spans: list[tuple[int, int]]) -> None:
    start = np.array([s for s, _ in spans], dtype=np.int64)
    end = np.array([e for _, e in spans], dtype=np.int64)
    order = np.lexsort((-end, start))
    owner, a, b = owned_pieces(start[order], end[order])
    assert int((b - a).sum()) == plain_union_length(spans)
    assert np.all(a[1:] >= b[:-1])  # disjoint, ordered
    # Each piece's owner is active over it and is the latest-starting active interval.
    for o, s, e in zip(owner.tolist(), a.tolist(), b.tolist(), strict=True):
        so, eo = int(start[order][o]), int(end[order][o])
        assert so <= s and e <= eo
        for si, ei in spans:
            if si <= s < ei and (si, -ei) > (so, -eo):
                raise AssertionError(f"{(si, ei)} starts later than owner {(so, eo)} at {s}")


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(nested_sets(), st.integers(0, 3))
def test_property_bins_of_a_level_sum_to_the_union(tmp_path_factory: pytest.TempPathFactory,
                                                   spans: list[tuple[int, int]],
                                                   level: int) -> None:
    spans = [(s, e) for s, e in spans if e > s] or [(0, 1)]
    rows: list[Interval] = [(0, 0, s, e, f"n{i % 3}", ("cpu_op", "runtime")[i % 2])
                            for i, (s, e) in enumerate(spans)]
    trace = write_store(tmp_path_factory.mktemp("p") / "s.tastore", [(0, 0, "host_thread")],
                        rows)
    p = ensure_pyramid(trace)
    origin = min(s for s, _ in spans)
    for info in p.tracks:
        (tile,) = p.tiles(level, BASE, BASE + 10**6, [info.id])
        d = tile.table.to_pydict()
        assert sum(d["busy_ns"]) == plain_union_length(spans)
        assert sum(d["count"]) == len(spans)
        width = tile.bin_ns
        per_bin: dict[int, int] = defaultdict(int)
        for b, busy in zip(d["bin"], d["busy_ns"], strict=True):
            per_bin[b] += busy
        for b, busy in per_bin.items():
            lo, hi = origin + b * width, origin + (b + 1) * width
            clipped = [(max(s, lo), min(e, hi)) for s, e in spans if s < hi and e > lo]
            assert busy == plain_union_length(clipped)


def test_polars_fallback_gives_the_same_bins(small: tuple[Trace, list[Interval]],
                                             tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys too wide for the packed numpy path go through Polars: same rows at every level."""
    from traceatlas.view import pyramid_rank

    fast = ensure_pyramid(small[0])
    monkeypatch.setenv("TRACEATLAS_CACHE_DIR", str(tmp_path / "other-cache"))
    monkeypatch.setattr(pyramid_rank, "key_layout", lambda *args: None)
    slow = ensure_pyramid(small[0])
    assert slow.directory != fast.directory
    ids = list(range(len(fast.tracks)))
    for level in range(fast.top + 1):
        a = fast.tiles(level, BASE, BASE + 10**6, ids)
        b = slow.tiles(level, BASE, BASE + 10**6, ids)
        for x, y in zip(a, b, strict=True):
            dx, dy = x.table.to_pydict(), y.table.to_pydict()
            dx["name"] = [fast.names[i] for i in dx["name"]]
            dy["name"] = [slow.names[i] for i in dy["name"]]
            assert dx == dy, (level, x.id)
