"""Time-sorted store parts: intervals by start_ns, instants and counters by ts_ns (then
track_id, stable), in row groups of at most ``TIME_ROW_GROUP_ROWS`` rows, so window queries
skip row groups from their statistics. The rows themselves must not change."""

from __future__ import annotations

import json
import random
from collections import Counter
from itertools import pairwise
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import traceatlas
from traceatlas.ops.filter_store import filter_store
from traceatlas.ops.select import selection_from
from traceatlas.store.layout import part_path
from traceatlas.store.writer import TIME_ROW_GROUP_ROWS, write_part

BASE = 1_700_000_000_000_000_000
N_INTERVALS = 150_000  # > 2 row groups of 65,536
TIDS = (11, 12, 13)


def _events(seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Shuffled interval events (with start ties, on one track and across tracks) and
    instant/counter events, in whole microseconds."""
    rng = random.Random(seed)
    intervals = []
    for i in range(N_INTERVALS):
        ts = rng.randrange(0, 2_000_000)
        intervals.append({"ph": "X", "name": f"op{i % 7}", "cat": "cpu_op", "pid": 1,
                          "tid": TIDS[i % 3], "ts": ts, "dur": rng.randrange(1, 50)})
    for tid in TIDS:  # same start on every track, twice on one track
        intervals += [{"ph": "X", "name": "tie", "cat": "cpu_op", "pid": 1, "tid": tid,
                       "ts": 1_000_000, "dur": 5} for _ in range(2)]
    rng.shuffle(intervals)
    others: list[dict[str, Any]] = []
    for i in range(300):
        ts = rng.randrange(0, 2_000_000)
        others.append({"ph": "i", "s": "t", "name": f"mark{i % 3}", "pid": 1,
                       "tid": TIDS[i % 3], "ts": ts})
        others.append({"ph": "C", "name": "mem", "pid": 1, "tid": 0, "ts": ts,
                       "args": {"bytes": i}})
    rng.shuffle(others)
    return intervals, others


def _ingest(tmp_path: Path) -> tuple[traceatlas.Trace, list[dict[str, Any]]]:
    intervals, others = _events(7)
    assert [e["ts"] for e in intervals] != sorted(e["ts"] for e in intervals)
    src = tmp_path / "rank-0.json"
    src.write_text(json.dumps({"traceEvents": intervals + others,
                               "baseTimeNanoseconds": BASE, "distributedInfo": {"rank": 0}}))
    return traceatlas.Trace(traceatlas.ingest(src, tmp_path / "store")), intervals


def _assert_time_sorted(path: Path, time_column: str) -> int:
    """The part's rows are in (time, track_id) order; each row group has at most
    TIME_ROW_GROUP_ROWS rows. Returns the row count."""
    meta = pq.ParquetFile(path).metadata
    sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    assert max(sizes, default=0) <= TIME_ROW_GROUP_ROWS
    table = pq.read_table(path, columns=[time_column, "track_id"])
    keys = list(zip(table[time_column].to_pylist(), table["track_id"].to_pylist(),
                    strict=True))
    assert all(a <= b for a, b in pairwise(keys)), path
    return sum(sizes)


def test_ingest_writes_time_sorted_parts_with_the_same_rows(tmp_path: Path) -> None:
    trace, source = _ingest(tmp_path)
    store = trace.path
    rows = _assert_time_sorted(part_path(store, "intervals", 0), "start_ns")
    assert rows == len(source)
    assert pq.ParquetFile(part_path(store, "intervals", 0)).metadata.num_row_groups >= 3
    assert _assert_time_sorted(part_path(store, "instants", 0), "ts_ns") == 300
    assert _assert_time_sorted(part_path(store, "counters", 0), "ts_ns") == 300

    # Independent check: the multiset of (tid, start, end, name) equals the input's.
    tracks = {r["track_id"]: r["tid"] for r in pq.read_table(
        part_path(store, "tracks", 0), columns=["track_id", "tid"]).to_pylist()}
    got = pq.read_table(part_path(store, "intervals", 0),
                        columns=["track_id", "start_ns", "end_ns", "name"]).to_pylist()
    assert Counter((tracks[r["track_id"]], r["start_ns"], r["end_ns"], str(r["name"]))
                   for r in got) == Counter(
        (e["tid"], BASE + e["ts"] * 1000, BASE + (e["ts"] + e["dur"]) * 1000, e["name"])
        for e in source)


def test_filtered_store_stays_time_sorted(tmp_path: Path) -> None:
    trace, source = _ingest(tmp_path)
    kept = filter_store(trace, selection_from(trace, name="^op3$"), tmp_path / "op3")
    path = part_path(kept, "intervals", 0)
    assert _assert_time_sorted(path, "start_ns") == sum(e["name"] == "op3" for e in source)


def test_write_part_sort_is_stable_and_keeps_other_tables_in_order(tmp_path: Path) -> None:
    # (track, start, name) written in this order; expected order worked out by hand:
    # start first, then track, rows equal on both keep their written order.
    rows = [(2, 30, "a"), (1, 30, "b"), (2, 10, "c"), (2, 30, "d"), (1, 10, "e"),
            (1, 30, "f")]
    table = pa.table({
        "track_id": pa.array([r[0] for r in rows], pa.int32()),
        "start_ns": pa.array([r[1] for r in rows], pa.int64()),
        "end_ns": pa.array([r[1] + 1 for r in rows], pa.int64()),
        "dur_ns": pa.array([1] * len(rows), pa.int64()),
        "name": [r[2] for r in rows], "category": ["other"] * len(rows),
        "depth": pa.array([0] * len(rows), pa.int32()),
        "step": pa.array([-1] * len(rows), pa.int32()),
    })
    assert write_part(tmp_path, "intervals", 3, table) == len(rows)
    got = pq.read_table(part_path(tmp_path, "intervals", 3))
    assert [str(n) for n in got["name"].to_pylist()] == ["e", "c", "b", "f", "a", "d"]
    assert got["rank"].to_pylist() == [3] * len(rows)

    messages = pa.table({"src_rank": pa.array([1, 0], pa.int32()),
                         "dst_rank": pa.array([0, 1], pa.int32()),
                         "send_start_ns": pa.array([20, 10], pa.int64())})
    write_part(tmp_path, "messages", 3, messages)
    assert pq.read_table(part_path(tmp_path, "messages", 3))["send_start_ns"].to_pylist() == [
        20, 10]
