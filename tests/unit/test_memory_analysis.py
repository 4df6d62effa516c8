"""``memory`` analysis on a hand-built trace: nested ops, a free inside a child op, a leak,
two devices (one without ``Total Allocated``). Expected tables computed by hand below."""

from __future__ import annotations

import warnings
from pathlib import Path

import polars as pl
import pytest

import traceatlas
from traceatlas import analysis
from traceatlas.errors import DataQualityWarning, MissingDataError
from traceatlas.testing.builder import TraceBuilder

A1, A2, A3, B1, B2 = 0x1000, 0x2000, 0x3000, 0x9000, 0xA000


def _trace(tmp_path: Path) -> traceatlas.Trace:
    b = TraceBuilder(rank=0)
    b.step(1, 0, 1000)
    b.step(2, 1000, 2000)
    b.annotation("fwd", 50, 900)
    b.cpu_op("outer", 100, 400)
    b.cpu_op("inner", 150, 300)
    # GPU 0 with totals, as PyTorch >= 1.10 writes them
    b.memory(120, 100, addr=A1, total_allocated=100, total_reserved=1024, device_id=0)
    b.memory(200, 50, addr=A2, total_allocated=150, total_reserved=1024, device_id=0)
    b.memory(250, -100, addr=A1, total_allocated=50, total_reserved=1024, device_id=0)
    b.memory(350, 30, addr=A3, total_allocated=80, total_reserved=1024, device_id=0)
    b.memory(1200, -50, addr=A2, total_allocated=30, total_reserved=1024, device_id=0)
    # GPU 1 without totals (older PyTorch): the curve is rebuilt from the running sum
    b.memory(110, 8, addr=B1, device_id=1)
    b.memory(1100, 4, addr=B2, device_id=1)
    return traceatlas.open(b.write(tmp_path / "mem.json"))


def _run(tmp_path: Path) -> analysis.Result:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = analysis.run("memory", _trace(tmp_path))
    assert any(issubclass(w.category, DataQualityWarning) and "rebuilt" in str(w.message)
               for w in caught)
    return result


def _rows(frame: pl.DataFrame, *cols: str) -> list[tuple[object, ...]]:
    return frame.select(cols).rows()


def test_peaks(tmp_path: Path) -> None:
    peaks = _run(tmp_path).table
    rows = _rows(peaks, "device", "peak_allocated_bytes", "step", "op", "annotation",
                 "reserved_at_peak_bytes", "fragmentation_bytes", "live_at_peak_bytes",
                 "events")
    # GPU 0: peak 150 at t=200 inside inner (inside outer, inside fwd), step 1;
    # reserved 1024 -> 874 not allocated; live then: A1 100 + A2 50
    # GPU 1: rebuilt 8, 12 -> peak 12 at t=1100 in step 2 outside any op
    assert rows == [("GPU 0", 150, 1, "inner", "fwd", 1024, 874, 150, 5),
                    ("GPU 1", 12, 2, None, None, None, None, 12, 2)]
    assert peaks["note"][0] == "" and "rebuilt" in peaks["note"][1]
    t0 = peaks["peak_ns"][0] - 200
    assert peaks["peak_ns"][1] - t0 == 1100


def test_holders_by_op_unfreed(tmp_path: Path) -> None:
    result = _run(tmp_path)
    holders = _rows(result.extra["holders"], "device", "op", "annotation", "live_bytes",
                    "allocations")
    assert holders == [("GPU 0", "outer", "fwd", 100, 1), ("GPU 0", "inner", "fwd", 50, 1),
                       ("GPU 1", "outer", "fwd", 8, 1), ("GPU 1", None, None, 4, 1)]
    by_op = _rows(result.extra["by_op"], "device", "op", "calls", "self_alloc_count",
                  "self_alloc_bytes", "self_increase_bytes", "alloc_count", "alloc_bytes",
                  "increase_bytes")
    # outer self: A1 +100, A3 +30; inner self: A2 +50, the free of A1 -100;
    # outer including inner: 3 allocations, 180 B, increase 130 - 50 = 80.
    # The free of A2 (t=1200) lies in no op: counted nowhere.
    assert by_op == [("GPU 0", "outer", 1, 2, 130, 130, 3, 180, 80),
                     ("GPU 0", "inner", 1, 1, 50, -50, 1, 50, -50),
                     ("GPU 1", "outer", 1, 1, 8, 8, 1, 8, 8)]
    unfreed = _rows(result.extra["unfreed"], "device", "op", "bytes", "allocations")
    assert unfreed == [("GPU 0", "outer", 30, 1), ("GPU 1", "outer", 8, 1),
                       ("GPU 1", None, 4, 1)]


