"""Kineto ``[memory]`` instants -> memory counter tracks (``io/kineto_memory.py``).

Traces are built in the test (``TraceBuilder.memory``) with known allocations; the
expected curves are written out by hand or recomputed with a plain Python loop.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceatlas.errors import DataQualityWarning
from traceatlas.io.kineto import KinetoReader
from traceatlas.io.sources import Source
from traceatlas.testing.builder import TraceBuilder

GIB = 1 << 30


def _read(builder: TraceBuilder, path: Path) -> tuple[dict[str, Any], list[str]]:
    builder.write(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tables = KinetoReader().read(Source(str(path)), threads=1)[0].tables
    quality = [str(w.message) for w in caught if issubclass(w.category, DataQualityWarning)
               and "rank" not in str(w.message)]
    return tables, quality


def _curves(tables: dict[str, Any]) -> dict[str, list[tuple[int, float]]]:
    """Track name -> [(ts_ns, value)] in stored order, for memory counter tracks."""
    names = {r["track_id"]: r["name"] for r in tables["tracks"].to_pylist()
             if r["kind"] == "counter"}
    out: dict[str, list[tuple[int, float]]] = {}
    for row in tables["counters"].to_pylist():
        out.setdefault(names[row["track_id"]], []).append((row["ts_ns"], row["value"]))
    return out


def _two_gpus_and_cpu() -> TraceBuilder:
    b = TraceBuilder(rank=0, device=0)
    b.cpu_op("aten::mm", 0, 10_000)
    # GPU 0: alloc 1 GiB at t=100, alloc 512 at t=300, free 1 GiB at t=500; written out
    # of time order in the file (the t=300 event first).
    b.memory(300, 512, addr=2, total_allocated=4 * GIB + 512, total_reserved=6 * GIB)
    b.memory(100, GIB, addr=1, total_allocated=4 * GIB, total_reserved=6 * GIB)
    b.memory(500, -GIB, addr=1, total_allocated=3 * GIB + 512, total_reserved=6 * GIB)
    # GPU 1 (another thread): one alloc, then a free.
    b.memory(200, 4096, addr=9, total_allocated=4096, total_reserved=2 * GIB, device_id=1,
             tid=77)
    b.memory(400, -4096, addr=9, total_allocated=0, total_reserved=2 * GIB, device_id=1,
             tid=77)
    # CPU: Device Type 0, Device Id -1.
    b.memory(150, 64, addr=5, total_allocated=64, total_reserved=0, device_type=0)
    return b


def test_counter_tracks_per_device_with_totals(tmp_path: Path) -> None:
    tables, quality = _read(_two_gpus_and_cpu(), tmp_path / "t.json")
    assert quality == []
    tracks = {r["name"]: r for r in tables["tracks"].to_pylist() if r["kind"] == "counter"}
    assert sorted(tracks) == sorted([
        "CPU memory allocated", "CPU memory reserved", "GPU 0 memory allocated",
        "GPU 0 memory reserved", "GPU 1 memory allocated", "GPU 1 memory reserved"])
    assert {n: t["device"] for n, t in tracks.items()} == {
        "CPU memory allocated": -1, "CPU memory reserved": -1,
        "GPU 0 memory allocated": 0, "GPU 0 memory reserved": 0,
        "GPU 1 memory allocated": 1, "GPU 1 memory reserved": 1}
    ids = [r["track_id"] for r in tables["tracks"].to_pylist()]
    assert len(ids) == len(set(ids))  # new tracks never reuse an id
    t0 = TraceBuilder().base_time_ns
    curves = _curves(tables)
    # Time order, not file order; values are the events' Total Allocated.
    assert curves["GPU 0 memory allocated"] == [
        (t0 + 100, 4 * GIB), (t0 + 300, 4 * GIB + 512), (t0 + 500, 3 * GIB + 512)]
    assert curves["GPU 0 memory reserved"] == [(t0 + t, 6 * GIB) for t in (100, 300, 500)]
    assert curves["GPU 1 memory allocated"] == [(t0 + 200, 4096), (t0 + 400, 0)]
    assert curves["CPU memory allocated"] == [(t0 + 150, 64)]
    series = {r["name"] for r in tables["counters"].to_pylist()}
    assert "GPU 0 memory allocated (bytes)" in series
    assert "CPU memory reserved (bytes)" in series
    # The instants are still there, args untouched.
    memory = [r for r in tables["instants"].to_pylist() if r["name"] == "[memory]"]
    assert len(memory) == 6
    assert {json.loads(r["args"])["Bytes"] for r in memory} == {512, GIB, -GIB, 4096, -4096,
                                                                 64}


def test_missing_total_allocated_rebuilds_the_curve_and_says_so(tmp_path: Path) -> None:
    b = TraceBuilder(rank=0, device=0)
    b.cpu_op("aten::mm", 0, 10_000)
    for ts, nbytes in ((100, 1000), (200, 24), (300, -1000), (400, 7)):
        b.memory(ts, nbytes)  # no Total Allocated / Total Reserved (older PyTorch)
    b.memory(250, 16, device_type=0)
    tables, quality = _read(b, tmp_path / "old.json")
    assert len(quality) == 1
    assert "rebuilt" in quality[0] and "GPU 0" in quality[0] and "CPU" in quality[0]
    t0 = b.base_time_ns
    curves = _curves(tables)
    assert curves["GPU 0 memory allocated"] == [
        (t0 + 100, 1000), (t0 + 200, 1024), (t0 + 300, 24), (t0 + 400, 31)]
    assert curves["CPU memory allocated"] == [(t0 + 250, 16)]
    # No reserved curve can be made without Total Reserved.
    assert "GPU 0 memory reserved" not in curves


def test_unreadable_events_are_counted_and_kept_as_instants(tmp_path: Path) -> None:
    b = TraceBuilder(rank=0, device=0)
    b.cpu_op("aten::mm", 0, 10_000)
    b.memory(100, 10, total_allocated=10, total_reserved=20)
    b.memory(200, 5, total_allocated=15, total_reserved=20)
    path = tmp_path / "bad.json"
    b.write(path)
    text = path.read_text().replace('"Bytes": 5', '"Bytes": "five"', 1)
    assert '"five"' in text
    path.write_text(text)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tables = KinetoReader().read(Source(str(path)), threads=1)[0].tables
    messages = [str(w.message) for w in caught]
    assert any("1 [memory] event(s)" in m and "kept in instants" in m for m in messages)
    assert _curves(tables)["GPU 0 memory allocated"] == [(b.base_time_ns + 100, 10)]
    assert sum(r["name"] == "[memory]" for r in tables["instants"].to_pylist()) == 2


def test_no_memory_events_no_memory_tracks(tmp_path: Path) -> None:
    b = TraceBuilder(rank=0)
    b.cpu_op("aten::mm", 0, 10_000)
    b.instant("marker", 50)
    tables, _ = _read(b, tmp_path / "none.json")
    assert "counter" not in tables["tracks"]["kind"].to_pylist()
    assert tables["counters"].num_rows == 0


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5_000), st.integers(1, 1 << 20), st.booleans()),
                min_size=1, max_size=30),
       st.integers(0, 1 << 40))
def test_rebuilt_curve_is_total_allocated_minus_the_starting_level(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[int, int, bool]], start: int
) -> None:
    """Random allocs/frees at distinct times: with ``Total Allocated`` the curve is the
    running total from ``start``; without it, the same curve minus ``start``."""
    times = sorted({t for t, _, _ in ops})
    deltas = [(n if alloc else -n) for (_, n, alloc) in ops][:len(times)]
    with_totals, without = TraceBuilder(rank=0), TraceBuilder(rank=0)
    total, expected = start, []
    for t, d in zip(times, deltas, strict=True):
        total += d
        expected.append(total)
        with_totals.memory(t, d, total_allocated=total, total_reserved=start + (1 << 41))
        without.memory(t, d)
    for b in (with_totals, without):
        b.cpu_op("aten::empty", 0, 6_000)
    tmp = tmp_path_factory.mktemp("mem")
    a, _ = _read(with_totals, tmp / "a.json")
    r, _ = _read(without, tmp / "r.json")
    got_a = [v for _, v in _curves(a)["GPU 0 memory allocated"]]
    got_r = [v for _, v in _curves(r)["GPU 0 memory allocated"]]
    assert got_a == expected
    assert got_r == [v - start for v in expected]
