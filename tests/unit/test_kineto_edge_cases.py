"""Chrome/Kineto variants found in review: each must ingest, keep its events, and warn."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceatlas
from traceatlas.engine import get_engine

BASE = 1_700_000_000_000_000_000


def _ingest(tmp_path: Path, events: list[dict[str, Any]], **top: Any) -> traceatlas.Trace:
    src = tmp_path / "rank-0.json"
    src.write_text(json.dumps({"traceEvents": events, "baseTimeNanoseconds": BASE,
                               "distributedInfo": {"rank": 0}, **top}))
    return traceatlas.Trace(traceatlas.ingest(src, tmp_path / "store"))


def test_flow_chain_with_a_step_links_start_step_and_end(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
        {"ph": "s", "cat": "DataFlow", "name": "dep", "id": 7, "pid": 1, "tid": 1, "ts": 1},
        {"ph": "t", "cat": "DataFlow", "name": "dep", "id": 7, "pid": 1, "tid": 2, "ts": 5},
        {"ph": "f", "cat": "DataFlow", "name": "dep", "id": 7, "pid": 1, "tid": 3, "ts": 9},
    ]
    flows = _ingest(tmp_path, events).flows.sort("src_ts_ns").collect()
    # s(1 us) -> t(5 us), t(5 us) -> f(9 us); no orphan rows
    assert flows.select("src_ts_ns", "dst_ts_ns").rows() == [
        (BASE + 1_000, BASE + 5_000), (BASE + 5_000, BASE + 9_000)]


def test_repeated_flow_ids_and_orphans_are_all_kept(tmp_path: Path) -> None:
    events = [
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 1, "pid": 0, "tid": 7, "ts": 1,
         "bp": "e"},                                                     # end, no start
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 2, "pid": 9, "tid": 9, "ts": 2},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 2, "pid": 0, "tid": 7, "ts": 3},
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 2, "pid": 9, "tid": 9, "ts": 4},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 2, "pid": 0, "tid": 7, "ts": 5},
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 3, "pid": 9, "tid": 9, "ts": 6},
    ]                                                                    # start, no end
    flows = _ingest(tmp_path, events).flows.collect()
    got = sorted(
        ((r["flow_id"], r["src_ts_ns"], r["dst_ts_ns"]) for r in flows.iter_rows(named=True)),
        key=lambda t: (t[0], t[1] or 0, t[2] or 0),
    )
    assert got == [
        ("1", None, BASE + 1_000),
        ("2", BASE + 2_000, BASE + 3_000),
        ("2", BASE + 4_000, BASE + 5_000),
        ("3", BASE + 6_000, None),
    ]


def test_counter_variants(tmp_path: Path) -> None:
    events = [
        {"ph": "C", "name": "power", "pid": 5, "tid": 0, "ts": 1, "args": {"watts": 300}},
        {"ph": "C", "name": "power", "pid": 5, "tid": 0, "ts": 2, "args": {"watts": "310.5"}},
        {"ph": "C", "name": "mem", "id": 3, "pid": 5, "tid": 0, "ts": 3, "args": {"used": 1}},
        {"ph": "C", "name": "bad", "pid": 5, "tid": 0, "ts": 4, "args": [1, 2]},
        {"ph": "C", "name": "late", "pid": 5, "tid": 0, "args": {"x": 1}},
    ]
    with pytest.warns(traceatlas.DataQualityWarning, match="2 counter event"):
        trace = _ingest(tmp_path, events)
    c = trace.counters.sort("ts_ns").collect()
    assert c["name"].cast(pl.String).to_list() == ["power.watts", "power.watts", "mem[3].used"]
    assert c["value"].to_list() == [300.0, 310.5, 1.0]


def test_complete_event_without_name_is_kept(tmp_path: Path) -> None:
    events = [{"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 1, "cat": "cpu_op"}]
    with pytest.warns(traceatlas.DataQualityWarning, match="without a name"):
        trace = _ingest(tmp_path, events)
    assert trace.intervals.collect()["name"].cast(pl.String).to_list() == [""]


def test_host_pid_equal_to_a_gpu_index_stays_a_host_thread(tmp_path: Path) -> None:
    # PID 1 (a container's main process) and GPU 1 share the pid namespace in Kineto.
    events = [
        {"ph": "M", "name": "process_labels", "pid": 1, "tid": 0, "args": {"labels": "GPU 1"}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 5},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 1, "tid": 7, "ts": 6, "dur": 5,
         "args": {"device": 1, "stream": 7}},
    ]
    tracks = _ingest(tmp_path, events).tracks.sort("tid").collect()
    assert tracks.select("tid", pl.col("kind").cast(pl.String)).rows() == [
        (1, "host_thread"), (7, "gpu_stream")]


def test_boolean_rank_and_huge_pids_do_not_crash(tmp_path: Path) -> None:
    src = tmp_path / "trace.json"
    src.write_text(json.dumps({
        "distributedInfo": {"rank": True},
        "traceEvents": [{"ph": "X", "name": "a", "pid": 2**70, "tid": 1, "ts": 0, "dur": 1}],
    }))
    with pytest.warns(traceatlas.RankInferredWarning):
        trace = traceatlas.Trace(traceatlas.ingest(src, tmp_path / "s"))
    assert trace.ranks == [0]
    tracks = trace.tracks.collect()
    assert tracks["pid"].to_list() == [None]
    assert tracks["source_pid"].to_list() == [str(2**70)]


def test_unknown_engine_is_a_clear_error() -> None:
    with pytest.raises(traceatlas.TraceAtlasError, match="unknown engine 'bogus'"):
        get_engine("bogus")