def test_steps(tmp_path: Path) -> None:
    steps = _rows(_run(tmp_path).extra["steps"], "device", "step", "allocated_bytes",
                  "growth_bytes", "allocations", "alloc_bytes", "carried_bytes",
                  "top_carrier")
    # GPU 0 at step 1's start: before the first event 100 - 100 = 0; at step 2's start: 80.
    # Step 1 carries A2 (50, freed at 1200 after the step's end) and A3 (30, never).
    assert steps == [("GPU 0", 1, 0, None, 3, 180, 80, "inner"),
                     ("GPU 0", 2, 80, 80, 0, 0, 0, None),
                     ("GPU 1", 1, 0, None, 1, 8, 8, "outer"),
                     ("GPU 1", 2, 8, 8, 1, 4, 4, None)]


def test_window_selects_events(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    t0 = int(trace.intervals.select(pl.col("start_ns").min()).collect().item())
    view = trace.select(window=f"@{t0}:@{t0 + 1000}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        peaks = analysis.run("memory", view).table
    assert _rows(peaks, "device", "peak_allocated_bytes", "events") == [
        ("GPU 0", 150, 4), ("GPU 1", 8, 1)]


def test_no_memory_events_is_missing_data(tmp_path: Path) -> None:
    b = TraceBuilder(rank=0)
    b.cpu_op("op", 0, 100)
    with pytest.raises(MissingDataError, match="memory"):
        analysis.run("memory", traceatlas.open(b.write(tmp_path / "none.json")))


def test_allocations_table(tmp_path: Path) -> None:
    """Every event, in time order, with its context and the time of its pair."""
    from traceatlas.testing.builder import DEFAULT_BASE_TIME_NS as T0

    table = _run(tmp_path).extra["allocations"]
    got = _rows(table, "rank", "device", "time_ns", "addr", "bytes", "action", "op",
                "annotation", "step", "paired_time_ns")
    # By hand from _trace: outer [100, 400), inner [150, 300), fwd [50, 900),
    # step 1 [0, 1000), step 2 [1000, 2000). A1 freed at 250 inside inner; A2 freed at
    # 1200 outside every op; A3, B1, B2 never freed.
    assert got == [
        (0, "GPU 1", T0 + 110, B1, 8, "alloc", "outer", "fwd", 1, None),
        (0, "GPU 0", T0 + 120, A1, 100, "alloc", "outer", "fwd", 1, T0 + 250),
        (0, "GPU 0", T0 + 200, A2, 50, "alloc", "inner", "fwd", 1, T0 + 1200),
        (0, "GPU 0", T0 + 250, A1, -100, "free", "inner", "fwd", 1, T0 + 120),
        (0, "GPU 0", T0 + 350, A3, 30, "alloc", "outer", "fwd", 1, None),
        (0, "GPU 1", T0 + 1100, B2, 4, "alloc", None, None, 2, None),
        (0, "GPU 0", T0 + 1200, A2, -50, "free", None, None, 2, T0 + 200),
    ]


def test_allocations_unpaired_and_reused_address(tmp_path: Path) -> None:
    """A free of memory allocated before the trace has no pair; an address reused after
    its free pairs each allocation with its own free; a CPU event is named ``CPU``."""
    from traceatlas.testing.builder import DEFAULT_BASE_TIME_NS as T0

    b = TraceBuilder(rank=0)
    b.cpu_op("op", 0, 1000)
    b.memory(10, -64, addr=A1, total_allocated=0, total_reserved=512, device_id=0)
    b.memory(20, 32, addr=A1, total_allocated=32, total_reserved=512, device_id=0)
    b.memory(30, -32, addr=A1, total_allocated=0, total_reserved=512, device_id=0)
    b.memory(40, 16, addr=A1, total_allocated=16, total_reserved=512, device_id=0)
    b.memory(50, 16, addr=A1, total_allocated=16, total_reserved=16, device_type=0)
    table = analysis.run("memory", traceatlas.open(b.write(tmp_path / "m.json"))
                         ).extra["allocations"]
    assert _rows(table, "device", "time_ns", "bytes", "action", "paired_time_ns") == [
        ("GPU 0", T0 + 10, -64, "free", None), ("GPU 0", T0 + 20, 32, "alloc", T0 + 30),
        ("GPU 0", T0 + 30, -32, "free", T0 + 20), ("GPU 0", T0 + 40, 16, "alloc", None),
        ("CPU", T0 + 50, 16, "alloc", None)]
