"""``writer.time_sorted`` on times far apart: the already-sorted check must not be
fooled by an int64 overflow of their difference (4e18 then -6e18 differ by -1e19, which
wraps to a positive number)."""

from __future__ import annotations

import pyarrow as pa

from traceatlas.store.writer import time_sorted


def test_far_apart_descending_times_are_sorted() -> None:
    times = [4 * 10**18, -6 * 10**18, -5 * 10**18, -4 * 10**18]
    table = pa.table({"track_id": pa.array([0, 0, 1, 1], pa.int32()),
                      "start_ns": pa.array(times, pa.int64())})
    got = time_sorted(table, "start_ns")
    assert got.column("start_ns").to_pylist() == sorted(times)
    assert got.column("track_id").to_pylist() == [0, 1, 1, 0]


def test_equal_times_ordered_by_track() -> None:
    table = pa.table({"track_id": pa.array([2, 1, 3], pa.int32()),
                      "start_ns": pa.array([5, 5, 5], pa.int64())})
    assert time_sorted(table, "start_ns").column("track_id").to_pylist() == [1, 2, 3]
